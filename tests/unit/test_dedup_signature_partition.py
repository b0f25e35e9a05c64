"""dedup_signatures' logic (Dagster-free): the stored keys of each cleaned partition give the global
pass exactly the outputs (bytes) of keys computed from the text in process, for every storage,
method and batching; stale or missing keys are refused by name."""

import hashlib
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.contracts import IOSettings
from platform_assets.dedup.band_partitions import group_band_bucket
from platform_assets.dedup.document_keys import DocumentKeyer, shingle_lists
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.shingles import shingle_hashes
from platform_assets.dedup.signature_partition import (
    StaleSignaturesError,
    ids_digest,
    signature_problem,
    write_signature_partition,
)
from platform_assets.dedup.stage import deduplicate_outputs
from platform_assets.parquet_parts import TableSource
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

VOCAB = [f"w{i}" for i in range(3000)]
PHASH = 0xA5C3_0F96_3C5A_F00F  # 32 bits set, like a real phash


def _essay(rng: random.Random, n: int = 250) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def _edit(text: str, at: int) -> str:
    words = text.split()
    words[at] = "edited"
    return " ".join(words)


def _image(tag: str, phash: int | None) -> list[dict]:
    return [{"kind": "image", "mime": "image/png", "uri": f"file:///{tag}.png",
             "sha256": hashlib.sha256(tag.encode()).hexdigest(), "bytes": None, "phash": phash}]


def _commit(storage: Storage, source: str, rows: list[tuple[str, str, list | None]], t0: int) -> None:
    """A cleaned partition: rows of (text, modality, media), ids from the source and position."""
    n = len(rows)
    table = pa.table({
        "id": [f"{source}-{i:03d}" for i in range(n)], "source": [source] * n,
        "text": pa.array([r[0] for r in rows], pa.large_string()), "modality": [r[1] for r in rows],
        "uri": [f"{source}#{i}" for i in range(n)], "license": [None] * n, "meta": [None] * n,
        "ingested_at": pa.array([t0 + i for i in range(n)], pa.timestamp("s", tz="UTC")),
        "media": pa.array([r[2] for r in rows], DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)
    with storage.staged_dir(f"cleaned_documents/{source}") as staged, staged.open_output("part-00000.parquet") as f:
        pq.write_table(table, f, row_group_size=7)  # several row groups: batches cut across them


@pytest.fixture
def corpus(tmp_path):
    """web: 30 essays, an exact copy, a case-only copy, an empty and a punctuation-only text, 4 images;
    forum (newer): one-word edits of 3 web essays, an exact copy of one, a re-encoded image (phash 2
    bits away), the same image bytes again, a distinct image, and essays of its own."""
    rng = random.Random(5)
    storage = Storage(str(tmp_path / "out"))
    base = [_essay(rng) for _ in range(36)]
    web = [(t, "text", None) for t in base[:30]] + [(base[0], "text", None), (base[1].upper(), "text", None),
                                                    ("", "text", None), ("... !!! ...", "text", None)]
    web += [(f"a photo {i}", "image", _image(f"img{i}", PHASH ^ (0xFFFF << (16 * i)) if i < 3 else None))
            for i in range(4)]
    forum = [(_edit(base[i], 7 + i), "text", None) for i in (2, 3, 4)] + [(base[5], "text", None)]
    forum += [("a re-encoded photo", "image", _image("img0-jpeg", PHASH ^ 0xFFFF ^ 0b11)),
              ("the same bytes, another caption", "image", _image("img1", PHASH ^ (0xFFFF << 16))),
              ("another photo", "image", _image("other", PHASH ^ 0xFFFF_FFFF_0000_0000))]
    forum += [(t, "text", None) for t in base[30:]]
    _commit(storage, "web", web, 1_000)
    _commit(storage, "forum", forum, 5_000)
    return storage


INPUTS = ["cleaned_documents/web", "cleaned_documents/forum"]
SETTINGS = {
    "disk": {},
    "memory": {"near": {"storage": {"type": "memory"}}},
    "simhash": {"near": {"method": "simhash"}},
    "simhash_memory": {"near": {"method": "simhash", "storage": {"type": "memory"}, "verify": "none"}},
    "estimated": {"near": {"verify": "estimated"}},
    "no_near": {"near": {"enabled": False}},
    "no_exact_longest": {"exact": {"enabled": False}, "keep": "longest"},
    "no_images": {"images": {"enabled": False}},
}


def _signatures(storage: Storage, settings: DedupSettings, io: IOSettings, prefix: str) -> list[str]:
    dirs = []
    for rel in INPUTS:
        out = f"{prefix}/{rel.split('/')[-1]}"
        write_signature_partition(storage, rel, out, settings, io)
        dirs.append(out)
    return dirs


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize(("batch_rows", "slice_bytes"), [(1, 8 * 2**20), (5, 3_000), (8192, 8 * 2**20)])
def test_stored_keys_give_the_bytes_of_keys_computed_from_text(corpus, name, batch_rows, slice_bytes):
    settings = DedupSettings(**SETTINGS[name])
    reference = deduplicate_outputs(corpus, INPUTS, "reference", settings)
    # the keys are computed with another batching (rows per batch, text per slice) than the reference's
    keyed = DedupSettings(**{**SETTINGS[name], "slice_bytes": slice_bytes})
    dirs = _signatures(corpus, keyed, IOSettings(batch_rows=batch_rows), "dedup_signatures")
    stored = deduplicate_outputs(corpus, INPUTS, "stored", settings, signature_dirs=dirs)
    assert stored.files == reference.files  # every part and side file, byte for byte
    assert stored.result.counts == reference.result.counts
    c = reference.result.counts
    assert c.documents == 51
    if name == "disk":  # the corpus exercises every rule
        assert (c.removed_exact, c.removed_near, c.removed_near_image) == (4, 3, 1)
        assert c.without_shingles == 9  # 7 images (no MinHash on captions), the empty and the wordless text


def test_incremental_runs_from_stored_keys_match_the_text_path(corpus):
    settings = DedupSettings(incremental=True)
    dirs = _signatures(corpus, settings, IOSettings(batch_rows=4), "dedup_signatures")
    for out, kwargs in (("reference", {}), ("stored", {"signature_dirs": dirs[:1]})):
        deduplicate_outputs(corpus, INPUTS[:1], out, settings, **kwargs)
    reference = deduplicate_outputs(corpus, INPUTS, "reference", settings)
    stored = deduplicate_outputs(corpus, INPUTS, "stored", settings, signature_dirs=dirs)
    assert stored.carried_over == reference.carried_over > 0 and stored.rows_in == reference.rows_in == 13
    assert stored.result.counts.removed_against_earlier_runs == reference.result.counts.removed_against_earlier_runs
    assert stored.result.counts.removed_against_earlier_runs > 0
    assert stored.files == reference.files


def test_keys_are_per_document_and_shingles_are_the_distinct_top_bits(corpus):
    settings = DedupSettings()
    table = pq.read_table(corpus.path("cleaned_documents/web"))
    keyer = DocumentKeyer(settings)
    whole = keyer.keys(table.combine_chunks().to_batches()[0])
    pieces = [keyer.keys(table.slice(a, 5), a) for a in range(0, table.num_rows, 5)]
    assert pa.Table.from_batches(pieces).equals(pa.Table.from_batches([whole]))
    assert whole["row"].to_pylist() == list(range(table.num_rows))
    values, offsets = shingle_lists(whole)
    expected = shingle_hashes(table["text"].combine_chunks(), settings.near.shingles)
    for i in (0, 30, 31):
        want = np.unique((expected.doc(i) >> np.uint64(32)).astype(np.uint32))
        assert len(want) > 200 and values[offsets[i]:offsets[i + 1]].tolist() == want.tolist()
    # the empty text and an image (its caption is not near-deduplicated) have none
    assert [whole["n_shingles"][i].as_py() for i in (32, 34)] == [0, 0] and offsets[33] == offsets[32]
    assert offsets[35] == offsets[34]
    assert whole["phash"].to_pylist()[34:] == [PHASH ^ 0xFFFF, PHASH ^ (0xFFFF << 16), PHASH ^ (0xFFFF << 32), None]
    assert whole["phash"].null_count == table.num_rows - 3
    without = DocumentKeyer(DedupSettings(near={"verify": "estimated"})).keys(table.slice(0, 3))
    assert without["shingles"].null_count == 3  # not needed without exact verification: not stored


def test_missing_stale_and_other_settings_keys_are_refused_by_name(corpus):
    settings = DedupSettings()
    dirs = _signatures(corpus, settings, IOSettings(), "keys")
    assert [signature_problem(corpus, i, d, settings) for i, d in zip(INPUTS, dirs, strict=True)] == [None, None]
    with pytest.raises(StaleSignaturesError, match=r"for: forum \(missing\)"):
        deduplicate_outputs(corpus, INPUTS, "dd", settings, signature_dirs=[dirs[0], "absent/forum"])
    longest = DedupSettings(keep="longest")
    with pytest.raises(StaleSignaturesError, match=r"web \(computed with other dedup settings \(keep differ\)\)"):
        deduplicate_outputs(corpus, INPUTS, "dd", longest, signature_dirs=dirs)
    # web cleaned again (one other document): its keys are stale, forum's still stand
    _commit(corpus, "web", [("a new text for the web source", "text", None)], 9_000)
    assert signature_problem(corpus, INPUTS[1], dirs[1], settings) is None
    with pytest.raises(StaleSignaturesError, match=r"for: web \(stale \(computed from another version"):
        deduplicate_outputs(corpus, INPUTS, "dd", settings, signature_dirs=dirs)
    assert not corpus.exists("dd")  # nothing committed
    write_signature_partition(corpus, INPUTS[0], dirs[0], settings)
    assert deduplicate_outputs(corpus, INPUTS, "dd", settings, signature_dirs=dirs).rows_in == 1 + 13


def test_an_empty_partition_has_keys_of_no_rows_and_ids_digest_compares_order(corpus):
    settings = DedupSettings()
    with corpus.staged_dir("cleaned_documents/empty"):
        pass  # committed, no parts: a source whose every document cleaning removed
    result = write_signature_partition(corpus, "cleaned_documents/empty", "keys/empty", settings)
    assert result.rows == 0 and signature_problem(corpus, "cleaned_documents/empty", "keys/empty", settings) is None
    bucket = group_band_bucket(corpus, "b000", ["keys/empty"], "buckets/b000", settings)  # no band records
    assert bucket.used and (bucket.records, bucket.rows) == (0, 0)
    with pytest.raises(StaleSignaturesError, match="no committed output"):
        write_signature_partition(corpus, "cleaned_documents/absent", "keys/absent", settings)
    write_signature_partition(corpus, INPUTS[0], "keys/web", settings)
    cleaned = ids_digest(TableSource(corpus, INPUTS[0]).batches(["id"]))
    assert ids_digest(TableSource(corpus, "keys/web").batches(["id"])) == cleaned
    reversed_ids = pa.RecordBatch.from_pydict({"id": list(reversed(pq.read_table(corpus.path(INPUTS[0]))["id"]
                                                                    .to_pylist()))})
    assert ids_digest(iter([reversed_ids]))[1] != cleaned[1]
