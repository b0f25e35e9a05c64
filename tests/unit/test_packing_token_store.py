"""Where offline packing keeps a set's tokens (packing/token_store.py): a spilled set gives every run
the same tokens and masks as the same set held in memory, reading touching pieces in one stretch;
the pass holds a set in memory only under the cap, and the spill directory goes when packing ends."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.contracts import IOSettings
from platform_assets.packing import offline_pass
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.stage import in_memory_tokens, pack_outputs
from platform_assets.packing.token_store import ArrayTokens, HeldTokens, SpilledTokens
from platform_assets.storage import Storage


def _fill(store, lengths, values, masks):
    starts = np.cumsum(lengths) - lengths
    for a in range(0, len(lengths), 3):  # three documents a batch, in document order
        t0, t1 = int(starts[a]), int(starts[min(a + 3, len(lengths)) - 1] + lengths[min(a + 3, len(lengths)) - 1])
        store.put(t0, values[t0:t1], None if masks is None else masks[t0:t1])
    store.seal()


def _pieces(rng, lengths, n):
    """n pieces (start, length) inside documents, with some runs of touching pieces (a split document)."""
    starts = np.cumsum(lengths) - lengths
    docs = rng.integers(0, len(lengths), n)
    src = starts[docs] + rng.integers(0, lengths[docs] // 2 + 1)
    ln = np.minimum(rng.integers(1, 40, n), starts[docs] + lengths[docs] - src)
    d = int(np.argmax(lengths))  # a long document's consecutive pieces, as overlong="split" cuts it
    cut = np.arange(0, lengths[d], 16)
    src = np.concatenate([src, starts[d] + cut])
    ln = np.concatenate([ln, np.minimum(16, lengths[d] - cut)])
    # pieces of a run never overlap: keep the first of any that would
    order = np.argsort(src, kind="stable")
    keep, end = [], -1
    for k in order.tolist():
        if src[k] >= end:
            keep.append(k)
            end = src[k] + ln[k]
    keep = rng.permutation(np.array(keep))
    return src[keep].astype(np.int64), ln[keep].astype(np.int64)


@pytest.mark.parametrize("with_masks", [False, True])
def test_spilled_runs_give_the_same_tokens_as_held_ones(tmp_path, with_masks):
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 300, 40).astype(np.int64)
    lengths[17] = 700
    total = int(lengths.sum())
    values = rng.integers(0, 50257, total).astype(np.int32)
    masks = rng.integers(0, 2, total).astype(np.uint8) if with_masks else None
    held, spilled = HeldTokens(total, with_masks), SpilledTokens(tmp_path, "set-00000", with_masks)
    _fill(held, lengths, values, masks)
    _fill(spilled, lengths, values, masks)
    src, ln = _pieces(rng, lengths, 60)
    for store in (held, spilled):
        got_src, got_values, got_masks = store.run(src, ln)
        for s, g, n in zip(src.tolist(), got_src.tolist(), ln.tolist(), strict=True):
            assert got_values[g : g + n].tolist() == values[s : s + n].tolist()
            if with_masks:
                assert got_masks[g : g + n].tolist() == masks[s : s + n].tolist()
            else:
                assert got_masks is None
    # the spilled run holds only its pieces' tokens, touching ones read as one stretch
    _, run_values, _ = spilled.run(src, ln)
    assert run_values.size == int(ln.sum()) < total
    empty_src, empty_values, _ = spilled.run(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty_src.size == empty_values.size == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == (["set-00000.ids.i32", "set-00000.mask.u8"] if with_masks else ["set-00000.ids.i32"])
    assert (tmp_path / "set-00000.ids.i32").stat().st_size == 4 * total
    spilled.close()
    assert not list(tmp_path.iterdir())


def test_spilled_tokens_must_arrive_in_document_order(tmp_path):
    store = SpilledTokens(tmp_path, "s", False)
    store.put(0, np.arange(5, dtype=np.int32), None)
    with pytest.raises(ValueError, match="document order"):
        store.put(7, np.arange(3, dtype=np.int32), None)
    store.close()


def test_a_truncated_spill_file_is_an_error_not_short_samples(tmp_path):
    store = SpilledTokens(tmp_path, "s", False)
    store.put(0, np.arange(100, dtype=np.int32), None)
    store.seal()
    with open(tmp_path / "s.ids.i32", "r+b") as f:
        f.truncate(200)  # 50 tokens left
    with pytest.raises(OSError, match="spill file ended"):
        store.run(np.array([40], np.int64), np.array([30], np.int64))
    store.close()


def test_array_tokens_are_given_as_they_are():
    values = np.arange(10, dtype=np.int32)
    src = np.array([4, 0])
    got_src, got_values, got_masks = ArrayTokens(values, None).run(src, np.array([3, 2]))
    assert got_src is src and got_values is values and got_masks is None


def test_the_in_memory_cap_follows_the_io_batch():
    io = IOSettings(batch_bytes=64 * 2**20)
    assert in_memory_tokens(256 * 2**20, io, False) == 4 * 2**20  # a quarter of 64 MiB at 4 B a token
    assert in_memory_tokens(256 * 2**20, io, True) == 64 * 2**20 // 4 // 5
    assert in_memory_tokens(1000, io, False) == 1000  # the packing setting, when smaller
    assert in_memory_tokens(1000, IOSettings(batch_bytes=1), False) == 1


def test_sets_over_the_cap_spill_and_the_spill_directory_goes(tmp_path, monkeypatch):
    """Through the pass: a set over the cap is spilled under packing.spill_dir, one under it is held,
    and nothing is left in the spill directory afterwards (test_packing_stage checks the bytes)."""
    made: list[tuple[str, str]] = []
    real_spilled, real_held = offline_pass.SpilledTokens, offline_pass.HeldTokens

    def spilled(directory, name, has_mask):
        made.append(("spilled", str(directory)))
        return real_spilled(directory, name, has_mask)

    def held(tokens, has_mask):
        made.append(("held", str(tokens)))
        return real_held(tokens, has_mask)

    monkeypatch.setattr(offline_pass, "SpilledTokens", spilled)
    monkeypatch.setattr(offline_pass, "HeldTokens", held)
    rng = np.random.default_rng(0)
    sets = {("train", "web"): [rng.integers(0, 50256, 50) for _ in range(20)],  # 1000 tokens: spilled
            ("train", "code"): [rng.integers(0, 50256, 10) for _ in range(3)]}  # 30 tokens: held
    root = tmp_path / "out"
    for (split, source), docs in sets.items():
        part = root / "tokenized" / split / source
        part.mkdir(parents=True)
        pq.write_table(pa.table({
            "id": [f"{source}-{i}" for i in range(len(docs))], "source": [source] * len(docs),
            "split": [split] * len(docs), "chunk": pa.array([0] * len(docs), pa.int32()),
            "input_ids": pa.array([d.tolist() for d in docs], pa.list_(pa.int32())),
            "loss_mask": pa.nulls(len(docs), pa.list_(pa.uint8())),
            "num_tokens": pa.array([len(d) for d in docs], pa.int32()),
            "loss_tokens": pa.array([len(d) for d in docs], pa.int32())}), part / "part-00000.parquet")
    spill = tmp_path / "spill"
    spill.mkdir()
    tokenizer = {"vocab_size": 50257, "pad_id": None, "eos_id": 50256, "bos_id": None, "name": "gpt2",
                 "sha256": "5" * 64}
    settings = PackingSettings(seq_len=64, samples_per_shard=8, formats=("flat",), spill_dir=str(spill))
    result = pack_outputs(Storage(str(root)), "tokenized", "packed", settings, tokenizer, max_tokens_in_memory=100)
    assert sorted(kind for kind, _ in made) == ["held", "spilled"]
    assert [where for kind, where in made if kind == "spilled"][0].startswith(str(spill / "packing-spill-"))
    assert not list(spill.iterdir())
    assert result.tokens_in == 1030 == sum(s.tokens for s in result.sets)
    # where tokens wait is not the shards' business: index.json's packing settings do not name it
    index = json.loads((root / "packed" / "flat" / "index.json").read_text())
    assert "spill_dir" not in index["packing"] and index["packing"]["max_tokens_in_memory"] == 256 * 2**20
