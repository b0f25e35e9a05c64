"""A decompressed line stream that ends cleanly where its compressed bytes stop decoding.

A .gz/.zst/.bz2/.lz4 file cut short (an interrupted download) or damaged in its tail still holds
every record before the damage. Reading it through Arrow's `CompressedInputStream` with the
readers' 16 MiB reads, the read that meets the damage raises and takes the whole 16 MiB of good
lines with it. This stream:

- reads Arrow's stream in 1 MiB pieces, so good bytes are never handed to a read that can still
  fail (the failing piece is decoded again below);
- when a piece fails, decodes again up to the damage, which recovers everything the codec can
  still decode: gzip with zlib fed byte by byte from the failing piece on (every byte before the
  damage), the other codecs with Arrow's stream read one byte at a time (truncation: every byte
  before the cut; a damaged block: what precedes Arrow's 64 KiB input chunk around it);
- hands the readers whole lines only, holding back the bytes after the last newline until the
  next newline or a clean end: a line cut by the damage is never mistaken for a short record, it
  is part of the broken tail (`broken`), which the caller quarantines with its line number.

Good files cost the same: the hold-back is one copy of each block, the one iter_line_blocks no longer
makes (its pending partial line is always empty now), and lines are counted only after damage.
300 MB of JSONL (136k records) read from .gz: 2.83-3.12 CPU-s before, 2.86-3.13 after; from .zst
1.85-1.89 before, 1.81-1.91 after (3 runs each, on a shared 2-core box).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from platform_assets.ingest.file_io import compression_of, open_stream
from platform_assets.ingest.records import ReadContext
from platform_assets.schema import QuarantineReason as Q

# Reads of Arrow's stream: small enough that the salvage replays little (<= 256 + 4,096 reads), large
# enough to cost nothing (64 KiB pieces cost 3-4% more CPU on 300 MB of gzip/zstd JSONL; 1 MiB, none)
PIECE_BYTES = 2**20
SAMPLE_BYTES = 200


@dataclass(frozen=True)
class BrokenTail:
    """Where a compressed stream stopped decoding; everything before `line` was delivered whole."""

    line: int  # 1-based number of the first line that is not whole
    offset: int  # its first byte in the decompressed stream
    error: str  # the codec's message
    sample: bytes  # the start of the partial line (empty when the break fell between lines)

    def detail(self, codec: str) -> str:
        return (f"{codec} stream stops decoding at line {self.line} (decompressed byte {self.offset}): "
                f"{self.error}; the {self.line - 1} lines before it were read")


class SalvagingStream:
    """`read(n)` over a file's decompressing stream; see the module docstring."""

    def __init__(self, fs: pafs.FileSystem, path: str):
        self._fs, self._path = fs, path
        self._codec = compression_of(path)
        self._inner: pa.NativeFile | None = open_stream(fs, path)
        self._pieces: list[bytes] = []  # decompressed, not yet returned
        self._buffered = 0
        self._consumed = 0  # bytes taken from the inner stream (returned or buffered)
        self._returned = 0
        self._ended = False
        self._error: str | None = None
        # newlines handed out, counted only once damage is found (the replay counts the prefix): a
        # count of every good block cost ~5 ms per 16 MiB, 3-5% of reading a .zst file
        self._lines_returned = 0
        self.broken: BrokenTail | None = None

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        want = n if n is not None and n > 0 else 1 << 62
        while self._buffered < want and not self._ended:
            self._fill(min(PIECE_BYTES, want - self._buffered))
        data = b"".join(self._pieces) if len(self._pieces) != 1 else self._pieces[0]
        cut = min(want, len(data))
        if not self._ended or self._error is not None:
            # hold back a partial last line: damage further on may still cut it. A line longer than
            # the read (16 MiB JSONL blocks, 4 MiB CSV reads) is handed on in pieces, as a plain
            # stream would; after damage, a partial line is the broken tail, never a record.
            line_end = data.rfind(b"\n", 0, cut) + 1
            if line_end or self._error is not None:
                cut = line_end
        # one copy of the block, as before (iter_line_blocks no longer joins a pending partial line)
        out = data if cut == len(data) else data[:cut]
        rest = data[cut:] if cut < len(data) else b""
        self._pieces = [rest] if rest else []
        self._buffered = len(rest)
        self._returned += len(out)
        if self._error is not None:
            self._lines_returned += out.count(b"\n")
            if not out and self.broken is None:
                self.broken = BrokenTail(self._lines_returned + 1, self._returned, self._error, rest[:SAMPLE_BYTES])
        return out

    def _fill(self, size: int) -> None:
        assert self._inner is not None
        try:
            piece = self._inner.read(size)
        except (OSError, pa.ArrowException) as err:
            self._salvage(err)
            return
        if not piece:
            self._close_inner()
            self._ended = True
            return
        self._take(piece)

    def _take(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._buffered += len(piece)
        self._consumed += len(piece)

    def _salvage(self, err: Exception) -> None:
        """Decode again up to the damage, keeping what lies past the bytes already taken."""
        self._close_inner()
        self._ended = True
        self._error = f"{type(err).__name__}: {err}"
        if self._codec == "gzip":
            with self._fs.open_input_stream(self._path, compression=None) as raw:
                salvaged, prefix_newlines = inflate_up_to_damage(raw, self._consumed)
        else:
            salvaged, prefix_newlines = self._replay_bytewise()
        # lines handed out = newlines in everything taken so far, less those still buffered
        self._lines_returned = prefix_newlines - sum(p.count(b"\n") for p in self._pieces)
        if salvaged:
            self._take(salvaged)

    def _replay_bytewise(self) -> tuple[bytes, int]:
        """(bytes past those taken, newlines in those taken) from Arrow's stream again, read in ever
        smaller steps: a read that fails returns nothing of what it decoded, so reads of 4 KiB (at
        most 256 in the failing 1 MiB piece), then of one byte (at most 4,096) lose at most one
        byte. Truncation then loses nothing; a damaged zstd/bz2/lz4 block loses what Arrow decodes
        with it (its 64 KiB input chunk)."""
        salvaged = bytearray()
        prefix_newlines = 0
        for step in (4096, 1):
            replay = open_stream(self._fs, self._path)
            try:
                skip = self._consumed + len(salvaged)
                while skip and (chunk := replay.read(min(PIECE_BYTES, skip))):
                    skip -= len(chunk)
                    if step == 4096:
                        prefix_newlines += chunk.count(b"\n")
                while True:
                    try:
                        chunk = replay.read(step)
                    except (OSError, pa.ArrowException):
                        break
                    if not chunk:
                        return bytes(salvaged), prefix_newlines
                    salvaged += chunk
            finally:
                replay.close()
        return bytes(salvaged), prefix_newlines

    def _close_inner(self) -> None:
        if self._inner is not None:
            self._inner.close()
            self._inner = None

    def close(self) -> None:
        self._close_inner()

    def __enter__(self) -> SalvagingStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def inflate_up_to_damage(raw: pa.NativeFile, skip: int) -> tuple[bytes, int]:
    """(every byte zlib inflates from a gzip stream before it fails, past the first `skip`; the
    newlines in those first `skip`). Members are read one after another (`cat a.gz b.gz`). Arrow
    inflates 64 KiB of input per call and a failing call returns nothing, so damage in a file's
    first 64 KiB would lose every line before it; here the input piece that fails is fed again in
    slices, from a copy of the decoder taken before it."""
    out = bytearray()
    produced = 0
    prefix_newlines = 0

    def keep(chunk: bytes) -> None:
        nonlocal produced, prefix_newlines
        start = max(0, skip - produced)
        produced += len(chunk)
        if start:
            prefix_newlines += chunk[:start].count(b"\n")
        if start < len(chunk):
            out.extend(chunk[start:] if start else chunk)

    decoder = zlib.decompressobj(wbits=31)
    while piece := raw.read(PIECE_BYTES):
        while piece:
            before = decoder.copy()
            try:
                keep(decoder.decompress(piece))
            except zlib.error:
                _inflate_until_error(before, piece, keep)
                return bytes(out), prefix_newlines
            if not decoder.eof:
                break
            piece = decoder.unused_data  # the next gzip member
            decoder = zlib.decompressobj(wbits=31)
    return bytes(out), prefix_newlines


def _inflate_until_error(decoder, piece: bytes, keep: Callable[[bytes], None], step: int = 4096) -> None:
    """Feed `piece` in `step`-byte slices, the failing slice again byte by byte (<= 256 + 4,096
    calls for a 1 MiB piece): what each call inflates before the damage is kept."""
    for lo in range(0, len(piece), step):
        before = decoder.copy()
        try:
            keep(decoder.decompress(piece[lo : lo + step]))
        except zlib.error:
            if step == 1:
                return
            _inflate_until_error(before, piece[lo : lo + step], keep, 1)
            return


def open_record_stream(fs: pafs.FileSystem, path: str) -> pa.NativeFile | SalvagingStream:
    """The stream a line/row reader reads: salvaging when the file is compressed (a plain file has
    no compressed tail to lose; its read errors stay errors)."""
    if compression_of(path) is None:
        return open_stream(fs, path)
    return SalvagingStream(fs, path)


def quarantine_broken_tail(ctx: ReadContext, path: str, stream: pa.NativeFile | SalvagingStream) -> None:
    """After a reader finished: the damaged tail of a compressed file, if any, is one quarantine row
    at the line where decoding stopped (`unreadable_file`, like any file that fails mid-read)."""
    broken = getattr(stream, "broken", None)
    if broken is not None:
        ctx.quarantine.add(f"{ctx.uri(path)}#line={broken.line}", Q.UNREADABLE_FILE,
                           broken.detail(compression_of(path) or "compressed"), broken.sample or None)
