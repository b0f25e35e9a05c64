"""Shared fixtures. Tests are offline and make their own data; nothing here reads ../shared."""

import os

# Before anything imports `datasets`/`huggingface_hub`: no network, ever.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from platform_assets.config import PipelineConfig, load_config  # noqa: E402
from platform_assets.storage import Storage  # noqa: E402


@pytest.fixture
def write_config(tmp_path: Path):
    """Write a pipeline YAML into tmp_path (storage under tmp_path/out) and load it."""

    def _write(sources: list[dict], **sections) -> PipelineConfig:
        doc = {"storage": {"root": str(tmp_path / "out")}, "sources": sources, **sections}
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_config(path)

    return _write


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path / "out"))
