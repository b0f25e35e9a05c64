"""A run's checkpoints from the trainer's side: what a checkpoint holds (model, optimizer, schedule,
loss scaler, every rank's RNG state, the loader's exact position, counters) and how a run resumes from
the newest complete one (checkpoint.py writes and finds them)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from training.checkpoint import Checkpoint, CheckpointError, find_latest_checkpoint, read_checkpoint, save_checkpoint
from training.distributed import all_gather_object, barrier, broadcast_object
from training.pretrained import save_adapter
from training.run_state import rng_state, seed_everything, set_rng_state

if TYPE_CHECKING:
    from training.train import Trainer

log = logging.getLogger("training")


class DatasetVersionMismatch(CheckpointError):
    """The newest checkpoint was trained on another dataset version."""


def resume_latest(trainer: Trainer) -> int | None:
    """Load the newest complete checkpoint, if any; returns its step."""
    cfg, env = trainer.cfg, trainer.env
    path = None
    if env.is_main:
        latest = find_latest_checkpoint(cfg.checkpoint.dir)
        if latest is not None and not cfg.checkpoint.resume:
            # keep_last prunes by step number: a fresh run's early checkpoints would be deleted first
            raise CheckpointError(
                f"checkpoint.dir {cfg.checkpoint.dir} already holds checkpoints (newest: step {latest.step}) "
                "and checkpoint.resume is false: use an empty directory, or resume"
            )
        path = str(latest.path) if latest else None
    path = broadcast_object(path, env)  # every rank resumes the same checkpoint, whatever appears meanwhile
    if path is None:
        # Per-rank streams for dropout; python/numpy for anything else random in the loop.
        seed_everything(cfg.seed * 1000 + env.rank)
        return None
    ckpt = read_checkpoint(path)
    same_data = ckpt.meta.get("dataset_version") == cfg.dataset_version
    if not same_data and not cfg.checkpoint.allow_dataset_change:
        raise DatasetVersionMismatch(
            f"checkpoint {ckpt.path} was trained on dataset_version {ckpt.meta.get('dataset_version')!r}, "
            f"this run is configured for {cfg.dataset_version!r}: refusing to resume onto other data. "
            "Use a new checkpoint.dir, or set checkpoint.allow_dataset_change: true to continue the weights "
            "(the data order then restarts at the new dataset's first sample)."
        )
    restore(trainer, ckpt, same_data)
    return ckpt.step

def restore(trainer: Trainer, ckpt: Checkpoint, same_data: bool) -> None:
    cfg, env = trainer.cfg, trainer.env
    trainer.model.load_state_dict(ckpt.load("model"))
    optim = ckpt.load("optim")
    saved_name = ckpt.meta.get("config", {}).get("optimizer", {}).get("name", "adamw")
    if saved_name != cfg.optimizer.name:  # another optimizer's state would load, then fail (or worse) later
        raise CheckpointError(f"checkpoint {ckpt.path} holds {saved_name!r} optimizer state and this run's "
                              f"optimizer.name is {cfg.optimizer.name!r}: use a new checkpoint.dir, or the "
                              "same optimizer")
    trainer.optimizer.load_state_dict(optim["optimizer"])
    trainer.scaler.load_state_dict(optim["scaler"])
    # The step counter comes from the checkpoint; the lr schedule and AdamW hyperparameters from
    # this run's config (LambdaLR and AdamW would otherwise restore the old ones), so a resumed run
    # may extend max_steps or change the lr and the change takes effect.
    sched = dict(optim["scheduler"])
    sched["lr_lambdas"] = [None] * len(trainer.optimizer.param_groups)
    sched.pop("base_lrs", None)
    trainer.scheduler.load_state_dict(sched)
    trainer.apply_optimizer_settings(trainer.scheduler.last_epoch)

    rng = ckpt.load("rng")
    if rng["world_size"] == env.world_size:
        set_rng_state(rng["ranks"][env.rank])
    else:
        # Elastic resume: per-rank streams cannot map onto another world size; reseed
        # deterministically from the step instead. The data order is unaffected (the loader's seek).
        seed_everything((cfg.seed * 1000 + env.rank) * 1_000_003 + ckpt.step)
    if same_data:
        trainer.loader.load_state_dict(ckpt.meta["loader"])
    trainer.step = ckpt.step
    trainer.tokens_seen = int(ckpt.meta["tokens_seen"])
    trainer.modalities_seen.update(ckpt.meta.get("modalities_seen") or {})
    trainer.last_loss = ckpt.meta.get("loss")
    if env.is_main:
        log.info("resumed from %s (step %d, %s tokens seen)", ckpt.path, ckpt.step, f"{trainer.tokens_seen:,}")


def save_run_checkpoint(trainer: Trainer) -> None:
    """Every rank contributes its RNG state; rank 0 writes; all wait until the checkpoint exists."""
    rng = all_gather_object(rng_state(), trainer.env)
    if trainer.env.is_main:
        save_checkpoint(
            trainer.cfg.checkpoint.dir,
            trainer.step,
            payloads={
                "model": trainer.model.state_dict(),
                "optim": {
                    "optimizer": trainer.optimizer.state_dict(),
                    "scheduler": trainer.scheduler.state_dict(),
                    "scaler": trainer.scaler.state_dict(),
                },
                "rng": {"world_size": trainer.env.world_size, "ranks": rng},
            },
            meta={
                "dataset_version": trainer.cfg.dataset_version,
                "loader": trainer.loader.state_dict(),
                "tokens_seen": trainer.tokens_seen,
                "modalities_seen": trainer.modalities_seen,
                "loss": trainer.last_loss,
                "world_size": trainer.env.world_size,
                "config": trainer.cfg.to_json_dict(),
            },
            keep_last=trainer.cfg.checkpoint.keep_last,
        )
        # LoRA: the newest adapters alone too (peft save_pretrained), replaced at every checkpoint
        save_adapter(trainer.model, Path(trainer.cfg.checkpoint.dir) / "adapter")
    barrier(trainer.env)
