"""The tokenizer and tokenize stages over stored outputs.

`build_tokenizer`: pass 1 over the dataset_splits output reads id, split and text, to size the
train split and pick the round-trip sample; pass 2 (training only) streams the chosen train
texts into the trainer. The tokenizer directory is staged and committed atomically.

`tokenize_outputs`: streams the split output through `DocumentEncoder` and writes one part
sequence per (split, source): `<split>/<source>/part-NNNNN.parquet`, rows in input order, the
chunks of a document consecutive. The packing stage reads one set at a time
(`read_batches(storage, f"{rel}/train/web")`) and a reader of the whole directory gets the sets in
(split, source) order. Same input, tokenizer and settings -> byte-identical parts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import closing, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.contracts import DEFAULT_IO, EXCLUSIONS_FILE, IOSettings, StageResult
from platform_assets.heap import cap_malloc_arenas, mmap_threshold_fixed
from platform_assets.parquet_parts import TableSink, TableSource, output_schema
from platform_assets.schema import MEDIA_MODALITIES
from platform_assets.splits.assignment import id_unit_interval
from platform_assets.storage import Storage
from platform_assets.tokenize.encode import DocumentEncoder, EncodeStats
from platform_assets.tokenize.exclusion_rules import EXCLUSIONS_SCHEMA
from platform_assets.tokenize.lance_documents import LanceDocumentSets, set_dir
from platform_assets.tokenize.set_writers import SetWriters
from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
from platform_assets.tokenize.tokenizer_artifact import TokenizerArtifact
from platform_assets.tokenize.tokenizer_build import (
    TokenizerSanity,
    load_pretrained_with_template,
    make_artifact,
    sanity_report,
    saved_files,
    train_tokenizer,
)
from platform_assets.tokenize.tokenizer_runtime import serial_tokenizers

TRAIN_SPLIT = "train"
# Salt of the id hash that picks training and sample documents. Not the split seed: with the same
# hash, the smallest hashes would all be train documents (u < 0.98 is train).
SAMPLE_SEED = 0x746F6B  # "tok"


# -- the tokenizer ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TokenizerBuildResult(StageResult):
    source: str
    vocab_size: int
    special_tokens: dict[str, dict[str, Any]]
    """role -> {token, id}."""
    tokenizer_sha256: str
    train_documents: int
    train_bytes: int
    sanity: TokenizerSanity
    """Round trip, bytes per token, special-token problems (the asset checks)."""

    @property
    def metadata(self) -> dict[str, Any]:
        return {"source": self.source, "vocab_size": self.vocab_size,
                "bytes_per_token": round(self.sanity.bytes_per_token, 4), "tokenizer_sha256": self.tokenizer_sha256,
                "train_documents": self.train_documents, "train_bytes": self.train_bytes}


class _SmallestHashes:
    """The (hash, id, text) with the smallest hashes, at most `n` of them and `budget` characters in
    all (at least one): a deterministic sample that does not depend on part order, batching or where a
    source's documents sit. Kept: every document seen with a hash below `bound` (the smallest hash
    left out so far), trimmed to that prefix; a document left out can never return, nor can any with a
    larger hash (the prefix stops at or before it), so the set is the one a single pass over all
    documents in hash order would take."""

    def __init__(self, n: int, max_chars: int, budget: int):
        self.n, self.max_chars, self.budget = n, max_chars, budget
        self.items: list[tuple[float, str, str]] = []
        self.bound = np.inf

    def add(self, u: np.ndarray, ids: pa.Array, text: pa.Array) -> None:
        if self.n == 0:
            return
        cand = np.flatnonzero(u < self.bound)
        cand = cand[np.argsort(u[cand], kind="stable")]
        if len(cand) > self.n:  # beyond the n smallest of this batch: never in the sample
            self.bound = min(self.bound, float(u[cand[self.n]]))
            cand = cand[: self.n]
        if not len(cand):
            return
        take = pa.array(cand, pa.int64())
        texts = text.take(take).to_pylist()
        new = [(float(u[i]), d, (t or "")[: self.max_chars])
               for i, d, t in zip(cand.tolist(), ids.take(take).to_pylist(), texts, strict=True)]
        merged = sorted(self.items + new)
        kept, chars = 0, 0
        for _, _, t in merged[: self.n]:
            if kept and chars + len(t) > self.budget:
                break
            kept, chars = kept + 1, chars + len(t)
        if kept < len(merged):
            self.bound = min(self.bound, merged[kept][0])
        self.items = merged[:kept]

    def pairs(self) -> list[tuple[str, str]]:
        return [(d, t) for _, d, t in self.items]


def text_documents(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch without its media documents: images, pages and clips go to `media_shards` (their
    captions and transcripts stay with their media there). A text-only batch is returned as it is."""
    if "modality" not in batch.schema.names:
        return batch
    media = pc.is_in(batch.column("modality"), value_set=pa.array(sorted(MEDIA_MODALITIES), pa.string()))
    if not pc.any(media).as_py():
        return batch.drop_columns(["modality"])
    return batch.filter(pc.invert(media)).drop_columns(["modality"])


def _with_modality(source: TableSource, columns: list[str]) -> list[str]:
    return [*columns, "modality"] if source.schema is not None and "modality" in source.schema.names else columns


def _documents(storage: Storage, rel: str,
               io: IOSettings) -> Iterator[tuple[np.ndarray, pa.Array, pa.Array, pa.Array]]:
    """(id hash, id, split, text) per record batch of the split output (text documents only), in
    batches of `io.work_bytes` of text: both passes keep nothing of a batch but its hashes and sizes
    (and the sample's few texts; the trainer keeps its word counts), so nothing needs whole
    `io.batch_bytes` batches. They were read at the default 64 MiB whatever the config said: the
    tokenizer asset's peak grew 440 -> 486 MB from 1x to 4x of pipeline_scaling's 32 MB base, all of
    it in the first pass. The sample and the training threshold do not depend on the batching
    (_SmallestHashes, _train_threshold), nor do BPE's word counts."""
    source = TableSource(storage, rel, io.model_copy(update={"batch_bytes": io.work_bytes}))
    for batch in source.batches(_with_modality(source, ["id", "split", "text"])):
        batch = text_documents(batch)
        ids = batch.column("id")
        yield id_unit_interval(ids, SAMPLE_SEED), ids, batch.column("split"), batch.column("text")


def _train_threshold(u: np.ndarray, sizes: np.ndarray, settings: TokenizerSettings) -> float:
    """The largest id hash of the training sample: train documents in hash order until a cap."""
    order = np.argsort(u, kind="stable")
    take = len(order)
    if settings.max_train_documents is not None:
        take = min(take, settings.max_train_documents)
    if settings.max_train_bytes is not None:
        within = int(np.searchsorted(np.cumsum(sizes[order]), settings.max_train_bytes, side="right"))
        take = min(take, max(within, 1))  # at least one document, however large
    return float(u[order[take - 1]]) if take < len(order) else np.inf


def build_tokenizer(
    storage: Storage,
    splits_rel: str,
    out_rel: str,
    settings: TokenizerSettings,
    io: IOSettings = DEFAULT_IO,
    document_encoder: str = "auto",
) -> TokenizerBuildResult:
    """Train (or load) the tokenizer, check it on a sample of the split output, and commit its
    directory at `out_rel`. Raises ValueError on bad input (no documents, no train split, a path
    that cannot be loaded, a tokenizer without an eos token)."""
    if output_schema(storage, splits_rel) is None:
        raise ValueError(f"no documents under {splits_rel}: the tokenizer is built from the dataset_splits output")
    sample = _SmallestHashes(settings.roundtrip_sample, settings.roundtrip_max_chars,
                             settings.roundtrip_sample_chars)
    train_u: list[np.ndarray] = []
    train_sizes: list[np.ndarray] = []
    for u, ids, split, text in _documents(storage, splits_rel, io):
        sample.add(u, ids, text)
        if settings.source == "train":
            is_train = pc.equal(split, TRAIN_SPLIT).fill_null(False).to_numpy(zero_copy_only=False)
            train_u.append(u[is_train])
            train_sizes.append(pc.binary_length(text).fill_null(0).to_numpy(zero_copy_only=False)[is_train])

    info: dict[str, Any] = {}
    train_docs = train_bytes = 0
    if settings.source == "train":
        all_u = np.concatenate(train_u) if train_u else np.zeros(0)
        if not len(all_u):
            raise ValueError(f"no {TRAIN_SPLIT!r} documents under {splits_rel} to train the tokenizer on")
        sizes = np.concatenate(train_sizes).astype(np.int64)
        threshold = _train_threshold(all_u, sizes, settings)
        chosen = all_u <= threshold
        train_docs, train_bytes = int(chosen.sum()), int(sizes[chosen].sum())

        def texts() -> Iterator[list[str]]:
            for u, _, split, text in _documents(storage, splits_rel, io):
                pick = pc.and_(pc.equal(split, TRAIN_SPLIT).fill_null(False), pa.array(u <= threshold))
                chunk = text.filter(pick).to_pylist()
                if chunk:
                    yield chunk

        tokenizer = train_tokenizer(texts(), settings)
        declared: dict[str, str] = {}
        own_template: str | None = None
        info = {"algorithm": settings.algorithm, "vocab_size_requested": settings.vocab_size,
                "min_frequency": settings.min_frequency, "train_documents": train_docs, "train_bytes": train_bytes}
    else:
        tokenizer, declared, own_template = load_pretrained_with_template(settings.path or "")
    artifact = make_artifact(tokenizer, settings, declared, info, own_template)
    files = saved_files(artifact)
    sanity = sanity_report(artifact, sample.pairs(), document_encoder)
    with storage.staged_dir(out_rel) as staged:
        for name, data in sorted(files.items()):
            staged.write_bytes(name, data)
    return TokenizerBuildResult(
        rel=out_rel, files=staged.manifest, rows=0,
        source=settings.source, vocab_size=artifact.vocab_size, special_tokens=artifact.to_json()["special_tokens"],
        tokenizer_sha256=artifact.tokenizer_sha256, train_documents=train_docs, train_bytes=train_bytes,
        sanity=sanity,
    )


# -- the tokenized documents ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TokenizeStageResult(StageResult):
    documents: int
    tokens: int
    loss_tokens: int
    sets: list[dict[str, Any]]
    """Per (split, source), sorted: split, source, dir (relative to the output), rows, documents,
    tokens, loss_tokens."""
    stats: EncodeStats
    """Overlong, truncated and chunked documents, dropped chunks, exclusions per rule."""
    excluded: int
    tokenizer_sha256: str
    encoder: str = "tokenizers"
    """What encoded documents' text: "tiktoken", or "tokenizers" with why not tiktoken
    (settings.TokenizeSettings.encoder)."""

    @property
    def metadata(self) -> dict[str, Any]:
        s = self.stats
        return {"documents": self.documents, "tokens": self.tokens, "loss_tokens": self.loss_tokens,
                "chat_documents": s.chat_documents, "overlong_documents": s.overlong_documents,
                "truncated_tokens": s.truncated_tokens, "chunked_documents": s.chunked_documents,
                "excluded": self.excluded, "tokenizer_sha256": self.tokenizer_sha256, "encoder": self.encoder}


def _split_by_set(batch: pa.RecordBatch) -> list[tuple[tuple[str, str], pa.RecordBatch]]:
    """The rows of each (split, source) in `batch`, in their order; sets sorted."""
    if batch.num_rows == 0:
        return []
    # "\x00" never occurs in a split or source name (config.SOURCE_NAME_PATTERN)
    key = pc.binary_join_element_wise(batch.column("split"), batch.column("source"), "\x00")
    names = sorted(pc.unique(key).to_pylist())
    sets = [(tuple(k.split("\x00")), k) for k in names]
    if len(sets) == 1:
        return [(sets[0][0], batch)]
    return [(k, batch.filter(pc.equal(key, name))) for k, name in sets]


def _write_sets(batch: pa.RecordBatch, per_set: dict[tuple[str, str], dict[str, int]], writers: SetWriters,
                lance_sets: LanceDocumentSets | None) -> None:
    """Each set's rows of an encoded batch to its writers, counted."""
    for key, part in _split_by_set(batch):
        counts = per_set[key]
        counts["rows"] += part.num_rows
        # all chunks of a document are in the batch that read it: distinct per batch adds up
        counts["documents"] += pc.count_distinct(part.column("id")).as_py()
        counts["tokens"] += pc.sum(part.column("num_tokens")).as_py() or 0
        counts["loss_tokens"] += pc.sum(part.column("loss_tokens")).as_py() or 0
        writers.add(key, part)
        if lance_sets is not None:
            lance_sets.add(key, part)


def tokenize_outputs(
    storage: Storage,
    splits_rel: str,
    tokenizer_rel: str,
    out_rel: str,
    settings: TokenizeSettings,
    io: IOSettings = DEFAULT_IO,
) -> TokenizeStageResult:
    """Encode every document of the split output with the tokenizer at `tokenizer_rel` and commit
    the token rows (per (split, source) parts) and `_exclusions.parquet` at `out_rel`."""
    in_schema = output_schema(storage, splits_rel)
    if in_schema is None:
        raise ValueError(f"no documents under {splits_rel}: tokenize reads the dataset_splits output")
    missing = [c for c in ("id", "source", "split", "text") if c not in in_schema.names]
    if missing:
        raise ValueError(f"{splits_rel} has no {', '.join(missing)} column (columns: {in_schema.names})")
    columns = ["id", "source", "split", "text", *(["meta"] if "meta" in in_schema.names else [])]
    artifact = TokenizerArtifact.load(storage, tokenizer_rel)
    encoder = DocumentEncoder(artifact, settings, threads=io.worker_count())
    rows_per_batch = io.batch_rows
    stats = EncodeStats()
    per_set: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(
        ("rows", "documents", "tokens", "loss_tokens"), 0))
    excluded: list[pa.RecordBatch] = []
    cap_malloc_arenas(settings.malloc_arena_max)  # before the encoder's threads start (they start on submit)
    with mmap_threshold_fixed(settings.malloc_mmap_threshold), serial_tokenizers(), \
            TableSink(storage, out_rel, encoder.schema, io) as sink, closing(
            SetWriters(sink, rows_per_batch, min(io.batch_bytes, settings.row_group_bytes))) as writers, (
            LanceDocumentSets(sink.staged, encoder.schema) if settings.lance else nullcontext()) as lance_sets:
        # a failure below aborts the Lance writes (their threads end, no partial dataset stays)
        source = TableSource(storage, splits_rel, io)
        for batch in source.tracked_batches("tokenize", _with_modality(source, columns)):
            batch = text_documents(batch)
            if not batch.num_rows:
                continue
            # a slice's rows at a time (encode.DocumentEncoder.encode_parts): each is in the writers
            # before the next is made, so the batch's token rows are never all in memory
            for encoded in encoder.encode_parts(batch):
                stats.merge(encoded.stats)
                if encoded.exclusions.num_rows:
                    excluded.append(encoded.exclusions)
                _write_sets(encoded.batch, per_set, writers, lance_sets)
                del encoded  # not kept while the next slice is finished
            del batch  # nor the input's text while the next batch is read
        writers.flush()
        lance_dirs = lance_sets.close() if lance_sets is not None else []
        exclusions = pa.Table.from_batches(excluded, schema=EXCLUSIONS_SCHEMA)
        sink.write_side(EXCLUSIONS_FILE, exclusions)
    sets = [{"split": k[0], "source": k[1], "dir": f"{k[0]}/{k[1]}", **v,
             **({"lance": set_dir(*k)} if set_dir(*k) in lance_dirs else {})} for k, v in sorted(per_set.items())]
    return TokenizeStageResult(
        rel=out_rel, files=sink.files, schema=encoder.schema, exclusions=EXCLUSIONS_FILE,
        rows=sum(s["rows"] for s in sets), documents=sum(s["documents"] for s in sets),
        tokens=sum(s["tokens"] for s in sets), loss_tokens=sum(s["loss_tokens"] for s in sets), sets=sets,
        stats=stats, excluded=exclusions.num_rows, tokenizer_sha256=artifact.tokenizer_sha256,
        encoder=encoder.document_encoder,
    )
