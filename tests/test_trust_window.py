"""The measured window (tasks/train/window.py) on a one-rank gloo group in this process: timed
blocks, the fixed policy, the adaptive stopping rule and its caps, and the agreement that is not
counted as gradient traffic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from tasks.train.comm_counter import CollectiveCounter
from tasks.train.window import Window
from tests.conftest import close_group


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    close_group()


class FakeTimer:
    """Step times chosen by the test (the real timer's durations() shape)."""

    def __init__(self, enabled=True):
        self.enabled, self.times = enabled, []

    def durations(self):
        return [{"step": t} for t in self.times]


def cfg(policy="adaptive", steps=6, block=1, rel_ci=0.02, max_steps=200, max_s=None):
    return OmegaConf.create(
        {
            "steps": steps,
            "measure": {
                "policy": policy,
                "block_steps": block,
                "rel_ci": rel_ci,
                "max_steps": max_steps,
                "max_s": max_s,
            },
        }
    )


def measure(window, timer, draw):
    for n in window.blocks():
        for _ in range(n):
            timer.times.append(draw())
    return window.describe().to_dict()


def test_fixed_policy_measures_exactly_steps_in_blocks():
    timer = FakeTimer()
    w = Window(cfg("fixed", steps=20, block=3), torch.device("cpu"), timer)
    m = measure(w, timer, lambda: 0.01)
    assert (
        w.sizes == [2] * 10 and len(w.walls) == 10 and all(x > 0 for x in w.walls)
    )  # 3 shrinks to 20 // 10
    assert (
        m["steps"] == 20
        and m["stopped_by"] == "fixed"
        and m["agreement"] is None
        and m["target_reached"] is None
    )


@pytest.mark.parametrize(
    "steps,block,sizes", [(50, 10, [5] * 10), (30, 10, [3] * 10), (3, 10, [1] * 3)]
)
def test_the_minimum_window_has_at_least_ten_blocks_where_it_can(steps, block, sizes):
    """GPU defaults (50 steps, blocks of 10) would give 5 blocks, and no throughput interval
    (stats.MIN_BLOCKS: 5 batches of 2 blocks)."""
    timer = FakeTimer()
    w = Window(cfg("fixed", steps=steps, block=block), torch.device("cpu"), timer)
    measure(w, timer, lambda: 0.01)
    assert w.sizes == sizes


def test_adaptive_stops_at_the_length_its_pilot_planned():
    timer, rng = FakeTimer(), np.random.default_rng(0)
    w = Window(cfg(steps=2), torch.device("cpu"), timer)
    m = measure(w, timer, lambda: 0.01 * (1 + rng.normal(0, 0.002)))
    assert m["stopped_by"] == "target reached" and m["target_reached"] is True
    assert m["steps"] == 20  # the pilot: 20 steps (5 batches of 4), already precise enough here
    assert m["rel_ci_halfwidth"] <= 0.02 and "all_reduce" in m["agreement"]


def test_adaptive_says_when_a_cap_stopped_it_before_the_target():
    timer, rng = FakeTimer(), np.random.default_rng(1)
    w = Window(cfg(steps=6, max_steps=40), torch.device("cpu"), timer)
    m = measure(
        w, timer, lambda: 0.01 * rng.lognormal(0, 0.5)
    )  # far too noisy for +-2% in 40 steps
    assert (
        m["steps"] == 40 and m["stopped_by"] == "max_steps reached" and m["target_reached"] is False
    )
    assert m["rel_ci_halfwidth"] > 0.02
    timer = FakeTimer()
    w = Window(cfg(steps=6, max_steps=None, max_s=1e-9), torch.device("cpu"), timer)
    m = measure(w, timer, lambda: 0.01 * rng.lognormal(0, 0.5))
    assert m["steps"] == 6 and m["stopped_by"] == "max_s reached" and m["target_reached"] is False


def test_without_timing_the_rule_reads_block_walls_and_the_agreement_is_not_gradient_traffic():
    counter = CollectiveCounter().install()
    try:
        counter.start()
        timer = FakeTimer(enabled=False)
        w = Window(cfg(steps=3, max_steps=12), torch.device("cpu"), timer, counter)
        m = measure(w, timer, lambda: None)
        assert counter.stop() == (0, 0)
    finally:
        counter.uninstall()
    assert m["precision_of"].startswith("block wall clock") and 6 <= m["steps"] <= 12


def test_the_profiler_steps_between_blocks_never_inside_one():
    """Issue 19.5: prof.step() ran inside a timed block, and where its schedule ends torch
    synchronises the device and writes the trace. `between` runs after each block's wall clock is
    taken; on the fake device its device sync there is allowed, where inside the window it would be
    an error."""
    from device.fake import FakeDevice

    timer, seen = FakeTimer(), []
    w = Window(cfg("fixed", steps=20, block=2), torch.device("cpu"), timer)
    with FakeDevice() as dev:

        def profiler_step():
            seen.append(len(w.walls))
            dev.synchronize()  # what the profiler's end does on a GPU (torch.cuda.synchronize)

        for n in w.blocks(between=profiler_step):
            with dev.window(strict=True):
                for _ in range(n):
                    timer.times.append(0.01)
    assert seen == list(range(1, 11)) and w.sizes == [2] * 10


def test_an_adaptive_window_promises_no_step_count_and_shows_its_caps():
    """Issue 19.16: the bar printed `9/62 ... <07:08` on a run capped at 90 s (62 = warm-up +
    max_steps), and an interrupt said "after 7 of 6 measured steps"."""
    from job.run import interrupted_record

    w = Window(cfg("adaptive", steps=6, max_steps=60, max_s=90), torch.device("cpu"), FakeTimer())
    assert (
        w.planned_steps is None and w.label() == "measured (min 6; until +-2% or 60 steps or 90 s)"
    )
    fixed = Window(cfg("fixed", steps=6), torch.device("cpu"), FakeTimer())
    assert fixed.planned_steps == 6 and fixed.label() == "measured"
    config = {"task": "train", "steps": 6, "warmup_steps": 2, "measure": {"policy": "adaptive"}}

    class Outcome:
        progress, env, started = {"measured_steps_done": 7}, {}, None

    rec = interrupted_record(config, {"overrides": []}, "SIGINT", Outcome())
    assert rec.error == "interrupted by SIGINT after 7 measured steps (min 6)"
    config["measure"]["policy"] = "fixed"
    assert interrupted_record(config, {}, "SIGINT", Outcome()).error.endswith(
        "after 7 of 6 measured steps"
    )
