"""SIGKILL at every stage while it writes: the re-run gives a clean run's bytes, no reader ever sees a
partial output, and the Dagster instance says which run died.

Each asset of the chain is killed at the storage layer's named fault points (PLATFORM_FAULT_KILL_AT,
platform_assets/storage.py) in successive runs, then re-run; dataset_version also dies inside
`dvc commit` and `dvc push` (a wrapper `dvc` that kills the run mid-upload); training_run
loses its Dagster process while torchrun trains. Bit-identical resume of training itself is proven in
tests/training/test_train_resume.py and not repeated here.
"""

import json
import os
import signal
import time
from pathlib import Path

import dagster as dg
import pytest
from crash_chain import (
    ASSETS,
    build_chain,
    copy_outputs,
    dying_dvc,
    make_project,
    manifest_problems,
    materialize,
    project_instance,
    run_killed,
    snapshot,
    write_sources,
)
from dagster import ExecuteInProcessResult

from platform_assets.defs.dead_runs import fail_dead_runs

pytestmark = [pytest.mark.faults, pytest.mark.slow]

SIGKILLED = -signal.SIGKILL
# The points a run passes while it writes and commits its output directory (storage.FAULT_KILL_AT_ENV),
# and which complete output a reader finds after a kill there: the previous one until the swap, the new
# one from the swap on. `writing` dies midway: one file of the output written, the next being opened.
COMMIT_POINTS = (("writing", "old"), ("staged", "old"), ("manifest-written", "old"), ("commit-swapped", "new"))
STAGED_ASSETS = [("raw_documents", "py"), ("cleaned_documents", "kernel"), ("dedup_signatures", "kernel"),
                 ("dedup_band_buckets", "b000"), ("deduplicated_documents", None),
                 ("dataset_splits", None), ("tokenizer", None), ("tokenized_documents", None),
                 ("packed_shards", None)]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """(crash, reference): the crash project holds complete v1 outputs of every asset up to
    dataset_version; the reference holds what a clean run over the v2 sources commits."""
    base = tmp_path_factory.mktemp("crash-chain")
    sources = base / "sources"
    write_sources(sources, "v1")
    crash = make_project(base / "crash", sources)
    build_chain(crash)
    write_sources(sources, "v2")
    reference = make_project(base / "reference", sources)
    build_chain(reference)
    return crash, reference


def _upstream(asset: str) -> list[str]:
    names = list(ASSETS)
    return names[: names.index(asset)]


def _leftovers(out: Path) -> list[str]:
    """Staging and trash directories beside the output."""
    return sorted(p for p in os.listdir(out.parent) if p.startswith(f".{out.name}."))


def _new_runs(project, before: set[str]) -> list[dg.DagsterRun]:
    with project_instance(project) as instance:
        return [r for r in instance.get_runs() if r.run_id not in before]


def _run_ids(project) -> set[str]:
    with project_instance(project) as instance:
        return {r.run_id for r in instance.get_runs()}


def _assert_instance_honest(project, asset: str, before: set[str], rerun: ExecuteInProcessResult, killed: int):
    """The killed runs are on record and not successful, the platform's sweep (run by `platform_assets
    run` before it starts) marks them failed, and the asset's latest materialization is the re-run's."""
    runs = _new_runs(project, before)
    dead = [r for r in runs if r.run_id != rerun.run_id]
    assert len(dead) == killed
    # an in-process run killed by SIGKILL never writes its end: STARTED until the sweep, then FAILURE
    assert dg.DagsterRunStatus.SUCCESS not in {r.status for r in dead}
    with project_instance(project) as instance:
        fail_dead_runs(instance)
        assert instance.get_run_by_id(rerun.run_id).status == dg.DagsterRunStatus.SUCCESS
        for run in dead:
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
            failure = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
            assert "ended without recording an end: it was killed" in failure[-1].dagster_event.message
            # a killed run recorded no materialization of the asset
            assert not instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                                                    ).records
        latest = instance.get_latest_materialization_event(dg.AssetKey(asset))
        assert latest is not None and latest.run_id == rerun.run_id


@pytest.mark.parametrize(("asset", "partition"), STAGED_ASSETS, ids=[a for a, _ in STAGED_ASSETS])
def test_sigkill_at_each_commit_point_then_rerun_gives_the_clean_bytes(chain, asset, partition):
    crash, reference = chain
    copy_outputs(reference, crash, _upstream(asset))  # the new inputs; this asset still holds its v1 output
    out = crash.output(asset, partition)
    rel = str(out.relative_to(crash.data))
    complete = {"old": snapshot(out), "new": snapshot(reference.output(asset, partition))}
    assert complete["old"] != complete["new"] and not manifest_problems(complete["old"])
    before = _run_ids(crash)

    for point, expected in COMMIT_POINTS:
        assert run_killed(crash, asset, partition, kill_at=f"{point}:{rel}") == SIGKILLED, point
        seen = snapshot(out)
        # what a reader (or the next asset) lists now: one whole committed output, old or new
        assert not manifest_problems(seen), (point, manifest_problems(seen))
        assert seen == complete[expected], f"after a kill at {point} the output is not the {expected} one"
        if point == "writing":  # the half-written output exists, hidden from readers until the next run clears it
            assert any(".staging-" in p for p in _leftovers(out)), _leftovers(out)
    # the swap's kill left the old output under a hidden name (a staging one, cleared on the next open)
    assert [p.split(".staging-")[0] for p in _leftovers(out)] == [f".{out.name}"]
    # what the UI shows without the sweep: the killed runs still "Started", none a success
    assert {r.status for r in _new_runs(crash, before)} == {dg.DagsterRunStatus.STARTED}

    rerun = materialize(crash, asset, partition)
    assert rerun.success
    assert snapshot(out) == complete["new"]  # byte for byte a clean run's output, manifest included
    assert _leftovers(out) == []  # and nothing of the crashes is left
    _assert_instance_honest(crash, asset, before, rerun, killed=len(COMMIT_POINTS))


def _dvc_lock_md5(project) -> str:
    import yaml

    return yaml.safe_load((project.root / "dvc.lock").read_text())["stages"]["packed_shards"]["outs"][0]["md5"]


def _remote_objects(project) -> dict[str, bytes]:
    return {str(p.relative_to(project.remote)): p.read_bytes() for p in project.remote.rglob("*") if p.is_file()}


VERSION_POINTS = (
    ("dvc", "after:commit", "old"),  # the shards are recorded in dvc.lock, nothing pushed
    ("dvc", "push:3", "old"),  # 3 objects pushed, the 4th half-written under DVC's temporary name
    ("storage", "writing:dataset_version/_all", "old"),  # pushed; version.json written, the card not yet
    ("storage", "staged:dataset_version/_all", "old"),  # pushed; version.json and card staged
    ("storage", "commit-swapped:dataset_version/_all", "new"),
)


def test_sigkill_in_dvc_commit_push_and_the_version_commit_then_rerun(chain, tmp_path):
    crash, reference = chain
    copy_outputs(reference, crash, _upstream("dataset_splits"))
    # the splits run again on the copied inputs: the same bytes, and the instance then holds their leak
    # check, which the dataset card quotes (as it does in the reference)
    assert materialize(crash, "dataset_splits").success
    copy_outputs(reference, crash, ["tokenizer", "tokenized_documents", "packed_shards"])
    out = crash.output("dataset_version")
    # version.json names the project's own paths (shards_uri, remote_url): the reference's, moved here
    new = {name: data.replace(str(reference.root.parent).encode(), str(crash.root.parent).encode())
           for name, data in snapshot(reference.output("dataset_version")).items()}
    del new["_manifest.json"]  # it hashes the reference's version.json: checked by manifest_problems
    complete = {"old": snapshot(out), "new": new}
    assert complete["old"]["version.json"] != complete["new"]["version.json"]
    old_lock, pushed_before = _dvc_lock_md5(crash), set(_remote_objects(crash))
    with project_instance(crash) as instance:
        fail_dead_runs(instance)  # runs an earlier failed test may have left
    before = _run_ids(crash)
    wrapper = dying_dvc(tmp_path)

    for kind, point, expected in VERSION_POINTS:
        env = {"PLATFORM_DVC": str(wrapper), "FAULT_DVC_KILL_AT": point} if kind == "dvc" else {}
        assert run_killed(crash, "dataset_version", kill_at=point if kind == "storage" else None, env=env
                          ) == SIGKILLED, point
        seen = snapshot(out)
        assert not manifest_problems(seen), (point, manifest_problems(seen))
        if expected == "old":
            assert seen == complete["old"], f"after a kill at {point} the version files are not the old ones"
        else:
            assert {n: seen[n] for n in new} == new, point
        if point == "after:commit":
            assert _dvc_lock_md5(crash) not in (old_lock, None)  # really killed after `dvc commit`
        with project_instance(crash) as instance:
            # the dead run holds the `dvc` pool's one slot: every later dataset_version would wait for it
            # forever ("Step blocked by limit for pool dvc"); the sweep fails the run and frees the slot
            assert instance.event_log_storage.get_concurrency_info("dvc").claimed_slots
            assert len(fail_dead_runs(instance)) == 1
            assert not instance.event_log_storage.get_concurrency_info("dvc").claimed_slots

    rerun = materialize(crash, "dataset_version")
    assert rerun.success and all(e.passed for e in rerun.get_asset_check_evaluations())
    seen = snapshot(out)
    assert {n: seen[n] for n in new} == new and set(seen) == {*new, "_manifest.json"} and not manifest_problems(seen)
    assert _leftovers(out) == []
    assert _dvc_lock_md5(crash) == _dvc_lock_md5(reference)
    # every object of the clean push is in the remote, byte for byte (content-addressed: same names)
    pushed, clean = _remote_objects(crash), _remote_objects(reference)
    assert {name: pushed.get(name) for name in clean} == clean
    # beside them: the v1 objects pushed earlier and, from the kill mid-copy, DVC's temporary file (a
    # name DVC never reads as an object; `dvc gc --cloud` removes it)
    strays = set(pushed) - set(clean) - pushed_before
    assert len(strays) == 1 and next(iter(strays)).endswith(".tmp"), sorted(strays)
    _assert_instance_honest(crash, "dataset_version", before, rerun, killed=len(VERSION_POINTS))


def _processes_with_env(marker: str) -> list[int]:
    """Live processes (not zombies) whose environment holds `marker`: a killed run's descendants."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (proc / "environ").read_bytes() and " Z " not in (proc / "stat").read_text():
                pids.append(int(proc.name))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return pids


def _metrics(ckpt: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}


def test_sigkill_of_the_training_run_process_stops_torchrun_and_the_rerun_resumes(chain):
    _, reference = chain  # holds a committed dataset_version (v2) and no checkpoints yet
    before = _run_ids(reference)
    marker = f"CRASH_TEST_RUN={os.getpid()}-training"
    key, value = marker.split("=")

    def checkpointed() -> bool:  # step 2 of 6 is saved (checkpoint.interval 2): kill the run mid-training
        return any(reference.checkpoints.glob("*/step-00000002/meta.json"))

    assert run_killed(reference, "training_run", env={key: value}, kill_when=checkpointed) == SIGKILLED
    # torchrun had the Dagster process as its parent: it gets SIGTERM, the loop saves and exits (before
    # the guard, the orphan trained on to step 6 with no run watching it)
    deadline = time.monotonic() + 90
    while _processes_with_env(marker):
        assert time.monotonic() < deadline, f"training outlived its killed run: {_processes_with_env(marker)}"
        time.sleep(0.2)
    (ckpt,) = reference.checkpoints.iterdir()
    stopped_at = json.loads((ckpt / (ckpt / "latest").read_text().strip() / "meta.json").read_text())["step"]
    assert stopped_at >= 2

    with project_instance(reference) as instance:
        # the dead run holds the `gpu` pool's one slot: the re-run would wait for it forever; the sweep
        # (what `platform_assets run` does first) fails the dead run and frees it
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
        assert len(fail_dead_runs(instance)) == 1
    rerun = materialize(reference, "training_run")
    assert rerun.success
    meta = {k: v.value for k, v in rerun.asset_materializations_for_node("training_run")[0].metadata.items()}
    assert meta["steps"] == 6 and meta["resumed_from_step"] == stopped_at
    assert sorted(_metrics(ckpt)) == [1, 2, 3, 4, 5, 6]  # every step trained, none lost
    assert not list(ckpt.glob(".tmp-*"))  # no torn checkpoint left behind
    _assert_instance_honest(reference, "training_run", before, rerun, killed=1)
