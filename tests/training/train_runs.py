"""Tiny training runs for the trainer's tests: fixture shards, a run config, and ways to launch it.

The shards hold learnable documents (arithmetic progressions of token ids, so the loss visibly falls
within a few steps) written by the loader's fixture writer (shard_fixtures.write_flat). The model is a
2-layer llama of hidden size 32: a step takes milliseconds on one CPU thread, so a test's time is
mostly the ~5 s import of torch + transformers in each subprocess.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from shard_fixtures import FixtureSample, write_flat

from training.config import parse_run_config
from training.metrics import read_records
from training.train import TrainResult, run

REPO = Path(__file__).resolve().parents[2]
SEQ_LEN = 32
VOCAB = 96
# 28 training samples: 7 optimizer steps of 4 per epoch, so a 10-step run crosses an epoch boundary.
TRAIN_SHARDS = {"code": [10, 6], "prose": [12]}
VALIDATION_SAMPLES = 4


# `python -c KILL_AT_STEP <run config> <step>`: trains and SIGKILLs its own process right after step
# `step` is logged (no chance to save, flush or stop the loader's workers): before that step's
# checkpoint, if it is a checkpoint step.
KILL_AT_STEP = """
import os, signal, sys
from training.config import load_run_config
from training.train import run
kill_at = int(sys.argv[2])
def kill(record):
    if record["kind"] == "train" and record["step"] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
run(load_run_config(sys.argv[1]), callbacks=[kill])
"""

def progression_samples(rng: np.random.Generator, n: int) -> list[FixtureSample]:
    """Packed samples of 1-3 documents; a document is start, start+d, start+2d, ... (mod the vocab,
    above the special ids 0 = pad and 1 = eos) ending with eos: predictable from two tokens on."""
    samples = []
    for _ in range(n):
        used = int(rng.integers(SEQ_LEN // 2, SEQ_LEN + 1))
        k = int(rng.integers(1, 4))
        cuts = np.sort(rng.choice(np.arange(3, used - 2), size=k - 1, replace=False)) if k > 1 else []
        bounds = [0, *[int(c) for c in cuts], used]
        segments = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            start, step = int(rng.integers(0, VOCAB - 2)), int(rng.integers(1, 4))
            body = 2 + (start + step * np.arange(b - a - 1)) % (VOCAB - 2)
            segments.append(np.concatenate([body, [1]]).astype(np.int64))
        samples.append(FixtureSample(tuple(segments)))
    return samples


def write_shards(root: Path, seed: int = 0) -> Path:
    """The flat shard dir (train + validation for each source); returns its path."""
    rng = np.random.default_rng(seed)
    sets: dict[tuple[str, str], list[list[FixtureSample]]] = {}
    for source, shard_sizes in sorted(TRAIN_SHARDS.items()):
        sets[("train", source)] = [progression_samples(rng, n) for n in shard_sizes]
        sets[("validation", source)] = [progression_samples(rng, VALIDATION_SAMPLES)]
    return write_flat(root, sets, SEQ_LEN, pad_id=0, eos_id=1, vocab_size=VOCAB)


def run_config(flat: Path, ckpt: Path, **top: Any) -> dict[str, Any]:
    """A raw run config: fp32, one thread, deterministic, every step logged with its sample ids."""
    raw: dict[str, Any] = {
        "data": {"data_dir": str(flat), "global_batch_size": 4, "micro_batch_size": 1, "seed": 3},
        "validation": {"eval_interval": 4, "eval_batches": 1},
        "model": {"model_type": "llama", "overrides": {"hidden_size": 32, "num_hidden_layers": 2,
                                                       "num_attention_heads": 4, "intermediate_size": 64}},
        "optimizer": {"lr": 3e-3, "weight_decay": 0.01},
        # decay_steps fixed (not max_steps): runs of different lengths share one lr schedule and so
        # one loss trajectory
        "schedule": {"warmup_steps": 2, "decay_steps": 10, "min_lr_ratio": 0.1},
        "checkpoint": {"dir": str(ckpt), "interval": 3, "keep_last": 2},
        "dataset_version": "fixture-v1",
        "max_steps": 10,
        "precision": "fp32",
        "log_interval": 1,
        "log_sample_ids": True,
        "deterministic": True,
        "cpu_threads": 1,
        "seed": 5,
    }
    for dotted, value in top.items():
        *parents, leaf = dotted.split("__")
        node = raw
        for p in parents:
            node = node[p]
        node[leaf] = value
    return raw


def write_config(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def train_in_process(raw: dict[str, Any]) -> TrainResult:
    return run(parse_run_config(raw, REPO))


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    return env


def launch(args: list[str]) -> subprocess.Popen:
    """`python <args>` from the repository root, stdout+stderr captured together."""
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def torchrun_command(nproc: int, args: list[str]) -> list[str]:
    """The venv's torchrun on a free local port (tests may run beside other jobs using 29500)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    return [str(torchrun), "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
            "--master-port", str(free_port()), *args]


def launch_torchrun(nproc: int, args: list[str]) -> subprocess.Popen:
    """`torchrun --nproc-per-node <nproc> <args>` from the repository root, output captured."""
    return subprocess.Popen(torchrun_command(nproc, args), cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_losses(ckpt: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_records(ckpt / "metrics.jsonl") if r["kind"] == "train"}


def eval_losses(ckpt: Path) -> dict[int, float]:
    return {r["step"]: r["eval_loss"] for r in read_records(ckpt / "metrics.jsonl") if r["kind"] == "eval"}


def sample_ids(ckpt: Path, rank: int = 0) -> dict[int, list[int]]:
    return {r["step"]: r["sample_ids"] for r in read_records(ckpt / f"samples-rank{rank}.jsonl")}


def latest_step(ckpt: Path) -> int:
    return json.loads((ckpt / (ckpt / "latest").read_text().strip() / "meta.json").read_text())["step"]


def sample_token_counts(flat: Path) -> dict[int, int]:
    """Non-padding tokens of every train sample, by sample id (source index << 40 | index in the set),
    read straight from the shard files."""
    index = json.loads((flat / "index.json").read_text())
    counts: dict[int, int] = {}
    sets = [s for s in index["sets"] if s["split"] == "train"]
    for source_index, shard_set in enumerate(sets):
        i = 0
        for shard in shard_set["shards"]:
            seqlens = np.fromfile(flat / shard["files"]["seqlens"]["path"], dtype="<i4")
            seqptr = np.fromfile(flat / shard["files"]["seqptr"]["path"], dtype="<i8")
            for a, b in zip(seqptr[:-1], seqptr[1:], strict=True):
                counts[(source_index << 40) | i] = int(seqlens[a:b].sum())
                i += 1
    return counts
