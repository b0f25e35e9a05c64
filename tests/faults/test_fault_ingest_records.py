"""Bad bytes next to good records: ingest decides per record, never per file.

Every line/row format (JSONL, CSV, text lines), plain and compressed, gets bad records at its start,
middle and end (NUL bytes, invalid UTF-8, an overlong line, a ragged row, a truncated last line);
every valid record must be kept (count and ids) and every bad one quarantined with its reason at its
line. Compressed files cut short keep every line the codec can still decode; the tail is one
quarantine row at the line where decoding stopped. Media manifests (JSONL rows) and Parquet (rows,
row groups) get the same treatment.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.ingest.run import QUARANTINE_FILE, ingest_source
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id

pytestmark = pytest.mark.faults

MAX_DOC = 4096  # ingest.max_document_bytes for these sources: the overlong record is 3x this
GOOD_PER_BLOCK = 40  # good records before, between and after the bad ones


def _compress(data: bytes, codec: str) -> bytes:
    if codec == "none":
        return data
    if codec == "gz":
        return gzip.compress(data, mtime=0)
    if codec == "bz2":
        return bz2.compress(data)
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, {"zst": "zstd", "lz4": "lz4"}[codec]) as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


def _suffix(codec: str) -> str:
    return "" if codec == "none" else f".{codec}"


# (line bytes, reason) of the bad records each format is given; text fields say which record is which
def _bad_jsonl(tag: str) -> list[tuple[bytes, str]]:
    return [
        (b"\x00\x01\x02garbage\x00\x00 " + tag.encode(), "malformed_json"),  # the bug: NUL bytes in the first 8 KiB
        (b'{"text": "caf\xe9 ' + tag.encode() + b'"}', "invalid_utf8"),
        (b'{"text": "' + b"x" * (3 * MAX_DOC) + b'"}', "document_too_large"),
        (b'{"text": "nul \x00 inside a string"}', "malformed_json"),
    ]


def _bad_text(tag: str) -> list[tuple[bytes, str]]:
    return [
        (b"\x00\x01\x02garbage\x00\x00 " + tag.encode(), "binary_record"),
        (b"caf\xe9 " + tag.encode(), "invalid_utf8"),
        (b"y" * (3 * MAX_DOC), "document_too_large"),
    ]


def _bad_csv(tag: str) -> list[tuple[bytes, str]]:
    return [
        (b"\x00\x01\x02garbage\x00," + tag.encode(), "binary_record"),
        (b"caf\xe9 " + tag.encode() + b",x", "invalid_utf8"),
        (b"only one field " + tag.encode(), "ragged_csv_row"),
        (b"z" * (3 * MAX_DOC) + b",x", "document_too_large"),
        (b'"an unclosed quote' + tag.encode() + b'" trailing,x', "malformed_csv"),
    ]


def _good(fmt: str, i: int) -> tuple[bytes, str]:
    text = f"good record {i}"
    line = {"jsonl": json.dumps({"text": text, "n": i}).encode(), "text": text.encode(),
            "csv": f"{text},{i}".encode()}[fmt]
    return line, text


BAD = {"jsonl": _bad_jsonl, "text": _bad_text, "csv": _bad_csv}
EXT = {"jsonl": "jsonl", "text": "txt", "csv": "csv"}


def _build(fmt: str, position: str) -> tuple[bytes, list[tuple[int, str]], list[tuple[int, str]]]:
    """(file bytes, [(line, good text)], [(line, bad reason)]) with the bad records at `position`."""
    header = [b"text,n"] if fmt == "csv" else []
    goods = iter(range(10_000))
    blocks: list[list[tuple[bytes, str | None, str | None]]] = []  # (line, good text, bad reason)
    bad = [(line, None, reason) for line, reason in BAD[fmt](position)]
    good_block = lambda: [(*_good(fmt, i), None) for i in [next(goods) for _ in range(GOOD_PER_BLOCK)]]  # noqa: E731
    if position == "start":
        blocks = [bad, good_block()]
    elif position == "middle":
        blocks = [good_block(), bad, good_block()]
    else:
        blocks = [good_block(), bad]
    rows = [row for block in blocks for row in block]
    lines = header + [row[0] for row in rows]
    first = len(header) + 1
    good = [(first + k, row[1]) for k, row in enumerate(rows) if row[1] is not None]
    bad_at = [(first + k, row[2]) for k, row in enumerate(rows) if row[2] is not None]
    data = b"\n".join(lines) + b"\n"
    if position == "end" and fmt == "jsonl":  # and a truncated last line without its newline
        data += b'{"text": "cut sho'
        bad_at.append((len(lines) + 1, "malformed_json"))
    return data, good, bad_at


def _ingest(tmp_path: Path, write_config, storage, fmt: str, path: Path) -> tuple[pa.Table, pa.Table]:
    src = {"name": "s", "format": fmt, "path": str(path.parent)}  # ids hash the path below the folder
    if fmt == "text":
        src["unit"] = "line"
    cfg = write_config([src], ingest={"max_document_bytes": MAX_DOC})
    ingest_source(cfg, "s", storage, "raw_documents/s")
    out = tmp_path / "out" / "raw_documents" / "s"
    parts = sorted(out.glob("part-*.parquet"))
    docs = pa.concat_tables([pq.read_table(p) for p in parts]) if parts else DOCUMENTS_SCHEMA.empty_table()
    return docs, pq.read_table(out / QUARANTINE_FILE)


def _file(tmp_path: Path, name: str) -> Path:
    (tmp_path / "src").mkdir(exist_ok=True)
    return tmp_path / "src" / name


def _expected_ids(path: Path, good: list[tuple[int, str]]) -> list[str]:
    return [document_id("s", f"{path.name}#line={line}", text) for line, text in good]


@pytest.mark.parametrize("codec", ["none", "gz", "zst"])
@pytest.mark.parametrize("position", ["start", "middle", "end"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text"])
def test_bad_records_cost_only_themselves(tmp_path, write_config, storage, fmt, position, codec):
    data, good, bad = _build(fmt, position)
    path = _file(tmp_path, f"data.{EXT[fmt]}{_suffix(codec)}")
    path.write_bytes(_compress(data, codec))
    docs, quarantine = _ingest(tmp_path, write_config, storage, fmt, path)

    assert docs["text"].to_pylist() == [text for _, text in good]
    assert docs["uri"].to_pylist() == [f"{path}#line={line}" for line, _ in good]
    assert docs["id"].to_pylist() == _expected_ids(path, good)
    got = sorted(zip(quarantine["uri"].to_pylist(), quarantine["reason"].to_pylist(), strict=True))
    assert got == sorted((f"{path}#line={line}", reason) for line, reason in bad)
    assert all(quarantine["detail"].to_pylist())  # every dropped record says why


def test_nul_bytes_in_the_first_8_kib_no_longer_cost_the_file(tmp_path, write_config, storage):
    """The reported bug: one garbage line at the top of a 1,000-line JSONL file lost all 1,000."""
    path = _file(tmp_path, "web.jsonl")
    path.write_bytes(b"\x00" * 100 + b"\n" + b"".join(b'{"text": "doc %d"}\n' % i for i in range(1000)))
    docs, quarantine = _ingest(tmp_path, write_config, storage, "jsonl", path)
    assert docs.num_rows == 1000 and docs["uri"][0].as_py() == f"{path}#line=2"
    assert quarantine["uri"].to_pylist() == [f"{path}#line=1"]
    assert quarantine["reason"].to_pylist() == ["malformed_json"]


def _decodable_prefix_lines(data: bytes, codec: str) -> int | None:
    """Whole lines an independent decoder gets from a cut stream (gzip: zlib, bz2: the bz2 module,
    both of which stop without an error at a cut); None where the standard library has no decoder."""
    if codec == "gz":
        out = zlib.decompressobj(wbits=31).decompress(data)
    elif codec == "bz2":
        out = bz2.BZ2Decompressor().decompress(data)
    else:
        return None
    return out[: out.rfind(b"\n") + 1].count(b"\n")


# input bytes a codec decodes at once: a cut inside one loses it whole (zstd blocks are at most 128 KiB;
# Arrow writes lz4 frames in 64 KiB blocks)
CODEC_BLOCK_BYTES = {"zst": 128 * 2**10, "lz4": 64 * 2**10}


@pytest.mark.parametrize("codec", ["gz", "zst", "bz2", "lz4"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text"])
def test_records_before_a_truncated_compressed_tail_are_kept(tmp_path, write_config, storage, fmt, codec):
    header = b"text,n\n" if fmt == "csv" else b""
    n = 100_000  # 1.7-3.5 MB: many of the stream's 64 KiB pieces and two or more of bz2's 900 KB blocks
    data = header + b"".join(_good(fmt, i)[0] + b"\n" for i in range(n))
    whole = _compress(data, codec)
    cut = whole[: len(whole) * 6 // 10]
    path = _file(tmp_path, f"data.{EXT[fmt]}.{codec}")
    path.write_bytes(cut)
    docs, quarantine = _ingest(tmp_path, write_config, storage, fmt, path)

    first = 2 if fmt == "csv" else 1
    kept = docs.num_rows
    # a prefix without gaps, the records exactly as written, ids as a clean read would give them
    assert docs["text"].to_pylist() == [f"good record {i}" for i in range(kept)]
    assert docs["id"].to_pylist() == _expected_ids(path, [(first + i, f"good record {i}") for i in range(kept)])
    reference = _decodable_prefix_lines(cut, codec)
    if reference is not None:  # every whole line the reference decoder gets
        assert kept + first - 1 == reference
    else:  # at most the codec block around the cut is lost (the cut's position in the data is ~60%)
        kept_bytes = len(header) + sum(len(_good(fmt, i)[0]) + 1 for i in range(kept))
        assert kept_bytes >= len(data) // 2 - CODEC_BLOCK_BYTES[codec]
    assert quarantine["uri"].to_pylist() == [f"{path}#line={kept + first}"]
    assert quarantine["reason"].to_pylist() == ["unreadable_file"]
    assert "stops decoding at line" in quarantine["detail"][0].as_py()


def test_damaged_gzip_block_keeps_the_lines_before_it(tmp_path, write_config, storage):
    """Garbage written over the middle of a gzip file: inflate fails there; lines before it stay."""
    data = b"".join(b'{"text": "line %d"}\n' % i for i in range(50_000))
    whole = gzip.compress(data, mtime=0)
    damaged = whole[: len(whole) // 2] + bytes(range(256)) * 64 + whole[len(whole) // 2 + 256 * 64:]
    path = _file(tmp_path, "d.jsonl.gz")
    path.write_bytes(damaged)
    docs, quarantine = _ingest(tmp_path, write_config, storage, "jsonl", path)
    decoder = zlib.decompressobj(wbits=31)
    try:
        reference = decoder.decompress(damaged)
    except zlib.error:  # the reference is what a decoder fed byte by byte gets before the error
        decoder, reference = zlib.decompressobj(wbits=31), bytearray()
        for byte in damaged:
            try:
                reference += decoder.decompress(bytes([byte]))
            except zlib.error:
                break
    whole_lines = bytes(reference)[: bytes(reference).rfind(b"\n") + 1].splitlines()
    # inflate has no checksum before the stream's end: the bytes it emits just before it notices the
    # damage can be wrong, and ingest decides on each such line like on any other
    expected = []
    for line in whole_lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("text"), str) and obj["text"].strip():
            expected.append(obj["text"])
    # Arrow alone inflates 64 KiB of input per call: the damage, at byte ~65,000, took every line
    assert expected[:20_000] == [f"line {i}" for i in range(20_000)]
    assert docs["text"].to_pylist() == expected
    assert quarantine["uri"].to_pylist()[-1] == f"{path}#line={len(whole_lines) + 1}"
    assert quarantine["reason"].to_pylist()[-1] == "unreadable_file"


def test_csv_row_with_a_bad_byte_in_another_column_costs_only_that_row(tmp_path, write_config, storage):
    rows = [["text", "url"], ["first", "u1"], ["second", "caf\udce9"], ["third", "u3"]]
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    path = _file(tmp_path, "t.csv")
    path.write_bytes(buf.getvalue().encode("utf-8", "surrogateescape"))
    docs, quarantine = _ingest(tmp_path, write_config, storage, "csv", path)
    assert docs["text"].to_pylist() == ["first", "third"]
    assert quarantine["uri"].to_pylist() == [f"{path}#line=3"]
    assert quarantine["reason"].to_pylist() == ["invalid_utf8"]


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 40), (10, 120, 200)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("cut", [False, True])
def test_manifest_rows_are_decided_per_row_and_a_cut_gzip_keeps_the_rows_before_it(tmp_path, write_config,
                                                                                   storage, cut):
    d = tmp_path / "mm"
    d.mkdir()
    (d / "cat.png").write_bytes(_png())
    lines = [json.dumps({"modality": "image", "file": "cat.png", "caption": f"caption {i}"}).encode()
             for i in range(300)]
    for at in (0, 150, len(lines)):  # garbage rows at the start, the middle and the end
        lines.insert(at, b"\x00\x01 binary row \x00")
    bad_lines = [i + 1 for i, line in enumerate(lines) if line.startswith(b"\x00")]
    whole = gzip.compress(b"\n".join(lines) + b"\n", mtime=0)
    data = whole[: len(whole) * 6 // 10] if cut else whole
    path = d / "manifest.jsonl.gz"
    path.write_bytes(data)
    cfg = write_config([{"name": "mm", "format": "manifest", "path": str(path)}])
    ingest_source(cfg, "mm", storage, "raw_documents/mm")
    out = tmp_path / "out" / "raw_documents" / "mm"
    docs = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    quarantine = pq.read_table(out / QUARANTINE_FILE)

    decodable = zlib.decompressobj(wbits=31).decompress(data)
    whole_lines = decodable[: decodable.rfind(b"\n") + 1].count(b"\n")
    assert (whole_lines < len(lines)) == cut
    good = [(i + 1, json.loads(line)["caption"]) for i, line in enumerate(lines[:whole_lines])
            if not line.startswith(b"\x00")]
    assert docs["text"].to_pylist() == [caption for _, caption in good]
    assert docs["uri"].to_pylist() == [f"{path}#line={n}" for n, _ in good]
    expected = [(f"{path}#line={n}", "malformed_json") for n in bad_lines if n <= whole_lines]
    if cut:
        expected.append((f"{path}#line={whole_lines + 1}", "unreadable_file"))
    assert list(zip(quarantine["uri"].to_pylist(), quarantine["reason"].to_pylist(), strict=True)) == expected


@pytest.mark.parametrize("position", ["start", "middle", "end"])
def test_parquet_bad_rows_cost_only_themselves(tmp_path, write_config, storage, position):
    texts: list[bytes | None] = [f"good record {i}".encode() for i in range(100)]
    at = {"start": 0, "middle": 50, "end": 100}[position]
    texts[at:at] = [b"caf\xe9", None, b"   "]  # a binary text column: bytes decoded per row
    path = _file(tmp_path, "t.parquet")
    pq.write_table(pa.table({"text": pa.array(texts, pa.binary())}), path, row_group_size=30)
    docs, quarantine = _ingest(tmp_path, write_config, storage, "parquet", path)
    assert docs["text"].to_pylist() == [f"good record {i}" for i in range(100)]
    assert docs["uri"].to_pylist() == [f"{path}#row={i if i < at else i + 3}" for i in range(100)]
    reasons = dict(zip(quarantine["uri"].to_pylist(), quarantine["reason"].to_pylist(), strict=True))
    assert reasons == {f"{path}#row={at}": "invalid_utf8", f"{path}#row={at + 1}": "missing_text_field",
                       f"{path}#row={at + 2}": "empty_text"}


def test_a_damaged_parquet_row_group_costs_only_its_rows(tmp_path, write_config, storage):
    path = _file(tmp_path, "t.parquet")
    table = pa.table({"text": [f"good record {i} " + "x" * (i % 50) for i in range(500)]})
    pq.write_table(table, path, row_group_size=100, compression="zstd")
    column = pq.ParquetFile(path).metadata.row_group(2).column(0)
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + 40 : start + column.total_compressed_size - 8] = b"\xff" * (column.total_compressed_size - 48)
    path.write_bytes(bytes(data))
    docs, quarantine = _ingest(tmp_path, write_config, storage, "parquet", path)
    expected = [t for i, t in enumerate(table["text"].to_pylist()) if not 200 <= i < 300]
    assert docs["text"].to_pylist() == expected  # row groups 0, 1, 3 and 4
    assert quarantine["uri"].to_pylist() == [f"{path}#row=200"]
    assert quarantine["reason"].to_pylist() == ["unreadable_file"]
    assert "row group 2 (rows 200-299)" in quarantine["detail"][0].as_py()


def test_parquet_manifest_rows_are_decided_per_row_and_per_row_group(tmp_path, write_config, storage):
    d = tmp_path / "mm"
    d.mkdir()
    (d / "cat.png").write_bytes(_png())
    captions = [f"caption {i}".encode() for i in range(60)]
    captions[5] = b"caf\xe9 not utf-8"  # a string column holding invalid UTF-8 (written unchecked)
    table = pa.table({"modality": ["image"] * 60, "file": ["cat.png"] * 60,
                      "caption": pa.array(captions, pa.binary()).view(pa.string())})
    path = d / "manifest.parquet"
    pq.write_table(table, path, row_group_size=20, compression="zstd")
    column = pq.ParquetFile(path).metadata.row_group(1).column(2)  # the captions of rows 20-39
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + 8 : start + column.total_compressed_size - 8] = b"\xff" * (column.total_compressed_size - 16)
    path.write_bytes(bytes(data))
    cfg = write_config([{"name": "mm", "format": "manifest", "path": str(path)}])
    ingest_source(cfg, "mm", storage, "raw_documents/mm")
    out = tmp_path / "out" / "raw_documents" / "mm"
    docs = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    quarantine = pq.read_table(out / QUARANTINE_FILE)
    kept = [i for i in range(60) if i != 5 and not 20 <= i < 40]
    assert docs["text"].to_pylist() == [f"caption {i}" for i in kept]
    assert quarantine["uri"].to_pylist() == [f"{path}#row=5", f"{path}#row=20"]
    assert quarantine["reason"].to_pylist() == ["invalid_utf8", "unreadable_file"]
