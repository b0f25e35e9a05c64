"""The packing stage end to end over a hand-made tokenized_documents input: every token lands exactly
once in the shards of its own (split, source), in every format; drops are reported; provenance and
explain_document say where each document went."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA as CLEANING_EXCLUSIONS_SCHEMA
from platform_assets.contracts import IOSettings
from platform_assets.dedup.deduplicator import DUPLICATES_SCHEMA
from platform_assets.dedup.deduplicator import EXCLUSIONS_SCHEMA as DEDUP_EXCLUSIONS_SCHEMA
from platform_assets.packing import offline_pass, shard_writers, spilled_keys, streaming_pass
from platform_assets.packing.provenance import PROVENANCE_FILE, explain_document
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_index import FORMATS, load_index, read_shard_set, verify_shards
from platform_assets.packing.stage import (
    DEFAULT_MAX_TOKENS_IN_MEMORY,
    EXCLUSIONS_FILE,
    ConservationError,
    TokenizedInputError,
    pack_outputs,
)
from platform_assets.packing.strategies import Packing, pack
from platform_assets.packing.windows import placement_windows
from platform_assets.schema import QUARANTINE_SCHEMA
from platform_assets.storage import Storage

SEQ_LEN = 64
EOS = 50256
VOCAB = 50257
TOKENIZER = {"vocab_size": VOCAB, "pad_id": None, "eos_id": EOS, "bos_id": None, "name": "gpt2",
             "sha256": "5" * 64}
IN_REL = "tokenized_documents/_all"
OUT_REL = "packed_shards/_all"
LONG_ID = "long-web-doc"

TOKENIZED_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("chunk", pa.int32(), nullable=False),
    pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("loss_mask", pa.list_(pa.uint8())),
    pa.field("num_tokens", pa.int32(), nullable=False),
    pa.field("loss_tokens", pa.int32(), nullable=False),
])


def _row(doc_id, source, split, tokens, mask=None, chunk=0):
    tokens = [int(t) for t in tokens]
    return {"id": doc_id, "source": source, "split": split, "chunk": chunk, "input_ids": tokens,
            "loss_mask": None if mask is None else [int(m) for m in mask], "num_tokens": len(tokens),
            "loss_tokens": len(tokens) if mask is None else int(sum(mask))}


def _documents(seed: int = 0, chat: bool = True) -> list[dict]:
    """Plain web and code documents in train and validation, chat documents (user turn masked out,
    assistant turn counted), a 150-token web document (> SEQ_LEN), a book in two chunks, a lone EOS."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(90):
        source = ("web", "code")[i % 2]
        split = "validation" if i % 5 == 0 else "train"
        body = rng.integers(0, EOS, int(rng.integers(3, 60)))
        rows.append(_row(f"{source}-{i:03d}", source, split, [*body, EOS]))
        if chat and i % 3 == 0:
            prompt = rng.integers(0, EOS, int(rng.integers(2, 20)))
            answer = rng.integers(0, EOS, int(rng.integers(2, 30)))
            rows.append(_row(f"chat-{i:03d}", "chat", "train", [*prompt, *answer, EOS],
                             [0] * len(prompt) + [1] * (len(answer) + 1)))
    rows.insert(7, _row(LONG_ID, "web", "train", [*rng.integers(0, EOS, 149), EOS]))
    rows.insert(30, _row("book", "web", "train", rng.integers(0, EOS, SEQ_LEN), chunk=0))
    rows.insert(31, _row("book", "web", "train", [*rng.integers(0, EOS, 19), EOS], chunk=1))
    rows.insert(50, _row("empty-doc", "code", "train", [EOS]))
    return rows


def _write_tokenized(root: Path, rows: list[dict], parts: int = 2) -> None:
    out = root / IN_REL
    out.mkdir(parents=True, exist_ok=True)
    step = -(-len(rows) // parts)
    for k in range(parts):
        pq.write_table(pa.Table.from_pylist(rows[k * step : (k + 1) * step], schema=TOKENIZED_SCHEMA),
                       out / f"part-{k:05d}.parquet", row_group_size=17)


def _settings(**kw) -> PackingSettings:
    return PackingSettings(**{"seq_len": SEQ_LEN, "samples_per_shard": 8, "max_open_sequences": 4, **kw})


def _run(tmp_path: Path, rows: list[dict], name: str = "out", **kw):
    root = tmp_path / name
    _write_tokenized(root, rows)
    storage = Storage(str(root))
    batch_rows = kw.pop("batch_rows", 8192)
    max_tokens = kw.pop("max_tokens_in_memory", DEFAULT_MAX_TOKENS_IN_MEMORY)
    result = pack_outputs(storage, IN_REL, OUT_REL, _settings(**kw), TOKENIZER, io=IOSettings(batch_rows=batch_rows),
                          max_tokens_in_memory=max_tokens)
    return root, storage, result


def _reassemble(fmt_dir: Path, provenance: list[dict]) -> dict[tuple[str, int], tuple[list[int], list[int] | None]]:
    """Every (document, chunk)'s tokens and mask, rebuilt from the shards through the provenance rows."""
    shards = {}
    for _, shard, samples in read_shard_set(str(fmt_dir)):
        shards[shard["name"]] = samples
    pieces: dict[tuple[str, int], list] = {}
    for r in provenance:
        s = shards[f"{r['split']}/{r['source']}/shard-{r['shard']:05d}"]
        lens = s.sample_seqlens(r["sample"])
        assert lens[r["segment"]] == r["tokens"]
        at = int(lens[: r["segment"]].sum())
        toks = s.tokens[r["sample"], at : at + r["tokens"]].tolist()
        mask = None if s.loss_mask is None else s.loss_mask[r["sample"], at : at + r["tokens"]].tolist()
        pieces.setdefault((r["document_id"], r["chunk"]), []).append((r["token_start"], toks, mask))
    out = {}
    for key, ps in pieces.items():
        ps.sort(key=lambda p: p[0])
        assert [p[0] for p in ps] == list(np.cumsum([0] + [len(p[1]) for p in ps[:-1]]))  # contiguous from 0
        out[key] = ([t for p in ps for t in p[1]], None if ps[0][2] is None else [m for p in ps for m in p[2]])
    return out


@pytest.mark.parametrize("strategy", ["best_fit_decreasing", "streaming_best_fit"])
@pytest.mark.parametrize("overlong", ["split", "filter"])
def test_every_token_lands_once_in_every_format(tmp_path, strategy, overlong):
    rows = _documents()
    root, _, result = _run(tmp_path, rows, strategy=strategy, overlong=overlong)
    packed = root / OUT_REL
    tokens_in = sum(r["num_tokens"] for r in rows)
    assert result.tokens_in == tokens_in and result.has_loss_mask and result.token_dtype == "uint16"
    assert result.pad_id == EOS  # GPT-2 has no pad token: EOS pads (masked and outside every segment)
    totals = result.totals
    assert totals.documents == len(rows)
    assert totals.tokens + totals.tokens_dropped == tokens_in
    provenance = pq.read_table(packed / PROVENANCE_FILE).to_pylist()
    assert sum(r["tokens"] for r in provenance) == totals.tokens
    assert len(provenance) == totals.pieces
    for fmt in FORMATS:
        assert verify_shards(str(packed / fmt)) == []
        index = load_index(str(packed / fmt))
        assert index["totals"]["tokens"] == sum(sh["tokens"] for e in index["sets"] for sh in e["shards"])
        assert index["totals"]["tokens"] + totals.tokens_dropped == tokens_in
        assert sum(sh["loss_tokens"] for e in index["sets"] for sh in e["shards"]) == totals.loss_tokens
        rebuilt = _reassemble(packed / fmt, provenance)
        for r in rows:
            key = (r["id"], r["chunk"])
            if overlong == "filter" and r["id"] == LONG_ID:
                assert key not in rebuilt
                continue
            tokens, mask = rebuilt[key]
            assert tokens == r["input_ids"]
            assert mask == (r["loss_mask"] or [1] * r["num_tokens"])
    by_key = {(r["id"], r["chunk"]): r for r in rows}
    for p in provenance:  # a sample never mixes sources or splits
        assert (by_key[(p["document_id"], p["chunk"])]["split"], by_key[(p["document_id"], p["chunk"])]["source"]) == (
            p["split"], p["source"])
    exclusions = pq.read_table(packed / EXCLUSIONS_FILE).to_pylist()
    long_pieces = [p for p in provenance if p["document_id"] == LONG_ID]
    if overlong == "filter":
        got = [(e["id"], e["rule"], e["value"], e["chunk"], e["tokens"], e["split"], e["source"]) for e in exclusions]
        assert got == [(LONG_ID, "overlong", f"150 > {SEQ_LEN}", 0, 150, "train", "web")]
        assert not long_pieces and totals.documents_dropped == 1 and totals.tokens_dropped == 150
    else:
        assert exclusions == [] and totals.documents_dropped == 0
        assert sorted((p["token_start"], p["tokens"]) for p in long_pieces) == [(0, 64), (64, 64), (128, 22)]
    sets = {(s.split, s.source): s for s in result.sets}
    assert sorted(sets) == [("train", "chat"), ("train", "code"), ("train", "web"), ("validation", "code"),
                            ("validation", "web")]
    for (split, source), s in sets.items():
        assert s.documents == sum(1 for r in rows if (r["split"], r["source"]) == (split, source))
        assert 0 < s.efficiency <= 1
    chat_mask_zeros = sum(r["num_tokens"] - r["loss_tokens"] for r in rows if r["source"] == "chat")
    assert sets[("train", "chat")].tokens - sets[("train", "chat")].loss_tokens == chat_mask_zeros > 0


@pytest.mark.parametrize("run_samples", [1024, 3])
def test_provenance_is_the_packing(tmp_path, monkeypatch, run_samples):
    """Offline strategy: provenance rows are exactly pack()'s pieces, numbered into shards and samples,
    also when a set is emitted in many runs (ids and rows made a run at a time)."""
    to_boundary = shard_writers.ShardGroupWriter.samples_to_boundary
    monkeypatch.setattr(shard_writers.ShardGroupWriter, "samples_to_boundary",
                        lambda w: min(run_samples, to_boundary(w)))
    rows = _documents(seed=3)
    root, _, _ = _run(tmp_path, rows)
    provenance = pq.read_table(root / OUT_REL / PROVENANCE_FILE)
    train_web = [r for r in rows if (r["split"], r["source"]) == ("train", "web")]
    packing = pack(np.array([r["num_tokens"] for r in train_web]), SEQ_LEN)
    got = [r for r in provenance.to_pylist() if (r["split"], r["source"]) == ("train", "web")]
    seq = np.repeat(np.arange(packing.n_sequences), np.diff(packing.seq_ptr))
    want = [{"split": "train", "source": "web", "shard": int(j // 8), "sample": int(j % 8),
             "segment": int(p - packing.seq_ptr[j]), "document_id": train_web[d]["id"], "chunk": train_web[d]["chunk"],
             "token_start": int(s), "tokens": int(n)}
            for p, (j, d, s, n) in enumerate(zip(seq, packing.piece_doc, packing.piece_start, packing.piece_len,
                                                 strict=True))]
    assert got == want
    assert provenance.schema.field("shard").type == pa.int32()
    keys = [(r["split"], r["source"], r["shard"], r["sample"], r["segment"]) for r in provenance.to_pylist()]
    assert keys == sorted(keys)


@pytest.mark.parametrize("strategy", ["best_fit_decreasing", "streaming_best_fit"])
def test_rebuild_is_byte_identical_however_the_input_is_read(tmp_path, strategy):
    rows = _documents(seed=5)
    _, _, first = _run(tmp_path, rows, "a", strategy=strategy)
    _, _, again = _run(tmp_path, rows, "b", strategy=strategy)
    # batches of 7 rows and (offline) one set per pass: same bytes
    _, _, small = _run(tmp_path, rows, "c", strategy=strategy, batch_rows=7, max_tokens_in_memory=1)
    assert first.files == again.files == small.files
    assert any(name.endswith(".tar") for name in first.files) and "provenance.parquet" in first.files


def test_without_masks_the_set_has_none(tmp_path):
    rows = _documents(seed=2, chat=False)
    root, _, result = _run(tmp_path, rows)
    assert not result.has_loss_mask
    for fmt in FORMATS:
        assert load_index(str(root / OUT_REL / fmt))["has_loss_mask"] is False
    assert not list((root / OUT_REL / "flat").rglob("*.mask.bin"))
    assert pq.read_schema(next((root / OUT_REL / "parquet").rglob("*.parquet"))).names == ["input_ids", "seqlens"]
    assert result.totals.loss_tokens == result.totals.tokens


def _plant_removal_tables(root: Path) -> None:
    """What the earlier stages leave beside their outputs (their own schemas)."""
    clean = root / "cleaned_documents" / "web"
    clean.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["short-doc"], "rule": ["gopher_quality.too_few_words"], "value": ["37 < 50"],
                             "bytes": [180]}, schema=CLEANING_EXCLUSIONS_SCHEMA), clean / "_exclusions.parquet")
    dedup = root / "deduplicated_documents" / "_all"
    dedup.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["copy-doc"], "rule": ["near_duplicate"], "value": ["0.91"], "bytes": [None],
                             "kept_id": ["web-001"], "similarity": [0.91]},
                            schema=DEDUP_EXCLUSIONS_SCHEMA), dedup / "_exclusions.parquet")
    pq.write_table(pa.table({"cluster_id": ["web-001"], "kept_id": ["web-001"], "kept_source": ["code"],
                             "removed_id": ["copy-doc"], "removed_source": ["web"], "similarity": [0.91],
                             "rule": ["near_duplicate"], "kept_in_earlier_run": [False]},
                            schema=DUPLICATES_SCHEMA), dedup / "_duplicates.parquet")
    raw = root / "raw_documents" / "web"
    raw.mkdir(parents=True)
    pq.write_table(pa.table({"source": ["web"], "uri": ["a.jsonl:3"], "reason": ["malformed_json"], "detail": ["x"],
                             "sample": ["{"]}, schema=QUARANTINE_SCHEMA), raw / "_quarantine.parquet")


def test_explain_document(tmp_path):
    rows = _documents(seed=4)
    root, storage, _ = _run(tmp_path, rows, overlong="filter")
    _plant_removal_tables(root)
    provenance = pq.read_table(root / OUT_REL / PROVENANCE_FILE).to_pylist()

    present = explain_document(root, "book")  # a path works as well as a Storage
    want = sorted((p["split"], p["source"], p["shard"], p["sample"], p["segment"], p["chunk"], p["token_start"],
                   p["tokens"]) for p in provenance if p["document_id"] == "book")
    assert [(p.split, p.source, p.shard, p.sample, p.segment, p.chunk, p.token_start, p.tokens)
            for p in present.placements] == want
    assert {p.chunk for p in present.placements} == {0, 1} and present.formats == FORMATS
    assert present.removals == () and present.packed
    assert "train/web/shard-" in present.describe()

    overlong = explain_document(storage, LONG_ID)
    assert not overlong.packed
    assert [(r.output, r.table, r.rule) for r in overlong.removals] == [(OUT_REL, "_exclusions.parquet", "overlong")]
    assert f"value=150 > {SEQ_LEN}" in overlong.removals[0].detail

    cleaned = explain_document(storage, "short-doc")
    assert [(r.output, r.rule, r.detail) for r in cleaned.removals] == [
        ("cleaned_documents/web", "gopher_quality.too_few_words", "value=37 < 50")]

    duplicate = explain_document(storage, "copy-doc")
    assert [(r.output, r.table, r.rule) for r in duplicate.removals] == [
        ("deduplicated_documents/_all", "_duplicates.parquet", "near_duplicate"),
        ("deduplicated_documents/_all", "_exclusions.parquet", "near_duplicate")]
    assert "kept_id=web-001" in duplicate.removals[0].detail and "kept_source=code" in duplicate.removals[0].detail

    unknown = explain_document(storage, "never-seen")
    assert not unknown.packed and unknown.removals == ()
    # cleaning, dedup (exclusions + duplicates) and packing tables; ingest's quarantine has no ids to search
    assert unknown.tables_searched == 4
    assert "not found" in unknown.describe()


def test_a_lost_piece_is_a_conservation_error_and_commits_nothing(tmp_path, monkeypatch):
    rows = _documents(seed=6)
    root, storage, _ = _run(tmp_path, rows)
    before = json.loads((root / OUT_REL / "_manifest.json").read_text())

    def lossy(*args, **kwargs) -> Packing:
        p = pack(*args, **kwargs)
        n = p.seq_ptr[-1] - 1  # drop the last piece (and the sequence if it was alone)
        seq_ptr = np.minimum(p.seq_ptr, n)
        seq_ptr = seq_ptr[np.concatenate(([True], np.diff(seq_ptr) > 0))]
        return Packing(p.seq_len, seq_ptr, p.piece_doc[:n], p.piece_start[:n], p.piece_len[:n], p.dropped)

    monkeypatch.setattr(offline_pass, "pack", lossy)
    with pytest.raises(ConservationError, match="neither packed nor dropped|cover"):
        pack_outputs(storage, IN_REL, OUT_REL, _settings(), TOKENIZER)
    assert json.loads((root / OUT_REL / "_manifest.json").read_text()) == before


@pytest.mark.parametrize("strategy", ["best_fit_decreasing", "streaming_best_fit"])
@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda r: r.update(num_tokens=r["num_tokens"] + 1), r"document code-011 chunk 0 \(train/code\): \d+ "
                                                             r"input_ids but num_tokens"),
        (lambda r: r["input_ids"].__setitem__(0, VOCAB), "document code-011 chunk 0.*token id 50257 outside"),
        (lambda r: r.update(loss_mask=[1] * r["num_tokens"], loss_tokens=r["num_tokens"] - 1),
         "document code-011 chunk 0.*loss_mask has \\d+ ones but loss_tokens"),
        (lambda r: r.update(id="code-013"), "document code-013 chunk 0 appears 2 times"),
    ],
)
def test_bad_input_names_the_document(tmp_path, strategy, corrupt, message):
    rows = _documents(seed=1)
    corrupt(next(r for r in rows if r["id"] == "code-011"))
    with pytest.raises(TokenizedInputError, match=message):
        _run(tmp_path, rows, strategy=strategy)
    assert not (tmp_path / "out" / OUT_REL).exists()


@pytest.mark.parametrize("strategy", ["best_fit_decreasing", "streaming_best_fit"])
def test_per_document_keys_in_many_partitions_count_and_check_as_in_one(tmp_path, monkeypatch, strategy):
    """With a 64-byte budget the sets' document digests and the (document, chunk) hashes are spread over
    many partition files of the run's spill directory: the index counts the same distinct documents
    as the provenance holds, a repeated key is still found, and no partition file is left behind."""
    monkeypatch.setattr(spilled_keys, "KEYS_BUDGET_BYTES", 64)
    spill = tmp_path / "spill"
    rows = _documents(seed=1)
    root, _, _ = _run(tmp_path, rows, strategy=strategy, spill_dir=str(spill))
    provenance = pq.read_table(root / OUT_REL / PROVENANCE_FILE)
    index = load_index(str(root / OUT_REL / "flat"))
    for entry in index["sets"]:
        mine = provenance.filter(pc.and_(pc.equal(provenance["split"], entry["split"]),
                                         pc.equal(provenance["source"], entry["source"])))
        assert entry["documents"] == len(pc.unique(mine["document_id"])) > 0
    assert index["totals"]["documents"] == len({r["id"] for r in rows})  # overlong documents are split, not dropped
    assert not any(spill.iterdir())
    next(r for r in rows if r["id"] == "code-011").update(id="code-013")
    with pytest.raises(TokenizedInputError, match="document code-013 chunk 0 appears 2 times"):
        _run(tmp_path, rows, "dup", strategy=strategy, spill_dir=str(spill))
    assert not any(spill.iterdir())


def test_input_contract_errors(tmp_path):
    storage = Storage(str(tmp_path / "out"))
    with pytest.raises(TokenizedInputError, match="no tokenized documents"):
        pack_outputs(storage, IN_REL, OUT_REL, _settings(), TOKENIZER)
    rows = _documents(seed=1)
    (tmp_path / "out" / IN_REL).mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=TOKENIZED_SCHEMA).drop_columns(["chunk"]),
                   tmp_path / "out" / IN_REL / "part-00000.parquet")
    with pytest.raises(TokenizedInputError, match=r"lacks columns \['chunk'\]"):
        pack_outputs(storage, IN_REL, OUT_REL, _settings(), TOKENIZER)
    _write_tokenized(tmp_path / "c", rows)
    with pytest.raises(ValueError, match="tokenizer_info lacks"):
        pack_outputs(Storage(str(tmp_path / "c")), IN_REL, OUT_REL, _settings(), {"vocab_size": VOCAB})


def test_streaming_keeps_only_documents_of_open_sequences(tmp_path, monkeypatch):
    """Memory of streaming_best_fit: after each batch the tokens held are those of documents with a piece
    in an open sequence. With pieces of >= 20 tokens a sequence of 64 holds <= 3, so <= 4 x 3 documents
    are held at any time (a leak would hold hundreds)."""
    rng = np.random.default_rng(9)
    rows = [_row(f"doc-{i:03d}", "web", "train", [*rng.integers(0, EOS, int(rng.integers(19, 40))), EOS])
            for i in range(400)]
    held: list[tuple[int, int]] = []
    emit = streaming_pass.StreamSet.emit

    def spy(self, closed):
        emit(self, closed)
        held.append((len(self.docs), self.packer.n_open))

    monkeypatch.setattr(streaming_pass.StreamSet, "emit", spy)
    _, _, result = _run(tmp_path, rows, strategy="streaming_best_fit", batch_rows=50)
    # one per batch, one for finish(): batches are read a row group at a time (token_batches.py), here
    # 2 parts of 200 rows in row groups of 17
    assert len(held) == 2 * -(-200 // 17) + 1
    assert all(docs <= open_ * (SEQ_LEN // 20) for docs, open_ in held)
    assert max(docs for docs, _ in held) <= 4 * (SEQ_LEN // 20) and held[-1] == (0, 0)
    assert result.totals.tokens == sum(r["num_tokens"] for r in rows)


def test_parts_per_set_layout_packs_the_same_and_each_pass_reads_its_own_parts(tmp_path, monkeypatch):
    """tokenized_documents writes `<split>/<source>/part-*.parquet`: the output depends only on each set's
    row order, and a pass over one set reads that set's parts only."""
    rows = _documents(seed=8)
    _, _, interleaved = _run(tmp_path, rows, "a")
    root = tmp_path / "b"
    for (split, source) in sorted({(r["split"], r["source"]) for r in rows}):
        out = root / IN_REL / split / source
        out.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist([r for r in rows if (r["split"], r["source"]) == (split, source)],
                                            schema=TOKENIZED_SCHEMA), out / "part-00000.parquet")
    reads: list[tuple[str, tuple[str, ...]]] = []
    part_token_batches = offline_pass.part_token_batches

    def counting(storage, path, columns, *args, **kw):
        reads.append((path[len(storage.path("")) + 1:], tuple(columns)))
        return part_token_batches(storage, path, columns, *args, **kw)

    monkeypatch.setattr(offline_pass, "part_token_batches", counting)
    per_set = pack_outputs(Storage(str(root)), IN_REL, OUT_REL, _settings(), TOKENIZER, max_tokens_in_memory=1)
    assert per_set.files == interleaved.files
    token_reads = sorted(rel for rel, columns in reads if "input_ids" in columns)
    assert token_reads == sorted(f"{IN_REL}/{s}/{src}/part-00000.parquet" for s, src in
                                 {(r["split"], r["source"]) for r in rows})


def _flat_samples(root: Path) -> list[tuple[str, list[int]]]:
    return [(shard["name"], samples.tokens[j].tolist()) for _, shard, samples in
            read_shard_set(str(root / OUT_REL / "flat")) for j in range(len(samples.tokens))]


@pytest.mark.parametrize("strategy", ["window", "none"])
def test_cap_free_layouts_do_not_depend_on_the_piece_cap(tmp_path, strategy):
    """`window` and `none` place the same pieces in the same samples however many pieces a placement
    window may hold (windows.py: a strategy window is never cut)."""
    rows = _documents(seed=4)
    a, _, whole = _run(tmp_path, rows, "a", strategy=strategy, window=5)
    b, _, windowed = _run(tmp_path, rows, "b", strategy=strategy, window=5, max_pieces_in_memory=3)
    assert _flat_samples(a) == _flat_samples(b) != []
    assert pq.read_table(a / OUT_REL / PROVENANCE_FILE).equals(pq.read_table(b / OUT_REL / PROVENANCE_FILE))
    assert [s.as_dict() for s in whole.sets] == [s.as_dict() for s in windowed.sets]


def test_runs_end_at_the_writers_row_group_boundaries_so_windows_do_not_join_every_run(tmp_path, monkeypatch):
    """12,000 one-sample documents in placement windows of 5,000 pieces, shards of 4,096 samples (row
    groups of 1,024): the emitter cuts each run at the writer's next boundary, so a window that starts
    mid row group costs one join of two runs (its first run completes the group), not one for every
    run after it (runs of a fixed 1,024 crossed every boundary from the second window on, each joined
    into an 8 MiB copy at 1024 x 2048). The tokens come back from the shards unchanged."""
    joined = []
    concat = shard_writers.concat_samples

    def counting(parts):
        joined.append(len(parts))
        return concat(parts)

    monkeypatch.setattr(shard_writers, "concat_samples", counting)
    rng = np.random.default_rng(6)
    rows = [_row(f"doc-{i:05d}", "web", "train", [*rng.integers(0, EOS, int(rng.integers(33, SEQ_LEN))), EOS])
            for i in range(12000)]
    root, _, result = _run(tmp_path, rows, samples_per_shard=4096, max_pieces_in_memory=5000, formats=("flat",))
    windows = placement_windows(np.array([r["num_tokens"] for r in rows]), SEQ_LEN, "split", 5000)
    assert result.totals.sequences == 12000 and len(windows) == 3
    assert sum(n > 1 for n in joined) <= len(windows) - 1
    rebuilt = _reassemble(root / OUT_REL / "flat", pq.read_table(root / OUT_REL / PROVENANCE_FILE).to_pylist())
    assert all(rebuilt[(r["id"], r["chunk"])][0] == r["input_ids"] for r in rows)


@pytest.mark.parametrize("overlong", ["split", "filter"])
def test_a_set_over_the_piece_cap_is_packed_window_by_window(tmp_path, monkeypatch, overlong):
    """best_fit_decreasing with max_pieces_in_memory=12: pack() never lays out more than 12 pieces (or
    one document's), each window is packed on its own and its samples follow the previous window's, and
    every token still lands once (also through the runs of 3 samples the emitter writes)."""
    to_boundary = shard_writers.ShardGroupWriter.samples_to_boundary
    monkeypatch.setattr(shard_writers.ShardGroupWriter, "samples_to_boundary", lambda w: min(3, to_boundary(w)))
    laid_out: list[tuple[int, int]] = []

    def counting(lengths, *args, **kw):
        packing = pack(lengths, *args, **kw)
        laid_out.append((len(lengths), packing.piece_len.size))
        return packing

    monkeypatch.setattr(offline_pass, "pack", counting)
    rows = _documents(seed=3)
    root, _, result = _run(tmp_path, rows, overlong=overlong, max_pieces_in_memory=12)
    assert max(p for d, p in laid_out if d > 1) <= 12 and len(laid_out) > len(result.sets)
    train_web = [r for r in rows if (r["split"], r["source"]) == ("train", "web")]
    lengths = np.array([r["num_tokens"] for r in train_web])
    want, sequences = [], 0
    for d0, d1 in placement_windows(lengths, SEQ_LEN, overlong, 12):
        packing = pack(lengths[d0:d1], SEQ_LEN, overlong=overlong)
        seq = np.repeat(np.arange(packing.n_sequences), np.diff(packing.seq_ptr))
        want += [(int(sequences + j), train_web[d0 + d]["id"], train_web[d0 + d]["chunk"], int(s), int(n))
                 for j, d, s, n in zip(seq, packing.piece_doc, packing.piece_start, packing.piece_len, strict=True)]
        sequences += packing.n_sequences
    provenance = pq.read_table(root / OUT_REL / PROVENANCE_FILE).to_pylist()
    got = [(8 * r["shard"] + r["sample"], r["document_id"], r["chunk"], r["token_start"], r["tokens"])
           for r in provenance if (r["split"], r["source"]) == ("train", "web")]
    assert got == want and len(placement_windows(lengths, SEQ_LEN, overlong, 12)) > 1
    stats = {(s.split, s.source): s for s in result.sets}
    assert stats[("train", "web")].sequences == sequences
    assert stats[("train", "web")].documents == len(train_web)
    rebuilt = _reassemble(root / OUT_REL / "flat", provenance)
    for r in rows:
        if overlong == "filter" and r["num_tokens"] > SEQ_LEN:
            assert (r["id"], r["chunk"]) not in rebuilt
        else:
            assert rebuilt[(r["id"], r["chunk"])][0] == r["input_ids"]
    dropped = pq.read_table(root / OUT_REL / EXCLUSIONS_FILE)
    assert dropped.num_rows == result.totals.documents_dropped == (
        sum(r["num_tokens"] > SEQ_LEN for r in rows) if overlong == "filter" else 0)
