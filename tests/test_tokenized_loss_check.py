"""tokenized_documents' chat_documents_have_loss_tokens check counts rows without loss tokens batch by
batch and names only the first few, so its memory does not grow with the output."""

import pyarrow as pa

from platform_assets.contracts import IOSettings
from platform_assets.defs.tokenized_documents.assets import LOSS_CHECK_EXAMPLES, _rows_without_loss_tokens
from platform_assets.parquet_parts import TableSink
from platform_assets.storage import Storage

SCHEMA = pa.schema([("id", pa.string()), ("chunk", pa.int32()), ("loss_tokens", pa.int64())])


def _write(storage: Storage, rel: str, loss: list[int], batch_rows: int) -> None:
    with TableSink(storage, rel, SCHEMA, IOSettings(batch_rows=batch_rows)) as sink:
        for start in range(0, len(loss), batch_rows):  # one row group per write: several batches to read back
            part = loss[start:start + batch_rows]
            ids = [f"d{start + i}" for i in range(len(part))]
            chunks = [i % 2 for i in range(len(part))]
            sink.write(pa.table({"id": ids, "chunk": chunks, "loss_tokens": part}, schema=SCHEMA))


def test_counts_every_zero_row_and_names_the_first_few_in_order(tmp_path):
    storage = Storage(str(tmp_path / "out"))
    loss = [0 if i % 3 == 0 else 5 for i in range(90)]  # 30 rows without loss tokens, spread over 9 batches
    _write(storage, "tokenized_documents", loss, batch_rows=10)
    count, examples = _rows_without_loss_tokens(storage, "tokenized_documents")
    assert count == 30
    zero_rows = [i for i, v in enumerate(loss) if v == 0][:LOSS_CHECK_EXAMPLES]
    assert examples == [f"d{i}#{(i % 10) % 2}" for i in zero_rows]


def test_an_output_with_loss_everywhere_passes(tmp_path):
    storage = Storage(str(tmp_path / "out"))
    _write(storage, "tokenized_documents", [3] * 25, batch_rows=10)
    assert _rows_without_loss_tokens(storage, "tokenized_documents") == (0, [])
