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


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """pyproject's addopts run the suite on 2 xdist workers, whole modules at a time; with xdist left out
    (`-p no:xdist`) its options from addopts are accepted here instead, so that run is simply serial. (Long
    spellings, one token each: pytest reads addopts for its early options before this file is loaded, and
    a separate `2` would be taken for a test path.)"""
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist absent")
    group.addoption("--numprocesses", default=0, help="ignored: pytest-xdist is not loaded, tests run in this process")
    group.addoption("--dist", default="no", help="ignored: pytest-xdist is not loaded")
    group.addoption("--no-loadscope-reorder", action="store_true", help="ignored: pytest-xdist is not loaded")


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


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1 (tests/moto_server.py), one per test module: its URL."""
    from moto_server import moto_server

    with moto_server() as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A fresh bucket on the module's moto server, with the credentials pyarrow and boto3 read from the
    environment: (boto3 client, bucket name, endpoint URL)."""
    import time

    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    bucket = f"b{time.time_ns()}"
    client.create_bucket(Bucket=bucket)
    return client, bucket, s3_endpoint
