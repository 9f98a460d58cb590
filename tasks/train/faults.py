"""Known faults for the diagnosis and hang benchmarks: a delay (`fault.delay_*`, docs/diagnosis.md)
or a hang (`fault.hang`) of known size and place, on one rank or all, so a diagnosis can be checked
against the cause it must name. Installed before the warm-up by wrapping what the loop already
calls, so the loop has no fault code; `result.fault` records it for the benchmark, never the
diagnosis. The hangs, on fault.hang_rank at fault.hang_step:
  skip_allreduce   every rank all-reduces a metric after each step; hang_rank skips it once
  extra_barrier    a dist.barrier() under `if rank == hang_rank`
  data_sleep       hang_rank's loader never returns its next batch (the process alive)
  kill             hang_rank kills itself with SIGKILL
  size_mismatch    hang_rank all-reduces 0 elements of the 4-element metric once (gloo returns at
                   once, its peers wait for data that never comes; other sizes abort)
  pg_order         every rank all-reduces on groups A then B; hang_rank enters B first
  busy             hang_rank loops for ever in Python
"""

from __future__ import annotations

import os
import signal
import time

from base.record_types import Fault


def describe(cfg) -> Fault | None:
    """The record's result.fault: what is injected and where; None when nothing is."""
    f = cfg.fault
    if not f.delay_s and not f.sleep_s:
        return None  # a hang ends the run as `hung`: its record's config says which (fault.hang)
    delay, sleep = bool(f.delay_s), bool(f.sleep_s)
    return Fault(
        delay_s=float(f.delay_s) if delay else None,
        delay_rank=f.delay_rank if delay else None,
        delay_at=str(f.delay_at) if delay else None,
        # said only where it is not every step (a straggler's record stays as it was)
        delay_every=int(f.get("delay_every", 1)) if delay and f.get("delay_every", 1) > 1 else None,
        sleep_s=float(f.sleep_s) if sleep else None,
        sleep_at="optimizer" if sleep else None,
    )


def inject(cfg, rank: int, model, optimizer, host_batches, feeder):
    """(host_batches, feeder), wrapped where this rank has a fault; hooks on the model and
    optimizer. Off: unchanged."""
    f = cfg.fault
    if f.sleep_s:
        _after_step(optimizer, _every(1, float(f.sleep_s)))
    if f.get("hang"):
        host_batches = _hang(
            str(f.hang), rank, int(f.hang_rank), int(f.hang_step), optimizer, host_batches, feeder
        )
    if not f.delay_s or (f.delay_rank is not None and f.delay_rank != rank):
        return host_batches, feeder
    s, at = float(f.delay_s), str(f.delay_at)
    sleep = _every(int(f.get("delay_every", 1)), s)
    if at == "data":
        host_batches = _late(host_batches, sleep)
        if hasattr(
            feeder, "host_batches"
        ):  # the side-stream feeder prefetches from the loader itself
            feeder.host_batches = host_batches
    elif at == "h2d":
        if getattr(feeder, "non_blocking", True) is False:
            feeder.to_device = _waits(feeder.to_device, sleep)
    elif at == "backward":
        first = [p for p in model.parameters() if p.requires_grad][
            -1
        ]  # the last layer's: backward's first gradient
        first.register_hook(lambda grad: (sleep(), grad)[1])
    elif at == "after_optimizer":
        _after_step(optimizer, sleep)
    return host_batches, feeder


def _every(n: int, s: float):
    """A sleep of s on the 1st, (n+1)-th, (2n+1)-th ... call: once per step where it is called
    once a step (a batch, a backward, an optimizer step)."""
    calls = [0]

    def sleep() -> None:
        if calls[0] % n == 0:
            time.sleep(s)
        calls[0] += 1

    return sleep


def _after_step(optimizer, sleep) -> None:
    optimizer.register_step_post_hook(lambda *_: sleep())


def _late(batches, sleep):
    for batch in batches:
        sleep()
        yield batch


def _waits(to_device, sleep):
    def blocking_copy(batch):
        sleep()
        return to_device(batch)

    return blocking_copy


def _hang(kind: str, rank: int, hang_rank: int, at: int, optimizer, host_batches, feeder):
    """Install hang `kind` (module docstring); returns the (possibly wrapped) batches."""
    import torch
    import torch.distributed as dist

    me = rank == hang_rank
    steps = [0]
    if kind == "data_sleep":
        if me:
            host_batches = _stalls(host_batches, at)
            if hasattr(feeder, "host_batches"):
                feeder.host_batches = host_batches
        return host_batches
    groups = [dist.new_group(), dist.new_group()] if kind == "pg_order" else []

    def after_step(*_):
        step, steps[0] = steps[0], steps[0] + 1
        if kind == "skip_allreduce" and not (me and step == at):
            dist.all_reduce(torch.ones(4))  # a metric every rank reduces each step
        elif kind == "size_mismatch":
            dist.all_reduce(torch.ones(0 if me and step == at else 4))
        elif kind == "extra_barrier" and me and step == at:
            dist.barrier()
        elif kind == "kill" and me and step == at:
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "pg_order":
            for g in groups[::-1] if me and step == at else groups:
                dist.all_reduce(torch.ones(4), group=g)
        elif kind == "busy" and me and step == at:
            n = 0
            while True:
                n += 1

    optimizer.register_step_post_hook(after_step)
    return host_batches


def _stalls(batches, at: int):
    for i, batch in enumerate(batches):
        while i == at:
            time.sleep(1)
        yield batch
