"""A Dagster-orchestrated training-data platform: raw sources to versioned training shards."""

import os
import sys

# Arrow's jemalloc with freed pages purged at once (dirty and muzzy decay 0; Arrow builds it with 1,000 ms)
ARROW_JEMALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"

# Arrow's default memory pool: jemalloc instead of pyarrow's mimalloc (Linux). Arrow's builders and
# Parquet page encoders grow buffers by reallocation; mimalloc moves each larger size to fresh
# pages (zeroed by the kernel on first touch: ~14% of the JSONL ingest's CPU in `perf`) and gives
# freed ones back to the OS within milliseconds, to be faulted in again for the next block.
# jemalloc grows large blocks in place and reuses dirty pages: on the shared corpus's JSONL ingest
# 4.2 CPU-s median instead of 4.9-5.2 and ~520 MB peak RSS instead of ~630 MB (2 cores, 6
# interleaved runs each). Arrow reads the variable once, when it creates its default pool, so this
# only works before the first `import pyarrow`: Dagster's code location, the CLI and the benchmark
# import this package first. Passing a jemalloc pool to the parse and Parquet-writer calls instead
# recovers less than half of it (their internal buffers take the C++ default pool). A value set in
# the environment wins.
if sys.platform.startswith("linux"):
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    # ... and that jemalloc returns freed pages to the OS at once, not after Arrow's built-in 1,000 ms:
    # a stage's freed batches otherwise stay resident and its peak grows with the input (see
    # platform_assets/heap.py for the figures). jemalloc reads this when it starts, so it too must be set
    # before the first allocation; `pa.jemalloc_set_decay_ms` afterwards reaches only arenas created
    # later, not the main thread's. A value set in the environment wins.
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", ARROW_JEMALLOC_CONF)
