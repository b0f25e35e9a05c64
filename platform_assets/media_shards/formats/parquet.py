"""`parquet`: one row per sample with the media in `datasets`' own storage (`image` / `audio` structs
of {bytes, path}), the JSON record, and every measured field as a typed column for filtering.

The schema metadata carries the Hugging Face features ("huggingface": {"info": {"features": ...}}),
so `datasets.load_dataset("parquet", data_files=...)` and `Dataset.from_parquet` give `image` as
`Image()` (PIL on access) and `audio` as `Audio()` without a cast. DuckDB and pyarrow read it as is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from platform_assets.media_shards.formats.base import (
    FileEntries,
    MediaFormat,
    MediaRecord,
    MediaSetHeader,
    column,
    declared_layout,
    sample_columns,
)
from platform_assets.media_shards.samples import WHISPER_SHAPE, MediaSample
from platform_assets.packing.formats.base import HashedOutput
from platform_assets.schema import MEDIA_ITEM_TYPE, MEDIA_MEASURED_FIELDS
from platform_assets.storage import StagedDir

NAME = "parquet"
# A row group closes at 64 MiB of payload or 1024 rows: under `datasets`' own 100 MB row groups, so a
# reader holds one image batch, not a whole shard, and random access reads ~64 MiB at most.
ROW_GROUP_BYTES = 64 * 2**20
ROW_GROUP_ROWS = 1024
# datasets.Image / datasets.Audio storage: struct<bytes: binary, path: string> (binary, not
# large_binary: that is what `datasets` matches; one cell holds <= ingest's file limits, far below 2 GiB)
MEDIA_STRUCT = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
FEATURES_TYPE = pa.list_(pa.list_(pa.float32()))
# list<list<float32>>, not datasets' Array2D: that is an Arrow extension type whose files need `datasets`
# to write; `datasets` reads this as List(List(float32)) and `.with_format("numpy")` gives (80, 3000).
DOCUMENT_COLUMNS = ("id", "source", "split", "modality", "uri", "license", "text", "kind", "mime", "sha256")
DICTIONARY_COLUMNS = ["source", "split", "modality", "license", "kind", "mime", "format", "mode"]
_HF_VALUE = {pa.string(): "string", pa.int16(): "int16", pa.int32(): "int32", pa.uint64(): "uint64",
             pa.float32(): "float32", pa.float64(): "float64", pa.bool_(): "bool"}


def arrow_schema(header: MediaSetHeader) -> pa.Schema:
    # every field nullable: `datasets` uses the embedded features only where its own schema equals the file's
    fields = [pa.field(name, pa.string()) for name in DOCUMENT_COLUMNS]
    fields += [pa.field("image", MEDIA_STRUCT), pa.field("audio", MEDIA_STRUCT), pa.field("json", pa.string())]
    fields += [pa.field(name, MEDIA_ITEM_TYPE.field(name).type) for name in MEDIA_MEASURED_FIELDS]
    if header.audio_features:
        fields.append(pa.field("input_features", FEATURES_TYPE))
    schema = pa.schema(fields)
    return schema.with_metadata({"huggingface": json.dumps({"info": {"features": hf_features(schema)}})})


def hf_features(schema: pa.Schema) -> dict[str, Any]:
    """`datasets.Features.to_dict()` of the schema, written by hand (the writer does not import datasets)."""
    out: dict[str, Any] = {}
    for f in schema:
        if f.name == "image":
            out[f.name] = {"_type": "Image"}
        elif f.name == "audio":
            out[f.name] = {"_type": "Audio"}
        elif f.type == FEATURES_TYPE:
            out[f.name] = {"feature": {"feature": {"dtype": "float32", "_type": "Value"}, "_type": "List"},
                           "_type": "List"}
        else:
            out[f.name] = {"dtype": _HF_VALUE[f.type], "_type": "Value"}
    return out


def _features_array(rows: list[np.ndarray | None]) -> pa.Array:
    mels, frames = WHISPER_SHAPE
    present = [r for r in rows if r is not None]
    values = pa.array(np.concatenate([r.reshape(-1) for r in present]) if present else np.zeros(0, np.float32))
    inner = pa.ListArray.from_arrays(pa.array(np.arange(0, len(present) * mels + 1, dtype=np.int32) * frames), values)
    outer_offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([mels if r is not None else 0 for r in rows], out=outer_offsets[1:])
    mask = pa.array([r is None for r in rows], pa.bool_())
    return pa.ListArray.from_arrays(pa.array(outer_offsets), inner, type=FEATURES_TYPE, mask=mask)


class ParquetShardWriter:
    def __init__(self, staged: StagedDir, name: str, rel: str, header: MediaSetHeader):
        self._schema = arrow_schema(header)
        self._rel = rel
        self._out = HashedOutput(staged, name)
        small = [n for n in self._schema.names if n not in ("text", "image", "audio", "json", "input_features")]
        # The media bytes are PNG/JPEG/FLAC already: zstd would spend CPU on both sides for nothing.
        # The rest (JSON, text, the padded frames of input_features) compresses well.
        compression = {c: "zstd" for c in self._schema.names if c not in ("image", "audio")}
        compression.update({"image.bytes": "none", "audio.bytes": "none", "image.path": "zstd", "audio.path": "zstd"})
        if header.audio_features:
            compression.pop("input_features")
            compression["input_features.list.element.list.element"] = "zstd"
        self._writer = pq.ParquetWriter(self._out, self._schema, compression=compression,
                                        use_dictionary=DICTIONARY_COLUMNS, write_statistics=small)
        self._rows: list[MediaSample] = []
        self.buffered_bytes = 0

    def add(self, sample: MediaSample) -> None:
        self._rows.append(sample)
        self.buffered_bytes += sample.payload_bytes
        if self.buffered_bytes >= ROW_GROUP_BYTES or len(self._rows) >= ROW_GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        rows, names = self._rows, self._schema.names
        cols: dict[str, Any] = {name: [s.record[name] if name in s.record else getattr(s, name) for s in rows]
                                for name in DOCUMENT_COLUMNS}
        media = [{"bytes": s.data, "path": f"{s.id}.{s.ext}"} for s in rows]
        cols["image"] = [m if s.kind != "audio" else None for s, m in zip(rows, media, strict=True)]
        cols["audio"] = [m if s.kind == "audio" else None for s, m in zip(rows, media, strict=True)]
        cols["json"] = [s.json_bytes.decode() for s in rows]
        for name in MEDIA_MEASURED_FIELDS:
            cols[name] = [s.measured[name] for s in rows]
        arrays = [pa.array(cols[n], self._schema.field(n).type) for n in names if n != "input_features"]
        if "input_features" in names:
            arrays.append(_features_array([s.features for s in rows]))
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self._schema))
        self._rows, self.buffered_bytes = [], 0

    def close(self) -> FileEntries:
        self.flush()
        self._writer.close()
        return {"data": self._out.entry(self._rel)}


def open_shard(staged: StagedDir, name: str, rel: str, header: MediaSetHeader) -> ParquetShardWriter:
    return ParquetShardWriter(staged, name, rel, header)


def read(fs: pafs.FileSystem, path: str, shard: str) -> Iterator[MediaRecord]:
    """Rows in order, 64 at a time, with pyarrow only (no `datasets`)."""
    with fs.open_input_file(path) as f:
        pf = pq.ParquetFile(f)
        has_features = "input_features" in pf.schema_arrow.names
        columns = ["id", "split", "source", "modality", "text", "image", "audio", "json"]
        for batch in pf.iter_batches(batch_size=64, columns=columns + (["input_features"] if has_features else [])):
            rows = batch.select(columns).to_pylist()
            features: list[np.ndarray | None] = [None] * len(rows)
            if has_features:
                feats = batch.column("input_features")
                for i in range(len(rows)):
                    if feats[i].is_valid:
                        flat = feats[i].values.flatten().to_numpy()
                        features[i] = flat.reshape(len(feats[i]), -1)
            for row, feat in zip(rows, features, strict=True):
                media = row["image"] or row["audio"]
                yield MediaRecord(id=row["id"], split=row["split"], source=row["source"], modality=row["modality"],
                                  text=row["text"], ext=media["path"].rsplit(".", 1)[1], data=media["bytes"],
                                  record=json.loads(row["json"]), features=feat, shard=shard)


def read_ids(fs: pafs.FileSystem, path: str) -> list[str]:
    with fs.open_input_file(path) as f:
        return pq.read_table(f, columns=["id"])["id"].to_pylist()


def layout(header: MediaSetHeader) -> dict:
    encodings = {
        "id": "column id: string",
        "media": "column image (images, pages) or audio (audio), the other null: struct<bytes: binary, path: "
                 "string> = datasets.Image / datasets.Audio storage; path = <id>.<ext>; bytes uncompressed",
        "text": "column text: string",
        "json": "column json: string, the same bytes as the tar's <key>.json",
        "input_features": "column input_features: list<list<float32>>, 80 lists of 3000 (null for images)",
    }
    cols = sample_columns(header, encodings)
    cols += [column(name, str(MEDIA_ITEM_TYPE.field(name).type), "[]", "measured by ingest (schema.py); null where "
                    "it does not apply", f"column {name}") for name in MEDIA_MEASURED_FIELDS]
    return declared_layout(
        f"Parquet, one row per sample in sample order, zstd except the media bytes, row groups of <= "
        f"{ROW_GROUP_ROWS} rows or {ROW_GROUP_BYTES // 2**20} MiB; Hugging Face features in the schema metadata",
        "<split>/<source>/shard-NNNNN.parquet", ["data"], cols)


FORMAT = MediaFormat(NAME, 1, ".parquet", open_shard, read, read_ids, layout)
