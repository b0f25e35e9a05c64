"""Remote cache downloads over S3 (moto's server): one GET per object, both clients write the same verified
bytes, a shard's files fetched together fail together."""

from __future__ import annotations

import hashlib
import threading

import pytest

from training.data import remote_cache
from training.data.remote_cache import ObjectStore, RemoteChecksumError, RemoteDataError, ShardCache, fetch_verified
from training.data.shard_index import FileEntry

boto3 = pytest.importorskip("boto3")

pytestmark = pytest.mark.s3

FILES = {"s/tokens.bin": bytes(range(256)) * 4096, "s/seqptr.bin": b"\x01\x02" * 300, "s/mask.bin": b"\x00" * 7}


@pytest.fixture
def bucket_url(s3) -> str:
    client, bucket, _ = s3
    for rel, data in FILES.items():
        client.put_object(Bucket=bucket, Key=f"set/{rel}", Body=data)
    return f"s3://{bucket}/set"


def entries() -> tuple[FileEntry, ...]:
    return tuple(FileEntry(rel, len(data), hashlib.sha256(data).hexdigest()) for rel, data in FILES.items())


def count_requests(store: ObjectStore) -> list[str]:
    """The HTTP methods the store's boto3 client sends, in order."""
    sent: list[str] = []
    store._s3_client().meta.events.register("before-send.s3", lambda request, **_: sent.append(request.method))
    return sent


@pytest.mark.parametrize("client", ["boto3", "pyarrow"])
def test_both_clients_write_the_verified_bytes(bucket_url, s3_endpoint, tmp_path, monkeypatch, client):
    if client == "pyarrow":
        monkeypatch.setattr(remote_cache, "_has_boto3", lambda: False)
    store = ObjectStore(bucket_url, s3_endpoint)
    for entry in entries():
        fetch_verified(store, entry, tmp_path, max_attempts=1)
        assert (tmp_path / entry.path).read_bytes() == FILES[entry.path]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["mask.bin", "seqptr.bin", "tokens.bin"]


def test_a_shard_costs_one_get_per_file(bucket_url, s3_endpoint, tmp_path):
    store = ObjectStore(bucket_url, s3_endpoint)
    sent = count_requests(store)
    cache = ShardCache(store, tmp_path, {"k": entries()}, max_bytes=sum(len(d) for d in FILES.values()),
                       max_attempts=1)
    cache.acquire(["k"])
    assert sorted(sent) == ["GET"] * len(FILES)  # no HEAD: the index already has each size and sha256
    assert cache.present() == ["k"] and cache.downloaded_bytes == sum(len(d) for d in FILES.values())


def test_a_missing_object_is_retried_then_named(bucket_url, s3_endpoint, tmp_path):
    store = ObjectStore(bucket_url, s3_endpoint)
    gone = FileEntry("s/absent.bin", 3, "0" * 64)
    with pytest.raises(RemoteDataError, match=r"s/absent\.bin: download failed 2 times") as err:
        fetch_verified(store, gone, tmp_path, max_attempts=2)
    assert not isinstance(err.value, RemoteChecksumError)
    assert not list(tmp_path.rglob("*.bin*"))  # no tmp file left


def test_one_bad_file_fails_its_whole_shard(bucket_url, s3_endpoint, tmp_path):
    store = ObjectStore(bucket_url, s3_endpoint)
    files = list(entries())
    files[1] = FileEntry(files[1].path, files[1].bytes, "f" * 64)  # the index disagrees with the object
    cache = ShardCache(store, tmp_path, {"k": tuple(files)}, max_bytes=sum(len(d) for d in FILES.values()),
                       max_attempts=1)
    with pytest.raises(RemoteChecksumError, match="seqptr.bin"):
        cache.acquire(["k"])
    assert cache.present() == [] and cache.used_bytes == 0
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # the files fetched beside it are removed too


def test_threads_starting_together_share_one_client(bucket_url, s3_endpoint):
    store = ObjectStore(bucket_url, s3_endpoint)
    start = threading.Barrier(8)
    clients: list[object] = []

    def make() -> None:
        start.wait()
        clients.append(store._s3_client())

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(clients) == 8 and len({id(c) for c in clients}) == 1  # ~20 MB a client: built once
