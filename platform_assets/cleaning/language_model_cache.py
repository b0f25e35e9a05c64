"""py3langid's model as the language step uses it, kept uncompressed on disk and memory-mapped (issue #13).

py3langid ships its model as an lzma-compressed npz (4.6 MB); loading it decompresses ~68 MB and our
step then derives a float32 copy of the weights (57 MB): 0.38-0.43 CPU-s in every process that
identifies languages, every cleaning worker included, each holding its own ~100 MB. Here the arrays
the step reads (:class:`ModelArrays`) are written once into one file in a cache directory and every
later process maps it read-only: opening costs a header parse and a checksum pass (~0.03 s, below),
and the pages are the page cache's, shared by every worker that maps the file.

Location: ``$PLATFORM_ASSETS_CACHE_DIR`` if set (set but empty: no cache, the model is decompressed
in each process as before), else ``$XDG_CACHE_HOME/platform_assets``, else
``~/.cache/platform_assets``. The file is ``py3langid-<hash>.v<FORMAT_VERSION>.arrays``, <hash> the
first 16 hex digits of the SHA-256 of the wheel's model file: another py3langid model or another
layout of ours is another file, never a stale one read (the header repeats both and is checked).

Safety:
- written to a temporary file in the same directory, fsynced, then renamed over the final name
  (``os.replace``, atomic): a reader sees no file or a whole one; concurrent builders each write their
  own temporary file and the last rename wins (the contents are byte-identical), with no lock; a
  process that mapped an earlier copy keeps its inode.
- on open, the header (format, model hash, array names, dtypes, shapes, offsets, total size) is checked
  and a CRC-32 of every array is compared, by reading the file in 4 MB chunks rather than through the
  mapping (a pass through the mapping would fault every page into this process's RSS): ~0.03 CPU-s for
  the 97 MB, against the ~0.4 s decompression; any mismatch (truncated, overwritten, another format)
  and the file is rebuilt, so a damaged copy costs a rebuild, never a wrong label.
- nowhere writable (read-only or missing directory, disk full): the arrays decompressed in memory are
  used as they are, with one warning; the step's answers are the same either way.

Every array is read-only, mapped or not, so the compiled walk (language_kernels) has one signature.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import tempfile
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from platform_assets.cache_dir import cache_root

FORMAT_VERSION = 1  # bump when ModelArrays' arrays or how they are derived change
MAGIC = b"platform-assets:py3langid-arrays\n"
_ALIGN = 64  # every array starts on a cache line
_CHUNK = 4 << 20  # the checksum pass reads this much at a time
ABANDONED_AFTER_S = 600  # a temporary file untouched this long is a killed builder's (writing takes ~0.2 s)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelArrays:
    """What the language step reads of py3langid's model (read-only arrays)."""

    nextmove: np.ndarray  # uint32: the byte DFA's distinct 256-entry rows, concatenated
    rowbase: np.ndarray  # int64: each state's row offset into nextmove (row index << 8)
    output: np.ndarray  # int32: each state's feature, or -1
    weights: np.ndarray  # float32 (features, classes): py3langid's float16 nb_ptc, cast once (exact)
    prior: np.ndarray  # float32 (classes,): nb_pc
    classes: tuple[str, ...]  # nb_classes, in column order (script aliases repeat a label)
    source: str  # "mapped" (the cache file), "built" (decompressed, cache written) or "memory"

    ARRAY_NAMES = ("nextmove", "rowbase", "output", "weights", "prior")


def model_file() -> Path:
    """The model file inside the installed py3langid wheel."""
    from py3langid.langid import MODEL_DIR, MODEL_FILE

    return Path(MODEL_DIR) / MODEL_FILE


def model_digest(model: Path) -> str:
    """SHA-256 of the model file (~4 ms for its 4.6 MB): the cache's key."""
    return hashlib.sha256(model.read_bytes()).hexdigest()


def cache_file(root: Path, digest: str) -> Path:
    """The cache file for the model of this digest, in this format."""
    return root / f"py3langid-{digest[:16]}.v{FORMAT_VERSION}.arrays"


def decompress(model: Path) -> ModelArrays:
    """The arrays from py3langid's own loader (lzma + npz: ~0.4 CPU-s), in memory."""
    from py3langid.langid import LanguageIdentifier

    m = LanguageIdentifier.from_model_file(model, norm_probs=True)
    arrays = {
        "nextmove": np.frombuffer(m.tk_nextmove, dtype=np.uint32),  # array('I'): a view, no copy of 39 MB
        "rowbase": np.frombuffer(m.tk_row, dtype=np.uint16).astype(np.int64) << 8,
        "output": np.asarray(m.tk_output, dtype=np.int32),
        # py3langid's `log1p(counts) @ nb_ptc[idx]` casts the gathered float16 rows on every call; cast
        # once (exact), the float32 product is the same
        "weights": m.nb_ptc.astype(np.float32),
        "prior": np.asarray(m.nb_pc, dtype=np.float32),
    }
    for array in arrays.values():
        array.flags.writeable = False
    return ModelArrays(**arrays, classes=tuple(m.nb_classes), source="memory")


def load(root: Path | None = None, model: Path | None = None) -> ModelArrays:
    """The model's arrays: mapped from the cache file, built into it first if it is missing or damaged,
    or decompressed in memory where there is no usable cache (see the module docstring)."""
    model = model or model_file()
    root = cache_root() if root is None else root
    if root is None:
        return decompress(model)
    digest = model_digest(model)
    path = cache_file(root, digest)
    try:
        return _open(path, digest)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as error:
        _log.warning("rebuilding the language model cache %s: %s", path, error)
    arrays = decompress(model)
    try:
        _write(path, arrays, digest)
        return replace(_open(path, digest), source="built")
    except (OSError, ValueError) as error:
        _log.warning("language model cache %s not usable (%s): the model stays in this process's memory",
                     path, error)
        return arrays


def _layout(arrays: ModelArrays, digest: str) -> tuple[bytes, list[np.ndarray], list[int]]:
    """The header bytes (magic, length, JSON), each array as stored, and each array's offset."""
    stored = [np.ascontiguousarray(getattr(arrays, name)) for name in ModelArrays.ARRAY_NAMES]
    entries, offsets = [], []
    fields = {"format": FORMAT_VERSION, "model_sha256": digest, "classes": list(arrays.classes)}
    # offsets depend on the header's length, which depends on the offsets' digits: settle by iterating
    start = 0
    for _ in range(4):
        offset, entries, offsets = start, [], []
        for name, array in zip(ModelArrays.ARRAY_NAMES, stored, strict=True):
            offsets.append(offset)
            entries.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape), "offset": offset,
                            "nbytes": array.nbytes, "crc32": zlib.crc32(array.data)})
            offset = _aligned(offset + array.nbytes)
        header = json.dumps({**fields, "arrays": entries, "size": offset}, sort_keys=True).encode()
        head = MAGIC + len(header).to_bytes(8, "little") + header
        if _aligned(len(head)) == start:
            return head, stored, offsets
        start = _aligned(len(head))
    raise AssertionError("the header's length did not settle")  # digits grow at most 4 times


def _write(path: Path, arrays: ModelArrays, digest: str) -> None:
    head, stored, offsets = _layout(arrays, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(head)
            for offset, array in zip(offsets, stored, strict=True):
                out.write(b"\0" * (offset - out.tell()))
                out.write(array.data)
            out.write(b"\0" * (_aligned(out.tell()) - out.tell()))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove_abandoned(path: Path) -> None:
    """Temporary files of builders killed mid-write (97 MB each), older than ABANDONED_AFTER_S: a
    builder that is still writing touched its file within the last second or so."""
    now = time.time()
    for tmp in path.parent.glob(path.name + ".*.tmp"):
        try:
            if now - tmp.stat().st_mtime > ABANDONED_AFTER_S:
                tmp.unlink()
        except OSError:
            pass  # gone already (another builder), or not ours to remove


def _open(path: Path, digest: str) -> ModelArrays:
    """The cache file's arrays, mapped; ValueError if it is not the model of `digest` in FORMAT_VERSION."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header = _read_header(f, size)
        if header.get("format") != FORMAT_VERSION or header.get("model_sha256") != digest:
            raise ValueError("another format or model")
        entries = header["arrays"]
        if [e["name"] for e in entries] != list(ModelArrays.ARRAY_NAMES) or header["size"] != size:
            raise ValueError("unexpected arrays or size")
        for e in entries:
            count = int(np.prod(e["shape"], dtype=np.int64))
            if (e["offset"] % _ALIGN or e["offset"] + e["nbytes"] > size
                    or count * np.dtype(e["dtype"]).itemsize != e["nbytes"]):
                raise ValueError(f"{e['name']}: inconsistent layout")
        _check_sums(f, entries)
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # stays valid after the file closes
    arrays = {
        e["name"]: np.frombuffer(mapping, dtype=np.dtype(e["dtype"]), count=int(np.prod(e["shape"], dtype=np.int64)),
                                 offset=e["offset"]).reshape(e["shape"])
        for e in entries
    }
    return ModelArrays(**arrays, classes=tuple(header["classes"]), source="mapped")


def _read_header(f, size: int) -> dict:
    lead = f.read(len(MAGIC) + 8)
    if len(lead) < len(MAGIC) + 8 or not lead.startswith(MAGIC):
        raise ValueError("not a language model cache file")
    length = int.from_bytes(lead[len(MAGIC):], "little")
    if length > size:
        raise ValueError("truncated header")
    try:
        header = json.loads(f.read(length))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"unreadable header: {error}") from None
    if not isinstance(header, dict) or not {"format", "model_sha256", "classes", "arrays", "size"} <= header.keys():
        raise ValueError("incomplete header")
    return header


def _check_sums(f, entries: list[dict]) -> None:
    """Every array's CRC-32, read through a reused buffer (pages stay out of this process)."""
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    for e in entries:
        f.seek(e["offset"])
        crc, left = 0, e["nbytes"]
        while left:
            got = f.readinto(view[: min(left, _CHUNK)])
            if not got:
                raise ValueError(f"{e['name']}: truncated")
            crc = zlib.crc32(view[:got], crc)
            left -= got
        if crc != e["crc32"]:
            raise ValueError(f"{e['name']}: checksum mismatch")


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN
