"""One builder of documents-schema record batches for the unit tests."""

from collections.abc import Sequence

import pyarrow as pa

from platform_assets.schema import DOCUMENTS_SCHEMA


def documents_batch(
    texts: Sequence[str],
    *,
    modalities: Sequence[str] | None = None,
    ids: Sequence[str] | None = None,
    id_prefix: str = "d",
    source: str = "s",
    uris: Sequence[str] | None = None,
    license: str | None = None,
    meta: str | None = None,
    media: Sequence[list[dict] | None] | None = None,
    schema: pa.Schema = DOCUMENTS_SCHEMA,
) -> pa.RecordBatch:
    n = len(texts)
    return pa.RecordBatch.from_pydict(
        {
            "id": list(ids) if ids else [f"{id_prefix}{i}" for i in range(n)],
            "source": [source] * n,
            "text": list(texts),
            "modality": list(modalities) if modalities else ["text"] * n,
            "uri": list(uris) if uris else ["u"] * n,
            "license": [license] * n,
            "meta": [meta] * n,
            "ingested_at": [None] * n,
            "media": list(media) if media else [None] * n,
        },
        schema=schema,
    )
