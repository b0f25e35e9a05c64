"""Documents schema on disk: v1 and v2 outputs read as v3 through the one part reader; newer ones refused."""

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


def test_a_v2_output_with_media_reads_as_v3_with_nothing_measured(tmp_path):
    """v2 media items had kind/mime/uri/sha256/bytes only: they keep them, and every measured field
    (width, phash, duration_s, ...) reads as null; text rows keep a null media list."""
    from platform_assets.schema import DOCUMENTS_V2_TAG, MEDIA_ITEM_V2_FIELDS, MEDIA_MEASURED_FIELDS

    item_v2 = pa.struct([f for f in DOCUMENTS_SCHEMA.field("media").type.value_type if f.name in MEDIA_ITEM_V2_FIELDS])
    fields = [f if f.name != "media" else pa.field("media", pa.list_(pa.field("element", item_v2, nullable=False)))
              for f in DOCUMENTS_SCHEMA]
    rows = [{"id": "img", "source": "s", "text": "", "modality": "image", "uri": "a.png", "license": None,
             "meta": None, "ingested_at": None,
             "media": [{"kind": "image", "mime": "image/png", "uri": "a.png", "sha256": "ab" * 32, "bytes": b"png"}]},
            {"id": "txt", "source": "s", "text": "hello", "modality": "text", "uri": "b.txt", "license": None,
             "meta": None, "ingested_at": None, "media": None}]
    v2_schema = pa.schema(fields, metadata={b"platform.schema": DOCUMENTS_V2_TAG.encode()})
    table = pa.Table.from_pylist(rows, schema=v2_schema)
    path = tmp_path / "raw_documents" / "m" / "part-00000.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    storage = Storage(str(tmp_path))
    (batch,) = read_batches(storage, "raw_documents/m")
    assert batch.schema.equals(DOCUMENTS_SCHEMA, check_metadata=True)
    image, text = batch.column("media").to_pylist()
    assert text is None
    (item,) = image
    assert (item["kind"], item["sha256"], item["bytes"]) == ("image", "ab" * 32, b"png")
    assert all(item[name] is None for name in MEDIA_MEASURED_FIELDS)
    (projected,) = read_batches(storage, "raw_documents/m", ["media"])  # a projection upgrades too
    assert projected.column("media").type == DOCUMENTS_SCHEMA.field("media").type
    assert output_schema(storage, "raw_documents/m").equals(DOCUMENTS_SCHEMA)


def test_media_item_fields_are_read_without_their_bytes(tmp_path):
    """`media.sha256` / `media.phash` project the items' fields: stages that key on them never read
    the bytes; the batch's column is still called `media`."""
    from platform_assets.contracts import DEFAULT_IO
    from platform_assets.parquet_parts import TableSink

    item = {f.name: None for f in DOCUMENTS_SCHEMA.field("media").type.value_type}
    item.update(kind="image", mime="image/png", uri="a.png", sha256="cd" * 32, bytes=b"x" * 1000, phash=7)
    rows = [{"id": "img", "source": "s", "text": "", "modality": "image", "uri": "a.png", "license": None,
             "meta": None, "ingested_at": None, "media": [item]}]
    storage = Storage(str(tmp_path))
    with TableSink(storage, "raw_documents/m", DOCUMENTS_SCHEMA, DEFAULT_IO) as sink:
        sink.write(pa.Table.from_pylist(rows, schema=DOCUMENTS_SCHEMA))
    (batch,) = read_batches(storage, "raw_documents/m", ["id", "media.sha256", "media.phash"])
    assert batch.schema.names == ["id", "media"]
    assert batch.column("media").to_pylist() == [[{"sha256": "cd" * 32, "phash": 7}]]
