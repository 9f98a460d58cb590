"""Phase timers for the measured step.

GPU: a CUDA event is recorded on the compute stream at every phase boundary; durations are read after the window, so
the host never waits inside it. A phase's GPU time is how long the stream spent between its boundaries: host stalls
(a slow loader) show up as the gap the GPU had to wait. CPU: time.perf_counter at the same boundaries.
With timing off, no boundaries are recorded at all (see tasks/train/harness_cost.py for what they cost)."""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

import torch

PHASES = ("data", "h2d", "forward", "backward", "sync", "optimizer")


class Clock:
    """Marks on the device's timeline: CUDA events on GPU (no host wait), perf_counter on CPU.
    Read them with seconds() after device_sync()."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


class PhaseTimer:
    def __init__(self, device: torch.device, enabled: bool = True, nvtx: bool = False):
        self.clock = Clock(device)
        self.enabled = enabled
        self.nvtx = nvtx and self.clock.cuda
        self.steps: list[list[tuple[str, object]]] = []   # per step: [("start", mark), (phase, mark at its end), ...]

    def start_step(self) -> None:
        if self.enabled:
            self.steps.append([("start", self.clock.mark())])

    @contextmanager
    def phase(self, name: str):
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if self.nvtx:
                torch.cuda.nvtx.range_pop()
            if self.enabled:
                self.steps[-1].append((name, self.clock.mark()))

    def reset(self) -> None:
        self.steps.clear()

    def durations(self) -> list[dict[str, float]]:
        """Seconds per phase for each recorded step (a phase entered several times, e.g. with gradient accumulation,
        is summed), plus "step": the whole step. Call after the device is synchronised."""
        out = []
        for marks in self.steps:
            d = {p: 0.0 for p in PHASES}
            for (_, a), (name, b) in zip(marks[:-1], marks[1:]):
                d[name] = d.get(name, 0.0) + self.clock.seconds(a, b)
            d["step"] = self.clock.seconds(marks[0][1], marks[-1][1])
            out.append(d)
        return out


def stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    s = sorted(values)
    return {
        "median": statistics.median(s),
        "p90": s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))],
        "mean": statistics.fmean(s),
        "min": s[0],
        "max": s[-1],
    }


def device_sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
