"""`python -m platform_assets` (or `platform-assets`): the pipeline from a terminal.

sample     write the sample corpus that configs/sample.yaml reads
validate   check a pipeline config (keys, types, source paths)
run        materialize the pipeline on the Dagster instance in $DAGSTER_HOME (default:
           dagster_home/), so the runs show up in the web UI: ingest and clean every configured
           source (one run per source partition), then deduplicate across sources and split
query      run SQL with DuckDB over the outputs (views: raw_documents, quarantine,
           cleaned_documents, cleaning_exclusions, deduplicated_documents, duplicates,
           dedup_exclusions, dataset_splits)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from platform_assets.config import DEFAULT_CONFIG_ENV, REPO_ROOT, ConfigError, load_config


def _use_config(path: str | None) -> str:
    """Resolve and export the config path, so the Dagster resource loads the same file."""
    resolved = (
        str(Path(path).resolve())
        if path
        else os.environ.get(DEFAULT_CONFIG_ENV) or str(REPO_ROOT / "configs" / "sample.yaml")
    )
    os.environ[DEFAULT_CONFIG_ENV] = resolved
    return resolved


def cmd_sample(args: argparse.Namespace) -> int:
    from platform_assets.sample_corpus import DEFAULT_OUT, write_sample_corpus

    out = Path(args.out) if args.out else DEFAULT_OUT
    written = write_sample_corpus(out)
    print(f"sample corpus written to {out}: " + ", ".join(f"{k} ({v} files)" for k, v in sorted(written.items())))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = load_config(_use_config(args.config))
    cfg.check_source_paths()
    print(f"config OK: {len(cfg.sources)} sources ({', '.join(cfg.source_names())}); storage {cfg.storage_root}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    config_path = _use_config(args.config)
    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / "dagster_home"))
    cfg = load_config(config_path)
    names = args.sources.split(",") if args.sources else cfg.source_names()
    cfg.check_source_paths(names)

    import dagster as dg

    from platform_assets.definitions import defs
    from platform_assets.defs.raw_documents.partitions import source_partitions

    instance = dg.DagsterInstance.get()
    known = set(instance.get_dynamic_partitions(source_partitions.name))
    if missing := [n for n in names if n not in known]:
        instance.add_dynamic_partitions(source_partitions.name, missing)
    definitions = defs()
    per_source = definitions.resolve_job_def("per_source_job")
    failed = []
    print(f"{'source':<16} {'status':<8} {'raw':>7} {'quarantined':>12} {'cleaned':>8}  checks")
    for name in names:
        result = per_source.execute_in_process(partition_key=name, instance=instance, raise_on_error=False)
        rows = _metadata(result, "raw_documents", "rows")
        cleaned = _metadata(result, "cleaned_documents", "rows")
        quarantined = _metadata(result, "raw_documents", "quarantined")
        if not result.success:
            failed.append(name)
        print(
            f"{name:<16} {'ok' if result.success else 'FAILED':<8} {rows:>7} {quarantined:>12} {cleaned:>8}  "
            f"{_checks_summary(result)}"
        )
    if failed or args.sources:
        print("deduplication and splits skipped: " + ("some sources failed" if failed else "--sources given"))
    else:
        result = definitions.resolve_job_def("corpus_job").execute_in_process(instance=instance, raise_on_error=False)
        status = "ok" if result.success else "FAILED"
        dedup_in = _metadata(result, "deduplicated_documents", "documents_in")
        print(
            f"{'corpus':<16} {status:<8} dedup {dedup_in}"
            f" -> {_metadata(result, 'deduplicated_documents', 'rows')} documents, split "
            f"{_metadata(result, 'dataset_splits', 'rows')}  {_checks_summary(result)}"
        )
        if not result.success:
            failed.append("corpus")
    print(f"outputs under {cfg.storage_root}; runs recorded in {os.environ['DAGSTER_HOME']} (see `dagster dev`)")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _metadata(result, asset: str, key: str) -> object:
    for mat in result.asset_materializations_for_node(asset):
        if key in mat.metadata:
            return mat.metadata[key].value
    return "-"


def _checks_summary(result) -> str:
    checks = result.get_asset_check_evaluations()
    failing = [c.check_name for c in checks if not c.passed]
    return f"{len(checks) - len(failing)}/{len(checks)} checks passed" + (
        f" (failed: {', '.join(failing)})" if failing else ""
    )


def cmd_query(args: argparse.Namespace) -> int:
    from platform_assets.query import connect
    from platform_assets.storage import Storage

    cfg = load_config(_use_config(args.config))
    storage = Storage(cfg.storage_root, cfg.s3_settings())
    con = connect(
        storage,
        {
            "raw_documents": ("raw_documents", "*/part-*.parquet"),
            "quarantine": ("raw_documents", "*/_quarantine.parquet"),
            "cleaned_documents": ("cleaned_documents", "*/part-*.parquet"),
            "cleaning_exclusions": ("cleaned_documents", "*/_exclusions.parquet"),
            "deduplicated_documents": ("deduplicated_documents", "_all/part-*.parquet"),
            "duplicates": ("deduplicated_documents", "_all/_duplicates.parquet"),
            "dedup_exclusions": ("deduplicated_documents", "_all/_exclusions.parquet"),
            "dataset_splits": ("dataset_splits", "_all/part-*.parquet"),
        },
    )
    rel = con.sql(args.sql)
    if rel is not None:
        rel.show(max_width=200, max_rows=args.max_rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="platform-assets", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("sample", help="write the sample corpus")
    p.add_argument("--out", help="output folder (default: data/sample)")
    p.set_defaults(func=cmd_sample)
    for name, func, helptext in (
        ("validate", cmd_validate, "check a pipeline config"),
        ("run", cmd_run, "materialize the pipeline"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--config", help=f"pipeline YAML (default: ${DEFAULT_CONFIG_ENV} or configs/sample.yaml)")
        if name == "run":
            p.add_argument("--sources", help="comma-separated subset of the configured sources")
        p.set_defaults(func=func)
    p = sub.add_parser("query", help="SQL over the outputs with DuckDB")
    p.add_argument("sql")
    p.add_argument("--config")
    p.add_argument("--max-rows", type=int, default=40)
    p.set_defaults(func=cmd_query)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
