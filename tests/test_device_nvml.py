"""device/nvml.py on a machine without a GPU driver, and against a stand-in NVML that checks the
calls' shape."""

from __future__ import annotations

import ctypes

import pytest

from device import nvml


def test_no_driver_library_means_no_figure():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("this machine has an NVML library")
    except OSError:
        pass
    assert nvml.free_bytes(2) is None and nvml.free_bytes(0) == []


class FakeNvml:
    """Free bytes per NVML index; each call checks its arguments as nvml.h declares them."""

    def __init__(self, free: dict[int, int]):
        self.free, self.calls = free, []

    def nvmlInit_v2(self):
        return 0

    def nvmlShutdown(self):
        self.calls.append("shutdown")
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle_ref):
        assert isinstance(index, ctypes.c_uint)
        self.calls.append(index.value)
        ctypes.cast(handle_ref, ctypes.POINTER(ctypes.c_void_p))[0] = index.value + 1
        return 0 if index.value in self.free else 2  # NVML_ERROR_INVALID_ARGUMENT

    def nvmlDeviceGetMemoryInfo(self, handle, memory_ref):
        memory = ctypes.cast(memory_ref, ctypes.POINTER(nvml._Memory)).contents
        memory.total, memory.free, memory.used = 80 << 30, self.free[handle.value - 1], 1 << 30
        return 0


def test_visible_devices_are_mapped_to_nvml_indices(monkeypatch):
    fake = FakeNvml({5: 70 << 30, 3: 20 << 30})
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,3")
    assert nvml.free_bytes(2) == [70 << 30, 20 << 30]
    assert fake.calls == [5, 3, "shutdown"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,4")  # NVML refuses index 4: no figure, no guess
    assert nvml.free_bytes(2) is None
