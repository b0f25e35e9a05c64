"""Builds sample_data/real_docs.jsonl.gz, the small real-text seed of the sample corpus (run once).

Input: the corpus written by ../shared/data/build_corpus.sh (Debian packages' documentation).
Picks a deterministic, licence-clean subset: Python 3.11 documentation sources (PSF License),
Debian Administrator's Handbook pages in 8 languages (GPL-2+ / CC-BY-SA-3.0) and Linux kernel
documentation (GPL-2.0). Each document keeps its source, path, language and licence.
Usage: python scripts/extract_sample.py CORPUS_DIR OUT.jsonl.gz
"""

import gzip
import hashlib
import json
import sys
from pathlib import Path

PICK = {
    # (source, lang) -> (how many, licence)
    ("python3.11-doc _sources", "en"): (70, "PSF-2.0"),
    ("linux-doc-6.1", "en"): (40, "GPL-2.0"),
    **{("debian-handbook", lang): (5, "GPL-2.0-or-later OR CC-BY-SA-3.0")
       for lang in ("en-US", "de-DE", "fr-FR", "es-ES", "it-IT", "ja-JP", "ru-RU", "pt-BR")},
}
MIN_CHARS, MAX_CHARS = 1500, 9000


def main(corpus: Path, out: Path) -> None:
    candidates: dict[tuple[str, str], list[dict]] = {k: [] for k in PICK}
    for path in sorted(corpus.glob("text_*.jsonl")):
        for line in path.open("rb"):
            doc = json.loads(line)
            key = (doc["source"], doc["lang"])
            if key in candidates and MIN_CHARS <= len(doc["text"]) <= MAX_CHARS:
                candidates[key].append(doc)
    rows = []
    for key, (n, licence) in PICK.items():
        # a stable, content-based choice: the n documents with the smallest sha256 of their path
        chosen = sorted(candidates[key], key=lambda d: hashlib.sha256(d["path"].encode()).hexdigest())[:n]
        for d in chosen:
            rows.append({"text": d["text"], "source": d["source"], "path": d["path"], "lang": d["lang"].split("-")[0],
                         "license": licence})
    with gzip.GzipFile(out, "wb", mtime=0) as f:  # mtime=0: byte-identical output on every run
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False).encode() + b"\n")
    print(f"{len(rows)} documents, {sum(len(r['text']) for r in rows)} characters -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
