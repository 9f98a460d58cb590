"""What every task receives inside a rank, whoever started the rank (elastic launcher, torchrun,
Slurm)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # job.run imports this module in every Hydra app, --help included
    import torch

JOB_START_ENV = (
    "DDP_COMM_JOB_START"  # epoch seconds the job began (job/run.py sets it; the ranks inherit it)
)


@dataclass
class RankContext:
    cfg: Any  # OmegaConf DictConfig, fully resolved (no interpolations left)
    rank: int
    world_size: int
    local_rank: int
    device: Any  # the device layer (device/: Device): streams, events, syncs, graph capture
    backend: str  # the process group's backend: "nccl" | "gloo"
    output_dir: Path  # the job's directory, shared by all ranks
    hostname: str
    # the rank side's own part of the rendezvous store (per-rank figures without a collective)
    store: Any = None
    progress: dict = field(
        default_factory=dict
    )  # how far the task got (e.g. warmup_steps_done): what an
    # interrupted run records, and what its heartbeat reports
    choose: Any = (
        None  # rank 0: result -> (change, rule) of its diagnosis's top finding, or None (set by
    )
    # launchers.rank: a task may not import the diagnosis; diagnose.verify measures that fix in the
    # job)

    @property
    def torch_device(self) -> torch.device:
        """The rank's GPU (device/placement.py), else cpu."""
        return self.device.torch_device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def rank_file(self, stem: str, suffix: str) -> Path:
        """Per-rank files carry the rank in their name, so ranks sharing a directory never
        collide."""
        return self.output_dir / f"{stem}.rank{self.rank}{suffix}"
