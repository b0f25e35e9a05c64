"""The blocking `no_exact_duplicates_remain` check keys media by their bytes, as dedup does: two
different images with one caption are two documents, the same image twice is a duplicate left."""

import pyarrow as pa

from platform_assets.contracts import DEFAULT_IO, IOSettings
from platform_assets.dedup.settings import DedupSettings
from platform_assets.defs.deduplicated_documents.checks import exact_duplicate_groups
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage


def _image(doc_id: str, sha: str, caption: str) -> dict:
    item = {f.name: None for f in DOCUMENTS_SCHEMA.field("media").type.value_type}
    item.update(kind="image", mime="image/png", uri=f"{doc_id}.png", sha256=sha, bytes=b"png")
    return {"id": doc_id, "source": "s", "text": caption, "modality": "image", "uri": f"{doc_id}.png",
            "license": None, "meta": None, "ingested_at": None, "media": [item]}


def _write(storage: Storage, rel: str, rows: list[dict]) -> None:
    with TableSink(storage, rel, DOCUMENTS_SCHEMA, DEFAULT_IO) as sink:
        sink.write(pa.Table.from_pylist(rows, schema=DOCUMENTS_SCHEMA))


def test_images_with_one_caption_are_not_duplicates_the_same_bytes_are(tmp_path):
    storage = Storage(str(tmp_path))
    _write(storage, "a", [_image("x", "aa" * 32, "Man in tuxedo."), _image("y", "bb" * 32, "Man in tuxedo.")])
    assert exact_duplicate_groups(storage, "a", DedupSettings(), DEFAULT_IO) == 0
    _write(storage, "b", [_image("x", "aa" * 32, "One caption."), _image("y", "aa" * 32, "Another caption.")])
    assert exact_duplicate_groups(storage, "b", DedupSettings(), DEFAULT_IO) == 1


def test_exact_duplicate_check_reads_in_io_batches(tmp_path, monkeypatch):
    from platform_assets.defs.deduplicated_documents import checks

    storage = Storage(str(tmp_path))
    _write(storage, "c", [_image(str(i), f"{i:02x}" * 32, f"Caption {i % 3}.") for i in range(7)]
           + [_image("dup", "00" * 32, "Caption 0.")])
    sizes, keys = [], checks.exact_keys

    def counted_keys(batch, settings):
        sizes.append(batch.num_rows)
        return keys(batch, settings)

    monkeypatch.setattr(checks, "exact_keys", counted_keys)
    assert exact_duplicate_groups(storage, "c", DedupSettings(), IOSettings(batch_rows=3)) == 1
    assert sizes == [3, 3, 2]  # never the whole column at once


def test_exact_groups_are_counted_as_arrow_counts_them_from_sliced_keys():
    """`key_words` reads a key array's own 16-byte values, an offset slice's too; equal neighbours of
    the sorted words count what len - count_distinct counts."""
    import numpy as np
    import pyarrow.compute as pc

    from platform_assets.dedup.exact import key_words

    rng = np.random.default_rng(3)
    pool = rng.integers(0, 256, size=(50, 16), dtype=np.uint8)
    rows = pool[rng.integers(0, 50, size=400)]  # 400 keys of 50 values: many repeats
    keys = pa.array([r.tobytes() for r in rows], pa.binary(16)).slice(37, 300)
    words = key_words(keys)
    assert [w.tobytes() for w in words] == keys.to_pylist()
    ordered = np.sort(words.view([("high", "<u8"), ("low", "<u8")]).ravel())
    assert int((ordered[1:] == ordered[:-1]).sum()) == len(keys) - pc.count_distinct(keys).as_py() > 0
