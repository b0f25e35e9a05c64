"""The process group: from torchrun's environment, or a single plain process.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; without them the job is
one process (world 1) and no process group is created at all, so `python -m training.train` needs
no rendezvous. NCCL on CUDA, gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    grouped: bool
    """True when a process group was initialised (under torchrun, even with one process)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistEnv:
    """Join torchrun's process group (if launched by it) and pick this rank's device."""
    if "WORLD_SIZE" not in os.environ:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        return DistEnv(rank=0, world_size=1, local_rank=0, device=device, grouped=False)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        # Before init: NCCL binds each rank's communicator to the current device.
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend, rank=rank, world_size=world_size, device_id=device if device.type == "cuda" else None
        )
    return DistEnv(rank=rank, world_size=world_size, local_rank=local_rank, device=device, grouped=True)


def shutdown(env: DistEnv) -> None:
    if env.grouped and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """In place, and returned for chaining; a no-op for a single process."""
    if env.grouped and env.world_size > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_object(obj: Any, env: DistEnv) -> Any:
    """Rank 0's `obj` on every rank (e.g. which checkpoint to resume, so all ranks agree)."""
    if not (env.grouped and env.world_size > 1):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_object(obj: Any, env: DistEnv) -> list[Any]:
    """Every rank's `obj`, in rank order."""
    if not (env.grouped and env.world_size > 1):
        return [obj]
    out: list[Any] = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(env: DistEnv) -> None:
    if env.grouped and env.world_size > 1:
        dist.barrier()


def all_gather_tensor(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Every rank's `tensor` (same shape and dtype on every rank, on this rank's device) stacked in
    rank order: [world_size, *shape]. One collective (gloo and NCCL); a plain copy for one process."""
    if not (env.grouped and env.world_size > 1):
        return tensor.unsqueeze(0).clone()
    out = [torch.empty_like(tensor) for _ in range(env.world_size)]
    dist.all_gather(out, tensor.contiguous())
    return torch.stack(out)
