"""The real thing: every method is one torch.cuda call (checked against torch/cuda/streams.py,
torch/cuda/graphs.py, torch/cuda/__init__.py and Tensor.record_stream of the torch this runs).
Nothing here runs without a GPU, which is why the step loop reaches it only through this interface
and the CPU suite drives the same loop through device/fake.py."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from device.cpu import Device


class HostSyncInWindow(RuntimeError):
    """A host synchronisation inside the measured window (it would have skewed the numbers)."""


class CudaGraph:
    """A captured step: replay() re-launches the captured kernels on the current stream; `output`
    holds what the step returned at capture, rewritten in place by every replay."""

    def __init__(self, graph: torch.cuda.CUDAGraph, output):
        self.graph, self.output = graph, output

    def replay(self):
        self.graph.replay()
        return self.output


class CudaDevice(Device):
    kind = "cuda"
    copies = True
    pins_memory = True

    def __init__(self, index: int):
        self.torch_device = torch.device("cuda", index)

    def new_stream(self):
        return torch.cuda.Stream(self.torch_device)

    def current_stream(self):
        return torch.cuda.current_stream(self.torch_device)

    def use_stream(self, stream):
        return torch.cuda.stream(stream)

    def record_stream(self, tensor, stream) -> None:
        tensor.record_stream(stream)

    def to_device(self, tensor, non_blocking):
        return tensor.to(self.torch_device, non_blocking=non_blocking)

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record(self.current_stream())
        return event

    def seconds(self, start, end) -> float:
        return (
            start.elapsed_time(end) / 1e3
        )  # milliseconds; both events must have completed (after synchronize)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.torch_device)

    def capture(self, step) -> CudaGraph:
        """Capture one call of step() as a CUDA graph. torch.cuda.graph synchronises the device,
        then captures on its own side stream. capture_error_mode="thread_local": the DataLoader's
        pin-memory thread (data.workers>0 with pinned memory) queries CUDA events during our
        capture, which the default "global" mode turns into a failed capture (PyTorch's CUDA-graph
        notes: no event queries in other threads during a global capture)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            output = step()
        return CudaGraph(graph, output)

    @contextmanager
    def window(self, strict: bool):
        """strict: torch.cuda.set_sync_debug_mode("error") while the window is open, so a
        synchronising CUDA call there (.item(), a blocking copy, a stream synchronize) raises
        instead of skewing the numbers. Not covered by that mode (c10/cuda/CUDAFunctions.cpp: only
        callers of warn_or_error_on_sync raise): torch.cuda.synchronize (a cudaDeviceSynchronize, as
        torch's PowerSGD hook calls in every bucket: tasks/train/h2d.py names it in the record),
        event waits and torch.distributed waits (see torch.cuda.set_sync_debug_mode)."""
        if not strict:
            yield
            return
        before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        except RuntimeError as e:
            if "synchronizing" not in str(e).lower():
                raise
            raise HostSyncInWindow(
                f"a host synchronisation inside the measured window ({e}): something in the step "
                "waits for the GPU there (see the traceback), which would skew the numbers. "
                "h2d=blocking measures without this check."
            ) from e
        finally:
            torch.cuda.set_sync_debug_mode(before)

    def name(self) -> str:
        return torch.cuda.get_device_name(self.torch_device)

    def window_check(self, strict: bool) -> str:
        return "error" if strict else "off"
