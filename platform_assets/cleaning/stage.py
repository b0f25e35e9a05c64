"""The cleaning stage over stored outputs: one raw_documents partition in, one cleaned partition out.

Batches stream through the pipeline, so memory is bounded by the batch. Beside the kept documents
the output holds `_exclusions.parquet` (the shared exclusion columns id, rule, value, bytes: every
removed document with the rule that removed it and the value that tripped it).

Cleaning is CPU-bound Python (~1-4 MB per CPU-second with the default recipe) that holds ~6-8x the
text it works on in Python objects, so a batch (up to `io.batch_bytes`, 64 MiB: ~500 MB of objects)
is cleaned in slices of `io.work_bytes` (2 MiB) and the slices' results are put back together
(pipeline.merge_results): the output's row groups are still one per batch, byte-identical to cleaning
the batch whole. An input of more than one slice is cleaned by `io.workers` processes: each cleans
slices with its own pipeline, results come back in input order, so the output is byte-identical for
any number of workers. At most workers + 1 slices are in flight.

What the parent holds: the batch while its slices go to files, the kept slices of the batch being
assembled (memory mapped) and the assembled batch while it is written; the exclusions (a row per
removed document) are spilled to an Arrow file as they come and written once at the end from its
memory map. pipeline_scaling --base-mb 8, code source, 4.2 -> 67 MB (the 16x input was one 64 MiB
batch cleaned in one process): before, peak tree RSS 592 -> 823 MB; after, 910 -> 1,047 MB with 2
workers at both sizes (parent 346 -> 488 MB: the batch being assembled and written, workers ~280 MB).
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from platform_assets.cleaning.pipeline import CleaningPipeline, CleaningResult, Funnel, build_pipeline, merge_results
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA, StepStats
from platform_assets.cleaning.worker_pool import worker_context
from platform_assets.contracts import DEFAULT_IO, EXCLUSIONS_FILE, IOSettings, StageResult
from platform_assets.parquet_parts import TableSink, TableSource, part_files
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

__all__ = ["EXCLUSIONS_FILE", "CleaningStageResult", "clean_batches", "clean_output", "work_slices"]


@dataclass(frozen=True, kw_only=True)
class CleaningStageResult(StageResult):
    funnel: Funnel
    excluded: int
    workers: int = 1

    @property
    def rows_out(self) -> int:
        return self.rows

    @property
    def metadata(self) -> dict[str, Any]:
        f = self.funnel
        return {"docs_in": f.docs_in, "bytes_in": f.bytes_in, "bytes_out": f.bytes_out,
                "removal_rate": round(f.removal_rate(), 6), "workers": self.workers}


_worker_pipeline: CleaningPipeline | None = None


def _start_worker(settings: CleaningSettings) -> None:
    global _worker_pipeline
    _worker_pipeline = build_pipeline(settings)


def _write_batch_file(path: str, batch: pa.RecordBatch) -> None:
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def _mapped_batch(path: str) -> pa.RecordBatch:
    """The batch of an Arrow IPC file, memory-mapped (no copy), the file already unlinked: its pages
    stay readable until the last buffer of the batch is released."""
    batch = pa.ipc.open_file(pa.memory_map(path)).get_batch(0)
    os.unlink(path)
    return batch


def _clean_in_worker(in_path: str, kept_path: str) -> tuple[list[pa.RecordBatch | None], list[StepStats]]:
    """Clean the slice in `in_path`; the kept documents go to `kept_path`, the exclusions by step (a row
    per removed document, ~100 bytes) and the counts come back through the pipe."""
    assert _worker_pipeline is not None, "the pool's initializer builds the pipeline"
    result = _worker_pipeline.process_batch(_mapped_batch(in_path))
    _write_batch_file(kept_path, result.kept)
    assert result.step_exclusions is not None, "process_batch fills them"
    return result.step_exclusions, result.stats


_NO_EXCLUSIONS = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in EXCLUSIONS_SCHEMA],
                                            schema=EXCLUSIONS_SCHEMA)


def row_payload_bytes(batch: pa.RecordBatch) -> np.ndarray:
    """UTF-8 bytes of each row's text plus its media items' bytes: what cleaning works on."""
    sizes = np.zeros(batch.num_rows, np.int64)
    if "text" in batch.schema.names:
        sizes += pc.binary_length(batch.column("text")).fill_null(0).to_numpy(zero_copy_only=False)
    if "media" in batch.schema.names and batch.column("media").null_count < batch.num_rows:
        media = batch.column("media")
        items = pc.list_flatten(media)
        if len(items) and "bytes" in [f.name for f in items.type]:
            lengths = pc.binary_length(pc.struct_field(items, "bytes")).fill_null(0).to_numpy(zero_copy_only=False)
            parents = pc.list_parent_indices(media).to_numpy(zero_copy_only=False)
            sizes += np.bincount(parents, weights=lengths, minlength=batch.num_rows).astype(np.int64)
    return sizes


def work_slices(batch: pa.RecordBatch, work_bytes: int) -> list[pa.RecordBatch]:
    """Consecutive zero-copy slices of `batch` of about `work_bytes` of payload each: a row starts a new
    slice when the rows before it in the current one hold `work_bytes` or more, so a slice holds at
    most `work_bytes` plus one row. Always at least one slice, possibly empty."""
    if batch.num_rows <= 1:
        return [batch]
    sizes = row_payload_bytes(batch)
    starts = [0]
    held = 0
    for row, size in enumerate(sizes.tolist()):
        if held >= work_bytes and row > starts[-1]:
            starts.append(row)
            held = 0
        held += size
    bounds = [*starts, batch.num_rows]
    return [batch.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def clean_batches(batches: Iterable[pa.RecordBatch], settings: CleaningSettings, workers: int = 1,
                  work_bytes: int = DEFAULT_IO.work_bytes) -> Iterator[CleaningResult]:
    """Each batch's CleaningResult, in input order, the batch cleaned in slices of `work_bytes`;
    `workers` > 1 cleans the slices in that many processes.

    Workers are forked from a forkserver that has loaded what they need (worker_pool.py), not from the
    caller (a Dagster run has threads whose locks a fork would copy mid-use); the server costs ~1.2
    CPU-s once, so the stage asks for workers only when the input holds more than one slice.

    Slices travel as Arrow IPC files in a temporary directory (memory-mapped on both sides), not
    pickled through the pool's pipes: pickling kept ~20 batches' worth of heap in the parent (measured
    on 200 MB of JSONL with 2 workers: 597 MB reserved at 8 MiB batches, 759 MB at 16 MiB), since each
    batch was copied into a pickle, a pipe buffer and back, and glibc kept the freed blocks.
    """
    if workers <= 1:
        pipeline = build_pipeline(settings)
        for batch in batches:
            yield merge_results([pipeline.process_batch(piece) for piece in work_slices(batch, work_bytes)])
        return
    context = worker_context()
    with tempfile.TemporaryDirectory(prefix="platform-clean-") as exchange, \
            ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                                initargs=(settings,)) as pool:
        # (the worker's answer, the kept slice's file, whether the slice is its batch's last)
        in_flight: deque[tuple[Future[tuple[list[pa.RecordBatch | None], list[StepStats]]], str, bool]] = deque()
        parts: list[CleaningResult] = []  # the slices of the batch being assembled

        def collect() -> CleaningResult | None:
            future, kept_path, last = in_flight.popleft()
            by_step, stats = future.result()
            exclusions = pa.concat_batches(done) if (done := [e for e in by_step if e is not None]) else None
            parts.append(CleaningResult(kept=_mapped_batch(kept_path), stats=stats, step_exclusions=by_step,
                                        exclusions=exclusions if exclusions is not None else _NO_EXCLUSIONS))
            if not last:
                return None
            merged = merge_results(parts)
            parts.clear()
            return merged

        count = 0
        for batch in batches:
            # every slice to its file first, so that the parent drops the batch (up to io.batch_bytes)
            # before the workers clean it: the files wait in the page cache, not in this process
            files = []
            for piece in work_slices(batch, work_bytes):
                files.append((os.path.join(exchange, f"in-{count}"), os.path.join(exchange, f"kept-{count}")))
                count += 1
                _write_batch_file(files[-1][0], piece)
            del batch, piece
            for i, (in_path, kept_path) in enumerate(files):
                in_flight.append((pool.submit(_clean_in_worker, in_path, kept_path), kept_path, i == len(files) - 1))
                if len(in_flight) > workers and (result := collect()) is not None:  # one queued per worker
                    yield result
        while in_flight:
            if (result := collect()) is not None:
                yield result


def payload_bytes(source: TableSource) -> int:
    """Uncompressed bytes of the source's parts, from their footers (no column data is read)."""
    total = 0
    for path in part_files(source.storage, source.rel):
        with source.storage.fs.open_input_file(path) as f:
            meta = pq.ParquetFile(f).metadata
        total += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return total


def clean_output(
    storage: Storage,
    in_rel: str,
    out_rel: str,
    settings: CleaningSettings,
    io: IOSettings = DEFAULT_IO,
) -> CleaningStageResult:
    source = TableSource(storage, in_rel, io)
    schema = source.schema or DOCUMENTS_SCHEMA  # a source may have no documents
    pipeline = build_pipeline(settings)  # the steps' names and added columns; workers build their own
    out_schema = pipeline.output_schema(schema)
    totals = [StepStats(step.name) for step in pipeline.steps]
    # workers only where there is more than one slice to clean (ids and metadata count too: a little early)
    workers = min(io.worker_count(), -(-payload_bytes(source) // io.work_bytes)) if source.num_rows else 1
    excluded = 0
    with tempfile.TemporaryDirectory(prefix="platform-clean-exclusions-") as spill, \
            TableSink(storage, out_rel, out_schema, io) as sink:
        # a row per removed document, spilled as it comes (an Arrow file, the batches as they were):
        # written at the end from the file's memory map, the same chunks as when they were held
        spill_path = os.path.join(spill, "exclusions.arrow")
        with pa.OSFile(spill_path, "wb") as spill_file, pa.ipc.new_file(spill_file, EXCLUSIONS_SCHEMA) as spilled:
            for result in clean_batches(source.tracked_batches("clean"), settings, workers, io.work_bytes):
                sink.write(result.kept)
                if result.exclusions.num_rows:
                    spilled.write_batch(result.exclusions)
                    excluded += result.exclusions.num_rows
                for total, stats in zip(totals, result.stats, strict=True):
                    total.merge(stats)
        with pa.memory_map(spill_path) as mapped:
            sink.write_side(EXCLUSIONS_FILE, pa.ipc.open_file(mapped).read_all())
    funnel = Funnel(totals)
    funnel.check()  # docs and bytes in = out + removed (+ rewritten) for every step, or it raises
    return CleaningStageResult(rel=out_rel, files=sink.files, rows=sink.rows, schema=out_schema,
                               exclusions=EXCLUSIONS_FILE, funnel=funnel, excluded=excluded, workers=workers)
