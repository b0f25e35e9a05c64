"""A local cache of a remote shard set's files, bounded in bytes: download on demand and ahead, verify, evict.

The shard set lives under s3://bucket/prefix (pyarrow's S3FileSystem, reached as the platform's storage
is: endpoint_url, region, attempts) or a local directory (the same code path, for tests and NFS-like
mounts). A shard is the cache's unit: its three or four files come and go together.

- Client: S3 objects are read with one GET each through boto3 when it is installed (the index already
  holds every file's size and sha256; pyarrow's S3 streams HEAD each object first, twice the requests:
  remote_loader_litdata 0.65x -> 1.27x of litdata), through pyarrow's S3FileSystem otherwise.
- Download: each file is streamed to `<name>.tmp-<pid>` while its sha256 is computed, compared with the
  index, then renamed into place (atomic: a file under its final name is complete and verified, so a
  process killed mid-download leaves only a tmp file, removed by the next scan). A transient error or a
  checksum mismatch is retried with exponential backoff (`max_attempts`); the last mismatch raises
  RemoteChecksumError naming the file and both digests.
- Budget: present files + reserved in-flight downloads never exceed `max_bytes` (tmp files are reserved
  before their first byte is written), so the directory stays under it at every instant.
- Eviction: only in the reader's thread (`acquire`, `plan`), least recently needed first, never a shard
  of the current micro-batch (`pinned`) and, when prefetching, never one the next steps need; the reader
  drops its memory map of an evicted shard (`on_evict`) before the files are unlinked.
- Prefetch: `plan(wanted)` queues the missing shards of the next steps, in the order they are needed, as
  far as the budget allows; up to `download_threads` background threads (4) download them, several shards
  at once, and a shard's files together: S3 latency, not bandwidth, bounds a stream of small objects (3
  or 4 a shard). A shard still wanted by `acquire` is waited for, not fetched twice.

Workers: the main process owns the cache, its directory and the whole budget; DataLoader workers read
through a CacheView, which waits for the files of the shards they read. The main process knows which
micro-batches workers may be building (the order is deterministic, and a DataLoader has at most
prefetch_factor messages per worker in flight beyond what was consumed), so it pins those shards and
downloads each shard once however many workers read it (remote_reader.WorkerFetcher). Per-worker caches
need no coordination but download a shard once per worker that reads it (every worker reads nearly
every shard: they take turns by message); benchmarks/RESULTS.md (remote_loader_litdata) has both.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from pathlib import Path

import pyarrow.fs as pafs

from training.data.shard_index import FileEntry

log = logging.getLogger("training.data")

_CHUNK = 8 << 20  # 8 MiB reads: large enough that per-request overhead of S3 streams is small
_BACKOFF_S = 0.2  # first retry wait; doubled each attempt (0.2, 0.4, 0.8, 1.6 s for 5 attempts)
_S3_CONNECTIONS = 32  # >= download threads x files a shard (4 x 3-4): no request waits for a pooled connection
TMP_MARK = ".tmp-"

Key = Hashable


class RemoteDataError(OSError):
    """A remote shard file could not be fetched (after retries); the message names it."""


class RemoteChecksumError(RemoteDataError):
    """A downloaded file's sha256 differs from the index on every attempt."""


class CacheBudgetError(ValueError):
    """The cache's byte budget cannot hold the shards that must be local at one time."""


def is_remote(location: str) -> bool:
    return location.startswith("s3://")


class ObjectStore:
    """Read access to the files under one s3:// prefix or local directory. The filesystem is created in
    each process on first use (not pickled): AWS SDK state does not survive fork."""

    def __init__(self, location: str, endpoint_url: str | None = None, region: str = "us-east-1",
                 request_attempts: int = 5) -> None:
        self.location = location.rstrip("/")
        self.endpoint_url = endpoint_url
        self.region = region
        self.request_attempts = request_attempts
        self._fs: pafs.FileSystem | None = None
        self._pid = -1
        self._client = None
        self._client_pid = -1

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fs": None, "_pid": -1, "_client": None, "_client_pid": -1}

    def _filesystem(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None or self._pid != os.getpid():
            if is_remote(self.location):
                self._fs = s3_filesystem(self.endpoint_url, self.region, self.request_attempts)
            else:
                self._fs = pafs.LocalFileSystem()
            self._pid = os.getpid()
        base = self.location[len("s3://"):] if is_remote(self.location) else os.path.abspath(self.location)
        return self._fs, base

    def url(self, rel: str) -> str:
        return f"{self.location}/{rel}"

    def read_bytes(self, rel: str) -> bytes:
        fs, base = self._filesystem()
        with fs.open_input_stream(f"{base}/{rel}") as f:
            return f.read()

    def download(self, rel: str, dest: Path) -> str:
        """Stream `rel` into `dest` (created or truncated); returns the sha256 of what was written, hashed
        as the bytes arrive (no second pass over the file)."""
        digest = hashlib.sha256()
        with open(dest, "wb") as out:
            for chunk in self._chunks(rel):
                digest.update(chunk)
                out.write(chunk)
        return digest.hexdigest()

    def _chunks(self, rel: str) -> Iterator[bytes]:
        if is_remote(self.location) and _has_boto3():
            client = self._s3_client()
            bucket, _, prefix = self.location[len("s3://"):].partition("/")
            key = f"{prefix}/{rel}" if prefix else rel
            try:
                body = client.get_object(Bucket=bucket, Key=key)["Body"]
                while chunk := body.read(_CHUNK):
                    yield chunk
            except Exception as err:  # botocore's errors are not OSErrors: fetch_verified retries OSErrors
                if isinstance(err, OSError):
                    raise
                raise OSError(f"{type(err).__name__}: {err}") from err
            return
        fs, base = self._filesystem()
        with fs.open_input_stream(f"{base}/{rel}") as src:
            while chunk := src.read(_CHUNK):
                yield chunk

    def _s3_client(self):  # noqa: ANN202 - botocore's client class is generated at run time
        """One GET per object: pyarrow's S3 streams HEAD each object first, which doubles the requests for a
        cache whose index already holds every file's size and checksum (a shard is 3 small objects)."""
        with _CLIENT_LOCK:  # the first downloads start together: unlocked, each of ~12 threads built a
            # client of its own (~20 MB each): remote_loader_litdata peaked at 560 MB, with one client 340
            return self._client_locked()

    def _client_locked(self):  # noqa: ANN202
        if self._client is None or self._client_pid != os.getpid():
            import boto3
            from botocore.config import Config

            endpoint_url = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
            config = Config(retries={"mode": "standard", "max_attempts": self.request_attempts},
                            max_pool_connections=_S3_CONNECTIONS,
                            s3={"addressing_style": "path"} if endpoint_url else None)
            if endpoint_url and "://" not in endpoint_url:
                endpoint_url = f"https://{endpoint_url}"
            self._client = boto3.session.Session().client("s3", region_name=self.region, endpoint_url=endpoint_url,
                                                          config=config)
            self._client_pid = os.getpid()
        return self._client


_CLIENT_LOCK = threading.Lock()


@functools.cache
def _has_boto3() -> bool:
    """boto3 is optional (the test extra installs it): without it S3 objects are read through pyarrow."""
    import importlib.util

    return importlib.util.find_spec("boto3") is not None


def s3_filesystem(endpoint_url: str | None, region: str, attempts: int) -> pafs.S3FileSystem:
    """As platform_assets.storage.s3_filesystem builds it (training imports nothing of the platform):
    path-style addressing on a custom endpoint (MinIO, moto), AWS's standard retry mode per request."""
    from urllib.parse import urlparse

    kwargs: dict[str, object] = {"region": region}
    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint_url:
        parsed = urlparse(endpoint_url if "://" in endpoint_url else f"https://{endpoint_url}")
        kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme, force_virtual_addressing=False)
    return pafs.S3FileSystem(retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts), **kwargs)


def fetch_verified(store: ObjectStore, entry: FileEntry, root: Path, max_attempts: int) -> None:
    """Download `entry` to root/entry.path, verified against its sha256 and size, atomically. A file the
    index carries inline (small segment tables) is written from there: no request."""
    final = root / entry.path
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}")
    if entry.inline is not None:
        sha = hashlib.sha256(entry.inline).hexdigest()
        if sha != entry.sha256:  # the index contradicts itself: no download can fix that
            raise RemoteChecksumError(f"{store.url(entry.path)}: the index's inline copy has sha256 {sha}, its "
                                      f"entry says {entry.sha256}: the index is corrupt")
        tmp.write_bytes(entry.inline)
        os.replace(tmp, final)
        return
    problem = ""
    for attempt in range(max_attempts):
        if attempt:
            time.sleep(_BACKOFF_S * 2 ** (attempt - 1))
        try:
            sha = store.download(entry.path, tmp)
        except OSError as err:  # pyarrow's IO errors are OSErrors: connection refused, reset, 5xx after its retries
            problem = f"{type(err).__name__}: {err}"
            log.warning("download of %s failed (attempt %d of %d): %s", store.url(entry.path), attempt + 1,
                        max_attempts, problem)
            continue
        size = tmp.stat().st_size
        if sha == entry.sha256 and size == entry.bytes:
            os.replace(tmp, final)
            return
        problem = f"sha256 {sha} ({size} bytes), the index says {entry.sha256} ({entry.bytes} bytes)"
        log.warning("download of %s does not match the index (attempt %d of %d): %s", store.url(entry.path),
                    attempt + 1, max_attempts, problem)
    tmp.unlink(missing_ok=True)
    if problem.startswith("sha256"):
        raise RemoteChecksumError(f"{store.url(entry.path)}: {problem} on all {max_attempts} attempts: the "
                                  f"object is corrupt or from another build")
    raise RemoteDataError(f"{store.url(entry.path)}: download failed {max_attempts} times, last: {problem}")


class ShardCache:
    """The shards of one process, in `root`, within `max_bytes` (see the module doc)."""

    def __init__(self, store: ObjectStore, root: Path, shards: dict[Key, tuple[FileEntry, ...]], max_bytes: int,
                 max_attempts: int, on_evict: Callable[[Key], None] = lambda key: None,
                 download_threads: int = 4) -> None:
        self.store = store
        self.root = root
        self.shards = shards
        self.max_bytes = max_bytes
        self.max_attempts = max_attempts
        self.on_evict = on_evict
        self._bytes = {k: sum(f.bytes for f in files) for k, files in shards.items()}
        largest = max(self._bytes.values(), default=0)
        if largest > max_bytes:
            raise CacheBudgetError(f"cache budget {max_bytes} bytes < the largest shard ({largest} bytes)")
        self._cond = threading.Condition()
        self._present: OrderedDict[Key, int] = OrderedDict()  # least recently needed first
        self._inflight: dict[Key, int] = {}
        self._failed: set[Key] = set()
        self._pinned: set[Key] = set()
        self._queue: deque[Key] = deque()
        self.download_threads = download_threads
        self._threads = 0  # prefetch threads running
        self.downloaded_bytes = 0
        self.fetched_on_demand = 0
        """Shards the reader had to wait for because no prefetch had brought them (misses)."""
        self._scan()

    # -- state -------------------------------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        return sum(self._present.values()) + sum(self._inflight.values())

    def present(self) -> list[Key]:
        with self._cond:
            return list(self._present)

    def _scan(self) -> None:
        """Adopt complete shards a previous process left (files only get their names once verified), drop
        tmp files and partial shards, then trim to the budget."""
        self.root.mkdir(parents=True, exist_ok=True)
        for path in self.root.rglob(f"*{TMP_MARK}*"):
            path.unlink(missing_ok=True)
        for key, files in self.shards.items():
            sizes = [(self.root / f.path).stat().st_size if (self.root / f.path).exists() else -1 for f in files]
            if all(s == f.bytes for s, f in zip(sizes, files, strict=True)):
                self._present[key] = self._bytes[key]
            elif any(s >= 0 for s in sizes):
                self._remove_files(key)
        while self.used_bytes > self.max_bytes:
            self._evict(next(iter(self._present)))

    def _remove_files(self, key: Key) -> None:
        for f in self.shards[key]:
            (self.root / f.path).unlink(missing_ok=True)

    def _evict(self, key: Key) -> None:
        del self._present[key]
        self.on_evict(key)  # the reader drops its map first: unlinking a mapped file keeps its blocks in use
        self._remove_files(key)

    def _make_room(self, need: int, keep: set[Key]) -> bool:
        """Evict least recently needed present shards outside `keep` until `need` more bytes fit."""
        for key in [k for k in self._present if k not in keep]:
            if self.used_bytes + need <= self.max_bytes:
                break
            self._evict(key)
        return self.used_bytes + need <= self.max_bytes

    # -- the reader's side ---------------------------------------------------------------------------
    def acquire(self, keys: Sequence[Key], add: bool = False) -> None:
        """Make `keys` (the shards of the micro-batch being read) local and pin them until the next call
        (add=True: pin them besides those already pinned)."""
        keys = list(dict.fromkeys(keys))
        with self._cond:
            self._pinned = self._pinned | set(keys) if add else set(keys)
        for key in keys:
            with self._cond:
                while key in self._inflight:
                    self._cond.wait()
                if key in self._present:
                    self._present.move_to_end(key)
                    continue
                need = self._bytes[key]
                while not self._make_room(need, self._pinned):
                    if not self._inflight:
                        raise CacheBudgetError(
                            f"cache budget {self.max_bytes} bytes cannot hold the shards needed now (the micro-"
                            f"batch read, or with DataLoader workers the (2 x workers + 1) messages of "
                            f"micro-batches they may be reading): {sum(self._bytes[k] for k in self._pinned)} "
                            f"bytes in {len(self._pinned)} shards; raise max_bytes")
                    self._cond.wait()  # prefetches in flight hold the room: they finish, then can be evicted
                self._inflight[key] = need
                self.fetched_on_demand += 1
            self._download(key)

    def plan(self, wanted: Iterable[Key]) -> None:
        """Queue the missing shards of the next steps, first needed first, as far as the budget allows;
        evicts shards needed neither now nor by them to make room."""
        wanted = list(dict.fromkeys(wanted))
        with self._cond:
            keep = self._pinned | set(wanted)
            queue: deque[Key] = deque()
            room_taken = 0
            for key in wanted:
                if key in self._present or key in self._inflight:
                    continue
                need = self._bytes[key]
                if not self._make_room(room_taken + need, keep):
                    break  # later shards are needed later: the ones before them have the room
                room_taken += need
                queue.append(key)
            self._failed.clear()
            self._queue = queue
            for _ in range(min(len(queue), self.download_threads) - self._threads):
                self._threads += 1
                threading.Thread(target=self._prefetch_loop, name="shard-prefetch", daemon=True).start()
            self._cond.notify_all()

    def cancel(self) -> None:
        """Drop the queued prefetches (the iteration that planned them ended); downloads in flight finish."""
        with self._cond:
            self._queue.clear()

    # -- downloads ---------------------------------------------------------------------------------
    def _download(self, key: Key) -> None:
        try:
            self._fetch_files(self.shards[key])
        except BaseException:
            with self._cond:
                self._inflight.pop(key, None)
                self._remove_files(key)
                self._cond.notify_all()
            raise
        with self._cond:
            self._present[key] = self._inflight.pop(key)
            self.downloaded_bytes += self._bytes[key]
            self._cond.notify_all()

    def _fetch_files(self, files: Sequence[FileEntry]) -> None:
        """A shard's files at once, one short-lived thread each beyond the first: each is a request round
        trip of its own (3 sequential GETs took 3x one); those the index carries inline need none. The
        threads end with the call, so none is left holding a lock when the process forks DataLoader workers."""
        errors: list[BaseException] = []

        def fetch(entry: FileEntry) -> None:
            try:
                fetch_verified(self.store, entry, self.root, self.max_attempts)
            except BaseException as err:  # noqa: BLE001 - raised in the calling thread below
                errors.append(err)

        for entry in files:
            if entry.inline is not None:  # written from the index: no request, no thread
                fetch(entry)
        remote = [f for f in files if f.inline is None]
        others = [threading.Thread(target=fetch, args=(f,), name="shard-file", daemon=True) for f in remote[1:]]
        for t in others:
            t.start()
        if remote:
            fetch(remote[0])
        for t in others:
            t.join()
        if errors:
            raise errors[0]

    def _prefetch_loop(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    # idle: end, the next plan() starts a new thread. No thread outlives its downloads, so
                    # none holds a lock (ours or the AWS SDK's) when the process forks DataLoader workers
                    self._threads -= 1
                    return
                key = self._queue.popleft()
                need = self._bytes[key]
                if key in self._present or key in self._inflight or key in self._failed or \
                        self.used_bytes + need > self.max_bytes:
                    continue
                self._inflight[key] = need
            try:
                self._download(key)
            except Exception as err:  # acquire() fetches it again in the reader's thread and raises there
                log.warning("prefetch of shard %s failed: %s", key, err)
                with self._cond:
                    self._failed.add(key)


ERROR_MARK = "FETCH_ERROR"
"""Written into the cache directory by the main process's fetcher when it fails: workers raise its text."""
_WAIT_S = 0.001  # poll period of a worker waiting for a shard (a shard takes ~5-15 ms to download here)


class CacheView:
    """A DataLoader worker's side of the main process's ShardCache: it waits for the shards it reads to
    be there (the main process downloads them, pins them while workers may read them, and evicts), and
    never writes. `timeout_s` bounds a wait: a fetcher that stopped without writing ERROR_MARK."""

    def __init__(self, root: Path, shards: dict[Key, tuple[FileEntry, ...]], timeout_s: float = 600.0) -> None:
        self.root = root
        self.shards = shards
        self.timeout_s = timeout_s

    def _complete(self, key: Key) -> bool:
        for f in self.shards[key]:
            try:
                if (self.root / f.path).stat().st_size != f.bytes:
                    return False
            except FileNotFoundError:
                return False
        return True

    def acquire(self, keys: Sequence[Key], add: bool = False) -> None:
        deadline = time.monotonic() + self.timeout_s
        for key in dict.fromkeys(keys):
            while not self._complete(key):
                mark = self.root / ERROR_MARK
                if mark.exists():
                    raise RemoteDataError(f"the main process could not fetch shards: {mark.read_text()}")
                if time.monotonic() > deadline:
                    raise RemoteDataError(f"shard {key} did not arrive in {self.root} within {self.timeout_s:.0f} s")
                time.sleep(_WAIT_S)

    def plan(self, wanted: Iterable[Key]) -> None:
        """The main process plans; a worker has nothing to do."""
