"""Counts the collectives Python code issues (the explicit loops and every DDP comm hook go through
torch.distributed.all_reduce), so bytes per step are what was really sent, after compression. DDP's
built-in reducer (no hook) calls C++ directly; for it, the DDPSync strategy counts its buckets
instead."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch.distributed as dist


class CollectiveCounter:
    def __init__(self):
        self.calls = 0
        self.bytes = 0
        self.active = False
        self._lock = (
            threading.Lock()
        )  # PowerSGD issues its second all-reduce from a future callback thread
        self._orig = None

    def install(self) -> "CollectiveCounter":
        self._orig = dist.all_reduce
        orig, counter = self._orig, self

        def counting_all_reduce(tensor, *args, **kwargs):
            if counter.active:
                with counter._lock:
                    counter.calls += 1
                    counter.bytes += tensor.numel() * tensor.element_size()
            return orig(tensor, *args, **kwargs)

        dist.all_reduce = counting_all_reduce
        return self

    def uninstall(self) -> None:
        if self._orig is not None:
            dist.all_reduce = self._orig
            self._orig = None

    def start(self) -> None:
        self.calls, self.bytes, self.active = 0, 0, True

    @contextmanager
    def paused(self):
        """Collectives of the harness itself (the measured window's stopping agreement) are not
        gradient traffic."""
        was, self.active = self.active, False
        try:
            yield
        finally:
            self.active = was

    def stop(self) -> tuple[int, int]:
        self.active = False
        return self.calls, self.bytes
