"""Checkpointable, rank- and worker-sharded, mixture-weighted loading of `flat` packed shard sets.

`PackedLoader(LoaderConfig(...), rank, world_size)` is the entry point (training/data/loader.py); the
rest are its parts: the index (shard_index), the memmap reader (shard_reader), the exact mixture
schedule (mixture), per-source shuffles (permutation), the global order (global_order, length_buckets),
collation (collate) and the worker-side dataset (dataset).
"""

from training.data.loader import LoaderConfig, PackedLoader

__all__ = ["LoaderConfig", "PackedLoader"]
