"""Spot checks: a deterministic sample of the documents a rule removed (or of the kept ones), with the
value that tripped the rule and the start of the text: the "look at 50-100 examples" a data engineer
does before trusting a filter, without writing SQL.

The sample is the `n` documents with the smallest md5(seed || id): the same documents on every run
and machine for the same outputs, spread over sources and files rather than the first rows of one.
Removed documents are shown with the text their stage saw: cleaning rules with the raw text, dedup
and tokenization with the cleaned text.

Two passes, so memory does not grow with the output: DuckDB picks the sample from every column but the
text (ids, sources, rules, values), then the excerpts of just those documents are read by an Arrow scan
that holds one batch at a time. One query that also cut the excerpts read every document's text through
DuckDB's scan of the Arrow dataset, which keeps up to 16 batches in flight: +207 MB for the kept sample
of deduplicated_documents at 16x the input of pipeline_scaling's 16 MB base (8 MiB batches).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from platform_assets.query import OUTPUT_VIEWS, connect, output_dataset, registered_views
from platform_assets.storage import Storage

EXCERPT_CHARS = 240
# The excerpt pass finds the sample's documents by their ids first (a row group's id column, ~36 B a
# document), then decodes the text of only the row groups that hold one, EXCERPT_BATCH_ROWS rows at a
# time, without Arrow's pre-buffering of a whole part. Scanning every row group's text with the ids as
# a filter held 170-250 MB while it ran on pipeline_scaling's corpus (1x-16x, the dedup asset's spot
# checks) and read all of it; a whole row group decoded at once (38 MB of text at 16x) held 169 MB, in
# batches of 256 rows 64 MB.
EXCERPT_BATCH_ROWS = 256
_WHITESPACE = re.compile(r"[\t\n\f\r ]+")  # RE2's \s, which the excerpts were cut with in DuckDB before
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
               views: Views | None = None,
               kept_view: str = "dataset_splits") -> list[SpotCheck]:
    """`n` removed documents whose rule is `rule` or starts with `rule.` (a rule group such as
    `gopher_quality`; None: any rule), from the exclusion tables of `stages` (REMOVALS' keys), at most
    `per_rule` of each rule; or with `kept` `n` documents of `kept_view` (default the final split
    output; a stage's own output view for what that stage kept). `views` narrows what is read (one
    partition's directories); default: every output under the root."""
    views = views or OUTPUT_VIEWS
    con = connect(storage, views)
    present = registered_views(con)
    order = "md5(CAST($seed AS VARCHAR) || d.id)"
    params: dict[str, object] = {"seed": seed, "n": n, "source": source}
    if kept:
        if kept_view not in present:
            return []
        sql = (f"SELECT d.id, d.source, d.modality, NULL, NULL, '{kept_view}' FROM {kept_view} d "
               f"WHERE $source IS NULL OR d.source = $source ORDER BY {order} LIMIT $n")
        return _with_excerpts(storage, views, con.execute(sql, params).fetchall())
    selects = []
    for removals, documents in REMOVALS.items():
        if removals in stages and removals in present and documents in present:
            selects.append(f"SELECT d.id, d.source, d.modality, e.rule, e.value, '{documents}' AS view, {order} AS k "
                           f"FROM {removals} e JOIN {_removed_documents(documents, removals)} d ON d.id = e.id "
                           f"WHERE ($rule IS NULL OR e.rule = $rule OR starts_with(e.rule, $rule || '.')) "
                           f"AND ($source IS NULL OR d.source = $source)")
    if not selects:
        return []
    params["rule"] = rule
    # per_rule: the first documents of each rule by the same hash, then the rules in name order
    per = f"QUALIFY row_number() OVER (PARTITION BY rule ORDER BY k) <= {int(per_rule)} " if per_rule else ""
    sql = (f"SELECT id, source, modality, rule, value, view FROM ({' UNION ALL '.join(selects)}) "
           f"{per}ORDER BY {'rule, ' if per_rule else ''}k LIMIT $n")
    return _with_excerpts(storage, views, con.execute(sql, params).fetchall())


def _removed_documents(documents: str, removals: str) -> str:
    """The documents a stage removed, as a subquery to join its exclusions with: DuckDB builds the
    semi-join's hash table on the exclusions' ids and streams the documents past it, where a plain join
    of the two held more of the documents (the dedup asset's spot check on pipeline_scaling's 16x
    corpus: 103 -> 68 MB, the same rows)."""
    return f"(SELECT id, source, modality FROM {documents} WHERE id IN (SELECT id FROM {removals}))"


# name -> (output dir, file glob or globs): query.OUTPUT_VIEWS, or query.output_views of a config's keys
Views = Mapping[str, tuple[str, str | Sequence[str]]]


def _with_excerpts(storage: Storage, views: Views, rows: list[tuple]) -> list[SpotCheck]:
    """The sampled rows (id, source, modality, rule, value, documents view) with the start of each text."""
    excerpts: dict[tuple[str, str], str | None] = {}
    for view in sorted({row[5] for row in rows}):
        ids = sorted({row[0] for row in rows if row[5] == view})
        for doc_id, text in _texts_of(output_dataset(storage, *views[view]), ids):
            excerpts.setdefault((view, doc_id), None if text is None else _excerpt(text))
    return [SpotCheck(doc_id, src, modality, rule, value, excerpts.get((view, doc_id)))
            for doc_id, src, modality, rule, value, view in rows]


def _texts_of(dataset: pads.FileSystemDataset, ids: list[str]) -> Iterator[tuple[str, str | None]]:
    """(id, text) of the documents with one of `ids`, in the dataset's order: each row group's ids are
    read, its text only where one of them is wanted, in batches of EXCERPT_BATCH_ROWS up to the batch
    of the last wanted id it holds; stops once every id was found."""
    left = set(ids)
    for path in dataset.files:
        with dataset.filesystem.open_input_file(path) as f:
            part = pq.ParquetFile(f, pre_buffer=False)
            for row_group in range(part.num_row_groups):
                if not left:
                    return
                wanted = pa.array(sorted(left), pa.string())  # an id found once is not read again
                row_ids = part.read_row_group(row_group, columns=["id"], use_threads=False)["id"]
                here = set(row_ids.filter(pc.is_in(row_ids, value_set=wanted)).to_pylist())
                if not here:
                    continue
                for batch in part.iter_batches(EXCERPT_BATCH_ROWS, row_groups=[row_group], columns=["id", "text"],
                                               use_threads=False):
                    found = batch.filter(pc.is_in(batch["id"], value_set=wanted))
                    for doc_id, text in zip(found["id"].to_pylist(), found["text"].to_pylist(), strict=True):
                        left.discard(doc_id)
                        here.discard(doc_id)
                        yield doc_id, text
                    if not here:  # the rest of the row group's text is not decoded: ~half of it on average
                        break


def _excerpt(text: str) -> str:
    return _WHITESPACE.sub(" ", text[:EXCERPT_CHARS])


def rules_removed(storage: Storage, source: str | None = None,
                  views: Views | None = None) -> dict[str, int]:
    """{rule: documents removed} over the exclusion tables that exist, for choosing what to spot-check
    (`views`: as spot_check's)."""
    con = connect(storage, views or OUTPUT_VIEWS)
    present = registered_views(con)
    selects = [f"SELECT e.rule, d.source FROM {r} e JOIN {_removed_documents(d, r)} d ON d.id = e.id"
               for r, d in REMOVALS.items()
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
