"""The device interface, and its CPU implementation: CPU ranks compute on host memory, have no
streams, read the host clock and have nothing to synchronise. The CUDA and fake devices override
what differs."""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class NullStream:
    """A CPU rank's only "stream": work runs in program order, so there is nothing to wait for."""

    name = "host"

    def wait_stream(self, other) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _CpuTorchDevice:
    """torch.device("cpu"), made at its first read and kept: job.config imports the device package
    (through device.host) in every Hydra app, and `python train.py --help`, `--cfg job` or a refused
    command line should not pay torch's import (about 1.5 s of a core) for a class attribute. A CUDA
    device sets its own on the instance, which wins over this (it has no __set__); the fake device
    inherits this one (its tensors live on the CPU)."""

    _made = None

    def __get__(self, obj, owner):
        if _CpuTorchDevice._made is None:
            import torch

            _CpuTorchDevice._made = torch.device("cpu")
        return _CpuTorchDevice._made


class Device:
    """The device interface: what the step loop, the H2D feeders, CUDA graphs and the comm tasks may
    ask of a device. As it stands it is the CPU's (cuda.py and fake.py override what differs)."""

    kind = "cpu"
    copies = False  # a host batch must be copied to the device before use
    # the loader should pin host batches (page-locked memory makes non_blocking copies async)
    pins_memory = False
    torch_device = _CpuTorchDevice()
    _stream = NullStream()

    # -- streams
    def new_stream(self):
        return self._stream

    def current_stream(self):
        return self._stream

    def use_stream(self, stream):
        """Context in which work is queued on `stream`."""
        return nullcontext()

    def record_stream(self, tensor: torch.Tensor, stream) -> None:
        """Tell the allocator `tensor` (allocated on another stream) is used on `stream`, so its
        memory is not reused before that work is done."""

    def to_device(self, tensor: torch.Tensor, non_blocking: bool) -> torch.Tensor:
        return tensor  # no copy: CPU ranks compute on the host batch itself

    def model_to_device(self, model):
        return model.to(self.torch_device)

    def is_transfer(self, src: torch.Tensor, out: torch.Tensor) -> bool:
        """Whether `out = src.to(...)` (a script's own call) moved host memory to another device:
        the copy task=script times as h2d (tasks/script/attach.py)."""
        return out.device != src.device

    # -- time
    def mark(self):
        """A mark on the device's timeline, read with seconds() after synchronize()."""
        return time.perf_counter()

    def seconds(self, start, end) -> float:
        return end - start

    def synchronize(self) -> None:
        """Wait until every queued operation is done (a host sync)."""

    def comm_hook(self, hook):
        """A DDP comm hook as it runs on this device (the fake device watches what it does
        there)."""
        return hook

    # -- graphs
    def capture(self, step):
        raise RuntimeError(
            "CUDA graphs need a CUDA device (tasks/train/check.py refuses cuda_graphs=true on CPU)"
        )

    # -- the measured window
    @contextmanager
    def window(self, strict: bool):
        """The measured window: nothing in it may wait on the device. `strict`: make a host sync
        there an error."""
        yield

    def window_check(self, strict: bool) -> str | None:
        """For the record: how window(strict) checks for host syncs (None: a CPU rank has no device
        to wait on)."""
        return None

    # -- description
    def name(self) -> str:
        return "cpu"

    def report(self) -> dict:
        """What the record says about the device layer (for the fake: what it checked)."""
        return {"kind": self.kind}
