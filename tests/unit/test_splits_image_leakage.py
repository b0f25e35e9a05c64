"""The leak check covers images: near-duplicate phashes in two splits fail it, captions do not."""

import hashlib

import pyarrow as pa
import pytest

from platform_assets.contracts import IOSettings
from platform_assets.dedup.deduplicator import deduplicate
from platform_assets.dedup.settings import DedupSettings, ExactSettings, NearSettings
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.splits.assignment import assign_splits, with_splits
from platform_assets.splits.leakage import IMAGE_LEAKS_SCHEMA, LeakageChecker, check_leakage
from platform_assets.splits.settings import LeakCheckSettings, SplitSettings
from platform_assets.splits.stage import check_split_leakage
from platform_assets.storage import Storage

BASE = 0xA5C3_0F96_3C5A_F00F


def flip(h: int, bits) -> int:
    for b in bits:
        h ^= 1 << b
    return h


# 16 pictures pairwise 32 bits apart, as different photos are: BASE xor the Walsh-Hadamard codewords
# (bit j of codeword k is the parity of k & j; two codewords differ in exactly 32 of 64 bits)
PICTURES = [flip(BASE, [j for j in range(64) if bin(k & j).count("1") % 2]) for k in range(16)]


def table(specs, splits=None) -> pa.Table:
    """specs: (id, caption, bytes tag, phash or None for a text document)."""
    n = len(specs)
    media = [None if s[3] is None else [{"kind": "image", "mime": "image/png", "uri": f"file:///{s[2]}",
                                         "sha256": hashlib.sha256(s[2].encode()).hexdigest(), "bytes": None,
                                         "phash": s[3]}] for s in specs]
    t = pa.table({
        "id": [s[0] for s in specs], "source": ["img"] * n, "text": pa.array([s[1] for s in specs], pa.large_string()),
        "modality": ["text" if s[3] is None else "image" for s in specs], "uri": [f"u/{s[0]}" for s in specs],
        "license": [None] * n, "meta": [None] * n,
        "ingested_at": pa.array(list(range(n)), pa.timestamp("s", tz="UTC")), "media": media,
    }, schema=DOCUMENTS_SCHEMA)
    return t.append_column("split", pa.array(splits, pa.string())) if splits is not None else t


def check(t: pa.Table, **kw) -> object:
    return check_leakage(t, NearSettings(), ExactSettings(), **kw)


def test_distinct_pictures_are_far_apart():
    dist = [bin(a ^ b).count("1") for i, a in enumerate(PICTURES) for b in PICTURES[i + 1:]]
    assert set(dist) == {32}


def test_clean_split_passes_and_near_copies_inside_one_split_are_fine():
    specs = [(f"p{i}", "A photo.", f"p{i}", h) for i, h in enumerate(PICTURES)]  # one caption for all
    specs += [("p0-copy", "Another caption.", "p0-copy", flip(PICTURES[0], [1, 2]))]
    splits = ["train"] * 12 + ["validation"] * 2 + ["test"] * 2 + ["train"]
    report = check(table(specs, splits))
    assert report.ok, report.summary()
    assert report.counts["image_leaking_documents"] == 0 and report.image_pairs.schema == IMAGE_LEAKS_SCHEMA


def test_planted_cross_split_near_duplicate_image_fails_and_is_named():
    specs = [(f"p{i}", f"Picture {i}.", f"p{i}", h) for i, h in enumerate(PICTURES)]
    specs += [("leak", "A resized copy of picture 3.", "leak", flip(PICTURES[3], [10, 50]))]
    report = check(table(specs, ["train"] * 14 + ["validation", "test", "test"]))
    assert not report.ok
    assert report.exact_pairs.num_rows == 0 and report.near_pairs.num_rows == 0  # only the image check sees it
    assert report.image_pairs.to_pylist() == [{"id": "p3", "split": "train", "other_id": "leak", "other_split": "test",
                                               "distance": 2, "similarity": 1 - 2 / 64}]
    assert report.counts["image_leaking_documents"] == 1
    assert "1 images are near duplicates" in report.summary()


def test_identical_phashes_are_one_group_per_split():
    """Three re-encodings in test and one in validation of a train picture: one pair per two
    groups (named by their smallest id), every leaking document counted."""
    specs = [("a", "x", "a", PICTURES[0]), ("t1", "x", "t1", PICTURES[0]), ("t2", "x", "t2", PICTURES[0]),
             ("t0", "x", "t0", PICTURES[0]), ("v", "x", "v", flip(PICTURES[0], [7, 8, 9, 10])),
             ("b", "x", "b", PICTURES[1])]
    report = check(table(specs, ["train", "test", "test", "test", "validation", "test"]))
    pairs = {(r["id"], r["other_id"], r["distance"]) for r in report.image_pairs.to_pylist()}
    assert pairs == {("a", "t0", 0), ("a", "v", 4), ("v", "t0", 4)}
    assert report.counts["image_leaking_documents"] == 4  # t0, t1, t2 and v


def test_captions_and_bytes_key_images_as_in_dedup():
    same_caption = table([("a", "A dog.", "dog", PICTURES[0]), ("b", "A dog.", "cat", PICTURES[1])],
                         ["train", "test"])
    assert check(same_caption).ok  # two pictures with one caption: no exact, no MinHash leak
    same_bytes = table([("a", "A dog.", "dog", PICTURES[0]), ("b", "Some other words.", "dog", PICTURES[0])],
                       ["train", "test"])
    report = check(same_bytes, settings=LeakCheckSettings(images=False))
    assert [(r["id"], r["other_id"]) for r in report.exact_pairs.to_pylist()] == [("a", "b")]
    assert report.image_pairs.num_rows == 0  # turned off
    assert report.counts["exact_leaking_groups"] == 1


def test_max_distance_comes_from_the_dedup_settings():
    t = table([("a", "x", "a", PICTURES[0]), ("b", "y", "b", flip(PICTURES[0], range(6)))], ["train", "test"])
    assert check(t).ok  # 6 bits > 4
    assert not check(t, images=DedupSettings(images={"max_distance": 6}).images).ok


def test_table_input_and_text_batches_without_media():
    checker = LeakageChecker(NearSettings(), ExactSettings())
    checker.add_batch(table([("a", "x", "a", PICTURES[5])], ["train"]))  # a Table, as a caller may pass
    checker.add_batch(pa.table({"id": ["t"], "text": pa.array(["plain text"], pa.large_string()),
                                "split": ["test"]}))
    checker.add_batch(table([("b", "y", "b", flip(PICTURES[5], [0]))], ["validation"]))
    report = checker.finish()
    assert [(r["id"], r["other_id"]) for r in report.image_pairs.to_pylist()] == [("a", "b")]


@pytest.fixture
def near_pair_split_apart():
    """Two near-duplicate images (3 bits apart) and a seed that puts them in different splits."""
    specs = [(f"p{i}", f"Picture {i}.", f"p{i}", h) for i, h in enumerate(PICTURES[:8])]
    specs += [("copy", "Picture 0, resized.", "copy", flip(PICTURES[0], [0, 20, 40]))]
    ratios = {"train": 0.5, "validation": 0.25, "test": 0.25}
    pair = pa.table({"id": ["p0", "copy"]})
    seed = next(s for s in range(1000)
                if len(set(assign_splits(pair, SplitSettings(seed=s, ratios=ratios)).to_pylist())) == 2)
    return table(specs), SplitSettings(seed=seed, ratios=ratios)


def test_without_image_dedup_the_check_catches_what_the_split_scattered(near_pair_split_apart, tmp_path):
    docs, split_settings = near_pair_split_apart
    off = DedupSettings(images={"enabled": False})
    kept, _ = deduplicate(docs, off)
    assert kept.num_rows == 9  # nothing removed: the copy is still there
    split = with_splits(kept.drop_columns(["cluster_id"]), split_settings)
    storage = Storage(str(tmp_path))
    with TableSink(storage, "dataset_splits/_all", split.schema, IOSettings(batch_rows=4)) as sink:
        sink.write(split)
    report = check_split_leakage(storage, "dataset_splits/_all", off, split_settings)
    assert not report.ok
    assert {r["id"] for r in report.image_pairs.to_pylist()} | {r["other_id"] for r in report.image_pairs.to_pylist()} \
        == {"p0", "copy"}
    # with image dedup on (the default), the copy is removed before splitting and the check passes
    kept, result = deduplicate(docs, DedupSettings())
    assert result.counts.removed_near_image == 1
    assert check(with_splits(kept.drop_columns(["cluster_id"]), split_settings)).ok
