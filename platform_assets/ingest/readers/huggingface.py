"""Hugging Face `datasets`: hub ids (streamed) and local dataset directories.

The hub code path is the real one (`load_dataset(..., streaming=True)`); offline it works with local
paths: a directory of data files (json/csv/parquet/text) or a directory written by `save_to_disk`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from platform_assets.ingest.chat import chat_record
from platform_assets.ingest.readers.fields import Rejected, extract_text, meta_json
from platform_assets.ingest.records import QuarantineSink, Record
from platform_assets.ingest.settings import HuggingFaceSource

HF_BATCH_ROWS = 1024


class DatasetLoadError(RuntimeError):
    pass


def _is_saved_dataset(location: str) -> bool:
    return os.path.isdir(location) and any(
        os.path.exists(os.path.join(location, marker)) for marker in ("dataset_dict.json", "state.json")
    )


def load_hf_dataset(src: HuggingFaceSource, location: str):
    import datasets

    try:
        if _is_saved_dataset(location):
            ds = datasets.load_from_disk(location)
            return ds[src.split] if isinstance(ds, datasets.DatasetDict) else ds
        return datasets.load_dataset(location, src.config_name, split=src.split, streaming=src.streaming)
    except Exception as err:  # datasets raises many types (FileNotFoundError, ConnectionError, ValueError)
        offline = " (HF_HUB_OFFLINE is set: hub ids cannot be fetched)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise DatasetLoadError(f"source {src.name!r}: cannot load dataset {location!r}{offline}: {err}") from err


def read_huggingface(
    src: HuggingFaceSource, location: str, quarantine: QuarantineSink, mtime_s: int | None
) -> Iterator[Record]:
    ds = load_hf_dataset(src, location)
    base = f"{location}[{src.split}]"
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
