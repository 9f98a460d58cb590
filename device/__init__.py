"""The one place that touches CUDA streams, events, synchronisation, record_stream and graph
capture.

The step loop, the H2D feeders, CUDA graphs and the comm tasks ask a Device (the interface, and the
CPU's: device/cpu.py) for them:

    cuda   device/cuda.py   the real thing, one torch.cuda call per method cpu    device/cpu.py
    CPU ranks: no streams, the host clock, nothing to synchronise fake   device/fake.py   tests only
    (device=fake): CPU tensors through the CUDA code paths, with the stream rules
                            enforced (waits before use, record_stream across streams, no sync in the
                            window)

Which one a rank gets, and its backend, is decided once for all ranks in device/placement.py;
tasks/train/memory.py refuses a config that cannot fit before any rank starts."""

from __future__ import annotations

from device.cpu import Device
from device.placement import Placement

_opened: Device | None = None  # this rank's device, once opened


def open_device(placement: Placement) -> Device:
    """This rank's device for the rest of its life (ranks are processes: one each). The fake starts
    enforcing here, before the model and DDP exist, so their set-up is checked too."""
    global _opened
    if placement.kind == "cuda":
        import torch

        from device.cuda import CudaDevice

        torch.cuda.set_device(placement.torch_device)
        _opened = CudaDevice(placement.gpu)
    elif placement.kind == "fake":
        from device.fake import FakeDevice

        _opened = FakeDevice().activate()
    else:
        _opened = Device()
    return _opened


def layer_for(device) -> Device:
    """The device layer for a torch.device (or a Device, returned as is): the rank's own where it
    matches, else the plain CUDA or CPU one (a comm task may put its tensors on CUDA while the rank
    computes on CPU, or the reverse)."""
    if isinstance(device, Device):
        return device
    import torch  # here, not at the top: see device/cpu.py's _CpuTorchDevice

    device = torch.device(device)
    if _opened is not None and _opened.torch_device == device:
        return _opened
    if device.type == "cuda":
        from device.cuda import CudaDevice

        return CudaDevice(device.index if device.index is not None else torch.cuda.current_device())
    return Device()


def synchronize(device) -> None:
    """Wait until everything queued on `device` (a torch.device or a Device) is done: a host
    sync."""
    layer_for(device).synchronize()


class Clock:
    """Marks on a device's timeline (CUDA events, or the host clock), read with seconds() after a
    synchronize()."""

    def __init__(self, device):
        self.device = layer_for(device)

    def mark(self):
        return self.device.mark()

    def seconds(self, start, end) -> float:
        return self.device.seconds(start, end)


__all__ = ["Clock", "Device", "Placement", "layer_for", "open_device", "synchronize"]
