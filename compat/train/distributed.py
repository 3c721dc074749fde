"""torchrun support: one process per device, DistributedDataParallel, sharded batches.

Under ``torchrun --nproc_per_node=N`` the environment carries RANK / WORLD_SIZE / LOCAL_RANK;
:func:`init_distributed` then joins the process group (NCCL on GPUs, gloo on CPUs). Sharding
follows DistributedSampler: every rank draws the same global permutation and the same
augmentation parameters from the same seeded generator, and takes every ``world``-th sample of
each global batch, so N processes see exactly the samples (and shifts) one process would.
Gradients are averaged by DDP, which equals the single-process gradient of the global batch
for any per-sample loss. BatchNorm statistics (and in-batch negatives of contrastive losses) are
per rank, which is why multi-process results match a single process within a tolerance, not
bit for bit (SyncBatchNorm only runs on GPUs).
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # we created the process group, so we destroy it

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(use_cuda: bool) -> DistInfo:
    """Join the process group described by torchrun's environment (or none: a single process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, owns_group=False)
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    # The group lives as long as the process: a second fit in the same process (a train stage
    # followed by another fit) joins it again. Destroying and re-creating it re-binds the env://
    # store's port while the peer may still talk to the old one, which hung the 2-process test.
    atexit.register(_destroy)
    return DistInfo(rank, world, local_rank, owns_group=True)


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def shutdown(info: DistInfo) -> None:
    """End of a fit: wait for every rank, keep the group for later fits (destroyed at exit)."""
    barrier(info)


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t
