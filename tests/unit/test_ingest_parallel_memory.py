"""What ingest holds while it reads groups of files in parallel (issue #13: peak RSS flat across input
sizes). A source under `ingest.group_input_bytes` is one group, read alone; a larger one is several,
`ingest.parallel_files` at once. Alone, a group encodes each batch behind the next block's parse (two
batches in memory); beside other groups, each group encodes its own batch, one group at a time, so
the groups in flight hold one encode and one parse between them, as a group alone does. And a parsed
block's mapped pages are handed back before its documents are written."""

import json
import mmap
import threading
import time
from dataclasses import replace

import pytest

import platform_assets.parquet_parts as parquet_parts
from platform_assets import heap
from platform_assets.ingest.readers import source_files
from platform_assets.ingest.readers.jsonl import read_jsonl
from platform_assets.ingest.records import RecordBlock
from platform_assets.ingest.run import ingest_source
from platform_assets.storage import MANIFEST_NAME, Storage

ENCODE_SECONDS = 0.03  # each encode made this much longer, so that overlapping ones would be seen


class EncodeLog:
    """Wraps parquet_parts.parquet_writer: how many batch encodes ran at once, and on which threads."""

    def __init__(self, monkeypatch):
        self.lock = threading.Lock()
        self.running = self.most_at_once = 0
        self.threads: list[str] = []
        real = parquet_parts.parquet_writer

        def parquet_writer(sink, schema, compression):
            writer = real(sink, schema, compression)
            write_batch = writer.write_batch

            def logged(batch, *args, **kwargs):
                with self.lock:
                    self.running += 1
                    self.most_at_once = max(self.most_at_once, self.running)
                    self.threads.append(threading.current_thread().name)
                try:
                    time.sleep(ENCODE_SECONDS)
                    return write_batch(batch, *args, **kwargs)
                finally:
                    with self.lock:
                        self.running -= 1

            writer.write_batch = logged
            return writer

        monkeypatch.setattr(parquet_parts, "parquet_writer", parquet_writer)


def _files(root, files: int, lines: int) -> None:
    root.mkdir()
    for f in range(files):
        rows = (json.dumps({"text": f"file {f} line {i} " + "word " * (i % 40)}) for i in range(lines))
        (root / f"f{f:02d}.jsonl").write_text("\n".join(rows) + "\n")


def _ingest(tmp_path, write_config, name: str, parallel_files: int, group_input_bytes: int):
    cfg = write_config([{"name": "docs", "format": "jsonl", "path": str(tmp_path / "in")}],
                       storage={"root": str(tmp_path / name)},
                       io={"batch_rows": 64},
                       ingest={"parallel_files": parallel_files, "group_input_bytes": group_input_bytes})
    storage = Storage(cfg.storage_root)
    result = ingest_source(cfg, "docs", storage, "raw_documents/docs")
    return result, storage.read_json(f"raw_documents/docs/{MANIFEST_NAME}")


def test_parallel_groups_encode_one_batch_at_a_time(tmp_path, write_config, monkeypatch):
    _files(tmp_path / "in", files=6, lines=300)  # 6 groups of one file, 5 batches of 64 rows each
    log = EncodeLog(monkeypatch)
    result, manifest = _ingest(tmp_path, write_config, "parallel", parallel_files=2, group_input_bytes=1)
    assert result.input_groups == 6 and result.rows == 1800
    # two encodes at once (each group's own writer thread) was the second group's batches on top of
    # the first's: that step was raw_documents' peak at 16x, where a source first spans two groups
    assert log.most_at_once == 1, log.most_at_once
    # ... and no batch waits behind an encode in a writer thread while its group parses the next
    assert len(log.threads) == 6 * 5 and not any(t.startswith("parquet-writer") for t in log.threads), log.threads
    # the same bytes as one group at a time
    alone, alone_manifest = _ingest(tmp_path, write_config, "serial", parallel_files=1, group_input_bytes=1)
    assert manifest == alone_manifest and alone.rows == result.rows


def test_a_group_alone_encodes_behind_the_next_parse(tmp_path, write_config, monkeypatch):
    _files(tmp_path / "in", files=3, lines=300)
    log = EncodeLog(monkeypatch)
    result, _ = _ingest(tmp_path, write_config, "one", parallel_files=2, group_input_bytes=2**30)
    assert result.input_groups == 1 and len(log.threads) == 3 * 5
    assert all(t.startswith("parquet-writer") for t in log.threads), log.threads


def _rss_file_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED"), reason="needs madvise (Linux)")
def test_a_parsed_blocks_mapped_pages_go_before_its_documents_are_written(tmp_path, write_config):
    # 24 MiB of lines: the first block is 16 MiB (file_io.BLOCK_BYTES), all of whose pages the parse reads
    line = json.dumps({"text": "w" * 4000}).encode() + b"\n"
    (tmp_path / "big.jsonl").write_bytes(line * (24 * 2**20 // len(line)))
    (tmp_path / "small.jsonl").write_bytes(line * 10)
    cfg = write_config([{"name": "d", "format": "jsonl", "path": str(tmp_path / "small.jsonl")}])
    ctx, _, small = source_files(cfg, "d")
    ctx = replace(ctx, parse_threads=False)

    def first_block(path: str, entry) -> int:
        """RssFile's growth while the first block is handed to its consumer."""
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            records = read_jsonl(ctx, entry, mapped, "text", None)
            before = _rss_file_bytes()
            block = next(records)
            grown = _rss_file_bytes() - before
            assert isinstance(block, RecordBlock)
            del block
            records.close()
        return grown

    first_block(small[0].path, small[0])  # the parser's code pages, faulted in once
    big = replace(small[0], path=str(tmp_path / "big.jsonl"), size=(tmp_path / "big.jsonl").stat().st_size)
    grown = first_block(big.path, big)
    # before: the block's 16 MiB stayed mapped while its documents were written (two groups: 2 x 16 MiB)
    assert grown < 2 * 2**20, grown


@pytest.mark.parametrize("threshold", [128 * 2**10, None])
def test_the_sources_batches_are_written_under_the_fixed_mmap_threshold(tmp_path, write_config, monkeypatch,
                                                                         threshold):
    """glibc's mmap threshold is fixed at `ingest.malloc_mmap_threshold` while the groups are read and
    written, and left at glibc's ceiling after (platform_assets/heap.py); `null` leaves malloc alone."""
    log = EncodeLog(monkeypatch)
    calls: list[tuple] = []  # each mallopt call with the batches encoded before it
    monkeypatch.setattr(heap, "_mallopt", lambda param, value: calls.append((param, value, len(log.threads))) or True)
    _files(tmp_path / "in", files=3, lines=100)
    cfg = write_config([{"name": "docs", "format": "jsonl", "path": str(tmp_path / "in")}],
                       storage={"root": str(tmp_path / "out")}, io={"batch_rows": 64},
                       ingest={"group_input_bytes": 1, "malloc_mmap_threshold": threshold})
    result = ingest_source(cfg, "docs", Storage(cfg.storage_root), "raw_documents/docs")
    assert result.rows == 300 and len(log.threads) == 6  # 3 groups of one file, 2 batches each
    if threshold is None:
        assert calls == []
    else:
        assert calls == [(heap.M_MMAP_THRESHOLD, threshold, 0), (heap.M_MMAP_THRESHOLD, heap.MMAP_THRESHOLD_CEILING, 6)]
