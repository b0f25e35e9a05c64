"""Materialization metadata shared by the stages: where, how much, what shape, a preview."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.storage import MANIFEST_NAME, Storage

PREVIEW_ROWS = 5
PREVIEW_CHARS = 120


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in schema])


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    text = text.replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def markdown_preview(storage: Storage, rel_file: str, columns: list[str]) -> str:
    """The first rows of a Parquet file as a markdown table (reads one row group only)."""
    with storage.fs.open_input_file(storage.path(rel_file)) as f:
        pf = pq.ParquetFile(f)
        if pf.metadata.num_rows == 0:
            return "_no rows_"
        rows = pf.read_row_group(0, columns=columns).slice(0, PREVIEW_ROWS).to_pylist()
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "\n".join("| " + " | ".join(_cell(r[c]) for c in columns) + " |" for r in rows)


def counts_table(counts: dict[str, int], key: str, value: str = "count") -> dg.TableMetadataValue:
    schema = dg.TableSchema(columns=[dg.TableColumn(key, "string"), dg.TableColumn(value, "int")])
    return dg.MetadataValue.table([dg.TableRecord({key: k, value: v}) for k, v in counts.items()], schema=schema)


def output_metadata(
    storage: Storage, rel_dir: str, files: dict[str, dict[str, object]], schema: pa.Schema, rows: int
) -> dict[str, object]:
    data_files = sorted(n for n in files if n.startswith("part-"))
    return {
        "uri": dg.MetadataValue.path(storage.uri(rel_dir)),
        "rows": rows,
        "dagster/row_count": rows,
        "bytes": sum(int(files[n]["bytes"]) for n in data_files),
        "files": len(data_files),
        "manifest": dg.MetadataValue.path(storage.uri(f"{rel_dir}/{MANIFEST_NAME}")),
        "dagster/column_schema": column_schema(schema),
    }


def arrow_table(table: pa.Table, max_rows: int = 100) -> dg.TableMetadataValue:
    """A small Arrow table as a Dagster table (floats rounded to 6 places)."""
    schema = dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in table.schema])
    records = [
        dg.TableRecord({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()})
        for row in table.slice(0, max_rows).to_pylist()
    ]
    return dg.MetadataValue.table(records, schema=schema)
