"""A Dagster-orchestrated training-data platform: raw sources to versioned training shards."""
