"""Writes the sample corpus that configs/sample.yaml reads: real text in every supported format.

Seeded from sample_data/real_docs.jsonl.gz (150 real documents: Python docs, Linux kernel docs,
the Debian Administrator's Handbook in 8 languages; see scripts/extract_sample.py for provenance).
It also plants what later stages must find: exact and near duplicates, HTML boilerplate, PII, and
bad input for the quarantine (malformed JSON, invalid UTF-8, missing text, a ragged CSV row, a
binary file, an empty file). Deterministic: same seed file, same bytes, same file times.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.config import REPO_ROOT
from platform_assets.sample_media import media_files

SEED_FILE = REPO_ROOT / "sample_data" / "real_docs.jsonl.gz"
DEFAULT_OUT = REPO_ROOT / "data" / "sample"
# Fixed file times: ingested_at comes from file mtimes, so regenerating must not change the data.
FILE_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z

NAV = (
    '<header><nav><a href="/">Home</a> | <a href="/docs">Docs</a> | <a href="/blog">Blog</a> | '
    '<a href="/about">About us</a></nav></header>'
)
FOOTER = (
    '<footer><p>Copyright 2026 Example Docs. All rights reserved.</p><p><a href="/privacy">Privacy</a> '
    '<a href="/terms">Terms of use</a> <a href="/contact">Contact</a></p></footer>'
)
SIDEBAR = (
    '<aside><h3>Related</h3><ul><li><a href="/a">Popular posts</a></li>'
    '<li><a href="/b">Newsletter</a></li></ul></aside>'
)


def _load_seed() -> list[dict]:
    with gzip.open(SEED_FILE, "rb") as f:
        return [json.loads(line) for line in f]


def _edit_words(text: str, every: int) -> str:
    """A near duplicate: every `every`-th word replaced (Jaccard on 5-grams stays high for large every)."""
    words = text.split(" ")
    return " ".join("revised" if i % every == every - 1 else w for i, w in enumerate(words))


def _html_page(title: str, text: str) -> str:
    body = "".join(f"<p>{p.strip()}</p>\n" for p in text.split("\n\n") if p.strip())
    return (
        f"<!DOCTYPE html>\n<html><head><title>{title}</title></head><body>{NAV}{SIDEBAR}"
        f"<main><article><h1>{title}</h1>\n{body}</article></main>{FOOTER}</body></html>\n"
    )


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False, sort_keys=True).encode() + b"\n" for r in rows)


def write_sample_corpus(out: Path = DEFAULT_OUT) -> dict[str, int]:
    """Write every sample source under `out`; returns files written per source folder."""
    seed = _load_seed()
    py = [d for d in seed if d["source"].startswith("python")]
    kernel = [d for d in seed if d["source"].startswith("linux")]
    handbook = [d for d in seed if d["source"] == "debian-handbook"]
    files: dict[Path, bytes] = {}

    # docs: JSONL, with planted duplicates, PII and bad lines among the good ones
    docs = [{"text": d["text"], "path": d["path"], "lang": d["lang"], "license": d["license"]} for d in py[:60]]
    docs += [dict(docs[i]) for i in (0, 1, 2)]  # exact duplicates
    docs += [{**docs[i], "text": _edit_words(docs[i]["text"], 80)} for i in (3, 4, 5)]  # near duplicates, J ~0.88
    docs.append(
        {
            "text": "Contact the maintainer at jane.doe@example.org or +1 415 555 0100; the build host "
            "is 10.0.12.7. " + py[60]["text"],
            "path": "contact.rst",
            "lang": "en",
            "license": "PSF-2.0",
        }
    )
    good = _jsonl(docs)
    bad = (
        b'{"text": "an unterminated string, "path": "broken.rst"}\n'
        b'{"text": "latin-1 bytes \xe9t\xe9 are not UTF-8", "path": "latin1.rst"}\n'
        b'{"path": "no-text.rst", "lang": "en"}\n'
        b'["a", "JSON", "array"]\n'
        b'{"text": "   ", "path": "blank.rst"}\n'
    )
    half = len(good) // 2
    cut = good.rfind(b"\n", 0, half) + 1
    files[Path("docs/python-docs-0.jsonl")] = good[:cut] + bad
    files[Path("docs/python-docs-1.jsonl")] = good[cut:]
    files[Path("docs/empty.jsonl")] = b""

    # kernel: CSV with one ragged row
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["doc_id", "title", "text", "license"])
    for i, d in enumerate(kernel):
        w.writerow([f"kernel-{i:03d}", d["path"].rsplit("/", 1)[-1], d["text"], d["license"]])
    buf.write("kernel-999,only-three-fields,a ragged row\n")
    files[Path("kernel/kernel-docs.csv")] = buf.getvalue().encode()

    # pages: a folder of HTML pages with boilerplate, one binary file, one invalid UTF-8 file
    for i, d in enumerate(py[61:70]):
        files[Path(f"pages/page-{i:02d}.html")] = _html_page(d["path"].rsplit("/", 1)[-1], d["text"]).encode()
    files[Path("pages/logo.png")] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    files[Path("pages/legacy.txt")] = "Ce fichier est encodé en Latin-1, pas en UTF-8.\n".encode("latin-1")

    # notes: a plain-text file, one document per line (first paragraphs of handbook pages)
    firsts = [d["text"].strip().split("\n\n")[0].replace("\n", " ") for d in handbook]
    files[Path("notes/handbook-first-paragraphs.txt")] = ("\n".join(firsts) + "\n").encode()

    # sft: instruction data (ShareGPT-style conversations) built from handbook sections: the user quotes
    # a section's paragraph (the first is the page's navigation), the assistant answers with the next
    # two; one row has a role no chat template knows (quarantined as invalid_chat)
    chats = []
    for d in handbook:
        paragraphs = [p.strip() for p in d["text"].split("\n\n") if len(p.strip()) > 80][1:]
        if len(paragraphs) < 3:
            continue
        chats.append({"conversations": [
            {"from": "system", "value": "You are a careful assistant for Debian system administrators."},
            {"from": "human", "value": f"Continue this section of the Debian handbook:\n\n{paragraphs[0]}"},
            {"from": "gpt", "value": "\n\n".join(paragraphs[1:3])},
        ], "path": d["path"]})
    chats.append({"conversations": [{"from": "narrator", "value": "an unknown role"}], "path": "bad-role"})
    files[Path("sft/handbook-conversations.jsonl")] = _jsonl(chats)

    # images, pdfs, audio, multimodal: drawn by sample_media.py (Pillow, PyMuPDF, soundfile)
    files.update({Path(rel): data for rel, data in media_files().items()})

    written: dict[str, int] = {}
    for rel, data in sorted(files.items()):
        _write(out / rel, data)
        written[rel.parts[0]] = written.get(rel.parts[0], 0) + 1

    # handbook: Parquet, with language as a column
    table = pa.table(
        {
            "text": [d["text"] for d in handbook],
            "lang": [d["lang"] for d in handbook],
            "path": [d["path"] for d in handbook],
        }
    )
    _write_parquet(out / "handbook" / "handbook.parquet", table)
    written["handbook"] = 1

    # hub_mirror: a local Hugging Face dataset directory in the Hub's layout (data/<split>-*.parquet),
    # read through load_dataset(path, streaming=True) exactly as a hub id would be
    hub = pa.table(
        {"content": [d["text"] for d in kernel[:15]], "title": [d["path"].rsplit("/", 1)[-1] for d in kernel[:15]]}
    )
    _write_parquet(out / "hub_mirror" / "data" / "train-00000-of-00001.parquet", hub)
    written["hub_mirror"] = 1
    return written


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.utime(tmp, (FILE_TIME, FILE_TIME))
    os.replace(tmp, path)


def _write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.utime(tmp, (FILE_TIME, FILE_TIME))
    os.replace(tmp, path)
