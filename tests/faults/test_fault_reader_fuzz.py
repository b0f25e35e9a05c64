"""Bounded-time fuzzing of every reader of outside bytes (hypothesis, derandomized: CI sees the same cases).

Property: no exception escapes. Ingest readers turn any bytes into accepted records and quarantine
rows with a known reason; the readers of the platform's own files (a shard set's index.json, an
output's _manifest.json, the shard files of each format, training's flat index) either read the
file or raise their typed error naming it. Inputs are mutations of valid files (byte flips, inserts,
deletes, truncation), so the fuzzer gets past the first magic bytes into the parsers proper.
The whole file runs in ~20 s on 2 cores (the example counts below set that).
"""

from __future__ import annotations

import gzip
import io
import json
import wave
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_assets.config import load_config
from platform_assets.ingest.media_records import MediaReader
from platform_assets.ingest.readers import source_units
from platform_assets.ingest.records import QuarantineSink, ReadContext, Record, RecordBlock
from platform_assets.manifest_file import ManifestError, parse_manifest
from platform_assets.media.settings import MediaSettings, PdfSettings
from platform_assets.packing.samples import ShardSamples, ShardSetError
from platform_assets.packing.shard_index import load_index, read_shard_set, verify_shards
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
from platform_assets.schema import QuarantineReason
from platform_assets.storage import StagedDir
from training.data.shard_index import ShardIndexError, read_flat_index

pytestmark = pytest.mark.faults

REASONS = set(QuarantineReason.all())


def fuzz(examples: int):
    """Deterministic and bounded: the same `examples` cases on every run, no per-case deadline (the
    2-core CI box is shared), fixtures reused across cases on purpose (each case rewrites its file)."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


@st.composite
def mutated(draw, valid: bytes, max_edits: int = 6) -> bytes:
    """`valid` with up to `max_edits` edits: a byte replaced, bytes inserted, a run deleted, a cut."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, max_edits))):
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(("replace", "insert", "delete", "truncate")))
        if kind == "replace":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 64))]
        else:
            del data[pos:]
    return bytes(data)


def text_like() -> st.SearchStrategy[bytes]:
    """Bytes around the characters that matter to line/row parsers (newlines, quotes, braces, NUL,
    bytes that are not UTF-8), mixed with arbitrary bytes."""
    alphabet = st.sampled_from([b"\n", b"\r\n", b'"', b",", b"{", b"}", b":", b"\\", b"\x00", b"\xff", b"\xc3",
                                b"\xe9", b'{"text": "a"}', b'"text"', b"text", b" ", b"x", b"\t", b"[", b"]"])
    return st.one_of(st.lists(alphabet, max_size=60).map(b"".join), st.binary(max_size=300))


# -- ingest: every line/row reader --------------------------------------------------------------------
class IngestHarness:
    """One source over one file; each case rewrites the file and reads it through `source_units`."""

    def __init__(self, root: Path, file_name: str, source: dict):
        self.dir = root / "src"
        self.dir.mkdir(parents=True)
        self.path = self.dir / file_name
        cfg = {"storage": {"root": str(root / "out")}, "sources": [{"name": "s", "path": str(self.dir), **source}],
               "media": {"pdf": {"ocr": False}}}
        (root / "p.yaml").write_text(yaml.safe_dump(cfg))
        self.cfg = load_config(root / "p.yaml")

    def read(self, data: bytes) -> tuple[int, QuarantineSink]:
        self.path.write_bytes(data)
        sink = QuarantineSink("s")
        kept = 0
        for unit in source_units(self.cfg, "s"):
            for rec in unit.read(sink, False):
                if isinstance(rec, RecordBlock):
                    assert len(rec.uris) == len(rec.texts) and rec.texts.null_count == 0
                    kept += len(rec)
                else:
                    assert isinstance(rec, Record) and isinstance(rec.text, str)
                    rec.text.encode("utf-8")  # a kept text is valid Unicode (no lone surrogates)
                    kept += 1
        assert set(sink.counts) <= REASONS
        sink.table()  # the quarantine is writable (every sample and detail is valid UTF-8)
        return kept, sink


def _lines(data: bytes) -> int:
    return data.count(b"\n") + 1


@pytest.mark.parametrize("name", ["data.jsonl", "data.jsonl.gz"])
def test_jsonl_reader_survives_any_bytes(tmp_path, name):
    harness = IngestHarness(tmp_path, name, {"format": "jsonl"})
    valid = b"".join(json.dumps({"text": f"doc {i}", "n": i, "tags": ["a", None]}).encode() + b"\n" for i in range(30))

    @fuzz(200)
    @given(st.one_of(mutated(valid), text_like()))
    def check(data: bytes) -> None:
        kept, sink = harness.read(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        assert kept + sum(sink.counts.values()) <= _lines(data) + 1  # nothing invented

    check()


def test_gzip_bytes_themselves_damaged_cost_only_the_tail(tmp_path):
    harness = IngestHarness(tmp_path, "data.jsonl.gz", {"format": "jsonl"})
    lines = [json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(400)]
    valid = gzip.compress(b"".join(lines), mtime=0)

    @fuzz(100)
    @given(mutated(valid, max_edits=3))
    def check(data: bytes) -> None:
        kept, sink = harness.read(data)
        assert kept <= len(lines) and sum(sink.counts.values()) <= len(lines) + 1

    check()


def test_csv_reader_survives_any_bytes(tmp_path):
    harness = IngestHarness(tmp_path, "data.csv", {"format": "csv"})
    valid = b"text,url,n\n" + b"".join(b'"doc, %d",https://e.org/%d,%d\n' % (i, i, i) for i in range(30))

    @fuzz(200)
    @given(st.one_of(mutated(valid), text_like().map(lambda b: b"text,n\n" + b)))
    def check(data: bytes) -> None:
        harness.read(data)

    check()


def test_text_line_reader_survives_any_bytes(tmp_path):
    harness = IngestHarness(tmp_path, "data.txt", {"format": "text", "unit": "line"})

    @fuzz(120)
    @given(text_like())
    def check(data: bytes) -> None:
        kept, sink = harness.read(data)
        assert kept + sum(sink.counts.values()) <= _lines(data) + 1

    check()


def test_parquet_reader_survives_mutated_files(tmp_path):
    harness = IngestHarness(tmp_path, "data.parquet", {"format": "parquet"})
    buf = io.BytesIO()
    table = pa.table({"text": [f"document {i} " * 3 for i in range(60)], "n": list(range(60)),
                      "tags": [["a", "b"]] * 60})
    pq.write_table(table, buf, row_group_size=20)
    valid = buf.getvalue()

    @fuzz(200)
    @given(mutated(valid))
    def check(data: bytes) -> None:
        kept, _ = harness.read(data)
        assert kept <= 60

    check()


def test_html_and_plain_document_reader_survives_any_bytes(tmp_path):
    harness = IngestHarness(tmp_path, "page.html", {"format": "folder"})
    valid = b"<!DOCTYPE html><html><head><title>t</title></head><body><p>caf\xc3\xa9 text</p></body></html>"

    @fuzz(80)
    @given(st.one_of(mutated(valid), text_like()))
    def check(data: bytes) -> None:
        kept, sink = harness.read(data)
        assert kept + sum(sink.counts.values()) == 1  # one file, one document: kept or quarantined

    check()


def test_media_manifest_reader_survives_any_bytes(tmp_path):
    harness = IngestHarness(tmp_path, "manifest.jsonl", {"format": "manifest"})
    (harness.dir / "cat.png").write_bytes(_png())
    rows = [{"modality": "image", "file": "cat.png", "caption": f"c {i}", "id": i} for i in range(8)]
    rows += [{"modality": "pdf", "file": "cat.png", "page": 0}, {"modality": "audio", "file": "../x.wav"}]
    valid = b"".join(json.dumps(r).encode() + b"\n" for r in rows)

    @fuzz(60)
    @given(st.one_of(mutated(valid), text_like()))
    def check(data: bytes) -> None:
        kept, sink = harness.read(data)
        assert kept <= _lines(data)

    check()


# -- media rooms: images (Pillow), PDF (PyMuPDF), audio (soundfile) -----------------------------------
def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (48, 40), (10, 120, 200)).save(buf, "PNG")
    return buf.getvalue()


def _jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (48, 40), (200, 20, 20)).save(buf, "JPEG", quality=80)
    return buf.getvalue()


def _pdf() -> bytes:
    import fitz

    doc = fitz.open()
    page = doc.new_page(width=200, height=200)
    page.insert_text((20, 40), "A page of text for the fuzzer, long enough to be a text layer.")
    return doc.tobytes()


def _wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes((np.sin(np.arange(1600) / 5) * 8000).astype("<i2").tobytes())
    return buf.getvalue()


@pytest.mark.parametrize(("name", "make", "examples"),
                         [("a.png", _png, 80), ("a.jpg", _jpeg, 80), ("a.pdf", _pdf, 50), ("a.wav", _wav, 80)])
def test_media_readers_survive_mutated_files(name, make, examples):
    sink = QuarantineSink("m")
    ctx = ReadContext(source="m", fs=pafs.LocalFileSystem(), quarantine=sink, max_document_bytes=2**20)
    reader = MediaReader(ctx, MediaSettings(pdf=PdfSettings(ocr=False, dpi=18)))
    valid = make()
    assert len(list(reader.documents(valid, f"/m/{name}"))) == 1 and not sink.rows

    @fuzz(examples)
    @given(mutated(valid))
    def check(data: bytes) -> None:
        before = len(sink.rows)
        docs = list(reader.documents(data, f"/m/{name}"))
        assert docs or len(sink.rows) > before  # kept, or quarantined with a reason
        assert set(sink.counts) <= REASONS

    check()


# -- the platform's own files: shard indexes, manifests, shard files ----------------------------------
SHARD_SET_FORMATS = ("flat", "flat_varlen", "parquet", "webdataset", "lance")


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory) -> Path:
    """Shard sets of every format (flat, flat_varlen, parquet, webdataset, lance) of one small split, with
    the output's _manifest.json."""
    root = tmp_path_factory.mktemp("shards")
    header = ShardSetHeader(seq_len=16, vocab_size=1000, pad_id=0, eos_id=1, bos_id=None, has_loss_mask=True,
                            tokenizer={"name": "t", "sha256": "0" * 64}, packing={})
    staged = StagedDir(pafs.LocalFileSystem(), str(root))
    writer = ShardSetWriter(staged, list(SHARD_SET_FORMATS), header, samples_per_shard=3)
    rng = np.random.default_rng(0)
    group = writer.group("train", "web")
    n = 5
    lens = rng.integers(1, 17, n).astype(np.int32)
    tokens = np.zeros((n, 16), np.uint16)
    for i, ln in enumerate(lens):
        tokens[i, :ln] = rng.integers(2, 1000, ln)
    group.add(ShardSamples(tokens, lens, np.arange(n + 1, dtype=np.int64), (tokens > 0).astype(np.uint8)),
              pa.array([f"d{i}" for i in range(n)]))
    writer.close()
    staged.write_manifest()
    return root


def _restore_after(path: Path):
    original = path.read_bytes()

    def restore() -> None:
        path.write_bytes(original)

    return original, restore


def _typed_error_names(err: Exception, *names: str) -> None:
    assert any(name in str(err) for name in names), f"{type(err).__name__} does not name {names}: {err}"


@pytest.mark.parametrize("fmt", SHARD_SET_FORMATS)
def test_shard_index_reader_refuses_damage_with_a_typed_error(shard_set, fmt):
    path = shard_set / fmt / "index.json"
    valid, restore = _restore_after(path)
    assert len(list(read_shard_set(str(shard_set / fmt)))) == 2

    @fuzz(120)
    @given(st.one_of(mutated(valid), text_like(), st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=12).map(lambda v: json.dumps(v).encode())))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:
            load_index(str(shard_set / fmt))
            for _ in read_shard_set(str(shard_set / fmt)):
                pass
        except ShardSetError as err:
            _typed_error_names(err, str(path), str(shard_set / fmt), "shard-")

    try:
        check()
    finally:
        restore()


@pytest.mark.parametrize(("fmt", "suffix"), [("parquet", ".parquet"), ("webdataset", ".tar"),
                                             ("flat_varlen", ".seqlens.bin"), ("flat_varlen", ".offsets.bin"),
                                             ("lance", ".lance")])
def test_shard_file_readers_refuse_damage_with_a_typed_error(shard_set, fmt, suffix):
    path = sorted(p for p in (shard_set / fmt).rglob(f"*{suffix}") if p.is_file())[0]
    valid, restore = _restore_after(path)

    @fuzz(120)
    @given(mutated(valid))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:
            for _ in read_shard_set(str(shard_set / fmt)):
                pass
        except ShardSetError as err:
            _typed_error_names(err, path.name, str(path), path.stem.split(".")[0])

    try:
        check()
    finally:
        restore()


def test_manifest_reader_refuses_damage_with_a_typed_error(shard_set):
    path = shard_set / "_manifest.json"
    valid, restore = _restore_after(path)
    assert verify_shards(str(shard_set / "flat")) == []

    @fuzz(100)
    @given(st.one_of(mutated(valid), text_like()))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:  # the one parser (the dataset card reads the manifest through it too)
            entries = parse_manifest(data, str(path))
        except ManifestError as err:
            _typed_error_names(err, str(path))
        else:
            assert all(e.bytes >= 0 and len(e.sha256) == 64 for e in entries.values())
        try:
            problems = verify_shards(str(shard_set / "flat"))
        except ShardSetError as err:
            _typed_error_names(err, str(path))
        else:
            assert all(isinstance(p, str) for p in problems)

    try:
        check()
    finally:
        restore()


def test_training_flat_index_reader_refuses_damage_with_a_typed_error(shard_set):
    path = shard_set / "flat" / "index.json"
    valid, restore = _restore_after(path)
    assert read_flat_index(shard_set / "flat").seq_len == 16

    @fuzz(150)
    @given(st.one_of(mutated(valid), text_like()))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:
            read_flat_index(shard_set / "flat")
        except ShardIndexError as err:
            _typed_error_names(err, str(path))

    try:
        check()
    finally:
        restore()
