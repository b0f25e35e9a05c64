"""`provenance.parquet` written without holding it, and the (document, chunk) uniqueness check.

A packed set has one provenance row per piece (~80 B in Arrow): the stage used to keep every set's
rows, concatenate and sort them and write one table, so its peak grew with the corpus (the whole
pipeline_scaling corpus at 16x: packed_shards 355 -> 521 MB of peak tree RSS from 1x). Here each
set's rows go to a spill file of their own as runs are emitted (Arrow IPC: the streaming strategy
emits the sets interleaved), and `write` copies the sets in (split, source) order into the Parquet
file, `ROW_GROUP_ROWS` rows at a time. Within a set the runs arrive in sequence order, so the file
holds the rows in (split, source, shard, sample, segment) order, as the sort made it.

The check that each (document, chunk) is packed or excluded once keeps an 8-byte hash per key, not
the keys, and those in hash partitions on disk (spilled_keys.py: in memory they were 2.6 MB of the
16x pipeline_scaling corpus's peak): equal hashes are confirmed on the ids themselves, read back from
the spill files, so a hash collision never reports a repeat that is not one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.dedup.hash64 import GOLDEN, fmix64_inplace, string_hashes
from platform_assets.packing.provenance import PROVENANCE_FILE, PROVENANCE_SCHEMA
from platform_assets.packing.spilled_keys import SpilledKeys
from platform_assets.packing.survey import TokenizedInputError
from platform_assets.parquet_parts import write_row_groups
from platform_assets.storage import StagedDir

__all__ = ["ROW_GROUP_ROWS", "ProvenanceSink", "chunk_key_hashes"]

# rows per row group of provenance.parquet (and the most rows `write` holds): ~5 MB of Arrow
ROW_GROUP_ROWS = 65_536


def chunk_key_hashes(ids: pa.Array, chunks: pa.Array | np.ndarray) -> np.ndarray:
    """A 64-bit hash of each (id, chunk): equal keys hash equal; unequal ones may collide (an id with
    a NUL byte, or chance), so a repeated hash is only a candidate."""
    chunks = np.asarray(chunks, dtype=np.int64).astype(np.uint64)
    out = string_hashes(ids)
    out ^= (chunks + np.uint64(1)) * GOLDEN
    return fmix64_inplace(out)


class ProvenanceSink:
    """Provenance rows by set (`add`), then `write` them in set order and `check_unique` the keys."""

    def __init__(self, directory: Path, n_sets: int, keys: int = 0):
        """`keys`: about how many (document, chunk) keys will be checked (the input's rows)."""
        self._dir = directory
        self._n_sets = n_sets
        self._files: dict[int, Path] = {}
        self._writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
        self._sinks: dict[int, pa.OSFile] = {}
        self._key_hashes = SpilledKeys(directory, "chunk-keys", np.uint64, keys)  # first pieces', exclusions'
        self.rows = 0

    def add(self, set_index: int, table: pa.Table) -> None:
        """Rows of the next run of set `set_index` (runs of a set in sequence order)."""
        if not 0 <= set_index < self._n_sets:
            raise IndexError(f"set {set_index} of {self._n_sets}")
        if set_index not in self._writers:
            path = self._dir / f"provenance-{set_index:05d}.arrow"
            self._files[set_index] = path
            self._sinks[set_index] = pa.OSFile(str(path), "wb")
            self._writers[set_index] = pa.ipc.new_stream(self._sinks[set_index], PROVENANCE_SCHEMA)
        self._writers[set_index].write_table(table)
        self.rows += table.num_rows
        firsts = table.filter(pc.equal(table["token_start"], 0))
        self._key_hashes.add(chunk_key_hashes(firsts["document_id"], firsts["chunk"]))

    def _close_spills(self) -> None:
        for i in list(self._writers):
            self._writers.pop(i).close()
            self._sinks.pop(i).close()

    def _spilled(self):
        """The spilled rows, set by set in (split, source) order, as record batches."""
        self._close_spills()
        for i in sorted(self._files):
            with pa.OSFile(str(self._files[i])) as source:  # read, not mapped: batches outlive the file
                yield from pa.ipc.open_stream(source)

    def _row_groups(self):
        """The spilled rows as tables of ROW_GROUP_ROWS rows (the last shorter; one empty table when
        there are no rows, so the file still has the schema's one row group)."""
        held: list[pa.RecordBatch] = []
        held_rows = 0
        for batch in self._spilled():
            held.append(batch)
            held_rows += batch.num_rows
            while held_rows >= ROW_GROUP_ROWS:
                table = pa.Table.from_batches(held, PROVENANCE_SCHEMA)
                yield table.slice(0, ROW_GROUP_ROWS)
                rest = table.slice(ROW_GROUP_ROWS).combine_chunks()
                held, held_rows = rest.to_batches(), rest.num_rows
        if held_rows or self.rows == 0:
            yield pa.Table.from_batches(held, PROVENANCE_SCHEMA)

    def write(self, staged: StagedDir, compression: str = "zstd") -> int:
        """Write `provenance.parquet` into `staged` (parquet_parts.write_row_groups); returns its rows."""
        write_row_groups(staged, PROVENANCE_FILE, PROVENANCE_SCHEMA, self._row_groups(), compression)
        return self.rows

    def check_unique(self, exclusions: pa.Table) -> None:
        """Each (document, chunk) is one input row: its first piece (token_start 0) or its exclusion
        appears once. Two rows with the same key would put the same tokens in the set twice."""
        excluded = chunk_key_hashes(exclusions["id"], exclusions["chunk"])
        self._key_hashes.add(excluded)
        repeated = self._key_hashes.repeated()
        if not repeated.size:
            return
        # confirm on the keys themselves: only the rows whose hash repeats are gathered
        suspects = [exclusions.filter(pa.array(np.isin(excluded, repeated))).select(["id", "chunk"])
                    .rename_columns(["document_id", "chunk"])]
        for batch in self._spilled():
            firsts = batch.filter(pc.equal(batch["token_start"], 0))
            hit = np.isin(chunk_key_hashes(firsts["document_id"], firsts["chunk"]), repeated)
            if hit.any():
                suspects.append(pa.Table.from_batches([firsts.filter(pa.array(hit))]).select(["document_id", "chunk"]))
        keys = pa.concat_tables([t.cast(pa.schema([("document_id", pa.string()), ("chunk", pa.int32())]))
                                 for t in suspects])
        counts = keys.group_by(["document_id", "chunk"], use_threads=False).aggregate([([], "count_all")])
        repeats = counts.filter(pc.greater(counts["count_all"], 1))
        if repeats.num_rows:
            r = repeats.slice(0, 1).to_pylist()[0]
            raise TokenizedInputError(f"document {r['document_id']} chunk {r['chunk']} appears {r['count_all']} times "
                                      f"in tokenized_documents ({repeats.num_rows} repeated (document, chunk) keys)")

    def close(self) -> None:
        """Close and remove the spill files."""
        self._close_spills()
        self._key_hashes.close()
        for path in self._files.values():
            path.unlink(missing_ok=True)
        self._files.clear()
