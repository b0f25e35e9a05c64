"""ingest/file_partitions.py and the `file_partitions` source key: keys, key parsing, stable buckets, and
the config errors."""

from pathlib import Path

import pytest

from platform_assets.config import ConfigError, parse_config
from platform_assets.ingest.file_partitions import (
    PartitionKeyError,
    SourcePartition,
    bucket_of,
    files_of_bucket,
    relative_to_root,
)
from platform_assets.storage import FileEntry


def _cfg(tmp_path: Path, **web):
    return parse_config({"sources": [{"name": "web", "format": "jsonl", "path": "web", **web},
                                     {"name": "books", "format": "parquet", "path": "books"}]}, tmp_path)


def _files(root: str, names: list[str]) -> list[FileEntry]:
    return [FileEntry(f"{root}/{n}", 10, 0) for n in sorted(names)]


def test_keys_are_source_names_unless_split(tmp_path):
    assert _cfg(tmp_path).partition_keys() == ["web", "books"]
    assert _cfg(tmp_path, file_partitions=1).partition_keys() == ["web", "books"]  # 1: today's single partition
    assert _cfg(tmp_path, file_partitions=4).partition_keys() == ["web.00", "web.01", "web.02", "web.03", "books"]
    wide = _cfg(tmp_path, file_partitions=150).partition_keys()
    assert wide[:2] == ["web.000", "web.001"] and wide[149] == "web.149" and wide == sorted(wide[:150]) + ["books"]


def test_keys_parse_back_and_stale_keys_say_what_the_config_has(tmp_path):
    cfg = _cfg(tmp_path, file_partitions=4)
    assert cfg.source_partition("web.02") == SourcePartition("web", 2, 4)
    assert cfg.source_partition("books") == SourcePartition("books")
    assert [cfg.source_partition(k).key for k in cfg.partition_keys()] == cfg.partition_keys()
    with pytest.raises(PartitionKeyError, match=r"partition 'web' is not a partition of source 'web', which has 4 "
                                                r"file partition\(s\) \(web.00 .. web.03\)"):
        cfg.source_partition("web")  # the key from before the split
    for stale in ("web.4", "web.04", "web.2", "books.00"):
        with pytest.raises(PartitionKeyError):
            cfg.source_partition(stale)
    with pytest.raises(PartitionKeyError, match="partition 'gone' is not a source of the config"):
        cfg.source_partition("gone")


def test_bucket_is_a_pinned_hash_of_the_relative_path():
    # pinned: a change of the hash would move every file of every split source (a full re-ingest)
    assert [bucket_of(f"shard-{i:03d}.jsonl", 4) for i in range(6)] == [1, 2, 1, 3, 1, 2]
    assert bucket_of("deep/shard-006.jsonl", 4) == 0
    # a media file and its sidecars (read together) share a bucket; the folder still counts
    stems = [f"img/{i}/cat" for i in range(40)]
    assert all(bucket_of(f"{s}.jpg", 8) == bucket_of(f"{s}.json", 8) == bucket_of(f"{s}.txt", 8) for s in stems)
    assert len({bucket_of(f"{s}.jpg", 8) for s in stems}) == 8
    assert relative_to_root("/d/web/a/b.jsonl", "/d/web/") == "a/b.jsonl"
    assert relative_to_root("/d/web.jsonl", "/d/web.jsonl") == ""


def test_buckets_cover_the_files_once_and_a_new_file_moves_only_its_bucket():
    root = "/data/web"
    names = [f"part-{i:04d}.jsonl.gz" for i in range(200)]
    files = _files(root, names)
    buckets = [files_of_bucket(files, root, SourcePartition("web", b, 8)) for b in range(8)]
    assert sorted(f.path for b in buckets for f in b) == [f.path for f in files]
    assert min(len(b) for b in buckets) >= 12  # 25 expected per bucket
    assert files_of_bucket(files, root, SourcePartition("web")) == files
    grown = _files(root, [*names, "a-new-file.jsonl.gz"])
    moved = [b for b in range(8) if files_of_bucket(grown, root, SourcePartition("web", b, 8)) != buckets[b]]
    assert moved == [bucket_of("a-new-file.jsonl.gz", 8)]


def test_file_partitions_on_a_stream_source_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"sources\[0\] \(name='hub'\).*file_partitions: a Hugging Face source"):
        parse_config({"sources": [{"name": "hub", "format": "hf", "path": "org/data", "file_partitions": 4}]},
                     tmp_path)
    with pytest.raises(ConfigError, match="a `subset:` source is one resumable stream"):
        _cfg(tmp_path, file_partitions=2, subset={"max_rows": 10})
    with pytest.raises(ConfigError, match=r"sources\[0\] \(name='web'\)\.file_partitions"):
        _cfg(tmp_path, file_partitions=0)
    # one partition of a hub source is what it always was
    hub = parse_config({"sources": [{"name": "hub", "format": "hf", "path": "org/data", "file_partitions": 1}]},
                       tmp_path)
    assert hub.partition_keys() == ["hub"]
