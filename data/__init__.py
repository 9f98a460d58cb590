"""Datasets and per-rank loaders. `build_loader` returns a DataLoader over a DistributedSampler
shard. torch is imported by the functions that build them, not here: job.config runs `check` before
the task's module (and torch) is imported, so a bad data set is refused without torch's start-up."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

from base.record import setting

from base.build import build
from base.errors import ConfigError
from data.folder import class_count, scan

if TYPE_CHECKING:
    from torch.utils.data import DataLoader, Dataset


def check(cfg, submitting: bool = False) -> None:
    """Before any rank starts: the data set exists and fits the model (data.kind itself is the
    schema's). On a Slurm login node a root this host cannot see may be the compute nodes' own disk:
    the job checks it there."""
    if cfg.data.kind == "raw_folder":
        shape, size = sample_shape(cfg), cfg.data.image_size
        if shape is not None and shape != (3, size, size):
            raise ConfigError(
                f"model.input_shape={list(shape)} but data=raw_folder holds 3x{size}x{size} images "
                f"(data.image_size={size}). Use data=fake, or model.input_shape=[3,{size},{size}]."
            )
        if submitting and not Path(cfg.data.root).exists():
            return
        samples = scan(Path(cfg.data.root), cfg.data.image_size)  # missing, empty, wrong-size files
        check_shard(len(samples), cfg.batch_size, cfg.world_size, cfg.data.root)
        classes = class_count(cfg.data.root)
        if classes > cfg.model.num_classes:
            raise ConfigError(
                f"data.root={cfg.data.root} has {classes} classes but the model has "
                f"{cfg.model.num_classes} outputs; set model.num_classes>={classes}."
            )


def build_dataset(
    data_cfg, rank: int, world_size: int, samples_needed: int, shape: tuple | None = None
) -> Dataset:
    """The Dataset data_cfg's `_target_` names (base/build.py), given the samples the run needs, the
    sample shape of a model that says its own (model.input_shape) and the rank's seed."""
    return build(data_cfg, length=samples_needed, shape=shape, seed=rank)


def sample_shape(cfg) -> tuple[int, ...] | None:
    """model.input_shape, for a model that says its own (model=custom); None: an image of
    data.image_size."""
    shape = setting(cfg, "model.input_shape")
    return tuple(int(n) for n in shape) if shape else None


def build_loader(cfg, rank: int, world_size: int, pin_memory: bool) -> DataLoader:
    from torch.utils.data import DataLoader, DistributedSampler

    per_step = cfg.batch_size * world_size
    samples_needed = (
        per_step * (cfg.warmup_steps + cfg.steps + cfg.probe_steps + 1) * cfg.accumulate
    )
    dataset = build_dataset(cfg.data, rank, world_size, samples_needed, sample_shape(cfg))
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True
    )
    return DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        sampler=sampler,
        num_workers=cfg.data.workers,
        pin_memory=pin_memory,
        drop_last=True,
        persistent_workers=cfg.data.workers > 0,
        worker_init_fn=functools.partial(die_with_the_rank, os.getpid())
        if cfg.data.workers > 0
        else None,
    )


def die_with_the_rank(rank_pid: int, worker_id: int) -> None:
    """A DataLoader worker ends when its rank dies (`kill -9`, the OOM killer): the kernel sends it
    SIGKILL (prctl PR_SET_PDEATHSIG, Linux). Without it the worker notices only at its next status
    check (torch checks every 5 s) and holds its memory and a core until then."""
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != rank_pid:  # the rank died before the request took effect
        os._exit(1)


def check_shard(samples: int, batch_size: int, world_size: int, root) -> None:
    """Each rank's shard (DistributedSampler, drop_last) must hold one full batch, or its loader
    yields nothing."""
    per_rank = samples // world_size
    if per_rank < batch_size:
        raise ConfigError(
            f"data.root={root} holds {samples} samples: {per_rank} per rank for {world_size} "
            "ranks, fewer than "
            f"batch_size={batch_size}. It needs at least {batch_size * world_size} samples "
            f"(batch_size x world_size): add files, or lower batch_size or world_size."
        )


def batches(loader: DataLoader):
    """Endless batches: a new epoch (and sampler shuffle) whenever the shard runs out. An epoch that
    yields nothing raises: looping over it again would spin forever without ever reaching a
    collective that could time out."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise RuntimeError(
                f"this rank's data shard ({len(loader.sampler)} samples) holds no full batch of "
                f"{loader.batch_size}: the data set is too small for batch_size x world_size."
            )
        epoch += 1
