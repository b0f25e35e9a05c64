"""training_run: the training job on the current dataset version, launched through Dagster Pipes."""

import json
import os
import warnings
from pathlib import Path

import dagster as dg

from platform_assets.charts import line_chart_markdown
from platform_assets.config import REPO_ROOT
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY
from platform_assets.layout import asset_dir
from platform_assets.training_launch.command import LaunchError, run_extras, torchrun_command
from platform_assets.versioning.record import VERSION_FILE

# A step spends at most this share of its time waiting for data before the check warns: the loader
# should hide its reads behind compute (on a GPU the target is < 1%).
MAX_DATA_WAIT = 0.10

TRAINING_CHECKS = [
    dg.AssetCheckSpec("loss_decreased", asset="training_run",
                      description="The last logged training loss is below the first (the run learned something)."),
    dg.AssetCheckSpec("data_wait_within_bounds", asset="training_run",
                      description=f"Time blocked on the loader / step time, over the steps this run trained after "
                                  f"its first (worker start-up: first_step_wait_s), <= {MAX_DATA_WAIT:.0%}."),
]


class TrainingRunConfig(dg.Config):
    """Launch-time choice of what to train (the UI's launchpad); by default the pipeline config's."""

    run_config: str | None = None
    """A training run config (training/config.py), relative to the pipeline config, instead of
    `training.run_config`: e.g. training_llava_sample.yaml trains a vision-language model on the media
    shards. Its checkpoints go to their own directory (training_launch/command.py: checkpoint_dir)."""


@dg.asset(
    # a job that dies (a DataLoader worker killed, a rank OOM-killed) is relaunched and resumes its latest
    # checkpoint exactly; at most the steps since that checkpoint are trained again
    retry_policy=TRANSIENT_RETRY,
    deps=["dataset_version"],
    check_specs=TRAINING_CHECKS,
    group_name="training",
    kinds={"pytorch"},
    # One training job per GPU box at a time; raise with `dagster instance concurrency set gpu <n>`.
    pool="gpu",
    description="Trains the configured model under torchrun (Pipes streams logs and metrics back): a causal LM on "
                "the dataset version's flat token shards, or a Whisper / LLaVA model on its media shards. "
                "Re-materializing resumes the latest checkpoint of that version.",
)
def training_run(context: dg.AssetExecutionContext, config: TrainingRunConfig, pipeline: PipelineResource,
                 pipes_subprocess_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    cfg = pipeline.config()
    storage = pipeline.storage(cfg)
    version_rel = f"{asset_dir('dataset_version')}/{VERSION_FILE}"
    if not storage.exists(version_rel):
        raise dg.Failure(f"no dataset version at {storage.uri(version_rel)}: materialize dataset_version first",
                         allow_retries=False)
    record = json.loads(storage.read_bytes(version_rel))
    settings = cfg.training
    try:
        extras = run_extras(settings, Path(cfg.resolve(config.run_config or settings.run_config)), record,
                            Path(cfg.resolve(settings.checkpoint_root)))
    except LaunchError as err:  # a config that asks for data this version lacks: retrying cannot help
        raise dg.Failure(str(err), allow_retries=False) from None
    context.log.info(f"training on {extras['data_dir']} (version {extras['dataset_version']}), checkpoints in "
                     f"{extras['checkpoint_dir']}")
    with warnings.catch_warnings():
        # Dagster's own Pipes client calls one of its preview APIs on every run: a warning the user
        # can do nothing about, printed between the CLI's summary lines
        warnings.simplefilter("ignore", dg.PreviewWarning)
        invocation = pipes_subprocess_client.run(
            # torchrun gets SIGTERM if this process is killed: no orphan trains on into the re-run's checkpoints
            command=torchrun_command(settings, die_with=os.getpid()), context=context, extras=extras,
            cwd=str(REPO_ROOT),
            # the Rust tokenizer and OpenMP would otherwise each start a thread per core in every rank
            env={"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
        )
    results = invocation.get_results()
    if not results:
        raise dg.Failure("the training job stopped before finishing (a signal); its checkpoint is kept and the next "
                         "materialization resumes it")
    reported = results[0]
    metadata = {k: v for k, v in (reported.metadata or {}).items()}
    curve = metadata["loss_curve"].value if "loss_curve" in metadata else {"step": [], "loss": []}
    metadata["loss_chart"] = dg.MetadataValue.md(line_chart_markdown("loss by step", {
        "train": (curve.get("step", []), curve.get("loss", [])),
        **({"eval": (curve["eval_step"], curve["eval_loss"])} if curve.get("eval_step") else {}),
    }))
    # the job's own figure: total wait / total step time (time-weighted, unlike a mean of the logged
    # intervals), so the metrics file need not be read again here
    wait = metadata["data_wait_fraction"].value if "data_wait_fraction" in metadata else None
    losses = curve.get("loss", [])
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[
            dg.AssetCheckResult(check_name="loss_decreased", severity=dg.AssetCheckSeverity.WARN,
                                passed=len(losses) >= 2 and losses[-1] < losses[0],
                                metadata={"first": losses[0] if losses else "none",
                                          "last": losses[-1] if losses else "none"}),
            dg.AssetCheckResult(check_name="data_wait_within_bounds", severity=dg.AssetCheckSeverity.WARN,
                                passed=wait is not None and wait <= MAX_DATA_WAIT,
                                metadata={"data_wait_fraction": wait if wait is not None else "not reported"}),
        ],
    )
