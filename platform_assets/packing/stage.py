"""The packing stage over stored outputs: `tokenized_documents` in, one packed shard set out
(SHARD_FORMAT.md): shards in every configured format with their indexes, `provenance.parquet`, and
`_exclusions.parquet` (documents dropped by overlong="filter").

Documents are packed per (split, source): the loader mixes sources by weight, so a sequence never
holds two sources or two splits. Documents of a set keep their input order (row order of the parts),
which is what every strategy's tie-breaking refers to, so the output is byte-identical for the same
input and settings.

The work is split along its seams: `survey.py` (the survey pass and checked flattening),
`offline_pass.py`, `streaming_pass.py`, `emission.py` (what both share once a set is packed),
`provenance_sink.py` (provenance rows spilled per set, then written in order), and this module (the
header, the cross-checks, the commit).

- Offline strategies (best_fit_decreasing, ...) need every length of a set before placing anything:
  a survey pass reads the small columns, then the token lists of a set are read into one flat array
  -- 4 bytes per token (int32 ids; +1 byte with loss masks) -- and each run of 1024 samples is
  gathered from it. Sets are held in memory together while their tokens fit `max_tokens_in_memory`
  and a quarter of an io batch (`in_memory_tokens`: 4 Mi tokens at the default 64 MiB); a larger set
  goes to a spill file and each run reads its pieces back (token_store.py), so memory no longer grows
  with a set (before: the whole set, 0.8 GB of the 1.7 GB peak on the real corpus's 199 M tokens).
- `streaming_best_fit` reads the input once; memory is the tokens of the documents still in open
  sequences (at most max_open_sequences x seq_len per set: 8 MiB at the defaults) plus one record
  batch (same corpus: 21 CPU-s, peak RSS 1.2 GB, nearly all of it the reader's).

Conservation is checked before anything is committed, and a violation raises: every (document,
chunk) token range is covered exactly once by the pieces, tokens in = tokens in the shards + tokens
dropped, and loss tokens likewise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from platform_assets.contracts import DEFAULT_IO, EXCLUSIONS_FILE, IOSettings, StageResult
from platform_assets.packing.emission import EXCLUSIONS_SCHEMA, OVERLONG_RULE, SetStats, summed_stats
from platform_assets.packing.offline_pass import pack_offline
from platform_assets.packing.provenance_sink import ProvenanceSink
from platform_assets.packing.samples import token_dtype
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
from platform_assets.packing.streaming_pass import pack_streaming
from platform_assets.packing.survey import ConservationError, TokenizedInputError, survey
from platform_assets.packing.token_store import SpillDir
from platform_assets.parquet_parts import output_schema, write_table
from platform_assets.storage import Storage

__all__ = [
    "DEFAULT_MAX_TOKENS_IN_MEMORY", "EXCLUSIONS_FILE", "EXCLUSIONS_SCHEMA", "OVERLONG_RULE", "ConservationError",
    "PackStageResult", "SetStats", "TokenizedInputError", "in_memory_tokens", "pack_outputs",
]

STREAMING_STRATEGY = "streaming_best_fit"
# Tokens of all sets read in one pass of an offline strategy: 256 Mi tokens = 1 GiB of int32 ids
# (+256 MiB of masks). A larger set still gets a pass of its own.
DEFAULT_MAX_TOKENS_IN_MEMORY = 256 * 2**20
REQUIRED_COLUMNS = ("id", "split", "source", "chunk", "input_ids", "num_tokens", "loss_tokens")
TOKENIZER_KEYS = ("vocab_size", "pad_id", "eos_id", "bos_id", "name", "sha256")


@dataclass(frozen=True, kw_only=True)
class PackStageResult(StageResult):
    sets: tuple[SetStats, ...]  # sorted by (split, source)
    tokens_in: int
    has_loss_mask: bool
    token_dtype: str
    pad_id: int
    formats: tuple[str, ...]

    @property
    def totals(self) -> SetStats:
        return summed_stats("*", "*", self.sets[0].seq_len if self.sets else 0, list(self.sets))

    @property
    def metadata(self) -> dict[str, Any]:
        t = self.totals
        return {"formats": ", ".join(self.formats), "sequences": t.sequences, "dagster/row_count": t.sequences,
                "tokens": t.tokens, "loss_tokens": t.loss_tokens, "tokens_in": self.tokens_in,
                "efficiency": round(t.efficiency, 6), "documents_split": t.documents_split,
                "documents_dropped": t.documents_dropped, "token_dtype": self.token_dtype}


def in_memory_tokens(max_tokens_in_memory: int, io: IOSettings, has_loss_mask: bool) -> int:
    """Tokens an offline pass may hold in memory: `max_tokens_in_memory`, and no more than a quarter
    of an io batch's bytes of them (4 bytes a token, +1 with masks: 4 Mi tokens at the default 64 MiB);
    larger sets are spilled (token_store.py). Held tokens are copied once more while they are read, so
    a held set costs ~2x its bytes: on the pipeline_scaling 16x input (base 8 MB) holding its 11.5 M
    token set put 100 MB on the stage's peak that spilling it does not, at the same speed."""
    return max(1, min(max_tokens_in_memory, io.batch_bytes // 4 // (4 + int(has_loss_mask))))


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
    io: IOSettings = DEFAULT_IO,
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
    batch_rows = io.batch_rows  # at most; the token passes' batches are bounded by tokens (token_batches.py)
    spill_dir = SpillDir(settings.spill_dir)  # the sets' ids, spilled sets' tokens, provenance rows until written
    provenance = None
    try:
        surveyed = survey(storage, tokenized_rel, batch_rows, spill_dir.path, keep_ids=not streaming)
        if surveyed.has_loss_mask and "loss_mask" not in schema.names:
            raise TokenizedInputError(f"{tokenized_rel}: loss_tokens < num_tokens for some rows but there is no "
                                      "loss_mask")
        header = _header(settings, tokenizer_info, surveyed.has_loss_mask)
        tokens_in = sum(s.tokens for s in surveyed.sets)
        loss_in = sum(int(s.loss_tokens.sum()) for s in surveyed.sets)
        provenance = ProvenanceSink(spill_dir.path, len(surveyed.sets), len(surveyed.row_set))
        with storage.staged_dir(out_rel) as staged:
            writer = ShardSetWriter(staged, list(settings.formats), header, settings.samples_per_shard,
                                    spill_dir.path)
            try:
                if streaming:
                    stats, exclusions = pack_streaming(storage, tokenized_rel, surveyed, settings, header, writer,
                                                       provenance, batch_rows)
                else:
                    held_max = in_memory_tokens(max_tokens_in_memory, io, surveyed.has_loss_mask)
                    stats, exclusions = pack_offline(storage, tokenized_rel, surveyed, settings, header, writer,
                                                     provenance, batch_rows, held_max, spill_dir.path)
                indexes = writer.close()
            except BaseException:
                writer.abort()  # lance's write thread must not outlive the failed stage
                raise
            exclusions_table = pa.concat_tables(exclusions) if exclusions else EXCLUSIONS_SCHEMA.empty_table()
            provenance.check_unique(exclusions_table)
            _check_totals(indexes, stats, tokens_in, loss_in)
            provenance.write(staged)
            write_table(staged, EXCLUSIONS_FILE, exclusions_table, io.compression)
            for name, data in sorted((extra_files or {}).items()):
                staged.write_bytes(name, data)
    finally:
        if provenance is not None:
            provenance.close()
        spill_dir.close()
    totals = sum(s.sequences for s in stats)
    return PackStageResult(rel=out_rel, files=staged.manifest, rows=totals, exclusions=EXCLUSIONS_FILE,
                           sets=tuple(stats), tokens_in=tokens_in, has_loss_mask=surveyed.has_loss_mask,
                           token_dtype=token_dtype(header.vocab_size).name, pad_id=header.pad_id,
                           formats=tuple(writer.formats))

