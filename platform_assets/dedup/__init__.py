"""Deduplication stage logic (Dagster-free): exact, MinHash-LSH or SimHash, and perceptual-hash (images)
near-duplicate removal.

Entry points for the asset wrapper:
- `Deduplicator(settings, accepted=None)`: `.add_batch(record_batch)` over every cleaned partition,
  `.finish() -> DedupResult`; `DedupResult.filter_batch(batch)` yields the kept documents with a
  `cluster_id` column (kept ids looked up by hash: keep_lookup), `.decisions` (one row per document;
  None from `finish(decisions=False)`, the stage's call), `.exclusions()`, `.duplicates`, `.removed_per_source()`,
  `.cluster_size_histogram()`, `.counts`, `.accepted` (the incremental artifact; the stage takes it with
  `.hand_over_accepted()` to write it before the write pass).
- `AcceptedSignatures.from_table(parquet_table, settings)` / `.to_table(settings)`.

Modules: settings (config), keys (what is a duplicate, per modality), shingles + hash64 (vectorised
shingle hashing), minhash (signatures), lsh_index (datasketch MinHashLSH), simhash (the SimHash
method: fingerprints, block tables, its greedy pass), exact (normalised-text
hash + Arrow group-by), keep_policy (total order of documents), near_dedup (greedy LSH pass),
image_near (phash band index + greedy pass), clusters (union-find, reports), signature_store (the
accepted-signature artifact), document_keys (what the global pass needs of each document, computed
per batch), signature_partition (those keys stored per cleaned partition: `dedup_signatures`),
band_partitions (the LSH band grouping per bucket partition: `dedup_band_buckets`), deduplicator (the
global decisions), stage (over stored outputs).
"""
