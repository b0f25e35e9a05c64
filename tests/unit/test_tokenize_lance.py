"""tokenized_documents with `lance: true`: each (split, source) set also as a Lance dataset holding the
same rows in the same order as its Parquet parts, readable by row (`take`), every file in the output's
manifest; and on S3-like (non-local) outputs through the same staged directory."""

from __future__ import annotations

import os
import threading

import lance
import pyarrow as pa
import pytest
from test_tokenize_stage import SPLITS, splits, tokenizer_rel  # noqa: F401 - fixtures

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import read_batches
from platform_assets.storage import Storage, file_sha256
from platform_assets.tokenize.lance_documents import LANCE_DIR, LanceDocumentSets, set_dir
from platform_assets.tokenize.settings import TokenizeSettings
from platform_assets.tokenize.stage import tokenize_outputs

OUT = "tokenized_documents/_all"


def test_every_set_is_also_a_lance_dataset_of_the_same_rows(storage: Storage, splits, tokenizer_rel):  # noqa: F811
    result = tokenize_outputs(storage, SPLITS, tokenizer_rel, OUT, TokenizeSettings(lance=True),
                              io=IOSettings(batch_rows=40, part_max_bytes=4000))  # several batches per set
    assert [s["lance"] for s in result.sets] == [set_dir(s["split"], s["source"]) for s in result.sets]
    for s in result.sets:
        parquet = pa.Table.from_batches(list(read_batches(storage, f"{OUT}/{s['dir']}")))
        ds = lance.dataset(storage.path(f"{OUT}/{s['lance']}"))
        assert ds.schema.remove_metadata() == parquet.schema.remove_metadata()
        assert ds.to_table().to_pylist() == parquet.to_pylist()  # same rows, same order
        rows = [parquet.num_rows - 1, 0, parquet.num_rows // 2]
        assert ds.take(rows, columns=["id", "input_ids"]).to_pylist() == [
            {"id": parquet["id"][r].as_py(), "input_ids": parquet["input_ids"][r].as_py()} for r in rows]
    lance_files = {name: info for name, info in result.files.items() if name.startswith("lance/")}
    assert any("/data/" in name for name in lance_files) and any("/_versions/" in name for name in lance_files)
    for name, info in lance_files.items():  # in the manifest, hashed like the parquet parts
        assert info["sha256"] == file_sha256(storage.fs, storage.path(f"{OUT}/{name}"))

    plain = tokenize_outputs(storage, SPLITS, tokenizer_rel, "plain/_all", TokenizeSettings(),
                             io=IOSettings(batch_rows=40, part_max_bytes=4000))
    assert "lance" not in plain.sets[0] and not [n for n in plain.files if n.startswith("lance/")]
    # the Parquet side does not change with lance on
    assert {n: i["sha256"] for n, i in plain.files.items()} == {
        n: i["sha256"] for n, i in result.files.items() if not n.startswith("lance/")}


class _NotLocal:
    """A staged directory on a filesystem Lance cannot write to directly (as S3 through pyarrow): the
    datasets are written to a local temporary directory and copied in at close."""

    def __init__(self, staged):
        self._staged, self.fs = staged, pa.fs.SubTreeFileSystem("/", staged.fs)

    def __getattr__(self, name):
        return getattr(self._staged, name)


def test_a_non_local_output_gets_the_datasets_copied_in(storage: Storage):
    schema = pa.schema([("id", pa.string()), ("input_ids", pa.list_(pa.int32()))])
    batch = pa.RecordBatch.from_pylist([{"id": f"d{i}", "input_ids": list(range(i))} for i in range(50)],
                                       schema=schema)
    with storage.staged_dir("out") as staged:
        sets = LanceDocumentSets(_NotLocal(staged), schema)
        sets.add(("train", "web"), batch)
        sets.add(("train", "web"), batch.slice(10, 5))
        assert sets.close() == ["lance/train/web.lance"]
    ds = lance.dataset(storage.path("out/lance/train/web.lance"))
    assert ds.count_rows() == 55 and ds.take([52], columns=["id"]).to_pylist() == [{"id": "d12"}]
    assert any(n.startswith("lance/train/web.lance/data/") for n in staged.manifest)


def test_a_failed_write_is_an_error_not_a_hang(storage: Storage):
    schema = pa.schema([("id", pa.string())])
    with pytest.raises(Exception, match="lance write failed"), storage.staged_dir("bad") as staged:
        sets = LanceDocumentSets(staged, schema)
        sets.add(("train", "web"), pa.RecordBatch.from_pylist([{"x": 1}]))  # not the declared schema
        sets.close()


def _writer_threads(uri: str) -> list:
    return [t for t in threading.enumerate() if t.name == f"lance-write-{uri}" and t.is_alive()]


def test_a_producer_failing_mid_way_ends_the_writes_and_leaves_no_dataset(storage: Storage):
    """The batches come from a generator that raises after 2: the error propagates, the writer threads
    end (they waited on their queues for ever) and neither set's partial dataset is left or committed."""
    schema = pa.schema([("id", pa.string()), ("input_ids", pa.list_(pa.int32()))])

    def batches():
        for i in range(2):
            yield pa.RecordBatch.from_pylist([{"id": f"d{i}-{j}", "input_ids": [j] * 3} for j in range(2000)],
                                             schema=schema)
        raise RuntimeError("the tokenizer failed")

    with storage.staged_dir("failed") as staged:
        uris = [staged.path(set_dir("train", s)) for s in ("web", "code")]
        with pytest.raises(RuntimeError, match="the tokenizer failed"), LanceDocumentSets(staged, schema) as sets:
            for batch in batches():
                sets.add(("train", "web"), batch)
                sets.add(("train", "code"), batch.slice(0, 10))
                assert all(_writer_threads(uri) for uri in uris)  # both writes are running
        assert not [uri for uri in uris if _writer_threads(uri)]
        assert not [uri for uri in uris if os.path.exists(uri)]
    assert not [f for _, _, files in os.walk(storage.path(f"failed/{LANCE_DIR}")) for f in files]


def test_a_failure_while_closing_aborts_the_writes_not_finished(storage: Storage):
    schema = pa.schema([("id", pa.string())])
    with pytest.raises(Exception, match="lance write failed"), storage.staged_dir("bad2") as staged:
        with LanceDocumentSets(staged, schema) as sets:
            sets.add(("train", "a"), pa.RecordBatch.from_pylist([{"x": 1}]))  # not the declared schema: fails
            sets.add(("train", "b"), pa.RecordBatch.from_pylist([{"id": "ok"}], schema=schema))
            uri = staged.path(set_dir("train", "b"))
            sets.close()  # "a" fails first (sorted): "b" is still running and must not be left so
    assert not _writer_threads(uri)


def test_the_stage_failing_mid_way_leaves_no_writer_thread(storage: Storage, splits, tokenizer_rel,  # noqa: F811
                                                            monkeypatch):
    from platform_assets.tokenize import stage

    encode_parts, calls = stage.DocumentEncoder.encode_parts, []

    def failing(self, batch):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("encoding failed")
        return encode_parts(self, batch)

    monkeypatch.setattr(stage.DocumentEncoder, "encode_parts", failing)
    with pytest.raises(RuntimeError, match="encoding failed"):
        tokenize_outputs(storage, SPLITS, tokenizer_rel, "failed_stage/_all", TokenizeSettings(lance=True),
                         io=IOSettings(batch_rows=40, part_max_bytes=4000))
    assert len(calls) == 3
    assert not [t for t in threading.enumerate() if t.name.startswith("lance-write-") and "failed_stage" in t.name
                and t.is_alive()]


def test_a_set_is_fed_to_lance_in_slices_of_a_row_group(storage: Storage):
    """The write's queue holds QUEUE_RUNS record batches: whole input batches there kept several input
    batches alive behind the stage (peak RSS grew with the input's batch count); slices bound it."""
    from platform_assets.tokenize.lance_documents import ROWS_PER_GROUP

    schema = pa.schema([("id", pa.string()), ("input_ids", pa.list_(pa.int32()))])
    rows = 2 * ROWS_PER_GROUP + 5
    batch = pa.RecordBatch.from_pylist([{"id": f"d{i}", "input_ids": [i % 7] * 2} for i in range(rows)], schema=schema)
    with storage.staged_dir("sliced") as staged:
        with LanceDocumentSets(staged, schema) as sets:
            sets.add(("train", "web"), batch)
            write = sets._writes[("train", "web")]  # noqa: SLF001 - the count of record batches handed to Lance
            assert sets.close() == ["lance/train/web.lance"]
        assert write.batches == 3  # 1024 + 1024 + 5 rows
    ds = lance.dataset(storage.path("sliced/lance/train/web.lance"))
    assert ds.to_table().to_pylist() == batch.to_pylist()
