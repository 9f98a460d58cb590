"""Inputs whose collective result is known exactly, and the wrong-element count (nccl-tests' #wrong
column).

Every rank fills its send buffer with small integers that depend on (rank, element index). Sums,
products, maxima of such values are integers the dtype holds exactly, so any difference from the
expected buffer is a wrong element, not rounding. avg is checked with a tolerance of a few ulps,
because backends may pre-multiply by 1/n before summing; its inputs are built so that the exact
average is an integer."""

from __future__ import annotations

import math

import torch

from comm.bandwidth import DTYPES, dtype_name, exact_integer_limit

SUM_MAX_VALUE = 7  # sum/max/min inputs are 1..7 (fewer when n*7 would not be exact in the dtype)


def _sum_modulus(dtype: str, world_size: int) -> int:
    return max(1, min(SUM_MAX_VALUE, exact_integer_limit(dtype) // world_size))


def _prod_period(dtype: str, world_size: int) -> int:
    """Inputs are 1 or 2; at most ceil(n/q) ranks put a 2 in any element, so the product fits
    2^log2(limit)."""
    max_twos = max(1, int(math.log2(exact_integer_limit(dtype))))
    return max(2, math.ceil(world_size / max_twos))


def rank_values(
    reduce_op: str | None, rank, world_size: int, index: torch.Tensor, dtype: str
) -> torch.Tensor:
    """float64 values rank `rank` (an int, or a tensor of ranks beside index) puts at positions
    `index` of its send buffer."""
    i, n = index, world_size
    if reduce_op == "prod":
        q = _prod_period(dtype, n)
        return torch.where((i + rank) % q == 0, 2.0, 1.0).double()
    if reduce_op == "avg":
        base = (i % 5 + 1).double()
        # ((r+i) mod n) - ((r+i+1) mod n) sums to zero over the n ranks, so the exact average is
        # `base`.
        return base + ((i + rank) % n).double() - ((i + rank + 1) % n).double()
    m = _sum_modulus(dtype, n) if reduce_op is not None else SUM_MAX_VALUE
    return ((i + 3 * rank) % m + 1).double()


def fill_input(
    buf: torch.Tensor, reduce_op: str | None, rank: int, world_size: int, dtype: str, salt: int = 0
) -> None:
    """Write this rank's check input into buf (its send buffer, all of it). salt varies the values
    per check round."""
    index = torch.arange(buf.numel(), device=buf.device, dtype=torch.int64) + salt
    buf.copy_(rank_values(reduce_op, rank, world_size, index, dtype).view_as(buf))


def expected_output(
    op: str,
    reduce_op: str | None,
    rank: int,
    world_size: int,
    recv: int,
    dtype: str,
    device: torch.device,
    root: int = 0,
    salt: int = 0,
    lo: int = 0,
    hi: int | None = None,
) -> torch.Tensor:
    """float64 values rank `rank` must hold at output positions [lo, hi) after the collective, given
    every rank filled its input with fill_input (broadcast: only the root's input matters). recv:
    output elements."""
    n = world_size
    hi = recv if hi is None else hi
    pos = torch.arange(lo, hi, device=device, dtype=torch.int64)
    if op == "broadcast":
        return rank_values(None, root, n, pos + salt, dtype)
    if op == "all_gather":
        per = recv // n
        return rank_values(None, pos // per, n, pos % per + salt, dtype)
    if op == "reduce_scatter":
        index = pos + rank * recv + salt
    elif op == "all_reduce":
        index = pos + salt
    else:
        raise ValueError(f"unknown collective {op!r}")
    parts = [rank_values(reduce_op, r, n, index, dtype) for r in range(n)]
    if reduce_op in ("sum", "avg"):
        total = torch.stack(parts).sum(0)
        return total / n if reduce_op == "avg" else total
    if reduce_op == "prod":
        return torch.stack(parts).prod(0)
    if reduce_op == "max":
        return torch.stack(parts).amax(0)
    if reduce_op == "min":
        return torch.stack(parts).amin(0)
    raise ValueError(f"unknown reduce op {reduce_op!r}")


def count_wrong(
    result: torch.Tensor, expected: torch.Tensor, reduce_op: str | None, dtype: str, world_size: int
) -> int:
    """Elements of result that differ from expected: exactly, or beyond a few ulps for float avg."""
    got = result.reshape(-1).double()
    want = expected.reshape(-1).to(got.device)
    if got.numel() != want.numel():
        return max(got.numel(), want.numel())
    torch_dtype = DTYPES[dtype_name(dtype)][0]
    if reduce_op == "avg" and torch_dtype.is_floating_point:
        eps = torch.finfo(torch_dtype).eps
        tol = 2 * world_size * eps * (want.abs() + world_size)
        bad = (got - want).abs() > tol
    else:
        bad = got != want
    bad |= torch.isnan(got)
    return int(bad.sum().item())
