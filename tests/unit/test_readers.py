"""Every reader, every quarantine reason, and the guarantee that nothing valid is lost."""

import csv
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.ingest.readers import source_units
from platform_assets.ingest.records import QuarantineSink, RecordBlock
from platform_assets.ingest.run import QUARANTINE_FILE, ingest_source
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id


def _read_output(root: Path, rel: str) -> tuple[pa.Table, pa.Table]:
    out = root / "out" / rel
    parts = sorted(out.glob("part-*.parquet"))
    docs = pa.concat_tables([pq.read_table(p) for p in parts]) if parts else DOCUMENTS_SCHEMA.empty_table()
    return docs, pq.read_table(out / QUARANTINE_FILE)


def _reasons(quarantine: pa.Table) -> dict[str, str]:
    return {u: r for u, r in zip(quarantine["uri"].to_pylist(), quarantine["reason"].to_pylist(), strict=True)}


def test_jsonl_good_and_bad_lines(tmp_path, write_config, storage):
    src = tmp_path / "web"
    src.mkdir()
    good = [{"text": f"document number {i}", "url": f"https://e.org/{i}", "date": "2024-05-01"} for i in range(5)]
    lines = [json.dumps(g).encode() for g in good[:3]]
    lines += [
        b'{"text": "unterminated',  # 4 malformed
        b'{"text": "caf\xe9"}',  # 5 invalid utf-8
        b'{"url": "no text"}',  # 6 missing text
        b'{"text": null}',  # 7 missing text (null)
        b'{"text": 42}',  # 8 not a string
        b'{"text": "  \\n "}',  # 9 blank
        b"[1, 2]",  # 10 not an object
        b"",  # 11 blank line: skipped, not quarantined
    ]
    lines += [json.dumps(g).encode() for g in good[3:]]
    (src / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    cfg = write_config([{"name": "web", "format": "jsonl", "path": str(src), "license": "cc-by"}])
    result = ingest_source(cfg, "web", storage, "raw_documents/web")
    docs, quarantine = _read_output(tmp_path, "raw_documents/web")

    assert result.rows == 5 and docs.num_rows == 5
    assert docs["text"].to_pylist() == [g["text"] for g in good]
    assert docs.schema.equals(DOCUMENTS_SCHEMA, check_metadata=True)
    base = str(src / "a.jsonl")
    assert _reasons(quarantine) == {
        f"{base}#line=4": "malformed_json",
        f"{base}#line=5": "invalid_utf8",
        f"{base}#line=6": "missing_text_field",
        f"{base}#line=7": "missing_text_field",
        f"{base}#line=8": "text_not_string",
        f"{base}#line=9": "empty_text",
        f"{base}#line=10": "not_a_json_object",
    }
    assert result.quarantine_counts == {
        "empty_text": 1,
        "invalid_utf8": 1,
        "malformed_json": 1,
        "missing_text_field": 2,
        "not_a_json_object": 1,
        "text_not_string": 1,
    }
    # meta keeps the other fields as JSON, dates as the strings they were
    assert json.loads(docs["meta"][0].as_py()) == {"date": "2024-05-01", "url": "https://e.org/0"}
    assert docs["uri"].to_pylist()[3] == f"{base}#line=12"
    assert set(docs["license"].to_pylist()) == {"cc-by"}
    # the id hashes the location relative to the source's directory, so it survives moving the corpus
    assert docs["id"][0].as_py() == document_id("web", "a.jsonl#line=1", "document number 0")


def test_jsonl_fast_and_per_line_paths_give_identical_records(tmp_path, write_config):
    rows = [
        {
            "text": f"doc {i} " + "é" * (i % 7),
            "n": i,
            "tags": ["a", "b"],
            "when": f"2023-01-0{1 + i % 9}",
            "nested": {"k": i},
        }
        for i in range(300)
    ]
    (tmp_path / "d.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    cfg = write_config([{"name": "d", "format": "jsonl", "path": str(tmp_path / "d.jsonl")}])

    from platform_assets.ingest.readers import source_files
    from platform_assets.ingest.readers.jsonl import read_jsonl

    ctx, _, files = source_files(cfg, "d")

    def flatten(fast: bool):
        out = []
        with ctx.fs.open_input_stream(files[0].path) as stream:
            for item in read_jsonl(ctx, files[0], stream, "text", None, fast=fast):
                if isinstance(item, RecordBlock):
                    out += list(zip(item.texts.to_pylist(), item.uris, item.metas, strict=True))
                else:
                    out.append((item.text, item.uri, item.meta))
        return out, any_block

    any_block = None
    fast, _ = flatten(True)
    slow, _ = flatten(False)
    assert fast == slow and len(fast) == 300
    with ctx.fs.open_input_stream(files[0].path) as stream:
        assert isinstance(next(read_jsonl(ctx, files[0], stream, "text", None)), RecordBlock)


def test_compressed_jsonl_and_glob_paths(tmp_path, write_config, storage):
    (tmp_path / "shards").mkdir()
    for i in range(2):
        with gzip.open(tmp_path / "shards" / f"part-{i}.jsonl.gz", "wb") as f:
            f.write(b'{"text": "hello %d"}\n' % i)
    (tmp_path / "shards" / "notes.md").write_text("not matched by the glob")
    cfg = write_config([{"name": "gz", "format": "jsonl", "path": str(tmp_path / "shards" / "*.jsonl.gz")}])
    result = ingest_source(cfg, "gz", storage, "raw_documents/gz")
    docs, _ = _read_output(tmp_path, "raw_documents/gz")
    assert result.input_files == 2 and docs["text"].to_pylist() == ["hello 0", "hello 1"]


def test_csv_ragged_rows_invalid_bytes_and_multiline_fields(tmp_path, write_config, storage):
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["title", "text"])
        w.writerow(["one", "first document"])
        w.writerow(["two", "a field with\na newline, quoted"])
        w.writerow(["three", "x", "an extra field"])  # ragged
        w.writerow(["four", ""])  # empty text
    with path.open("ab") as f:
        f.write(b"five,caf\xe9 latin-1\n")  # invalid UTF-8
        f.write(b"six,last document\n")
    cfg = write_config([{"name": "t", "format": "csv", "path": str(path)}])
    result = ingest_source(cfg, "t", storage, "raw_documents/t")
    docs, quarantine = _read_output(tmp_path, "raw_documents/t")
    assert docs["text"].to_pylist() == ["first document", "a field with\na newline, quoted", "last document"]
    assert [json.loads(m)["title"] for m in docs["meta"].to_pylist()] == ["one", "two", "six"]
    assert _reasons(quarantine) == {
        f"{path}#line=5": "ragged_csv_row",
        f"{path}#line=6": "empty_text",
        f"{path}#line=7": "invalid_utf8",
    }
    assert result.quarantined == 3


def test_csv_without_text_column_is_quarantined_as_a_file(tmp_path, write_config, storage):
    (tmp_path / "t.csv").write_text("title,body\na,b\n")
    cfg = write_config([{"name": "t", "format": "csv", "path": str(tmp_path / "t.csv")}])
    result = ingest_source(cfg, "t", storage, "raw_documents/t")
    assert result.rows == 0 and result.quarantine_counts == {"missing_text_field": 1}


def test_csv_legacy_encoding_is_decoded(tmp_path, write_config, storage):
    (tmp_path / "t.csv").write_bytes("text\nété à Paris\n".encode("cp1252"))
    cfg = write_config([{"name": "t", "format": "csv", "path": str(tmp_path / "t.csv"), "encoding": "cp1252"}])
    ingest_source(cfg, "t", storage, "raw_documents/t")
    docs, _ = _read_output(tmp_path, "raw_documents/t")
    assert docs["text"].to_pylist() == ["été à Paris"]


def test_parquet_string_binary_and_wrong_types(tmp_path, write_config, storage):
    d = tmp_path / "pq"
    d.mkdir()
    pq.write_table(pa.table({"text": ["alpha", None, "gamma", "  "], "score": [1.5, 2.0, 3.0, 4.0]}), d / "a.parquet")
    pq.write_table(pa.table({"text": pa.array([b"bytes ok", b"\xff\xfe bad"], pa.binary())}), d / "b.parquet")
    pq.write_table(pa.table({"text": [1, 2, 3]}), d / "c.parquet")
    (d / "d.parquet").write_bytes(b"this is not parquet at all")
    cfg = write_config([{"name": "p", "format": "parquet", "path": str(d)}])
    result = ingest_source(cfg, "p", storage, "raw_documents/p")
    docs, quarantine = _read_output(tmp_path, "raw_documents/p")
    assert docs["text"].to_pylist() == ["alpha", "gamma", "bytes ok"]
    assert json.loads(docs["meta"][1].as_py()) == {"score": 3.0}
    assert _reasons(quarantine) == {
        f"{d}/a.parquet#row=1": "missing_text_field",
        f"{d}/a.parquet#row=3": "empty_text",
        f"{d}/b.parquet#row=1": "invalid_utf8",
        f"{d}/c.parquet": "text_not_string",
        f"{d}/d.parquet": "unreadable_file",
    }
    assert result.rows == 3


def test_text_per_line_and_per_file(tmp_path, write_config, storage):
    d = tmp_path / "txt"
    d.mkdir()
    (d / "a.txt").write_bytes(b"first line\n\n   \nsecond line\n\xff broken\nthird\n\x00\x01 junk\nlast\n")
    (d / "b.txt").write_bytes(b"")
    cfg = write_config(
        [
            {"name": "lines", "format": "text", "unit": "line", "path": str(d)},
            {"name": "files", "format": "text", "unit": "file", "path": str(d)},
        ]
    )
    ingest_source(cfg, "lines", storage, "raw_documents/lines")
    docs, quarantine = _read_output(tmp_path, "raw_documents/lines")
    assert docs["text"].to_pylist() == ["first line", "second line", "third", "last"]
    assert _reasons(quarantine) == {f"{d}/a.txt#line=5": "invalid_utf8", f"{d}/a.txt#line=7": "binary_record",
                                    f"{d}/b.txt": "empty_file"}
    ingest_source(cfg, "files", storage, "raw_documents/files")
    docs, quarantine = _read_output(tmp_path, "raw_documents/files")
    assert docs.num_rows == 0  # one document per file: its NUL bytes decide for all of it
    assert _reasons(quarantine) == {f"{d}/a.txt": "binary_file", f"{d}/b.txt": "empty_file"}


def test_folder_of_documents(tmp_path, write_config, storage):
    d = tmp_path / "site"
    (d / "blog").mkdir(parents=True)
    (d / "index.html").write_text("<!DOCTYPE html><html><body><p>Welcome</p></body></html>")
    (d / "blog" / "post.md").write_text("# A post\n\nWith text.")
    (d / "blog" / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00")
    (d / "blank.txt").write_text("   \n")
    (d / ".hidden").write_text("never read")
    cfg = write_config([{"name": "site", "format": "folder", "path": str(d)}])
    result = ingest_source(cfg, "site", storage, "raw_documents/site")
    docs, quarantine = _read_output(tmp_path, "raw_documents/site")
    assert dict(zip(docs["uri"].to_pylist(), docs["modality"].to_pylist(), strict=True)) == {
        f"{d}/blog/post.md": "text",
        f"{d}/index.html": "html",
    }
    assert json.loads(docs["meta"][0].as_py()) == {"bytes": 20, "path": "blog/post.md"}
    assert _reasons(quarantine) == {f"{d}/blog/photo.jpg": "binary_file", f"{d}/blank.txt": "empty_file"}
    assert result.input_files == 4


def test_documents_v1_outputs_are_upgraded_on_read_and_newer_ones_refused(tmp_path):
    from platform_assets.schema import DOCUMENTS_V1_TAG, SchemaVersionError, upgrade_documents

    v1_fields = [f for f in DOCUMENTS_SCHEMA if f.name != "media"]
    v1 = pa.RecordBatch.from_pylist(
        [{"id": "a", "source": "s", "text": "t", "modality": "text", "uri": "u", "license": None, "meta": None,
          "ingested_at": None}],
        schema=pa.schema(v1_fields, metadata={b"platform.schema": DOCUMENTS_V1_TAG.encode()}))
    up = upgrade_documents(v1.append_column("lang", pa.array(["en"])))
    assert up.schema.names == [*DOCUMENTS_SCHEMA.names, "lang"]
    assert up.schema.metadata == DOCUMENTS_SCHEMA.metadata and up.column("media").to_pylist() == [None]
    future = v1.replace_schema_metadata({b"platform.schema": b"platform.documents/99"})
    with pytest.raises(SchemaVersionError, match="cleaned_documents/web: written with schema 'platform.documents/99'"):
        upgrade_documents(future, "cleaned_documents/web")


def test_unreadable_file_keeps_records_read_before_the_failure(tmp_path, write_config, storage):
    d = tmp_path / "gz"
    d.mkdir()
    good = gzip.compress(b"".join(b'{"text": "record %d"}\n' % i for i in range(1000)))
    (d / "a.jsonl.gz").write_bytes(good[: len(good) // 2])  # truncated gzip stream
    (d / "b.jsonl").write_bytes(b'{"text": "intact"}\n')
    (d / "c.jsonl").write_bytes(b"\x00\x01\x02binary junk\x00" * 10 + b'\n{"text": "after the junk"}\n')
    cfg = write_config([{"name": "gz", "format": "jsonl", "path": str(d)}])
    result = ingest_source(cfg, "gz", storage, "raw_documents/gz")
    docs, quarantine = _read_output(tmp_path, "raw_documents/gz")
    reasons = _reasons(quarantine)
    # every line the cut stream still holds whole is kept; the tail is quarantined at its line
    kept = [t for t in docs["text"].to_pylist() if t.startswith("record ")]
    assert kept == [f"record {i}" for i in range(len(kept))] and len(kept) > 400
    assert reasons[f"{d}/a.jsonl.gz#line={len(kept) + 1}"] == "unreadable_file"
    # a JSONL line of binary junk costs that line, not the file (per record, not per file)
    assert reasons[f"{d}/c.jsonl#line=1"] == "malformed_json"
    assert {"intact", "after the junk"} <= set(docs["text"].to_pylist())
    assert result.rows == docs.num_rows


def test_huge_document_is_quarantined_not_loaded(tmp_path, write_config, storage):
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"text": "small"}\n{"text": "' + b"a" * 300_000 + b'"}\n{"text": "after"}\n')
    cfg = write_config([{"name": "b", "format": "jsonl", "path": str(path)}], ingest={"max_document_bytes": 100_000})
    result = ingest_source(cfg, "b", storage, "raw_documents/b")
    docs, quarantine = _read_output(tmp_path, "raw_documents/b")
    assert docs["text"].to_pylist() == ["small", "after"]
    assert _reasons(quarantine) == {f"{path}#line=2": "document_too_large"}
    assert result.quarantined == 1


def test_huggingface_local_directory_and_saved_dataset(tmp_path, write_config, storage):
    import datasets

    hub_layout = tmp_path / "hub" / "data"
    hub_layout.mkdir(parents=True)
    pq.write_table(
        pa.table({"content": ["one", "two", None], "lang": ["en", "de", "fr"]}),
        hub_layout / "train-00000-of-00001.parquet",
    )
    datasets.Dataset.from_dict({"text": ["saved a", "saved b"]}).save_to_disk(str(tmp_path / "saved"))
    cfg = write_config(
        [
            {"name": "hub", "format": "hf", "path": str(tmp_path / "hub"), "text_field": "content"},
            {"name": "saved", "format": "hf", "path": str(tmp_path / "saved")},
        ]
    )
    result = ingest_source(cfg, "hub", storage, "raw_documents/hub")
    docs, quarantine = _read_output(tmp_path, "raw_documents/hub")
    assert docs["text"].to_pylist() == ["one", "two"]
    assert json.loads(docs["meta"][1].as_py()) == {"lang": "de"}
    assert quarantine["reason"].to_pylist() == ["missing_text_field"] and result.quarantined == 1
    ingest_source(cfg, "saved", storage, "raw_documents/saved")
    docs, _ = _read_output(tmp_path, "raw_documents/saved")
    assert docs["text"].to_pylist() == ["saved a", "saved b"]


def test_hub_id_offline_is_a_clear_error(write_config, tmp_path, storage):
    from platform_assets.ingest.readers.huggingface import DatasetLoadError

    cfg = write_config([{"name": "hub", "format": "hf", "path": "someorg/somedataset"}])
    with pytest.raises(DatasetLoadError, match="source 'hub': cannot load dataset 'someorg/somedataset'"):
        ingest_source(cfg, "hub", storage, "raw_documents/hub")
    assert not (tmp_path / "out" / "raw_documents" / "hub").exists()


def test_same_input_gives_byte_identical_output(tmp_path, write_config, storage):
    (tmp_path / "a.jsonl").write_bytes(b"".join(b'{"text": "doc %d", "k": %d}\n' % (i, i) for i in range(2000)))
    cfg = write_config(
        [{"name": "a", "format": "jsonl", "path": str(tmp_path / "a.jsonl")}], io={"batch_rows": 300}
    )
    first = ingest_source(cfg, "a", storage, "raw_documents/a").files
    second = ingest_source(cfg, "a", storage, "raw_documents/a").files
    assert first == second and len([n for n in first if n.startswith("part-")]) == 1


def test_batches_bound_memory_and_parts_rotate(tmp_path, write_config, storage):
    (tmp_path / "a.jsonl").write_bytes(b"".join(b'{"text": "%s"}\n' % (b"w" * 1000) for _ in range(500)))
    cfg = write_config(
        [{"name": "a", "format": "jsonl", "path": str(tmp_path / "a.jsonl")}],
        io={"batch_rows": 50, "part_max_bytes": 100_000},
    )
    result = ingest_source(cfg, "a", storage, "raw_documents/a")
    assert result.rows == 500 and len(result.parts) >= 4
    md = pq.ParquetFile(tmp_path / "out" / "raw_documents" / "a" / "part-00000-00000.parquet").metadata
    assert max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 50


def test_many_small_files_share_parts_by_position(tmp_path, write_config, storage):
    """A folder of 754 one-document files is one part of 754 rows, not 754 one-row parts, and the
    grouping depends on positions and sizes only."""
    d = tmp_path / "pages"
    d.mkdir()
    for i in range(754):
        (d / f"p{i:04d}.txt").write_text(f"page {i} of a folder of small documents\n")
    cfg = write_config([{"name": "f", "format": "folder", "path": str(d)}])
    result = ingest_source(cfg, "f", storage, "raw_documents/f")
    assert result.rows == 754 and result.input_files == 754 and result.input_groups == 1
    assert result.parts == ["part-00000-00000.parquet"]
    md = pq.ParquetFile(tmp_path / "out" / "raw_documents" / "f" / result.parts[0]).metadata
    assert md.num_rows == 754 and md.num_row_groups == 1
    capped = write_config([{"name": "f", "format": "folder", "path": str(d)}],
                          ingest={"group_max_files": 300}, io={"part_max_rows": 100})
    again = ingest_source(capped, "f", storage, "raw_documents/f2")
    assert again.input_groups == 3 and again.rows == 754
    # parts close after the batch that reached 100 rows: 3 groups (300, 300, 154 rows) of <= 1 batch each
    docs, _ = _read_output(tmp_path, "raw_documents/f2")
    assert docs["text"].to_pylist() == [f"page {i} of a folder of small documents\n" for i in range(754)]


def test_source_units_are_files_in_order(tmp_path, write_config):
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text('{"text": "x"}\n')
    cfg = write_config([{"name": "a", "format": "jsonl", "path": str(tmp_path)}])
    units = source_units(cfg, "a")
    assert [u.label for u in units] == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    sink = QuarantineSink("a")
    assert sum(len(r) if isinstance(r, RecordBlock) else 1 for r in units[0].read(sink)) == 1


def test_output_does_not_depend_on_parallel_files(tmp_path, write_config, storage):
    for i in range(5):  # five files, good and bad lines in each
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f"f{i}.jsonl").write_bytes(
            b"".join(b'{"text": "file %d doc %d"}\n' % (i, j) for j in range(300)) + b"{broken\n"
        )
    outputs = []
    group_bytes = 2 * (tmp_path / "in" / "f0.jsonl").stat().st_size  # files 0-1, 2-3, 4: three groups
    for workers in (1, 3):
        cfg = write_config(
            [{"name": "p", "format": "jsonl", "path": str(tmp_path / "in")}],
            ingest={"parallel_files": workers, "group_input_bytes": group_bytes}, io={"batch_rows": 128},
        )
        result = ingest_source(cfg, "p", storage, f"raw_documents/p{workers}")
        assert result.rows == 1500 and result.quarantine_counts == {"malformed_json": 5}
        assert result.input_groups == 3 and {p[:10] for p in result.parts} == {"part-00000", "part-00001",
                                                                               "part-00002"}
        outputs.append(result.files)
    assert outputs[0] == outputs[1]  # the same names, sizes and sha256 for every file
    docs, quarantine = _read_output(tmp_path, "raw_documents/p3")
    assert docs["text"].to_pylist() == [f"file {i} doc {j}" for i in range(5) for j in range(300)]
    assert quarantine["uri"].to_pylist() == [f"{tmp_path}/in/f{i}.jsonl#line=301" for i in range(5)]


def test_csv_unparsable_quoting_is_quarantined_and_reading_goes_on(tmp_path, write_config, storage):
    path = tmp_path / "q.csv"
    path.write_text('title,text\none,"fine"\ntwo,"bad" trailing\nthree,"also fine"\n')
    cfg = write_config([{"name": "q", "format": "csv", "path": str(path)}])
    result = ingest_source(cfg, "q", storage, "raw_documents/q")
    docs, quarantine = _read_output(tmp_path, "raw_documents/q")
    assert docs["text"].to_pylist() == ["fine", "also fine"]
    assert _reasons(quarantine) == {f"{path}#line=3": "malformed_csv"}
    assert result.quarantine_counts == {"malformed_csv": 1}


def test_whole_file_larger_than_the_bound_is_quarantined(tmp_path, write_config, storage):
    d = tmp_path / "f"
    d.mkdir()
    (d / "big.txt").write_text("word " * 5000)
    (d / "small.txt").write_text("a small file")
    cfg = write_config([{"name": "f", "format": "folder", "path": str(d)}], ingest={"max_document_bytes": 10_000})
    ingest_source(cfg, "f", storage, "raw_documents/f")
    docs, quarantine = _read_output(tmp_path, "raw_documents/f")
    assert docs["text"].to_pylist() == ["a small file"]
    assert _reasons(quarantine) == {f"{d}/big.txt": "document_too_large"}


def test_every_quarantine_reason_is_exercised_by_the_ingest_tests():
    from platform_assets.schema import QuarantineReason

    # text readers here, media readers and rooms in their own modules
    source = "".join((Path(__file__).parent / name).read_text() for name in (
        Path(__file__).name, "test_media_ingest.py", "test_media_images.py", "test_media_pdf.py",
        "test_media_audio.py") if (Path(__file__).parent / name).exists())
    assert [r for r in QuarantineReason.all() if f'"{r}"' not in source] == []


def test_chat_sources_normalise_messages_and_instruction_columns(tmp_path, write_config, storage):
    import datasets

    src = tmp_path / "sft"
    src.mkdir()
    rows = [
        {"id": 1, "conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}]},
        {"id": 2, "conversations": [{"role": "user", "content": "2+2?"}, {"role": "wizard", "content": "4"}]},
        {"id": 3, "conversations": [{"role": "user", "content": "only a question"}]},
        {"id": 4, "conversations": "not a list"},
    ]
    (src / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    datasets.Dataset.from_dict({"instruction": ["Name a prime.", "Say nothing."], "input": ["below 5", ""],
                                "output": ["3", " "]}).save_to_disk(str(tmp_path / "alpaca"))
    cfg = write_config([
        {"name": "sft", "format": "jsonl", "path": str(src), "chat": {"messages_field": "conversations"}},
        {"name": "alpaca", "format": "hf", "path": str(tmp_path / "alpaca"),
         "chat": {"prompt_field": "instruction", "input_field": "input", "response_field": "output"}},
    ])
    ingest_source(cfg, "sft", storage, "raw_documents/sft")
    docs, quarantine = _read_output(tmp_path, "raw_documents/sft")
    assert docs["text"].to_pylist() == ["user: Hi?\n\nassistant: Hello."]
    assert json.loads(docs["meta"][0].as_py()) == {
        "id": 1, "messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]}
    details = dict(zip(quarantine["uri"].to_pylist(), quarantine["detail"].to_pylist(), strict=True))
    assert set(quarantine["reason"].to_pylist()) == {"invalid_chat"}
    assert "unknown role 'wizard'" in details[f"{src}/chat.jsonl#line=2"]
    assert "no assistant turn" in details[f"{src}/chat.jsonl#line=3"]
    assert "not a non-empty list" in details[f"{src}/chat.jsonl#line=4"]

    ingest_source(cfg, "alpaca", storage, "raw_documents/alpaca")
    docs, quarantine = _read_output(tmp_path, "raw_documents/alpaca")
    assert json.loads(docs["meta"][0].as_py())["messages"] == [
        {"role": "user", "content": "Name a prime.\n\nbelow 5"}, {"role": "assistant", "content": "3"}]
    assert quarantine["reason"].to_pylist() == ["invalid_chat"]  # a blank answer is nothing to train on


def test_chat_config_needs_one_shape(write_config, tmp_path):
    from platform_assets.config import ConfigError

    with pytest.raises(ConfigError, match="chat: Value error, set messages_field, or both prompt_field"):
        write_config([{"name": "s", "format": "jsonl", "path": str(tmp_path), "chat": {"prompt_field": "q"}}])


def test_ids_do_not_depend_on_where_the_corpus_lives(tmp_path, storage):
    import shutil

    import yaml

    from platform_assets.config import load_config

    here = tmp_path / "checkout-a" / "web"
    here.mkdir(parents=True)
    (here / "a.jsonl").write_text('{"text": "same words"}\n{"text": "other words"}\n')
    shutil.copytree(tmp_path / "checkout-a", tmp_path / "checkout-b")
    ids = []
    for checkout in ("checkout-a", "checkout-b"):
        path = tmp_path / checkout / "pipeline.yaml"
        path.write_text(yaml.safe_dump({"storage": {"root": str(tmp_path / "out")},
                                        "sources": [{"name": "web", "format": "jsonl", "path": "web"}]}))
        ingest_source(load_config(path), "web", storage, f"raw_documents/{checkout}")
        docs, _ = _read_output(tmp_path, f"raw_documents/{checkout}")
        assert docs["uri"][0].as_py() == f"{tmp_path / checkout}/web/a.jsonl#line=1"  # the full path stays
        ids.append(docs["id"].to_pylist())
    assert ids[0] == ids[1] and len(set(ids[0])) == 2
