"""The training job that consumes the platform's packed, versioned shards.

Standalone: nothing here imports dagster or platform_assets (it runs under torchrun; the one Dagster
Pipes entry point is the only exception). `training.data` reads the `flat` shard format specified in
platform_assets/packing/SHARD_FORMAT.md.
"""
