"""What a dataset card states, gathered from the committed outputs on storage (Dagster-free).

Every figure comes from what the stages committed (Parquet footers, `_manifest.json`, each shard
format's `index.json`, the tokenizer artifact) or from the version record (`record.py`); the recipe
(steps, presets, thresholds, the split seed) comes from the config sections the stages ran with.
Group-bys run in DuckDB over Arrow scans of the outputs, reading only the grouped columns (never the
text), so gathering costs a few column scans however large the corpus.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import duckdb

from platform_assets.cleaning.pipeline import STEP_BUILDERS
from platform_assets.cleaning.recipes import apply_gates, resolve_recipe
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.contracts import EXCLUSIONS_FILE, MANIFEST_FILE, PART_GLOB, QUARANTINE_FILE, SHARD_INDEX_FILE
from platform_assets.dedup.settings import DedupSettings
from platform_assets.ingest.file_partitions import partition_keys, source_partitions_of
from platform_assets.ingest.settings import SourceConfigType
from platform_assets.layout import asset_dir
from platform_assets.manifest_file import parse_manifest
from platform_assets.query import key_globs, output_dataset
from platform_assets.splits.assignment import SPLIT_NAMES
from platform_assets.splits.settings import SplitSettings
from platform_assets.storage import Storage
from platform_assets.tokenize.tokenizer_artifact import ARTIFACT_FILE

TOKENIZER_DIR = "tokenizer"  # the tokenizer travels inside the packed shard set (defs/packed_shards/assets.py)


@dataclass(frozen=True)
class LeakCheck:
    """The latest `no_split_leakage` evaluation of dataset_splits (kept by the orchestrator, not on storage)."""

    passed: bool
    summary: str


@dataclass(frozen=True)
class SourceFacts:
    name: str
    format: str
    licenses: tuple[str | None, ...]
    """Distinct `license` values of its documents in the splits (None: no licence recorded)."""
    raw: int
    quarantined: int
    cleaned: int
    kept: int
    """Documents left after dedup (every one of them is in a split)."""


@dataclass(frozen=True)
class SplitFacts:
    name: str
    documents: int
    sequences: int
    tokens: int


@dataclass(frozen=True)
class FormatFacts:
    """One shard format's directory: what its files weigh and the hash of the index that lists them."""

    name: str
    files: int
    bytes: int
    index_sha256: str
    splits: tuple[str, ...]
    """Splits with at least one set in this format, in split order."""


@dataclass(frozen=True)
class TokenizerFacts:
    algorithm: str
    trained_on: str
    vocab_size: int
    sha256: str
    special_tokens: tuple[tuple[str, str, int], ...]
    """(role, token, id), by role."""


@dataclass(frozen=True)
class PackingFacts:
    strategy: str
    overlong: str
    seq_len: int
    sequences: int
    tokens: int
    documents: int
    efficiency: float
    token_dtype: str
    has_loss_mask: bool


@dataclass(frozen=True)
class MediaFacts:
    md5: str
    shards_dir: str
    dvc_target: str
    samples: int
    modalities: tuple[tuple[str, int], ...]
    formats: tuple[FormatFacts, ...]


class RemovalGates(Protocol):
    """config.CleaningGates, as far as the card reads it (not imported: config imports versioning)."""

    max_removal_rate: float
    max_rule_removal_rate: float
    rule_bounds: dict[str, float]


@dataclass(frozen=True)
class RecipeFacts:
    """A cleaning recipe as its sources were cleaned: resolved steps and presets, effective bounds."""

    name: str
    sources: tuple[str, ...]
    steps: tuple[str, ...]
    quality_presets: tuple[str, ...]
    max_removal_rate: float | None
    """The share of a source's documents cleaning may remove; None: the global gates were not given."""
    max_rule_removal_rate: float | None
    rule_bounds: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class CardFacts:
    md5: str
    shards_dir: str
    """The versioned directory, relative to the DVC repository (what `dvc pull` restores)."""
    card_dir: str
    """Where the card is written, relative to the DVC repository."""
    recorded_in: str
    """`dvc.lock`, or the `.dvc` file of `dvc add`: the file to commit to pin the version in git."""
    dvc_target: str
    """What `dvc pull` takes: the dvc.yaml stage, or the `.dvc` file of `dvc add`."""
    git_revision: str | None
    git_dirty: bool
    remote: str | None
    sources: tuple[SourceFacts, ...]
    cleaning_steps: tuple[str, ...]
    quality_presets: tuple[str, ...]
    cleaning_removed: tuple[tuple[str, int], ...]
    dedup_removed: tuple[tuple[str, int], ...]
    dedup_settings: DedupSettings
    split_settings: SplitSettings
    splits: tuple[SplitFacts, ...]
    leak_check: LeakCheck | None
    languages: tuple[tuple[str | None, int], ...]
    """Documents per `lang` code, most frequent first (ties by code)."""
    tokenizer: TokenizerFacts | None
    packing: PackingFacts
    formats: tuple[FormatFacts, ...]
    media: MediaFacts | None
    recipes: tuple[RecipeFacts, ...] = ()
    """One per recipe the sources name, in the order of their first source."""


# -- reading outputs ----------------------------------------------------------------------------------
def _rows(storage: Storage, rel_dir: str, patterns: Sequence[str]) -> int:
    ds = output_dataset(storage, rel_dir, patterns)
    return 0 if ds is None else ds.count_rows()  # from the Parquet footers


def _grouped(storage: Storage, rel_dir: str, pattern: str, columns: Sequence[str]) -> dict[tuple, int]:
    """Rows per distinct value of `columns`; a column an older output lacks groups as null."""
    ds = output_dataset(storage, rel_dir, pattern)
    if ds is None:
        return {}
    con = duckdb.connect()
    con.register("output", ds)
    select = ", ".join(f'"{c}"' if c in ds.schema.names else f'NULL AS "{c}"' for c in columns)
    rows = con.execute(f"SELECT {select}, count(*) FROM output GROUP BY ALL").fetchall()
    return {tuple(r[:-1]): int(r[-1]) for r in rows}


def _by_count(counts: Mapping[Any, int]) -> tuple[tuple[Any, int], ...]:
    """Most frequent first, ties by key (None last): a stable order for byte-identical cards."""
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] or "")))


def _rule_counts(storage: Storage, rel_dirs: Sequence[str]) -> tuple[tuple[str, int], ...]:
    total: Counter[str] = Counter()
    for rel in rel_dirs:
        total.update({rule: n for (rule,), n in _grouped(storage, rel, EXCLUSIONS_FILE, ["rule"]).items()})
    return _by_count(total)


def _formats(storage: Storage, rel: str) -> tuple[FormatFacts, ...]:
    """Each format directory of a shard set (one holding an index.json), weighed from the committed
    `_manifest.json`, which lists every file with its size and sha256."""
    manifest = storage.uri(f"{rel}/{MANIFEST_FILE}")
    # a damaged manifest (or one naming a file outside the output) is a ManifestError naming it, not a
    # KeyError from the card or a read elsewhere
    files = parse_manifest(storage.read_bytes(f"{rel}/{MANIFEST_FILE}"), manifest)
    out = []
    for path in sorted(files):
        fmt, _, name = path.partition("/")
        if name != SHARD_INDEX_FILE:
            continue
        mine = [info for p, info in files.items() if p.startswith(f"{fmt}/")]
        index = storage.read_json(f"{rel}/{path}")
        present = {entry["split"] for entry in index["sets"]}
        out.append(FormatFacts(fmt, len(mine), sum(i.bytes for i in mine), files[path].sha256,
                               tuple(s for s in SPLIT_NAMES if s in present)))
    return tuple(out)


def _first_index(storage: Storage, rel: str, formats: Sequence[FormatFacts]) -> dict:
    """The index of the first format: every format holds the same samples (`formats_agree`)."""
    return storage.read_json(f"{rel}/{formats[0].name}/{SHARD_INDEX_FILE}") if formats else {}


def _tokenizer(storage: Storage, shards_rel: str) -> TokenizerFacts | None:
    path = f"{shards_rel}/{TOKENIZER_DIR}/{ARTIFACT_FILE}"
    if not storage.exists(path):
        return None
    art = storage.read_json(path)
    info = art.get("info", {})
    special = tuple((role, t["token"], int(t["id"])) for role, t in sorted(art["special_tokens"].items()))
    return TokenizerFacts(info.get("algorithm", "pretrained"), info.get("source", "unknown"), int(art["vocab_size"]),
                          art["tokenizer_sha256"], special)


def _media(storage: Storage, media_record: Mapping[str, Any] | None) -> MediaFacts | None:
    rel = asset_dir("media_shards")
    if not media_record or not storage.exists(f"{rel}/{MANIFEST_FILE}"):
        return None
    formats = _formats(storage, rel)
    totals = _first_index(storage, rel, formats).get("totals", {})
    target = str(media_record.get("stage") or media_record["recorded_in"])
    return MediaFacts(str(media_record["md5"]), str(media_record["path"]), target, int(totals.get("samples", 0)),
                      _by_count(totals.get("modalities", {})), formats)


def enabled_steps(cleaning: CleaningSettings) -> tuple[str, ...]:
    """The cleaning steps that ran, in run order (the registry's)."""
    def on(name: str) -> bool:
        section = getattr(cleaning, name)
        return bool(section) if isinstance(section, list | tuple) else bool(section.enabled)

    return tuple(name for name in STEP_BUILDERS if on(name))


def preset_labels(cleaning: CleaningSettings) -> tuple[str, ...]:
    """`gopher_quality`, or `c4 (filter_curly_bracket: False)` for a preset with overrides."""
    labels = []
    for preset in cleaning.quality:
        overrides = {k: v for k, v in preset.model_dump(exclude_defaults=True).items() if k != "preset"}
        details = ", ".join(f"{k}: {v}" for k, v in sorted(overrides.items()))
        labels.append(f"{preset.preset} ({details})" if details else preset.preset)
    return tuple(labels)


def recipe_facts(sources: Sequence[SourceConfigType], cleaning: CleaningSettings,
                 gates: RemovalGates | None) -> tuple[RecipeFacts, ...]:
    """Each recipe the sources name (`recipe:`, else `cleaning.default_recipe`) with its sources; its
    bounds are `gates` with the recipe's own in their place (recipes.apply_gates, as the checks use)."""
    by_recipe: dict[str, list[str]] = {}
    for src in sources:
        by_recipe.setdefault(getattr(src, "recipe", None) or cleaning.default_recipe, []).append(src.name)
    out = []
    for name, names in by_recipe.items():
        recipe = resolve_recipe(cleaning, name)
        if gates is not None:
            bounds: Any = apply_gates(gates, recipe.gates)  # type: ignore[type-var]
            total, per_rule, rules = bounds.max_removal_rate, bounds.max_rule_removal_rate, bounds.rule_bounds
        else:
            g = recipe.gates
            total, per_rule, rules = g.max_removal_rate, g.max_rule_removal_rate, g.rule_bounds
        out.append(RecipeFacts(name, tuple(names), enabled_steps(recipe.settings), preset_labels(recipe.settings),
                               total, per_rule, tuple(sorted(rules.items()))))
    return tuple(out)


# -- the facts ----------------------------------------------------------------------------------------
def gather_card_facts(storage: Storage, record: Mapping[str, Any], *, sources: Sequence[SourceConfigType],
                      cleaning: CleaningSettings, dedup: DedupSettings, splits: SplitSettings, card_dir: str,
                      leak_check: LeakCheck | None = None, gates: RemovalGates | None = None) -> CardFacts:
    """Everything the card states about the version in `record` (record.version_record's dict).
    `gates`: the config's `cleaning_gates`, for each recipe's effective removal bounds."""
    shards_rel = asset_dir("packed_shards")
    split_rel, dedup_rel = asset_dir("dataset_splits"), asset_dir("deduplicated_documents")
    grouped = _grouped(storage, split_rel, PART_GLOB, ["source", "split", "lang", "license"])
    per: dict[str, Counter] = {key: Counter() for key in ("source", "split", "lang")}
    licenses: dict[str, set[str | None]] = {}
    for (source, split, lang, license_), n in grouped.items():
        per["source"][source] += n
        per["split"][split] += n
        per["lang"][lang] += n
        licenses.setdefault(source, set()).add(license_)
    kept = {source: n for (source,), n in _grouped(storage, dedup_rel, PART_GLOB, ["source"]).items()}

    source_facts = []
    for src in sources:
        # a source split into file partitions (`file_partitions`) is one output folder per key
        keys = [part.key for part in source_partitions_of(src)]
        raw_rel, clean_rel = "raw_documents", "cleaned_documents"  # the asset folders, a key's below each
        media = getattr(src, "media", None)
        found = licenses.get(src.name) or {src.license}
        source_facts.append(SourceFacts(
            src.name, f"{src.format} ({', '.join(media)})" if media else src.format,
            tuple(sorted(found, key=lambda v: (v is None, v or ""))),
            _rows(storage, raw_rel, key_globs(keys, PART_GLOB)),
            _rows(storage, raw_rel, key_globs(keys, QUARANTINE_FILE)),
            _rows(storage, clean_rel, key_globs(keys, PART_GLOB)), kept.get(src.name, 0)))

    formats = _formats(storage, shards_rel)
    index = _first_index(storage, shards_rel, formats)
    sequences: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for entry in index.get("sets", []):
        sequences[entry["split"]] += entry["samples"]
        tokens[entry["split"]] += entry["tokens"]
    totals, packing = index.get("totals", {}), index.get("packing", {})
    media_record = record.get("media")
    return CardFacts(
        md5=str(record["md5"]), shards_dir=str(record["path"]), card_dir=card_dir,
        recorded_in=str(record["recorded_in"]), dvc_target=str(record.get("stage") or record["recorded_in"]),
        git_revision=record.get("git_revision"), git_dirty=bool(record.get("git_dirty")),
        remote=record.get("remote") if record.get("pushed") else None,
        sources=tuple(source_facts),
        cleaning_steps=enabled_steps(cleaning), quality_presets=preset_labels(cleaning),
        cleaning_removed=_rule_counts(storage, [asset_dir("cleaned_documents", k) for k in partition_keys(sources)]),
        dedup_removed=_rule_counts(storage, [dedup_rel]), dedup_settings=dedup, split_settings=splits,
        splits=tuple(SplitFacts(s, per["split"][s], sequences[s], tokens[s]) for s in SPLIT_NAMES
                     if per["split"][s] or sequences[s]),
        leak_check=leak_check, languages=_by_count(per["lang"]), tokenizer=_tokenizer(storage, shards_rel),
        packing=PackingFacts(
            str(packing.get("strategy", "unknown")), str(packing.get("overlong", "unknown")),
            int(index.get("seq_len", 0)), int(totals.get("samples", 0)), int(totals.get("tokens", 0)),
            int(totals.get("documents", 0)), float(totals.get("efficiency", 0.0)),
            str(index.get("token_dtype", "")), bool(index.get("has_loss_mask", False))),
        formats=formats,
        media=_media(storage, media_record if isinstance(media_record, Mapping) else None),
        recipes=recipe_facts(sources, cleaning, gates),
    )

