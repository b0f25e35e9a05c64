"""The `lance` shard format through the packing stage: token for token the samples of `flat` and
`parquet`, every file of each dataset listed with its sha256 (a flipped byte is caught), written run by
run (never a whole shard), and -- the reason it is not a default format -- content-identical but not
byte-identical across two identical builds."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

pytest.importorskip("lance")

from test_packing_stage import OUT_REL, _documents, _run  # noqa: E402

from platform_assets.packing.formats import FORMATS, REGISTRY  # noqa: E402
from platform_assets.packing.formats import lance as lance_format  # noqa: E402
from platform_assets.packing.settings import PackingSettings  # noqa: E402
from platform_assets.packing.shard_index import load_index, read_shard_set, verify_shards  # noqa: E402

ALL = ("flat", "parquet", "webdataset", "lance")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root, _, result = _run(tmp_path_factory.mktemp("lance"), _documents(), formats=ALL)
    return root / OUT_REL, result


def _samples(fmt_dir):
    return [(shard["name"], s) for _, shard, s in read_shard_set(str(fmt_dir))]


def test_lance_round_trip_equals_flat_and_parquet_token_for_token(packed):
    out, result = packed
    assert result.formats == ALL
    lance = _samples(out / "lance")
    assert lance and verify_shards(str(out / "lance")) == []
    for fmt in ("flat", "parquet"):
        other = _samples(out / fmt)
        assert [n for n, _ in other] == [n for n, _ in lance]
        for (_, a), (_, b) in zip(other, lance, strict=True):
            assert a.tokens.dtype == b.tokens.dtype and np.array_equal(a.tokens, b.tokens)
            assert np.array_equal(a.seqlens, b.seqlens) and np.array_equal(a.seqptr, b.seqptr)
            assert np.array_equal(a.loss_mask, b.loss_mask)
    flat, lance_ix = load_index(str(out / "flat")), load_index(str(out / "lance"))
    counts = [[(s["name"], s["samples"], s["tokens"], s["documents"]) for s in e["shards"]] for e in flat["sets"]]
    assert counts == [[(s["name"], s["samples"], s["tokens"], s["documents"]) for s in e["shards"]]
                      for e in lance_ix["sets"]]  # formats_agree's comparison
    assert lance_ix["totals"] == flat["totals"]


def test_every_dataset_file_is_listed_once_and_the_layout_is_declared(packed):
    out, _ = packed
    index = load_index(str(out / "lance"))
    listed = [f["path"] for e in index["sets"] for s in e["shards"] for f in s["files"].values()]
    on_disk = sorted(str(p.relative_to(out / "lance")) for p in (out / "lance").rglob("*")
                     if p.is_file() and p.name != "index.json")
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)
    for e in index["sets"]:
        *rest, last = e["shards"]
        assert all(set(s["files"]) == {"data", "manifest", "transaction"} for s in rest)
        assert set(last["files"]) == {"data", "manifest", "transaction", "version_hint"}
        assert [s["files"]["manifest"]["path"].rsplit("/", 1)[1] for s in e["shards"]] == \
            [f"{k + 1}.manifest" for k in range(len(e["shards"]))]  # shard k = version k + 1
    names = [c["name"] for c in index["layout"]["columns"]]
    assert names == ["input_ids", "seqlens", "loss_mask", "shard", "sample"]
    assert index["layout"]["columns"][0]["encoding"] == "fixed_size_list<uint16>[seq_len]"


def test_a_corrupt_lance_data_file_is_caught_by_verification(tmp_path):
    root, _, _ = _run(tmp_path, _documents(seed=1), formats=("flat", "lance"))
    fmt_dir = root / OUT_REL / "lance"
    shard = load_index(str(fmt_dir))["sets"][0]["shards"][0]
    path = fmt_dir / shard["files"]["data"]["path"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    problems = verify_shards(str(fmt_dir))
    assert len(problems) == 1 and "(corrupt)" in problems[0] and shard["files"]["data"]["path"] in problems[0]


def test_the_write_is_batch_by_batch_through_a_bounded_queue(tmp_path, monkeypatch):
    writers = []
    real = lance_format.LanceSetWriter

    def spy(*args):
        writers.append(real(*args))
        return writers[-1]

    monkeypatch.setattr(lance_format, "open_set", spy)
    monkeypatch.setitem(REGISTRY, "lance", REGISTRY["lance"].__class__(
        **{**REGISTRY["lance"].__dict__, "open_set": spy}))
    root, _, _ = _run(tmp_path, _documents(seed=2), formats=("lance",))
    index = load_index(str(root / OUT_REL / "lance"))
    shards = sum(len(e["shards"]) for e in index["sets"])
    batches = sum(w.batches_written for w in writers)
    assert len(writers) == len(index["sets"]) and batches >= shards


def test_a_shard_of_several_runs_is_one_fragment_fed_run_by_run(tmp_path):
    import pyarrow.fs as pafs

    from platform_assets.packing.formats.base import SetHeader
    from platform_assets.packing.samples import ShardSamples
    from platform_assets.storage import StagedDir

    header = SetHeader(8, np.dtype(np.uint16), False)
    writer = lance_format.open_set(StagedDir(pafs.LocalFileSystem(), str(tmp_path)), "lance", "train/web", header)
    rng = np.random.default_rng(0)
    for shard, runs in ((0, 3), (1, 2)):
        for _ in range(runs):
            tokens = rng.integers(0, 60000, (4, 8)).astype(np.uint16)
            writer.add(ShardSamples(tokens, np.full(4, 8, np.int32), np.arange(5, dtype=np.int64), None), shard)
    files = writer.close_set()
    # five record batches of 4 samples went through the queue: the writer never held a shard (12 samples)
    assert writer.batches_written == 5 and len(files) == 2
    import lance  # noqa: PLC0415

    ds = lance.dataset(str(tmp_path / "lance" / "train" / "web.lance"))
    assert [f.count_rows() for f in ds.get_fragments()] == [12, 8] and ds.version == 2
    assert lance_format.QUEUE_RUNS == 2


def test_not_byte_identical_so_not_a_default_format(tmp_path):
    def build(name):
        root, _, _ = _run(tmp_path, _documents(seed=3), name=name, formats=("flat", "lance"))
        base = root / OUT_REL / "lance"
        return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(base.rglob("*")) if p.is_file()}

    a, b = build("a"), build("b")
    assert sorted(a) != sorted(b)  # data and transaction files are named by random UUIDs
    assert a["index.json"] != b["index.json"]  # which records those names and hashes
    # the data files' bytes are the same (only their names differ); manifests carry commit times
    assert sorted(v for k, v in a.items() if "/data/" in k) == sorted(v for k, v in b.items() if "/data/" in k)
    assert "lance" not in FORMATS and "lance" not in PackingSettings().formats
    for (_, x), (_, y) in zip(_samples(tmp_path / "a" / OUT_REL / "lance"),
                              _samples(tmp_path / "b" / OUT_REL / "lance"), strict=True):
        assert np.array_equal(x.tokens, y.tokens) and np.array_equal(x.seqlens, y.seqlens)


def test_a_stage_that_fails_mid_write_stops_lance_and_leaves_no_dataset(tmp_path, monkeypatch):
    import threading

    from platform_assets.packing import shard_writers

    real_close_shard = shard_writers.ShardGroupWriter._close_shard
    closed = []

    def failing_close_shard(self):
        if closed:  # the second shard: lance is writing a dataset (its thread started with the first)
            raise OSError("disk full (injected)")
        closed.append(self._prefix)
        real_close_shard(self)

    monkeypatch.setattr(shard_writers.ShardGroupWriter, "_close_shard", failing_close_shard)
    with pytest.raises(OSError, match="injected"):
        _run(tmp_path, _documents(), formats=ALL)
    assert closed, "the failure must come after lance started writing"
    assert not [t.name for t in threading.enumerate() if t.name.startswith("lance-write-")]
    assert not list(tmp_path.rglob("*.lance"))
