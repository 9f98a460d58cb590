"""Free GPU memory from NVML, so the launcher's checks never create a CUDA context.

torch.cuda.mem_get_info needs a context on every device it asks about: in the launching process that
is several hundred MiB held on each GPU for the whole job, memory the ranks then lack. NVML (the
driver's libnvidia-ml.so.1, the library torch's own NVML-based device count loads the same way)
reads the same figure without one. Device i here is CUDA's ordinal i in this process, mapped to
NVML's index through CUDA_VISIBLE_DEVICES by torch's helper."""

from __future__ import annotations

import ctypes


class _Memory(ctypes.Structure):  # nvmlMemory_t (nvml.h): total, free, used, bytes
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def free_bytes(count: int) -> list[int] | None:
    """Free memory of CUDA devices 0..count-1, or None when NVML cannot say (no driver library, MIG
    UUIDs, an error): the caller then skips its check rather than guessing."""
    if count < 1:
        return []
    try:
        from torch.cuda import _get_nvml_device_index

        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            return None
        try:
            out = []
            for i in range(count):
                handle = ctypes.c_void_p()
                if (
                    lib.nvmlDeviceGetHandleByIndex_v2(
                        ctypes.c_uint(_get_nvml_device_index(i)), ctypes.byref(handle)
                    )
                    != 0
                ):
                    return None
                memory = _Memory()
                if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
                    return None
                out.append(int(memory.free))
            return out
        finally:
            lib.nvmlShutdown()
    except (OSError, AttributeError, ImportError, IndexError, RuntimeError, ValueError):
        return None
