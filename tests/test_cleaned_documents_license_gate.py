"""The licence gate through Dagster: in `fail` mode the blocking check `license_allowed` fails on the
partition, naming the source and the licence, and nothing downstream would run; with the licence
allowed (or no allow-list) it passes."""

import dagster as dg
import pytest
import yaml
from test_cleaned_documents_asset import ENGLISH, _checks, _run

from platform_assets.defs.cleaned_documents.assets import cleaned_documents
from platform_assets.defs.resources import PipelineResource


def _config(tmp_path, license: str | None, licenses: dict | None) -> PipelineResource:
    import json

    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in ENGLISH[:3]))
    source = {"name": "web", "format": "jsonl", "path": str(tmp_path / "in.jsonl"),
              **({"license": license} if license else {})}
    cleaning = {"quality": [{"preset": "gopher_quality"}], **({"licenses": licenses} if licenses else {})}
    cfg = {"storage": {"root": str(tmp_path / "out")}, "sources": [source], "cleaning": cleaning}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    return PipelineResource(config_path=str(tmp_path / "p.yaml"))


@pytest.mark.parametrize(("license", "shown"), [("CC-BY-NC-4.0", "licence CC-BY-NC-4.0"), (None, "no licence")])
def test_fail_mode_blocks_the_partition(tmp_path, license, shown):
    result = _run(_config(tmp_path, license, {"allow": ["CC-BY-4.0", "MIT"], "on_missing_or_disallowed": "fail"}))
    check = _checks(result)["license_allowed"]
    assert not result.success and check.passed is False
    violations = check.metadata["violations"].value
    assert "source 'web'" in violations and shown in violations and "(3 documents)" in violations
    spec = next(s for s in cleaned_documents.check_specs if s.name == "license_allowed")
    assert spec.blocking  # a failed blocking check stops every asset downstream of cleaned_documents


@pytest.mark.parametrize(("license", "licenses"), [("cc-by-4.0", {"allow": ["CC-BY-4.0"]}), (None, None)])
def test_allowed_or_unconfigured_passes(tmp_path, license, licenses):
    result = _run(_config(tmp_path, license, licenses))
    assert result.success and _checks(result)["license_allowed"].passed


def test_downstream_does_not_run_after_the_gate_fails(tmp_path):
    from platform_assets.defs.raw_documents.assets import raw_documents
    from platform_assets.defs.raw_documents.partitions import source_partitions

    ran = []

    @dg.asset(partitions_def=source_partitions, deps=[cleaned_documents])
    def after_cleaning() -> None:
        ran.append(True)

    pipeline = _config(tmp_path, "GPL-3.0", {"allow": ["MIT"]})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["web"])
        result = dg.materialize([raw_documents, cleaned_documents, after_cleaning], partition_key="web",
                                resources={"pipeline": pipeline}, instance=instance, raise_on_error=False)
    assert not result.success and not ran
