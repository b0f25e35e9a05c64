"""What the dedup stage keeps in memory with `near.storage.type: disk`: the signatures wait on disk
(signature_spill.py) and come back per candidate and for the kept rows, the shingle cache stays within
`shingle_cache_bytes`, and the stage writes the accepted-signature artifact before the write pass and
lets it go. Decisions and bytes are those of the in-memory forms."""

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.contracts import SIGNATURES_FILE
from platform_assets.dedup import deduplicator
from platform_assets.dedup.band_buckets import ShingleSpill
from platform_assets.dedup.deduplicator import Deduplicator, deduplicate
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_spill import SignatureSpill
from platform_assets.dedup.stage import deduplicate_outputs
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

VOCAB = [f"w{i}" for i in range(3000)]


def _corpus(n_base: int = 60, seed: int = 3) -> list[str]:
    """Distinct essays, then one-word edits of every third one (near duplicates, J ~0.97)."""
    rng = random.Random(seed)
    base = [" ".join(rng.choice(VOCAB) for _ in range(250)) for _ in range(n_base)]
    edits = []
    for text in base[::3]:
        words = text.split()
        words[rng.randrange(len(words))] = "edited"
        edits.append(" ".join(words))
    return base + edits


def _table(texts: list[str]) -> pa.Table:
    n = len(texts)
    return pa.table({
        "id": [f"d{i:04d}" for i in range(n)], "source": ["web"] * n, "text": pa.array(texts, pa.large_string()),
        "modality": ["text"] * n, "uri": [f"u{i}" for i in range(n)], "license": [None] * n, "meta": [None] * n,
        "ingested_at": pa.array([1_700_000_000 + i for i in range(n)], pa.timestamp("s", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)


def _storage_settings(tmp_path, kind: str, **storage) -> DedupSettings:
    s = DedupSettings()
    near = s.near.model_copy(update={"storage": s.near.storage.model_copy(
        update={"type": kind, "spill_dir": str(tmp_path), **storage})})
    return s.model_copy(update={"near": near})


def test_signature_spill_gives_back_the_rows_it_was_given(tmp_path):
    rng = np.random.default_rng(0)
    matrix = rng.integers(0, 2**32, size=(1000, 16), dtype=np.uint32)
    spill = SignatureSpill(tmp_path, 16)
    for piece in np.array_split(matrix, 3):
        spill.add(piece)
    assert len(spill) == 1000
    picks = rng.integers(0, 1000, size=50)
    assert np.array_equal(spill[picks], matrix[picks])
    assert np.array_equal(spill[int(picks[0])], matrix[picks[0]])
    assert np.array_equal(spill[np.int64(999)], matrix[999])
    kept = rng.permutation(1000)[:400]  # any order, as the keep policy's
    assert np.array_equal(spill.take(kept, chunk_rows=64), matrix[kept])
    assert spill.take(np.empty(0, np.int64)).shape == (0, 16)
    with pytest.raises(IndexError):
        spill[np.array([1000])]
    with pytest.raises(IndexError):
        spill.take(np.array([5, 1000]))
    with pytest.raises(RuntimeError, match="being read"):
        spill.add(matrix[:1])
    (tmp_path / "w8").mkdir()
    with pytest.raises(ValueError, match="expected"):
        SignatureSpill(tmp_path / "w8", 8).add(matrix[:2])
    spill.close()


def test_signature_spill_take_reads_at_most_one_chunk_at_a_time(tmp_path):
    """The artifact's gather holds the kept rows and one chunk, never the whole file."""
    matrix = np.arange(500 * 8, dtype=np.uint32).reshape(500, 8)
    spill = SignatureSpill(tmp_path, 8)
    spill.add(matrix)
    reads = []
    read = spill._read
    spill._read = lambda first, count: reads.append(count) or read(first, count)
    rows = np.array([499, 3, 250, 251, 4])
    assert np.array_equal(spill.take(rows, chunk_rows=32), matrix[rows])
    assert max(reads) <= 32 and len(reads) == 3  # chunks 0, 7 and 15 only: no chunk without a kept row
    spill.close()


def test_shingle_cache_stays_within_its_budget(tmp_path):
    rng = np.random.default_rng(1)
    spill = ShingleSpill(tmp_path, cache_bytes=10_000)
    sizes = rng.integers(200, 600, size=100)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    values = rng.integers(0, 2**32, size=int(offsets[-1]), dtype=np.uint32)
    spill.add_top32(values, offsets)
    for doc in rng.integers(0, 100, size=400).tolist():
        got = spill.get(doc)
        assert np.array_equal(got, np.unique(values[offsets[doc]:offsets[doc + 1]]))
        assert spill.cached_bytes <= 10_000
        assert spill.cached_bytes == sum(a.nbytes for a in spill._cache.values())
    spill.release(int(next(iter(spill._cache))))
    assert spill.cached_bytes == sum(a.nbytes for a in spill._cache.values())
    spill.close()
    assert spill.cached_bytes == 0


@pytest.mark.parametrize("cache_bytes", [0, 4096])
def test_spilled_signatures_and_a_small_cache_decide_as_memory(tmp_path, cache_bytes):
    table = _table(_corpus())
    memory = deduplicate(table, _storage_settings(tmp_path, "memory"), batch_rows=17)[1]
    disk = Deduplicator(_storage_settings(tmp_path, "disk", shingle_cache_bytes=cache_bytes))
    for batch in table.to_batches(max_chunksize=17):
        disk.add_batch(batch)
    assert len(disk._sig_spill) == table.num_rows and disk._sigs == []  # no matrix in memory
    result = disk.finish()
    assert memory.counts.removed_near == 20 and result.counts.as_dict() == memory.counts.as_dict()
    assert result.decisions.equals(memory.decisions) and result.duplicates.equals(memory.duplicates)
    assert result.accepted.to_table(DedupSettings()).equals(memory.accepted.to_table(DedupSettings()))
    assert list(tmp_path.glob("dedup-spill-*")) == []  # spill files removed


def test_stage_writes_the_artifact_before_the_write_pass_and_lets_it_go(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path / "out"))
    texts = _corpus()
    with storage.staged_dir("cleaned_documents/web") as staged, staged.open_output("part-00000.parquet") as f:
        pq.write_table(_table(texts), f, row_group_size=13)
    events = []
    write, write_side, write_groups = TableSink.write, TableSink.write_side, TableSink.write_side_row_groups
    monkeypatch.setattr(TableSink, "write", lambda self, batch, **kw: events.append("part") or write(self, batch, **kw))
    monkeypatch.setattr(TableSink, "write_side",
                        lambda self, name, table, *rows: events.append(name) or write_side(self, name, table, *rows))
    monkeypatch.setattr(TableSink, "write_side_row_groups",
                        lambda self, name, *args: events.append(name) or write_groups(self, name, *args))
    # the artifact is encoded a row group at a time: its writer held the whole encoded column (530 B a
    # document) while the signatures themselves were in memory too
    monkeypatch.setattr(deduplicator, "ARTIFACT_ROW_GROUP_ROWS", 7)
    settings = _storage_settings(tmp_path, "disk")
    stage = deduplicate_outputs(storage, ["cleaned_documents/web"], "deduplicated_documents/_all", settings)
    assert events[0] == SIGNATURES_FILE and "part" in events  # the artifact before any kept batch
    metadata = pq.ParquetFile(storage.path(f"deduplicated_documents/_all/{SIGNATURES_FILE}")).metadata
    groups = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    assert groups == [7] * (metadata.num_rows // 7) + ([metadata.num_rows % 7] if metadata.num_rows % 7 else [])
    assert stage.result.accepted is None  # not held through the write pass
    with pytest.raises(RuntimeError, match="handed over"):
        stage.result.hand_over_accepted()
    artifact = pq.read_table(storage.path(f"deduplicated_documents/_all/{SIGNATURES_FILE}"))
    reference = deduplicate(_table(texts), settings)[1].accepted.to_table(settings)
    assert artifact.equals(reference) and artifact.num_rows == len(texts) - 20


def test_the_write_pass_encodes_each_kept_batch_before_reading_the_next(tmp_path, monkeypatch):
    """The write pass holds the batch read and its kept rows; a write-behind thread encoding the batch
    before held a third (~64 MiB at the default io.batch_bytes): the stage process at the whole
    corpus x4 peaked at 532 MB against 467 at 1x with it, 491-498 without."""
    import threading

    from platform_assets import parquet_parts

    storage = Storage(str(tmp_path / "out"))
    with storage.staged_dir("cleaned_documents/web") as staged, staged.open_output("part-00000.parquet") as f:
        pq.write_table(_table(_corpus()), f, row_group_size=13)
    writing_threads = set()

    def recording(write):
        def record(self, batch, *args, **kwargs):
            writing_threads.add(threading.current_thread().name)
            return write(self, batch, *args, **kwargs)
        return record

    # a batch read in pieces is written as a table of them (write_table), a single piece as a batch
    writer = parquet_parts.pq.ParquetWriter
    for name in ("write_batch", "write_table"):
        monkeypatch.setattr(writer, name, recording(getattr(writer, name)))
    stage = deduplicate_outputs(storage, ["cleaned_documents/web"], "deduplicated_documents/_all",
                                _storage_settings(tmp_path, "disk"))
    assert stage.rows == 60  # 80 in, 20 near duplicates out
    assert writing_threads == {threading.current_thread().name}  # no writer thread of its own


def test_the_write_pass_looks_ids_up_by_hash_and_the_same_id_twice_is_emitted_once(tmp_path):
    """The keep lookup holds 10 B a document (a hash, a keep and an emitted flag), not the decisions'
    ids; an input with an id read twice keeps it once, as before."""
    table = _table(_corpus())
    settings = _storage_settings(tmp_path, "disk")
    kept, unique = deduplicate(table, settings)
    lookup = unique.keep
    assert lookup._ids is None  # hashes, not the ids
    assert lookup._hashes.nbytes + lookup._keep.nbytes + lookup._emitted.nbytes == 10 * table.num_rows
    twice = pa.concat_tables([table, table.slice(0, 5)])
    kept_twice, repeated = deduplicate(twice, settings)
    assert repeated.counts.duplicate_ids == 5 and len(repeated.keep) == table.num_rows
    assert kept_twice.equals(kept)  # the repeated rows emitted once
    d = unique.decisions
    assert kept["id"].to_pylist() == [i for i in table["id"].to_pylist()
                                      if i in set(d.filter(d["keep"])["id"].to_pylist())]


def _reference_kept_rows(batches: list[list[str]], decided: list[str], keep: list[bool]) -> list[list[int]]:
    """The lookup's contract in plain Python: an id is kept if any of its rows is, emitted once."""
    kept_ids = {i for i, k in zip(decided, keep, strict=True) if k}
    emitted, out = set(), []
    for batch in batches:
        rows = []
        for r, i in enumerate(batch):
            if i in kept_ids and i not in emitted:
                emitted.add(i)
                rows.append(r)
        out.append(rows)
    return out


@pytest.mark.parametrize("collide", [False, True])
def test_keep_lookup_matches_the_plain_contract_with_and_without_hash_collisions(monkeypatch, collide):
    """Random ids (some decided twice, one kept and one not), read back in random batches; with every
    hash forced into 4 values the lookup falls back to the ids and answers the same."""
    from platform_assets.dedup import keep_lookup

    if collide:
        real = keep_lookup.id_hashes
        monkeypatch.setattr(keep_lookup, "id_hashes", lambda ids: real(ids) & np.uint64(3))
    rng = random.Random(11)
    ids = [f"doc-{rng.randrange(10**9):09d}" for _ in range(3000)]
    decided = ids + rng.sample(ids, 200)  # 200 ids decided twice (the same document read twice)
    keep = [rng.random() < 0.7 for _ in decided]
    hashed = keep_lookup.IdHashes(pa.array(decided))
    assert hashed.collide == collide and hashed.distinct == len(set(decided))
    lookup = keep_lookup.KeepLookup(pa.array(decided), np.array(keep))
    assert (lookup._ids is not None) == collide and len(lookup) == len(set(ids))
    reading = ids + rng.sample(ids, 300)
    rng.shuffle(reading)
    batches = [reading[a: a + 257] for a in range(0, len(reading), 257)]
    got = [lookup.kept_rows(pa.array(b)).tolist() for b in batches]
    assert got == _reference_kept_rows(batches, decided, keep)
    with pytest.raises(ValueError, match="not given to add_batch.*never-decided"):
        lookup.kept_rows(pa.array(["never-decided"]))


def test_the_stage_leaves_the_decisions_table_out_and_writes_the_same_tables(tmp_path):
    """finish(decisions=False): no per-document decisions table, the same exclusions, duplicates and
    per-source counts as with it."""
    texts = _corpus()
    table = _table(texts + texts[:5])  # exact copies too
    results = []
    for with_decisions in (True, False):
        dedup = Deduplicator(_storage_settings(tmp_path, "disk"))
        for batch in table.to_batches(max_chunksize=17):
            dedup.add_batch(batch)
        results.append(dedup.finish(decisions=with_decisions))
    full, lean = results
    assert lean.decisions is None and full.decisions.num_rows == table.num_rows
    assert full.counts.removed_near > 0 and full.counts.removed_exact > 0
    assert lean.exclusions().equals(full.exclusions()) and lean.duplicates.equals(full.duplicates)
    assert lean.removed_per_source().equals(full.removed_per_source())
    assert lean.filter_batch(table).equals(full.filter_batch(table))
    d = full.decisions.filter(pa.compute.invert(full.decisions["keep"]))  # the exclusions are its removed rows
    assert full.exclusions()["id"].to_pylist() == d["id"].to_pylist()
    assert full.exclusions()["kept_id"].to_pylist() == d["kept_id"].to_pylist()


@pytest.mark.parametrize("spilled", [False, True])
@pytest.mark.parametrize("prior_rows,with_phash", [(0, False), (11, False), (11, True), (0, True)])
def test_artifact_row_groups_are_the_joined_artifact_cut_every_n_rows(tmp_path, spilled, prior_rows, with_phash):
    """The stage's artifact is taken a row group at a time from the run's columns (TakenSignatures):
    the tables are those of the earlier run's artifact extended by every accepted row taken at once,
    cut every `rows` rows, including a row group across the two runs and phashes on either side."""
    from platform_assets.dedup.signature_store import AcceptedSignatures, TakenSignatures, artifact_row_groups

    rng = np.random.default_rng(5)
    # with 11 earlier rows, the second row group is 3 of them and 5 of this run's
    settings, width, n = DedupSettings(), 4, 40
    ids = pa.array([f"doc-{i:03d}" for i in range(n)])
    sources = pa.array(["web" if i % 3 else "code" for i in range(n)])
    hashes = pa.array([rng.bytes(16) for _ in range(n)], pa.binary(16))
    n_shingles = rng.integers(0, 50, n).astype(np.int32)
    sigs = rng.integers(0, 2**32, (n, width), dtype=np.uint64).astype(np.uint32)
    kept = rng.permutation(n)[:29]  # in keep-policy order, not row order
    image_rows = np.array([3, 8, 21], np.int64) if with_phash and prior_rows == 0 else np.zeros(0, np.int64)
    phash_values = np.array([7, 9, 11], np.uint64)[: len(image_rows)]

    def phashes_of(rows):
        return deduplicator._phashes_of(rows, image_rows, phash_values)

    source = sigs
    if spilled:
        source = SignatureSpill(tmp_path, width)
        source.add(sigs)
    prior = AcceptedSignatures(
        pa.array([f"old-{i}" for i in range(prior_rows)], pa.string()), pa.array(["web"] * prior_rows, pa.string()),
        pa.array([rng.bytes(16) for _ in range(prior_rows)], pa.binary(16)), np.arange(prior_rows, dtype=np.int32),
        rng.integers(0, 2**32, (prior_rows, width), dtype=np.uint64).astype(np.uint32),
        pa.array([5 if i % 2 else None for i in range(prior_rows)], pa.uint64()) if with_phash and prior_rows else None,
    ) if prior_rows else AcceptedSignatures.empty(128)
    take = pa.array(kept, pa.int64())
    whole = prior.extended(AcceptedSignatures(ids.take(take), sources.take(take), hashes.take(take), n_shingles[kept],
                                              sigs[kept], phashes_of(kept))).to_table(settings)

    taken = TakenSignatures(ids, sources, hashes, n_shingles, source, kept, phashes_of)
    schema, groups = artifact_row_groups([prior, taken], settings, 8)
    groups = list(groups)
    assert schema == whole.schema and ("phash" in schema.names) == with_phash
    total = prior_rows + 29
    assert [g.num_rows for g in groups] == [8] * (total // 8) + ([total % 8] if total % 8 else [])
    assert pa.concat_tables(groups).equals(whole)
    if spilled:
        source.close()
