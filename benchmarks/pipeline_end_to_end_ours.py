"""pipeline_end_to_end's side "ours": the config (the peer's four filters as our presets) and the two ways
of running our graph on it, the CLI's main job in one process (`cli`, the default: what users run) or
each asset in a fresh process as pipeline_scaling runs them (`stages`: splits CPU into Dagster start-up
and stage work). The benchmark, the peer and the check are in pipeline_end_to_end.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO_ROOT, Prepared, Spec, log_tail, run_reaped

OURS_RUNNERS = ("cli", "stages")  # E2E_OURS_RUNNER: see run_ours


def ours_overrides(recipe: str, alpha: bool) -> dict[str, Any]:
    """Over pipeline_scaling's config: the peer's four filters as our presets, in its order.

    `languages: null`: datatrove's filters judge every document, whatever its language (ours' presets
    are scoped to English by default). Thresholds: the presets' defaults, which are datatrove's
    (platform_assets/cleaning/presets.py); C4's terminal-punctuation line filter off for `fineweb`, as
    FineWeb ran it and as our `quality:` default has it. Language ID stays as pipeline_scaling
    configures it (min_score 0.5, every language allowed).

    The removal gates (blocking checks on cleaned_documents: 0.9 of a source in all, 0.6 per rule
    group) are raised to 1.0: the four filters remove 95% of the code source (C4's curly-bracket rule
    any file with a brace), which is what running the web recipe on code does, not a broken rule. The
    checks still run."""
    c4: dict[str, Any] = {"preset": "c4", "languages": None}
    if recipe == "fineweb":
        c4["filter_no_terminal_punct"] = False
    gopher_quality: dict[str, Any] = {"preset": "gopher_quality", "languages": None}
    if not alpha:
        gopher_quality["min_alpha_words_ratio"] = None
    return {"cleaning": {"quality": [{"preset": "gopher_repetition", "languages": None}, gopher_quality, c4,
                                     {"preset": "fineweb", "languages": None}]},
            "cleaning_gates": {"max_removal_rate": 1.0, "max_rule_removal_rate": 1.0}}


def _our_counts(storage: Path) -> dict[str, Any]:
    """Kept ids (the corpus's own `id`, kept in `meta` by ingest) after cleaning and after dedup, and
    cleaning's removals by rule group, read from the run's storage (untimed)."""
    import pyarrow.parquet as pq

    from platform_assets.contracts import EXCLUSIONS_FILE

    def corpus_ids(stage: str) -> dict[str, str]:
        """Ingest's id -> the corpus's id, for every document of the stage's parts."""
        out = {}
        for part in sorted((storage / stage).glob("*/part-*.parquet")):
            for batch in pq.ParquetFile(part).iter_batches(columns=["id", "meta"], batch_size=8192):
                for doc_id, meta in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                    out[doc_id] = str(json.loads(meta).get("id", doc_id)) if meta else doc_id
        return out

    raw = corpus_ids("raw_documents")
    removed: dict[str, int] = {}
    rule_of: dict[str, str] = {}
    for path in sorted((storage / "cleaned_documents").glob(f"*/{EXCLUSIONS_FILE}")):
        table = pq.read_table(path, columns=["id", "rule"])
        for doc_id, rule in zip(table.column("id").to_pylist(), table.column("rule").to_pylist(), strict=True):
            group = rule.split(".")[0]
            removed[group] = removed.get(group, 0) + 1
            rule_of[raw.get(doc_id, doc_id)] = rule
    return {"kept_ids_after_filters": sorted(corpus_ids("cleaned_documents").values()),
            "kept_ids_after_dedup": sorted(corpus_ids("deduplicated_documents").values()),
            "removed_by_rule_group": dict(sorted(removed.items(), key=lambda kv: -kv[1])),
            "removed_rule_by_id": rule_of}


def ours_runner() -> str:
    runner = os.environ.get("E2E_OURS_RUNNER", "cli")
    if runner not in OURS_RUNNERS:
        raise SystemExit(f"E2E_OURS_RUNNER must be one of {OURS_RUNNERS}, not {runner!r}")
    return runner


def cli_invocation(spec: Spec, run_dir: Path) -> tuple[list[str], dict[str, str], Path]:
    """The command a user runs (README: `python -m platform_assets run --config <yaml> --until
    packed_shards`), its environment and the storage root it writes: pipeline_scaling's config (the
    same builder as the `stages` runner, the overrides above) and an instance of its own in run_dir,
    a copy of the repository's dagster_home/dagster.yaml (SQLite, telemetry off), as a user's
    checkout has it."""
    from benchmarks import pipeline_scaling

    dagster_home = run_dir / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO_ROOT / "dagster_home" / "dagster.yaml", dagster_home / "dagster.yaml")
    config = pipeline_scaling.write_config(run_dir, spec["sources"], Path(spec["tokenizer"]),
                                           ours_overrides(spec["quality_recipe"], spec["alpha_rule"]))
    env = dict(os.environ)
    env.pop("PLATFORM_CONFIG", None)  # the CLI exports --config's path itself
    env["DAGSTER_HOME"] = str(dagster_home)
    command = [sys.executable, "-m", "platform_assets", "run", "--config", str(config), "--until", "packed_shards"]
    return command, env, run_dir / "data"  # write_config's storage root


# The CLI's summary line of corpus_job (cli._summary): dedup's documents in and out, and the tokens
CORPUS_SUMMARY = re.compile(r"^corpus\s+ok\s+dedup (\d+) -> (\d+) documents, .*\btokens (\d+)\b", re.MULTILINE)


# What cmd_run does before its first job (imports, config, the instance, the definitions and jobs)
CLI_STARTUP_PROBE = ("import sys; from platform_assets.cli import _use_config; "
                     "from platform_assets.config import load_config; load_config(_use_config(sys.argv[1])); "
                     "import dagster as dg; from platform_assets.definitions import defs; "
                     "dg.DagsterInstance.get(); d = defs(); d.resolve_job_def('per_source_job'); "
                     "d.resolve_job_def('corpus_job')")


def _cli_startup_cpu_seconds(command: list[str], env: dict[str, str]) -> float:
    """CPU of a process that does only what the CLI does before its first job, on the run's config
    and instance: the one start-up the CLI pays (untimed; the stages runner pays one per asset)."""
    proc = subprocess.Popen([sys.executable, "-c", CLI_STARTUP_PROBE, command[command.index("--config") + 1]],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"ours: the CLI start-up probe failed: {proc.stderr.read().decode()[-2000:]}")
    proc.stderr.close()
    return usage.ru_utime + usage.ru_stime


def _run_ours_cli(spec: Spec, run_dir: Path) -> Prepared:
    command, env, storage = cli_invocation(spec, run_dir)
    log_path = run_dir / "platform-run.out"

    def work() -> dict[str, Any]:
        # one process, reaped here: its CPU is in this process's RUSAGE_CHILDREN (the harness's
        # figure), and wait4 gives its own CPU and peak RSS besides
        returncode, usage = run_reaped(command, env, log_path)
        if returncode != 0:
            raise RuntimeError(f"ours: `{' '.join(command[1:])}` failed (exit {returncode}):\n  "
                               + "\n  ".join(log_tail(log_path)))
        return {"cli_cpu_seconds": usage.ru_utime + usage.ru_stime, "cli_max_rss_bytes": usage.ru_maxrss * 1024}

    def finish(result: dict[str, Any]) -> dict[str, Any]:
        output = log_path.read_text(errors="replace")
        summary = CORPUS_SUMMARY.search(output)
        if summary is None:
            raise RuntimeError(f"ours: no corpus_job summary line in the CLI's output:\n{output[-3000:]}")
        counts = _our_counts(storage)
        if len(counts["kept_ids_after_dedup"]) != int(summary.group(2)):
            raise RuntimeError("ours: deduplicated_documents' parts and the CLI's summary disagree on rows")
        return {**result, **counts, "runner": "cli", "command": command[1:],
                "documents_kept": len(counts["kept_ids_after_dedup"]), "tokens_written": int(summary.group(3)),
                "cli_startup_cpu_seconds": _cli_startup_cpu_seconds(command, env),
                "cli_output": [line for line in output.splitlines() if line.strip()][-12:]}

    return Prepared(work, finish)


def _run_ours_stages(spec: Spec, run_dir: Path) -> Prepared:
    from benchmarks import pipeline_scaling

    overrides = ours_overrides(spec["quality_recipe"], spec["alpha_rule"])

    def work() -> dict[str, Any]:
        # keep=True: the storage is read for the kept ids in finish (untimed); the harness removes run_dir
        return pipeline_scaling.run_scale(1, spec["inputs"], run_dir, Path(spec["tokenizer"]), keep=True,
                                          say=lambda _m: None, overrides=overrides)

    def finish(result: dict[str, Any]) -> dict[str, Any]:
        stages = {rec["stage"]: rec for rec in result["stages"]}
        (scale_dir,) = (run_dir / "runs").iterdir()
        counts = _our_counts(scale_dir / "data")
        if len(counts["kept_ids_after_dedup"]) != int(stages["deduplicated_documents"]["metadata"]["rows"]):
            raise RuntimeError("ours: deduplicated_documents' parts and its materialization disagree on rows")
        cpu = sum(rec["cpu_seconds"] for rec in result["stages"])
        work_cpu = sum(rec["work_cpu_seconds"] for rec in result["stages"])
        return {**counts, "runner": "stages",
                "documents_kept": len(counts["kept_ids_after_dedup"]),
                "tokens_written": int(stages["tokenized_documents"]["metadata"]["tokens"]),
                # every stage process's CPU, split: its materialize call (the stage's work, Dagster's
                # run machinery included) and the rest (interpreter, imports, definitions loading)
                "stage_work_cpu_seconds": work_cpu, "stage_startup_cpu_seconds": cpu - work_cpu,
                "stages": [{k: rec.get(k) for k in ("stage", "wall_seconds", "work_seconds", "cpu_seconds",
                                                     "work_cpu_seconds", "max_process_rss_bytes", "metadata")}
                           for rec in result["stages"]]}

    return Prepared(work, finish)


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    """`cli` (default): the CLI command users run, one process; `stages`: pipeline_scaling's runner,
    one process per asset, for its split of stage work and process start-up."""
    return _run_ours_cli(spec, run_dir) if spec["ours_runner"] == "cli" else _run_ours_stages(spec, run_dir)


