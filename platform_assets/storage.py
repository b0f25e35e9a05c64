"""One filesystem layer for every read and write, local or S3, with atomic directory commits.

Everything goes through pyarrow's FileSystem, so a root of ``/data/platform`` or
``s3://bucket/prefix`` is a config change and nothing else. Outputs are written into a staging
directory and committed as a whole:

- local: the staging directory and the old output swap places in one ``renameat2(RENAME_EXCHANGE)``
  (Linux >= 3.17), so at every instant the final path holds the previous output or the new one;
  where the kernel or filesystem lacks it, two renames (``old -> .trash``, ``staging -> final``),
  and a crash between them is repaired on the next open (the trash is renamed back);
- S3: objects are written under a staging prefix and then copied into place; every single object
  appears atomically (S3 PUT semantics). ``_manifest.json`` is written last and lists each file with
  its size and sha256, so a reader can tell a complete output from an interrupted copy.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import hashlib
import json
import os
import secrets
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlparse

import pyarrow.fs as pafs

from platform_assets.contracts import MANIFEST_FILE as MANIFEST_NAME
from platform_assets.output_lock import BasedOn, check_based_on, output_lock

# Reads while hashing a finished file. Each read is a fresh bytes object (Arrow's buffer, then Python's
# copy), so 8 MiB reads cost ~16 MB at each part close, while other groups' pipelines run: the
# pipeline_scaling 16x text ingest (4 groups, 2 at a time) peaked at 232-235 MB, 216-224 with 1 MiB
# reads; hashing a 24 MiB part took 0.016 CPU-s in 1 MiB reads, 0.022 in 8 MiB ones.
_HASH_CHUNK = 2**20
LOCKS_DIR = ".locks"  # under the storage root: one lock file per output being written (output_lock.py)

FAULT_KILL_AT_ENV = "PLATFORM_FAULT_KILL_AT"
"""Fault injection for the crash tests (tests/faults/): ``PLATFORM_FAULT_KILL_AT=<point>:<output>``
SIGKILLs this process when it reaches the named point while writing an output directory equal to or
under ``<output>`` (``commit-swapped:raw_documents`` matches ``raw_documents/web``). The points, in
the order a run passes them: ``writing`` (a file of the output is written and the next one is being
opened: the run is midway through its output), ``staged`` (every file written, no manifest yet), ``manifest-written``
(staging complete, nothing renamed), ``commit-swapped`` (new output in place, the old one not yet
deleted).
Unset, a point costs one environment lookup per commit and per file a writer opens."""


def fault_point(point: str, rel: str) -> None:
    """Die here, as a power cut or the OOM killer would, if PLATFORM_FAULT_KILL_AT names this point."""
    target = os.environ.get(FAULT_KILL_AT_ENV)
    if not target:
        return
    name, _, output = target.partition(":")
    if name == point and (rel == output or rel.startswith(f"{output}/")):
        os.kill(os.getpid(), signal.SIGKILL)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap two paths in one atomic step (renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux/glibc >= 2.28
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):  # a filesystem without it
        return False
    raise OSError(err, os.strerror(err), a, None, b)


# Attempts per S3 request (AWS's "standard" retry mode: exponential backoff with full jitter). Measured
# against a refused endpoint: 3 attempts (AWS's default) give up after ~2.5 s, 5 after 4.4-7.5 s
# (jittered), 10 after ~90 s (the waits cap at 20 s); 5 ride out an endpoint restart of a few seconds,
# and longer outages fail the step, which the assets' retry policy runs again (defs/stage_asset.py).
S3_MAX_ATTEMPTS = 5

# A write that fails for want of space: the filesystem (or quota) is full, or a file outgrew RLIMIT_FSIZE.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class StorageFullError(OSError):
    """Writing an output ran out of space. Names the output; the previous output there is unchanged (it is
    only replaced by a complete, committed new one), and running again once space is freed writes it."""

    def __init__(self, output_uri: str, cause: OSError):
        super().__init__(cause.errno, f"no space left writing {output_uri} ({cause.strerror or cause}); the "
                                      f"previous output there is unchanged: free space and run again")
        self.output_uri = output_uri


@dataclass(frozen=True)
class S3Settings:
    """How to reach S3: endpoint (MinIO, moto), region, and explicit credentials (e.g. from
    dagster-aws's S3Resource). Unset fields fall back to the standard AWS environment/profile chain."""

    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    max_attempts: int = S3_MAX_ATTEMPTS


def s3_filesystem(settings: S3Settings | None = None) -> pafs.S3FileSystem:
    settings = settings or S3Settings()
    endpoint_url = settings.endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, object] = {"region": settings.region}
    if settings.access_key:
        kwargs.update(access_key=settings.access_key, secret_key=settings.secret_key,
                      session_token=settings.session_token)
    if endpoint_url:
        parsed = urlparse(endpoint_url if "://" in endpoint_url else f"https://{endpoint_url}")
        kwargs["endpoint_override"] = parsed.netloc
        kwargs["scheme"] = parsed.scheme
        # MinIO and moto serve every bucket on the endpoint's own host: path-style addressing.
        kwargs["force_virtual_addressing"] = False
    return pafs.S3FileSystem(retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=settings.max_attempts),
                             **kwargs)


def resolve_filesystem(location: str, s3: S3Settings | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for an absolute local path or an s3:// URI."""
    if location.startswith("s3://"):
        return s3_filesystem(s3), location[len("s3://") :].rstrip("/")
    if "://" in location and not location.startswith("file://"):
        raise ValueError(f"unsupported location {location!r}: use a local path or s3://bucket/prefix")
    path = location[len("file://") :] if location.startswith("file://") else location
    return pafs.LocalFileSystem(), os.path.abspath(path)


@dataclass(frozen=True)
class FileEntry:
    path: str  # path inside the filesystem
    size: int
    mtime_s: int | None  # whole seconds since the epoch, UTC


def _join(*parts: str) -> str:
    return str(PurePosixPath(*[p for p in parts if p]))


class Storage:
    """A rooted view of a filesystem: every asset reads and writes relative paths under `root`."""

    def __init__(self, root: str, s3: S3Settings | None = None):
        self.root_uri = root.rstrip("/")
        self.fs, self.base = resolve_filesystem(root, s3)
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)

    # -- naming ---------------------------------------------------------------------------------
    def path(self, rel: str) -> str:
        return _join(self.base, rel)

    def uri(self, rel: str) -> str:
        """A human- and DuckDB-usable location for metadata: a local path or s3:// URI."""
        return self.path(rel) if self.is_local else f"s3://{self.path(rel)}"

    # -- reading --------------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel), compression=None) as f:
            return f.read()

    def read_json(self, rel: str) -> object:
        return json.loads(self.read_bytes(rel))

    def list_files(self, rel: str, pattern: str | None = None) -> list[FileEntry]:
        return list_files(self.fs, self.path(rel), pattern)

    def sha256(self, rel: str) -> str:
        return file_sha256(self.fs, self.path(rel))

    # -- writing --------------------------------------------------------------------------------
    def write_bytes_atomic(self, rel: str, data: bytes) -> None:
        """Write one file so that readers see the old or the new content, never a prefix."""
        final = self.path(rel)
        parent = str(PurePosixPath(final).parent)
        self.fs.create_dir(parent, recursive=True)
        if not self.is_local:  # an S3 PUT is atomic by itself
            with self.fs.open_output_stream(final) as f:
                f.write(data)
            return
        tmp = _join(parent, f".{PurePosixPath(final).name}.tmp-{secrets.token_hex(6)}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def output_version(self, rel: str) -> str | None:
        """sha256 of the output's `_manifest.json` (None: no committed output): changes with every commit."""
        return self.sha256(f"{rel}/{MANIFEST_NAME}") if self.exists(f"{rel}/{MANIFEST_NAME}") else None

    @contextmanager
    def staged_dir(self, rel: str, based_on: BasedOn | None = None) -> Iterator[StagedDir]:
        """Stage a whole output directory; it replaces `rel` only if the block exits cleanly.

        On an exception the staging directory is removed and the previous output is untouched. One writer
        at a time per output (a second one waits: output_lock.py); with `based_on`, the block is not entered
        (ConcurrentCommitError) unless the output is still the version the caller read.
        """
        with output_lock(self._lock_path(rel), self.uri(rel)) if self.is_local else nullcontext():
            self._check_based_on(rel, based_on)
            with self._staged_dir_locked(rel, based_on) as staged:
                yield staged

    def _check_based_on(self, rel: str, based_on: BasedOn | None) -> None:
        """Only outputs built on their previous version pay for reading its manifest (on S3, 2 requests)."""
        if based_on is not None:
            check_based_on(based_on, self.output_version(rel), self.uri(rel))

    def _lock_path(self, rel: str) -> str:
        """`<root>/.locks/<rel>.lock`: hidden from every listing, apart from the outputs and their leftovers."""
        lock = _join(self.base, LOCKS_DIR, f"{rel}.lock")
        self.fs.create_dir(str(PurePosixPath(lock).parent), recursive=True)
        return lock

    @contextmanager
    def _staged_dir_locked(self, rel: str, based_on: BasedOn | None) -> Iterator[StagedDir]:
        final = self.path(rel)
        parent, name = str(PurePosixPath(final).parent), PurePosixPath(final).name
        self.fs.create_dir(parent, recursive=True)
        self._recover(parent, name)
        staging = _join(parent, f".{name}.staging-{secrets.token_hex(6)}")
        self.fs.create_dir(staging, recursive=True)
        staged = StagedDir(self.fs, staging, rel if self.is_local else None)
        try:
            yield staged
            fault_point("staged", rel)
            staged.manifest = staged.write_manifest()
            fault_point("manifest-written", rel)
            if not self.is_local:  # no lock on S3: check again, as late as possible
                self._check_based_on(rel, based_on)
            self._commit(staging, final, parent, name, rel)
        except OSError as err:
            if err.errno in DISK_FULL_ERRNOS and not isinstance(err, StorageFullError):
                raise StorageFullError(self.uri(rel), err) from err
            raise
        finally:
            # after an error, a failed cleanup (the S3 endpoint still down) must not replace that error;
            # the staging directory is hidden from every listing, and the next run stages a new one
            self._discard_staging(staging, quiet=sys.exc_info()[1] is not None)

    def _discard_staging(self, staging: str, quiet: bool) -> None:
        try:
            if self.fs.get_file_info(staging).type != pafs.FileType.NotFound:
                self.fs.delete_dir(staging)
        except OSError:
            if not quiet:
                raise

    def _recover(self, parent: str, name: str) -> None:
        """Repair a crash of an earlier commit and clear its leftovers (local only)."""
        if not self.is_local:
            return
        final = _join(parent, name)
        leftovers = sorted(p for p in os.listdir(parent) if p.startswith(f".{name}."))
        trash = [p for p in leftovers if ".trash-" in p]
        if not os.path.exists(final) and trash:
            # crashed after moving the old output away, before moving the new one in
            os.rename(_join(parent, trash[-1]), final)
            trash = trash[:-1]
        for p in leftovers:
            full = _join(parent, p)
            if os.path.exists(full) and (p in trash or ".staging-" in p):
                self.fs.delete_dir(full)

    def _commit(self, staging: str, final: str, parent: str, name: str, rel: str) -> None:
        if self.is_local:
            if os.path.exists(final) and _exchange(staging, final):
                # the old output now sits under the staging name: a crash before this delete leaves
                # it to `_recover`, which clears staging leftovers
                fault_point("commit-swapped", rel)
                self.fs.delete_dir(staging)
                return
            trash = None
            if os.path.exists(final):
                trash = _join(parent, f".{name}.trash-{secrets.token_hex(6)}")
                os.rename(final, trash)
            os.rename(staging, final)
            if trash:
                self.fs.delete_dir(trash)
            return
        new_files = {e.path[len(staging) + 1 :] for e in list_files(self.fs, staging)}
        for old in list_files(self.fs, final) if self.fs.get_file_info(final).type else []:
            if old.path[len(final) + 1 :] not in new_files:
                self.fs.delete_file(old.path)
        # the manifest goes last: a reader that finds it finds every file it lists
        for relname in sorted(new_files, key=lambda n: n == MANIFEST_NAME):
            self.fs.copy_file(_join(staging, relname), _join(final, relname))


class StagedDir:
    """A directory being written; files are named relative to it."""

    def __init__(self, fs: pafs.FileSystem, path: str, fault_rel: str | None = None):
        self.fs = fs
        self.root = path
        self._fault_rel = fault_rel  # the output's name for the `writing` fault point (local outputs only)
        self.manifest: dict[str, dict[str, object]] = {}  # set when the directory is committed
        # name -> (bytes, sha256) of files hashed as soon as they were complete (see hash_file)
        self._hashed: dict[str, tuple[int, str]] = {}

    def path(self, name: str) -> str:
        if self._fault_rel is not None and os.environ.get(FAULT_KILL_AT_ENV, "").startswith("writing:"):
            self._die_if_midway()
        full = _join(self.root, name)
        parent = str(PurePosixPath(full).parent)
        if parent != self.root:
            self.fs.create_dir(parent, recursive=True)
        return full

    def _die_if_midway(self) -> None:
        """The `writing` fault point: fires once a file of the output holds bytes and another is asked for."""
        for folder, _, files in os.walk(self.root):
            for file in files:
                try:
                    written = os.path.getsize(os.path.join(folder, file)) > 0
                except OSError:  # renamed or removed by a writer meanwhile
                    continue
                if written:
                    fault_point("writing", self._fault_rel or "")
                    return

    def open_output(self, name: str):
        return self.fs.open_output_stream(self.path(name))

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.open_output(name) as f:
            f.write(data)

    def hash_file(self, name: str) -> None:
        """Hash a finished file now, in the caller's thread, rather than at commit.

        The manifest needs every file's sha256; hashed at commit, that is a serial pass over the
        whole output after all the parallel work (0.1 s of a 2 s ingest of the shared corpus). A
        writer that calls this on each part it closes spreads the hashing over its own thread. The
        file must not change afterwards; the commit re-hashes any whose size differs.
        """
        path = self.path(name)
        self._hashed[name] = (self.fs.get_file_info(path).size, file_sha256(self.fs, path))

    def write_manifest(self) -> dict[str, dict[str, object]]:
        files = {}
        for entry in list_files(self.fs, self.root):
            relname = entry.path[len(self.root) + 1 :]
            if relname == MANIFEST_NAME:
                continue
            size, digest = self._hashed.get(relname, (None, None))
            if size != entry.size:
                digest = file_sha256(self.fs, entry.path)
            files[relname] = {"bytes": entry.size, "sha256": digest}
        manifest = {"files": dict(sorted(files.items()))}
        self.write_bytes(MANIFEST_NAME, json.dumps(manifest, indent=1, sort_keys=True).encode())
        return manifest["files"]


def list_files(
    fs: pafs.FileSystem, path: str, pattern: str | Sequence[str] | None = None
) -> list[FileEntry]:
    """Files under `path` (recursively), or `path` itself if it is a file; sorted by path.

    A pattern (or any of several) is matched against the path relative to `path` and, failing
    that, the base name, so ``*.jsonl`` finds nested files too. Hidden files and folders (staging
    directories, editor swap files, .git) are never listed.
    """
    patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern or ())
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return []
    if info.type == pafs.FileType.File:
        infos = [info]
    else:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    out = []
    for fi in infos:
        if fi.type != pafs.FileType.File:
            continue
        rel = fi.path[len(path) + 1 :] if fi.path != path else PurePosixPath(fi.path).name
        if any(part.startswith(".") for part in PurePosixPath(rel).parts):
            continue
        name = PurePosixPath(rel).name
        if patterns and not any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns):
            continue
        mtime = int(fi.mtime.timestamp()) if fi.mtime is not None else None
        out.append(FileEntry(fi.path, fi.size, mtime))
    return sorted(out, key=lambda e: e.path)


def file_sha256(fs: pafs.FileSystem, path: str) -> str:
    h = hashlib.sha256()
    with fs.open_input_stream(path, compression=None) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def manifest_version(files: dict[str, dict[str, object]]) -> str:
    """A content version for a committed output: the sha256 of its files' names and hashes."""
    h = hashlib.sha256()
    for name, info in sorted(files.items()):
        h.update(f"{name}\x00{info['sha256']}\n".encode())
    return h.hexdigest()[:24]
