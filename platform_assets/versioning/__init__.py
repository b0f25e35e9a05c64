"""Dataset versions: the packed shard set recorded and pushed with DVC (Dagster-free)."""
