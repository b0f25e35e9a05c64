"""`python -m platform_assets` (or `platform-assets`): the pipeline from a terminal.

sample     write the sample corpus that configs/sample.yaml reads
validate   check a pipeline config (keys, types, source paths)
run        materialize the pipeline on the Dagster instance in $DAGSTER_HOME (default:
           dagster_home/), so the runs show up in the web UI: ingest and clean every configured
           source and compute its dedup keys (one run per source partition), group the LSH band
           values (one run over the 8 bucket partitions), then deduplicate, split, tokenize and pack
           (corpus_job), record the shards as a DVC version (release_job) and train on it
           (training_job); `--until` stops after a stage
query      run SQL with DuckDB over the outputs (views: raw_documents, quarantine,
           cleaned_documents, cleaning_exclusions, deduplicated_documents, duplicates,
           dedup_exclusions, dataset_splits, tokenized_documents, tokenize_exclusions,
           provenance, packing_exclusions, media_samples, media_exclusions)
spot-check a deterministic sample of the documents a rule removed, with the value that tripped it
           and the start of the text: `spot-check --rule gopher_quality.stop_words -n 20`
explain    where a document is in the packed shards, or why it is not (quarantined, filtered,
           deduplicated, dropped by packing): `explain <document id>`
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from platform_assets.cli_progress import console_progress
from platform_assets.config import DEFAULT_CONFIG_ENV, REPO_ROOT, ConfigError, PipelineConfig, load_config
from platform_assets.ingest.file_partitions import PartitionKeyError


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


def selected_partition_keys(cfg: PipelineConfig, sources: str | None) -> list[str]:
    """The partitions `run` materializes: every configured one, or those of `--sources` (a source's
    name stands for all its file partitions; `web.03` for one of them)."""
    if not sources:
        return cfg.partition_keys()
    keys: list[str] = []
    for item in sources.split(","):
        if item in cfg.source_names():
            keys += [k for k in cfg.partition_keys() if cfg.source_partition(k).source == item]
            continue
        try:
            keys.append(cfg.source_partition(item).key)
        except PartitionKeyError as err:
            raise ConfigError(f"--sources: {err}") from None
    return list(dict.fromkeys(keys))


def cmd_run(args: argparse.Namespace) -> int:
    config_path = _use_config(args.config)
    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / "dagster_home"))
    cfg = load_config(config_path)
    names = selected_partition_keys(cfg, args.sources)
    cfg.check_source_paths(list(dict.fromkeys(cfg.source_partition(k).source for k in names)))

    import dagster as dg

    from platform_assets.definitions import defs
    from platform_assets.defs.dead_runs import fail_dead_runs
    from platform_assets.defs.raw_documents.partitions import sync_source_keys

    instance = dg.DagsterInstance.get()
    if dead := fail_dead_runs(instance):  # else a killed run's `dvc`/`gpu` pool slot blocks this one forever
        print(f"marked {len(dead)} killed run(s) failed and freed their pool slots: {', '.join(dead)}")
    sync_source_keys(instance, cfg.partition_keys())  # every configured key, whatever --sources selects
    definitions = defs()
    per_source = definitions.resolve_job_def("per_source_job")
    log_file = Path(args.log_file) if args.log_file else Path(os.environ["DAGSTER_HOME"]) / "logs" / RUN_LOG_FILE
    logs = _run_loggers(args.verbose, log_file)
    with console_progress(args.progress):
        failed = _run_jobs(args, definitions, instance, per_source, names, logs, cfg.training.more_run_configs)
    print(f"outputs under {cfg.storage_root}; runs recorded in {os.environ['DAGSTER_HOME']} (see `dagster dev`); "
          f"their events also in {log_file}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _run_jobs(args: argparse.Namespace, definitions, instance, per_source, names: list[str], logs: dict,
              more_run_configs: list[str]) -> list[str]:
    """The per-source runs, then the global jobs (unless a source failed or --sources was given):
    the summary table's lines as each finishes; the names of what failed."""
    import dagster as dg

    failed = []
    print(f"{'source':<16} {'status':<8} {'raw':>7} {'quarantined':>12} {'cleaned':>8}  checks")
    # --until a per-source asset: that asset and what it needs of the per-source chain
    chain = PER_SOURCE_CHAIN[: PER_SOURCE_CHAIN.index(args.until) + 1] if args.until in PER_SOURCE_CHAIN else None
    only_until = {"asset_selection": [dg.AssetKey(a) for a in chain]} if chain and chain != PER_SOURCE_CHAIN else {}
    for name in names:
        result = per_source.execute_in_process(partition_key=name, instance=instance, raise_on_error=False,
                                               run_config=logs, **only_until)
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
        print("deduplication and later stages skipped: " + ("some sources failed" if failed else "--sources given"))
    else:
        failed += _run_global_jobs(definitions, instance, args.until, logs, more_run_configs)
    return failed


# The global jobs in order and the assets each runs (for --until; the summary line shows what ran).
GLOBAL_JOBS = (
    ("band_buckets_job", ("dedup_band_buckets",)),  # one run over every bucket partition (_run_band_buckets)
    ("corpus_job", ("deduplicated_documents", "dataset_splits", "tokenizer", "tokenized_documents", "packed_shards",
                    "media_shards")),
    ("release_job", ("dataset_version",)),
    ("training_job", ("training_run",)),
)
# per_source_job's assets in order: dedup_signatures (each partition's dedup keys) runs with its source
PER_SOURCE_CHAIN = ("raw_documents", "cleaned_documents", "dedup_signatures")
UNTIL_CHOICES = (*PER_SOURCE_CHAIN, *(a for _, assets in GLOBAL_JOBS for a in assets))
WHOLE_JOB = frozenset({"packed_shards"})


def _until_selection(definitions, job_assets: tuple[str, ...], until: str):
    """The assets of a job that `--until <asset>` needs: that asset and what it depends on in the job
    (`--until dataset_splits` runs dedup and splits only); None: the whole job. `packed_shards` keeps
    the meaning it always had, the whole corpus job (media shards too), as dvc.yaml's stages use it."""
    import dagster as dg

    if until not in job_assets or until in WHOLE_JOB:
        return None
    selection = dg.AssetSelection.assets(until).upstream() & dg.AssetSelection.assets(*job_assets)
    return sorted(selection.resolve(definitions.resolve_asset_graph()))


def _summary(job: str, result) -> str:
    m = lambda asset, key: _metadata(result, asset, key)  # noqa: E731
    if job == "corpus_job":
        return (f"dedup {m('deduplicated_documents', 'documents_in')} -> {m('deduplicated_documents', 'rows')} "
                f"documents, split {m('dataset_splits', 'rows')}, tokens {m('tokenized_documents', 'tokens')}, "
                f"sequences {m('packed_shards', 'sequences')} (efficiency {m('packed_shards', 'efficiency')}), "
                f"media samples {m('media_shards', 'samples')}")
    if job == "release_job":
        return f"dvc md5 {m('dataset_version', 'dvc_md5')}"
    loss = m("training_run", "final_loss")
    line = (f"steps {m('training_run', 'steps')}, final loss {f'{loss:.4f}' if isinstance(loss, float) else loss}, "
            f"tokens {m('training_run', 'tokens_seen')}")
    seen = m("training_run", "modalities_seen")
    if isinstance(seen, dict):  # a media model: what it was trained on
        line += ", samples " + " + ".join(f"{n} {k}" for k, n in sorted(seen.items()) if n)
    return line


RUN_LOG_FILE = "platform-run.log"


def _run_loggers(verbose: bool, log_file: Path) -> dict:
    """Run config for the loggers: every event still goes to the instance (the UI's run view) and to
    `log_file`, but the terminal shows warnings and errors only, not ~280 DEBUG lines between the
    summary lines; `--verbose` shows them all."""
    return {"loggers": {"console": {"config": {"log_level": "DEBUG" if verbose else "WARNING"}},
                        "run_log_file": {"config": {"path": str(log_file)}}}}


def _job_runs(job: str, more_run_configs: list[str]) -> list[tuple[str, dict]]:
    """(summary label, op config) of each run of `job`: training_job once with the pipeline config's
    run_config, then once per `training.more_run_configs` entry (labelled with the model it trains)."""
    label = job.removesuffix("_job")
    if job != "training_job":
        return [(label, {})]
    return [(label, {})] + [(f"{label}:{Path(rc).stem.removeprefix('training_').removesuffix('_sample')}",
                             {"ops": {"training_run": {"config": {"run_config": rc}}}}) for rc in more_run_configs]


def _run_global_jobs(definitions, instance, until: str, logs: dict | None = None,
                     more_run_configs: tuple[str, ...] | list[str] = ()) -> list[str]:
    if until in PER_SOURCE_CHAIN:
        return []
    for job, assets in GLOBAL_JOBS:
        if job == "band_buckets_job":
            if failed := _run_band_buckets(definitions, instance, logs):
                return failed
            if until in assets:
                break
            continue
        selection = _until_selection(definitions, assets, until)
        for label, op_config in _job_runs(job, list(more_run_configs)):
            result = definitions.resolve_job_def(job).execute_in_process(
                instance=instance, raise_on_error=False, run_config={**(logs or {}), **op_config},
                **({"asset_selection": selection} if selection else {}))
            print(f"{label:<16} {'ok' if result.success else 'FAILED':<8} {_summary(job, result)}  "
                  f"{_checks_summary(result)}")
            if not result.success:
                return [label]
        if until in assets:
            break
    return []


def _run_band_buckets(definitions, instance, logs: dict | None) -> list[str]:
    """band_buckets_job once over every bucket partition (a partition range, as a single-run backfill
    runs it; each bucket grouped and materialized on its own): one summary line for all of them."""
    from platform_assets.dedup.band_partitions import bucket_keys
    from platform_assets.defs.dedup_band_buckets.assets import ALL_BUCKETS_RUN_TAGS

    keys = bucket_keys()
    result = definitions.resolve_job_def("band_buckets_job").execute_in_process(
        instance=instance, raise_on_error=False, run_config=logs or {}, tags=ALL_BUCKETS_RUN_TAGS)
    done = {m.partition: m.metadata for m in result.asset_materializations_for_node("dedup_band_buckets")}
    # one step, whose events come at its end: a failure records none (those grouped before it are committed)
    missing = [k for k in keys if k not in done]
    # a blocking check that fails comes after every materialization: the buckets its evaluation names failed
    named = {b.strip() for c in result.get_asset_check_evaluations() if not c.passed
             for b in str(c.metadata["failed_buckets"].value).split(",") if b.strip()}
    failed = [k for k in keys if k in named or k in missing] or ([] if result.success else keys)
    shared = sum(int(m["shared_keys"].value) for m in done.values())
    notes = {str(m["note"].value) for m in done.values() if not m["used"].value}
    what = ("; ".join(sorted(notes)) or f"{shared} shared band keys") if done else "none materialized"
    checks = f"  {_checks_summary(result)}" if done else ""
    print(f"{'buckets':<16} {'FAILED' if failed else 'ok':<8} {len(keys)} partitions: {what}"
          + (f" (failed: {', '.join(failed)})" if failed else "") + checks)
    return [f"buckets {k}" for k in failed]


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
    import duckdb

    from platform_assets.query import connect, output_views, registered_views
    from platform_assets.storage import Storage

    cfg = load_config(_use_config(args.config))
    storage = Storage(cfg.storage_root, cfg.s3_settings())
    views = output_views(cfg.partition_keys())
    con = connect(storage, views)
    try:
        rel = con.sql(args.sql)
    except duckdb.CatalogException as err:
        # a view whose output does not exist yet: say which asset makes it, not DuckDB's catalog error
        registered = registered_views(con)
        missing = [v for v in views if v not in registered and re.search(rf"\b{v}\b", args.sql)]
        if not missing:
            print(f"query: {str(err).splitlines()[0]} (views: {', '.join(views)})", file=sys.stderr)
            return 2
        for view in missing:
            asset = views[view][0]
            print(f"query: `{view}` has no data yet under {cfg.storage_root}: materialize {asset} first "
                  f"(python -m platform_assets run --until {asset})", file=sys.stderr)
        return 2
    if rel is not None:
        rel.show(max_width=200, max_rows=args.max_rows)
    return 0


def cmd_spot_check(args: argparse.Namespace) -> int:
    from platform_assets.query import output_views
    from platform_assets.spot_checks import rules_removed, spot_check, to_markdown
    from platform_assets.storage import Storage

    cfg = load_config(_use_config(args.config))
    storage = Storage(cfg.storage_root, cfg.s3_settings())
    views = output_views(cfg.partition_keys())
    checks = spot_check(storage, args.rule, args.n, args.seed, args.source, kept=args.kept, views=views)
    if not checks:
        known = rules_removed(storage, args.source, views)
        what = "kept documents (materialize dataset_splits first)" if args.kept else \
            f"documents removed by {args.rule!r}" if args.rule else "removed documents"
        print(f"spot-check: no {what}; rules with removals: "
              + (", ".join(f"{r} ({n})" for r, n in known.items()) or "none yet (run the pipeline first)"),
              file=sys.stderr)
        return 1
    print(to_markdown(checks))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from platform_assets.media_shards.index import locate_sample
    from platform_assets.packing.provenance import explain_document
    from platform_assets.storage import Storage

    cfg = load_config(_use_config(args.config))
    storage = Storage(cfg.storage_root, cfg.s3_settings())
    if not storage.exists("raw_documents"):
        print(f"explain: no outputs under {cfg.storage_root} yet: materialize them first "
              "(python -m platform_assets run)", file=sys.stderr)
        return 2
    status = 0
    for document_id in args.document_ids:
        explanation = explain_document(storage, document_id)
        # an image, page or clip lives in the media shard set, not in the token shards
        media = locate_sample(storage, "media_shards/_all", document_id)
        if media and not explanation.packed and not explanation.removals:
            print(f"{document_id}: a media sample (images, PDF pages and clips are in media_shards, not in the "
                  "token shards)")
        else:
            print(explanation.describe())
        for fmt, shard in media:
            print(f"  media sample in {fmt} shard {shard}")
        status = status or (0 if explanation.packed or explanation.removals or media else 1)
    return status


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
            p.add_argument("--sources", help="comma-separated subset of the configured sources (a source split "
                                             "by `file_partitions`: all its partitions, or `<name>.03` for one)")
            p.add_argument("--verbose", action="store_true",
                           help="print Dagster's event stream (always recorded on the instance, shown in the UI, "
                                "and appended to the log file)")
            p.add_argument("--log-file", help=f"where the runs' events are appended (default: "
                                              f"$DAGSTER_HOME/logs/{RUN_LOG_FILE})")
            p.add_argument("--progress", choices=("auto", "live", "plain", "off"), default="auto",
                           help="progress of running steps: live bars in a terminal, plain lines every "
                                "10 s otherwise (auto)")
            p.add_argument("--until", choices=UNTIL_CHOICES, default="training_run",
                           help="last stage to materialize, with what it needs (packed_shards: the whole corpus "
                                "job, media shards included; dvc.yaml's stages stop there: DVC records the version "
                                "itself)")
        p.set_defaults(func=func)
    p = sub.add_parser("spot-check", help="a deterministic sample of what a rule removed (or of the kept documents)")
    p.add_argument("--rule", help="a rule (gopher_quality.stop_words) or rule group (gopher_quality, "
                                  "exact_duplicate); default: every rule")
    p.add_argument("-n", type=int, default=20, help="documents to show (default 20)")
    p.add_argument("--seed", type=int, default=0, help="another seed gives another sample")
    p.add_argument("--source", help="only this source")
    p.add_argument("--kept", action="store_true", help="sample kept documents (the split output) instead")
    p.add_argument("--config")
    p.set_defaults(func=cmd_spot_check)
    p = sub.add_parser("query", help="SQL over the outputs with DuckDB")
    p.add_argument("sql")
    p.add_argument("--config")
    p.add_argument("--max-rows", type=int, default=40)
    p.set_defaults(func=cmd_query)
    p = sub.add_parser("explain", help="where a document is in the packed shards, or why it is not")
    p.add_argument("document_ids", nargs="+", metavar="DOCUMENT_ID")
    p.add_argument("--config")
    p.set_defaults(func=cmd_explain)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
