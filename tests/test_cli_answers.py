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
    d = defs()
    corpus = ("deduplicated_documents", "dataset_splits", "tokenizer", "tokenized_documents", "packed_shards",
              "media_shards")
    names = lambda keys: sorted(k.to_user_string() for k in keys)  # noqa: E731
    assert names(_until_selection(d, corpus, "dataset_splits")) == ["dataset_splits", "deduplicated_documents"]
    assert names(_until_selection(d, corpus, "media_shards")) == ["dataset_splits", "deduplicated_documents",
                                                                   "media_shards"]
    assert _until_selection(d, corpus, "packed_shards") is None  # the whole corpus job, as dvc.yaml uses it
    assert _until_selection(d, ("dataset_version",), "dataset_splits") is None
