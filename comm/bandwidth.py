"""nccl-tests' arithmetic, so our numbers can be set beside theirs.

algbw = S / t, busbw = algbw x factor, GB = 1e9 bytes (nccl-tests doc/PERFORMANCE.md). S is the size
nccl-tests puts in its "size" column: the buffer for all_reduce and broadcast, the *total* (all
ranks') buffer for all_gather and reduce_scatter. The factor turns algbw into the bandwidth each
link must carry with an optimal algorithm, which is comparable across rank counts and with the
hardware's peak:
  all_reduce 2(n-1)/n    all_gather (n-1)/n    reduce_scatter (n-1)/n    broadcast 1
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from base.schema import DTYPE_ALIASES, DTYPE_NAMES, OPS, REDUCE_OPS  # noqa: F401 - the config's names, used here

REDUCING_OPS = ("all_reduce", "reduce_scatter")
SPLIT_OPS = ("all_gather", "reduce_scatter")  # their size is split evenly over the ranks

GB = 1e9

NCCL_TYPE_NAMES = {
    "float32": "float",
    "float16": "half",
    "float64": "double",
}  # nccl-tests' names where they differ
if TYPE_CHECKING:
    import torch


@functools.cache
def _dtypes() -> dict[str, tuple[torch.dtype, str]]:
    """DTYPES, built at its first use: torch is imported then, not by `import comm.bandwidth`, so
    the commands that only read records (python -m diagnosis, python -m whatif, results.report)
    start without torch (seconds each)."""
    import torch

    return {name: (getattr(torch, name), NCCL_TYPE_NAMES.get(name, name)) for name in DTYPE_NAMES}


def __getattr__(name: str):
    """DTYPES: name users type (base/schema.py) -> (torch dtype, nccl-tests' name for it), from
    _dtypes()."""
    if name == "DTYPES":
        return _dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dtype_name(name: str) -> str:
    """Canonical dtype name, or KeyError."""
    name = DTYPE_ALIASES.get(str(name), str(name))
    if name not in DTYPE_NAMES:
        raise KeyError(name)
    return name


def element_size(dtype: str) -> int:
    import torch

    return torch.empty((), dtype=_dtypes()[dtype_name(dtype)][0]).element_size()


def bus_factor(op: str, world_size: int) -> float:
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in SPLIT_OPS:
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; one of {', '.join(OPS)}")


def algbw(size_bytes: int, seconds: float) -> float:
    """GB/s of the nccl-tests size moved per second (0 when the time is not positive)."""
    return size_bytes / seconds / GB if seconds > 0 else 0.0


def busbw(op: str, size_bytes: int, seconds: float, world_size: int) -> float:
    return algbw(size_bytes, seconds) * bus_factor(op, world_size)


def size_unit(op: str, elem_bytes: int, world_size: int) -> int:
    """Smallest size step the op accepts: one element, or one element per rank for ops that split
    the buffer."""
    return elem_bytes * world_size if op in SPLIT_OPS else elem_bytes


def round_size(size_bytes: int, unit: int) -> int:
    """Down to a multiple of unit (nccl-tests divides counts the same way), never below one unit."""
    return max(unit, size_bytes // unit * unit)


def size_list(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*factor, ... up to max inclusive, as nccl-tests' -b/-e/-f."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes, got {min_bytes}, {max_bytes}")
    if not factor > 1:
        raise ValueError(f"factor must be > 1, got {factor}")
    sizes, s = [], int(min_bytes)
    while s <= max_bytes:
        sizes.append(s)
        nxt = int(s * factor)
        s = nxt if nxt > s else s + 1
    return sizes


def counts(op: str, size_bytes: int, elem_bytes: int, world_size: int) -> dict[str, int]:
    """Elements in each buffer for a (rounded) nccl-tests size.

    send/recv: per-rank input/output elements; count: what nccl-tests prints in its "count" column
    (all_gather: elements each rank sends, reduce_scatter: elements each rank receives, else the
    whole buffer)."""
    total = size_bytes // elem_bytes
    if op == "all_gather":
        per = total // world_size
        return {"send": per, "recv": per * world_size, "count": per}
    if op == "reduce_scatter":
        per = total // world_size
        return {"send": per * world_size, "recv": per, "count": per}
    return {"send": total, "recv": total, "count": total}


def fmt_bytes(n: float) -> str:
    """Binary units, as the thread speaks of '471MB' for 471 MiB."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def fmt_us(seconds: float) -> str:
    """nccl-tests' time formatting: fewer decimals as the number grows."""
    us = seconds * 1e6
    if us >= 10000:
        return f"{us:.0f}"
    if us >= 100:
        return f"{us:.1f}"
    return f"{us:.2f}"


def exact_integer_limit(dtype: str) -> int:
    """Largest N such that every integer in [0, N] is exactly representable (keeps check values
    exact)."""
    import torch

    dt = _dtypes()[dtype_name(dtype)][0]
    if dt.is_floating_point:
        mantissa_bits = int(round(-math.log2(torch.finfo(dt).eps)))
        return 2 ** (mantissa_bits + 1)
    return torch.iinfo(dt).max
