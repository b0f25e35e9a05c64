"""Statistics users look at (Dagster-free): document length histograms, label distributions, and the
record fields (`source`, `meta.label`, `meta.a.b`) that labels and split strata are read from.

Entry points: `fields.FieldPath.parse(spec, names)` / `fields.field_values(batch, path)`;
`histograms.LengthHistogram`, `histograms.DocumentLengths` (`.add_batch`, `.finish()`),
`histograms.tokenized_length_stats(storage, rel, settings)`; `labels.LabelCounts`;
`report` (markdown tables, SVG charts and JSON of the above).
"""
