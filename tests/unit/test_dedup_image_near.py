"""Near-duplicate images by perceptual hash: the band index finds exactly the pairs within the distance,
the dedup stage removes re-encoded copies by the keep policy and leaves text corpora as they were."""

import hashlib
import io
from math import comb

import imagehash
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from document_batches import documents_batch
from PIL import Image, ImageDraw

from platform_assets.dedup.deduplicator import NEAR_IMAGE, deduplicate
from platform_assets.dedup.image_near import (
    band_bounds,
    choose_key_bands,
    expected_cost_ns,
    image_phashes,
    near_duplicate_links,
    near_pairs,
)
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_store import AcceptedSignatures
from platform_assets.schema import DOCUMENTS_SCHEMA

BASE = 0xA5C3_0F96_3C5A_F00F  # 32 bits set, like every real phash


def flip(h: int, bits) -> int:
    for b in bits:
        h ^= 1 << b
    return h


def item(tag: str, phash: int | None, kind: str = "image") -> dict:
    return {"kind": kind, "mime": "image/png", "uri": f"file:///{tag}.png",
            "sha256": hashlib.sha256(tag.encode()).hexdigest(), "bytes": None, "phash": phash}


def images(specs, *, ages=None, quality=None, source="img") -> pa.Table:
    """specs: (id, caption, bytes tag, phash); a later age means a newer document."""
    n = len(specs)
    cols = {
        "id": [s[0] for s in specs], "source": [source] * n, "text": pa.array([s[1] for s in specs], pa.large_string()),
        "modality": ["image"] * n, "uri": [f"u/{s[0]}" for s in specs], "license": [None] * n, "meta": [None] * n,
        "ingested_at": pa.array(ages if ages is not None else list(range(n)), pa.timestamp("s", tz="UTC")),
        "media": [[item(s[2], s[3])] for s in specs],
    }
    schema = DOCUMENTS_SCHEMA
    if quality is not None:
        cols["quality"] = pa.array(quality, pa.float64())
        schema = schema.append(pa.field("quality", pa.float64()))
    return pa.table(cols, schema=schema)


def brute_force(h: np.ndarray, d: int) -> dict[tuple[int, int], int]:
    i, j = np.triu_indices(len(h), 1)
    dist = np.bitwise_count(h[i] ^ h[j])
    m = dist <= d
    return dict(zip(zip(i[m].tolist(), j[m].tolist(), strict=True), dist[m].tolist(), strict=True))


def as_dict(p) -> dict[tuple[int, int], int]:
    got = dict(zip(zip(p.left.tolist(), p.right.tolist(), strict=True), p.distance.tolist(), strict=True))
    assert len(got) == len(p.left), "a pair was reported twice"
    assert (p.left < p.right).all()
    return got


@pytest.mark.parametrize("d", range(17))
@pytest.mark.parametrize("key_bands", [1, 2, 3])
def test_bands_partition_the_64_bits(d, key_bands):
    bounds = band_bounds(d, key_bands)
    widths = [w for _, w in bounds]
    assert len(bounds) == d + key_bands and sum(widths) == 64 and max(widths) - min(widths) <= 1
    assert [s for s, _ in bounds] == list(np.cumsum([0, *widths[:-1]]))


def test_pairs_within_the_distance_are_found_and_beyond_it_not():
    # flips of 1..8 bits, one per copy, chosen to straddle band edges (13-bit bands at d=4: 0,13,26,39,52)
    copies = [flip(BASE, range(12, 12 + k)) for k in range(1, 9)]
    h = np.array([BASE, *copies], np.uint64)
    got = as_dict(near_pairs(h, 4))
    assert {(0, j): got[(0, j)] for j in range(1, 9) if (0, j) in got} == {(0, k): k for k in range(1, 5)}
    assert got == brute_force(h, 4)  # and the pairs among the copies (flip 1 vs flip 5: distance 4)


@pytest.mark.parametrize(("d", "key_bands"), [(0, 1), (1, 1), (3, 1), (4, 1), (4, 2), (4, 3), (6, 2), (10, 1),
                                              (10, 3), (16, 2)])
def test_band_index_recall_is_exact_against_brute_force(d, key_bands):
    rng = np.random.default_rng(d)
    h = rng.integers(0, 2**64, 3000, dtype=np.uint64, endpoint=False)
    planted = []
    for src in rng.integers(0, 3000, 500).tolist():  # near copies at 0..d+2 bits: inside and just outside
        k = int(rng.integers(0, d + 3))
        planted.append(flip(int(h[src]), rng.choice(64, k, replace=False).tolist()))
    h = np.concatenate([h, np.array(planted, np.uint64)])
    wide = brute_force(h, d + 2)
    expected = {k: v for k, v in wide.items() if v <= d}
    assert len(expected) >= 100 and len(wide) - len(expected) >= 100  # planted pairs on both sides of d
    found = near_pairs(h, d, key_bands)
    assert found.bands == d + key_bands and found.tables == comb(d + key_bands, key_bands)
    assert as_dict(found) == expected


def test_key_bands_follow_the_number_of_hashes():
    """One key band (d + 1 bands) for small sets; two at 1M hashes and d = 4, where one band's 13-bit
    keys would give 3.7e8 candidates against 3.1e6 (measured: 3.6 s against 1.2-1.6 s)."""
    assert choose_key_bands(10_000, 4) == 1 and choose_key_bands(1_000_000, 4) == 2
    assert choose_key_bands(10**9, 0) == 1  # equal hashes: one 64-bit key whatever n
    assert expected_cost_ns(1_000_000, 4, 2) < expected_cost_ns(1_000_000, 4, 1) / 2


def test_identical_hashes_collapse_and_nothing_is_enumerated_per_copy():
    """2,000 re-encodings with one phash: one value, so no pair at all is enumerated, and every copy
    links to the best one (a quadratic pass would enumerate 2 million pairs)."""
    n = 2000
    out = near_duplicate_links(np.full(n, BASE, np.uint64), np.arange(n)[::-1].copy(), 4)
    assert out.distinct == 1 and out.candidates == 0 and out.pairs == 0
    assert (out.target[:-1] == n - 1).all() and out.target[-1] == -1  # the last has the best priority
    assert (out.distance[:-1] == 0).all()


def test_no_chaining_beyond_the_distance():
    a = BASE
    b = flip(a, range(0, 4))  # 4 from a
    c = flip(b, range(30, 34))  # 4 from b, 8 from a
    out = near_duplicate_links(np.array([a, b, c], np.uint64), np.array([0, 1, 2]), 4)
    assert out.target.tolist() == [-1, 0, -1]  # c's only neighbour b was removed: c stays
    assert out.distance.tolist() == [-1, 4, -1]


def test_phashes_come_from_single_image_documents_only():
    batch = documents_batch(
        ["cap", "cap", "text", "two images", "pdf page", "no phash"],
        modalities=["image", "image", "text", "image", "pdf", "image"],
        media=[[item("a", 5)], [item("b", 2**64 - 1)], None, [item("c", 7), item("d", 8)], [item("p", 9, "page")],
               [item("e", None)]],
    )
    rows, ph = image_phashes(batch)
    assert rows.tolist() == [0, 1] and ph.tolist() == [5, 2**64 - 1]
    no_media = batch.drop_columns(["media"])
    assert len(image_phashes(no_media)[0]) == 0


def test_same_image_twice_is_removed_different_images_with_one_caption_are_kept():
    far = flip(BASE, range(0, 64, 2))  # 32 bits from BASE: another picture
    table = images([
        ("a", "A dog on the grass.", "dog.png", BASE),
        ("b", "Another caption of the same dog.", "dog-small.jpg", flip(BASE, [3, 40])),  # re-encoded
        ("c", "A dog on the grass.", "cat.png", far),  # same caption, other image
        ("d", "Yet another caption.", "dog.png", BASE),  # same bytes as a
    ])
    kept, result = deduplicate(table, DedupSettings())
    assert sorted(kept["id"].to_pylist()) == ["a", "c"]
    rules = dict(zip(result.decisions["id"].to_pylist(), result.decisions["rule"].to_pylist(), strict=True))
    assert rules == {"a": None, "b": NEAR_IMAGE, "c": None, "d": "exact_duplicate"}
    assert result.counts.removed_near_image == 1 and result.counts.removed_exact == 1
    assert result.counts.images == 4 and result.counts.image_pairs == 1


def test_exclusions_carry_rule_kept_id_and_similarity():
    table = images([("keep", "x", "k", BASE), ("two", "y", "t", flip(BASE, [1, 60])),
                    ("four", "z", "f", flip(BASE, [0, 13, 26, 39])), ("same", "w", "s", BASE)])
    _, result = deduplicate(table, DedupSettings())
    excl = {r["id"]: r for r in result.exclusions().to_pylist()}
    assert set(excl) == {"two", "four", "same"}
    for rid, dist in (("two", 2), ("four", 4), ("same", 0)):
        row = excl[rid]
        assert row["rule"] == "near_duplicate_image" and row["kept_id"] == "keep" and row["bytes"] is None
        assert row["similarity"] == 1 - dist / 64 and row["value"] == f"{1 - dist / 64:.4g}"
    dups = result.duplicates.to_pylist()
    assert {r["removed_id"] for r in dups} == {"two", "four", "same"} and {r["cluster_id"] for r in dups} == {"keep"}
    per_source = result.removed_per_source().to_pylist()
    assert per_source == [{"source": "img", "documents": 4, "removed_exact": 0, "removed_near": 0,
                           "removed_near_image": 3, "removed": 3, "removal_rate": 0.75}]
    assert result.cluster_size_histogram().to_pylist() == [{"cluster_size": 4, "clusters": 1}]


@pytest.mark.parametrize(("keep", "expected"), [("oldest", "a-old"), ("longest", "c-long"),
                                                 ("highest_quality", "b-best")])
def test_keep_policy_picks_the_image_kept(keep, expected):
    table = images([("a-old", "short", "1", BASE), ("b-best", "short.", "2", flip(BASE, [5])),
                    ("c-long", "the longest caption here", "3", flip(BASE, [9, 50]))],
                   ages=[100, 200, 300], quality=[0.1, 0.9, 0.5])
    kept, result = deduplicate(table, DedupSettings(keep=keep))
    assert kept["id"].to_pylist() == [expected]
    assert set(result.exclusions()["kept_id"].to_pylist()) == {expected}


def test_an_exact_copy_of_a_removed_image_follows_it_to_the_kept_one():
    # b is the best of {b, b2} (same bytes) and a near duplicate of the older a
    table = images([("a", "x", "a", BASE), ("b", "y", "b", flip(BASE, [2, 7])), ("b2", "z", "b", flip(BASE, [2, 7]))])
    _, result = deduplicate(table, DedupSettings())
    rows = {r["id"]: r for r in result.exclusions().to_pylist()}
    assert rows["b"]["rule"] == NEAR_IMAGE and rows["b2"]["rule"] == "exact_duplicate"
    assert rows["b"]["kept_id"] == rows["b2"]["kept_id"] == "a"
    assert rows["b2"]["similarity"] == rows["b"]["similarity"] == 1 - 2 / 64


def test_disabled_leaves_near_copies_and_max_distance_is_honoured():
    table = images([("a", "x", "a", BASE), ("b", "y", "b", flip(BASE, range(6)))])  # 6 bits apart
    assert deduplicate(table, DedupSettings(images={"enabled": False}))[0].num_rows == 2
    assert deduplicate(table, DedupSettings())[0].num_rows == 2  # 6 > 4
    kept, result = deduplicate(table, DedupSettings(images={"max_distance": 6}))
    assert kept["id"].to_pylist() == ["a"] and result.counts.image_bands == 7
    with pytest.raises(ValueError):
        DedupSettings(images={"max_distance": 17})


def test_text_only_batches_take_the_text_path():
    texts = ["one two three four five six seven", "One  two three four five six seven", "something else entirely"]
    batch = documents_batch(texts)
    on = deduplicate(pa.Table.from_batches([batch]), DedupSettings())[1]
    off = deduplicate(pa.Table.from_batches([batch]), DedupSettings(images={"enabled": False}))[1]
    assert on.decisions.equals(off.decisions) and on.duplicates.equals(off.duplicates)
    assert on.exclusions().equals(off.exclusions()) and on.counts.images == 0 and on.counts.image_bands == 0
    assert on.exclusions()["rule"].to_pylist() == ["exact_duplicate"]
    assert "phash" not in on.accepted.to_table(DedupSettings()).column_names  # the artifact as before
    assert "removed_near_image" not in on.removed_per_source().column_names
    no_media = pa.Table.from_batches([batch]).drop_columns(["media"])  # v1-shaped input
    assert deduplicate(no_media, DedupSettings())[1].decisions.equals(on.decisions)


def test_incremental_run_removes_near_copies_of_earlier_images(tmp_path):
    settings = DedupSettings(incremental=True)
    _, first = deduplicate(images([("old", "x", "o", BASE), ("other", "y", "p", flip(BASE, range(0, 64, 2)))]),
                           settings)
    pq.write_table(first.accepted.to_table(settings), tmp_path / "sig.parquet")
    table = pq.read_table(tmp_path / "sig.parquet")
    assert table["phash"].to_pylist() == [BASE, flip(BASE, range(0, 64, 2))]
    accepted = AcceptedSignatures.from_table(table, settings)
    # the new copy is older than the accepted one: it still loses, accepted documents stay accepted
    new = images([("new", "z", "n", flip(BASE, [1, 2, 3])), ("fresh", "w", "f", flip(BASE, range(1, 64, 2)))],
                 ages=[0, 0])
    kept, result = deduplicate(new, settings, accepted)
    assert kept["id"].to_pylist() == ["fresh"]
    (dup,) = result.duplicates.to_pylist()
    assert (dup["removed_id"], dup["kept_id"], dup["rule"], dup["kept_in_earlier_run"]) == ("new", "old", NEAR_IMAGE,
                                                                                           True)
    assert result.counts.removed_against_earlier_runs == 1
    assert result.accepted.phash_array().to_pylist()[-1] == flip(BASE, range(1, 64, 2))


def _png(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _scene(seed: int) -> Image.Image:
    """A 256 x 256 picture: a gradient and a few random shapes (structure phash can see)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:256, 0:256]
    angle = rng.uniform(0, np.pi)
    grad = ((np.cos(angle) * x + np.sin(angle) * y) / 362 * 200).astype(np.uint8)
    img = Image.fromarray(np.stack([grad, 255 - grad, grad // 2], axis=-1), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(8):
        x0, y0 = rng.integers(0, 200, 2)
        w, h = rng.integers(20, 90, 2)
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([int(x0), int(y0), int(x0 + w), int(y0 + h)], fill=fill)
        else:
            draw.rectangle([int(x0), int(y0), int(x0 + w), int(y0 + h)], fill=fill)
    return img


def _phash(data: bytes) -> int:
    return int(str(imagehash.phash(Image.open(io.BytesIO(data)))), 16)  # as ingest stores it


def test_a_resized_copy_of_a_real_image_is_removed():
    original = _scene(1)
    copies = {
        "original": _png(original),
        "resized": _png(original.resize((96, 96), Image.Resampling.LANCZOS), "JPEG", quality=80),
        "other": _png(_scene(2)),
    }
    ph = {k: _phash(v) for k, v in copies.items()}
    assert bin(ph["original"] ^ ph["resized"]).count("1") <= 4 < bin(ph["original"] ^ ph["other"]).count("1")
    specs = [(k, "a picture", k, ph[k]) for k in copies]
    table = images(specs)
    table = table.set_column(8, "media", pa.array(
        [[{**item(k, ph[k]), "sha256": hashlib.sha256(v).hexdigest(), "bytes": v}] for k, v in copies.items()],
        DOCUMENTS_SCHEMA.field("media").type))
    kept, result = deduplicate(table, DedupSettings())
    assert sorted(kept["id"].to_pylist()) == ["original", "other"]
    (row,) = result.exclusions().to_pylist()
    assert (row["id"], row["rule"], row["kept_id"]) == ("resized", NEAR_IMAGE, "original")
    assert row["similarity"] >= 1 - 4 / 64
