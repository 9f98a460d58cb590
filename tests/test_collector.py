"""The garbage collector kept out of the measured window (tasks.train.window.settle_collector).

The quiet benchmark of 2026-12-07 timed one or two 120-240 ms steps in 8 of 9 loopback DDP runs of
~7 ms steps: a full collection scanning what set-up had allocated, landing in the window. These
tests hold the mechanism (a full collection after it skips set-up's objects) and its place in the
loop (after the warm-up, before the first timed step, once)."""

from __future__ import annotations

import gc
import time

import torch.distributed as dist
from omegaconf import OmegaConf

import device as device_layer
from base.context import RankContext
from device.placement import Placement
from job.config import prepare
from tasks.train.window import settle_collector
from tests.conftest import TINY, close_group, compose


def _full_collection_s() -> float:
    t0 = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t0


def test_after_settling_a_full_collection_skips_what_was_allocated_before():
    setup = [{"i": i, "l": [i]} for i in range(300_000)]  # set-up's objects, all tracked
    try:
        before = min(_full_collection_s() for _ in range(3))
        settle_collector()
        assert gc.get_freeze_count() >= len(setup)
        after = min(_full_collection_s() for _ in range(3))
    finally:
        gc.unfreeze()
    assert after < before / 3, (before, after)


def test_the_loop_settles_the_collector_once_between_warm_up_and_window(tmp_path, monkeypatch):
    from tasks.train import loop

    seen = []
    monkeypatch.setattr(loop, "settle_collector", lambda: seen.append(dict(progress)))
    cfg = OmegaConf.create(prepare(compose([*TINY, "world_size=1", "warmup_steps=2"])))
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    dev = device_layer.open_device(Placement("cpu", None, "gloo", "test"))
    progress: dict = {}
    try:
        ctx = RankContext(
            cfg=cfg,
            rank=0,
            world_size=1,
            local_rank=0,
            device=dev,
            backend="gloo",
            output_dir=tmp_path,
            hostname="test",
            progress=progress,
        )
        result = loop.run(ctx)
    finally:
        close_group()
    assert result is not None and result.steps > 0
    # called once: every warm-up step done, no measured step yet
    assert seen == [{"warmup_steps_done": 2}], seen
    assert progress["measured_steps_done"] == result.steps
