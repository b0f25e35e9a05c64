"""Media through ingest: the multimodal manifest, folders with sidecars, Hugging Face Image/Audio
columns, the traversal guard, and every bad-input reason a media file can get. Fixtures are written
here with Pillow, PyMuPDF and soundfile."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.contracts import QUARANTINE_FILE
from platform_assets.ingest.run import ingest_source
from platform_assets.schema import DOCUMENTS_SCHEMA

Image = pytest.importorskip("PIL.Image")
pymupdf = pytest.importorskip("pymupdf")
sf = pytest.importorskip("soundfile")


def _png(color=(200, 30, 30), size=(64, 48), mode="RGB") -> bytes:
    img = Image.new(mode, size, color)
    for x in range(size[0] // 4):  # some structure, so the image is not blank
        img.putpixel((x, x % size[1]), (0, 0, 0) if mode == "RGB" else 0)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _gif() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (0, 90, 200)).save(buf, format="GIF")
    return buf.getvalue()


def _animated_gif() -> bytes:
    frames = [Image.new("RGB", (40, 40), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buf.getvalue()


def _pdf(pages: list[str]) -> bytes:
    doc = pymupdf.open()
    for text in pages:
        doc.new_page(width=300, height=400).insert_text((40, 60), text, fontsize=11)
    return doc.tobytes()


def _wav(seconds: float, rate: int = 22_050, channels: int = 1, amplitude: float = 0.4) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    x = (amplitude * np.sin(2 * np.pi * 330 * t)).astype(np.float32)
    if channels == 2:
        x = np.stack([x, x], axis=1)
    buf = io.BytesIO()
    sf.write(buf, x, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _output(tmp_path: Path, rel: str) -> tuple[list[dict], dict[str, tuple[str, str]]]:
    out = tmp_path / "out" / rel
    parts = sorted(out.glob("part-*.parquet"))
    docs = pa.concat_tables([pq.read_table(p) for p in parts]) if parts else DOCUMENTS_SCHEMA.empty_table()
    assert docs.schema.equals(DOCUMENTS_SCHEMA, check_metadata=True)
    quarantine = pq.read_table(out / QUARANTINE_FILE).to_pylist()
    return docs.to_pylist(), {q["uri"]: (q["reason"], q["detail"]) for q in quarantine}


@pytest.fixture
def manifest_dir(tmp_path: Path) -> Path:
    d = tmp_path / "mm"
    (d / "media").mkdir(parents=True)
    (d / "media" / "cat.png").write_bytes(_png())
    (d / "media" / "doc.pdf").write_bytes(_pdf(["first page text here", "second page says hello"]))
    (d / "media" / "clip.wav").write_bytes(_wav(1.0, channels=2))
    (d / "media" / "trunc.png").write_bytes(_png()[:120])
    outside = tmp_path / "secret.png"
    outside.write_bytes(_png((0, 0, 0)))
    os.symlink(outside, d / "media" / "link.png")  # inside the root by name, outside once resolved
    rows = [
        {"id": "a", "modality": "image", "file": "media/cat.png", "caption": "A red block.", "license": "CC0"},
        {"id": "b", "modality": "pdf", "file": "media/doc.pdf", "page": 1, "instruction": "Summarise.",
         "response": "It says hello."},
        {"id": "c", "modality": "audio", "file": "media/clip.wav", "transcription": "a tone"},
        {"id": "d", "modality": "image", "file": "media/cat.png",
         "messages": [{"role": "user", "content": "What is it?"}, {"role": "assistant", "content": "A block."}]},
        {"id": "e", "modality": "image", "file": "../secret.png", "caption": "dot-dot"},
        {"id": "f", "modality": "image", "file": str(outside), "caption": "absolute"},
        {"id": "g", "modality": "image", "file": "media/link.png", "caption": "symlink out"},
        {"id": "h", "modality": "image", "file": "media/nope.png", "caption": "missing"},
        {"id": "i", "modality": "audio", "file": "media/cat.png", "transcription": "declared audio"},
        {"id": "j", "modality": "video", "file": "media/cat.png"},
        {"id": "k", "modality": "pdf", "file": "media/doc.pdf", "page": 7},
        {"id": "l", "modality": "image", "file": "media/cat.png", "page": 0},
        {"id": "m", "modality": "image", "file": "media/trunc.png", "caption": "cut short"},
    ]
    lines = [json.dumps(r) for r in rows]
    lines.insert(5, '{"modality": "image", "file": ')  # line 6: malformed JSON
    (d / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_manifest_rows_become_media_documents_and_bad_rows_are_quarantined(tmp_path, manifest_dir, write_config,
                                                                          storage):
    cfg = write_config([{"name": "mm", "format": "manifest", "path": str(manifest_dir / "manifest.jsonl")}])
    result = ingest_source(cfg, "mm", storage, "raw_documents/mm")
    docs, quarantine = _output(tmp_path, "raw_documents/mm")
    by_line = {d["uri"].rsplit("#line=", 1)[1]: d for d in docs}
    assert sorted(by_line, key=int) == ["1", "2", "3", "4"]
    assert result.modalities == {"audio": 1, "image": 2, "pdf": 1}
    image, page, clip, chat = by_line["1"], by_line["2"], by_line["3"], by_line["4"]
    assert (image["modality"], image["text"]) == ("image", "A red block.")
    assert json.loads(image["meta"])["id"] == "a" and json.loads(image["meta"])["file"] == "media/cat.png"
    (item,) = image["media"]
    assert (item["kind"], item["mime"], item["width"], item["height"], item["format"]) == (
        "image", "image/png", 64, 48, "PNG")
    assert item["uri"] == str(manifest_dir / "media" / "cat.png") and item["phash"] is not None
    # a PDF row names one page: that page's text is the document's, the row's chat goes to meta
    assert page["modality"] == "pdf" and "second page says hello" in page["text"]
    assert page["media"][0]["page"] == 1 and page["media"][0]["uri"].endswith("doc.pdf#page=1")
    assert json.loads(page["meta"])["messages"][1] == {"role": "assistant", "content": "It says hello."}
    assert (clip["text"], clip["media"][0]["mime"], clip["media"][0]["channels"]) == ("a tone", "audio/flac", 2)
    assert clip["media"][0]["sample_rate"] == 16_000 and abs(clip["media"][0]["duration_s"] - 1.0) < 1e-3
    # a conversation without a caption is the text (rendered) and the messages (meta)
    assert chat["text"] == "user: What is it?\n\nassistant: A block."
    assert json.loads(chat["meta"])["messages"][0]["role"] == "user"
    # the same image under two rows: two documents with distinct ids (the rows are distinct examples)
    assert image["id"] != chat["id"] and item["sha256"] == chat["media"][0]["sha256"]

    reasons = {uri.rsplit("#line=", 1)[1]: reason for uri, (reason, _) in quarantine.items()}
    assert reasons == {
        "5": "path_outside_root", "6": "malformed_json", "7": "path_outside_root", "8": "path_outside_root",
        "9": "missing_file", "10": "media_type_mismatch", "11": "unsupported_media", "12": "page_not_found",
        "13": "page_not_found", "14": "corrupt_image",
    }
    details = {uri.rsplit("#line=", 1)[1]: detail for uri, (_, detail) in quarantine.items()}
    assert "not opened" in details["5"] and "secret.png" in details["8"]  # the symlink's target is named
    assert "declared audio, the bytes are image/png" in details["10"]


def test_traversal_guard_never_opens_a_path_outside_the_roots(tmp_path, manifest_dir, write_config, storage,
                                                              monkeypatch):
    """The guard decides before any read: the one function that reads a row's file is spied on and
    must never be asked for the outside file (the symlink's target included)."""
    from platform_assets.ingest.readers import manifest

    opened: list[str] = []
    real_read = manifest._read_file

    def spy(location, *args, **kwargs):
        opened.append(location)
        return real_read(location, *args, **kwargs)

    monkeypatch.setattr(manifest, "_read_file", spy)
    cfg = write_config([{"name": "mm", "format": "manifest", "path": str(manifest_dir / "manifest.jsonl")}])
    ingest_source(cfg, "mm", storage, "raw_documents/mm")
    assert len(opened) == 8 and not [p for p in opened if "secret" in p or "link" in p]


def test_manifest_roots_allow_a_second_directory(tmp_path, manifest_dir, write_config, storage):
    cfg = write_config([{"name": "mm", "format": "manifest", "path": str(manifest_dir / "manifest.jsonl"),
                         "roots": [str(manifest_dir), str(tmp_path)]}])
    ingest_source(cfg, "mm", storage, "raw_documents/mm")
    docs, quarantine = _output(tmp_path, "raw_documents/mm")
    reasons = {uri.rsplit("#line=", 1)[1]: reason for uri, (reason, _) in quarantine.items()}
    assert "5" not in reasons and "7" not in reasons and "8" not in reasons  # now inside a root
    assert len(docs) == 7


def test_manifest_chunks_give_the_same_bytes_for_any_worker_count(tmp_path, write_config, storage):
    d = tmp_path / "many"
    d.mkdir()
    rows = []
    for i in range(9):
        (d / f"{i}.png").write_bytes(_png((20 * i, 100, 200 - 20 * i)))
        rows.append({"modality": "image", "file": f"{i}.png", "caption": f"image {i}"})
    (d / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    outputs = []
    for workers in (1, 2):
        cfg = write_config([{"name": "many", "format": "manifest", "path": str(d / "m.jsonl")}],
                           ingest={"media_group_files": 4, "parallel_files": workers})
        result = ingest_source(cfg, "many", storage, f"raw_documents/many{workers}")
        assert (result.rows, result.input_groups) == (9, 3)  # 4 + 4 + 1 rows
        out = tmp_path / "out" / f"raw_documents/many{workers}"
        outputs.append({p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))})
    assert len(outputs[0]) == 3 and outputs[0] == outputs[1]
    docs, _ = _output(tmp_path, "raw_documents/many1")
    assert [doc["text"] for doc in docs] == [f"image {i}" for i in range(9)]


def test_parquet_manifest(tmp_path, manifest_dir, write_config, storage):
    rows = [{"modality": "image", "file": "media/cat.png", "caption": "from parquet", "page": None},
            {"modality": "pdf", "file": "media/doc.pdf", "caption": None, "page": 0}]
    pq.write_table(pa.Table.from_pylist(rows), manifest_dir / "rows.parquet")
    cfg = write_config([{"name": "pm", "format": "manifest", "path": str(manifest_dir / "rows.parquet")}])
    ingest_source(cfg, "pm", storage, "raw_documents/pm")
    docs, quarantine = _output(tmp_path, "raw_documents/pm")
    assert [d["text"] for d in docs] == ["from parquet", "first page text here"] and not quarantine
    assert docs[0]["uri"].endswith("rows.parquet#row=0")


def test_media_folder_with_sidecars_and_every_bad_file(tmp_path, write_config, storage):
    d = tmp_path / "imgs"
    d.mkdir()
    (d / "a.png").write_bytes(_png())
    (d / "a.txt").write_text("  A caption from a text sidecar.\n")
    (d / "b.jpg").write_bytes(_png((10, 200, 10)))  # a PNG named .jpg
    (d / "b.txt").write_text("mislabelled")
    (d / "c.gif").write_bytes(_gif())
    (d / "c.json").write_text(json.dumps({"caption": "A blue square.", "tags": ["blue"], "width_hint": None}))
    (d / "d.gif").write_bytes(_animated_gif())
    (d / "e.png").write_bytes(b"")
    (d / "f.png").write_bytes(_png()[:100])
    (d / "g.png").write_bytes(b"just some text, not an image at all")
    (d / "h.png").write_bytes(_png(size=(300, 300)))  # over the configured max_pixels
    (d / "notes.txt").write_text("a text file without a media partner")
    cfg = write_config([{"name": "imgs", "format": "folder", "path": str(d), "media": ["image"]}],
                       media={"images": {"max_pixels": 200 * 200}})
    result = ingest_source(cfg, "imgs", storage, "raw_documents/imgs")
    docs, quarantine = _output(tmp_path, "raw_documents/imgs")
    by_name = {doc["uri"].rsplit("/", 1)[1]: doc for doc in docs}
    assert set(by_name) == {"a.png", "c.gif", "d.gif", "notes.txt"}  # sidecars are not documents of their own
    assert by_name["a.png"]["text"] == "A caption from a text sidecar."
    assert by_name["c.gif"]["text"] == "A blue square." and json.loads(by_name["c.gif"]["meta"])["tags"] == ["blue"]
    assert by_name["c.gif"]["media"][0]["format"] == "GIF" and by_name["c.gif"]["media"][0]["mime"] == "image/png"
    assert by_name["d.gif"]["media"][0]["frames"] == 3  # animated: the first frame kept (the default)
    assert by_name["notes.txt"]["modality"] == "text"
    reasons = {uri.rsplit("/", 1)[1]: reason for uri, (reason, _) in quarantine.items()}
    # g.png: text under an image's name is refused, not ingested as a text document
    assert reasons == {"b.jpg": "media_type_mismatch", "e.png": "empty_file", "f.png": "corrupt_image",
                       "g.png": "media_type_mismatch", "h.png": "decompression_bomb"}
    assert result.quarantine_counts["decompression_bomb"] == 1

    cfg = write_config([{"name": "imgs", "format": "folder", "path": str(d), "media": ["image"]}],
                       media={"images": {"animated": "quarantine"}})
    ingest_source(cfg, "imgs", storage, "raw_documents/imgs2")
    _, quarantine = _output(tmp_path, "raw_documents/imgs2")
    assert {uri.rsplit("/", 1)[1]: r for uri, (r, _) in quarantine.items()}["d.gif"] == "animated_image"


def test_pdf_folder_pages_limits_and_damage(tmp_path, write_config, storage):
    d = tmp_path / "pdfs"
    d.mkdir()
    (d / "long.pdf").write_bytes(_pdf([f"page number {i} of the long one" for i in range(5)]))
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret", fontsize=12)
    (d / "locked.pdf").write_bytes(doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="u", owner_pw="o"))
    (d / "broken.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 4)
    (d / "big.pdf").write_bytes(_pdf(["x"]) + b" " * 3000)
    cfg = write_config([{"name": "pdfs", "format": "folder", "path": str(d), "media": ["pdf"]}],
                       media={"pdf": {"max_pages": 3, "max_file_bytes": 2500, "ocr": False}})
    result = ingest_source(cfg, "pdfs", storage, "raw_documents/pdfs")
    docs, quarantine = _output(tmp_path, "raw_documents/pdfs")
    assert [d["uri"].rsplit("/", 1)[1] for d in docs] == ["long.pdf#page=0", "long.pdf#page=1", "long.pdf#page=2"]
    assert [d["media"][0]["frames"] for d in docs] == [5, 5, 5]  # the document had 5 pages
    assert "page number 2" in docs[2]["text"]
    reasons = {uri.rsplit("/", 1)[1]: reason for uri, (reason, _) in quarantine.items()}
    assert reasons == {"long.pdf": "pdf_page_limit", "locked.pdf": "encrypted_pdf", "broken.pdf": "corrupt_pdf",
                       "big.pdf": "media_too_large"}
    assert result.metadata["documents_pdf"] == 3 and result.metadata["pdf_pages_with_text"] == 3


def test_audio_folder_with_transcripts_and_bad_clips(tmp_path, write_config, storage):
    d = tmp_path / "audio"
    d.mkdir()
    (d / "ok.wav").write_bytes(_wav(0.8))
    (d / "ok.txt").write_text("a short tone")
    (d / "long.wav").write_bytes(_wav(3.0))
    header_only = io.BytesIO()
    sf.write(header_only, np.zeros((0,), np.float32), 16_000, format="WAV", subtype="PCM_16")
    (d / "empty.wav").write_bytes(header_only.getvalue())
    (d / "broken.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(40)))
    cfg = write_config([{"name": "audio", "format": "folder", "path": str(d), "media": ["audio"]}],
                       media={"audio": {"max_duration_s": 2.0}})
    ingest_source(cfg, "audio", storage, "raw_documents/audio")
    docs, quarantine = _output(tmp_path, "raw_documents/audio")
    assert [(doc["text"], doc["modality"]) for doc in docs] == [("a short tone", "audio")]
    reasons = {uri.rsplit("/", 1)[1]: reason for uri, (reason, _) in quarantine.items()}
    assert reasons == {"long.wav": "audio_too_long", "empty.wav": "empty_audio", "broken.wav": "corrupt_audio"}


def test_media_over_the_file_limit_and_reruns_are_identical(tmp_path, manifest_dir, write_config, storage):
    cfg = write_config([{"name": "mm", "format": "manifest", "path": str(manifest_dir / "manifest.jsonl")}],
                       media={"images": {"max_file_bytes": 50}})
    ingest_source(cfg, "mm", storage, "raw_documents/a")
    _, quarantine = _output(tmp_path, "raw_documents/a")
    assert {r for r, _ in quarantine.values()} >= {"media_too_large"}
    ingest_source(cfg, "mm", storage, "raw_documents/b")
    a = {p.name: p.read_bytes() for p in (tmp_path / "out/raw_documents/a").glob("*.parquet")}
    b = {p.name: p.read_bytes() for p in (tmp_path / "out/raw_documents/b").glob("*.parquet")}
    assert a == b


def test_hugging_face_image_and_audio_columns(tmp_path, write_config, storage):
    datasets = pytest.importorskip("datasets")
    images = datasets.Dataset.from_dict(
        {"image": [{"bytes": _png((i * 40, 0, 0)), "path": None} for i in range(3)]
         + [{"bytes": b"junk", "path": None}],
         "caption": [f"red level {i}" for i in range(3)] + ["broken"]},
        features=datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")}))
    images.save_to_disk(str(tmp_path / "hf_images"))
    # built as a plain {bytes, path} struct and cast: encoding examples through Audio() needs torchcodec,
    # which this project does not install (a cast only relabels Arrow's storage)
    clips = datasets.Dataset.from_dict({"audio": [{"bytes": _wav(0.5), "path": None}], "sentence": ["a tone"]})
    clips = clips.cast_column("audio", datasets.Audio(decode=False))
    clips.save_to_disk(str(tmp_path / "hf_audio"))
    cfg = write_config([
        {"name": "hfi", "format": "hf", "path": str(tmp_path / "hf_images"), "text_field": "caption"},
        {"name": "hfa", "format": "hf", "path": str(tmp_path / "hf_audio"), "text_field": "sentence"},
    ])
    ingest_source(cfg, "hfi", storage, "raw_documents/hfi")
    docs, quarantine = _output(tmp_path, "raw_documents/hfi")
    assert [d["text"] for d in docs] == ["red level 0", "red level 1", "red level 2"]
    assert {d["media"][0]["width"] for d in docs} == {64}
    assert [r for r, _ in quarantine.values()] == ["unsupported_media"]
    ingest_source(cfg, "hfa", storage, "raw_documents/hfa")
    docs, _ = _output(tmp_path, "raw_documents/hfa")
    assert [(d["text"], d["modality"], d["media"][0]["sample_rate"]) for d in docs] == [("a tone", "audio", 16_000)]


def test_a_decoder_surprise_quarantines_that_file_and_the_rest_is_read(tmp_path, manifest_dir, write_config,
                                                                      storage, monkeypatch):
    """Anything a room does not map (an exception from inside a decoder) costs one file, named with the
    exception, never the rest of the manifest chunk or the run."""
    from platform_assets.media import images

    real = images.prepare_image
    calls = []

    def flaky(data, settings):
        calls.append(len(data))
        if len(calls) == 1:
            raise ValueError("a decoder bug on odd bytes")
        return real(data, settings)

    monkeypatch.setattr(images, "prepare_image", flaky)
    cfg = write_config([{"name": "mm", "format": "manifest", "path": str(manifest_dir / "manifest.jsonl")}])
    ingest_source(cfg, "mm", storage, "raw_documents/mm")
    docs, quarantine = _output(tmp_path, "raw_documents/mm")
    first = quarantine[next(u for u in quarantine if u.endswith("#line=1"))]
    assert first == ("corrupt_image", f"{manifest_dir / 'media' / 'cat.png'}: ValueError: a decoder bug on odd bytes")
    assert len(docs) == 3  # the page, the clip and the second image row are still read


def test_folder_media_are_sniffed_from_bytes_and_kept_when_enabled(tmp_path, write_config, storage):
    """Images, PDFs and audio are recognised by their bytes and become documents schema v3 media rows
    (through the media rooms) where the source enables their kind; a name that disagrees with the
    bytes (a .png that is a GIF) is quarantined, and other kinds are quarantined naming the type found."""
    import hashlib
    import wave

    from platform_assets.schema import document_id

    d = tmp_path / "media"
    d.mkdir()
    gif = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 10, 10)).save(gif, format="GIF")
    (d / "a_cat.gif").write_bytes(gif.getvalue())
    (d / "e_cat.png").write_bytes(gif.getvalue())  # mislabelled: a GIF
    pdf = pymupdf.open()
    pdf.new_page().insert_text((72, 72), "a one-page PDF", fontsize=12)
    (d / "b_doc.pdf").write_bytes(pdf.tobytes())
    clip = io.BytesIO()
    with wave.open(clip, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(b"\x00\x01" * 1600)
    (d / "c_clip.wav").write_bytes(clip.getvalue())
    (d / "d_note.txt").write_text("a caption-free note")
    cfg = write_config([{"name": "m", "format": "folder", "path": str(d), "media": ["image", "pdf"]}])
    result = ingest_source(cfg, "m", storage, "raw_documents/m")
    docs, quarantine = _output(tmp_path, "raw_documents/m")  # checks the schema (v3, with its tag)
    assert result.rows == 3
    rows = {r["uri"].rsplit("/", 1)[1]: r for r in docs}
    assert {k: r["modality"] for k, r in rows.items()} == {"a_cat.gif": "image", "b_doc.pdf#page=0": "pdf",
                                                            "d_note.txt": "text"}
    (image,) = rows["a_cat.gif"]["media"]
    # the GIF was normalised to an RGB PNG; what the file was stays in the measured fields and meta
    assert (image["kind"], image["mime"], image["format"], image["mode"]) == ("image", "image/png", "GIF", "P")
    assert image["sha256"] == hashlib.sha256(image["bytes"]).hexdigest() and image["bytes"] != gif.getvalue()
    assert rows["a_cat.gif"]["text"] == "" and json.loads(rows["a_cat.gif"]["meta"])["source_mime"] == "image/gif"
    # a media document's id hashes its bytes: another image at the same place gets another id
    assert rows["a_cat.gif"]["id"] == document_id("m", "a_cat.gif", "", [image["sha256"]])
    assert rows["a_cat.gif"]["id"] != document_id("m", "a_cat.gif", "", ["0" * 64])
    assert "a one-page PDF" in rows["b_doc.pdf#page=0"]["text"]
    assert rows["d_note.txt"]["media"] is None  # text rows carry no media
    assert rows["d_note.txt"]["id"] == document_id("m", "d_note.txt", "a caption-free note")  # as in v1
    reasons = {uri.rsplit("/", 1)[1]: reason_detail for uri, reason_detail in quarantine.items()}
    assert reasons["c_clip.wav"][0] == "binary_file"
    assert "audio/x-wav (audio): not among this source's media kinds" in reasons["c_clip.wav"][1]
    assert reasons["e_cat.png"] == ("media_type_mismatch", f"{d}/e_cat.png: named .png, but the bytes are image/gif")
