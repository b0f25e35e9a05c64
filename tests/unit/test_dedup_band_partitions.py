"""dedup_band_buckets' logic (Dagster-free): the band records each signature partition stores, grouped
bucket partition by bucket partition, give the global pass the bytes it writes when it groups them
itself, in full and incremental runs; buckets of other inputs are refused by name."""

import pytest
from test_dedup_signature_partition import INPUTS, _commit, corpus  # noqa: F401 (corpus: a fixture)

from platform_assets.contracts import DEFAULT_IO, IOSettings
from platform_assets.dedup.band_partitions import (
    BAND_BUCKET_PARTITIONS,
    StaleBandBucketsError,
    bucket_keys,
    group_band_bucket,
)
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_partition import write_signature_partition
from platform_assets.dedup.stage import deduplicate_outputs
from platform_assets.parquet_parts import TableSource
from platform_assets.storage import Storage


def _signatures(storage: Storage, settings: DedupSettings, io: IOSettings = DEFAULT_IO) -> list[str]:
    dirs = [f"dedup_signatures/{rel.split('/')[-1]}" for rel in INPUTS]
    for rel, out in zip(INPUTS, dirs, strict=True):
        write_signature_partition(storage, rel, out, settings, io)
    return dirs


def _buckets(storage: Storage, settings: DedupSettings, keys_dirs: list[str], prior_rel: str | None = None,
             io: IOSettings = DEFAULT_IO) -> tuple[list[str], list]:
    dirs, results = [], []
    for bucket in bucket_keys():
        dirs.append(f"dedup_band_buckets/{bucket}")
        results.append(group_band_bucket(storage, bucket, keys_dirs, dirs[-1], settings, prior_rel, io))
    return dirs, results


@pytest.mark.parametrize(("near", "batch_rows"), [
    ({}, 8192), ({}, 3), ({"verify": "estimated"}, 5), ({"storage": {"partitions": 3}}, 4),  # 5 buckets empty
    ({"storage": {"partitions": 1000}}, 8192), ({"bands": 32, "rows": 4}, 7)])
def test_bucket_partitions_give_the_bytes_of_grouping_in_process(corpus, near, batch_rows):  # noqa: F811
    settings = DedupSettings(near=near)
    reference = deduplicate_outputs(corpus, INPUTS, "reference", settings)
    keys_dirs = _signatures(corpus, settings, IOSettings(batch_rows=batch_rows))
    bucket_dirs, results = _buckets(corpus, settings, keys_dirs, io=IOSettings(batch_rows=batch_rows))
    stored = deduplicate_outputs(corpus, INPUTS, "stored", settings, signature_dirs=keys_dirs,
                                 bucket_dirs=bucket_dirs)
    assert stored.files == reference.files
    assert stored.result.counts == reference.result.counts and reference.result.counts.removed_near >= 3
    assert len(results) == BAND_BUCKET_PARTITIONS and all(r.used for r in results)
    # every band record of the 42 documents with shingles went to exactly one bucket partition
    bands = stored.result.counts.lsh_bands
    assert sum(r.records for r in results) == bands * (51 - stored.result.counts.without_shingles)
    assert sum(r.rows for r in results) > 0 and sum(r.shared_keys for r in results) > 0


def test_incremental_buckets_group_the_earlier_runs_artifact_too(corpus):  # noqa: F811
    settings = DedupSettings(incremental=True)
    keys_dirs = _signatures(corpus, settings, IOSettings(batch_rows=4))
    # first run: web alone (no earlier output yet: no artifact to group)
    deduplicate_outputs(corpus, INPUTS[:1], "reference", settings)
    first, results = _buckets(corpus, settings, keys_dirs[:1], "stored")
    assert all(r.used for r in results)
    deduplicate_outputs(corpus, INPUTS[:1], "stored", settings, signature_dirs=keys_dirs[:1], bucket_dirs=first)
    # second run: forum added; the buckets group web's accepted documents (the artifact) with both sources
    bucket_dirs, results = _buckets(corpus, settings, keys_dirs, "stored")
    reference = deduplicate_outputs(corpus, INPUTS, "reference", settings)
    stored = deduplicate_outputs(corpus, INPUTS, "stored", settings, signature_dirs=keys_dirs, bucket_dirs=bucket_dirs)
    assert stored.rows_in == reference.rows_in == 13 and stored.carried_over == reference.carried_over == 36
    assert stored.result.counts.removed_against_earlier_runs == reference.result.counts.removed_against_earlier_runs
    assert stored.result.counts.removed_near == 3  # forum's edits of web essays, found through the artifact
    assert stored.files == reference.files
    # committed: the artifact changed, so these buckets are stale for the next incremental run
    with pytest.raises(StaleBandBucketsError, match=r"b000 \(stale \(computed against another version"):
        deduplicate_outputs(corpus, INPUTS, "stored", settings, signature_dirs=keys_dirs, bucket_dirs=bucket_dirs)


def test_buckets_of_other_inputs_or_missing_are_refused_by_name(corpus):  # noqa: F811
    settings = DedupSettings()
    keys_dirs = _signatures(corpus, settings)
    bucket_dirs, _ = _buckets(corpus, settings, keys_dirs)
    missing = [*bucket_dirs[:-1], "nowhere/b007"]
    with pytest.raises(StaleBandBucketsError, match=r"not usable: b007 \(missing\) \(materialize those"):
        deduplicate_outputs(corpus, INPUTS, "dd", settings, signature_dirs=keys_dirs, bucket_dirs=missing)
    _commit(corpus, "web", [("web cleaned again, one document", "text", None)], 9_000)
    write_signature_partition(corpus, INPUTS[0], keys_dirs[0], settings)
    with pytest.raises(StaleBandBucketsError, match=r"b000 \(stale \(computed from other dedup_signatures"):
        deduplicate_outputs(corpus, INPUTS, "dd", settings, signature_dirs=keys_dirs, bucket_dirs=bucket_dirs)
    write_signature_partition(corpus, INPUTS[0], keys_dirs[0], DedupSettings(near={"threshold": 0.7}))
    with pytest.raises(StaleBandBucketsError, match=r"dedup_signatures/web \(computed with other dedup settings"):
        group_band_bucket(corpus, "b000", keys_dirs, "dedup_band_buckets/b000", settings)


@pytest.mark.parametrize("near", [{"storage": {"type": "memory"}}, {"method": "simhash"}, {"enabled": False}])
def test_bucket_partitions_are_no_ops_where_no_grouping_is_needed(corpus, near):  # noqa: F811
    settings = DedupSettings(near=near)
    keys_dirs = _signatures(corpus, settings)
    assert not corpus.exists(f"{keys_dirs[0]}/_bands")  # no band records written either
    bucket_dirs, results = _buckets(corpus, settings, keys_dirs)
    assert not any(r.used for r in results) and all(r.rows == 0 for r in results)
    assert "not used" in results[0].reason
    reference = deduplicate_outputs(corpus, INPUTS, "reference", settings)
    stored = deduplicate_outputs(corpus, INPUTS, "stored", settings, signature_dirs=keys_dirs, bucket_dirs=bucket_dirs)
    assert stored.files == reference.files
    assert TableSource(corpus, bucket_dirs[0]).num_rows == 0
