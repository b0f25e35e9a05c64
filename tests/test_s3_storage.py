"""Storage root and sources on S3, against a real S3 endpoint (moto's server on 127.0.0.1)."""

import json

import pytest

pytestmark = pytest.mark.s3

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")




def test_ingest_from_s3_to_s3_and_query(s3, tmp_path):
    from platform_assets.config import parse_config
    from platform_assets.ingest.run import ingest_source
    from platform_assets.ingest.validation import duplicate_ids
    from platform_assets.query import connect
    from platform_assets.storage import Storage

    client, bucket, endpoint = s3
    lines = "".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(50)) + "{bad json\n"
    client.put_object(Bucket=bucket, Key="raw/web/a.jsonl", Body=lines.encode())
    client.put_object(Bucket=bucket, Key="raw/web/b.jsonl", Body=b'{"text": "last"}\n')
    cfg = parse_config(
        {
            "storage": {"root": f"s3://{bucket}/platform", "s3": {"endpoint_url": endpoint}},
            "sources": [{"name": "web", "format": "jsonl", "path": f"s3://{bucket}/raw/web"}],
        },
        tmp_path,
    )
    storage = Storage(cfg.storage_root, cfg.s3_settings())
    result = ingest_source(cfg, "web", storage, "raw_documents/web")
    assert result.rows == 51 and result.quarantine_counts == {"malformed_json": 1}

    # (pyarrow also writes empty "dir/" marker objects; only the files matter)
    keys = sorted(
        o["Key"]
        for o in client.list_objects_v2(Bucket=bucket, Prefix="platform/")["Contents"]
        if not o["Key"].endswith("/")
    )
    assert keys == [
        "platform/raw_documents/web/_manifest.json",
        "platform/raw_documents/web/_quarantine.parquet",
        "platform/raw_documents/web/part-00000-00000.parquet",  # two small input files share one part
    ]
    con = connect(
        storage,
        {"docs": ("raw_documents/web", "part-*.parquet"), "quarantine": ("raw_documents/web", "_quarantine.parquet")},
    )
    assert con.execute("SELECT count(*) FROM docs").fetchone() == (51,)
    assert con.execute("SELECT uri, reason FROM quarantine").fetchall() == [
        (f"s3://{bucket}/raw/web/a.jsonl#line=51", "malformed_json")
    ]
    assert duplicate_ids(storage, "raw_documents/web").duplicates == 0

    # re-running replaces the output; stale files of the previous output disappear
    client.delete_object(Bucket=bucket, Key="raw/web/a.jsonl")
    again = ingest_source(cfg, "web", storage, "raw_documents/web")
    assert again.rows == 1
    assert con.execute("SELECT 1").fetchone() == (1,)
    manifest = json.loads(
        client.get_object(Bucket=bucket, Key="platform/raw_documents/web/_manifest.json")["Body"].read()
    )
    assert set(manifest["files"]) == {"_quarantine.parquet", "part-00000-00000.parquet"}
    leftovers = [
        o["Key"]
        for o in client.list_objects_v2(Bucket=bucket, Prefix="platform/raw_documents/.").get("Contents", [])
        if not o["Key"].endswith("/")
    ]
    assert leftovers == []


def test_pipeline_resource_uses_dagster_aws_s3_resource(s3, tmp_path, monkeypatch):
    import dagster as dg
    from dagster_aws.s3 import S3Resource

    from platform_assets.defs.raw_documents.assets import raw_documents
    from platform_assets.defs.raw_documents.partitions import source_partitions
    from platform_assets.defs.resources import PipelineResource

    client, bucket, endpoint = s3
    client.put_object(Bucket=bucket, Key="in/a.jsonl", Body=b'{"text": "hello from s3"}\n')
    cfg = {
        "storage": {"root": f"s3://{bucket}/out"},
        "sources": [{"name": "web", "format": "jsonl", "path": f"s3://{bucket}/in"}],
    }
    (tmp_path / "p.yaml").write_text(json.dumps(cfg))
    # credentials only through the resource: the environment's are removed
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    pipeline = PipelineResource(
        config_path=str(tmp_path / "p.yaml"),
        s3=S3Resource(
            endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        ),
    )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["web"])
        result = dg.materialize(
            [raw_documents], partition_key="web", resources={"pipeline": pipeline}, instance=instance
        )
    assert result.success
    mat = result.asset_materializations_for_node("raw_documents")[0]
    assert mat.metadata["uri"].value == f"s3://{bucket}/out/raw_documents/web"
    assert mat.metadata["rows"].value == 1


def test_manifest_on_s3_reads_media_inside_its_roots_only(s3, tmp_path):
    """A manifest in a bucket names images relative to itself and by s3:// URI: those under the
    source's roots are read (through the same S3 endpoint), one in another prefix is quarantined as
    path_outside_root without being fetched, a missing key is missing_file."""
    import io

    from PIL import Image

    from platform_assets.config import parse_config
    from platform_assets.ingest.run import ingest_source
    from platform_assets.storage import Storage

    client, bucket, endpoint = s3

    def png(color) -> bytes:
        buf = io.BytesIO()
        img = Image.new("RGB", (48, 40), color)
        img.putpixel((3, 3), (0, 0, 0))
        img.save(buf, format="PNG")
        return buf.getvalue()

    client.put_object(Bucket=bucket, Key="mm/media/a.png", Body=png((200, 0, 0)))
    client.put_object(Bucket=bucket, Key="mm/media/b.png", Body=png((0, 200, 0)))
    client.put_object(Bucket=bucket, Key="private/secret.png", Body=png((0, 0, 0)))
    rows = [{"modality": "image", "file": "media/a.png", "caption": "relative"},
            {"modality": "image", "file": f"s3://{bucket}/mm/media/b.png", "caption": "by uri"},
            {"modality": "image", "file": f"s3://{bucket}/private/secret.png", "caption": "another prefix"},
            {"modality": "image", "file": "media/../../private/secret.png", "caption": "dot-dot"},
            {"modality": "image", "file": "media/missing.png", "caption": "not there"}]
    client.put_object(Bucket=bucket, Key="mm/manifest.jsonl",
                      Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    cfg = parse_config(
        {"storage": {"root": f"s3://{bucket}/platform", "s3": {"endpoint_url": endpoint}},
         "sources": [{"name": "mm", "format": "manifest", "path": f"s3://{bucket}/mm/manifest.jsonl"}]},
        tmp_path,
    )
    storage = Storage(cfg.storage_root, cfg.s3_settings())
    result = ingest_source(cfg, "mm", storage, "raw_documents/mm")
    assert result.modalities == {"image": 2}
    assert result.quarantine_counts == {"missing_file": 1, "path_outside_root": 2}
    from platform_assets.parquet_parts import read_batches

    (batch,) = read_batches(storage, "raw_documents/mm", ["text", "media"])
    assert batch.column("text").to_pylist() == ["relative", "by uri"]
    assert [m[0]["uri"] for m in batch.column("media").to_pylist()] == [
        f"s3://{bucket}/mm/media/a.png", f"s3://{bucket}/mm/media/b.png"]


SUBSET_WHERE = "language = 'Python' AND license IN ('mit', 'apache-2.0')"
KILLED_SUBSET_RUN = """
import json, sys
from pathlib import Path
from platform_assets.config import parse_config
from platform_assets.ingest.run import ingest_source
from platform_assets.storage import Storage
cfg = parse_config(json.loads(sys.argv[1]), Path(sys.argv[2]))
ingest_source(cfg, "code", Storage(cfg.storage_root, cfg.s3_settings()), "raw_documents/code")
"""


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_subset_of_an_s3_source_resumes_after_sigkill_to_the_filtered_full_read(s3, tmp_path, fmt):
    """A streaming subset (predicate, projection, seeded shuffle buffer, row budget) of JSONL or Parquet
    objects in a bucket, written to a storage root in the same bucket: killed at its third checkpoint
    (which lives in the bucket), the rerun resumes there and commits the same bytes as an uninterrupted
    run, and both hold exactly the rows a full read filtered by the same predicate (DuckDB) holds."""
    import io
    import os
    import random
    import subprocess
    import sys

    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from platform_assets.config import parse_config
    from platform_assets.ingest.run import ingest_source
    from platform_assets.storage import Storage

    client, bucket, endpoint = s3
    rng = random.Random(0)
    parts = [[{"text": f"file {k} doc {i} " + "y" * rng.randrange(1, 60), "language": rng.choice(["Python", "Go", "C"]),
               "license": rng.choice(["mit", "gpl-3.0", "apache-2.0", None]), "stars": i} for i in range(2500)]
             for k in range(3)]
    for k, rows in enumerate(parts):
        if fmt == "jsonl":
            body = "".join(json.dumps(r) + "\n" for r in rows).encode()
        else:
            buf = io.BytesIO()
            pq.write_table(pa.Table.from_pylist(rows), buf, row_group_size=700)
            body = buf.getvalue()
        client.put_object(Bucket=bucket, Key=f"hub/code/part-{k}.{fmt}", Body=body)
    subset = {"where": SUBSET_WHERE, "columns": ["text", "language", "license"], "shuffle_buffer": 50, "seed": 3,
              "max_rows": 600, "checkpoint_rows": 100}

    def config(out: str) -> dict:
        return {"storage": {"root": f"s3://{bucket}/{out}", "s3": {"endpoint_url": endpoint}},
                "sources": [{"name": "code", "format": fmt, "path": f"s3://{bucket}/hub/code", "subset": subset}]}

    def run(out: str):
        cfg = parse_config(config(out), tmp_path)
        return ingest_source(cfg, "code", Storage(cfg.storage_root, cfg.s3_settings()), "raw_documents/code")

    def committed(out: str) -> dict[str, bytes]:
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=f"{out}/")["Contents"]
                if not o["Key"].endswith("/")]
        return {k.split("/", 1)[1]: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}

    whole = run("whole")
    assert whole.rows == 600 and whole.metadata["subset_stop"] == "max_rows"
    # reading stopped early: ~1 row in 6 passes, so 600 are found within the first ~3,600 of 7,500 rows
    assert whole.metadata["rows_seen"] < 5000

    env = {**os.environ, "PLATFORM_FAULT_KILL_AT": "subset-checkpoint-3:raw_documents/code"}
    proc = subprocess.run([sys.executable, "-c", KILLED_SUBSET_RUN, json.dumps(config("killed")), str(tmp_path)],
                          env=env, capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert not any(k.startswith("raw_documents/code/") for k in committed("killed"))  # nothing committed yet
    resumed = run("killed")
    assert 300 <= resumed.metadata["subset_resumed_at_rows"] < 600 and resumed.rows == 600

    a = {k: v for k, v in committed("whole").items() if k.startswith("raw_documents/code/")}
    b = {k: v for k, v in committed("killed").items() if k.startswith("raw_documents/code/")}
    assert sorted(a) == sorted(b) and all(a[k] == b[k] for k in a)
    assert not [k for k in committed("killed") if ".code.subset-" in k]  # the checkpoint dir is gone

    whole_table = pa.Table.from_pylist([r for rows in parts for r in rows])  # noqa: F841 - DuckDB scans it
    filtered = {r[0] for r in duckdb.execute(f"SELECT text FROM whole_table WHERE {SUBSET_WHERE}").fetchall()}
    kept = [pq.read_table(io.BytesIO(v))["text"].to_pylist() for k, v in sorted(a.items())
            if k.rsplit("/", 1)[1].startswith("part-")]
    kept_texts = [t for part in kept for t in part]
    assert len(kept_texts) == len(set(kept_texts)) == 600 and set(kept_texts) <= filtered
