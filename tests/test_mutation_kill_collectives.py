"""task=collectives' numbers on hand-made timings (tasks/collectives.py): sizes with nccl-tests'
suffixes, the modes, the rounding of split ops' sizes, and the result's rows and headline (mean over
ranks, algbw = bytes / time, busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for the split ops, 1
for broadcast) written out by hand. The mutation run's targeted tests for the module."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from base import schema
from base.errors import ConfigError
from tasks import collectives as col


def test_parse_bytes_with_nccl_tests_suffixes():
    assert col.parse_bytes(1024, "k") == 1024
    assert col.parse_bytes("64K", "k") == 64 * 1024
    assert col.parse_bytes("8m", "k") == 8 * 1024**2
    assert col.parse_bytes("2GB", "k") == 2 * 1024**3
    assert col.parse_bytes(" 3 ", "k") == 3
    for bad in (0, "0K", "x", "", "1.5M", "-4"):
        with pytest.raises(ConfigError, match="collectives.min_bytes="):
            col.parse_bytes(bad, "min_bytes")


def test_sizes_and_modes():
    c = dataclasses.replace(schema.Collectives(), min_bytes="1K", max_bytes="64K", factor=4)
    assert col.sizes(c) == [1024, 4096, 16384, 65536]
    with pytest.raises(ConfigError, match="larger than max_bytes"):
        col.sizes(dataclasses.replace(c, min_bytes="1M"))
    assert col.sizes(dataclasses.replace(c, max_bytes="1K")) == [1024]
    for value, want in (
        (True, ["in_place"]),
        ("in_place", ["in_place"]),
        (False, ["out_of_place"]),
        ("out_of_place", ["out_of_place"]),
        ("both", ["out_of_place", "in_place"]),
    ):
        assert col.modes(dataclasses.replace(c, inplace=value)) == want
    with pytest.raises(ConfigError, match="collectives.inplace='x'"):
        col.modes(dataclasses.replace(c, inplace="x"))
    assert col.element_size(c) == 4


def test_plan_sizes_rounds_split_ops_to_ranks_times_elements():
    planned, note = col.plan_sizes("all_gather", [1000, 1008, 4000], 4, 2)
    assert planned == [(1000, 1000), (1008, 1008), (4000, 4000)] and note is None
    planned, note = col.plan_sizes("reduce_scatter", [1001, 1004, 4004], 4, 2)
    assert planned == [(1001, 1000), (4004, 4000)]  # 1004 -> 1000 again: dropped
    assert note == (
        "reduce_scatter: sizes rounded down to a multiple of 8 B (4 B per element x 2 ranks): "
        "1001->1000, 4004->4000; 1 size(s) fell onto an earlier one and were dropped"
    )
    planned, note = col.plan_sizes("all_reduce", [6, 10], 4, 2)
    assert planned == [(6, 4), (10, 8)]
    assert (
        note == "all_reduce: sizes rounded down to a multiple of 4 B (4 B per element): 6->4, 10->8"
    )
    many = col.plan_sizes("all_reduce", [5, 9, 13, 17, 21], 4, 2)[1]
    assert many.endswith("5->4, 9->8, 13->12, 17->16 ...")


def _entries():
    return [
        {"op": "all_reduce", "mode": "out_of_place", "size": 4096, "requested": 4096,
         "counts": {"count": 1024}},
        {"op": "all_reduce", "mode": "out_of_place", "size": 16384, "requested": 16000,
         "counts": {"count": 4096}},
        {"op": "all_gather", "mode": "in_place", "size": 8192, "requested": 8192,
         "counts": {"count": 1024}},
        {"op": "broadcast", "mode": "out_of_place", "size": 8192, "requested": 8192,
         "counts": {"count": 2048}},
    ]  # fmt: skip


def _per_rank(world):
    """per rank, per entry: (mean seconds per call, wrong elements, per-block seconds)."""
    out = []
    for r in range(world):
        rows = []
        for i in range(4):
            blocks = [1e-4 * (i + 1) * (1 + 0.01 * b + 0.1 * r) for b in range(12)]
            rows.append((float(np.mean(blocks)), r if i == 0 else 0, blocks))
        out.append(rows)
    return out


def test_result_rows_and_headline_written_out():
    world = 4
    c = dataclasses.replace(
        schema.Collectives(), ops=[schema.Op(o) for o in ("all_reduce", "all_gather", "broadcast")]
    )
    ctx = SimpleNamespace(world_size=world, backend="gloo")
    per_rank = _per_rank(world)
    r = col._result(c, _entries(), per_rank, ["n"], ctx, torch.device("cpu"))
    busbws = []
    for i, (row, e) in enumerate(zip(r.rows, _entries())):
        times = [per_rank[k][i][0] for k in range(world)]
        avg = sum(times) / world
        factor = {"all_reduce": 2 * 3 / 4, "all_gather": 3 / 4, "broadcast": 1.0}[e["op"]]
        assert (row.op, row.mode, row.bytes, row.requested_bytes, row.count) == (
            e["op"], e["mode"], e["size"], e["requested"], e["counts"]["count"],
        )  # fmt: skip
        assert row.time_us == pytest.approx(avg * 1e6)
        assert row.time_max_us == pytest.approx(max(times) * 1e6) and row.slowest_rank == 3
        assert row.algbw_GBps == pytest.approx(e["size"] / avg / 1e9)
        assert row.busbw_GBps == pytest.approx(e["size"] / avg / 1e9 * factor)
        blocks = [np.mean([per_rank[k][i][2][b] for k in range(world)]) for b in range(12)]
        assert row.time_median_us == pytest.approx(float(np.median(blocks)) * 1e6)
        assert row.time_ci_lo_us <= row.time_median_us <= row.time_ci_hi_us
        assert row.blocks == 12 and row.dtype == "float32"
        assert row.redop == ("sum" if e["op"] == "all_reduce" else "none")
        assert row.root == (0 if e["op"] == "broadcast" else -1)
        busbws.append(row.busbw_GBps)
    assert r.rows[0].wrong == 0 + 1 + 2 + 3 and r.rows[1].wrong == 0 and r.wrong_total == 6
    assert r.headline == {
        "ranks": 4,
        "all_reduce busbw GB/s": round(busbws[1], 4),  # the largest size
        "all_gather busbw GB/s": round(busbws[2], 4),
        "broadcast busbw GB/s": round(busbws[3], 4),
        "max size B": 16384,
        "avg busbw GB/s": round(sum(busbws) / 4, 4),
        "#wrong": 6,
    }
    assert r.avg_busbw_GBps == pytest.approx(sum(busbws) / 4)
    assert r.time_per_rank_us[1] == pytest.approx([per_rank[k][1][0] * 1e6 for k in range(world)])
    assert (r.world_size, r.backend, r.device, r.iters, r.notes) == (4, "gloo", "cpu", 20, ["n"])
    assert r.modes == ["out_of_place", "in_place"] and r.timing == "time.perf_counter"
    assert r.ops == ["all_reduce", "all_gather", "broadcast"]
    unchecked = col._result(
        dataclasses.replace(c, check_iters=0), _entries(), per_rank, [], ctx, torch.device("cpu")
    )
    assert unchecked.headline["#wrong"] is None


def _record(check_iters=1, modes=("out_of_place", "in_place")):
    from base.record import Record

    def row(op, mode, size, t, busbw, ci=None, redop="sum", root=-1):
        lo, hi = ci or (None, None)
        return dict(
            op=op, mode=mode, bytes=size, count=size // 4, dtype="float32", redop=redop,
            root=root, time_us=t, busbw_GBps=busbw, time_median_us=t if ci else None,
            time_ci_lo_us=lo, time_ci_hi_us=hi,
        )  # fmt: skip

    rows = [
        # an interval exactly +-50% of the time is not yet noisy; +-60% is
        row("all_reduce", "in_place", 1024, 12.0, 0.1234, (6.0, 18.0)),
        row("all_reduce", "out_of_place", 1024, 99.0, 9.0),
        row("all_reduce", "in_place", 1 << 20, 500.0, 2.5, (200.0, 800.0)),
        row("broadcast", "in_place", 1 << 20, 250.05, 4.1949, redop="none", root=0),
    ]
    result = dict(
        world_size=2, backend="gloo", device="cpu", device_name="x86", dtype="float32",
        ops=["all_reduce", "broadcast"], modes=None if modes is None else list(modes),
        check_iters=check_iters, wrong_total=0, avg_busbw_GBps=2.27415, rows=rows,
    )  # fmt: skip
    return Record.from_dict({"status": "ok", "task": "collectives", "result": result})


def test_the_console_view_line_by_line():
    # in-place rows (the call training makes), a size an op did not run shown as '-', times to
    # 0.1 us and busbw to 1e-3 GB/s, '~' where the interval is wider than +-50% of the time
    assert col.brief(_record()) == [
        "collectives: 2 gloo ranks on cpu (x86), float32, in-place; per op: time per call (us), "
        "busbw (GB/s, 1e9 B/s)",
        "     size          all_reduce           broadcast",
        "                  us     GB/s         us     GB/s",
        "    1 KiB      12.0     0.123                   -",
        "    1 MiB     500.0~    2.500     250.1     4.195",
        "avg busbw 2.274 GB/s (every op and size, as nccl-tests' 'Avg bus bandwidth'); wrong "
        "elements: 0",
        "~: its 95% interval over the blocks is wider than +-50% of it: noise (a busy host, or "
        "calls near the timer's resolution)",
        "full table (out-of-place too, the slowest rank, each time's interval): train.log, or "
        "verbose=true",
    ]
    unchecked = col.brief(_record(check_iters=0))
    assert unchecked[5].endswith("'Avg bus bandwidth'); results not checked (check_iters=0)")
    from base.record import Record

    empty = Record.from_dict({"status": "ok", "task": "collectives", "result": {}})
    assert col.brief(empty) == ["collectives: no result"]
    assert col.summarize(empty) == "collectives: no result"


def test_sizes_as_the_console_names_them():
    assert [col._size_text(s) for s in (1536, 2048, 3 << 20, 3 << 30, 1 << 30, 1)] == [
        "1536 B", "2 KiB", "3 MiB", "3 GiB", "1 GiB", "1 B",
    ]  # fmt: skip


def test_the_check_counts_each_wrong_element_of_a_rank_s_output():
    # rank 1 of 2 holding exactly what every rank's check input makes (comm.check.expected_output,
    # the fixture) has none wrong; two elements off by one, the first and the last, are two wrong
    from comm.check import expected_output

    cpu = torch.device("cpu")
    for op, redop in (
        ("all_reduce", "sum"),
        ("all_gather", None),
        ("broadcast", None),
        ("reduce_scatter", "sum"),
    ):
        want = expected_output(op, redop, 1, 2, 10, "float32", cpu, 0, 8, 0, 10)
        case = SimpleNamespace(op=op, rank=1, world=2, counts={"recv": 10}, out=want.float())
        assert col._compare(case, redop, "float32", cpu, 8) == 0
        case.out[0] += 1
        case.out[9] += 1
        assert col._compare(case, redop, "float32", cpu, 8) == 2


class _Call:
    """A case whose call counts itself, or raises what it is given."""

    def __init__(self, error=None):
        self.op, self.mode, self.redop_name, self.calls = "all_reduce", "in_place", "sum", 0
        self.send, self.error = torch.zeros(2, dtype=torch.float16), error

    def __call__(self):
        self.calls += 1
        if self.error is not None:
            raise self.error


def test_the_warm_up_calls_the_op_its_iterations_and_names_what_a_backend_cannot_run():
    cpu = torch.device("cpu")
    ok = _Call()
    col._warm_up(ok, 5, "gloo", cpu)
    assert ok.calls == 5
    with pytest.raises(ConfigError) as e:
        col._warm_up(_Call(RuntimeError("no fp16 here\nstack")), 5, "gloo", cpu)
    assert str(e.value) == (
        f"backend gloo cannot run all_reduce ({col.MODES['in_place']}, reduce_op=sum) on cpu "
        f"torch.float16 tensors in torch {torch.__version__}: no fp16 here. Remove it from "
        "collectives.ops, or change collectives.dtype / reduce_op / device / backend."
    )
    with pytest.raises(ConfigError, match=r": TypeError\. Remove it"):
        col._warm_up(_Call(TypeError()), 5, "gloo", cpu)
    with pytest.raises(torch.distributed.DistError):
        col._warm_up(_Call(torch.distributed.DistError("peer gone")), 5, "gloo", cpu)


def test_result_s_interval_level_settings_and_device(monkeypatch):
    import platform

    world = 4
    c = dataclasses.replace(
        schema.Collectives(), ops=[schema.Op(o) for o in ("all_reduce", "all_gather", "broadcast")]
    )
    ctx = SimpleNamespace(world_size=world, backend="nccl")
    per_rank = _per_rank(world)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: f"H100 ({d.type})")
    r = col._result(c, _entries(), per_rank, [], ctx, torch.device("cuda"))
    # 12 blocks: the 95% order-statistic interval is the 3rd to the 10th smallest (B ~ Bin(12, 1/2):
    # P(B <= 2) = 79 / 4096 <= 2.5% < P(B <= 3)), its level 1 - 2 x 79 / 4096
    for i, row in enumerate(r.rows):
        blocks = sorted(np.mean([per_rank[k][i][2][b] for k in range(world)]) for b in range(12))
        assert row.time_median_us == pytest.approx((blocks[5] + blocks[6]) / 2 * 1e6, rel=1e-12)
        assert row.time_ci_lo_us == pytest.approx(blocks[2] * 1e6, rel=1e-12)
        assert row.time_ci_hi_us == pytest.approx(blocks[9] * 1e6, rel=1e-12)
        assert row.time_ci_level == pytest.approx(1 - 2 * 79 / 4096)
    assert (r.dtype, r.reduce_op) == (c.dtype.value, c.reduce_op.value) == ("float32", "sum")
    assert (r.warmup_iters, r.check_iters) == (c.warmup_iters, c.check_iters)
    assert r.device_name == "H100 (cuda)" and r.timing == "CUDA events on the current stream"
    # unchecked ranks report no count: the row says none, not 0
    blind = [[(t, None, b) for t, _, b in rows] for rows in per_rank]
    assert col._result(c, _entries(), blind, [], ctx, torch.device("cpu")).rows[0].wrong is None
    # a CPU named by its machine where the processor is unnamed (as in many containers)
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert col._device_name(torch.device("cpu")) == "x86_64"


def test_the_console_view_of_a_run_without_in_place_rows():
    # only out-of-place measured (or an old record without modes): its rows, so named
    for modes in (["out_of_place"], None):
        lines = col.brief(_record(modes=modes))
        assert lines[0].startswith("collectives: 2 gloo ranks on cpu (x86), float32, out-of-place;")
        assert lines[3] == "    1 KiB      99.0     9.000                   -"
