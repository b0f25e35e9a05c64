from pathlib import Path

import pytest

from platform_assets.config import ConfigError, load_config, parse_config


def _cfg(**extra):
    return {"sources": [{"name": "web", "format": "jsonl", "path": "web"}], **extra}


def test_valid_config_resolves_paths_against_its_folder(tmp_path: Path):
    cfg = parse_config(_cfg(storage={"root": "out"}), tmp_path)
    assert cfg.storage_root == str(tmp_path / "out")
    assert cfg.source_location("web") == str(tmp_path / "web")
    assert cfg.source("web").text_field == "text"


def test_unknown_key_is_named(tmp_path: Path):
    raw = {"sources": [{"name": "web", "format": "jsonl", "path": "x", "text_feild": "body"}]}
    with pytest.raises(ConfigError) as err:
        parse_config(raw, tmp_path)
    assert "sources[0] (name='web').text_feild: unknown key" in str(err.value)


def test_wrong_type_is_named(tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        parse_config(_cfg(io={"batch_rows": "many"}), tmp_path)
    assert "io.batch_rows" in str(err.value)


def test_io_settings_moved_out_of_stage_sections_are_named(tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        parse_config(_cfg(ingest={"batch_rows": 100, "compression": "zstd"}, dedup={"batch_rows": 5}), tmp_path)
    assert "ingest.batch_rows: moved to io.batch_rows" in str(err.value)
    assert "ingest.compression: moved to io.compression" in str(err.value)
    assert "dedup.batch_rows: moved to io.batch_rows" in str(err.value)


def test_option_of_another_format_is_rejected(tmp_path: Path):
    raw = {"sources": [{"name": "web", "format": "jsonl", "path": "x", "unit": "line"}]}
    with pytest.raises(ConfigError, match=r"sources\[0\] \(name='web'\)\.unit: unknown key"):
        parse_config(raw, tmp_path)


def test_unknown_format_and_bad_name(tmp_path: Path):
    with pytest.raises(ConfigError, match="format"):
        parse_config({"sources": [{"name": "web", "format": "xml", "path": "x"}]}, tmp_path)
    with pytest.raises(ConfigError, match=r"sources\[0\] \(name='Web Pages'\)\.name"):
        parse_config({"sources": [{"name": "Web Pages", "format": "jsonl", "path": "x"}]}, tmp_path)


def test_duplicate_source_names(tmp_path: Path):
    src = {"name": "web", "format": "jsonl", "path": "x"}
    with pytest.raises(ConfigError, match="used twice"):
        parse_config({"sources": [src, src]}, tmp_path)


def test_unknown_encoding_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="encoding"):
        parse_config({"sources": [{"name": "w", "format": "text", "path": "x", "encoding": "klingon-8"}]}, tmp_path)


def test_missing_path_fails_fast_naming_the_source(tmp_path: Path):
    cfg = parse_config({"sources": [{"name": "crawl", "format": "jsonl", "path": "nowhere/"}]}, tmp_path)
    with pytest.raises(ConfigError, match="source 'crawl': path 'nowhere/' does not exist"):
        cfg.check_source_paths()


def test_glob_with_no_match_fails_fast(tmp_path: Path):
    cfg = parse_config({"sources": [{"name": "crawl", "format": "jsonl", "path": "*.jsonl"}]}, tmp_path)
    with pytest.raises(ConfigError, match="source 'crawl': no file matches"):
        cfg.check_source_paths()


def test_unreadable_and_invalid_yaml(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read pipeline config"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- just a list\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(bad)


def test_sample_config_is_valid():
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "sample.yaml")
    assert {s.format for s in cfg.sources} == {"jsonl", "csv", "parquet", "folder", "text", "manifest", "hf"}
