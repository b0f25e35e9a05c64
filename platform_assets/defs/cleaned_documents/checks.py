"""Quality gates on cleaned_documents.

`removal_rate_within_bounds` and `no_residual_pii` block: downstream dedup must never see a source a
broken rule emptied, or text with personal data left in it. `license_allowed` blocks a source whose
kept documents lack an allowed licence (`cleaning.licenses`; passes when no allow-list is set).
Each source is checked against its recipe (cleaning/recipes.py): its settings, and the removal bounds
of `cleaning_gates` with the recipe's own in their place (`sft`: at most half of a source removed).
"""

from __future__ import annotations

from collections import Counter

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.cleaning.chat_messages import message_contents
from platform_assets.cleaning.language_tags import AllowList, tag_count
from platform_assets.cleaning.license_gate import license_violations
from platform_assets.cleaning.pii import Redactor
from platform_assets.cleaning.pipeline import Funnel
from platform_assets.cleaning.recipes import Recipe, apply_gates
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.config import CleaningGates, PipelineConfig
from platform_assets.parquet_parts import TableSource, output_schema, read_batches
from platform_assets.storage import Storage
from platform_assets.tokenize.conversations import chat_candidates

ASSET = "cleaned_documents"

CLEANING_CHECKS = [
    dg.AssetCheckSpec(
        "removal_rate_within_bounds",
        asset=ASSET,
        blocking=True,
        description="Each rule group removes at most its bound of the documents entering its "
        "step, and cleaning as a whole at most `cleaning_gates.max_removal_rate` (the source's "
        "recipe may set its own bounds).",
    ),
    dg.AssetCheckSpec(
        "no_residual_pii",
        asset=ASSET,
        blocking=True,
        description="A second PII scan of the kept text and chat messages finds nothing to redact.",
    ),
    dg.AssetCheckSpec(
        "removal_rate_per_modality_within_bounds",
        asset=ASSET,
        blocking=True,
        description="Cleaning removes at most `cleaning_gates.max_removal_rate` of each modality's documents "
        "(images, PDF pages, audio, text): a broken media filter cannot empty one modality while the "
        "source as a whole looks fine.",
    ),
    dg.AssetCheckSpec(
        "license_allowed",
        asset=ASSET,
        blocking=True,
        description="Every kept document has a licence in `cleaning.licenses.allow` (no allow-list: "
        "passes). In `fail` mode a source without an allowed licence stops here, named with its licences.",
    ),
    dg.AssetCheckSpec(
        "language_mix_as_configured",
        asset=ASSET,
        description="Kept documents are in allowed languages, above the score threshold, and "
        "each language's share is within `cleaning_gates.language_shares`.",
    ),
]


def rule_group_rates(funnel: Funnel) -> dict[str, tuple[int, int]]:
    """{group: (removed, entering its step)}; a group is a rule's prefix (`c4` of `c4.curly_bracket`)."""
    out: dict[str, tuple[int, int]] = {}
    for step in funnel.steps:
        groups: Counter[str] = Counter()
        for rule, n in step.removed_docs.items():
            groups[rule.split(".")[0]] += n
        for group, n in groups.items():
            removed, entering = out.get(group, (0, 0))
            out[group] = (removed + n, entering + step.docs_in)
    return out


def removal_violations(funnel: Funnel, gates: CleaningGates) -> list[str]:
    problems = []
    if funnel.removal_rate() > gates.max_removal_rate:
        problems.append(f"all rules: {funnel.removal_rate():.1%} removed > {gates.max_removal_rate:.0%}")
    for step in funnel.steps:
        for rule, n in step.removed_docs.items():  # full-rule bounds
            bound = gates.rule_bounds.get(rule)
            if bound is not None and step.docs_in and n / step.docs_in > bound:
                problems.append(f"{rule}: {n / step.docs_in:.1%} removed > {bound:.0%}")
    for group, (removed, entering) in rule_group_rates(funnel).items():
        bound = gates.rule_bounds.get(group, gates.max_rule_removal_rate)
        if entering and removed / entering > bound:
            problems.append(f"{group}: {removed / entering:.1%} removed > {bound:.0%}")
    return problems


def residual_pii(storage: Storage, rel: str, cfg: PipelineConfig,
                 cleaning: CleaningSettings | None = None) -> Counter[str]:
    pii = (cleaning or cfg.cleaning).pii  # the source's recipe, else the global block
    if not pii.enabled:
        return Counter()
    redactor = Redactor(pii)
    found: Counter[str] = Counter()
    # slices of `io.work_bytes` (the check's Python holds each text as a str): a batch of io.batch_rows
    # rows would be the whole of a 60 MB source at once
    slices = TableSource(storage, rel, cfg.io.model_copy(update={"batch_bytes": cfg.io.work_bytes}))
    for batch in slices.batches(["text", "meta"]):
        for text in batch.column("text").to_pylist():
            redactor.redact(text, found)
        metas = batch.column("meta")
        for row in chat_candidates(metas):  # chat messages are what trains: scan them too
            for content in message_contents(metas[int(row)].as_py()):
                redactor.redact(content, found)
    return found


def language_problems(storage: Storage, rel: str, cfg: PipelineConfig,
                      cleaning: CleaningSettings | None = None) -> tuple[list[str], dict[str, int]]:
    """Kept documents below min_score or outside the allow-list, and language shares outside their
    bounds. Captions and transcripts (`label_only_modalities`) are kept whatever their score, so only
    their confident labels count here."""
    language = (cleaning or cfg.cleaning).language
    # short texts have their own, lower thresholds (min_score_by_words): the check has no text, so it
    # holds every document to the lowest of them
    min_score = min([language.min_score, *language.min_score_by_words.values()])
    shares: Counter[str] = Counter()
    tags: Counter[tuple[str, str | None]] = Counter()
    low = 0
    schema = output_schema(storage, rel)
    with_modality = schema is not None and "modality" in schema.names
    with_script = schema is not None and "lang_script" in schema.names
    columns = ["lang", "lang_score", *(["modality"] if with_modality else [])]
    columns += ["lang_script"] if with_script else []
    for batch in read_batches(storage, rel, columns):
        below = pc.less(batch.column("lang_score"), min_score)
        if with_modality and language.label_only_modalities:
            label_only = pc.is_in(batch.column("modality"), value_set=pa.array(language.label_only_modalities))
            batch = batch.filter(pc.invert(pc.and_(label_only, below.fill_null(False))))
            below = pc.less(batch.column("lang_score"), min_score)
        langs = batch.column("lang").to_pylist()
        scripts = batch.column("lang_script").to_pylist() if with_script else [None] * len(langs)
        shares.update(v for v in langs if v is not None)
        tags.update((v, s) for v, s in zip(langs, scripts, strict=True) if v is not None)
        low += int(pc.sum(below).as_py() or 0)
    total = sum(shares.values())
    problems = []
    if low:
        problems.append(f"{low} kept documents score below min_score {min_score}")
    if language.allow is not None:
        allow = AllowList(language.allow)  # BCP-47 matching: `no` covers nb and nn, `zh-Hant` a script
        outside = {f"{k}-{s}" if s else k: v for (k, s), v in tags.items() if not allow.allows(k, s)}
        if outside:
            problems.append(f"languages outside the allow-list: {outside}")
    for lang, (lo, hi) in cfg.cleaning_gates.language_shares.items():
        # keys are tags like allow-list entries (`no`: nb and nn; `zh-Hans`: a script); none kept: 0
        share = tag_count(lang, tags) / total if total else 0.0
        if not lo <= share <= hi:
            problems.append(f"{lang}: {share:.1%} of kept documents, expected {lo:.0%}-{hi:.0%}")
    return problems, dict(shares.most_common())


def modality_counts(storage: Storage, rel: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for batch in read_batches(storage, rel, ["modality"]):
        for entry in pc.value_counts(batch.column("modality")).to_pylist():
            counts[entry["values"]] += entry["counts"]
    return counts


def modality_removal(storage: Storage, in_rel: str, out_rel: str, bound: float) -> tuple[dict[str, float], list[str]]:
    """({modality: share removed}, violations) from the `modality` column of input and output."""
    before, after = modality_counts(storage, in_rel), modality_counts(storage, out_rel)
    rates = {m: round(1 - after.get(m, 0) / n, 4) for m, n in sorted(before.items()) if n}
    return rates, [f"{m}: {r:.2%} of {before[m]} removed > {bound:.0%}" for m, r in rates.items() if r > bound]


def license_problems(storage: Storage, rel: str, cfg: PipelineConfig, source: str,
                     cleaning: CleaningSettings | None = None) -> tuple[list[str], Counter[str]]:
    """Kept documents outside the licence allow-list, as "source: licence (n documents)" lines."""
    settings = (cleaning or cfg.cleaning).licenses
    found: Counter[str] = Counter()
    if not settings.enabled:
        return [], found
    schema = output_schema(storage, rel)
    if schema is not None and "license" in schema.names:
        for batch in read_batches(storage, rel, ["license"]):
            found.update(license_violations(batch.column("license"), settings))
    allow = ", ".join(settings.allow or ()) or "nothing"
    return [f"source {source!r}: licence {lic} not in the allow-list [{allow}] ({n} documents)"
            if lic != "(missing)" else f"source {source!r}: no licence ({n} documents)"
            for lic, n in found.most_common()], found


def evaluate_cleaning_checks(
    storage: Storage, rel: str, funnel: Funnel, cfg: PipelineConfig, in_rel: str | None = None,
    source: str | None = None, recipe: Recipe | None = None,
) -> list[dg.AssetCheckResult]:
    """The checks of one cleaned source, against `recipe` (None: the source's recipe in `cfg`)."""
    key = source or rel.rstrip("/").rsplit("/", 1)[-1]  # a source, or one of its file partitions
    name = cfg.source_partition(key).source if key in cfg.partition_keys() else key
    if recipe is None:
        recipe = cfg.cleaning_recipe(name if name in cfg.source_names() else None)
    cleaning, gates = recipe.settings, apply_gates(cfg.cleaning_gates, recipe.gates)
    removal = removal_violations(funnel, gates)
    pii = residual_pii(storage, rel, cfg, cleaning)
    lang_problems, shares = language_problems(storage, rel, cfg, cleaning) if cleaning.language.enabled else ([], {})
    rates = {g: round(r / e, 4) for g, (r, e) in rule_group_rates(funnel).items() if e}
    licenses, by_license = license_problems(storage, rel, cfg, name, cleaning)
    return [
        dg.AssetCheckResult(
            check_name="removal_rate_within_bounds",
            passed=not removal,
            metadata={
                "violations": "\n".join(removal) or "none",
                "removal_rate": round(funnel.removal_rate(), 4),
                "recipe": recipe.name,
                "max_removal_rate": gates.max_removal_rate,
                **{f"rate.{g}": v for g, v in rates.items()},
            },
        ),
        dg.AssetCheckResult(
            check_name="no_residual_pii",
            passed=sum(pii.values()) == 0,
            metadata={"residual_matches": sum(pii.values()), **{f"type.{k}": v for k, v in pii.items()}},
        ),
        *([_modality_check(storage, in_rel, rel, gates.max_removal_rate)] if in_rel else []),
        dg.AssetCheckResult(
            check_name="license_allowed",
            passed=not licenses,
            metadata={
                "violations": "\n".join(licenses) or "none",
                "allow": ", ".join(cleaning.licenses.allow or ()) or "not configured (no gate)",
                "mode": cleaning.licenses.on_missing_or_disallowed,
                **{f"license.{k}": v for k, v in by_license.items()},
            },
        ),
        dg.AssetCheckResult(
            check_name="language_mix_as_configured",
            passed=not lang_problems,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "problems": "\n".join(lang_problems) or "none",
                "languages": ", ".join(f"{k}: {v}" for k, v in shares.items()) or "none",
            },
        ),
    ]


def _modality_check(storage: Storage, in_rel: str, rel: str, bound: float) -> dg.AssetCheckResult:
    rates, violations = modality_removal(storage, in_rel, rel, bound)
    return dg.AssetCheckResult(
        check_name="removal_rate_per_modality_within_bounds", passed=not violations,
        metadata={"violations": "\n".join(violations) or "none", "bound": bound,
                  **{f"rate.{m}": r for m, r in rates.items()}})
