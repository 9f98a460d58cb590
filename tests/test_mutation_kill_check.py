"""comm/check.py (issue 36: a module the mutation run covers): the correctness check's inputs,
expected outputs and wrong-element count (nccl-tests' #wrong column), checked against the
collectives worked out here with plain Python loops over the ranks' input formulas (docstring of
comm/check.py), not with the module's own tensors."""

from __future__ import annotations

import math

import pytest
import torch

from comm import check as ck

CPU = torch.device("cpu")


def test_the_input_ranges_fit_the_dtype():
    assert ck._sum_modulus("float32", 4) == 7
    assert ck._sum_modulus("int8", 32) == 3  # 127 // 32
    assert ck._sum_modulus("int8", 200) == 1
    assert ck._sum_modulus("bfloat16", 64) == 4  # 256 // 64
    assert ck._prod_period("float16", 24) == 3  # 11 twos fit 2048: ceil(24 / 11)
    assert ck._prod_period("float16", 4) == 2
    assert ck._prod_period("int8", 13) == 3  # 6 twos fit 127: ceil(13 / 6)


def _sum_value(i, r, m=7):
    return (i + 3 * r) % m + 1


def test_rank_values_follow_the_formulas():
    idx = torch.arange(10)
    assert ck.rank_values(None, 2, 4, idx, "float32").tolist() == [
        _sum_value(i, 2) for i in range(10)
    ]
    assert ck.rank_values("sum", 1, 40, idx, "int8").tolist() == [
        _sum_value(i, 1, 3) for i in range(10)
    ]
    got = ck.rank_values("prod", 1, 24, idx, "float16").tolist()
    assert got == [2.0 if (i + 1) % 3 == 0 else 1.0 for i in range(10)]
    avg = ck.rank_values("avg", 1, 3, idx, "float32").tolist()
    assert avg == [i % 5 + 1 + (i + 1) % 3 - (i + 2) % 3 for i in range(10)]
    assert ck.rank_values(None, 0, 4, idx, "float32").dtype == torch.float64


def test_fill_input_writes_the_salted_values():
    buf = torch.zeros(2, 3)
    ck.fill_input(buf, "sum", 1, 2, "float32", salt=5)
    assert buf.reshape(-1).tolist() == [_sum_value(i + 5, 1) for i in range(6)]


@pytest.mark.parametrize("op", ["sum", "avg", "prod", "max", "min"])
def test_all_reduce_expected_by_loops(op):
    n, recv = 3, 8

    def val(i, r):
        if op == "prod":
            return 2.0 if (i + r) % 2 == 0 else 1.0  # float32: period 2 at 3 ranks
        if op == "avg":
            return i % 5 + 1 + (i + r) % n - (i + r + 1) % n
        return _sum_value(i, r)

    want = []
    for i in range(2, recv):
        vals = [val(i + 1, r) for r in range(n)]
        want.append(
            {
                "sum": sum(vals),
                "avg": sum(vals) / n,
                "prod": math.prod(vals),
                "max": max(vals),
                "min": min(vals),
            }[op]
        )
    got = ck.expected_output("all_reduce", op, 0, n, recv, "float32", CPU, salt=1, lo=2)
    assert got.tolist() == pytest.approx(want)


def test_reduce_scatter_all_gather_and_broadcast_expected_by_loops():
    n, recv = 2, 4
    rs = ck.expected_output("reduce_scatter", "sum", 1, n, recv, "float32", CPU)
    assert rs.tolist() == [sum(_sum_value(p + 1 * recv, r) for r in range(n)) for p in range(recv)]
    ag = ck.expected_output("all_gather", None, 0, n, 6, "float32", CPU, salt=2)
    assert ag.tolist() == [_sum_value(p % 3 + 2, p // 3) for p in range(6)]
    bc = ck.expected_output("broadcast", None, 1, n, 5, "float32", CPU, root=1, hi=3)
    assert bc.tolist() == [_sum_value(p, 1) for p in range(3)]
    with pytest.raises(ValueError, match="unknown collective"):
        ck.expected_output("gather", "sum", 0, n, 4, "float32", CPU)
    with pytest.raises(ValueError, match="unknown reduce op"):
        ck.expected_output("all_reduce", "xor", 0, n, 4, "float32", CPU)


def test_count_wrong_exact_and_for_float_averages():
    want = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    assert ck.count_wrong(want.float(), want, "sum", "float32", 2) == 0
    assert ck.count_wrong(torch.tensor([1.0, 2.5, 3.0, 0.0]), want, "sum", "float32", 2) == 2
    assert ck.count_wrong(torch.tensor([1.0, 2.0]), want, "sum", "float32", 2) == 4
    assert ck.count_wrong(torch.ones(6), want, "sum", "float32", 2) == 6
    nan = torch.tensor([1.0, float("nan"), 3.0, 4.0])
    assert ck.count_wrong(nan, want, "max", "float32", 2) == 1
    # avg: within 2 n eps (|want| + n); float32 eps 2^-23, n=2: at 4.0, 4 * 2^-23 * 6 = 2.86e-6
    eps = 2.0**-23
    tol4 = 2 * 2 * eps * (4.0 + 2)
    near = want.clone()
    near[3] += 0.9 * tol4
    assert ck.count_wrong(near, want, "avg", "float64", 2) == 1  # float64: exact
    assert ck.count_wrong(near.float().double(), want, "avg", "float32", 2) == 0
    far = want.clone()
    far[3] += 1.1 * tol4
    assert ck.count_wrong(far, want, "avg", "float32", 2) == 1
    assert ck.count_wrong(near, want, "sum", "float32", 2) == 1  # sum: exact
    assert ck.count_wrong(nan, want, "avg", "float32", 2) == 1
    ints = torch.tensor([1, 2, 3, 5], dtype=torch.int32)
    assert ck.count_wrong(ints, want, "avg", "int32", 2) == 1


def test_broadcast_defaults_to_root_zero_and_salts_forward():
    got = ck.expected_output("broadcast", None, 1, 2, 3, "float32", CPU)
    assert got.tolist() == [_sum_value(p, 0) for p in range(3)]
    salted = ck.expected_output("broadcast", None, 1, 2, 3, "float32", CPU, salt=2)
    assert salted.tolist() == [_sum_value(p + 2, 0) for p in range(3)]


def test_an_average_exactly_at_the_tolerance_is_right():
    # want 0, n = 2: tolerance 2 x 2 x 2^-23 x (0 + 2) = 2^-20, exact in float64
    want = torch.zeros(2, dtype=torch.float64)
    at = torch.tensor([2.0**-20, -(2.0**-20)], dtype=torch.float64)
    assert ck.count_wrong(at, want, "avg", "float32", 2) == 0
    assert ck.count_wrong(at * 1.001, want, "avg", "float32", 2) == 2
