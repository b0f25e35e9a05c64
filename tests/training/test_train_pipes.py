"""The Dagster Pipes entry point, run by a PipesSubprocessClient inside a real `dagster.materialize`.

The asset here is test-only (the platform's `training_run` asset is built on the same client).
"""

import sys

import dagster as dg
import pytest
import yaml
from train_runs import REPO, run_config, subprocess_env, torchrun_command

from training.config import RunConfigError
from training.pipes_entry import MAX_CURVE_POINTS, PipesExtrasError, _thin, config_from_extras, main


def _materialize(command: list[str], extras: dict) -> tuple[dg.ExecuteInProcessResult, list, list[str]]:
    """Run the asset; returns the result, the custom messages and the run's user log lines."""
    messages: list = []

    @dg.asset(name="tiny_training_run")
    def tiny_training_run(context: dg.AssetExecutionContext, pipes: dg.PipesSubprocessClient):
        invocation = pipes.run(command=command, context=context, extras=extras, env=subprocess_env(), cwd=str(REPO))
        messages.extend(invocation.get_custom_messages())
        return invocation.get_materialize_result()

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([tiny_training_run], resources={"pipes": dg.PipesSubprocessClient()},
                            instance=instance, raise_on_error=False)
    logs = [entry.user_message for entry in instance.all_logs(result.run_id) if entry.user_message]
    return result, messages, logs


def _check_run(result, messages, ckpt, steps: int) -> dict:
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    [materialization] = result.asset_materializations_for_node("tiny_training_run")
    meta = {k: v.value for k, v in materialization.metadata.items()}
    assert meta["steps"] == steps
    assert meta["dataset_version"] == "pipes-v7"  # the extra overrode the file's value
    assert meta["checkpoint"] == str(ckpt / f"step-{steps:08d}")
    assert meta["tokens_seen"] > steps * 4 * 16  # 4 samples a step, each at least half full
    assert 0 < meta["final_loss"] < 5.0 and meta["tokens_per_s"] > 0 and 0 <= meta["data_wait_fraction"] < 1
    curve = meta["loss_curve"]
    assert curve["step"] == list(range(1, steps + 1)) and len(curve["loss"]) == steps
    assert curve["loss"][-1] == pytest.approx(meta["final_loss"])
    train = [m for m in messages if m["kind"] == "train"]
    assert [m["step"] for m in train] == curve["step"]  # every metric record was streamed as it happened
    assert all(m["dataset_version"] == "pipes-v7" for m in messages)
    return meta


def test_materialize_through_pipes_reports_metrics_and_the_result(flat, tmp_path):
    ckpt = tmp_path / "ckpt"
    extras = {
        "config": run_config(flat, tmp_path / "ignored", max_steps=50),  # inline; extras below win
        "dataset_version": "pipes-v7",
        "checkpoint_dir": str(ckpt),
        "max_steps": 4,
        "overrides": {"validation.eval_interval": 2},
    }
    result, messages, logs = _materialize([sys.executable, "-m", "training.pipes_entry"], extras)
    meta = _check_run(result, messages, ckpt, steps=4)
    assert meta["loss_curve"]["eval_step"] == [2, 4]
    assert meta["eval_loss"] == pytest.approx(meta["loss_curve"]["eval_loss"][-1])
    # the trainer's own log lines reached Dagster's event log through context.log
    assert any("LlamaForCausalLM" in line and "fresh start" in line for line in logs), logs


@pytest.mark.slow
def test_materialize_through_pipes_under_torchrun(flat, tmp_path):
    """Rank 0 opens the Pipes session; rank 1 reads the same extras without one and trains beside it."""
    ckpt = tmp_path / "ckpt"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run_config(flat, tmp_path / "ignored", max_steps=50)))
    extras = {"config": str(config), "dataset_version": "pipes-v7", "checkpoint_dir": str(ckpt), "max_steps": 3}
    result, messages, _ = _materialize(torchrun_command(2, ["-m", "training.pipes_entry"]), extras)
    _check_run(result, messages, ckpt, steps=3)
    assert (ckpt / "samples-rank1.jsonl").exists()  # rank 1 trained on its own block


def test_outside_dagster_it_points_to_the_standalone_command(monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_PIPES_CONTEXT", raising=False)
    assert main() == 2
    assert "run `python -m training.train --config run.yaml`" in capsys.readouterr().err


def test_extras_are_checked(flat, tmp_path):
    raw = run_config(flat, tmp_path / "ckpt")
    with pytest.raises(PipesExtrasError, match=r"unknown Pipes extras \['max_step'\]"):
        config_from_extras({"config": raw, "max_step": 3})
    with pytest.raises(PipesExtrasError, match="need 'config'"):
        config_from_extras({"dataset_version": "x"})
    with pytest.raises(RunConfigError, match="max_steps: Input should be greater than 0"):
        config_from_extras({"config": raw, "max_steps": 0})
    cfg = config_from_extras({"config": raw, "data_dir": str(tmp_path), "overrides": {"optimizer.lr": 0.5}})
    assert cfg.data.data_dir == str(tmp_path) and cfg.optimizer.lr == 0.5


def test_loss_curve_thinning_keeps_ends_and_even_spacing():
    points = [{"step": s} for s in range(1, 10_001)]
    thinned = _thin(points, MAX_CURVE_POINTS)
    steps = [p["step"] for p in thinned]
    assert len(steps) == MAX_CURVE_POINTS and steps[0] == 1 and steps[-1] == 10_000
    gaps = {b - a for a, b in zip(steps, steps[1:], strict=False)}
    assert gaps <= {20, 21}
