"""Shard writers, the index and verification: each format readable by its own ecosystem's reader, all
three identical, byte-identical rebuilds, and any flipped byte reported."""

import base64
import io
import json
import shutil
import tarfile
from pathlib import Path

import datasets
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import webdataset

from platform_assets.packing.formats.flat import INLINE_MAX_BYTES
from platform_assets.packing.settings import SHARD_FORMATS
from platform_assets.packing.shard_index import (
    FORMATS,
    ShardSamples,
    ShardSetError,
    load_index,
    read_shard_set,
    verify_shards,
)
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter, document_digests, gather_samples
from platform_assets.storage import Storage

SEQ_LEN = 32
PAD = 50256


def _header(has_loss_mask: bool, vocab_size: int = 50257, seq_len: int = SEQ_LEN) -> ShardSetHeader:
    return ShardSetHeader(seq_len=seq_len, vocab_size=vocab_size, pad_id=PAD if vocab_size > PAD else 0,
                          eos_id=PAD, bos_id=None, has_loss_mask=has_loss_mask,
                          tokenizer={"name": "gpt2", "sha256": "ab" * 32},
                          packing={"strategy": "best_fit_decreasing", "seq_len": seq_len})


def _samples(rng: np.random.Generator, n: int, has_mask: bool, seq_len: int = SEQ_LEN, vocab: int = 50000,
             first_doc: int = 0) -> tuple[ShardSamples, list[str]]:
    """n samples of 1-3 random segments each, built position by position (independently of the writers)."""
    tokens = np.full((n, seq_len), PAD, np.int64)
    mask = np.zeros((n, seq_len), np.uint8)
    seqlens, seqptr, docs = [], [0], []
    doc = first_doc
    for i in range(n):
        pos = 0
        for _ in range(int(rng.integers(1, 4))):
            if pos >= seq_len:
                break
            length = int(rng.integers(1, seq_len - pos + 1))
            tokens[i, pos : pos + length] = rng.integers(0, vocab, length)
            mask[i, pos : pos + length] = rng.integers(0, 2, length)
            seqlens.append(length)
            docs.append(f"doc-{doc // 2:05d}")  # consecutive segments share documents
            doc += 1
            pos += length
        seqptr.append(len(seqlens))
    return ShardSamples(tokens, np.array(seqlens, np.int32), np.array(seqptr, np.int64),
                        mask if has_mask else None), docs


def _write(root: Path, runs: dict[tuple[str, str], list[tuple[ShardSamples, list[str]]]], has_mask: bool,
           samples_per_shard: int = 5, formats=FORMATS, vocab_size: int = 50257, seq_len: int = SEQ_LEN) -> dict:
    storage = Storage(str(root))
    with storage.staged_dir("packed") as staged:
        writer = ShardSetWriter(staged, list(formats), _header(has_mask, vocab_size, seq_len), samples_per_shard)
        for (split, source), parts in runs.items():
            group = writer.group(split, source)
            for run, docs in parts:
                group.add(run, pa.array(docs, pa.string()))
        writer.close()
    return staged.manifest


def _expected(parts: list[tuple[ShardSamples, list[str]]]) -> ShardSamples:
    runs = [p for p, _ in parts]
    return ShardSamples(
        np.concatenate([r.tokens for r in runs]),
        np.concatenate([r.seqlens for r in runs]),
        np.concatenate([[0]] + [r.seqptr[1:] + off for r, off in
                                zip(runs, np.cumsum([0] + [len(r.seqlens) for r in runs[:-1]]), strict=True)]),
        None if runs[0].loss_mask is None else np.concatenate([r.loss_mask for r in runs]),
    )


def _assert_same(got: ShardSamples, want: ShardSamples) -> None:
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.seqlens, want.seqlens)
    np.testing.assert_array_equal(got.seqptr, want.seqptr)
    if want.loss_mask is None:
        assert got.loss_mask is None
    else:
        np.testing.assert_array_equal(got.loss_mask, want.loss_mask)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Two sets with loss masks, fed in uneven runs: train/web 12 samples (shards of 5, 5, 2), validation/code 3."""
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("shards")
    runs = {
        ("validation", "code"): [_samples(rng, 3, True, first_doc=100)],
        ("train", "web"): [_samples(rng, 4, True), _samples(rng, 1, True, first_doc=20),
                           _samples(rng, 7, True, first_doc=30)],
    }
    manifest = _write(root, runs, has_mask=True)
    return root / "packed", runs, manifest


def test_gather_samples_lays_pieces_end_to_end_and_pads():
    values = np.arange(100, 200, dtype=np.int32)
    mask_values = (np.arange(100) % 3 == 0).astype(np.uint8)
    # sample 0: values[10:15] then values[50:52]; sample 1: values[0:8]
    run = gather_samples(10, 7, np.dtype("<u2"), np.array([0, 2, 3]), np.array([10, 50, 0]), np.array([5, 2, 8]),
                         values, mask_values)
    assert run.tokens.dtype == np.uint16
    assert run.tokens.tolist() == [[110, 111, 112, 113, 114, 150, 151, 7, 7, 7],
                                   [100, 101, 102, 103, 104, 105, 106, 107, 7, 7]]
    assert run.seqlens.tolist() == [5, 2, 8] and run.seqptr.tolist() == [0, 2, 3]
    assert run.loss_mask.tolist() == [[0, 0, 1, 0, 0, 0, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 1, 0, 0, 0]]
    assert run.token_count == 15 and run.loss_tokens == 5


def test_every_format_reads_back_the_same_samples(written):
    assert FORMATS == SHARD_FORMATS  # the readers know every format the settings can ask for
    root, runs, _ = written
    for fmt in FORMATS:
        got = {(e["split"], e["source"]): [] for e in load_index(str(root / fmt))["sets"]}
        for entry, _, samples in read_shard_set(str(root / fmt)):
            got[(entry["split"], entry["source"])].append(samples)
        for key, parts in runs.items():
            _assert_same(_expected([(s, None) for s in got[key]]), _expected(parts))


def test_index_counts_and_layout(written):
    root, runs, _ = written
    index = load_index(str(root / "flat"))
    assert (index["seq_len"], index["token_dtype"], index["has_loss_mask"], index["pad_id"]) == (SEQ_LEN, "uint16",
                                                                                                True, PAD)
    assert [(e["split"], e["source"]) for e in index["sets"]] == [("train", "web"), ("validation", "code")]
    train = index["sets"][0]
    assert [s["name"] for s in train["shards"]] == [f"train/web/shard-0000{i}" for i in range(3)]
    assert [s["samples"] for s in train["shards"]] == [5, 5, 2]
    want = _expected(runs[("train", "web")])
    assert train["samples"] == 12 and train["tokens"] == want.token_count
    assert sum(s["loss_tokens"] for s in train["shards"]) == want.loss_tokens
    docs = [d for _, ds in runs[("train", "web")] for d in ds]
    assert train["documents"] == len(set(docs))
    first = train["shards"][0]
    first_docs = docs[: int(want.seqptr[5])]
    assert first["documents"] == len(set(first_docs))
    assert first["tokens"] == int(want.seqlens[: want.seqptr[5]].sum())
    assert set(first["files"]) == {"tokens", "seqlens", "seqptr", "mask"}
    assert first["files"]["tokens"]["bytes"] == 5 * SEQ_LEN * 2 and first["files"]["seqptr"]["bytes"] == 6 * 8
    assert first["bytes"] == sum(f["bytes"] for f in first["files"].values())
    totals = index["totals"]
    assert totals["samples"] == 15 and totals["pieces"] == len(docs) + len(runs[("validation", "code")][0][1])
    assert totals["efficiency"] == round(totals["tokens"] / (15 * SEQ_LEN), 6)
    for fmt in ("parquet", "webdataset"):
        other = load_index(str(root / fmt))
        assert set(other["sets"][0]["shards"][0]["files"]) == {"data"}
        assert _shard_counts(other) == _shard_counts(index)
    # the one serialisation: sorted keys, indent 1
    raw = (root / "flat" / "index.json").read_text()
    assert raw == json.dumps(json.loads(raw), indent=1, sort_keys=True)


def _shape(declared: str, samples: int, seq_len: int) -> tuple[int, ...]:
    """A declared shape ("[samples, seq_len]", "[samples + 1]", "[segments]") as numbers (-1: segments)."""
    dims = {"samples": samples, "seq_len": seq_len, "samples + 1": samples + 1, "segments": -1}
    return tuple(dims[d.strip()] for d in declared.strip("[]").split(","))


def _decode_by_layout(fmt_dir: Path, index: dict, shard: dict) -> dict[str, list[np.ndarray]]:
    """A shard decoded from what its index.json declares, as a reader that never saw this code would:
    numpy for raw files, pyarrow for Parquet, tarfile + numpy.load for tars. Column -> its arrays: one
    per sample, or for `flat` the one array of the shard's file."""
    layout, n, seq_len = index["layout"], shard["samples"], index["seq_len"]
    assert set(layout) == {"container", "file_name", "files", "columns"}
    assert set(layout["files"]) == set(shard["files"])
    columns = layout["columns"]
    out: dict[str, list[np.ndarray]] = {}
    if index["format"] == "flat":
        for col in columns:
            raw = (fmt_dir / shard["files"][col["name"]]["path"]).read_bytes()
            assert "little-endian" in col["encoding"] or col["dtype"] == "uint8"
            dtype = np.dtype(col["dtype"]).newbyteorder("<")
            out[col["name"]] = [np.frombuffer(raw, dtype).reshape(_shape(col["shape"], n, seq_len))]
        return out
    if index["format"] == "parquet":
        table = pq.read_table(fmt_dir / shard["files"]["data"]["path"])
        assert table.schema.names == [c["name"] for c in columns]
        for col in columns:
            assert table.schema.field(col["name"]).type == pa.list_(pa.from_numpy_dtype(np.dtype(col["dtype"])))
            out[col["name"]] = [np.array(v, col["dtype"]) for v in table[col["name"]].to_pylist()]
    else:
        shard_number = shard["name"].rsplit("-", 1)[1]
        member = {(i, c["name"]): f"{shard_number}_{i:07d}.{c['name']}.npy" for i in range(n) for c in columns}
        with tarfile.open(fmt_dir / shard["files"]["data"]["path"]) as tar:
            assert [m.name for m in tar.getmembers()] == list(member.values())
            for col in columns:
                name = col["name"]
                out[name] = [np.load(io.BytesIO(tar.extractfile(member[i, name]).read())) for i in range(n)]
                assert {a.dtype for a in out[name]} == {np.dtype(col["dtype"]).newbyteorder("<")}
    for col in columns:  # a sample's own arrays: [seq_len], or [segments] (-1: any length)
        shape = _shape(col["shape"], n, seq_len)
        assert all(a.shape == shape or (shape == (-1,) and a.ndim == 1) for a in out[col["name"]])
    return out


def test_index_json_layout_alone_decodes_every_format(written):
    """Each index.json declares its columns and encodings well enough to decode a shard without this code."""
    root, runs, _ = written
    want = _expected(runs[("train", "web")])
    for fmt in FORMATS:
        index = load_index(str(root / fmt))
        samples = {"tokens": [], "seqlens": [], "mask": []}
        for shard in index["sets"][0]["shards"]:
            cols = _decode_by_layout(root / fmt, index, shard)
            if fmt == "flat":
                (tokens,), (seqlens,), (seqptr,), (mask,) = (cols[c] for c in ("tokens", "seqlens", "seqptr", "mask"))
                samples["tokens"] += list(tokens)
                samples["seqlens"] += [seqlens[seqptr[i] : seqptr[i + 1]] for i in range(shard["samples"])]
                samples["mask"] += list(mask)
            else:
                for ours, theirs in (("tokens", "input_ids"), ("seqlens", "seqlens"), ("mask", "loss_mask")):
                    samples[ours] += cols[theirs]
        assert len(samples["tokens"]) == want.samples
        for i in range(want.samples):
            assert samples["tokens"][i].tolist() == want.tokens[i].tolist(), (fmt, i)
            assert samples["seqlens"][i].tolist() == want.sample_seqlens(i).tolist(), (fmt, i)
            assert samples["mask"][i].tolist() == want.loss_mask[i].tolist(), (fmt, i)


def test_any_minor_of_the_format_version_is_read_another_major_refused(written, tmp_path):
    root, _, _ = written
    for fmt in FORMATS:
        index = load_index(str(root / fmt))
        assert (index["format_version"], index["format_minor"]) == (1, 2 if fmt == "flat" else 1)
        assert "layout" in index
        copy = tmp_path / fmt
        shutil.copytree(root / fmt, copy)
        # 1.0: the same files, an index without format_minor and layout; a later minor adds a key
        v10 = {k: v for k, v in index.items() if k not in ("format_minor", "layout")}
        for edited in (v10, index | {"format_minor": 9, "added_later": {"x": 1}}):
            (copy / "index.json").write_text(json.dumps(edited))
            for (_, _, old), (_, _, new) in zip(read_shard_set(str(copy)), read_shard_set(str(root / fmt)),
                                                strict=True):
                _assert_same(old, new)
        for version in (2, True):
            (copy / "index.json").write_text(json.dumps(index | {"format_version": version}))
            with pytest.raises(ShardSetError, match=rf"{copy}/index.json: {fmt} format_version {version}, this "
                                                    r"reader reads 1 \(any format_minor\)"):
                load_index(str(copy))
        (copy / "index.json").write_text(json.dumps(index | {"format_minor": -1}))
        with pytest.raises(ShardSetError, match="format_minor must be an integer >= 0, got -1"):
            load_index(str(copy))


def _shard_counts(index: dict) -> list[dict]:
    """Every shard's counts: the same in every format (only files and bytes differ)."""
    return [{k: v for k, v in s.items() if k not in ("files", "bytes")} for e in index["sets"] for s in e["shards"]]


def test_ecosystem_readers_agree(written, tmp_path):
    """numpy.memmap, datasets, DuckDB and webdataset, each on its own format, see the same token sequences."""
    root, runs, _ = written
    want = _expected(runs[("train", "web")])
    index = load_index(str(root / "flat"))
    shards = index["sets"][0]["shards"]

    memmap_tokens, memmap_seqlens = [], []
    for s in shards:
        f = s["files"]
        memmap_tokens.append(np.memmap(root / "flat" / f["tokens"]["path"], dtype=index["token_dtype"], mode="r",
                                       shape=(s["samples"], index["seq_len"])))
        lens = np.memmap(root / "flat" / f["seqlens"]["path"], dtype="<i4", mode="r")
        ptr = np.memmap(root / "flat" / f["seqptr"]["path"], dtype="<i8", mode="r")
        memmap_seqlens += [lens[ptr[i] : ptr[i + 1]].tolist() for i in range(s["samples"])]
    memmap_tokens = np.concatenate(memmap_tokens)

    parquet_shards = load_index(str(root / "parquet"))["sets"][0]["shards"]
    files = [str(root / "parquet" / s["files"]["data"]["path"]) for s in parquet_shards]
    hf = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    duck = duckdb.sql(
        "SELECT input_ids, seqlens, loss_mask FROM read_parquet($files, file_row_number=true, filename=true) "
        "ORDER BY filename, file_row_number", params={"files": files}).fetchall()

    tars = [str(root / "webdataset" / s["files"]["data"]["path"])
            for s in load_index(str(root / "webdataset"))["sets"][0]["shards"]]
    wds = list(webdataset.WebDataset(tars, shardshuffle=False).decode())

    assert len(hf) == len(duck) == len(wds) == len(memmap_tokens) == want.samples
    for i in range(want.samples):
        tokens = want.tokens[i].tolist()
        seqlens = want.sample_seqlens(i).tolist()
        mask = want.loss_mask[i].tolist()
        assert memmap_tokens[i].tolist() == tokens and memmap_seqlens[i] == seqlens
        assert hf[i]["input_ids"] == tokens and hf[i]["seqlens"] == seqlens and hf[i]["loss_mask"] == mask
        assert list(duck[i][0]) == tokens and list(duck[i][1]) == seqlens and list(duck[i][2]) == mask
        sample = wds[i]
        assert sample["__key__"] == f"{i // 5:05d}_{i % 5:07d}"
        assert sample["input_ids.npy"].dtype == np.uint16
        assert sample["input_ids.npy"].tolist() == tokens and sample["seqlens.npy"].tolist() == seqlens
        assert sample["loss_mask.npy"].tolist() == mask


def test_shards_over_one_row_group_stream_in_runs(tmp_path):
    """A shard of 1300 samples is written as runs of 1024 + 276: Parquet row groups follow the runs and
    the flat seqptr continues across them."""
    rng = np.random.default_rng(1)
    runs = {("train", "web"): [_samples(rng, 700, True, seq_len=8), _samples(rng, 700, True, seq_len=8)]}
    _write(tmp_path, runs, has_mask=True, samples_per_shard=1300, seq_len=8)
    want = _expected(runs[("train", "web")])
    for fmt in FORMATS:
        got = [samples for _, _, samples in read_shard_set(str(tmp_path / "packed" / fmt))]
        assert [g.samples for g in got] == [1300, 100]
        _assert_same(_expected([(g, None) for g in got]), want)
    first = pq.ParquetFile(tmp_path / "packed" / "parquet" / "train" / "web" / "shard-00000.parquet")
    assert [first.metadata.row_group(i).num_rows for i in range(first.num_row_groups)] == [1024, 276]
    assert first.schema_arrow.names == ["input_ids", "seqlens", "loss_mask"]
    assert first.schema_arrow.field("input_ids").type.value_type == pa.int32()
    assert first.schema_arrow.field("loss_mask").type.value_type == pa.uint8()
    assert first.metadata.row_group(0).column(0).compression == "ZSTD"


def _reference_tar(samples: ShardSamples, shard: int) -> bytes:
    """The same shard written member by member with the standard library's tarfile and numpy.save."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples.samples):
            arrays = [("input_ids", samples.tokens[i].astype(np.uint16)),
                      ("seqlens", samples.sample_seqlens(i).astype(np.int32)), ("loss_mask", samples.loss_mask[i])]
            for field, array in arrays:
                data = io.BytesIO()
                np.save(data, array)
                info = tarfile.TarInfo(f"{shard:05d}_{i:07d}.{field}.npy")
                info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = (
                    data.tell(), 0, 0o644, 0, 0, "", "")
                tar.addfile(info, io.BytesIO(data.getvalue()))
    return buf.getvalue()


def test_tar_is_posix_with_fixed_metadata_byte_for_byte_as_tarfile_writes_it(written):
    root, runs, _ = written
    path = root / "webdataset" / "validation" / "code" / "shard-00000.tar"
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    assert [m.name for m in members[:3]] == ["00000_0000000.input_ids.npy", "00000_0000000.seqlens.npy",
                                             "00000_0000000.loss_mask.npy"]
    assert len(members) == 9
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}
    raw = path.read_bytes()
    assert raw[257:263] == b"ustar\x00"  # POSIX ustar magic in the first header
    assert raw == _reference_tar(_expected(runs[("validation", "code")]), 0)
    train = _expected(runs[("train", "web")])
    second = ShardSamples(train.tokens[5:10], train.seqlens[train.seqptr[5] : train.seqptr[10]],
                          train.seqptr[5:11] - train.seqptr[5], train.loss_mask[5:10])
    assert (root / "webdataset" / "train" / "web" / "shard-00001.tar").read_bytes() == _reference_tar(second, 1)


def test_rebuild_is_byte_identical_whatever_the_run_sizes(tmp_path, written):
    _, runs, manifest = written
    # the same samples fed as one run per set, groups opened in the other order
    joined = {key: [(_expected(parts), [d for _, ds in parts for d in ds])] for key, parts in reversed(runs.items())}
    assert _write(tmp_path, joined, has_mask=True) == manifest


def test_flipped_byte_is_caught_in_every_file(written, tmp_path):
    root, _, _ = written
    for fmt in FORMATS:
        assert verify_shards(str(root / fmt)) == []
        files = sorted(p for p in (root / fmt).rglob("*") if p.is_file())
        assert len(files) == {"flat": 4 * 4 + 1, "parquet": 4 + 1, "webdataset": 4 + 1}[fmt]
        for path in files:
            copy = tmp_path / f"{fmt}-{path.name}"
            shutil.copytree(root, copy)
            target = copy / fmt / path.relative_to(root / fmt)
            data = bytearray(target.read_bytes())
            data[len(data) // 2] ^= 0x01
            target.write_bytes(bytes(data))
            problems = verify_shards(str(copy / fmt))
            rel = str(path.relative_to(root / fmt))
            assert any(rel in p for p in problems), (rel, problems)
            shutil.rmtree(copy)


def test_missing_and_unlisted_files_are_reported(written, tmp_path):
    root, _, _ = written
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    (copy / "parquet" / "train" / "web" / "shard-00001.parquet").unlink()
    (copy / "parquet" / "train" / "web" / "stray.parquet").write_bytes(b"x")
    problems = verify_shards(str(copy / "parquet"))
    assert "train/web/shard-00001.parquet: missing" in problems
    assert "train/web/stray.parquet: not listed in the index" in problems
    assert verify_shards(str(tmp_path / "nowhere"))[0].endswith("no index (not a packed shard format directory)")


def test_flat_copies_small_segment_tables_into_the_index_and_verify_checks_them(tmp_path):
    rng = np.random.default_rng(3)
    _write(tmp_path, {("train", "web"): [_samples(rng, 75, False)]}, has_mask=False, samples_per_shard=70,
           formats=["flat"])
    fmt_dir = tmp_path / "packed" / "flat"
    index = load_index(str(fmt_dir))
    big, small = index["sets"][0]["shards"]  # 70 samples: a seqptr of 568 bytes; 5 samples: 48 bytes
    for shard in (big, small):
        assert "inline" not in shard["files"]["tokens"]
        for role in ("seqlens", "seqptr"):
            info = shard["files"][role]
            raw = (fmt_dir / info["path"]).read_bytes()
            assert ("inline" in info) == (len(raw) <= INLINE_MAX_BYTES), (shard["name"], role, len(raw))
            if "inline" in info:
                assert base64.b64decode(info["inline"]) == raw
    assert "inline" not in big["files"]["seqptr"] and "inline" in small["files"]["seqptr"]
    assert verify_shards(str(fmt_dir)) == []

    entry = small["files"]["seqlens"]
    for bad, problem in ((base64.b64encode(b"\1" * entry["bytes"]).decode(), "inline copy in index.json differs"),
                         ("%%%", "`inline` is not base64")):
        entry["inline"] = bad
        (fmt_dir / "index.json").write_text(json.dumps(index))
        problems = verify_shards(str(fmt_dir))
        assert any(entry["path"] in p and problem in p for p in problems), problems


def test_vocab_over_65536_uses_uint32(tmp_path):
    rng = np.random.default_rng(3)
    runs = {("train", "web"): [_samples(rng, 3, False, vocab=200_000)]}
    _write(tmp_path, runs, has_mask=False, vocab_size=200_000)
    for fmt in FORMATS:
        index = load_index(str(tmp_path / "packed" / fmt))
        assert index["token_dtype"] == "uint32" and not index["has_loss_mask"]
        (_, _, got), = read_shard_set(str(tmp_path / "packed" / fmt))
        np.testing.assert_array_equal(got.tokens, runs[("train", "web")][0][0].tokens)
        assert got.loss_mask is None
    assert not list((tmp_path / "packed" / "flat").rglob("*.mask.bin"))


def test_bad_samples_and_names_are_refused(tmp_path):
    storage = Storage(str(tmp_path))
    rng = np.random.default_rng(0)
    run, docs = _samples(rng, 2, True)
    with pytest.raises(ShardSetError, match="cannot name a shard directory"):
        with storage.staged_dir("x") as staged:
            ShardSetWriter(staged, ["flat"], _header(True), 4).group("train", "../etc")
    with pytest.raises(ShardSetError, match="has_loss_mask is True"):
        with storage.staged_dir("x") as staged:
            ShardSetWriter(staged, ["flat"], _header(True), 4).group("train", "web").add(
                ShardSamples(run.tokens, run.seqlens, run.seqptr, None), pa.array(docs))
    over = run.seqlens.copy()
    over[0] = SEQ_LEN + 1
    with pytest.raises(ShardSetError, match="more than seq_len"):
        ShardSamples(run.tokens, over, run.seqptr, None).validate()
    with pytest.raises(ShardSetError, match="formats must be"):
        with storage.staged_dir("x") as staged:
            ShardSetWriter(staged, ["tfrecord"], _header(True), 4)
    assert not (tmp_path / "x").exists()  # a failed write commits nothing


def test_a_sets_documents_are_counted_across_shards_on_digests(tmp_path):
    """A document whose pieces are in several shards is one of the set's documents; the set keeps a
    16-byte digest per shard's distinct id, and equal ids, only they, have equal digests."""
    run, docs = _samples(np.random.default_rng(5), 12, False)
    docs = [f"doc-{i % 4}" for i in range(len(docs))]  # every document in every shard
    _write(tmp_path, {("train", "web"): [(run, docs)]}, False, samples_per_shard=3, formats=["flat"])
    train = load_index(str(tmp_path / "packed" / "flat"))["sets"][0]
    assert [s["documents"] for s in train["shards"]] == [4, 4, 4, 4] and train["documents"] == 4

    ids = pa.array([f"{i:032x}" for i in range(5000)] + ["x", "é", "", "x"])
    digests = document_digests(ids)
    assert digests.dtype.itemsize == 16 and len(digests) == len(ids)
    assert np.unique(digests).size == pc.count_distinct(ids).as_py() == 5003
    assert digests[-1] == digests[-4] and digests[-2] != digests[-3]
    assert np.array_equal(document_digests(ids.slice(10, 5)), digests[10:15])


def test_a_shards_document_keys_wait_on_disk_in_the_spill_directory(tmp_path, monkeypatch):
    """With a spill directory (a packing run), the digests of the open shard's segments and of the set's
    documents wait in hash partitions there, not in memory (a shard of short documents holds millions
    of segments); the counts are the same as counting the ids, and nothing is left behind."""
    from platform_assets.packing import spilled_keys

    monkeypatch.setattr(spilled_keys, "KEYS_BUDGET_BYTES", 64)  # 4 digests a partition: many files
    monkeypatch.setattr(spilled_keys, "FLUSH_BYTES", 16)  # every add goes to its files at once
    spill = tmp_path / "spill"
    spill.mkdir()
    files_when_counted = []  # the spill directory each time a store counts its keys (a shard's close)
    count = spilled_keys.SpilledKeys.distinct

    def distinct(self):
        files_when_counted.append(sorted(p.name for p in spill.iterdir()))
        return count(self)

    monkeypatch.setattr(spilled_keys.SpilledKeys, "distinct", distinct)
    run, docs = _samples(np.random.default_rng(11), 24, False)
    docs = [f"doc-{(i * 7) % 13}" for i in range(len(docs))]  # documents spread over several shards
    storage = Storage(str(tmp_path))
    with storage.staged_dir("packed") as staged:
        writer = ShardSetWriter(staged, ["flat"], _header(False), 5, spill)
        writer.group("train", "web", documents=13).add(run, pa.array(docs, pa.string()))
        writer.close()
    assert len(files_when_counted) == 5 + 1  # each of the 5 shards, then the set
    for names in files_when_counted[:-1]:
        assert sum(n.startswith("shard-documents-") for n in names) > 1
        assert any(n.startswith("documents-") for n in names)
    assert list(spill.iterdir()) == []
    train = load_index(str(tmp_path / "packed" / "flat"))["sets"][0]
    want = [len(set(docs[run.seqptr[k] : run.seqptr[min(k + 5, run.samples)]])) for k in range(0, run.samples, 5)]
    assert [s["documents"] for s in train["shards"]] == want and train["documents"] == len(set(docs)) == 13
