"""The JSONL fast path's pieces: columnar meta JSON, unthreaded parsing, newline counting, the
memory pool, and part hashes computed before the commit. Each must give exactly what the slower
reference gives."""

import json
import mmap
import os
import subprocess
import sys

import numpy as np
import orjson
import pyarrow as pa
import pytest

from platform_assets.ingest.file_io import MappedLineBlocks, NewlineCounter
from platform_assets.ingest.readers.fields import meta_json
from platform_assets.ingest.readers.jsonl import PARSE_BLOCK_BYTES, ArrowJsonBlockParser, read_jsonl
from platform_assets.ingest.readers.meta_columns import meta_json_column
from platform_assets.ingest.records import RecordBlock
from platform_assets.storage import MANIFEST_NAME, Storage


def _per_row(table: pa.Table) -> list[str | None]:
    return [meta_json(row, None, None) for row in table.to_pylist()]


def test_columnar_meta_equals_the_per_row_encoder_for_flat_fields():
    table = pa.table({
        "z_last": pa.array(["b", None, "ünïcødé ✓", "", "tab-free"], pa.string()),
        "count": pa.array([1, -2, None, 2**62, 0], pa.int64()),
        "small": pa.array([1, 2, 3, None, 5], pa.int8()),
        "flag": pa.array([True, False, None, True, None]),
        "all_null": pa.nulls(5),
        "large": pa.array(["x", "y", None, None, "z"], pa.large_string()),
        'we"ird key': pa.array(["k", None, None, None, None]),
    })
    columnar = meta_json_column(table)
    assert columnar is not None and columnar.type == pa.string()
    assert columnar.to_pylist() == _per_row(table)
    # a row whose every field is null has no meta at all, not "{}"
    assert meta_json_column(table.select(["all_null"])).to_pylist() == [None] * 5


@pytest.mark.parametrize("column", [
    pa.array(['say "hi"', "plain"]),         # a quote to escape
    pa.array(["back\\slash", "plain"]),       # a backslash
    pa.array(["line\nbreak", "plain"]),       # a control character
    pa.array([1.5, 2.0]),                     # floats: orjson's repr, not Arrow's
    pa.array([[1], [2]]),                     # nested values
    pa.array([{"k": 1}, {"k": 2}]),
])
def test_columnar_meta_declines_what_it_cannot_encode_exactly(column):
    table = pa.table({"a": pa.array(["x", "y"]), "b": column})
    assert meta_json_column(table) is None


def test_columnar_meta_matches_orjson_on_random_strings():
    rng = np.random.default_rng(7)
    alphabet = list("abcXYZ09 -_/.:é€😀") + ["\u2028", "\x7f"]
    values = ["".join(rng.choice(alphabet, size=rng.integers(0, 12))) for _ in range(500)]
    values = [v if rng.random() > 0.2 else None for v in values]
    table = pa.table({"s": pa.array(values), "n": pa.array(rng.integers(-10**9, 10**9, 500))})
    assert meta_json_column(table).to_pylist() == _per_row(table)
    decoded = [orjson.loads(m) for m in meta_json_column(table).to_pylist()]
    assert [d.get("s") for d in decoded] == values


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows)


def test_unthreaded_parse_gives_the_threaded_result_in_one_chunk():
    # ~5 MiB with one line longer than a threaded parse piece (2 MiB): it straddles pieces there
    rows = [{"text": f"doc {i} " + "w" * (i % 3000), "n": i, "src": "s"} for i in range(3000)]
    rows.insert(1500, {"text": "L" * (PARSE_BLOCK_BYTES + 10), "n": -1, "src": "long"})
    block = _jsonl(rows)
    threaded = ArrowJsonBlockParser("text", None, threads=True).parse(block, len(rows))
    single = ArrowJsonBlockParser("text", None, threads=False).parse(block, len(rows))
    assert threaded is not None and single is not None
    assert single.column("text").num_chunks == 1
    assert single.combine_chunks().equals(threaded.combine_chunks())


@pytest.mark.parametrize("threads", [True, False])
def test_block_records_equal_per_line_records(tmp_path, write_config, threads):
    """Flat metadata takes the columnar encoder; the records must equal the per-line reference."""
    rows = [{"text": f"doc {i} é", "n": i, "ok": i % 2 == 0, "tag": None if i % 3 else f"t{i}"}
            for i in range(2000)]
    (tmp_path / "d.jsonl").write_bytes(_jsonl(rows))
    cfg = write_config([{"name": "d", "format": "jsonl", "path": str(tmp_path / "d.jsonl")}])
    from dataclasses import replace

    from platform_assets.ingest.readers import source_files

    ctx, _, files = source_files(cfg, "d")
    ctx = replace(ctx, parse_threads=threads)

    def records(fast: bool):
        out = []
        with open(files[0].path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            for item in read_jsonl(ctx, files[0], mapped, "text", None, fast=fast):
                if isinstance(item, RecordBlock):
                    assert isinstance(item.metas, pa.Array)  # the columnar encoder was used
                    out += list(zip(item.texts.to_pylist(), item.uris, item.metas.to_pylist(), strict=True))
                else:
                    out.append((item.text, item.uri, item.meta))
            del item
        return out

    fast, slow = records(True), records(False)
    assert fast == slow and len(fast) == 2000


@pytest.mark.parametrize("size", [0, 1, NewlineCounter.PIECE - 1, NewlineCounter.PIECE, 3 * NewlineCounter.PIECE + 17])
def test_newline_counter_counts_exactly(size):
    rng = np.random.default_rng(size)
    data = rng.choice(np.frombuffer(b"ab\n\r", np.uint8), size=size).tobytes()
    assert NewlineCounter().count(data) == data.count(b"\n")
    assert NewlineCounter().count(memoryview(data)[1:]) == data[1:].count(b"\n")


def test_mapped_blocks_count_lines_across_pieces(tmp_path):
    data = b"".join(b"x" * (i % 300) + b"\n" for i in range(40_000)) + b"tail"
    path = tmp_path / "f"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        blocks = [(first, n) for first, _, n in MappedLineBlocks(mapped, 10**6, block_bytes=3 * 2**20)]
    assert len(blocks) > 1 and sum(n for _, n in blocks) == 40_001
    assert [first for first, _ in blocks] == [1 + sum(n for _, n in blocks[:i]) for i in range(len(blocks))]


def test_parts_hashed_early_give_the_same_manifest(tmp_path):
    st = Storage(str(tmp_path))
    with st.staged_dir("a") as d:
        d.write_bytes("early.bin", b"alpha")
        d.hash_file("early.bin")
        d.write_bytes("late.bin", b"beta")
        d.write_bytes("changed.bin", b"v1")
        d.hash_file("changed.bin")
        d.write_bytes("changed.bin", b"version 2")  # rewritten after hashing: re-hashed at commit
    manifest = json.loads((tmp_path / "a" / MANIFEST_NAME).read_text())["files"]
    for name in ("early.bin", "late.bin", "changed.bin"):
        assert manifest[name] == {"bytes": (tmp_path / "a" / name).stat().st_size, "sha256": st.sha256(f"a/{name}")}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the jemalloc default applies on Linux")
def test_importing_the_platform_picks_jemalloc_unless_the_environment_chose():
    code = "import platform_assets, pyarrow as pa; print(pa.default_memory_pool().backend_name)"
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow build has no jemalloc")
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    chosen = subprocess.run([sys.executable, "-c", code], env={**env, "ARROW_DEFAULT_MEMORY_POOL": "system"},
                            capture_output=True, text=True, check=True)
    assert (default.stdout.strip(), chosen.stdout.strip()) == ("jemalloc", "system")
