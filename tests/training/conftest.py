"""Fixtures shared by the training-loop tests: one shard set and one uninterrupted reference run per
session (the reference trains 10 steps of the tiny model; training it once instead of once per
test file saves ~10-20 s of the suite on 2 cores)."""

import pytest
from train_runs import run_config, train_in_process, write_shards


@pytest.fixture(scope="session")
def flat(tmp_path_factory):
    return write_shards(tmp_path_factory.mktemp("shards"))


@pytest.fixture(scope="session")
def reference(flat, tmp_path_factory):
    """An uninterrupted 10-step run (checkpoints at 3, 6, 9, 10; eval at 4, 8, 10). Read only."""
    ckpt = tmp_path_factory.mktemp("reference") / "ckpt"
    result = train_in_process(run_config(flat, ckpt))
    assert result.step == 10 and result.resumed_from is None
    return ckpt
