"""The packing stage over stored outputs: `tokenized_documents` in, one packed shard set out
(SHARD_FORMAT.md): shards in every configured format with their indexes, `provenance.parquet`, and
`_exclusions.parquet` (documents dropped by overlong="filter").

Documents are packed per (split, source): the loader mixes sources by weight, so a sequence never
holds two sources or two splits. Documents of a set keep their input order (row order of the parts),
which is what every strategy's tie-breaking refers to, so the output is byte-identical for the same
input and settings.

- Offline strategies (best_fit_decreasing, ...) need every length of a set before placing anything:
  a survey pass reads the small columns, then the token lists of a set are read into one flat array
  -- 4 bytes per token of the sets being packed (int32 ids; +1 byte with loss masks) -- and each run
  of 1024 samples is gathered from it with numpy. Sets are read together while their tokens fit
  `max_tokens_in_memory` (a set larger than that is read alone). Measured on the real corpus (199M
  GPT-2 tokens, 34k documents, all three formats): 18 CPU-s, peak RSS 1.7 GB, of which 0.8 GB are the
  token arrays and most of the rest Arrow's allocator keeping pages from reading ~45 MB row groups.
- `streaming_best_fit` reads the input once; memory is the tokens of the documents still in open
  sequences (at most max_open_sequences x seq_len per set: 8 MiB at the defaults) plus one record
  batch (same corpus: 21 CPU-s, peak RSS 1.2 GB, nearly all of it the reader's).

Conservation is checked before anything is committed, and a violation raises: every (document,
chunk) token range is covered exactly once by the pieces, tokens in = tokens in the shards + tokens
dropped, and loss tokens likewise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from platform_assets.packing.provenance import provenance_rows, write_provenance
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_index import ROWS_PER_ROW_GROUP, token_dtype
from platform_assets.packing.shard_writers import ShardGroupWriter, ShardSetHeader, ShardSetWriter, gather_samples
from platform_assets.packing.strategies import Packing, StreamingBestFit, pack, verify_packing
from platform_assets.parquet_parts import output_schema, part_files, read_batches, write_table
from platform_assets.storage import Storage

EXCLUSIONS_FILE = "_exclusions.parquet"
OVERLONG_RULE = "overlong"
STREAMING_STRATEGY = "streaming_best_fit"
# Tokens of all sets read in one pass of an offline strategy: 256 Mi tokens = 1 GiB of int32 ids
# (+256 MiB of masks). A larger set still gets a pass of its own.
DEFAULT_MAX_TOKENS_IN_MEMORY = 256 * 2**20
REQUIRED_COLUMNS = ("id", "split", "source", "chunk", "input_ids", "num_tokens", "loss_tokens")
TOKENIZER_KEYS = ("vocab_size", "pad_id", "eos_id", "bos_id", "name", "sha256")

# Documents packing dropped. The columns of the cleaning and dedup exclusions (id, rule, value,
# bytes) so one DuckDB query covers every stage's table, plus where the chunk was. `bytes` (the text's
# UTF-8 size elsewhere) is null: tokenized_documents no longer carries the text; `tokens` says the size.
EXCLUSIONS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("value", pa.string(), nullable=True),  # "5000 > 2048": the chunk's tokens against seq_len
        pa.field("bytes", pa.int64(), nullable=True),
        pa.field("split", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("chunk", pa.int32(), nullable=False),
        pa.field("tokens", pa.int64(), nullable=False),
    ],
    metadata={b"platform.schema": b"platform.exclusions/1"},
)


class ConservationError(RuntimeError):
    """Packing lost, duplicated or invented tokens: a bug, never a property of the input."""


class TokenizedInputError(ValueError):
    """The tokenized_documents input breaks its contract (the message names the document)."""


@dataclass(frozen=True)
class SetStats:
    """One (split, source); `documents` are input rows, i.e. (document, chunk) pairs."""

    split: str
    source: str
    seq_len: int
    documents: int
    pieces: int
    sequences: int
    tokens: int  # packed (non-padding) tokens
    loss_tokens: int
    documents_split: int  # in more than one piece
    documents_dropped: int  # overlong="filter"
    tokens_dropped: int

    @property
    def efficiency(self) -> float:
        """Non-padding fraction of the sequences' positions."""
        return self.tokens / (self.sequences * self.seq_len) if self.sequences else 0.0

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"efficiency": round(self.efficiency, 6)}


@dataclass(frozen=True)
class PackStageResult:
    sets: tuple[SetStats, ...]  # sorted by (split, source)
    tokens_in: int
    has_loss_mask: bool
    token_dtype: str
    pad_id: int
    formats: tuple[str, ...]
    files: dict[str, dict[str, object]]  # the output's manifest: name -> bytes, sha256

    @property
    def totals(self) -> SetStats:
        s = self.sets
        seq_len = s[0].seq_len if s else 0
        return SetStats("*", "*", seq_len, *(sum(getattr(x, f) for x in s) for f in (
            "documents", "pieces", "sequences", "tokens", "loss_tokens", "documents_split",
            "documents_dropped", "tokens_dropped")))


# -- the survey pass --------------------------------------------------------------------------------
@dataclass
class _Set:
    split: str
    source: str
    lengths: np.ndarray  # int64 num_tokens per document (input row) of the set, in input order
    loss_tokens: np.ndarray  # int64
    ids: pa.ChunkedArray | None = None  # offline strategies only
    chunks: np.ndarray | None = None

    @property
    def name(self) -> str:
        return f"{self.split}/{self.source}"

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


@dataclass
class _Survey:
    sets: list[_Set]  # sorted by (split, source)
    row_set: np.ndarray  # int32 per input row: index into sets
    has_loss_mask: bool


def _no_nulls(batch: pa.RecordBatch, columns: list[str], rows_before: int) -> None:
    for c in columns:
        col = batch.column(c)
        if col.null_count:
            raise TokenizedInputError(f"tokenized_documents row {rows_before + _first_null(col)}: {c} is null")


def _survey(storage: Storage, rel: str, batch_rows: int, keep_ids: bool) -> _Survey:
    """One pass over the small columns: the sets, each row's set, lengths (and ids for offline packing)."""
    columns = ["split", "source", "num_tokens", "loss_tokens"] + (["id", "chunk"] if keep_ids else [])
    keys: dict[tuple[str, str], int] = {}
    row_sets, lengths, loss, ids, chunks = [], [], [], [], []
    rows = 0
    for batch in read_batches(storage, rel, columns, batch_rows):
        _no_nulls(batch, columns, rows)
        split, source = batch.column("split").cast(pa.string()), batch.column("source").cast(pa.string())
        encoded = pc.dictionary_encode(pc.binary_join_element_wise(split, source, "\x00"))
        local = np.empty(len(encoded.dictionary), np.int32)
        for i, key in enumerate(encoded.dictionary.to_pylist()):
            local[i] = keys.setdefault(tuple(key.split("\x00")), len(keys))
        row_sets.append(local[encoded.indices.to_numpy()])
        n_tok = batch.column("num_tokens").to_numpy().astype(np.int64)
        n_loss = batch.column("loss_tokens").to_numpy().astype(np.int64)
        bad = np.flatnonzero((n_tok < 1) | (n_loss < 0) | (n_loss > n_tok))
        if bad.size:
            i = int(bad[0])
            raise TokenizedInputError(f"tokenized_documents row {rows + i}: num_tokens {n_tok[i]}, loss_tokens "
                                      f"{n_loss[i]} (need num_tokens >= 1, 0 <= loss_tokens <= num_tokens)")
        lengths.append(n_tok)
        loss.append(n_loss)
        if keep_ids:
            ids.append(batch.column("id").cast(pa.string()))
            chunks.append(batch.column("chunk").to_numpy().astype(np.int32))
        rows += batch.num_rows
    if not rows:
        raise TokenizedInputError(f"no tokenized documents under {rel}")
    order = sorted(keys)
    remap = np.empty(len(keys), np.int32)
    for new, key in enumerate(order):
        remap[keys[key]] = new
    row_set = remap[np.concatenate(row_sets)]
    all_len, all_loss = np.concatenate(lengths), np.concatenate(loss)
    all_ids = pa.chunked_array(ids, pa.string()) if keep_ids else None
    all_chunks = np.concatenate(chunks) if keep_ids else None
    sets = []
    for i, (split, source) in enumerate(order):
        rows_i = np.flatnonzero(row_set == i)
        s = _Set(split, source, all_len[rows_i], all_loss[rows_i])
        if keep_ids:
            s.ids = all_ids.take(pa.array(rows_i))
            s.chunks = all_chunks[rows_i]
        sets.append(s)
    return _Survey(sets, row_set, bool(np.any(all_loss != all_len)))


# -- token lists -> flat arrays ---------------------------------------------------------------------
def _first_null(array: pa.Array) -> int:
    return int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])


def _flatten(
    input_ids: pa.Array,
    loss_mask: pa.Array | None,
    lengths: np.ndarray,
    loss_tokens: np.ndarray,
    vocab_size: int,
    describe: Callable[[int], str],
) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows' tokens (int32) and masks (uint8; a null mask is all ones) end to end, checked against the
    rows' num_tokens and loss_tokens and the vocabulary. `describe(i)` names row i in an error."""
    if input_ids.null_count:
        raise TokenizedInputError(f"{describe(_first_null(input_ids))}: input_ids is null")
    lens = pc.list_value_length(input_ids).to_numpy().astype(np.int64)
    bad = np.flatnonzero(lens != lengths)
    if bad.size:
        i = int(bad[0])
        raise TokenizedInputError(f"{describe(i)}: {lens[i]} input_ids but num_tokens {lengths[i]}")
    values = pc.list_flatten(input_ids).to_numpy()
    if values.dtype.kind not in "iu":
        raise TokenizedInputError(f"input_ids must be lists of integers, got {input_ids.type}")
    starts = np.cumsum(lens) - lens
    if values.size and (int(values.min()) < 0 or int(values.max()) >= vocab_size):
        pos = int(np.argmax((values < 0) | (values >= vocab_size)))
        i = int(np.searchsorted(starts, pos, side="right") - 1)
        raise TokenizedInputError(f"{describe(i)}: token id {int(values[pos])} outside the vocabulary "
                                  f"(vocab_size {vocab_size})")
    values = values.astype(np.int32, copy=False)
    if loss_mask is None:
        return values, None
    mask = np.ones(len(values), np.uint8)
    valid = loss_mask.is_valid().to_numpy(zero_copy_only=False)
    if valid.any():
        given = loss_mask.filter(pa.array(valid))
        given_lens = pc.list_value_length(given).to_numpy().astype(np.int64)
        bad = np.flatnonzero(given_lens != lens[valid])
        if bad.size:
            i = int(np.flatnonzero(valid)[bad[0]])
            raise TokenizedInputError(f"{describe(i)}: loss_mask has {given_lens[bad[0]]} entries, input_ids {lens[i]}")
        within = np.arange(int(given_lens.sum()), dtype=np.int64)
        dst = np.repeat(starts[valid] - (np.cumsum(given_lens) - given_lens), given_lens) + within
        given_values = pc.list_flatten(given).to_numpy()
        if given_values.size and (given_values.min() < 0 or given_values.max() > 1):
            raise TokenizedInputError(f"loss_mask values must be 0 or 1 ({describe(0)} and its batch)")
        mask[dst] = given_values
    sums = np.add.reduceat(mask, starts, dtype=np.int64) if starts.size else np.zeros(0, np.int64)
    bad = np.flatnonzero(sums != loss_tokens)
    if bad.size:
        i = int(bad[0])
        raise TokenizedInputError(f"{describe(i)}: loss_mask has {sums[i]} ones but loss_tokens {loss_tokens[i]}")
    return values, mask


# -- emitting sequences -----------------------------------------------------------------------------
@dataclass
class _Emitter:
    """Writes runs of a set's sequences to the shard writer and collects provenance."""

    writer: ShardGroupWriter
    header: ShardSetHeader
    samples_per_shard: int
    sequences: int = 0
    provenance: list[pa.Table] = field(default_factory=list)

    def emit(self, seq_ptr: np.ndarray, piece_src: np.ndarray, piece_len: np.ndarray, piece_start: np.ndarray,
             values: np.ndarray, mask_values: np.ndarray | None, ids: pa.Array, chunks: np.ndarray) -> None:
        """Sequences j (pieces seq_ptr[j]:seq_ptr[j+1]); piece p is values[piece_src[p]:][:piece_len[p]]."""
        h = self.header
        for a in range(0, len(seq_ptr) - 1, ROWS_PER_ROW_GROUP):
            b = min(a + ROWS_PER_ROW_GROUP, len(seq_ptr) - 1)
            p0, p1 = int(seq_ptr[a]), int(seq_ptr[b])
            run = gather_samples(h.seq_len, h.pad_id, h.token_dtype, seq_ptr[a : b + 1] - p0, piece_src[p0:p1],
                                 piece_len[p0:p1], values, mask_values)
            self.writer.add(run, ids.slice(p0, p1 - p0))
        self.provenance.append(provenance_rows(
            self.writer.split, self.writer.source, self.samples_per_shard, self.sequences,
            np.asarray(seq_ptr, np.int64), ids, chunks, piece_start, piece_len))
        self.sequences += len(seq_ptr) - 1


def _exclusion_rows(s: _Set, ids: list[str], chunks: list[int], lengths: list[int], seq_len: int) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.string()),
        "rule": pa.array([OVERLONG_RULE] * n, pa.string()),
        "value": pa.array([f"{t} > {seq_len}" for t in lengths], pa.string()),
        "bytes": pa.nulls(n, pa.int64()),
        "split": pa.array([s.split] * n, pa.string()),
        "source": pa.array([s.source] * n, pa.string()),
        "chunk": pa.array(chunks, pa.int32()),
        "tokens": pa.array(lengths, pa.int64()),
    }, schema=EXCLUSIONS_SCHEMA)


def _stats(s: _Set, packing: Packing, loss_tokens: int) -> SetStats:
    return SetStats(
        s.split, s.source, packing.seq_len, len(s.lengths), len(packing.piece_len), packing.n_sequences,
        packing.tokens, loss_tokens, packing.documents_split, len(packing.dropped),
        int(s.lengths[packing.dropped].sum()))


def _verify(s: _Set, packing: Packing) -> None:
    try:
        verify_packing(packing, s.lengths)
    except ValueError as e:
        raise ConservationError(f"{s.name}: {e}") from e


# -- offline strategies -----------------------------------------------------------------------------
def _plan_passes(sets: list[_Set], max_tokens: int) -> list[list[int]]:
    """Consecutive sets whose tokens fit `max_tokens` together (a larger set is a pass by itself)."""
    passes: list[list[int]] = []
    held = 0
    for i, s in enumerate(sets):
        if passes and held + s.tokens <= max_tokens:
            passes[-1].append(i)
            held += s.tokens
        else:
            passes.append([i])
            held = s.tokens
    return passes


@dataclass
class _Held:
    """A set's tokens in memory: document d is values[starts[d] : starts[d] + lengths[d]]."""

    values: np.ndarray  # int32
    masks: np.ndarray | None  # uint8, when the shard set has loss masks
    starts: np.ndarray  # int64
    next_doc: int = 0  # documents filled so far (they arrive in input order)


def _parts(storage: Storage, rel: str) -> list[tuple[str, int]]:
    """(path relative to the storage root, rows) of every part, in the order read_batches reads them."""
    base = len(storage.path("")) + 1
    out = []
    for path in part_files(storage, rel):
        with storage.fs.open_input_file(path) as f:
            out.append((path[base:], pq.ParquetFile(f).metadata.num_rows))
    return out


def _read_sets(storage: Storage, rel: str, survey: _Survey, members: list[int], batch_rows: int,
               vocab_size: int) -> dict[int, _Held]:
    """The tokens (and masks) of the sets `members`. Parts holding none of their rows are not read:
    tokenized_documents writes one directory of parts per set, so a pass reads its own sets only."""
    has_mask = survey.has_loss_mask
    held = {}
    for i in members:
        s = survey.sets[i]
        held[i] = _Held(np.empty(s.tokens, np.int32), np.empty(s.tokens, np.uint8) if has_mask else None,
                        np.cumsum(s.lengths) - s.lengths)
    columns = ["input_ids"] + (["loss_mask"] if has_mask else [])
    row = 0
    for part, part_rows in _parts(storage, rel):
        if not np.isin(survey.row_set[row : row + part_rows], members).any():
            row += part_rows
            continue
        for batch in read_batches(storage, part, columns, batch_rows):
            in_batch = survey.row_set[row : row + batch.num_rows]
            for i in members:
                rows = np.flatnonzero(in_batch == i)
                if not rows.size:
                    continue
                s, h = survey.sets[i], held[i]
                d0, d1 = h.next_doc, h.next_doc + rows.size
                take = pa.array(rows)
                flat, flat_mask = _flatten(batch.column("input_ids").take(take),
                                           batch.column("loss_mask").take(take) if has_mask else None,
                                           s.lengths[d0:d1], s.loss_tokens[d0:d1], vocab_size,
                                           lambda j, s=s, d0=d0: _describe(s, d0 + j))
                t0 = int(h.starts[d0])
                h.values[t0 : t0 + flat.size] = flat
                if h.masks is not None:
                    h.masks[t0 : t0 + flat.size] = flat_mask
                h.next_doc = d1
            row += batch.num_rows
    if row != len(survey.row_set):
        raise TokenizedInputError(f"{rel} changed while being packed: {row} rows now, {len(survey.row_set)} before")
    return held


def _describe(s: _Set, doc: int) -> str:
    if s.ids is not None:
        return f"document {s.ids[doc].as_py()} chunk {int(s.chunks[doc])} ({s.name})"
    return f"{s.name} document #{doc}"


_Packed = tuple[list[SetStats], list[pa.Table], list[pa.Table]]  # stats, provenance, exclusions per set


def _pack_offline(storage: Storage, rel: str, survey: _Survey, settings: PackingSettings, header: ShardSetHeader,
                  writer: ShardSetWriter, batch_rows: int, max_tokens: int) -> _Packed:
    stats, provenance, exclusions = [], [], []
    for members in _plan_passes(survey.sets, max_tokens):
        held = _read_sets(storage, rel, survey, members, batch_rows, header.vocab_size)
        for i in members:
            s = survey.sets[i]
            h = held.pop(i)
            packing = pack(s.lengths, settings.seq_len, settings.strategy, settings.overlong, settings.window,
                           settings.max_open_sequences)
            _verify(s, packing)
            emitter = _Emitter(writer.group(s.split, s.source), header, settings.samples_per_shard)
            piece_ids = s.ids.take(pa.array(packing.piece_doc)).combine_chunks() if len(packing.piece_doc) else (
                pa.array([], pa.string()))
            emitter.emit(packing.seq_ptr, h.starts[packing.piece_doc] + packing.piece_start, packing.piece_len,
                         packing.piece_start, h.values, h.masks, piece_ids, s.chunks[packing.piece_doc])
            provenance.extend(emitter.provenance)
            d = packing.dropped
            exclusions.append(_exclusion_rows(s, s.ids.take(pa.array(d)).to_pylist() if d.size else [],
                                              s.chunks[d].tolist(), s.lengths[d].tolist(), settings.seq_len))
            stats.append(_stats(s, packing, int(s.loss_tokens.sum() - s.loss_tokens[d].sum())))
    return stats, provenance, exclusions


# -- the streaming strategy -------------------------------------------------------------------------
@dataclass
class _OpenDoc:
    id: str
    chunk: int
    tokens: np.ndarray
    mask: np.ndarray | None
    remaining: int


@dataclass
class _StreamSet:
    s: _Set
    packer: StreamingBestFit
    emitter: _Emitter
    docs: dict[int, _OpenDoc] = field(default_factory=dict)  # documents with tokens not yet emitted
    next_doc: int = 0
    dropped_seen: int = 0
    # The layout emitted so far, for the conservation check at the end: 32 B per piece, like the
    # provenance rows (the set's tokens are never held, only these).
    counts: list[np.ndarray] = field(default_factory=list)  # per emitted run: pieces per sequence
    pieces: list[np.ndarray] = field(default_factory=list)  # per emitted run: [n, 3] (doc, start, len)
    excluded: list[_OpenDoc] = field(default_factory=list)

    def emit(self, closed: list[list[tuple[int, int, int]]]) -> None:
        """Gather the closed sequences' tokens from the open documents, write them, free finished ones."""
        for a in range(0, len(closed), ROWS_PER_ROW_GROUP):
            part = closed[a : a + ROWS_PER_ROW_GROUP]
            counts = np.fromiter(map(len, part), np.int64, len(part))
            n = int(counts.sum())
            flat = np.fromiter(chain.from_iterable(chain.from_iterable(part)), np.int64, 3 * n).reshape(n, 3)
            doc, start, length = flat[:, 0], flat[:, 1], flat[:, 2]
            used = np.unique(doc)
            open_docs = [self.docs[int(d)] for d in used]
            values = np.concatenate([o.tokens for o in open_docs])
            masks = None if open_docs[0].mask is None else np.concatenate([o.mask for o in open_docs])
            doc_len = np.fromiter((o.tokens.size for o in open_docs), np.int64, len(open_docs))
            doc_start = np.cumsum(doc_len) - doc_len
            at = np.searchsorted(used, doc)
            seq_ptr = np.concatenate(([0], np.cumsum(counts)))
            ids = pa.array([open_docs[k].id for k in at.tolist()], pa.string())
            chunks = np.fromiter((open_docs[k].chunk for k in at.tolist()), np.int32, n)
            self.emitter.emit(seq_ptr, doc_start[at] + start, length, start, values, masks, ids, chunks)
            self.counts.append(counts)
            self.pieces.append(flat)
            for d, ln in zip(doc.tolist(), length.tolist(), strict=True):
                o = self.docs[d]
                o.remaining -= ln
                if o.remaining == 0:
                    del self.docs[d]

    def take_dropped(self) -> None:
        for d in self.packer.dropped[self.dropped_seen :]:
            self.excluded.append(self.docs.pop(d))
        self.dropped_seen = len(self.packer.dropped)

    def packing(self) -> Packing:
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        flat = np.concatenate(self.pieces) if self.pieces else np.zeros((0, 3), np.int64)
        return Packing(self.packer.seq_len, np.concatenate(([0], np.cumsum(counts))), flat[:, 0], flat[:, 1],
                       flat[:, 2], np.asarray(self.packer.dropped, np.int64))


def _pack_streaming(storage: Storage, rel: str, survey: _Survey, settings: PackingSettings, header: ShardSetHeader,
                    writer: ShardSetWriter, batch_rows: int) -> _Packed:
    has_mask = survey.has_loss_mask
    states = [
        _StreamSet(s, StreamingBestFit(settings.seq_len, settings.max_open_sequences, settings.overlong),
                   _Emitter(writer.group(s.split, s.source), header, settings.samples_per_shard))
        for s in survey.sets
    ]
    columns = ["id", "chunk", "input_ids"] + (["loss_mask"] if has_mask else [])
    row = 0
    for batch in read_batches(storage, rel, columns, batch_rows):
        in_batch = survey.row_set[row : row + batch.num_rows]
        for i in np.unique(in_batch).tolist():
            st = states[i]
            rows = np.flatnonzero(in_batch == i)
            take = pa.array(rows)
            ids = batch.column("id").take(take).cast(pa.string()).to_pylist()
            chunks = batch.column("chunk").take(take).to_numpy().astype(np.int32).tolist()
            lengths = st.s.lengths[st.next_doc : st.next_doc + rows.size]
            loss_tokens = st.s.loss_tokens[st.next_doc : st.next_doc + rows.size]

            def describe(j, ids=ids, chunks=chunks, st=st):
                return f"document {ids[j]} chunk {chunks[j]} ({st.s.name})"

            flat, flat_mask = _flatten(batch.column("input_ids").take(take),
                                       batch.column("loss_mask").take(take) if has_mask else None, lengths,
                                       loss_tokens, header.vocab_size, describe)
            starts = np.cumsum(lengths) - lengths
            for j, (a, ln) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
                # copies: a view would keep the whole batch alive while the document waits in the packer
                st.docs[st.next_doc + j] = _OpenDoc(
                    ids[j], chunks[j], flat[a : a + ln].astype(np.int32),
                    None if flat_mask is None else flat_mask[a : a + ln].copy(), ln)
            closed = st.packer.add(lengths, st.next_doc)
            st.take_dropped()
            st.emit(closed)
            st.next_doc += rows.size
        row += batch.num_rows
    if row != len(survey.row_set):
        raise TokenizedInputError(f"{rel} changed while being packed: {row} rows now, {len(survey.row_set)} before")
    stats, provenance, exclusions = [], [], []
    for st in states:
        st.emit(st.packer.finish())
        if st.docs:
            raise ConservationError(f"{st.s.name}: {len(st.docs)} document(s) still hold unpacked tokens")
        packing = st.packing()
        _verify(st.s, packing)
        provenance.extend(st.emitter.provenance)
        ex = st.excluded
        exclusions.append(_exclusion_rows(st.s, [o.id for o in ex], [o.chunk for o in ex],
                                          [o.tokens.size for o in ex], settings.seq_len))
        d = packing.dropped
        stats.append(_stats(st.s, packing, int(st.s.loss_tokens.sum() - st.s.loss_tokens[d].sum())))
    return stats, provenance, exclusions


# -- the stage --------------------------------------------------------------------------------------
def _header(settings: PackingSettings, tokenizer_info: dict, has_loss_mask: bool) -> ShardSetHeader:
    missing = [k for k in TOKENIZER_KEYS if k not in tokenizer_info]
    if missing:
        raise ValueError(f"tokenizer_info lacks {missing} (needs {list(TOKENIZER_KEYS)})")
    vocab_size = tokenizer_info["vocab_size"]
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"tokenizer_info vocab_size must be a positive int, got {vocab_size!r}")
    pad_id = next((p for p in (settings.pad_id, tokenizer_info["pad_id"], tokenizer_info["eos_id"]) if p is not None),
                  None)
    if pad_id is None:
        raise ValueError("no pad id: set packing.pad_id, or use a tokenizer with a pad or EOS token")
    return ShardSetHeader(
        seq_len=settings.seq_len,
        vocab_size=vocab_size,
        pad_id=int(pad_id),
        eos_id=tokenizer_info["eos_id"],
        bos_id=tokenizer_info["bos_id"],
        has_loss_mask=has_loss_mask,
        tokenizer={"name": tokenizer_info["name"], "sha256": tokenizer_info["sha256"]},
        packing=settings.model_dump(mode="json"),
    )


def _check_unique_chunks(provenance: pa.Table, exclusions: pa.Table) -> None:
    """Each (document, chunk) is one input row: its first piece (token_start 0) or its exclusion
    appears once. Two rows with the same key would put the same tokens in the set twice."""
    firsts = provenance.filter(pc.equal(provenance["token_start"], 0)).select(["document_id", "chunk"])
    keys = pa.concat_tables([firsts, exclusions.select(["id", "chunk"]).rename_columns(["document_id", "chunk"])])
    counts = keys.group_by(["document_id", "chunk"], use_threads=False).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1))
    if repeated.num_rows:
        r = repeated.slice(0, 1).to_pylist()[0]
        raise TokenizedInputError(f"document {r['document_id']} chunk {r['chunk']} appears {r['count_all']} times "
                                  f"in tokenized_documents ({repeated.num_rows} repeated (document, chunk) keys)")


def _check_totals(indexes: dict[str, dict], stats: list[SetStats], tokens_in: int, loss_in: int) -> None:
    packed = sum(s.tokens for s in stats)
    dropped = sum(s.tokens_dropped for s in stats)
    if packed + dropped != tokens_in:
        raise ConservationError(f"tokens in {tokens_in} != packed {packed} + dropped {dropped}")
    loss_kept = sum(s.loss_tokens for s in stats)
    for fmt, index in indexes.items():
        in_shards = index["totals"]["tokens"]
        loss_in_shards = sum(sh["loss_tokens"] for e in index["sets"] for sh in e["shards"])
        if in_shards + dropped != tokens_in:
            raise ConservationError(f"{fmt}: tokens in {tokens_in} != {in_shards} in shards + {dropped} dropped")
        if loss_in_shards != loss_kept:
            raise ConservationError(f"{fmt}: {loss_in_shards} loss tokens in shards, the packed documents have "
                                    f"{loss_kept} (of {loss_in} in)")


def pack_outputs(
    storage: Storage,
    tokenized_rel: str,
    out_rel: str,
    settings: PackingSettings,
    tokenizer_info: dict,
    batch_rows: int = 8192,
    max_tokens_in_memory: int = DEFAULT_MAX_TOKENS_IN_MEMORY,
    extra_files: Mapping[str, bytes] | None = None,
) -> PackStageResult:
    """Pack `tokenized_rel` (tokenized_documents parts) into a shard set at `out_rel`.

    `extra_files` (name -> bytes) are committed with the shards, e.g. `tokenizer/tokenizer.json`: a
    versioned shard set then carries the tokenizer that decodes it.

    `settings`: PackingSettings; `tokenizer_info`: vocab_size, pad_id, eos_id, bos_id, name, sha256 (of
    tokenizer.json). Raises TokenizedInputError naming the document for bad input, ConservationError
    if tokens are not conserved; either way nothing is committed.
    """
    schema = output_schema(storage, tokenized_rel)
    if schema is None:
        raise TokenizedInputError(f"no tokenized documents under {tokenized_rel}")
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        raise TokenizedInputError(f"{tokenized_rel} lacks columns {missing} (has {schema.names})")
    streaming = settings.strategy == STREAMING_STRATEGY
    survey = _survey(storage, tokenized_rel, batch_rows, keep_ids=not streaming)
    if survey.has_loss_mask and "loss_mask" not in schema.names:
        raise TokenizedInputError(f"{tokenized_rel}: loss_tokens < num_tokens for some rows but there is no loss_mask")
    header = _header(settings, tokenizer_info, survey.has_loss_mask)
    tokens_in = sum(s.tokens for s in survey.sets)
    loss_in = sum(int(s.loss_tokens.sum()) for s in survey.sets)
    with storage.staged_dir(out_rel) as staged:
        writer = ShardSetWriter(staged, list(settings.formats), header, settings.samples_per_shard)
        if streaming:
            stats, provenance, exclusions = _pack_streaming(storage, tokenized_rel, survey, settings, header, writer,
                                                            batch_rows)
        else:
            stats, provenance, exclusions = _pack_offline(storage, tokenized_rel, survey, settings, header, writer,
                                                          batch_rows, max_tokens_in_memory)
        indexes = writer.close()
        provenance_table = write_provenance(staged, provenance)
        exclusions_table = pa.concat_tables(exclusions) if exclusions else EXCLUSIONS_SCHEMA.empty_table()
        _check_unique_chunks(provenance_table, exclusions_table)
        _check_totals(indexes, stats, tokens_in, loss_in)
        write_table(staged, EXCLUSIONS_FILE, exclusions_table)
        for name, data in sorted((extra_files or {}).items()):
            staged.write_bytes(name, data)
    return PackStageResult(tuple(stats), tokens_in, survey.has_loss_mask, token_dtype(header.vocab_size).name,
                           header.pad_id, tuple(writer.formats), staged.manifest)

