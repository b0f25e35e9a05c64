"""The shared LSH index on a real Redis server (127.0.0.1): same decisions as the in-memory index."""

import random
import shutil
import socket
import subprocess
import time

import pyarrow as pa
import pytest

from platform_assets.dedup.deduplicator import Deduplicator
from platform_assets.dedup.settings import DedupSettings

pytest.importorskip("redis")
REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS is None, reason="Debian redis-server not installed "
                                "(scripts/setup.sh installs it with PLATFORM_SYSTEM_DEPS=1)")


@pytest.fixture(scope="module")
def redis_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.time() > deadline:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.1)
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def _batch() -> pa.Table:
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(400)]
    base = [" ".join(rng.choice(vocab) for _ in range(200)) for _ in range(80)]
    texts = base + [t.replace(t.split()[50], "changed", 1) for t in base[:10]] + base[10:15]
    n = len(texts)
    return pa.table({"id": [f"d{i:03d}" for i in range(n)], "source": ["s"] * n,
                     "text": pa.array(texts, pa.large_string()),
                     "ingested_at": pa.array(range(n), pa.int64()).cast(pa.timestamp("ms", tz="UTC"))})


def _decisions(settings: DedupSettings) -> list[tuple]:
    dedup = Deduplicator(settings)
    dedup.add_batch(_batch())
    result = dedup.finish()
    return sorted(result.duplicates.select(["kept_id", "removed_id", "rule"]).to_pylist(),
                  key=lambda r: r["removed_id"])


def test_redis_index_gives_the_same_duplicates_as_memory(redis_port):
    memory = _decisions(DedupSettings())
    shared = DedupSettings.model_validate({"near": {"storage": {
        "type": "redis", "redis": {"host": "127.0.0.1", "port": redis_port}, "basename": "test-run-1"}}})
    on_redis = _decisions(shared)
    assert on_redis == memory
    assert len([d for d in memory if d["rule"] == "near_duplicate"]) == 10
    assert len([d for d in memory if d["rule"] == "exact_duplicate"]) == 5

    import redis

    keys = redis.Redis(host="127.0.0.1", port=redis_port).keys(b"test-run-1*")
    assert keys, "the index lives in Redis"
