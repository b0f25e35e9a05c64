"""The training job: `python -m training.train --config run.yaml` or the same under torchrun.

    torchrun --nproc-per-node 2 -m training.train --config run.yaml --set optimizer.lr=1e-3

One optimizer step = `data.global_batch_size` samples over all ranks: each rank runs the loader's
`accumulation_steps` micro-batches, gradients are synchronised (DDP) only on the last one (`no_sync`
before), and the loss is the mean over the loss tokens of the *whole* global batch, so it does not
depend on the world size or on how a batch is split into micro-batches.

A run resumes by itself from the newest complete checkpoint in `checkpoint.dir` (model, optimizer,
schedule, loss scaler, RNG states, the loader's exact position); SIGTERM or SIGINT finishes the current
step, saves a checkpoint and exits 0 on every rank (resume.py: what a checkpoint holds and how a run
resumes; run_loaders.py: the training and evaluation loaders from the config).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from training.checkpoint import find_latest_checkpoint
from training.config import RunConfig, RunConfigError, load_run_config, parse_override
from training.data.loader import PackedLoader
from training.data.media_loader import MediaLoader
from training.distributed import DistEnv, all_reduce_sum, init_distributed
from training.distributed import shutdown as shutdown_distributed
from training.media_training import media_inputs
from training.metrics import JsonLinesLog, MetricsCallback, MetricsLogger
from training.model import ShardSetInfo, parameter_groups
from training.model_families import CAUSAL_LM, DEVICE_KEYS, build_media_model, model_family
from training.model_families import loss_sum as family_loss_sum
from training.optimizers import build_optimizer, check_optimizer_device, group_hyperparameters
from training.precision import resolve_precision
from training.pretrained import build_causal_lm, check_media_settings, parameter_counts
from training.resume import resume_latest, save_run_checkpoint
from training.run_loaders import loader_config, open_loader
from training.run_state import StopRequest, TrainResult, steady_wait
from training.schedule import WarmupCosine, build_scheduler
from training.seq_stats import step_seq_stats

log = logging.getLogger("training")

MODALITIES = ("image", "pdf", "audio")  # counted per step for media runs (the asset's modality mix)


class Trainer:
    """One rank's share of the run. Built by `run`, which owns the process group and signals."""

    def __init__(self, cfg: RunConfig, env: DistEnv, callbacks: Sequence[MetricsCallback] = ()) -> None:
        self.cfg = cfg
        self.env = env
        self.device = env.device
        self.precision = resolve_precision(cfg.precision, env.device)
        check_optimizer_device(cfg.optimizer, env.device)  # e.g. an 8-bit optimizer on CPU: stop before any work

        self.family = model_family(cfg.model)
        self.media = media_inputs(cfg, self.family) if self.family != CAUSAL_LM else None
        self.loader = open_loader(loader_config(cfg), env, "data", self.media)
        self.accumulation = self.loader.accumulation_steps
        # The same init on every rank (DDP would broadcast rank 0's weights anyway).
        if self.media is None:
            assert isinstance(self.loader, PackedLoader)
            self.model = build_causal_lm(  # fresh or pretrained weights, LoRA-wrapped if model.lora
                cfg.model, ShardSetInfo.from_index(self.loader.index), seed=cfg.seed,
                gradient_checkpointing=cfg.gradient_checkpointing,
            ).to(self.device)
        else:
            check_media_settings(cfg.model)
            self.model = build_media_model(cfg.model, self.media.model_config, seed=cfg.seed,
                                           gradient_checkpointing=cfg.gradient_checkpointing).to(self.device)
        self.model.train()
        opt = cfg.optimizer
        self.optimizer = build_optimizer(opt, parameter_groups(self.model, opt.weight_decay), self.device)
        self.schedule = WarmupCosine(
            cfg.schedule.warmup_steps, cfg.schedule.decay_steps or cfg.max_steps, cfg.schedule.min_lr_ratio
        )
        self.scheduler = build_scheduler(self.optimizer, self.schedule)
        self.scaler = self.precision.grad_scaler(self.device)

        self.eval_loader: PackedLoader | MediaLoader | None = None
        if cfg.validation.eval_interval:
            self.eval_loader = open_loader(loader_config(cfg, cfg.validation.split), env, "validation",
                                            self.media, train=False)
            self._eval_start = self.eval_loader.state_dict()

        self.step = 0
        self.tokens_seen = 0
        self.modalities_seen = dict.fromkeys(MODALITIES, 0)
        self.last_loss: float | None = None
        self.last_eval_loss: float | None = None
        self.resumed_from = resume_latest(self)

        self.ddp: DistributedDataParallel | None = None
        forward: torch.nn.Module = self.model
        if env.world_size > 1:
            self.ddp = DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
            forward = self.ddp
        self.forward = torch.compile(forward, backend=cfg.compile_backend) if cfg.compile else forward
        self.eval_forward = torch.compile(self.model, backend=cfg.compile_backend) if cfg.compile else self.model

        resume_step = self.step
        self.metrics = (
            MetricsLogger(cfg.metrics_path, resume_step=resume_step, max_steps=cfg.max_steps,
                          dataset_version=cfg.dataset_version, callbacks=callbacks)
            if env.is_main else None
        )
        self.sample_log = (
            JsonLinesLog(Path(cfg.checkpoint.dir) / f"samples-rank{env.rank}.jsonl", resume_step)
            if cfg.log_sample_ids else None
        )
        if env.is_main:
            n_params, n_trainable = parameter_counts(self.model)
            log.info(
                "%s: %s parameters, %s trainable, %d rank(s) on %s, precision %s, %d micro-batch(es) of %d per rank "
                "per step, %d steps per epoch, %s",
                type(self.model).__name__,
                f"{n_params:,}", f"{n_trainable:,}", env.world_size, self.device, self.precision.name,
                self.accumulation, cfg.data.micro_batch_size, self.loader.steps_per_epoch,
                f"resumed at step {self.step}" if self.resumed_from is not None else "fresh start",
            )

    # ---------------------------------------------------------------- optimizer settings (resume.restore too)

    def apply_optimizer_settings(self, step: int) -> None:
        opt = self.cfg.optimizer
        factor = self.schedule(step)
        for group, decay in zip(self.optimizer.param_groups, (opt.weight_decay, 0.0), strict=True):
            # betas/eps only where the optimizer has them (Adafactor has no betas, and its eps is a pair)
            group.update(lr=opt.lr * factor, initial_lr=opt.lr, weight_decay=decay, **group_hyperparameters(opt))
        self.scheduler.base_lrs = [opt.lr] * len(self.optimizer.param_groups)
        self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    # ---------------------------------------------------------------- data

    def _to_device(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        # The tensors a forward pass needs on the device; the counters and ids stay on the host.
        keys = DEVICE_KEYS[self.family]
        if self.device.type != "cuda":
            return {k: batch[k] for k in keys}
        # Pinned host memory makes the copy asynchronous (non_blocking): it overlaps the previous
        # micro-batch's kernels instead of stalling the host.
        return {
            k: (batch[k] if batch[k].is_pinned() else batch[k].pin_memory()).to(self.device, non_blocking=True)
            for k in keys
        }

    def _forward_loss_sum(self, module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with self.precision.autocast(self.device):
            return family_loss_sum(self.family, module, batch, self.cfg.model.attn_implementation)

    # ---------------------------------------------------------------- the step

    def _fetch_step(self, data_iter: Any) -> tuple[list[dict[str, Any]], float, Any]:
        """This rank's micro-batches of the next optimizer step; returns them, the seconds spent
        waiting for them, and the (possibly renewed, at an epoch boundary) iterator."""
        batches = []
        waited = 0.0
        for i in range(self.accumulation):
            t0 = time.perf_counter()
            try:
                batch = next(data_iter)
            except StopIteration:
                if i:
                    raise RuntimeError(
                        f"the loader ended an epoch after {i} of {self.accumulation} micro-batches of a step"
                    ) from None
                data_iter = iter(self.loader)  # the next epoch
                batch = next(data_iter)
            waited += time.perf_counter() - t0
            batches.append(batch)
        return batches, waited, data_iter

    def _train_step(self, batches: list[dict[str, Any]], stop_requested: bool) -> tuple[float, float, int, bool]:
        """Forward/backward over the micro-batches, one optimizer update. Returns (loss, grad norm,
        global non-padding tokens, whether any rank asked to stop)."""
        env = self.env
        # Normaliser of the global batch, known before the first backward: gradients are then exactly
        # those of sum(token losses) / global loss tokens, whatever the split over ranks/micro-batches.
        local_loss_tokens = torch.tensor([sum(int(b["num_loss_tokens"]) for b in batches)], dtype=torch.float64)
        # max(1, .): a global batch whose every label is masked contributes no gradient, not NaN
        loss_tokens = max(float(all_reduce_sum(local_loss_tokens.to(self.device), env).item()), 1.0)
        # DDP averages gradients over ranks: scale by world_size so the average is the global sum.
        scale = env.world_size / loss_tokens

        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, host_batch in enumerate(batches):
            batch = self._to_device(host_batch)
            last = i == len(batches) - 1
            sync = contextlib.nullcontext() if (self.ddp is None or last) else self.ddp.no_sync()
            with sync:
                micro_sum = self._forward_loss_sum(self.forward, batch)
                self.scaler.scale(micro_sum * scale).backward()
            loss_sum += micro_sum.detach().double()

        self.scaler.unscale_(self.optimizer)
        clip = self.cfg.optimizer.grad_clip or float("inf")  # inf: measure the norm, clip nothing
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

        # One small all-reduce for the step's figures and the stop vote: a rank that got SIGTERM makes
        # every rank stop after this same step.
        tokens = sum(int(b["num_tokens"]) for b in batches)
        seen = [sum(b.get("modalities", {}).get(m, 0) for b in batches) for m in MODALITIES]
        figures = torch.tensor([0.0, float(tokens), float(stop_requested), *map(float, seen)],
                               dtype=torch.float64, device=self.device)
        figures[0] = loss_sum
        figures = all_reduce_sum(figures, env).tolist()  # the step's one host sync
        for m, n in zip(MODALITIES, figures[3:], strict=True):
            self.modalities_seen[m] += int(n)
        loss = figures[0] / loss_tokens
        return loss, float(grad_norm), int(figures[1]), figures[2] > 0

    @torch.no_grad()
    def evaluate(self) -> tuple[float, int]:
        """Token-weighted mean loss over the first `eval_batches` global batches of the validation split."""
        assert self.eval_loader is not None
        self.model.eval()
        self.eval_loader.load_state_dict(self._eval_start)
        steps = min(self.cfg.validation.eval_batches, self.eval_loader.steps_per_epoch)
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        data_iter = iter(self.eval_loader)
        for _ in range(steps * self.eval_loader.accumulation_steps):
            host_batch = next(data_iter)
            totals[0] += self._forward_loss_sum(self.eval_forward, self._to_device(host_batch)).double()
            totals[1] += int(host_batch["num_loss_tokens"])
        loss_sum, n_tokens = all_reduce_sum(totals, self.env).tolist()
        self.model.train()
        return loss_sum / max(n_tokens, 1.0), int(n_tokens)

    # ---------------------------------------------------------------- the loop

    def train(self, stop: StopRequest) -> TrainResult:
        cfg = self.cfg
        data_iter = iter(self.loader)
        stopped = False
        run_tokens, run_time, run_wait, run_read, run_decode = 0, 0.0, 0.0, 0.0, 0.0
        first_step_wait: float | None = None  # this process's first step: worker start-up, first shard opens
        first_step_time = 0.0
        interval = {"steps": 0, "tokens": 0, "time": 0.0, "wait": 0.0}
        step_samples = cfg.data.global_batch_size
        while self.step < cfg.max_steps:
            t0 = time.perf_counter()
            epoch = self.loader.epoch  # of this step's samples (it advances as the last one is handed out)
            batches, waited, data_iter = self._fetch_step(data_iter)
            lr = self.optimizer.param_groups[0]["lr"]
            loss, grad_norm, tokens, stop_now = self._train_step(batches, stop.requested is not None)
            elapsed = time.perf_counter() - t0
            self.step += 1
            self.tokens_seen += tokens
            self.last_loss = loss
            run_tokens += tokens
            run_time += elapsed
            run_wait += waited
            if first_step_wait is None:
                first_step_wait, first_step_time = waited, elapsed
            # media batches say how long their shard reads and their decoding took (in the worker)
            run_read += sum(b.get("read_s", 0.0) for b in batches)
            run_decode += sum(b.get("decode_s", 0.0) for b in batches)
            interval["steps"] += 1
            interval["tokens"] += tokens
            interval["time"] += elapsed
            interval["wait"] += waited

            if self.sample_log is not None:
                ids = [int(i) for b in batches for i in b["sample_ids"].tolist()]
                record: dict[str, Any] = {"step": self.step, "rank": self.env.rank, "sample_ids": ids}
                if "pixel_values" in batches[0]:
                    # what the model saw, augmentation included: a resumed run must see the same pixels
                    record["pixel_sha256"] = [hashlib.sha256(b["pixel_values"].numpy().tobytes()).hexdigest()
                                              for b in batches]
                self.sample_log.write(record)
            last = self.step == cfg.max_steps
            logged = self.step % cfg.log_interval == 0 or last or stop_now or self.step == 1
            # every rank (a collective: one small all_gather per logged step); None for media batches
            seq_stats = step_seq_stats(batches, self.env, self.device) if logged else None
            if self.metrics is not None and logged:
                self.metrics.log({
                    "kind": "train", "step": self.step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                    "tokens_per_s": interval["tokens"] / max(interval["time"], 1e-9),
                    "samples_per_s": interval["steps"] * step_samples / max(interval["time"], 1e-9),
                    "data_wait_fraction": interval["wait"] / max(interval["time"], 1e-9),
                    "step_time_s": interval["time"] / interval["steps"],
                    "tokens_seen": self.tokens_seen, "epoch": epoch, **(seq_stats or {}),
                    # the high-water mark of this rank's tensors since the run started: what an
                    # optimizer choice (8-bit AdamW's states are a quarter of fp32's) or a batch size changes
                    **({"cuda_peak_allocated_gib": torch.cuda.max_memory_allocated(self.device) / 2**30}
                       if self.device.type == "cuda" else {}),
                    **({"decode_fraction": run_decode / max(run_read + run_decode, 1e-9),
                        "modalities_seen": dict(self.modalities_seen)} if self.media is not None else {}),
                })
                interval = {"steps": 0, "tokens": 0, "time": 0.0, "wait": 0.0}
            if stop_now:
                save_run_checkpoint(self)
                stopped = True
                if self.env.is_main:
                    log.warning("stopped by %s after step %d; checkpoint saved", stop.requested or "another rank",
                                self.step)
                break
            if self.eval_loader is not None and (self.step % cfg.validation.eval_interval == 0 or last):
                self.last_eval_loss, eval_tokens = self.evaluate()
                if self.metrics is not None:
                    self.metrics.log({"kind": "eval", "step": self.step, "eval_loss": self.last_eval_loss,
                                      "eval_tokens": eval_tokens, "tokens_seen": self.tokens_seen})
            if self.step % cfg.checkpoint.interval == 0 or last:
                save_run_checkpoint(self)

        latest = find_latest_checkpoint(cfg.checkpoint.dir)
        return TrainResult(
            step=self.step, max_steps=cfg.max_steps, stopped_by_signal=stopped, loss=self.last_loss,
            eval_loss=self.last_eval_loss, tokens_seen=self.tokens_seen,
            tokens_per_s=run_tokens / run_time if run_time else 0.0,
            data_wait_fraction=steady_wait(run_wait, run_time, first_step_wait, first_step_time),
            first_step_wait_s=first_step_wait or 0.0, resumed_from=self.resumed_from,
            samples_per_s=(self.step - (self.resumed_from or 0)) * step_samples / run_time if run_time else 0.0,
            decode_fraction=(run_decode / max(run_read + run_decode, 1e-9)) if self.media is not None else None,
            modalities_seen=dict(self.modalities_seen) if self.media is not None else None,
            checkpoint=str(latest.path) if latest else None, metrics_path=str(cfg.metrics_path),
        )

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.sample_log is not None:
            self.sample_log.close()


def run(cfg: RunConfig, callbacks: Sequence[MetricsCallback] = ()) -> TrainResult:
    """Train `cfg` to `max_steps` (or until SIGTERM/SIGINT) on this process's rank; `callbacks` get
    rank 0's metric records. Leaves torch's global settings as it found them."""
    if cfg.deterministic:
        # cuBLAS needs this before its first call to be deterministic (PyTorch reproducibility notes).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if cfg.cpu_threads:
        torch.set_num_threads(cfg.cpu_threads)
    torch.use_deterministic_algorithms(cfg.deterministic)
    env = init_distributed()
    stop = StopRequest()
    stop.install()
    trainer = None
    try:
        trainer = Trainer(cfg, env, callbacks)
        return trainer.train(stop)
    finally:
        if trainer is not None:
            trainer.close()
        # The model and its DDP reducer go before their process group: freed after
        # destroy_process_group (when this frame's locals were released), gloo's reducer teardown
        # blocked forever in ~1 of 7 two-rank CPU runs under CPU contention.
        trainer = None
        gc.collect()
        stop.restore()
        shutdown_distributed(env)
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def configure_logging() -> None:
    """`training` log lines on stdout (rank-prefixed under torchrun, where ranks share a terminal)."""
    rank = os.environ.get("RANK")
    prefix = f"[rank {rank}] " if rank is not None and os.environ.get("WORLD_SIZE", "1") != "1" else ""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(f"{prefix}%(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="run config file (YAML or JSON)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set optimizer.lr=1e-3 (repeatable)")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        cfg = load_run_config(args.config, dict(parse_override(o) for o in args.set))
    except RunConfigError as err:
        print(err, file=sys.stderr)
        return 2
    run(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
