"""The README's config example must stay a valid config (docs that drift are worse than none)."""

import re
from pathlib import Path

import yaml

from platform_assets.config import parse_config

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_config_example_is_valid(tmp_path):
    block = re.search(r"```yaml\n(storage:.*?)```", README.read_text(), re.S)
    assert block, "README has no config example"
    cfg = parse_config(yaml.safe_load(block.group(1)), tmp_path)
    assert {s.format for s in cfg.sources} == {"jsonl", "csv", "parquet", "text", "folder", "manifest", "hf"}
    assert cfg.dedup.near.threshold == 0.8 and cfg.splits.ratios.train == 0.98
