"""Phase timers for the measured step.

GPU: a CUDA event is recorded on the compute stream at every phase boundary; durations are read
after the window, so the host never waits inside it. A phase's GPU time is how long the stream spent
between its boundaries: host stalls (a slow loader) show up as the gap the GPU had to wait. CPU (and
device=fake): the host clock at the same boundaries. With timing off, no boundaries are recorded at
all (see tasks/train/harness_cost.py for what they cost)."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from device import Clock


class PhaseTimer:
    def __init__(self, device, enabled: bool = True, nvtx: bool = False):
        """device: the rank's Device (or a torch.device)."""
        self.clock = Clock(device)
        self.enabled = enabled
        self.nvtx = nvtx and self.clock.device.kind == "cuda"
        self.steps: list[
            list[tuple[str, object]]
        ] = []  # per step: [("start", mark), (phase, mark at its end), ...]

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
        """Seconds per phase for each recorded step (a phase entered several times, e.g. with
        gradient accumulation, is summed; a phase never entered, e.g. forward in a replayed CUDA
        graph, is absent), plus "step": the whole step. Call after the device is synchronised."""
        out = []
        for marks in self.steps:
            d: dict[str, float] = {}
            for (_, a), (name, b) in zip(marks[:-1], marks[1:]):
                d[name] = d.get(name, 0.0) + self.clock.seconds(a, b)
            d["step"] = self.clock.seconds(marks[0][1], marks[-1][1])
            out.append(d)
        return out
