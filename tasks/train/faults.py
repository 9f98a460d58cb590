"""Known faults, for the diagnosis benchmark and its tests (`fault.delay_*`, `fault.sleep_s`): a delay of known size at
a known place of the step, on one rank or every rank, so that a diagnosis can be checked against the cause it must name.

Installed once, before the warm-up, by wrapping or hooking what the loop already calls (the loader's iterator, the
feeder, a parameter's gradient hook, the optimizer's step post-hook); the loop itself has no fault code. With the
knobs at their defaults (0) nothing is installed and the loop runs exactly as without this module. When a fault is on,
the record says so (result.fault): the benchmark reads it to know the answer; the diagnosis never does.

  data             the loader's next batch arrives delay_s late (inside the data phase)
  h2d              a blocking host-to-device copy waits delay_s for the device (h2d=blocking on a device that copies:
                   device=fake or cuda); a non-blocking or side-stream copy does not wait, as on a GPU
  backward         a hook on the first gradient backward computes sleeps delay_s (inside backward, per backward pass)
  after_optimizer  the optimizer's step post-hook sleeps delay_s (where a slow rank's logging or checkpointing sits)
"""
from __future__ import annotations

import time

from base.record_types import Fault


def describe(cfg) -> Fault | None:
    """The record's result.fault: what is injected and where; None when nothing is."""
    f = cfg.fault
    if not f.delay_s and not f.sleep_s:
        return None
    delay, sleep = bool(f.delay_s), bool(f.sleep_s)
    return Fault(delay_s=float(f.delay_s) if delay else None, delay_rank=f.delay_rank if delay else None,
                 delay_at=str(f.delay_at) if delay else None, sleep_s=float(f.sleep_s) if sleep else None,
                 sleep_at="optimizer" if sleep else None)


def inject(cfg, rank: int, model, optimizer, host_batches, feeder):
    """(host_batches, feeder), wrapped where this rank has a fault; hooks on the model and optimizer. Off: unchanged."""
    f = cfg.fault
    if f.sleep_s:
        _after_step(optimizer, float(f.sleep_s))
    if not f.delay_s or (f.delay_rank is not None and f.delay_rank != rank):
        return host_batches, feeder
    s, at = float(f.delay_s), str(f.delay_at)
    if at == "data":
        host_batches = _late(host_batches, s)
        if hasattr(feeder, "host_batches"):         # the side-stream feeder prefetches from the loader itself
            feeder.host_batches = host_batches
    elif at == "h2d":
        if getattr(feeder, "non_blocking", True) is False:
            feeder.to_device = _waits(feeder.to_device, s)
    elif at == "backward":
        first = [p for p in model.parameters() if p.requires_grad][-1]   # the last layer's: backward's first gradient
        first.register_hook(lambda grad: (time.sleep(s), grad)[1])
    elif at == "after_optimizer":
        _after_step(optimizer, s)
    return host_batches, feeder


def _after_step(optimizer, s: float) -> None:
    optimizer.register_step_post_hook(lambda *_: time.sleep(s))


def _late(batches, s: float):
    for batch in batches:
        time.sleep(s)
        yield batch


def _waits(to_device, s: float):
    def blocking_copy(batch):
        time.sleep(s)
        return to_device(batch)
    return blocking_copy
