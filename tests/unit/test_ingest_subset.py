"""Streaming subsets (ingest/subset.py): predicate + projection + budget give the rows of a full read
filtered by the same predicate (computed here independently with DuckDB over the whole input), the
shuffle is seeded, an interrupted run resumes to the same bytes, and bad settings name their key."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import pytest
import yaml

from platform_assets.config import ConfigError, load_config
from platform_assets.ingest.run import ingest_source
from platform_assets.ingest.subset import SubsetError
from platform_assets.storage import Storage

REPO = Path(__file__).resolve().parents[2]
WHERE = "language = 'Python' AND license IN ('mit', 'apache-2.0')"
LANGS = ["Python", "Go", "Rust", "C"]
LICENSES = ["mit", "gpl-3.0", "apache-2.0", None]


def _rows(n: int, seed: int, file: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"text": f"file {file} doc {i} " + "y" * rng.randrange(1, 80), "language": rng.choice(LANGS),
             "license": rng.choice(LICENSES), "stars": rng.randrange(1000), "repo": f"r{i % 17}"}
            for i in range(n)]


def _jsonl_source(root: Path, files: int = 3, rows: int = 2500) -> Path:
    src = root / "src"
    src.mkdir()
    for k in range(files):
        with open(src / f"part-{k}.jsonl", "w") as f:
            for row in _rows(rows, k, k):
                f.write(json.dumps(row) + "\n")
    return src


def _parquet_source(root: Path, files: int = 3, rows: int = 2500) -> Path:
    src = root / "pq"
    src.mkdir()
    for k in range(files):
        pq.write_table(pa.Table.from_pylist(_rows(rows, k, k)), src / f"part-{k}.parquet", row_group_size=700)
    return src


def _config(tmp_path: Path, source: dict, out: str = "out") -> Path:
    path = tmp_path / f"pipeline-{out}.yaml"
    path.write_text(yaml.safe_dump({"storage": {"root": str(tmp_path / out)}, "sources": [source]}, sort_keys=False))
    return path


def _run(config: Path, rel: str = "raw_documents/web"):
    cfg = load_config(config)
    return ingest_source(cfg, "web", Storage(cfg.storage_root), rel)


def _docs(root: Path, rel: str = "raw_documents/web") -> pa.Table:
    parts = sorted((root / rel).glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts])


def _expected(glob: str, uri_kind: str, limit: int | None, max_bytes: int | None = None) -> list[str]:
    """The texts of a full read filtered with the same predicate, in file order, cut at the budget
    (the document that crosses a byte budget is kept)."""
    files = sorted(Path(glob).parent.glob(Path(glob).name))
    read = (lambda f: pa_json.read_json(f)) if uri_kind == "line" else pq.read_table
    whole = pa.concat_tables([read(f) for f in files], promote_options="permissive")  # noqa: F841 - DuckDB scans it
    texts = [r[0] for r in duckdb.execute(f"SELECT text FROM whole WHERE {WHERE}").fetchall()]
    if limit is not None:
        texts = texts[:limit]
    if max_bytes is not None:
        out, total = [], 0
        for t in texts:
            out.append(t)
            total += len(t.encode())
            if total >= max_bytes:
                break
        texts = out
    return texts


@pytest.fixture(autouse=True)
def _one_duckdb_thread():
    duckdb.execute("SET threads=1")  # the expectation's row order is the files' order


def test_jsonl_predicate_projection_and_rows_budget_match_a_filtered_full_read(tmp_path):
    src = _jsonl_source(tmp_path)
    result = _run(_config(tmp_path, {"name": "web", "format": "jsonl", "path": str(src), "subset": {
        "where": WHERE, "columns": ["text", "language", "license"], "max_rows": 700, "checkpoint_rows": 200}}))
    docs = _docs(tmp_path / "out")
    assert docs["text"].to_pylist() == _expected(f"{src}/*.jsonl", "line", 700)
    assert result.rows == 700 and result.metadata["subset_stop"] == "max_rows"
    # projection: `stars` and `repo` were never kept
    assert all(set(json.loads(m)) <= {"language", "license"} for m in docs["meta"].to_pylist())
    # ~1 row in 8 passes: 700 of them are in the first ~5,600 rows; reading stopped within a batch
    # (1,024 rows) of the one that reached the budget, not at the end of the 7,500
    assert 5000 < result.metadata["rows_seen"] <= 5600 + 1024 < 7500
    assert result.metadata["rows_rejected_by_predicate"] >= result.metadata["rows_seen"] - 1024 - 700
    assert result.quarantined == 0  # rejects are counted, not stored
    assert pq.read_table(tmp_path / "out/raw_documents/web/_quarantine.parquet").num_rows == 0
    assert not list((tmp_path / "out/raw_documents").glob(".web.subset-*"))  # resumable dir gone after commit


def test_parquet_directory_with_bytes_budget(tmp_path):
    src = _parquet_source(tmp_path)
    result = _run(_config(tmp_path, {"name": "web", "format": "parquet", "path": str(src), "subset": {
        "where": WHERE, "max_bytes": 30_000}}))
    expected = _expected(f"{src}/*.parquet", "row", None, max_bytes=30_000)
    assert _docs(tmp_path / "out")["text"].to_pylist() == expected
    assert result.metadata["subset_stop"] == "max_bytes" and result.metadata["subset_bytes_kept"] >= 30_000


def test_whole_source_without_budget_equals_the_filtered_source(tmp_path):
    src = _parquet_source(tmp_path, files=2, rows=1000)
    result = _run(_config(tmp_path, {"name": "web", "format": "parquet", "path": str(src), "subset": {"where": WHERE}}))
    assert _docs(tmp_path / "out")["text"].to_pylist() == _expected(f"{src}/*.parquet", "row", None)
    assert result.metadata["subset_stop"] == "end_of_source" and result.metadata["rows_seen"] == 2000


def test_hf_local_directory_streaming_with_data_files(tmp_path):
    src = _parquet_source(tmp_path)
    (src / "ignored.parquet").write_bytes(b"")  # not in data_files: never opened
    source = {"name": "web", "format": "hf", "path": str(src), "data_files": [f"{src}/part-*.parquet"],
              "subset": {"where": WHERE, "columns": ["text", "language", "license"], "max_rows": 900,
                         "checkpoint_rows": 300}}
    result = _run(_config(tmp_path, source))
    assert _docs(tmp_path / "out")["text"].to_pylist() == _expected(f"{src}/part-*.parquet", "row", 900)
    assert result.rows == 900


def test_token_budget_counts_with_the_tokenizer(tmp_path, gpt2):
    from gpt2_tokenizer import GPT2_JSON
    from tokenizers import Tokenizer

    src = _jsonl_source(tmp_path, files=1, rows=2000)
    result = _run(_config(tmp_path, {"name": "web", "format": "jsonl", "path": str(src), "subset": {
        "where": WHERE, "max_tokens": 5000, "tokenizer": str(GPT2_JSON)}}))
    tok = Tokenizer.from_file(str(GPT2_JSON))
    expected, total = [], 0
    for text in _expected(f"{src}/*.jsonl", "line", None):
        expected.append(text)
        total += len(tok.encode(text, add_special_tokens=False).ids)
        if total >= 5000:
            break
    assert _docs(tmp_path / "out")["text"].to_pylist() == expected
    assert result.metadata["subset_tokens_kept"] == total and result.metadata["subset_stop"] == "max_tokens"


def test_shuffle_buffer_is_seeded(tmp_path):
    src = _jsonl_source(tmp_path, files=2, rows=1500)

    def texts(seed: int, out: str) -> list[str]:
        _run(_config(tmp_path, {"name": "web", "format": "jsonl", "path": str(src), "subset": {
            "where": WHERE, "shuffle_buffer": 64, "seed": seed, "max_rows": 300}}, out=out))
        return _docs(tmp_path / out)["text"].to_pylist()

    a, again, other = texts(1, "a"), texts(1, "b"), texts(2, "c")
    unshuffled = _expected(f"{src}/*.jsonl", "line", None)
    assert a == again and a != other and a != unshuffled[:300]
    assert set(a) <= set(unshuffled) and len(set(a)) == 300


def test_bad_rows_that_pass_the_predicate_are_quarantined_as_usual(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    lines = [json.dumps({"text": "kept", "language": "Python", "license": "mit"}),
             '{"text": "broken', json.dumps({"text": None, "language": "Python", "license": "mit"}),
             json.dumps({"text": "dropped quietly", "language": "Go", "license": "mit"})]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    result = _run(_config(tmp_path, {"name": "web", "format": "jsonl", "path": str(src), "subset": {"where": WHERE}}))
    assert result.rows == 1 and result.quarantine_counts == {"malformed_json": 1, "missing_text_field": 1}
    assert result.metadata["rows_rejected_by_predicate"] == 1 and result.metadata["rows_seen"] == 4


def test_unknown_column_in_where_names_the_key(tmp_path):
    src = _jsonl_source(tmp_path, files=1, rows=10)
    with pytest.raises(SubsetError, match=r"sources\[0\] \(name='web'\)\.subset\.where.*langauge"):
        _run(_config(tmp_path, {"name": "web", "format": "jsonl", "path": str(src),
                                "subset": {"where": "langauge = 'Python'"}}))


def test_where_syntax_and_projection_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"subset\.where"):
        load_config(_config(tmp_path, {"name": "web", "format": "jsonl", "path": "x", "subset": {"where": "a = = 1"}}))
    with pytest.raises(ConfigError, match=r"subset\.columns.*text_field 'content'"):
        load_config(_config(tmp_path, {"name": "web", "format": "parquet", "path": "x", "text_field": "content",
                                       "subset": {"columns": ["language"]}}))
    with pytest.raises(ConfigError, match=r"tokenizer"):
        load_config(_config(tmp_path, {"name": "web", "format": "hf", "path": "x", "subset": {"max_tokens": 5}}))


KILLED_RUN = """
import sys
from platform_assets.config import load_config
from platform_assets.ingest.run import ingest_source
from platform_assets.storage import Storage
cfg = load_config(sys.argv[1])
ingest_source(cfg, "web", Storage(cfg.storage_root), "raw_documents/web")
"""


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "hf"])
def test_resume_after_sigkill_gives_the_same_bytes(tmp_path, fmt):
    src = _jsonl_source(tmp_path) if fmt == "jsonl" else _parquet_source(tmp_path)
    subset = {"where": WHERE, "columns": ["text", "language", "license"], "shuffle_buffer": 50, "seed": 7,
              "max_rows": 800, "checkpoint_rows": 100}
    source = {"name": "web", "format": fmt, "path": str(src), "subset": subset}
    whole = _run(_config(tmp_path, source, out="whole"))

    config = _config(tmp_path, source, out="killed")
    env = {**os.environ, "PLATFORM_FAULT_KILL_AT": "subset-checkpoint-3:raw_documents/web"}
    proc = subprocess.run([sys.executable, "-c", KILLED_RUN, str(config)], env=env, cwd=REPO, capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    pending = list((tmp_path / "killed/raw_documents").glob(".web.subset-*/checkpoint.json"))
    assert len(pending) == 1 and not (tmp_path / "killed/raw_documents/web").exists()

    resumed = _run(config)
    # 3 checkpoints of >= 100 documents each (taken after whole 1,024-row batches), before the end
    assert 300 <= resumed.metadata["subset_resumed_at_rows"] < 800
    assert resumed.rows == whole.rows == 800
    a, b = tmp_path / "whole/raw_documents/web", tmp_path / "killed/raw_documents/web"
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert not list((tmp_path / "killed/raw_documents").glob(".web.subset-*"))


def test_a_changed_config_does_not_resume_a_stale_checkpoint(tmp_path):
    src = _jsonl_source(tmp_path, files=1, rows=5000)
    source = {"name": "web", "format": "jsonl", "path": str(src),
              "subset": {"where": WHERE, "max_rows": 400, "checkpoint_rows": 100}}
    config = _config(tmp_path, source)
    env = {**os.environ, "PLATFORM_FAULT_KILL_AT": "subset-checkpoint-1:raw_documents/web"}
    subprocess.run([sys.executable, "-c", KILLED_RUN, str(config)], env=env, cwd=REPO, check=False)
    assert list((tmp_path / "out/raw_documents").glob(".web.subset-*"))
    source["subset"]["max_rows"] = 300
    result = _run(_config(tmp_path, source))
    assert result.metadata["subset_resumed_at_rows"] == 0 and result.rows == 300
    assert not list((tmp_path / "out/raw_documents").glob(".web.subset-*"))
