"""Encode a record batch of documents into record batches of token rows: one per slice of the input
(`encode_parts`, what the stage writes, so the batch's rows are never all built at once), or the
slices joined (`encode`).

Input columns: `id`, `source`, `split`, `text`, `meta` (others ignored). Output (TOKENIZED schema):
`id`, `source`, `split`, `chunk` (int32), `input_ids` (list<int32>), `loss_mask` (list<uint8>,
null for plain text: every token counts), `num_tokens`, `loss_tokens` (int32).

- Plain text: the batch is cut into slices of `encode_slice_bytes` of text, and each slice is ONE
  call of the document encoder (tiktoken where it gives tokenizers' ids, tiktoken_bpe.py; else
  tokenizers' `encode_batch_fast`: Rust, no offsets computed), run serially on one of the encoder's
  threads, one slice in flight per core (`tokenizer_runtime.serial_tokenizers` says why not tokenizers' own threads);
  a document of `own_thread_min_chars` or more is encoded on a thread started for it. Ids come
  out as one flat int32 array and lengths, and BOS/EOS, truncation and chunking are offset
  arithmetic (sequences.py). Special-token strings in the text are encoded as text
  (tokenizer_artifact.py).
- Chat documents (meta holds `messages`): validated (conversations.py), rendered by the chat
  template into segments (chat_template.py); all segments of a slice are one more batched call,
  and the mask is each segment's flag repeated over its tokens: 1 on what the template's
  generation blocks hold (with the default template: each assistant content and its
  `<|im_end|>`) or, for a template without them, on each assistant turn found from rendered
  prefixes (chat_turn_spans.py), 0 elsewhere (BOS and EOS included).
- A malformed chat document, a chat document left without an assistant token, and a document
  whose text encodes to no token (empty) are dropped and returned as exclusions (id, rule,
  value, bytes). A chunk of a chat document without an assistant token is dropped and counted
  (it would cost compute and teach nothing: packing never lets attention cross chunks).

Rows keep the input order; the chunks of a document are consecutive. int32 ids: vocabularies pass
65,536 (Llama 3: 128,256), and int32 is what torch embedding lookups and HF datasets use.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.contracts import Counts, usable_cores
from platform_assets.heap import release_freed_heap
from platform_assets.tokenize.chat_template import render_chat
from platform_assets.tokenize.chat_turn_spans import TurnsNotMaskable
from platform_assets.tokenize.conversations import Invalid, chat_candidates, parse_conversation
from platform_assets.tokenize.exclusion_rules import EXCLUSIONS_SCHEMA, TokenizeRule
from platform_assets.tokenize.sequences import assemble, chunk, exclusive_cumsum, segment_sums
from platform_assets.tokenize.settings import TokenizeSettings
from platform_assets.tokenize.tiktoken_bpe import tiktoken_ids
from platform_assets.tokenize.tokenizer_artifact import TokenizerArtifact
from platform_assets.tokenize.tokenizer_runtime import resize_word_cache, serial_tokenizers, tokenizers_ids

TOKENIZED_SCHEMA_NAME = "platform.tokenized_documents"
TOKENIZED_SCHEMA_VERSION = 1
TOKENIZED_FIELDS = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("chunk", pa.int32(), nullable=False),
    pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("loss_mask", pa.list_(pa.uint8()), nullable=True),
    pa.field("num_tokens", pa.int32(), nullable=False),
    pa.field("loss_tokens", pa.int32(), nullable=False),
]
_INT32_MAX = 2**31 - 1
MIN_PIPELINE_DEPTH = 2
"""Slices in the tokenizer at once: one per encoding thread, at least two, so that the tokenizer also
works while the caller writes (measured below, in `encode_parts`); each holds ~100 bytes of Encoding
objects per token, ~40 MB at the default 1 MiB of 0.4 tokens per byte
(settings.TokenizeSettings.encode_slice_bytes). Fewer while the slices' largest documents would add up
to more than a slice's bytes (`encode_parts`)."""
_VALUE_MAX_CHARS = 200  # as cleaning's exclusions: for humans and GROUP BY


def tokenized_schema(tokenizer_sha256: str = "") -> pa.Schema:
    """The output schema; its metadata names the tokenizer, so a reader can refuse ids made by
    another one (packing checks it against the tokenizer it records)."""
    meta = {b"platform.schema": f"{TOKENIZED_SCHEMA_NAME}/{TOKENIZED_SCHEMA_VERSION}".encode()}
    if tokenizer_sha256:
        meta[b"platform.tokenizer_sha256"] = tokenizer_sha256.encode()
    return pa.schema(TOKENIZED_FIELDS, metadata=meta)


@dataclass
class EncodeStats(Counts):
    documents: int = 0
    """Documents in."""
    chat_documents: int = 0
    """Chat documents that produced rows."""
    rows: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    overlong_documents: int = 0
    """Longer than max_length (BOS/EOS included), whatever the overlong policy did with them."""
    truncated_documents: int = 0
    truncated_tokens: int = 0
    chunked_documents: int = 0
    """Documents cut into two or more rows."""
    dropped_chunks: int = 0
    """Chunks of chat documents without an assistant token."""
    dropped_chunk_tokens: int = 0
    excluded: Counter[str] = field(default_factory=Counter)
    """Documents dropped, per rule."""

    def to_dict(self) -> dict[str, Any]:
        return self.as_dict()


@dataclass(frozen=True)
class EncodedBatch:
    batch: pa.RecordBatch
    exclusions: pa.RecordBatch
    stats: EncodeStats


@dataclass
class _Tokens:
    """The tokenizer's output for rows a..b of a batch: plain documents' ids, chat segments' ids."""

    a: int
    b: int
    plain_len: np.ndarray
    plain_ids: np.ndarray
    chat_rows: np.ndarray
    seg_len: np.ndarray
    chat_ids: np.ndarray
    seg_flags: np.ndarray  # uint8 per segment
    seg_owner: np.ndarray  # index into chat_rows per segment


@dataclass
class _Slice:
    """Token rows of one slice of the input batch, before the drops."""

    values: np.ndarray
    mask: np.ndarray | None  # None when the slice has no chat document: plain rows need none
    offsets: np.ndarray
    rows: np.ndarray  # input row of each output row
    chunk: np.ndarray  # int32
    uncut: np.ndarray  # tokens each row stands for before truncation (summed per document: its full length)


IdsOf = Callable[[list[str]], Sequence[Any]]
"""An encoder: for each text its ids (a list) or tokenizers' Encoding, special-token strings as the
encoder's path has them."""


def _encode_on_own_thread(ids_of: IdsOf, text: str) -> Any:
    """One document's ids or Encoding, made on a thread started for it: its ~105-130 bytes per byte of text
    inside tokenizers come from an arena no long-lived thread allocates from, so they go back when it
    is freed (`tokenizer_runtime.serial_tokenizers` has the figures)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize-large") as own:
        return own.submit(ids_of, [text]).result()[0]


def _flat_ids(ids_of: IdsOf, texts: list[str], own_thread_min_chars: int | None = None,
              ) -> tuple[np.ndarray, np.ndarray]:
    """One batched encode (texts of `own_thread_min_chars` or more each on a thread of its own);
    (lengths int64, concatenated ids int32)."""
    if not texts:
        return np.zeros(0, np.int64), np.zeros(0, np.int32)
    large = [i for i, t in enumerate(texts) if len(t) >= own_thread_min_chars] if own_thread_min_chars else []
    if large:
        large_rows = set(large)
        ordinary = [t for i, t in enumerate(texts) if i not in large_rows]
        encoded = list(ids_of(ordinary)) if ordinary else []
        for i in large:  # ascending: each lands at its own row
            encoded.insert(i, _encode_on_own_thread(ids_of, texts[i]))
    else:
        encoded = ids_of(texts)
    lengths = np.fromiter(map(len, encoded), np.int64, count=len(encoded))  # an Encoding's len: its tokens
    id_lists = encoded if not encoded or isinstance(encoded[0], list) else map(operator.attrgetter("ids"), encoded)
    # chain over the id lists in C (no bytecode per document or per token)
    ids = np.fromiter(itertools.chain.from_iterable(id_lists), np.int32, count=int(lengths.sum()))
    return lengths, ids


def _one_batch(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    if isinstance(batch, pa.RecordBatch):
        return batch
    return batch.combine_chunks().to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist(
        [], schema=batch.schema)


def _joined(table: pa.Table) -> pa.RecordBatch:
    """A table's rows as one record batch (an empty one for no rows)."""
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist(
        [], schema=table.schema)


def _plain(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col


class DocumentEncoder:
    """Encodes record batches with one tokenizer artifact and one TokenizeSettings."""

    def __init__(self, artifact: TokenizerArtifact, settings: TokenizeSettings | None = None,
                 threads: int | None = None):
        """`threads`: slices encoded at once (None: the cores this process may use; at least
        MIN_PIPELINE_DEPTH). The output does not depend on it."""
        self.artifact = artifact
        self.settings = settings or TokenizeSettings()
        self.schema = tokenized_schema(artifact.tokenizer_sha256)
        self._template_vars = artifact.template_variables()
        self._bos_token = artifact.special_tokens.get("bos")
        self.pipeline_depth = max(MIN_PIPELINE_DEPTH, threads or usable_cores())
        self._pool = ThreadPoolExecutor(max_workers=self.pipeline_depth, thread_name_prefix="tokenize")
        if self.settings.word_cache_capacity is not None:
            for tokenizer in (artifact.text_tokenizer, artifact.tokenizer):
                resize_word_cache(tokenizer, self.settings.word_cache_capacity)
        choice = artifact.document_encoder_choice(self.settings.encoder)
        self.document_encoder = choice.description
        """What encodes documents' text: "tiktoken", or "tokenizers (why not tiktoken)"."""
        self._document_ids = (tiktoken_ids(choice.encoding) if choice.encoding is not None
                              else tokenizers_ids(artifact.text_tokenizer))
        self._chat_ids = tokenizers_ids(artifact.tokenizer)

    # -- the batch ---------------------------------------------------------------------------------
    def encode(self, batch: pa.RecordBatch | pa.Table) -> EncodedBatch:
        """The whole batch as one EncodedBatch: `encode_parts`' slices joined (their counts added)."""
        with serial_tokenizers():
            parts = list(self.encode_parts(batch))
        stats = EncodeStats()
        for part in parts:
            stats.merge(part.stats)
        rows = pa.Table.from_batches([part.batch for part in parts], schema=self.schema)
        exclusions = pa.Table.from_batches([part.exclusions for part in parts], schema=EXCLUSIONS_SCHEMA)
        return EncodedBatch(_joined(rows), _joined(exclusions), stats)

    def encode_parts(self, batch: pa.RecordBatch | pa.Table) -> Iterator[EncodedBatch]:
        """The batch's token rows, exclusions and counts one slice at a time (`encode_slice_bytes` of
        text, at least one document), in row order; every document, dropped or not, is in exactly one
        slice. A caller that writes each part before taking the next holds one slice's rows, not the
        batch's: the whole batch's rows were built, joined and written at once (~4 bytes a token twice,
        more for token-dense text), so the stage's peak followed the costliest batch it met (16x of the
        corpus, 55 batches of 64 MiB: 1,143 MB against 1,011 at 1x's 3; a slice at a time 1,058 / 953).
        Call it inside `serial_tokenizers()`, as the stage and `encode` do: outside, each slice is split
        again over tokenizers' pool (the same rows, more memory)."""
        batch = _one_batch(batch)
        for name in ("id", "source", "split", "text"):
            if name not in batch.schema.names:
                raise ValueError(f"tokenize: input batch has no {name!r} column (columns: {batch.schema.names}); "
                                 "it reads the dataset_splits output")
        n = batch.num_rows
        text = _plain(batch.column("text"))
        meta = _plain(batch.column("meta")) if "meta" in batch.schema.names else None
        sizes = pc.binary_length(text).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)

        encoded_sizes = sizes.copy()  # what the tokenizer will see (a chat's rendering): slices are cut by it
        kind = np.zeros(n, np.int8)  # 0 plain, 1 chat, -1 excluded
        drops: dict[int, tuple[str, str]] = {}
        chats: dict[int, list[tuple[str, int]]] = {}
        chat_bos: dict[int, bool] = {}
        for row in chat_candidates(meta).tolist():
            parsed = parse_conversation(meta[row].as_py(), self.artifact.control_tokens)
            if parsed is None:
                continue
            if isinstance(parsed, Invalid):
                drops[row] = (parsed.rule, parsed.value)
                continue
            try:
                rendered = render_chat(self.artifact.rendering_template, parsed, self._template_vars,
                                       self.artifact.control_tokens)
            except TurnsNotMaskable as err:
                drops[row] = (TokenizeRule.CHAT_TURNS_NOT_MASKABLE, str(err))
                continue
            except Exception as err:  # a template may raise anything; one bad document must not stop the batch
                drops[row] = (TokenizeRule.CHAT_TEMPLATE_ERROR, f"{type(err).__name__}: {err}")
                continue
            chats[row] = rendered.segments
            chat_bos[row] = bool(self._bos_token) and rendered.text.startswith(self._bos_token)
            kind[row] = 1
            encoded_sizes[row] = len(rendered.text.encode("utf-8"))
        null_text = text.is_null().to_numpy(zero_copy_only=False)
        for row in np.flatnonzero(null_text & (kind == 0)).tolist():
            drops[row] = (TokenizeRule.MISSING_TEXT, "text is null")
        # a row of nothing but BOS/EOS would teach the model that documents may be empty
        for row in np.flatnonzero(~null_text & (sizes == 0) & (kind == 0)).tolist():
            drops[row] = (TokenizeRule.NO_TOKENS, "empty text")
        for row in drops:
            kind[row] = -1

        # Slices are encoded pipeline_depth at a time (one per core), each on a worker thread of
        # the encoder (tokenizers releases the GIL while it encodes; within `serial_tokenizers` a
        # slice is encoded on that thread alone), and finished here in slice order, so the output
        # does not depend on timing. The next slice is submitted before this one is finished and
        # handed out, so the tokenizer also works while the caller writes (a worker's result is its
        # ids, ~4 bytes a token: its Encoding objects died in it).
        bounds = self._slice_bounds(encoded_sizes)
        largest = [int(encoded_sizes[a:b].max()) for a, b in bounds]
        in_flight: deque[tuple[Future[_Tokens], int]] = deque()
        following = 0

        def submit_within_budget() -> None:
            # A document costs ~105-115 bytes per byte of its text inside tokenizers while it is
            # encoded (one 1 MB document: +105-115 MB), whatever slice holds it. Slices join the
            # ones in flight while their largest documents add up to at most one slice's bytes, so
            # two slices of 1 MB documents are encoded one after the other, not at once: on the real
            # corpus's six 1 MB documents the peak was +230 MB over the ordinary slices' two at a
            # time, +105 MB one at a time (a core idle for ~3 s of a 4-minute stage). Ordinary
            # slices (largest documents ~50-150 KB) still go one per core.
            nonlocal following
            while following < len(bounds) and len(in_flight) < self.pipeline_depth and (
                    not in_flight or sum(size for _, size in in_flight) + largest[following]
                    <= self.settings.encode_slice_bytes):
                a, b = bounds[following]
                in_flight.append((self._pool.submit(self._tokenize_slice, text, kind, chats, a, b), largest[following]))
                following += 1

        submit_within_budget()
        while in_flight:
            tokens = in_flight.popleft()[0].result()
            # the slice's Encoding objects died in its worker: their pages go back now, not at the
            # batch's end, so a costly slice's free space is not spread over by the next ones (after
            # the six 1 MB documents the ordinary slices peaked 30-45 MB higher with a trim per batch)
            release_freed_heap()
            submit_within_budget()
            yield self._finish(batch, tokens.a, tokens.b, self._assemble_slice(tokens, kind, chat_bos), kind,
                               drops, sizes)

    def _slice_bounds(self, sizes: np.ndarray) -> list[tuple[int, int]]:
        """Consecutive row ranges of at most encode_slice_bytes each (at least one row)."""
        cum = np.cumsum(sizes)
        bounds, a, n = [], 0, len(sizes)
        while a < n:
            base = cum[a - 1] if a else 0
            b = int(np.searchsorted(cum, base + self.settings.encode_slice_bytes, side="right"))
            b = max(b, a + 1)
            bounds.append((a, b))
            a = b
        return bounds

    # -- one slice: encode (worker thread), then BOS/EOS/limits (caller) ---------------------------------
    def _tokenize_slice(self, text: pa.Array, kind: np.ndarray, chats: dict[int, list[tuple[str, int]]],
                        a: int, b: int) -> _Tokens:
        k = kind[a:b]
        plain_rows = np.flatnonzero(k == 0) + a
        chat_rows = np.flatnonzero(k == 1) + a
        texts = text.take(pa.array(plain_rows)).to_pylist() if len(plain_rows) else []
        plain_len, plain_ids = _flat_ids(self._document_ids, texts, self.settings.own_thread_min_chars)
        del texts
        seg_texts: list[str] = []
        seg_flags: list[int] = []
        seg_owner: list[int] = []
        for j, row in enumerate(chat_rows.tolist()):
            for piece, flag in chats[row]:
                seg_texts.append(piece)
                seg_flags.append(flag)
                seg_owner.append(j)
        seg_len, chat_ids = _flat_ids(self._chat_ids, seg_texts, self.settings.own_thread_min_chars)
        return _Tokens(a, b, plain_len, plain_ids, chat_rows, seg_len, chat_ids,
                       np.asarray(seg_flags, np.uint8), np.asarray(seg_owner, np.int64))

    def _assemble_slice(self, t: _Tokens, kind: np.ndarray, chat_bos: dict[int, bool]) -> _Slice:
        k = kind[t.a:t.b]
        rows = np.flatnonzero(k >= 0) + t.a
        chat_len = np.bincount(t.seg_owner, weights=t.seg_len, minlength=len(t.chat_rows)).astype(np.int64)
        src = np.concatenate([t.plain_ids, t.chat_ids]) if len(t.chat_ids) else t.plain_ids
        src_mask = None
        if len(t.chat_rows):  # plain tokens get 1s only to keep positions aligned; their rows' mask is null
            src_mask = np.concatenate([np.ones(len(t.plain_ids), np.uint8), np.repeat(t.seg_flags, t.seg_len)])
        is_chat = k[k >= 0] == 1
        starts = np.empty(len(rows), np.int64)
        lengths = np.empty(len(rows), np.int64)
        starts[~is_chat] = exclusive_cumsum(t.plain_len)[:-1]
        lengths[~is_chat] = t.plain_len
        starts[is_chat] = len(t.plain_ids) + exclusive_cumsum(chat_len)[:-1]
        lengths[is_chat] = chat_len

        s = self.settings
        has_bos = np.full(len(rows), self.artifact.add_bos)
        if self.artifact.add_bos and len(t.chat_rows):
            has_bos[is_chat] = ~np.array([chat_bos[r] for r in t.chat_rows.tolist()], bool)
        has_eos = np.full(len(rows), self.artifact.add_eos)
        limit = s.max_length if s.overlong == "truncate" else None
        seq = assemble(src, src_mask, starts, lengths, has_bos, has_eos, self.artifact.bos_id,
                       self.artifact.eos_id, limit)
        if s.overlong == "chunk":
            ch = chunk(seq.offsets, s.max_length)
            return _Slice(seq.values, seq.mask, ch.offsets, rows[ch.row], ch.index, np.diff(ch.offsets))
        return _Slice(seq.values, seq.mask, seq.offsets, rows, np.zeros(len(rows), np.int32), seq.full_lengths)

    # -- one slice's rows: drops, counts, Arrow ----------------------------------------------------
    def _finish(self, batch: pa.RecordBatch, a: int, b: int, sl: _Slice, kind: np.ndarray,
                drops: dict[int, tuple[str, str]], sizes: np.ndarray) -> EncodedBatch:
        """Rows a..b of the batch (`sl`; `drops` are the batch's, keyed by batch row) as token rows and
        exclusions."""
        s = self.settings
        stats = EncodeStats(documents=b - a)
        kind, sizes = kind[a:b], sizes[a:b]
        drops = {r - a: d for r, d in drops.items() if a <= r < b}
        values, mask = sl.values, sl.mask
        lengths, rows, chunk_ix = np.diff(sl.offsets), sl.rows - a, sl.chunk
        offsets = exclusive_cumsum(lengths)
        if offsets[-1] > _INT32_MAX:
            raise ValueError(f"tokenize: {int(offsets[-1]):,} tokens in one slice overflow a list<int32> column; "
                             "lower tokenize.encode_slice_bytes")
        is_chat = kind[rows] == 1
        loss = lengths.copy()
        if is_chat.any():  # a slice with a chat document has its mask (ones on plain rows' tokens)
            loss[is_chat] = segment_sums(mask, offsets)[is_chat]

        # per document: tokens in its rows, and its full length before any limit
        doc_tokens = np.bincount(rows, weights=lengths, minlength=len(kind)).astype(np.int64)
        if s.max_length is not None:
            full = np.bincount(rows, weights=sl.uncut, minlength=len(kind)).astype(np.int64)
            over = full > s.max_length
            stats.overlong_documents = int(over.sum())
            if s.overlong == "truncate":
                stats.truncated_documents = stats.overlong_documents
                stats.truncated_tokens = int((full - doc_tokens)[over].sum())
            elif s.overlong == "chunk":
                stats.chunked_documents = int((np.bincount(rows, minlength=len(kind)) > 1).sum())

        keep = (lengths > 0) & ~(is_chat & (loss == 0))
        kept_per_doc = np.bincount(rows[keep], minlength=len(kind))
        rows_per_doc = np.bincount(rows, minlength=len(kind))
        for row in np.flatnonzero((rows_per_doc > 0) & (kept_per_doc == 0)).tolist():
            if kind[row] == 1:
                drops[row] = (TokenizeRule.NO_LOSS_TOKENS, f"0 assistant tokens in {int(doc_tokens[row])} tokens")
            else:
                drops[row] = (TokenizeRule.NO_TOKENS, f"{int(sizes[row])} bytes of text encode to no token")
        partial = (kept_per_doc > 0)[rows] & ~keep  # chunks dropped from documents that keep others
        stats.dropped_chunks = int(partial.sum())
        stats.dropped_chunk_tokens = int(lengths[partial].sum())
        if not keep.all():
            token_keep = np.repeat(keep, lengths)
            values = values[token_keep]
            mask = mask[token_keep] if mask is not None else None
            lengths, rows, chunk_ix = lengths[keep], rows[keep], chunk_ix[keep]
            loss, is_chat = loss[keep], is_chat[keep]
            offsets = exclusive_cumsum(lengths)

        stats.rows = len(rows)
        stats.tokens = int(lengths.sum())
        stats.loss_tokens = int(loss.sum())
        stats.chat_documents = int(np.unique(rows[is_chat]).size)
        rows_of = batch.slice(a, b - a)
        out = self._arrow(rows_of, values, mask, offsets, lengths, rows, chunk_ix, loss, is_chat)
        exclusions = self._exclusions(rows_of, drops, sizes, stats)
        return EncodedBatch(out, exclusions, stats)

    def _arrow(self, batch: pa.RecordBatch, values: np.ndarray, mask: np.ndarray | None, offsets: np.ndarray,
               lengths: np.ndarray, rows: np.ndarray, chunk_ix: np.ndarray, loss: np.ndarray,
               is_chat: np.ndarray) -> pa.RecordBatch:
        take = pa.array(rows, pa.int64())
        input_ids = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, pa.int32()))
        if mask is not None and is_chat.any():
            mask_values = mask[np.repeat(is_chat, lengths)]
            mask_offsets = exclusive_cumsum(np.where(is_chat, lengths, 0)).astype(np.int32)
            loss_mask = pa.ListArray.from_arrays(pa.array(mask_offsets), pa.array(mask_values, pa.uint8()),
                                                 mask=pa.array(~is_chat))
        else:
            loss_mask = pa.nulls(len(rows), pa.list_(pa.uint8()))
        columns = [
            _plain(batch.column("id")).take(take).cast(pa.string()),
            _plain(batch.column("source")).take(take).cast(pa.string()),
            _plain(batch.column("split")).take(take).cast(pa.string()),
            pa.array(chunk_ix, pa.int32()),
            input_ids,
            loss_mask,
            pa.array(lengths.astype(np.int32), pa.int32()),
            pa.array(loss.astype(np.int32), pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    @staticmethod
    def _exclusions(batch: pa.RecordBatch, drops: dict[int, tuple[str, str]], sizes: np.ndarray,
                    stats: EncodeStats) -> pa.RecordBatch:
        order = sorted(drops)  # input order: deterministic whatever order the checks found them in
        ids = _plain(batch.column("id")).take(pa.array(order, pa.int64())).cast(pa.string()) if order \
            else pa.array([], pa.string())
        rules = [drops[r][0] for r in order]
        stats.excluded.update(rules)
        return pa.RecordBatch.from_arrays(
            [ids, pa.array(rules, pa.string()), pa.array([drops[r][1][:_VALUE_MAX_CHARS] for r in order], pa.string()),
             pa.array(sizes[order] if order else [], pa.int64())],
            schema=EXCLUSIONS_SCHEMA,
        )
