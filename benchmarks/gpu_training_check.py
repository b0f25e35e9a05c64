"""The training job's CUDA paths on a lent GPU machine, in one short run (issue checklist: bf16, NCCL,
flash attention, 8-bit optimizers, data wait on a ~125M model).

Run on the device machine from the repository root. Its image has torch, transformers, numpy, pyyaml,
not pydantic (training's config) nor bitsandbytes (8-bit AdamW) nor dagster, and nothing can be
downloaded there: carry their wheels for its Python (3.12; `pip download pydantic bitsandbytes
--python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64
-d .gpuwheels`, the folder ignored by git; bitsandbytes 0.50's wheel is 43 MB, with its CUDA 13 kernels,
inside the 64 MiB a call may carry) and install them first:

    python3 -m pip install --no-index --find-links .gpuwheels pydantic bitsandbytes
    python3 -m benchmarks.gpu_training_check --out $OUT/gpu_training_check.json

`--runs a,b` picks a subset of the runs (a short lease spent on what is not measured yet), `--no-pytest`
skips the CUDA tests.

What it does, each part independent (a part that cannot run says why in the JSON, the others go on):
- the environment: GPU, torch / transformers versions, whether flash-attn and bitsandbytes import;
- a synthetic `flat` shard set (training/ reads it as it reads packed_shards' output): 2 sources of
  1,024-token samples packed from documents of random lengths and random GPT-2-range ids;
- a Llama-shaped ~125M model (hidden 768, 12 layers, 12 heads, MLP 3,072, vocab 50,257) trained for
  `--steps` steps at global batch 32 (micro 8) with `precision: auto` (bf16 on a GPU that has it) and
  SDPA attention, in a `torchrun --nproc_per_node 1` process (NCCL process group), 2 loader workers:
  tokens per second, data-wait fraction, first-step wait, the losses;
- the same with `compile: true` (inductor), with `attn_implementation: flash_attention_2` (varlen,
  cu_seqlens from the packed documents) where flash-attn imports, and with `optimizer.name: adamw_8bit`
  where bitsandbytes imports;
- the CUDA tests of tests/training (`-k cuda`), run by pytest.
CPU machines never run this (CI has no GPU): `--dry-run` runs every part on the CPU with a tiny model,
which is how it is tested."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
SEQ_LEN = 1024
VOCAB = 50257
MODEL_125M = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
              "vocab_size": VOCAB, "max_position_embeddings": SEQ_LEN}
MODEL_TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
              "vocab_size": VOCAB, "max_position_embeddings": SEQ_LEN}


def environment() -> dict[str, Any]:
    import torch
    import transformers

    env: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "python": sys.version.split()[0], "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        env.update(device=torch.cuda.get_device_name(0), bf16=torch.cuda.is_bf16_supported(),
                   nccl=torch.distributed.is_nccl_available(), cuda_runtime=torch.version.cuda)
    for module in ("flash_attn", "bitsandbytes"):
        env[module] = importlib.util.find_spec(module) is not None
    return env


def write_shards(root: Path, train_samples: int, seed: int = 0) -> Path:
    """A flat shard set of 2 sources: samples of SEQ_LEN tokens packed from documents of 64-2,048
    tokens (a document longer than the room left is cut, as packing's `split` strategy cuts)."""
    sys.path.insert(0, str(REPO / "tests" / "training"))
    from shard_fixtures import FixtureSample, write_flat

    rng = np.random.default_rng(seed)

    def samples(n: int) -> list[FixtureSample]:
        out = []
        for _ in range(n):
            room, docs = SEQ_LEN, []
            while room > 8:
                length = int(min(room, rng.integers(64, 2048)))
                docs.append(np.concatenate([rng.integers(2, VOCAB, length - 1), [1]]).astype(np.int64))
                room -= length
            out.append(FixtureSample(tuple(docs)))
        return out

    per_shard = 256
    sets = {}
    for source in ("code", "prose"):
        n = train_samples // 2
        sets[("train", source)] = [samples(min(per_shard, n - k)) for k in range(0, n, per_shard)]
        sets[("validation", source)] = [samples(16)]
    return write_flat(root, sets, SEQ_LEN, pad_id=0, eos_id=1, vocab_size=VOCAB)


def run_config(flat: Path, ckpt: Path, model: dict[str, int], steps: int) -> dict[str, Any]:
    """The base run config; each variant is overrides of it (`--set key.sub=value`, training's own)."""
    return {
        "data": {"data_dir": str(flat), "global_batch_size": 32, "micro_batch_size": 8, "num_workers": 2},
        "model": {"model_type": "llama", "overrides": dict(model)},
        "optimizer": {"lr": 6e-4},
        "schedule": {"warmup_steps": max(1, steps // 10)},
        "checkpoint": {"dir": str(ckpt), "interval": steps},
        "dataset_version": "gpu-check-synthetic",
        "max_steps": steps,
        "precision": "auto",
        "log_interval": max(1, steps // 10),
    }


def train(work: Path, name: str, raw: dict[str, Any], overrides: dict[str, Any], torchrun: bool,
          timeout: int) -> dict[str, Any]:
    """One training run in its own process (torchrun: an NCCL / gloo process group of 1) of `raw` with
    `overrides` (dotted keys, passed as `--set`); its result from the metrics file and the last log lines."""
    config = work / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
                if torchrun else [sys.executable])
    started = time.perf_counter()
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    done = subprocess.run([*launcher, "-m", "training.train", "--config", str(config), *sets], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})
    out: dict[str, Any] = {"returncode": done.returncode, "wall_s": round(time.perf_counter() - started, 1),
                           "log_tail": (done.stdout + done.stderr).strip().splitlines()[-8:]}
    metrics = Path(raw["checkpoint"]["dir"]) / "metrics.jsonl"
    if metrics.exists():
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        steps = [r for r in records if r.get("kind") == "train"]
        if steps:
            last = steps[-1]
            out.update(steps=last.get("step"), first_loss=steps[0].get("loss"), last_loss=last.get("loss"),
                       tokens_per_s=[round(r.get("tokens_per_s", 0.0)) for r in steps],
                       data_wait_fraction=[round(r.get("data_wait_fraction", 0.0), 4) for r in steps],
                       cuda_peak_allocated_gib=last.get("cuda_peak_allocated_gib"),
                       record_keys=sorted(last))
    return out


# the modules holding tests/training's CUDA tests (others import dagster, lance or boto3, absent there)
CUDA_TEST_FILES = ("tests/training/test_train_config.py", "tests/training/test_train_loop.py",
                   "tests/training/test_optimizers.py")


def pytest_cuda(timeout: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "pytest", *CUDA_TEST_FILES, "-k", "cuda", "-q", "-p",
                           "no:cacheprovider", "--confcutdir=tests/training", "-o", "addopts=", "-rs"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})
    return {"returncode": done.returncode, "tail": (done.stdout + done.stderr).strip().splitlines()[-15:]}


RUN_NAMES = ("sdpa_bf16_torchrun", "sdpa_bf16_compiled", "flash_attention_2", "adamw_8bit")


def selected_runs(spec: str) -> set[str]:
    names = {name.strip() for name in spec.split(",") if name.strip()}
    unknown = sorted(names - set(RUN_NAMES))
    if unknown or not names:
        raise SystemExit(f"--runs {spec!r}: unknown run(s) {unknown}; choose from {', '.join(RUN_NAMES)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("--work", default="/tmp/gpu-training-check")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--dry-run", action="store_true", help="tiny model on the CPU (what tests run)")
    parser.add_argument("--runs", default=",".join(RUN_NAMES),
                        help="comma-separated subset of the runs, so a short lease goes to what is unmeasured "
                             f"(default: all of {', '.join(RUN_NAMES)})")
    parser.add_argument("--no-pytest", action="store_true", help="skip the CUDA tests of tests/training")
    args = parser.parse_args(argv)
    wanted = selected_runs(args.runs)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": environment()}
    cuda = results["environment"]["cuda"]
    model = MODEL_TINY if args.dry_run or not cuda else MODEL_125M
    results["model"] = model
    flat = write_shards(work / "shards", train_samples=32 * (args.steps + 4))

    def save() -> None:
        Path(args.out).write_text(json.dumps(results, indent=1))

    runs: list[tuple[str, dict[str, Any], bool]] = [("sdpa_bf16_torchrun", {}, True)]
    if cuda and not args.dry_run:  # inductor's code generation takes minutes on a CPU
        runs.append(("sdpa_bf16_compiled", {"compile": True}, False))
    if results["environment"]["flash_attn"]:
        runs.append(("flash_attention_2", {"model.attn_implementation": "flash_attention_2"}, False))
    else:
        results["flash_attention_2"] = "skipped: flash-attn does not import on this machine"
    if results["environment"]["bitsandbytes"] and cuda:
        runs.append(("adamw_8bit", {"optimizer.name": "adamw_8bit"}, False))
    else:
        results["adamw_8bit"] = "skipped: bitsandbytes does not import here (or no CUDA)"
    for skipped in [name for name, _, _ in runs if name not in wanted]:
        results[skipped] = "not selected (--runs)"
    runs = [run for run in runs if run[0] in wanted]
    for name, over, torchrun in runs:
        raw = run_config(flat, work / f"ckpt-{name}", model, args.steps)
        try:
            results[name] = train(work, name, raw, over, torchrun, timeout=600)
        except subprocess.TimeoutExpired:
            results[name] = "timed out after 600 s"
        save()
        print(name, json.dumps(results[name])[:600], flush=True)
    if cuda and not args.dry_run and not args.no_pytest:
        results["pytest_cuda"] = pytest_cuda(timeout=300)
    save()
    print(json.dumps(results, indent=1)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
