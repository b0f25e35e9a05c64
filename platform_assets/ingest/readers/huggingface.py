"""Hugging Face `datasets`: hub ids (streamed) and local dataset directories.

The hub code path is the real one (`load_dataset(..., streaming=True)`); offline it works with local
paths: a directory of data files (json/csv/parquet/text) or a directory written by `save_to_disk`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import orjson
import pyarrow.fs as pafs

from platform_assets.ingest.chat import chat_record
from platform_assets.ingest.media_records import MediaReader
from platform_assets.ingest.readers.fields import Rejected, extract_text, meta_json
from platform_assets.ingest.records import QuarantineSink, ReadContext, Record
from platform_assets.ingest.roots import RootGuard
from platform_assets.ingest.settings import HuggingFaceSource
from platform_assets.media.settings import MediaSettings
from platform_assets.schema import QuarantineReason

HF_BATCH_ROWS = 1024


class DatasetLoadError(RuntimeError):
    pass


def _is_saved_dataset(location: str) -> bool:
    return os.path.isdir(location) and any(
        os.path.exists(os.path.join(location, marker)) for marker in ("dataset_dict.json", "state.json")
    )


def load_hf_dataset(src: HuggingFaceSource, location: str, streaming: bool = False):
    """streaming: stream even where the source says not to (a subset always streams)."""
    import datasets

    try:
        if _is_saved_dataset(location):
            ds = datasets.load_from_disk(location)
            return ds[src.split] if isinstance(ds, datasets.DatasetDict) else ds
        return datasets.load_dataset(location, src.config_name, split=src.split, streaming=streaming or src.streaming,
                                     data_files=src.data_files, **src.builder_kwargs)
    except Exception as err:  # datasets raises many types (FileNotFoundError, ConnectionError, ValueError)
        offline = " (HF_HUB_OFFLINE is set: hub ids cannot be fetched)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise DatasetLoadError(f"source {src.name!r}: cannot load dataset {location!r}{offline}: {err}") from err


def media_column(ds, src: HuggingFaceSource) -> str | None:
    """The `Image` / `Audio` column whose rows become media documents (see HuggingFaceSource.media_field)."""
    import datasets

    features = ds.features or {}
    found = [name for name, f in features.items() if isinstance(f, datasets.Image | datasets.Audio)]
    if src.media_field is not None:
        if src.media_field not in features:
            raise DatasetLoadError(f"source {src.name!r}: no column {src.media_field!r} (columns: {list(features)})")
        return src.media_field
    return found[0] if len(found) == 1 else None


def read_huggingface(
    src: HuggingFaceSource, location: str, quarantine: QuarantineSink, mtime_s: int | None,
    media: MediaSettings | None = None,
) -> Iterator[Record]:
    ds = load_hf_dataset(src, location)
    base = f"{location}[{src.split}]"
    column = media_column(ds, src)
    if column is not None:
        yield from _media_rows(ds, src, column, base, location, quarantine, mtime_s, media or MediaSettings())
        return
    row = 0
    for batch in ds.iter(batch_size=HF_BATCH_ROWS):
        columns = list(batch)
        n = len(batch[columns[0]]) if columns else 0
        for i in range(n):
            uri = f"{base}#row={row + i}"
            record = {c: batch[c][i] for c in columns}
            try:
                if src.chat is not None:
                    text, meta = chat_record(record, src.chat, src.meta_fields)
                    yield Record(text, uri, meta_json(meta, None, None), mtime_s)
                    continue
                text = extract_text(record, src.text_field)
                yield Record(text, uri, meta_json(record, src.text_field, src.meta_fields), mtime_s)
            except Rejected as rej:
                quarantine.add(uri, rej.reason, rej.detail)
        row += n


def _media_rows(ds, src: HuggingFaceSource, column: str, base: str, location: str, quarantine: QuarantineSink,
                mtime_s: int | None, media: MediaSettings) -> Iterator[Record]:
    """Rows of a dataset with an Image/Audio column: the column's bytes (decode=False: datasets would
    otherwise decode audio through torchcodec and images into PIL objects we would re-encode) go through
    the media rooms; the text field, when present, is the caption or transcript; a `path` without
    bytes is read only inside the dataset's directory."""
    import datasets

    feature = ds.features[column]
    kind = "image" if isinstance(feature, datasets.Image) else "audio"
    ds = ds.cast_column(column, type(feature)(decode=False))
    ctx = ReadContext(source=src.name, fs=pafs.LocalFileSystem(), quarantine=quarantine, max_document_bytes=2**62,
                      snapshot_s=mtime_s)
    reader = MediaReader(ctx, media)
    guard = RootGuard.for_base(location if os.path.isdir(location) else os.path.dirname(location))
    row = 0
    for batch in ds.iter(batch_size=HF_BATCH_ROWS):
        columns = list(batch)
        for i in range(len(batch[column])):
            uri = f"{base}#row={row + i}"
            record = {c: batch[c][i] for c in columns}
            value = record.pop(column) or {}
            try:
                if src.chat is not None:
                    text, meta = chat_record(record, src.chat, src.meta_fields)
                else:
                    raw = record.get(src.text_field)
                    text = raw if isinstance(raw, str) else ""
                    meta = {k: v for k, v in record.items() if k != src.text_field and v is not None
                            and (src.meta_fields is None or k in src.meta_fields)}
                data = value.get("bytes")
                file_uri = f"{uri}/{column}"
                if not data and value.get("path"):
                    path = guard.resolve(value["path"])
                    with open(path, "rb") as f:
                        data = f.read()
                    file_uri = path
                meta = orjson.loads(meta_json(meta, None, None) or "{}")  # the same JSON rules as text rows
                yield from reader.documents(data or b"", file_uri, text=text, meta=meta, mtime_s=mtime_s,
                                            doc_uri=uri, expected=kind)
            except Rejected as rej:
                quarantine.add(uri, rej.reason, rej.detail)
            except OSError as err:
                quarantine.add(uri, QuarantineReason.MISSING_FILE, f"{value.get('path')!r}: {err}")
        row += len(batch[column])
