"""The CLI's answers when something is not there yet, and `--until` for every stage name."""

import pytest
import yaml

from platform_assets.cli import UNTIL_CHOICES, _until_selection, main


@pytest.fixture
def empty_config(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({
        "storage": {"root": str(tmp_path / "out")},
        "sources": [{"name": "web", "format": "jsonl", "path": str(tmp_path / "src")}]}))
    return str(tmp_path / "p.yaml")


def test_query_on_an_output_not_yet_made_names_the_asset_to_materialize(empty_config, capsys):
    assert main(["query", "SELECT reason, count(*) FROM quarantine GROUP BY reason", "--config", empty_config]) == 2
    err = capsys.readouterr().err
    assert "`quarantine` has no data yet" in err and "run --until raw_documents" in err
    assert "Traceback" not in err and "Catalog Error" not in err
    assert main(["query", "SELECT * FROM no_such_view", "--config", empty_config]) == 2
    assert "views: raw_documents, quarantine" in capsys.readouterr().err


def test_explain_before_any_output_says_to_run_first(empty_config, capsys):
    assert main(["explain", "0" * 32, "--config", empty_config]) == 2
    assert "no outputs under" in capsys.readouterr().err


def test_until_takes_every_stage_and_runs_only_what_it_needs():
    from platform_assets.definitions import defs

    assert {"raw_documents", "deduplicated_documents", "dataset_splits", "tokenizer", "tokenized_documents",
            "packed_shards", "media_shards", "dataset_version", "training_run"} <= set(UNTIL_CHOICES)
    assert UNTIL_CHOICES[:4] == ("raw_documents", "cleaned_documents", "dedup_signatures",  # per_source_job's
                                 "dedup_band_buckets")  # band_buckets_job, before corpus_job
    d = defs()
    corpus = ("deduplicated_documents", "dataset_splits", "tokenizer", "tokenized_documents", "packed_shards",
              "media_shards")
    names = lambda keys: sorted(k.to_user_string() for k in keys)  # noqa: E731
    assert names(_until_selection(d, corpus, "dataset_splits")) == ["dataset_splits", "deduplicated_documents"]
    assert names(_until_selection(d, corpus, "media_shards")) == ["dataset_splits", "deduplicated_documents",
                                                                   "media_shards"]
    assert _until_selection(d, corpus, "packed_shards") is None  # the whole corpus job, as dvc.yaml uses it
    assert _until_selection(d, ("dataset_version",), "dataset_splits") is None


def test_spot_check_samples_what_a_rule_removed_deterministically(tmp_path, capsys):
    """Removed documents joined with the text their stage saw, the same sample on every call, a rule
    group matching its rules, and the kept side from the split output."""
    import pyarrow as pa

    from platform_assets.contracts import DEFAULT_IO, EXCLUSIONS_FILE
    from platform_assets.parquet_parts import TableSink
    from platform_assets.schema import DOCUMENTS_SCHEMA
    from platform_assets.spot_checks import spot_check, to_markdown
    from platform_assets.storage import Storage

    storage = Storage(str(tmp_path / "out"))
    rows = [{"id": f"d{i}", "source": "web", "text": f"document {i} | with a pipe", "modality": "text", "uri": f"u{i}",
             "license": None, "meta": None, "ingested_at": None, "media": None} for i in range(30)]
    with TableSink(storage, "raw_documents/web", DOCUMENTS_SCHEMA, DEFAULT_IO) as sink:
        sink.write(pa.Table.from_pylist(rows, schema=DOCUMENTS_SCHEMA))
    removed = pa.table({"id": [f"d{i}" for i in range(20)],
                        "rule": ["gopher_quality.stop_words"] * 10 + ["c4.curly_bracket"] * 10,
                        "value": [f"{i} < 2" for i in range(20)], "bytes": [10] * 20})
    with storage.staged_dir("cleaned_documents/web") as staged:
        with staged.open_output(EXCLUSIONS_FILE) as f:
            import pyarrow.parquet as pq

            pq.write_table(removed, f)
    sample = spot_check(storage, "gopher_quality", n=4)
    assert len(sample) == 4 and {c.rule for c in sample} == {"gopher_quality.stop_words"}
    assert sample == spot_check(storage, "gopher_quality", n=4)  # deterministic
    assert sample != spot_check(storage, "gopher_quality", n=4, seed=1)  # another seed, another sample
    assert all(c.excerpt.startswith("document ") and c.value.endswith("< 2") for c in sample)
    per_rule = spot_check(storage, n=10, per_rule=2)
    assert [c.rule for c in per_rule] == ["c4.curly_bracket"] * 2 + ["gopher_quality.stop_words"] * 2
    assert "\\| with a pipe" in to_markdown(sample)  # the table survives a pipe in the text
    assert spot_check(storage, "gopher_quality.stop_words_typo") == []


def test_spot_check_command_prints_the_sample_or_says_which_rules_removed_something(tmp_path, capsys):
    """`python -m platform_assets spot-check --rule R -n N`: the table of N removed documents; a rule that
    removed nothing names the rules that did; --kept before the splits exist says what to materialize."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from platform_assets.contracts import DEFAULT_IO, EXCLUSIONS_FILE
    from platform_assets.parquet_parts import TableSink
    from platform_assets.schema import DOCUMENTS_SCHEMA
    from platform_assets.storage import Storage

    (tmp_path / "src").mkdir()
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({"storage": {"root": str(tmp_path / "out")},
                                      "sources": [{"name": "web", "format": "jsonl", "path": str(tmp_path / "src")}]}))
    storage = Storage(str(tmp_path / "out"))
    rows = [{"id": f"d{i:02d}", "source": "web", "text": f"page {i} of the crawl", "modality": "text", "uri": f"u{i}",
             "license": None, "meta": None, "ingested_at": None, "media": None} for i in range(12)]
    with TableSink(storage, "raw_documents/web", DOCUMENTS_SCHEMA, DEFAULT_IO) as sink:
        sink.write(pa.Table.from_pylist(rows, schema=DOCUMENTS_SCHEMA))
    removed = pa.table({"id": [f"d{i:02d}" for i in range(9)], "rule": ["gopher_quality.stop_words"] * 6 +
                        ["c4.curly_bracket"] * 3, "value": [f"{i} stop words < 2" for i in range(9)],
                        "bytes": [20] * 9})
    with storage.staged_dir("cleaned_documents/web") as staged, staged.open_output(EXCLUSIONS_FILE) as f:
        pq.write_table(removed, f)

    args = ["spot-check", "--rule", "gopher_quality.stop_words", "-n", "4", "--config", str(config)]
    assert main(args) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| id | source | rule | value | text |" and len(table) == 2 + 4
    assert all("| gopher_quality.stop_words |" in line and "stop words < 2" in line and "of the crawl" in line
               for line in table[2:])
    assert main(args) == 0 and capsys.readouterr().out.splitlines() == table  # the same sample again
    assert main([*args, "--seed", "3"]) == 0 and capsys.readouterr().out.splitlines() != table

    assert main(["spot-check", "--rule", "gopher_repetition", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "no documents removed by 'gopher_repetition'" in err
    assert "rules with removals: c4.curly_bracket (3), gopher_quality.stop_words (6)" in err
    assert main(["spot-check", "--kept", "--config", str(config)]) == 1
    assert "materialize dataset_splits first" in capsys.readouterr().err


def test_spot_check_excerpts_are_cut_as_duckdb_cut_them(tmp_path):
    """The excerpts come from a second, Arrow pass (bounded memory): the same text DuckDB's
    regexp_replace(left(text, 240), '\\s+', ' ', 'g') gave when one query cut them."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from platform_assets.spot_checks import spot_check
    from platform_assets.storage import Storage

    texts = ["a\u00a0b \v c\t\n\fd  e", "é" * 300 + " tail", "  lead\r\nx", "日本語\u3000テキスト " * 40, None]
    out = tmp_path / "cleaned_documents" / "web"
    out.mkdir(parents=True)
    ids = [f"doc-{i}" for i in range(len(texts))]
    pq.write_table(pa.table({"id": ids, "source": ["web"] * len(ids), "modality": ["text"] * 4 + ["image"],
                             "text": pa.array(texts, pa.string())}), out / "part-00000.parquet")
    got = spot_check(Storage(str(tmp_path)), n=10, kept=True, kept_view="cleaned_documents")
    assert sorted(c.id for c in got) == ids
    want = dict(duckdb.sql("SELECT id, regexp_replace(left(text, 240), '\\s+', ' ', 'g') FROM "
                           f"read_parquet('{out}/part-00000.parquet')").fetchall())
    assert {c.id: c.excerpt for c in got} == want
    assert want["doc-4"] is None and "\u00a0" in want["doc-0"] and len(want["doc-1"]) == 240
