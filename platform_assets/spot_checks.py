"""Spot checks: a deterministic sample of the documents a rule removed (or of the kept ones), with the
value that tripped the rule and the start of the text: the "look at 50-100 examples" a data engineer
does before trusting a filter, without writing SQL.

The sample is the `n` documents with the smallest md5(seed || id): the same documents on every run
and machine for the same outputs, spread over sources and files rather than the first rows of one.
Removed documents are shown with the text their stage saw: cleaning rules with the raw text, dedup
and tokenization with the cleaned text.
"""

from __future__ import annotations

from dataclasses import dataclass

from platform_assets.query import OUTPUT_VIEWS, connect, registered_views
from platform_assets.storage import Storage

EXCERPT_CHARS = 240
# exclusions view -> the documents view holding the text that stage judged
REMOVALS = {
    "cleaning_exclusions": "raw_documents",
    "dedup_exclusions": "cleaned_documents",
    "tokenize_exclusions": "dataset_splits",
}


@dataclass(frozen=True)
class SpotCheck:
    id: str
    source: str
    modality: str
    rule: str | None  # None for a kept document
    value: str | None
    excerpt: str


def spot_check(storage: Storage, rule: str | None = None, n: int = 20, seed: int = 0, source: str | None = None,
               kept: bool = False, stages: tuple[str, ...] = tuple(REMOVALS), per_rule: int | None = None,
               views: dict[str, tuple[str, str]] | None = None,
               kept_view: str = "dataset_splits") -> list[SpotCheck]:
    """`n` removed documents whose rule is `rule` or starts with `rule.` (a rule group such as
    `gopher_quality`; None: any rule), from the exclusion tables of `stages` (REMOVALS' keys), at most
    `per_rule` of each rule; or with `kept` `n` documents of `kept_view` (default the final split
    output; a stage's own output view for what that stage kept). `views` narrows what is read (one
    partition's directories); default: every output under the root."""
    con = connect(storage, views or OUTPUT_VIEWS)
    present = registered_views(con)
    excerpt = f"regexp_replace(left(d.text, {EXCERPT_CHARS}), '\\s+', ' ', 'g')"
    order = "md5(CAST($seed AS VARCHAR) || d.id)"
    params: dict[str, object] = {"seed": seed, "n": n, "source": source}
    if kept:
        if kept_view not in present:
            return []
        sql = (f"SELECT d.id, d.source, d.modality, NULL, NULL, {excerpt} FROM {kept_view} d "
               f"WHERE $source IS NULL OR d.source = $source ORDER BY {order} LIMIT $n")
        return [SpotCheck(*row) for row in con.execute(sql, params).fetchall()]
    selects = []
    for removals, documents in REMOVALS.items():
        if removals in stages and removals in present and documents in present:
            selects.append(f"SELECT d.id, d.source, d.modality, e.rule, e.value, {excerpt} AS excerpt, {order} AS k "
                           f"FROM {removals} e JOIN {documents} d ON d.id = e.id "
                           f"WHERE ($rule IS NULL OR e.rule = $rule OR starts_with(e.rule, $rule || '.')) "
                           f"AND ($source IS NULL OR d.source = $source)")
    if not selects:
        return []
    params["rule"] = rule
    # per_rule: the first documents of each rule by the same hash, then the rules in name order
    per = f"QUALIFY row_number() OVER (PARTITION BY rule ORDER BY k) <= {int(per_rule)} " if per_rule else ""
    sql = (f"SELECT id, source, modality, rule, value, excerpt FROM ({' UNION ALL '.join(selects)}) "
           f"{per}ORDER BY {'rule, ' if per_rule else ''}k LIMIT $n")
    return [SpotCheck(*row) for row in con.execute(sql, params).fetchall()]


def rules_removed(storage: Storage, source: str | None = None) -> dict[str, int]:
    """{rule: documents removed} over the exclusion tables that exist, for choosing what to spot-check."""
    con = connect(storage, OUTPUT_VIEWS)
    present = registered_views(con)
    selects = [f"SELECT e.rule, d.source FROM {r} e JOIN {d} d ON d.id = e.id" for r, d in REMOVALS.items()
               if r in present and d in present]
    if not selects:
        return {}
    rows = con.execute(f"SELECT rule, count(*) FROM ({' UNION ALL '.join(selects)}) "
                       "WHERE $source IS NULL OR source = $source GROUP BY rule ORDER BY rule",
                       {"source": source}).fetchall()
    return dict(rows)


def to_markdown(checks: list[SpotCheck]) -> str:
    """A table for asset metadata and the CLI."""
    lines = ["| id | source | rule | value | text |", "|---|---|---|---|---|"]
    for c in checks:
        text = c.excerpt.replace("|", "\\|") if c.excerpt else "*(no text: a media document)*"
        lines.append(f"| `{c.id[:12]}` | {c.source} | {c.rule or 'kept'} | {c.value or ''} | {text} |")
    return "\n".join(lines)
