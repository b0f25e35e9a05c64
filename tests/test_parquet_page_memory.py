"""A row group of long documents is written in memory bounded by the page size, not by 1,024 documents
a page (parquet_parts.PAGE_WRITE_BATCH).

Arrow's Parquet writer checks the page size every `write_batch_size` values (default 1,024): a text
page of 32 KiB documents held 32 MiB, and writing a 48 MiB text column needed ~2x the column on top
of it (the page buffer doubling). That is what made dataset_splits' peak on the whole corpus step up
at 2x (two such row groups, one written while the next was read). Here a child process under
`setrlimit(RLIMIT_DATA)` of what it holds plus 1.25x the column writes it through `parquet_writer`:
with 1,024 values a page it was refused an allocation (33 MiB); the file then reads back equal.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

SCRIPT = """
import json, resource, sys
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from platform_assets.parquet_parts import parquet_writer

docs, doc_bytes = 1536, 32 * 1024  # 48 MiB of text, 32 KiB a document (heavy code files average 38 KB)
rng = np.random.default_rng(0)
letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz \\n", np.uint8)
text = pa.array([rng.choice(letters, doc_bytes).tobytes().decode() for _ in range(docs)], pa.large_string())
table = pa.table({"id": pa.array([f"d{i}" for i in range(docs)]), "text": text})
column = text.nbytes

def vm_data():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmData:"))

limit = vm_data() + int(1.25 * column)
resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.RLIM_INFINITY))
out = {"column": column}
try:
    writer = parquet_writer(sys.argv[1], table.schema, "zstd")
    writer.write_table(table)
    writer.close()
    out["written"] = True
    resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    out["read_back"] = pq.read_table(sys.argv[1]).equals(table)
except (MemoryError, pa.ArrowMemoryError) as err:
    out["error"] = str(err)[:300]
print(json.dumps(out))
"""


def test_long_documents_are_written_in_page_bounded_memory(tmp_path):
    # the system allocator with two arenas, as tests/limited_stage_runs.py: RLIMIT_DATA counts reserved
    # address space, which jemalloc's and glibc's per-thread arenas would inflate
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "long.parquet")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out.get("written") and out.get("read_back"), out
