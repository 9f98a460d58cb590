"""Datasets and per-rank loaders. `build_loader` returns a DataLoader over a DistributedSampler shard."""
from __future__ import annotations

from pathlib import Path

from torch.utils.data import DataLoader, Dataset, DistributedSampler

from core.errors import ConfigError
from data.fake import FakeImages
from data.raw_folder import RawFolder, class_count, scan


def check(cfg, submitting: bool = False) -> None:
    """Before any rank starts: the data set exists and fits the model (data.kind itself is the schema's). On a Slurm
    login node a root this host cannot see may be the compute nodes' own disk: the job checks it there."""
    if cfg.data.kind == "raw_folder":
        if submitting and not Path(cfg.data.root).exists():
            return
        scan(Path(cfg.data.root), cfg.data.image_size)  # missing, empty, wrong-size files
        classes = class_count(cfg.data.root)
        if classes > cfg.model.num_classes:
            raise ConfigError(f"data.root={cfg.data.root} has {classes} classes but the model has "
                              f"{cfg.model.num_classes} outputs; set model.num_classes>={classes}.")


def build_dataset(data_cfg, rank: int, world_size: int, samples_needed: int) -> Dataset:
    if data_cfg.kind == "fake":
        return FakeImages(samples_needed, data_cfg.image_size, data_cfg.num_classes, data_cfg.pool, seed=rank)
    if data_cfg.kind == "raw_folder":
        return RawFolder(data_cfg.root, data_cfg.image_size)
    from core.schema import DataKind

    raise ConfigError(f"data.kind={data_cfg.kind!r} is unknown; choose one of {', '.join(DataKind)}.")


def build_loader(cfg, rank: int, world_size: int, pin_memory: bool) -> DataLoader:
    per_step = cfg.batch_size * world_size
    samples_needed = per_step * (cfg.warmup_steps + cfg.steps + cfg.probe_steps + 1) * cfg.accumulate
    dataset = build_dataset(cfg.data, rank, world_size, samples_needed)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True)
    return DataLoader(
        dataset, batch_size=cfg.batch_size, sampler=sampler, num_workers=cfg.data.workers,
        pin_memory=pin_memory, drop_last=True, persistent_workers=cfg.data.workers > 0,
    )


def batches(loader: DataLoader):
    """Endless batches: a new epoch (and sampler shuffle) whenever the shard runs out."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
