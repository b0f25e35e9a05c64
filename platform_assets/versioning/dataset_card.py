"""The dataset card of a version: a `README.md` in the Hugging Face dataset-card format (Dagster-free).

A YAML header (licence, languages, size category, tasks, and `configs` whose `data_files` point at the
Parquet shards, so `datasets.load_dataset(<card dir>)` loads the version) and a body saying where the
data came from and what was done to it, with the figures `card_facts.py` gathers. The card lives in
`dataset_version/_all/` next to `version.json`, not in the versioned shard directory: a directory
cannot hold its own DVC md5, and packed_shards' committed `_manifest.json` would no longer list all
its files. The same facts give the same bytes: no clock, sorted keys, fixed orders.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence

import numpy as np
import yaml

from platform_assets.versioning.card_facts import CardFacts, FormatFacts, RecipeFacts

CARD_FILE = "README.md"

# The Hub's size buckets (https://huggingface.co/docs/hub/datasets-cards), counted in rows a user loads:
# packed sequences.
SIZE_BUCKETS = ((10**3, "n<1K"), (10**4, "1K<n<10K"), (10**5, "10K<n<100K"), (10**6, "100K<n<1M"),
                (10**7, "1M<n<10M"), (10**8, "10M<n<100M"), (10**9, "100M<n<1B"), (10**10, "1B<n<10B"),
                (10**11, "10B<n<100B"), (10**12, "100B<n<1T"))
NO_LANGUAGE = {"zxx", "und"}  # ISO 639-2 "no linguistic content" and "undetermined" (media without text)
MEDIA_TASKS = {"image": "image-to-text", "pdf": "image-to-text", "audio": "automatic-speech-recognition"}
# Shard files are `<split>/<source>/shard-NNNNN.parquet` (packing/SHARD_FORMAT.md, MEDIA_SHARD_FORMAT.md).
PARQUET_SHARDS = "*/shard-*.parquet"
_SPDX_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]*$")


def size_category(rows: int) -> str:
    return next((name for bound, name in SIZE_BUCKETS if rows < bound), "n>1T")


def license_ids(value: str | None) -> tuple[list[str], str | None]:
    """(the Hub's licence ids, the name of a licence that is not SPDX) of one `license` value: an SPDX
    expression (`GPL-2.0-or-later OR CC-BY-SA-3.0`) gives its ids lowercased as the Hub writes them, a
    missing one `unknown`, anything else (`see terms.txt`) `other`."""
    if value is None or not value.strip():
        return ["unknown"], None
    words = value.replace("(", " ").replace(")", " ").split()
    ids, expect_id, exception = [], True, False
    for word in words:
        if expect_id:
            if not _SPDX_ID.match(word):
                return ["other"], value
            if not exception:  # `GPL-2.0 WITH Classpath-exception-2.0`: the exception is no licence
                ids.append(word.lower())
        elif word not in ("AND", "OR", "WITH"):
            return ["other"], value
        exception = word == "WITH"
        expect_id = not expect_id
    return (ids, None) if not expect_id else (["other"], value)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _parquet_config(name: str, rel: str, fmt: FormatFacts) -> dict:
    return {"config_name": name,
            "data_files": [{"split": s, "path": f"{rel}/{fmt.name}/{s}/{PARQUET_SHARDS}"} for s in fmt.splits]}


def card_metadata(facts: CardFacts) -> dict:
    """The YAML header (`huggingface_hub.DatasetCardData`'s fields)."""
    ids, names = set(), set()
    for source in facts.sources:
        for value in source.licenses:
            found, name = license_ids(value)
            ids.update(found)
            names.update([name] if name else [])
    languages = [code for code, _ in facts.languages if code and code not in NO_LANGUAGE]
    media = facts.media
    tasks = ["text-generation"] + sorted({MEDIA_TASKS[m] for m, n in (media.modalities if media else ())
                                          if n and m in MEDIA_TASKS})
    meta: dict = {
        "license": sorted(ids)[0] if len(ids) == 1 else sorted(ids),
        "size_categories": [size_category(facts.packing.sequences)],
        "task_categories": tasks,
        "pretty_name": f"Dataset version {facts.md5[:12]}",
        "tags": ["dvc", "tokenized", "packed-sequences", *(f.name for f in facts.formats)],
    }
    if names:
        meta["license_name"] = "-and-".join(_slug(n) for n in sorted(names))
    if languages:
        meta["language"] = languages
        meta["multilinguality"] = "monolingual" if len(languages) == 1 else "multilingual"
    configs = [_parquet_config("default", posixpath.relpath(facts.shards_dir, facts.card_dir), f)
               for f in facts.formats if f.name == "parquet" and f.splits]
    if media is not None and media.samples:
        configs += [_parquet_config("media", posixpath.relpath(media.shards_dir, facts.card_dir), f)
                    for f in media.formats if f.name == "parquet" and f.splits]
    if configs:
        meta["configs"] = configs
    return meta


# -- the body -----------------------------------------------------------------------------------------
def _n(value: int) -> str:
    return f"{value:,}"


def _cell(value: object) -> str:
    # a `|` ends a table cell even inside a code span (GitHub-flavoured markdown): escape it
    return _n(value) if isinstance(value, int) else str(value).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A markdown table; columns holding only numbers are right-aligned."""
    numeric = [bool(rows) and all(isinstance(r[i], int) or r[i] == "" for r in rows) for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _counts(pairs: Iterable[tuple[str | None, int]]) -> str:
    return ", ".join(f"{k or 'none'} {_n(n)}" for k, n in pairs) or "none"


def _summary(f: CardFacts) -> str:
    p, kept = f.packing, sum(s.kept for s in f.sources)
    splits = ", ".join(s.name for s in f.splits)
    line = (f"{_n(p.sequences)} packed sequences of {_n(p.seq_len)} tokens ({_n(p.tokens)} tokens from "
            f"{_n(p.documents)} documents) in {splits or 'no split'}, from {_n(kept)} documents of "
            f"{len(f.sources)} sources after cleaning and deduplication")
    if f.media is not None and f.media.samples:
        line += f"; {_n(f.media.samples)} media samples ({_counts(f.media.modalities)}) beside them"
    return line + "."


def _version(f: CardFacts) -> list[str]:
    lines = ["## Version", "",
             f"- DVC md5: `{f.md5}` (`{f.shards_dir}`, recorded in `{f.recorded_in}`)"]
    if f.media is not None:
        lines.append(f"- media DVC md5: `{f.media.md5}` (`{f.media.shards_dir}`)")
    if f.git_revision:
        dirty = (f" (tracked files differed from it: commit `{f.recorded_in}` to pin this version)"
                 if f.git_dirty else "")
        lines.append(f"- git revision: `{f.git_revision}`{dirty}")
    lines.append(f"- remote: `{f.remote}`" if f.remote else "- remote: not pushed")
    checkout = f"git checkout {f.git_revision[:12]} && " if f.git_revision else ""
    targets = f.dvc_target + (f" {f.media.dvc_target}" if f.media is not None else "")
    return lines + [f"- restore on a clone: `{checkout}dvc pull {targets}`"]


def _sources(f: CardFacts) -> list[str]:
    rows = [(s.name, s.format, ", ".join(v or "unspecified" for v in s.licenses), s.raw, s.quarantined, s.cleaned,
             s.kept) for s in f.sources]
    total = ("**total**", "", "", *(sum(r[i] for r in rows) for i in range(3, 7)))
    header = ("source", "format", "licence", "raw documents", "quarantined", "cleaned", "kept after dedup")
    return ["## Sources", "", *_table(header, [*rows, total])]


def _cleaning(f: CardFacts) -> list[str]:
    raw, cleaned = sum(s.raw for s in f.sources), sum(s.cleaned for s in f.sources)
    return ["## Cleaning", "",
            f"Global `cleaning:` block: steps, in run order: {', '.join(f.cleaning_steps) or 'none'}. "
            f"Quality presets: {', '.join(f.quality_presets) or 'none'}.",
            "", f"Funnel: {_n(raw)} documents in, {_n(raw - cleaned)} removed, {_n(cleaned)} out "
                "(`_exclusions.parquet` of each source holds every removal with its value).", "",
            *_table(("rule", "removed"), f.cleaning_removed), *_recipes(f)]


def _recipes(f: CardFacts) -> list[str]:
    """Each source's recipe: its steps as changes to the global block, its presets, its removal bounds."""
    if not f.recipes:
        return []
    rows = []
    for r in f.recipes:
        added = [s for s in r.steps if s not in f.cleaning_steps]
        dropped = [s for s in f.cleaning_steps if s not in r.steps]
        steps = ", ".join([*(f"+{s}" for s in added), *(f"-{s}" for s in dropped)]) or "as the global block"
        rows.append((r.name, ", ".join(r.sources), steps, ", ".join(r.quality_presets) or "none", _bounds(r)))
    return ["", "Sources are cleaned with their recipe (`recipe:` of the source; the steps are the global "
                "`cleaning:` block's, changed as shown). Removal bounds: the share of a source cleaning may remove "
                "in all, per rule group, and per named rule.", "",
            *_table(("recipe", "sources", "steps", "quality presets", "removal bounds"), rows)]


def _bounds(r: RecipeFacts) -> str:
    def pct(x: float | None) -> str:
        return "global" if x is None else f"{x:.0%}"

    named = ", ".join(f"{rule} {pct(v)}" for rule, v in r.rule_bounds)
    return f"all {pct(r.max_removal_rate)}, per rule {pct(r.max_rule_removal_rate)}" + (f"; {named}" if named else "")


def _dedup(f: CardFacts) -> list[str]:
    d, cleaned, kept = f.dedup_settings, sum(s.cleaned for s in f.sources), sum(s.kept for s in f.sources)
    near = (f"near duplicates by MinHash-LSH ({d.near.num_perm} permutations, {d.near.shingles.unit} "
            f"{d.near.shingles.size}-grams, Jaccard >= {d.near.threshold}, verified {d.near.verify})"
            if d.near.enabled else "near duplicates: off")
    images = (f"images within {d.images.max_distance} bits of perceptual hash" if d.images.enabled
              else "image near duplicates: off")
    exact = "exact duplicates (normalised text; media by their bytes)" if d.exact.enabled else "exact duplicates: off"
    return ["## Deduplication", "",
            f"All sources together: {exact}; {near}; {images}; the `{d.keep}` member of each cluster is kept. "
            f"{_n(cleaned)} documents in, {_n(kept)} kept.", "",
            *_table(("rule", "removed"), f.dedup_removed)]


def _splits(f: CardFacts) -> list[str]:
    s = f.split_settings
    ratios = ", ".join(f"{k} {v}" for k, v in s.ratios.model_dump().items())
    leak = ("not recorded (dataset_splits' `no_split_leakage` check has not run on this instance)"
            if f.leak_check is None else
            f"{'passed' if f.leak_check.passed else 'FAILED'}: {f.leak_check.summary}")
    return ["## Splits", "",
            f"A seeded hash of the document id (seed {s.seed}; ratios {ratios}): adding documents never moves "
            "existing ones.", "",
            *_table(("split", "documents", "sequences", "tokens"),
                    [(x.name, x.documents, x.sequences, x.tokens) for x in f.splits]),
            "", f"Leak check (`no_split_leakage`, blocking): {leak}.",
            "", f"Languages (documents): {_counts(f.languages)}."]


def _tokenizer(f: CardFacts) -> list[str]:
    t = f.tokenizer
    if t is None:
        return ["## Tokenizer", "", "No tokenizer in the shard set."]
    return ["## Tokenizer", "",
            f"{t.algorithm} (source: {t.trained_on}), vocabulary {_n(t.vocab_size)}, tokenizer.json sha256 "
            f"`{t.sha256}`; shipped in `{f.shards_dir}/tokenizer/` (`AutoTokenizer.from_pretrained`).", "",
            *_table(("role", "token", "id"), [(r, f"`{tok}`", i) for r, tok, i in t.special_tokens])]


def _packing(f: CardFacts) -> list[str]:
    p = f.packing
    mask = "a loss mask marks the tokens the loss counts" if p.has_loss_mask else "no loss mask (every token counts)"
    return ["## Packing", "",
            f"`{p.strategy}` into sequences of {_n(p.seq_len)} tokens (overlong documents: `{p.overlong}`): "
            f"{_n(p.sequences)} sequences, {_n(p.tokens)} tokens from {_n(p.documents)} documents, efficiency "
            f"{p.efficiency} (share of non-padding tokens); token ids {p.token_dtype}, {mask}. Position ids "
            "restart at every document segment (`seqlens`).",
            "", "## Shard formats", "",
            *_table(("format", "files", "bytes", "index.json sha256"),
                    [(x.name, x.files, x.bytes, f"`{x.index_sha256}`") for x in f.formats])]


def _media(f: CardFacts) -> list[str]:
    m = f.media
    if m is None or not m.samples:
        return []
    return ["## Media shards", "",
            f"{_n(m.samples)} samples ({_counts(m.modalities)}) in `{m.shards_dir}`, DVC md5 `{m.md5}`.", "",
            *_table(("format", "files", "bytes", "index.json sha256"),
                    [(x.name, x.files, x.bytes, f"`{x.index_sha256}`") for x in m.formats])]


def _loading(f: CardFacts) -> list[str]:
    names = {x.name: x for x in f.formats}
    lines = ["## How to load", "",
             f"Paths are relative to the repository root; `dvc pull {f.dvc_target}` restores the shards."]
    if "parquet" in names:
        files = ",\n".join(f'    "{s}": "{f.shards_dir}/parquet/{s}/{PARQUET_SHARDS}"' for s in names["parquet"].splits)
        media = (f'\nmedia = load_dataset("{f.card_dir}", "media")  # images (Image()), audio (Audio()), text'
                 if f.media is not None and f.media.samples and any(x.name == "parquet" for x in f.media.formats)
                 else "")
        lines += ["", "With `datasets` (one row per sequence: `input_ids`, `seqlens`"
                  + (", `loss_mask`" if f.packing.has_loss_mask else "") + "):", "", "```python",
                  "from datasets import load_dataset", "",
                  f"ds = load_dataset(\"parquet\", data_files={{\n{files},\n}})",
                  f"same = load_dataset(\"{f.card_dir}\")  # through this card's `configs`" + media, "```"]
    if "webdataset" in names:
        split = names["webdataset"].splits[0] if names["webdataset"].splits else "train"
        members = "input_ids.npy, seqlens.npy" + (", loss_mask.npy" if f.packing.has_loss_mask else "")
        lines += ["", "With `webdataset`:", "", "```python", "import glob", "", "import webdataset as wds", "",
                  f'urls = sorted(glob.glob("{f.shards_dir}/webdataset/{split}/*/shard-*.tar"))',
                  f"samples = wds.WebDataset(urls, shardshuffle=False).decode()  # {members}",
                  "first = next(iter(samples))", "```"]
    if "flat" in names:
        dtype = np.dtype(f.packing.token_dtype).newbyteorder("<").str
        lines += ["", f"With numpy (flat: headerless little-endian files; tokens {f.packing.token_dtype} "
                  "[samples, seq_len], seqlens int32" + (", mask uint8 [samples, seq_len]" if f.packing.has_loss_mask
                                                         else "") + "):", "", "```python", "import json", "",
                  "import numpy as np", "",
                  f'flat = "{f.shards_dir}/flat"',
                  'index = json.load(open(f"{flat}/index.json"))',
                  "sequences, tokens = 0, 0",
                  'for entry in index["sets"]:  # one per (split, source): entry["split"], entry["source"]',
                  '    for shard in entry["shards"]:',
                  '        files = shard["files"]',
                  f'        ids = np.memmap(f"{{flat}}/{{files[\'tokens\'][\'path\']}}", dtype="{dtype}", mode="r",',
                  f'                        shape=(shard["samples"], {f.packing.seq_len}))',
                  '        seqlens = np.fromfile(f"{flat}/{files[\'seqlens\'][\'path\']}", dtype="<i4")',
                  "        sequences, tokens = sequences + len(ids), tokens + int(seqlens.sum())",
                  f"print(sequences, tokens)  # {f.packing.sequences} {f.packing.tokens}", "```"]
    return lines


def render_dataset_card(facts: CardFacts) -> str:
    header = yaml.safe_dump(card_metadata(facts), sort_keys=True, allow_unicode=True, default_flow_style=False)
    body = [f"# Dataset version {facts.md5[:12]}", "", _summary(facts)]
    for section in (_version, _sources, _cleaning, _dedup, _splits, _tokenizer, _packing, _media, _loading):
        lines = section(facts)
        if lines:
            body += ["", *lines]
    return f"---\n{header}---\n\n" + "\n".join(body) + "\n"


def card_for_ui(card: str) -> str:
    """The card as Dagster's markdown renders it: the YAML header as a code block (as front matter its
    last line would become a heading)."""
    if not card.startswith("---\n"):
        return card
    header, _, body = card[4:].partition("---\n")
    return f"```yaml\n{header}```\n{body}"
