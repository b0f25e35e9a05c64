"""Documents schema v2 on disk: v1 outputs read as v2 through the one part reader; newer ones refused."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.parquet_parts import output_schema, read_batches
from platform_assets.schema import DOCUMENTS_SCHEMA, DOCUMENTS_V1_TAG, SchemaVersionError
from platform_assets.storage import Storage


def _v1_part(path, tag: str = DOCUMENTS_V1_TAG) -> None:
    fields = [f for f in DOCUMENTS_SCHEMA if f.name != "media"]
    rows = [{"id": f"d{i}", "source": "s", "text": f"text {i}", "modality": "text", "uri": f"u{i}",
             "license": None, "meta": None, "ingested_at": None} for i in range(3)]
    table = pa.Table.from_pylist(rows, schema=pa.schema(fields, metadata={b"platform.schema": tag.encode()}))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.append_column("lang", pa.array(["en"] * 3)), path)


def test_a_v1_output_reads_as_v2(tmp_path):
    _v1_part(tmp_path / "cleaned_documents" / "web" / "part-00000.parquet")
    storage = Storage(str(tmp_path))
    (batch,) = read_batches(storage, "cleaned_documents/web")
    assert batch.schema.names == [*DOCUMENTS_SCHEMA.names, "lang"]
    assert batch.schema.metadata == DOCUMENTS_SCHEMA.metadata
    assert batch.column("media").to_pylist() == [None] * 3 and batch.column("lang").to_pylist() == ["en"] * 3
    (projected,) = read_batches(storage, "cleaned_documents/web", ["id", "media"])
    assert projected.schema.names == ["id", "media"] and projected.column("id").to_pylist() == ["d0", "d1", "d2"]
    assert output_schema(storage, "cleaned_documents/web").field("media").type == DOCUMENTS_SCHEMA.field("media").type


def test_a_newer_documents_output_is_a_clear_error(tmp_path):
    _v1_part(tmp_path / "raw_documents" / "web" / "part-00000.parquet", "platform.documents/9")
    with pytest.raises(SchemaVersionError, match=r"part-00000.parquet: written with schema 'platform.documents/9'"):
        list(read_batches(Storage(str(tmp_path)), "raw_documents/web"))
