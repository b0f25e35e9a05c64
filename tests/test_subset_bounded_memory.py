"""A streaming subset keeps memory bounded by its configuration (batch, shuffle buffer), not by the
input or by what the predicate rejects: a generated JSONL source larger than RLIMIT_DATA is read to
its end (the rare rows that pass sit at the end) and ingested under that limit.

RLIMIT_DATA, as in tests/test_bounded_memory.py: it caps heap and anonymous maps, what a reader that
kept rejected rows would grow."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LIMIT = 512 * 2**20
INPUT_BYTES = 600 * 2**20  # larger than the limit

STAGE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))
from platform_assets.config import load_config
from platform_assets.storage import Storage
from platform_assets.ingest.run import ingest_source
cfg = load_config(sys.argv[1])
r = ingest_source(cfg, "big", Storage(cfg.storage_root), "raw/big")
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"rows": r.rows, **r.metadata, "peak_rss": int(hwm.split()[1]) * 1024}}))
"""


def test_subset_of_a_source_larger_than_the_memory_limit(tmp_path):
    body = "lorem ipsum dolor sit amet " * 300  # ~8 KB per row
    rows = 0
    with open(tmp_path / "big.jsonl", "w") as f:
        written = 0
        while written < INPUT_BYTES:
            # one row in 1,000 is Python: 60 kept + 16 in the shuffle buffer = the first 76,000 rows
            # of the ~77,000
            line = json.dumps({"text": f"{rows} {body}", "language": "Python" if rows % 1000 == 999 else "Go"}) + "\n"
            f.write(line)
            written += len(line)
            rows += 1
    assert (tmp_path / "big.jsonl").stat().st_size > LIMIT
    config = {"storage": {"root": str(tmp_path / "out")},
              "sources": [{"name": "big", "format": "jsonl", "path": str(tmp_path / "big.jsonl"),
                           "subset": {"where": "language = 'Python'", "shuffle_buffer": 16, "max_rows": 60}}]}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([sys.executable, "-c", STAGE.format(limit=LIMIT), str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rows"] == 60 and out["subset_stop"] == "max_rows"
    assert out["rows_seen"] > 0.98 * rows  # nearly the whole file went through
    # 60 written + 16 still in the shuffle buffer passed; everything else was counted, not kept
    assert out["rows_rejected_by_predicate"] == out["rows_seen"] - out["rows_seen"] // 1000
    assert out["peak_rss"] < LIMIT
