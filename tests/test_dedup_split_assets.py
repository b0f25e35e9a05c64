"""deduplicated_documents and dataset_splits over stored outputs, through Dagster and directly."""

import json
import random
import shutil
from contextlib import contextmanager

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from platform_assets.contracts import DEFAULT_IO
from platform_assets.dedup.band_partitions import BUCKET_OF_FILE, bucket_keys
from platform_assets.dedup.stage import DUPLICATES_FILE, EXCLUSIONS_FILE, SIGNATURES_FILE, deduplicate_outputs
from platform_assets.defs.dataset_splits.assets import dataset_splits
from platform_assets.defs.dedup_band_buckets.assets import ALL_BUCKETS_RUN_TAGS, dedup_band_buckets
from platform_assets.defs.dedup_signatures.assets import dedup_signatures
from platform_assets.defs.deduplicated_documents.assets import deduplicated_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id
from platform_assets.splits.stage import split_outputs
from platform_assets.storage import Storage

WORDS = (
    "data pipeline shard token model train valid test corpus filter clean dedup split pack index "
    "byte text page line word source asset check gate lineage version remote cache batch worker"
).split()


def _essay(rng: random.Random, n: int = 300) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(n))


def _write_docs(root, source: str, texts: list[str], ts: int = 1_700_000_000) -> list[str]:
    """A committed cleaned_documents partition (parts + manifest), as the cleaning stage leaves it."""
    uris = [f"{source}.jsonl#line={i + 1}" for i in range(len(texts))]
    ids = [document_id(source, u, t) for u, t in zip(uris, texts, strict=True)]
    n = len(texts)
    table = pa.table(
        {
            "id": ids,
            "source": [source] * n,
            "text": pa.array(texts, pa.large_string()),
            "modality": ["text"] * n,
            "uri": uris,
            "license": pa.nulls(n, pa.string()),
            "meta": pa.nulls(n, pa.string()),
            "ingested_at": pa.array([(ts + i) * 1000 for i in range(n)], pa.timestamp("ms", tz="UTC")),
            "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
        },
        schema=DOCUMENTS_SCHEMA,
    )
    with Storage(str(root)).staged_dir(f"cleaned_documents/{source}") as staged:
        with staged.open_output("part-00000.parquet") as f:
            pq.write_table(table, f)
    return ids


@pytest.fixture
def corpus(tmp_path):
    rng = random.Random(7)
    base = [_essay(rng) for _ in range(60)]
    web = base[:40] + [base[0], base[1].upper()]  # an exact copy and a case-only copy
    words = base[2].split()
    words[10] = "edited"  # a one-word edit: Jaccard ~0.98
    forum = base[40:] + [" ".join(words), base[3] + " " + _essay(rng, 5)]  # near duplicates across sources
    ids = {"web": _write_docs(tmp_path / "out", "web", web), "forum": _write_docs(tmp_path / "out", "forum", forum)}
    return tmp_path, ids


def test_stage_removes_planted_duplicates_across_sources(corpus):
    tmp, ids = corpus
    from platform_assets.config import parse_config

    cfg = parse_config({"sources": [{"name": "web", "format": "jsonl", "path": "x"}]}, tmp)
    st = Storage(str(tmp / "out"))
    stage = deduplicate_outputs(
        st, ["cleaned_documents/web", "cleaned_documents/forum"], "deduplicated_documents/_all", cfg.dedup
    )
    assert stage.rows_in == 64 and stage.rows_out == 60
    removed = {r["removed_id"]: r["rule"] for r in stage.result.duplicates.to_pylist()}
    assert removed == {
        ids["web"][40]: "exact_duplicate",
        ids["web"][41]: "exact_duplicate",
        ids["forum"][20]: "near_duplicate",
        ids["forum"][21]: "near_duplicate",
    }
    out = tmp / "out" / "deduplicated_documents" / "_all"
    kept = pq.read_table(out / "part-00000.parquet")
    assert kept.column_names[-1] == "cluster_id" and kept.num_rows == 60
    excl = pq.read_table(out / EXCLUSIONS_FILE)
    assert sorted(excl["id"].to_pylist()) == sorted(removed) and set(excl["rule"].to_pylist()) == set(removed.values())
    assert (out / DUPLICATES_FILE).exists() and (out / SIGNATURES_FILE).exists()

    # input order does not matter: the same kept set from the sources in the other order
    again = deduplicate_outputs(st, ["cleaned_documents/forum", "cleaned_documents/web"], "dd2", cfg.dedup)
    assert set(pq.read_table(tmp / "out" / "dd2" / "part-00000.parquet")["id"].to_pylist()) == set(
        kept["id"].to_pylist()
    )
    assert again.rows_out == 60


def test_incremental_run_dedups_a_new_source_against_accepted_documents(corpus):
    tmp, ids = corpus
    from platform_assets.config import parse_config

    cfg = parse_config(
        {"sources": [{"name": "web", "format": "jsonl", "path": "x"}], "dedup": {"incremental": True}}, tmp
    )
    st = Storage(str(tmp / "out"))
    first = deduplicate_outputs(st, ["cleaned_documents/web"], "dd", cfg.dedup)
    assert first.rows_out == 40
    web = pq.read_table(tmp / "out" / "cleaned_documents" / "web" / "part-00000.parquet")["text"].to_pylist()
    new_ids = _write_docs(tmp / "out", "crawl", [web[5], "a brand new document " + web[7][:50]])
    second = deduplicate_outputs(st, ["cleaned_documents/web", "cleaned_documents/crawl"], "dd", cfg.dedup)
    assert second.rows_in == 2 and second.carried_over == 40  # only the new source was deduplicated
    assert second.rows_out == 41
    assert second.result.counts.removed_against_earlier_runs == 1
    kept = pq.read_table(tmp / "out" / "dd")
    assert new_ids[0] not in kept["id"].to_pylist() and new_ids[1] in kept["id"].to_pylist()
    excluded = pq.read_table(tmp / "out" / "dd" / EXCLUSIONS_FILE)["id"].to_pylist()
    assert new_ids[0] in excluded and ids["web"][40] in excluded  # earlier exclusions are kept


def test_splits_are_stable_when_documents_are_added(tmp_path):
    from platform_assets.splits.settings import SplitSettings

    rng = random.Random(3)
    st = Storage(str(tmp_path))
    _write_docs(tmp_path, "web", [_essay(rng, 20) for _ in range(400)])
    settings = SplitSettings(ratios={"train": 0.8, "validation": 0.1, "test": 0.1})
    split_outputs(st, "cleaned_documents/web", "s1", settings)
    first = dict(zip(*pq.read_table(tmp_path / "s1", columns=["id", "split"]).to_pydict().values(), strict=True))
    _write_docs(tmp_path, "web", [_essay(rng, 20) for _ in range(400)] + [])  # replaced by 400 new docs
    d = tmp_path / "cleaned_documents" / "web"
    old = pq.read_table(tmp_path / "s1").drop_columns(["split"])
    pq.write_table(old, d / "part-00001.parquet")  # the old documents plus 400 new ones
    result = split_outputs(st, "cleaned_documents/web", "s2", settings)
    second = dict(zip(*pq.read_table(tmp_path / "s2", columns=["id", "split"]).to_pydict().values(), strict=True))
    assert result.rows == 800 and all(second[i] == s for i, s in first.items())
    assert 0.7 < result.counts["train"] / 800 < 0.9


@pytest.fixture
def pipeline(corpus):
    tmp, _ = corpus
    cfg = {
        "storage": {"root": str(tmp / "out")},
        "sources": [{"name": "web", "format": "jsonl", "path": "x"}, {"name": "forum", "format": "jsonl", "path": "x"}],
        "splits": {"ratios": {"train": 0.8, "validation": 0.1, "test": 0.1}},
    }
    (tmp / "p.yaml").write_text(yaml.safe_dump(cfg))
    return PipelineResource(config_path=str(tmp / "p.yaml"))


def _signatures(pipeline, instance, keys=("web", "forum")) -> list[dg.AssetCheckEvaluation]:
    """dedup_signatures of each source partition, as the per-source runs leave them."""
    instance.add_dynamic_partitions(source_partitions.name, list(keys))
    evaluations = []
    for key in keys:
        result = dg.materialize([dedup_signatures], partition_key=key, instance=instance,
                                resources={"pipeline": pipeline}, raise_on_error=False)
        assert result.success, key
        evaluations += result.get_asset_check_evaluations()
    return evaluations


def _buckets(pipeline, instance) -> list[dict]:
    """Every dedup_band_buckets partition in one run, as the CLI's band_buckets_job (and a backfill, by the
    asset's single-run policy) leaves them: each partition's materialization metadata, in key order."""
    result = dg.materialize([dedup_band_buckets], tags=ALL_BUCKETS_RUN_TAGS, instance=instance,
                            resources={"pipeline": pipeline}, raise_on_error=False)
    assert result.success
    (check,) = result.get_asset_check_evaluations()  # one evaluation per run, over every bucket it materialized
    assert (check.check_name, check.passed, check.partition) == ("shared_keys_are_shared", True, None)
    assert check.metadata["buckets_checked"].value == ", ".join(bucket_keys())
    # one materialization per bucket, from one run (Dagster emits them in no particular order)
    events = sorted(result.asset_materializations_for_node("dedup_band_buckets"), key=lambda m: m.partition)
    assert [m.partition for m in events] == bucket_keys()
    return [{k: v.value for k, v in m.metadata.items() if k in ("used", "band_records", "shared_keys", "bucket")}
            for m in events]


def _bucket_bytes(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "dedup_band_buckets").rglob("*"))
            if p.is_file()}


def test_one_run_over_every_bucket_writes_the_bytes_of_one_run_per_bucket(pipeline, corpus):
    """The range run groups each bucket on its own: every file of every bucket output (parts, manifest,
    _bucket_of.json) is byte-identical to the per-bucket runs', and each bucket's materialization carries
    its own figures; a single bucket is still a run of its own."""
    tmp, _ = corpus
    with dg.instance_for_test() as instance:
        _signatures(pipeline, instance)
        per_bucket = []
        for key in bucket_keys():
            result = dg.materialize([dedup_band_buckets], partition_key=key, instance=instance,
                                    resources={"pipeline": pipeline})
            (event,) = result.asset_materializations_for_node("dedup_band_buckets")
            assert event.partition == key
            (check,) = result.get_asset_check_evaluations()  # a one-bucket run checks its bucket
            assert check.passed and check.metadata["buckets_checked"].value == key
            per_bucket.append((event.metadata, event.tags["dagster/data_version"]))
        alone = _bucket_bytes(tmp / "out")
        shutil.rmtree(tmp / "out" / "dedup_band_buckets")
        ranged = dg.materialize([dedup_band_buckets], tags=ALL_BUCKETS_RUN_TAGS, instance=instance,
                                resources={"pipeline": pipeline})
        assert len(instance.get_runs()) == 2 + len(bucket_keys()) + 1  # 2 signature runs, 8 bucket runs, 1
        events = sorted(ranged.asset_materializations_for_node("dedup_band_buckets"), key=lambda m: m.partition)
    assert _bucket_bytes(tmp / "out") == alone
    assert len(alone) >= 3 * len(bucket_keys())  # a part, the manifest and _bucket_of.json per bucket at least
    assert [e.partition for e in events] == bucket_keys()
    figures = ("bucket", "band_records", "shared_keys", "documents_with_shared_keys", "rows", "bytes")
    for event, (md, version) in zip(events, per_bucket, strict=True):
        assert {k: event.metadata[k].value for k in figures} == {k: md[k].value for k in figures}
        assert event.metadata["bucket_version"].value == version  # the bucket's own content version
    assert len({e.metadata["band_records"].value for e in events}) > 1  # figures per bucket, not one total
    # every partition of a range run carries the run's version (Dagster's is per output), one that
    # differs from each bucket's own
    run_versions = {e.tags["dagster/data_version"] for e in events}
    assert len(run_versions) == 1 and not run_versions & {v for _, v in per_bucket}


def test_a_backfill_over_the_buckets_is_one_run(pipeline, corpus, monkeypatch):
    """Dagster's partition backfill (the daemon's iteration, in process) over every bucket: one run
    tagged with the range b000..b007 (the asset's single-run policy), each bucket materialized once by it."""
    from backfill_daemon import daemon_instance, run_backfill

    with daemon_instance(monkeypatch, pipeline.config_path) as (instance, workspace):
        _signatures(pipeline, instance)
        (run,) = run_backfill(instance, workspace, "buckets", ["dedup_band_buckets"], bucket_keys())
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert (run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]) == (
            bucket_keys()[0], bucket_keys()[-1])
        records = instance.fetch_materializations(dg.AssetKey("dedup_band_buckets"), limit=20).records
        assert sorted(r.partition_key for r in records) == bucket_keys() and {r.run_id for r in records} == {run.run_id}


def test_cli_groups_every_bucket_in_one_run_with_one_summary_line(pipeline, corpus, monkeypatch, capsys):
    """The CLI's band_buckets_job step: one in-process run over b000..b007, one line summing their shared
    keys; with stale signatures every bucket is named failed."""
    from platform_assets.cli import _run_band_buckets
    from platform_assets.definitions import defs

    monkeypatch.setenv("PLATFORM_CONFIG", pipeline.config_path)  # the definitions' resource reads it
    with dg.instance_for_test() as instance:
        _signatures(pipeline, instance)
        before = {r.run_id for r in instance.get_runs()}
        assert _run_band_buckets(defs(), instance, None) == []
        (run,) = [r for r in instance.get_runs() if r.run_id not in before]
        assert (run.job_name, run.status) == ("band_buckets_job", dg.DagsterRunStatus.SUCCESS)
        records = instance.fetch_materializations(dg.AssetKey("dedup_band_buckets"), limit=20).records
        assert sorted(r.partition_key for r in records) == bucket_keys() and {r.run_id for r in records} == {run.run_id}
        shared = sum(r.asset_materialization.metadata["shared_keys"].value for r in records)
        assert shared > 2 * 18 and capsys.readouterr().out.splitlines()[-1].split() == [
            "buckets", "ok", "8", "partitions:", str(shared), "shared", "band", "keys", "1/1", "checks", "passed"]
        # a bucket whose check fails is named failed (its materialization is recorded before the check)
        with _damaged_bucket(monkeypatch, "b003", _key_held_by_one_document):
            assert _run_band_buckets(defs(), instance, None) == ["buckets b003"]
        line = capsys.readouterr().out.splitlines()[-1]
        assert line.startswith("buckets          FAILED   8 partitions: ") and line.endswith(
            " (failed: b003)  0/1 checks passed (failed: shared_keys_are_shared)")
        _write_docs(corpus[0] / "out", "forum", ["the forum cleaned again: " + _essay(random.Random(1))])
        assert _run_band_buckets(defs(), instance, None) == [f"buckets {k}" for k in bucket_keys()]
        assert capsys.readouterr().out.splitlines()[-1] == (
            "buckets          FAILED   8 partitions: none materialized (failed: " + ", ".join(bucket_keys()) + ")")


def _key_held_by_one_document(docs, keys):
    """A grouping bug: one more key, held by the first document alone."""
    return np.append(docs, docs[0]), np.append(keys, keys.max() + 1)


def _document_out_of_range(docs, keys):
    """A numbering bug: the first pair names a document past every signature partition's rows."""
    return np.concatenate([[10**6], docs[1:]]), keys


@contextmanager
def _damaged_bucket(monkeypatch, bucket: str, damage):
    """Runs inside it group `bucket` into damaged (document, key) pairs (committed with the figures of
    the damaged pairs, as a bug in the grouping would leave them); every other bucket as it is."""
    import platform_assets.defs.dedup_band_buckets.assets as bucket_assets
    from platform_assets.dedup.band_buckets import BandBuckets

    group, shared_keys = bucket_assets.group_band_bucket, BandBuckets.shared_keys

    def grouped(storage, key, *args, **kwargs):
        if key != bucket:
            return group(storage, key, *args, **kwargs)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(BandBuckets, "shared_keys", lambda self: damage(*shared_keys(self)))
            return group(storage, key, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(bucket_assets, "group_band_bucket", grouped)
        yield


def test_shared_keys_audit_passes_real_output_and_names_each_damage(corpus):
    """audit_shared_keys over real bucket outputs, then over the same pairs damaged one way at a time."""
    from platform_assets.dedup.band_partitions import _commit, group_band_bucket
    from platform_assets.dedup.bucket_audit import audit_shared_keys
    from platform_assets.dedup.settings import DedupSettings
    from platform_assets.dedup.signature_partition import write_signature_partition

    st, settings, io = Storage(str(corpus[0] / "out")), DedupSettings(), DEFAULT_IO
    for source in ("web", "forum"):
        write_signature_partition(st, f"cleaned_documents/{source}", f"keys/{source}", settings)
    stages = [group_band_bucket(st, k, ["keys/web", "keys/forum"], f"buckets/{k}", settings) for k in bucket_keys()]
    audits = [audit_shared_keys(st, s.rel, s.rows, s.shared_keys) for s in stages]
    assert all(a.passed for a in audits) and {a.documents for a in audits} == {64}
    assert sum(a.keys for a in audits) == sum(s.shared_keys for s in stages) > 2 * 18
    real = max(stages, key=lambda s: s.rows)
    table = pq.read_table(tmp_out := corpus[0] / "out" / real.rel)
    record = json.loads((tmp_out / BUCKET_OF_FILE).read_text())
    docs, keys = table["doc"].to_numpy(), table["key"].to_numpy()

    def audit(docs, keys, shared_keys=None):
        _commit(st, "damaged", record, docs, keys, io)
        return audit_shared_keys(st, "damaged", len(docs), int(keys.max()) + 1 if shared_keys is None else shared_keys)

    assert audit(docs, keys).passed  # the real pairs, committed again
    once = audit(*_key_held_by_one_document(docs, keys))
    assert (once.keys_held_by_one_document, once.problems) == (1, ("1 keys held by fewer than 2 documents",))
    outside = audit(*_document_out_of_range(docs, keys))
    assert outside.documents_out_of_range == 1 and outside.problems[0].startswith("1 document numbers outside 0..63")
    negative = audit(np.where(docs == docs.max(), -1, docs), keys)
    assert negative.documents_out_of_range == (docs == docs.max()).sum() and not negative.passed
    gap = audit(docs, np.where(keys == 0, keys.max() + 1, keys), real.shared_keys)  # key 0 renumbered past the last
    assert gap.problems == (f"keys not numbered 0..{real.shared_keys - 1} (1..{real.shared_keys})",)
    twice = audit(np.append(docs, docs[0]), np.append(keys, keys[0]))
    assert twice.duplicate_pairs == 1 and not twice.passed
    assert audit(docs, keys, shared_keys=real.shared_keys + 1).problems == (
        f"{real.shared_keys} keys written, {real.shared_keys + 1} reported",)
    # near dedup off: an empty output passes; pairs in it do not
    off = DedupSettings(near={"enabled": False})
    unused = group_band_bucket(st, "b000", ["keys/web", "keys/forum"], "unused", off)
    assert audit_shared_keys(st, "unused", 0, 0).passed and not unused.used
    record = json.loads((corpus[0] / "out" / "unused" / BUCKET_OF_FILE).read_text())
    assert audit(docs, keys).problems == (f"{len(docs)} pairs in a bucket that records it grouped nothing",
                                          f"{len(docs)} document numbers outside 0..-1 (the numbering of "
                                          f"{BUCKET_OF_FILE})")


@pytest.mark.parametrize("damage", [_key_held_by_one_document, _document_out_of_range])
def test_shared_keys_check_blocks_a_damaged_bucket_alone_and_in_a_range_run(pipeline, monkeypatch, damage):
    """A one-bucket run of the damaged bucket fails its blocking check; a range run over all 8 fails
    the one evaluation, naming that bucket alone; the same runs pass undamaged."""
    with dg.instance_for_test() as instance:
        _signatures(pipeline, instance)
        run = lambda **kw: dg.materialize([dedup_band_buckets], instance=instance,  # noqa: E731
                                          resources={"pipeline": pipeline}, raise_on_error=False, **kw)
        with _damaged_bucket(monkeypatch, "b005", damage):
            for kw, checked in (({"partition_key": "b005"}, "b005"), ({"tags": ALL_BUCKETS_RUN_TAGS}, None)):
                result = run(**kw)
                assert not result.success
                (check,) = result.get_asset_check_evaluations()
                assert not check.passed and check.metadata["failed_buckets"].value == "b005"
                assert check.metadata["buckets_checked"].value == (checked or ", ".join(bucket_keys()))
                assert check.metadata["problems"].value.startswith("b005: 1 ")
                failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
                assert "dedup_band_buckets: shared_keys_are_shared" in str(failure.event_specific_data.error.message)
            assert run(partition_key="b004").success  # an undamaged bucket alone passes
        for kw in ({"partition_key": "b005"}, {"tags": ALL_BUCKETS_RUN_TAGS}):
            result = run(**kw)
            assert result.success and all(c.passed for c in result.get_asset_check_evaluations())


def test_assets_materialize_with_metadata_and_passing_checks(pipeline, corpus):
    with dg.instance_for_test() as instance:
        covered = _signatures(pipeline, instance)
        buckets = _buckets(pipeline, instance)
        result = dg.materialize([deduplicated_documents, dataset_splits], instance=instance,
                                resources={"pipeline": pipeline})
    assert result.success
    assert [(e.check_name, e.passed, e.metadata["cleaned_rows"].value) for e in covered] == [
        ("signatures_cover_cleaned", True, 42), ("signatures_cover_cleaned", True, 22)]
    # 64 documents x 18 bands of band records, spread over the 8 bucket partitions; the planted near
    # duplicates share keys
    assert [b["bucket"] for b in buckets] == bucket_keys() and all(b["used"] for b in buckets)
    assert sum(b["band_records"] for b in buckets) == 64 * 18 and sum(b["shared_keys"] for b in buckets) > 2 * 18
    md = result.asset_materializations_for_node("deduplicated_documents")[0].metadata
    assert (md["documents_in"].value, md["rows"].value, md["removed_exact"].value, md["removed_near"].value) == (
        64,
        60,
        2,
        2,
    )
    assert md["cluster_size_chart"].value.startswith("![clusters by size")
    # spot checks: removed documents of each rule with their cleaned text
    spot = md["spot_checks"].value
    assert "| exact_duplicate |" in spot and "| near_duplicate |" in spot and spot.count("\n| `") >= 4
    kept_spot = md["spot_checks_kept"].value  # 10 of the 60 kept, the same 10 on every run
    assert kept_spot.count(" | kept | ") == 10 and "_duplicate" not in kept_spot
    per_source = {r.data["source"]: r.data["removed"] for r in md["removed_per_source"].value.records}
    assert per_source == {"forum": 2, "web": 2}
    sp = result.asset_materializations_for_node("dataset_splits")[0].metadata
    split_counts = {r.data["split"]: r.data["documents"] for r in sp["documents_per_split"].value.records}
    assert sum(split_counts.values()) == 60 and set(split_counts) == {"train", "validation", "test"}
    evaluations = {(e.asset_key.path[0], e.check_name): e.passed for e in result.get_asset_check_evaluations()}
    assert all(evaluations.values()) and len(evaluations) == 6


def test_leak_check_blocks_a_planted_leak(pipeline, corpus):
    """A dedup output that still holds the planted exact copy (written by hand: the dedup stage's own
    blocking check would stop it) and a seed that puts the two copies in different splits: the
    blocking leak check must fail the run."""
    from platform_assets.splits.assignment import assign_splits
    from platform_assets.splits.settings import SplitSettings

    tmp, ids = corpus
    pair = pa.table({"id": [ids["web"][0], ids["web"][40]]})  # base[0] and its exact copy
    ratios = {"train": 0.5, "validation": 0.25, "test": 0.25}
    seed = next(
        s for s in range(1000) if len(set(assign_splits(pair, SplitSettings(seed=s, ratios=ratios)).to_pylist())) == 2
    )
    cfg = yaml.safe_load((tmp / "p.yaml").read_text())
    cfg["splits"] = {"seed": seed, "ratios": ratios}
    (tmp / "p.yaml").write_text(yaml.safe_dump(cfg))
    leaky = tmp / "out" / "deduplicated_documents" / "_all"
    leaky.mkdir(parents=True)
    pq.write_table(pq.read_table(tmp / "out" / "cleaned_documents" / "web"), leaky / "part-00000.parquet")
    result = dg.materialize([dataset_splits], resources={"pipeline": pipeline}, raise_on_error=False)
    assert not result.success
    leak = next(e for e in result.get_asset_check_evaluations() if e.check_name == "no_split_leakage")
    assert leak.passed is False
    assert leak.metadata["exact_leaking_groups"].value >= 1
    assert ids["web"][0] in leak.metadata["examples"].value


def _failure(result) -> str:
    assert not result.success
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]  # not retried
    return next(e for e in result.all_events
                if e.event_type_value == "STEP_FAILURE").event_specific_data.user_failure_data.description


def test_missing_or_stale_signature_partition_is_a_clear_failure(pipeline, corpus):
    tmp, _ = corpus
    with dg.instance_for_test() as instance:
        _signatures(pipeline, instance, keys=("web",))
        run = lambda: dg.materialize([deduplicated_documents], instance=instance,  # noqa: E731
                                     resources={"pipeline": pipeline}, raise_on_error=False)
        assert "dedup signatures not usable for: forum (missing)" in _failure(run())
        _signatures(pipeline, instance, keys=("forum",))
        assert "dedup band buckets not usable: b000 (missing); b001 (missing)" in _failure(run())
        _buckets(pipeline, instance)
        assert run().success
        _write_docs(tmp / "out", "forum", ["the forum cleaned again: " + _essay(random.Random(1))])
        assert "for: forum (stale (computed from another version of cleaned_documents/forum))" in _failure(run())
        covered = _signatures(pipeline, instance, keys=("forum",))
        assert covered[0].passed and covered[0].metadata["cleaned_rows"].value == 1
        assert "b000 (stale (computed from other dedup_signatures outputs))" in _failure(run())
        _buckets(pipeline, instance)
        assert run().success


def test_cover_check_fails_for_keys_of_other_documents(corpus):
    from platform_assets.contracts import IOSettings
    from platform_assets.dedup.settings import DedupSettings
    from platform_assets.dedup.signature_partition import write_signature_partition
    from platform_assets.defs.dedup_signatures.checks import evaluate_signature_checks

    st = Storage(str(corpus[0] / "out"))
    write_signature_partition(st, "cleaned_documents/forum", "keys/forum", DedupSettings())
    [own] = evaluate_signature_checks(st, "cleaned_documents/forum", "keys/forum", IOSettings())
    [other] = evaluate_signature_checks(st, "cleaned_documents/web", "keys/forum", IOSettings())
    assert own.passed and not other.passed
    assert (other.metadata["cleaned_rows"].value, other.metadata["signature_rows"].value) == (42, 22)


def test_signatures_of_a_missing_cleaned_partition_fail_by_name(pipeline, corpus):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["books"])
        cfg = yaml.safe_load((corpus[0] / "p.yaml").read_text())
        cfg["sources"].append({"name": "books", "format": "jsonl", "path": "x"})
        (corpus[0] / "p.yaml").write_text(yaml.safe_dump(cfg))
        result = dg.materialize([dedup_signatures], partition_key="books", instance=instance,
                                resources={"pipeline": pipeline}, raise_on_error=False)
        assert "cleaned_documents has no documents for: books" in _failure(result)


def test_missing_upstream_partition_is_a_clear_failure(pipeline, corpus):
    tmp, _ = corpus
    cfg = yaml.safe_load((tmp / "p.yaml").read_text())
    cfg["sources"].append({"name": "books", "format": "jsonl", "path": "x"})
    (tmp / "p.yaml").write_text(yaml.safe_dump(cfg))
    result = dg.materialize([deduplicated_documents], resources={"pipeline": pipeline}, raise_on_error=False)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "cleaned_documents has no documents for: books" in failure.event_specific_data.user_failure_data.description
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]  # not retried
