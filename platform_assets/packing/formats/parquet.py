"""`parquet`: one row per sample, one row group per run of <= ROWS_PER_ROW_GROUP samples, zstd.
Readable by `datasets.load_dataset("parquet", data_files=...)`, DuckDB and any Arrow reader."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from platform_assets.packing.formats.base import (
    FileEntries,
    FilePerShardSetWriter,
    HashedOutput,
    SetHeader,
    ShardFormat,
    declared_layout,
    sample_columns,
)
from platform_assets.packing.samples import ROWS_PER_ROW_GROUP, ShardSamples, ShardSetError
from platform_assets.storage import StagedDir

NAME = "parquet"


def _list_array(values: np.ndarray, offsets: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, value_type))


def arrow_schema(has_loss_mask: bool) -> pa.Schema:
    fields = [pa.field("input_ids", pa.list_(pa.int32())), pa.field("seqlens", pa.list_(pa.int32()))]
    if has_loss_mask:
        fields.append(pa.field("loss_mask", pa.list_(pa.uint8())))
    return pa.schema(fields)


class ParquetShardWriter:
    """One row per sample, one row group per run (the set writer cuts runs at ROWS_PER_ROW_GROUP)."""

    def __init__(self, staged: StagedDir, fmt_dir: str, name: str, shard: int, header: SetHeader):
        self._schema = arrow_schema(header.has_loss_mask)
        self._rel = f"{name}.parquet"
        self._out = HashedOutput(staged, f"{fmt_dir}/{self._rel}")
        # No min/max statistics: they say nothing useful about token ids and cost a pass over every
        # value. Zstd at pyarrow's default level, as SHARD_FORMAT.md says.
        self._writer = pq.ParquetWriter(self._out, self._schema, compression="zstd", use_dictionary=False,
                                        write_statistics=False)

    def add(self, run: ShardSamples) -> None:
        n, seq_len = run.tokens.shape
        row_offsets = np.arange(0, (n + 1) * seq_len, seq_len, dtype=np.int64)
        if row_offsets[-1] >= 2**31:
            raise ShardSetError(f"{n} samples of {seq_len} tokens overflow a Parquet list's int32 offsets")
        columns = [
            _list_array(run.tokens.reshape(-1).astype(np.int32), row_offsets, pa.int32()),
            _list_array(run.seqlens.astype(np.int32), run.seqptr, pa.int32()),
        ]
        if run.loss_mask is not None:
            columns.append(_list_array(run.loss_mask.reshape(-1), row_offsets, pa.uint8()))
        self._writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=self._schema))

    def close(self) -> FileEntries:
        self._writer.close()
        return {"data": self._out.entry(self._rel)}


def open_set(staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader) -> FilePerShardSetWriter:
    return FilePerShardSetWriter(staged, fmt_dir, set_prefix, header, ParquetShardWriter)


def read(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    with fs.open_input_file(f"{base}/{shard['files']['data']['path']}") as f:
        table = pq.read_table(f)
    n, seq_len = table.num_rows, index["seq_len"]
    ids = table["input_ids"].combine_chunks()
    seqlens = table["seqlens"].combine_chunks()
    seqptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(seqlens.value_lengths().to_numpy(zero_copy_only=False), out=seqptr[1:])
    tokens = ids.flatten().to_numpy().astype(index["token_dtype"]).reshape(n, seq_len)
    mask = None
    if index["has_loss_mask"]:
        mask = table["loss_mask"].combine_chunks().flatten().to_numpy().reshape(n, seq_len)
    return ShardSamples(tokens, seqlens.flatten().to_numpy().astype(np.int32), seqptr, mask)


def layout(header: SetHeader) -> dict:
    encodings = {"input_ids": "list<int32>, seq_len values (token ids widened to int32)",
                 "seqlens": "list<int32>", "loss_mask": "list<uint8>, seq_len values"}
    return declared_layout(
        f"Parquet, one row per sample in sample order, zstd, one row group per <= {ROWS_PER_ROW_GROUP} samples",
        "<split>/<source>/shard-NNNNN.parquet", ["data"],
        sample_columns(header, encodings, input_ids_dtype="int32"))


# 1.1 added index.json's `layout`; files and every other key are as in 1.0.
FORMAT = ShardFormat(NAME, 1, open_set, read, layout, minor=1)
