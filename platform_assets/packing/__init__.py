"""Packing stage logic (Dagster-free): documents' token counts -> sequences of at most seq_len tokens.

Entry points: `strategies.pack(lengths, seq_len, strategy, overlong, window, max_open_sequences) ->
Packing` (`seq_ptr`, `piece_doc`, `piece_start`, `piece_len`, `dropped`; `.n_sequences`, `.tokens`,
`.efficiency`, `.documents_split`), `strategies.verify_packing(packing, lengths)` (raises on any
broken token-conservation rule), `streaming.StreamingBestFit(seq_len, max_open_sequences, overlong)`
(`.add(lengths, first_doc)`, `.finish()`, `.dropped`; also importable from strategies), and
`settings.PackingSettings` (the `packing:` config key). SHARD_FORMAT.md: what the sequences become.

Modules: pieces (documents -> pieces, overlong split/filter, input checks), capacity_set (the
remaining-room index behind best fit), placement (best-fit and first-fit loops), strategies (the
strategies and the Packing result), streaming (bounded-memory best fit), settings (config).
The stage: survey (the survey pass), offline_pass / streaming_pass (packing and reading tokens),
emission (sequences to shards, stats, exclusions), stage (orchestration and commit), provenance.
The shard set: samples (the samples model), formats/ (the registry: one module per format),
shard_writers (runs cut at row-group and shard boundaries, every format's set writer, index.json),
shard_index (loading, verifying and reading back a shard set).
"""
