"""The statistics as the Dagster UI shows them: markdown tables with SVG bar charts (charts.py, so a
re-run gives identical metadata) and plain dicts for JSON metadata. Dagster-free: the assets wrap the
strings in `MetadataValue.md` and the dicts in `MetadataValue.json`."""

from __future__ import annotations

from typing import Any

from platform_assets.charts import bar_chart_markdown
from platform_assets.stats.histograms import LengthHistogram, SetLengths, split_rank
from platform_assets.stats.labels import LabelCounts, row_name

MAX_CHARTS = 12
"""Charts per metadata entry: 3 splits x 4 sources; further sets are in the table and the JSON."""


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _set_name(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}"


def _occupied(hists: list[LengthHistogram]) -> range:
    """The bins from the first to the last non-empty one over all histograms."""
    used = [i for h in hists for i in h.counts.nonzero()[0].tolist()]
    return range(min(used), max(used) + 1) if used else range(0)


def histograms_markdown(title: str, hists: dict[tuple[str, str], LengthHistogram]) -> str:
    """A table (a row per occupied bin, a column per split/source) with documents, mean, min and max,
    then one bar chart per set."""
    if not hists:
        return f"**{title}**: no documents"
    keys = list(hists)
    any_hist = hists[keys[0]]
    labels = any_hist.bin_labels()
    span = _occupied(list(hists.values()))
    head = "| tokens | " + " | ".join(_set_name(k) for k in keys) + " |\n|---|" + "---:|" * len(keys) + "\n"
    rows = [f"| {labels[i]} | " + " | ".join(f"{int(hists[k].counts[i]):,}" for k in keys) + " |" for i in span]
    summary = [
        f"| **{name}** | " + " | ".join(_summary_cell(hists[k], name) for k in keys) + " |"
        for name in ("documents", "mean", "min", "max")
    ]
    charts = []
    for key in keys[:MAX_CHARTS]:
        h = hists[key]
        own = _occupied([h])
        charts.append(bar_chart_markdown(f"{title}: {_set_name(key)}", [labels[i] for i in own],
                                         [float(h.counts[i]) for i in own]))
    more = f"\n\n_{len(keys) - MAX_CHARTS} more sets in the table and the JSON_" if len(keys) > MAX_CHARTS else ""
    return f"**{title}**\n\n" + head + "\n".join(rows + summary) + "\n\n" + "\n\n".join(charts) + more


def _summary_cell(h: LengthHistogram, name: str) -> str:
    value = h.to_dict()[name]
    return "" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


def lengths_json(stats: dict[tuple[str, str], SetLengths]) -> dict[str, Any]:
    """{split: {source: {"tokens": histogram, "output": histogram}}} with the edges once."""
    edges = next(iter(stats.values())).tokens.edges if stats else ()
    out: dict[str, Any] = {"edges": list(edges), "sets": {}}
    for (split, source), s in stats.items():
        t, o = s.tokens.to_dict(), s.output.to_dict()
        del t["edges"], o["edges"]
        out["sets"].setdefault(split, {})[source] = {"tokens": t, "output": o}
    return out


def labels_markdown(counts: LabelCounts, k: int) -> str:
    """Labels x splits table (top k, then the buckets: other labels, no label), then a chart of the
    totals. Bucket names are in italics in the table: a label may be spelled "(no label)" too."""
    rows = counts.table_rows(k)
    splits = sorted(counts.counts, key=split_rank)
    if not rows:
        return f"**labels ({counts.path.spec})**: no documents"
    head = "| label | " + " | ".join(splits) + " | total |\n|---|" + "---:|" * (len(splits) + 1) + "\n"
    body = "\n".join("| " + (_cell(r["label"]) if r["label"] is not None else f"_{row_name(r)}_") + " | " +
                     " | ".join(f"{r[s]:,}" for s in splits) + f" | {r['total']:,} |" for r in rows)
    note = (f"\n\n_more than {counts.max_distinct:,} distinct labels: later new ones are counted together_"
            if counts.truncated else "")
    chart = bar_chart_markdown(f"documents per {counts.path.spec}", [row_name(r) for r in rows],
                               [float(r["total"]) for r in rows])
    return f"**labels ({counts.path.spec})**\n\n" + head + body + note + "\n\n" + chart


def strata_markdown(spec: str, strata: list[dict[str, Any]], total_strata: int) -> str:
    """Documents per stratum and split with each split's share, as the split stage reports them."""
    head = (f"**strata of {spec}** ({total_strata:,} in all, {len(strata):,} largest shown)\n\n"
            "| stratum | documents | train | validation | test |\n|---|---:|---:|---:|---:|\n")
    body = []
    for s in strata:
        n = s["documents"] or 1
        cells = " | ".join(f"{s[x]:,} ({100 * s[x] / n:.1f}%)" for x in ("train", "validation", "test"))
        body.append(f"| {_cell(s['stratum'])} | {s['documents']:,} | {cells} |")
    return head + "\n".join(body)
