"""The measured window: timed blocks of steps, and when to stop measuring (`measure.*`).

    for n in window.blocks():        # before each block: device sync + barrier; after it: device
    sync
        for _ in range(n):           # nothing in here waits on the device: steps are queued as in
        training
            train_step()

Each block's wall clock is one throughput sample (a rank's host clock, between the two syncs), so
the throughput has an interval even with timing=false (batch means over the blocks: stats.within).
Between blocks, outside any timed block,
`policy=adaptive` asks whether the window has the steps Stein's two-stage rule planned from its
first 20 (or `steps`) for a median known to `measure.rel_ci` (stats.summary.planned_steps); the
ranks agree through one all_reduce of two flags, so every rank stops after the same block.
`policy=fixed` measures exactly `steps` and needs no agreement."""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager

import torch
import torch.distributed as dist

from base.record_types import Measure
from stats import adaptive_should_stop, batch_median, rel_halfwidth
from stats.summary import MIN_BLOCKS
from stats.within import BATCHES
from device import synchronize

AGREEMENT = (
    "one all_reduce(MAX) of [any rank wants more, any rank stopped on a cap] after each block, "
    "outside the "
    "timed blocks"
)


def block_size(steps: int, block_steps: int) -> int:
    """Steps per timed block: at least MIN_BLOCKS blocks in the minimum window, so its throughput
    has an interval (50 GPU steps in blocks of 10 would be 5): the block shrinks to steps //
    MIN_BLOCKS when measure.block_steps is larger. Every block has this size but the fixed window's
    last, which may be shorter."""
    return max(1, min(int(block_steps), int(steps) // MIN_BLOCKS))


class Window:
    def __init__(self, cfg, device: torch.device, timer, counter=None):
        m = cfg.measure
        self.policy = m.policy
        self.min_steps = int(cfg.steps)
        self.block = block_size(self.min_steps, m.block_steps)
        self.rel_ci = float(m.rel_ci)
        self.max_steps = None if m.max_steps is None else int(m.max_steps)
        self.max_s = None if m.max_s is None else float(m.max_s)
        self.device, self.timer, self.counter = device, timer, counter
        self.walls: list[float] = []  # per block, this rank
        self.sizes: list[int] = []  # steps per block
        self.stopped_by = None
        self.target_reached = None
        self.window_s = 0.0  # first block's start to the last one's end, agreement included

    @property
    def steps(self) -> int:
        return sum(self.sizes)

    @property
    def planned_steps(self) -> int | None:
        """For a progress bar: exact for policy=fixed; None for adaptive, whose end no count
        predicts (the target, or the step cap, or the time cap, whichever comes first), so a bar
        shows no false ETA."""
        return self.min_steps if self.policy == "fixed" else None

    def label(self) -> str:
        """The progress bar's name for the window: how it ends."""
        if self.policy == "fixed":
            return "measured"
        caps = [
            f"{self.max_steps} steps" if self.max_steps is not None else None,
            f"{self.max_s:g} s" if self.max_s is not None else None,
        ]
        return (
            f"measured (min {self.min_steps}; until +-{self.rel_ci:.0%} or "
            + " or ".join(c for c in caps if c)
            + ")"
        )

    def blocks(self, between=None):
        """The size of each timed block, in turn. between(): called after each block, outside its
        timed span (the profiler steps there: its schedule's end synchronises the device and writes
        the trace)."""
        start = time.perf_counter()
        while True:
            n = self._next_size()
            with timed_span(self.device, self.walls):
                yield n
            self.sizes.append(n)
            if between is not None:
                between()
            stop = self._stop(time.perf_counter() - start)
            self.window_s = time.perf_counter() - start
            if stop:
                return

    def _next_size(self) -> int:
        cap = self.min_steps if self.policy == "fixed" else self.max_steps
        return self.block if cap is None else max(1, min(self.block, cap - self.steps))

    def samples(self) -> tuple[list[float], str]:
        """What the stopping rule and the record's precision figure are about: this rank's step
        times when timing is on, else each block's wall clock per step."""
        if self.timer.enabled:
            return [
                d["step"] for d in self.timer.durations()
            ], "step times (this rank's phase timer)"
        return [
            w / n for w, n in zip(self.walls, self.sizes)
        ], "block wall clock per step (timing=false)"

    def _stop(self, elapsed: float) -> bool:
        if self.policy == "fixed":
            if self.steps >= self.min_steps:
                self.stopped_by = "fixed"
                return True
            return False
        if self.steps < self.min_steps:
            return False
        values, _ = self.samples()
        stop, reason = adaptive_should_stop(
            values, self.rel_ci, self.min_steps, self.max_steps, elapsed, self.max_s
        )
        flags = torch.tensor(
            [int(not stop), int(stop and reason != "target reached")], device=self.device
        )
        if self.counter is not None:
            with self.counter.paused():  # not gradient traffic
                dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        else:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        more, capped = flags.tolist()
        if more:
            return False
        self.target_reached = not capped
        self.stopped_by = (
            reason if reason != "target reached" or not capped else "a cap on another rank"
        )
        return True

    def describe(self) -> Measure:
        """The record's `measure` section (rank 0's view; every rank stopped after the same
        block)."""
        values, what = self.samples()
        half = None
        if values:
            b = batch_median(values, count=BATCHES)  # as the record's step_time_s (stats.describe)
            med = b["median"]
            half = rel_halfwidth(med, b["ci_lo"], b["ci_hi"]) if med > 0 else None
        adaptive = self.policy == "adaptive"
        return Measure(
            policy=self.policy,
            min_steps=self.min_steps,
            block_steps=self.block,
            rel_ci_target=self.rel_ci if adaptive else None,
            max_steps=self.max_steps if adaptive else None,
            max_s=self.max_s if adaptive else None,
            steps=self.steps,
            blocks=len(self.sizes),
            window_s=self.window_s,
            stopped_by=self.stopped_by,
            target_reached=self.target_reached,
            rel_ci_halfwidth=half,
            precision_of=what,
            agreement=AGREEMENT if adaptive else None,
        )


@contextmanager
def timed_span(device, walls: list[float]):
    """The window's bracket around a timed span, its wall appended to `walls`: a device sync and a
    barrier before (every rank starts together; nothing queued before it counts), a device sync
    after (the span's device work counts). The one bracket the window, the reference loop
    (tasks/train/reference.py) and the in-job check (tasks/train/verify.py) time with, so that
    their numbers compare: the check timed its blocks otherwise once, and behind a shaped link
    measured PowerSGD's saving at 60% where separate runs' windows gave 35%. An exception in the
    span leaves `walls` as it was."""
    synchronize(device)
    dist.barrier()
    t0 = time.perf_counter()
    yield
    synchronize(device)
    walls.append(time.perf_counter() - t0)


def settle_collector() -> None:
    """Before the measured part of a run (window, probes, in-job check): one full collection, then
    what set-up allocated (the config, the model, the loader: 10^5-10^6 objects) is moved out
    of the garbage collector's sight (gc.freeze). Otherwise the next full collection scans all
    of it: 80-330 ms a rank measured here (2026-12-07, load 8), and in the window it timed as a
    stall no training loop has in its steady state (the quiet benchmark of that day: one or two
    120-240 ms steps in 8 of 9 loopback DDP runs of ~7 ms steps, one a rank, at steps 17-35).
    The loop's own garbage is still collected; only set-up's objects are left out, as timeit
    keeps the collector out of what it times (it turns the collector off). The rank's exit
    (launchers/rank.py) unfreezes them. task=script never calls this: the collector's work
    there is the user's script's own (series.gc_s)."""
    gc.collect()
    gc.freeze()
