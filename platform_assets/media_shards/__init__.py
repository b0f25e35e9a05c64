"""Media shard sets: image, PDF-page and audio documents of every split and source written as WebDataset
tars and Parquet with binary columns, each set with an index (samples, bytes, sha256 per shard)."""
