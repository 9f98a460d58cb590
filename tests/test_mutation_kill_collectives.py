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


def test_the_check_builds_its_expected_values_in_chunks_of_its_memory_bound(monkeypatch):
    # chunk = max(4096 elements, CHECK_CHUNK_BYTES / 8 B per float64 / ranks): each chunk's expected
    # values are built on the case's device and compared with the reduce_op and ranks of the case
    from comm import check

    seen, compared = [], []

    def expected(op, redop, rank, world, recv, dtype, device, root, salt, lo, hi):
        seen.append((lo, hi, device))
        return check.expected_output(
            op, redop, rank, world, recv, dtype, device, root, salt, lo, hi
        )

    def count(got, want, redop, dtype, world):
        compared.append((redop, world))
        return check.count_wrong(got, want, redop, dtype, world)

    monkeypatch.setattr(col, "expected_output", expected)
    monkeypatch.setattr(col, "count_wrong", count)
    cpu = torch.device("cpu")
    for world, chunk_bytes, recv, bounds in (
        (2, 8 * 2 * 5000, 12000, [(0, 5000), (5000, 10000), (10000, 12000)]),  # 80000 / 8 / 2
        (1, 8 * 5000, 12000, [(0, 5000), (5000, 10000), (10000, 12000)]),  # 40000 / 8 / 1
        (2, 8, 10000, [(0, 4096), (4096, 8192), (8192, 10000)]),  # at least 4096 elements
    ):
        monkeypatch.setattr(col, "CHECK_CHUNK_BYTES", chunk_bytes)
        want = check.expected_output("all_reduce", "sum", 0, world, recv, "float32", cpu, 0, 3)
        case = SimpleNamespace(op="all_reduce", rank=0, world=world, counts={"recv": recv},
                               out=want.float())  # fmt: skip
        case.out[1] += 1  # one wrong in the first chunk, two in the last
        case.out[-1] += 1
        case.out[-2] += 1
        seen.clear()
        assert col._compare(case, "sum", "float32", cpu, 3) == 3
        assert seen == [(lo, hi, cpu) for lo, hi in bounds]
    assert set(compared) == {("sum", 2), ("sum", 1)}


def test_the_check_of_an_average_allows_rounding_within_the_ranks_tolerance():
    # avg over 3 ranks: thirds are not exact in float32; what float32 holds of them is right
    from comm.check import expected_output

    cpu = torch.device("cpu")
    want = expected_output("all_reduce", "avg", 2, 3, 64, "float32", cpu, 0, 5, 0, 64)
    case = SimpleNamespace(op="all_reduce", rank=2, world=3, counts={"recv": 64}, out=want.float())
    # one element a float32 ulp off (1.2e-7 at 1): within 2 x 3 ranks x eps x (|want| + 3)
    case.out[0] = torch.nextafter(case.out[0], torch.tensor(float("inf")))
    assert case.out[0].item() != want[0].item()  # an exact check would count it
    assert col._compare(case, "avg", "float32", cpu, 5) == 0


def test_a_one_rank_result():
    c = dataclasses.replace(schema.Collectives(), ops=[schema.Op("all_reduce")])
    ctx = SimpleNamespace(world_size=1, backend="gloo")
    entry = _entries()[0]
    blocks = [1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4]
    r = col._result(c, [entry], [[(4.5e-4, 0, blocks)]], [], ctx, torch.device("cpu"))
    (row,) = r.rows
    assert row.wrong == 0 and row.slowest_rank == 0 and row.time_us == pytest.approx(450.0)
    assert row.algbw_GBps == pytest.approx(4096 / 4.5e-4 / 1e9) and row.busbw_GBps == 0.0
    assert row.time_median_us == pytest.approx(450.0)  # (4e-4 + 5e-4) / 2
    assert r.headline["#wrong"] == 0 and r.headline["max size B"] == 4096


def _quiet_record(ops=("broadcast", "all_reduce"), link=None):
    from base.record import Record

    def row(op, size, t, busbw):
        return dict(op=op, mode="in_place", bytes=size, count=size // 4, dtype="float32",
                    redop="sum", root=-1, time_us=t, busbw_GBps=busbw, time_median_us=t,
                    time_ci_lo_us=0.9 * t, time_ci_hi_us=1.1 * t, algbw_GBps=2 * busbw,
                    time_max_us=1.5 * t, wrong=0)  # fmt: skip

    rows = [  # broadcast ran at 1 MiB only: its 1 KiB cell is '-', all_reduce's after it is not
        row("all_reduce", 1024, 12.0, 0.5),
        row("all_reduce", 1 << 20, 500.0, 0.25),
        row("all_reduce", 1 << 20, 400.0, 0.75),  # the same size again: the larger busbw counts
        row("broadcast", 1 << 20, 250.0, 0.125),
    ]
    result = dict(world_size=2, backend="gloo", device="cpu", device_name="x86", dtype="float32",
                  ops=list(ops), modes=["in_place"], check_iters=1, wrong_total=0,
                  avg_busbw_GBps=1.0, rows=rows, warmup_iters=5, iters=20,
                  timing="time.perf_counter")  # fmt: skip
    env = {"link": link} if link else {}
    return Record.from_dict({"status": "ok", "task": "collectives", "result": result, "env": env})


# a 2 Gbit/s emulated link whose TCP payload is 1.8 Gbit/s
_LINK = {"emulated": True, "rate_bit_s": 2e9, "payload_rate_bit_s": 1.8e9}


def test_the_console_view_without_noise_and_with_an_absent_cell_first():
    lines = col.brief(_quiet_record())
    assert lines[3] == "    1 KiB                   -      12.0     0.500"
    assert not any(line.startswith("~:") for line in lines)  # every interval within +-10%
    assert lines[-1].startswith("full table")
    assert len(lines) == 7


def test_busbw_against_the_emulated_link():
    # all_reduce's largest size is 1 MiB, its best busbw there 0.75 GB/s = 6 Gbit/s = 333% of 1.8
    # Gbit/s; broadcast 0.125 GB/s = 1 Gbit/s = 56%
    want = [
        "vs the emulated link: broadcast busbw at 1048576 B 1 Gbit/s = 56% of the 1.8 Gbit/s a TCP "
        "stream can carry at 2 Gbit/s (headers take the rest)",
        "vs the emulated link: all_reduce busbw at 1048576 B 6 Gbit/s = 333% of the 1.8 Gbit/s a "
        "TCP stream can carry at 2 Gbit/s (headers take the rest)",
    ]
    record = _quiet_record(link=_LINK)
    assert col.vs_link(record.result, record.env.link) == want
    assert col.brief(record)[-3:-1] == want
    assert col.summarize(record).splitlines()[-2:] == ["# " + w for w in want]
    from base.record_types import Link

    assert col.vs_link(record.result, None) == []
    assert col.vs_link(record.result, Link(emulated=False, payload_rate_bit_s=1.8e9)) == []
    assert col.vs_link(record.result, Link(emulated=True, rate_bit_s=2e9)) == []


def test_what_gloo_cannot_average():
    c = dataclasses.replace(
        schema.Collectives(), reduce_op=schema.ReduceOp("avg"), dtype=schema.DType("int32")
    )
    said = (
        "collectives.reduce_op=avg with dtype=int32: gloo averages in floating point and cannot "
        "store the result in an integer tensor. Use a float dtype, another reduce_op, or "
        "backend=nccl."
    )
    assert col.known_unsupported("gloo", c) == said
    assert col.known_unsupported("nccl", c) is None
    assert (
        col.known_unsupported("gloo", dataclasses.replace(c, dtype=schema.DType("float32"))) is None
    )
    assert (
        col.known_unsupported("gloo", dataclasses.replace(c, reduce_op=schema.ReduceOp("sum")))
        is None
    )
    # no reducing op among them: broadcast and all_gather never average
    no_reduce = [schema.Op("broadcast"), schema.Op("all_gather")]
    assert col.known_unsupported("gloo", dataclasses.replace(c, ops=no_reduce)) is None
    one = [schema.Op("broadcast"), schema.Op("reduce_scatter")]
    assert col.known_unsupported("gloo", dataclasses.replace(c, ops=one)) == said


def _cfg(world_size=2, backend="gloo", **collectives):
    from omegaconf import OmegaConf

    node = {"min_bytes": "1K", "max_bytes": "64K", "factor": 4, "device": "cpu", **collectives}
    return OmegaConf.create({"collectives": node, "world_size": world_size, "backend": backend})


def test_settings_and_the_largest_collective_from_the_config():
    cfg = _cfg(max_bytes="8K", factor=2, dtype="float16")
    c = col.settings(cfg)
    assert (c.min_bytes, c.max_bytes, c.factor, c.dtype) == ("1K", "8K", 2, schema.DType("float16"))
    assert col.largest_collective(cfg) == (8192, "the largest collective")


def test_a_bad_size_names_its_key():
    base_c = schema.Collectives()
    with pytest.raises(ConfigError, match=r"^collectives\.min_bytes='2X': a size in bytes"):
        col.sizes(dataclasses.replace(base_c, min_bytes="2X"))
    with pytest.raises(ConfigError, match=r"^collectives\.max_bytes='2X': a size in bytes"):
        col.sizes(dataclasses.replace(base_c, max_bytes="2X"))


def test_four_rounded_sizes_are_all_shown():
    note = col.plan_sizes("all_reduce", [5, 9, 13, 17], 4, 2)[1]
    assert note.endswith(": 5->4, 9->8, 13->12, 17->16")


def test_the_config_check(monkeypatch):
    from device.host import Host

    buffers = []
    monkeypatch.setattr(col, "check_buffers", lambda cfg, host, **kw: buffers.append(kw))
    host = Host(gpus=0, cpus=2, free_bytes=1 << 34, gpu_free_bytes=None)
    col.check(_cfg(max_bytes="64K", corrupt_rank=1), host=host)
    assert buffers == [
        dict(
            key="collectives.device",
            per_rank_bytes=2 * 65536 + 3 * (128 << 20),  # two buffers, three check chunks
            what="collectives.max_bytes=64K",
            fix="Lower collectives.max_bytes or the ranks per node",
            submitting=False,
        )
    ]
    col.check(_cfg(), host=host, submitting=True)
    assert buffers[-1]["submitting"] is True
    for cfg, said in (
        (_cfg(ops=[]), "collectives.ops is empty; list at least one of all_reduce, all_gather, "
                       "reduce_scatter, broadcast."),
        (_cfg(corrupt_rank=2), "collectives.corrupt_rank=2 but the run has 2 ranks. Use "
                               "collectives.corrupt_rank<=1, or null."),
        (_cfg(inplace="x"), "collectives.inplace='x': true (in-place), false (out-of-place) or "
                            "both (both column groups, as nccl-tests prints)."),
        (_cfg(min_bytes="1M"), "collectives.min_bytes=1M is larger than max_bytes=64K."),
        (_cfg(reduce_op="avg", dtype="int32"), "collectives.reduce_op=avg with dtype=int32: gloo "
                                               "averages"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            col.check(cfg, host=host)
        assert str(e.value).startswith(said)
    # the backend the ranks will pick decides: nccl averages integers
    col.check(_cfg(backend="nccl", reduce_op="avg", dtype="int32"), host=host)
    col.check(_cfg(corrupt_rank=1), host=host)
    assert len(buffers) == 4


def _two_modes(wrong=(0, 3), ci=True, check_iters=2, wrong_total=3, notes=("n1", "n2")):
    from base.record import Record

    def row(mode, t, w):  # algbw = busbw = 4096 B / t: 0.256 GB/s at 16 us, 0.32 at 12.8 us
        return dict(op="all_reduce", mode=mode, bytes=4096, count=1024, dtype="float32",
                    redop="sum", root=-1, time_us=t, time_max_us=t + 2.5,
                    algbw_GBps=4096 / t / 1e3, busbw_GBps=4096 / t / 1e3, wrong=w,
                    time_median_us=t if ci else None, time_ci_lo_us=t - 1,
                    time_ci_hi_us=t + 2)  # fmt: skip

    result = dict(world_size=2, backend="gloo", device="cpu", device_name="x86", dtype="float32",
                  ops=["all_reduce"], modes=["out_of_place", "in_place"], check_iters=check_iters,
                  wrong_total=wrong_total, avg_busbw_GBps=0.3456789, warmup_iters=3, iters=16,
                  timing="time.perf_counter", notes=list(notes),
                  rows=[row("out_of_place", 16.0, wrong[0]),
                        row("in_place", 12.8, wrong[1])])  # fmt: skip
    return Record.from_dict({"status": "ok", "task": "collectives", "result": result})


def _head(rounds):
    return [
        "# collectives (nccl-tests style): 2 ranks, backend gloo, device cpu (x86), float32",
        "# 3 warm-up + 16 timed iterations per size in up to 8 blocks (time.perf_counter, barrier "
        f"before each block); {rounds} untimed check round(s); time = total / iters, average over "
        "ranks; last columns: median over blocks with its 95% order-statistic interval (8 blocks: "
        "96.9%; fewer than 6: min-max, below 95%); GB = 1e9 B",
        "#",
        "# all_reduce",
    ]


def test_the_full_table_both_modes_line_by_line():
    # nccl-tests' columns for out-of-place then in-place, the slowest rank's time (16 + 2.5, 12.8 +
    # 2.5 us), then each mode's median of blocks with its interval [t - 1, t + 2]
    pad = " " * 49
    assert col.summarize(_two_modes()).splitlines() == [
        *_head(2),
        "#" + pad + "            out-of-place                           in-place                 "
        "slowest rank (oop, ip)   median of blocks [95% CI] (oop, ip)",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong  "
        "   time   algbw   busbw  #wrong     time     time                    time              "
        "      time",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)          "
        "   (us)  (GB/s)  (GB/s)             (us)     (us)                    (us)              "
        "      (us)",
        "        4096          1024     float     sum      -1    16.00    0.26    0.26       0  "
        "  12.80    0.32    0.32       3    18.50    15.30       16.0 [15.0, 18.0]       12.8 "
        "[11.8, 14.8]",
        "# Out of bounds values : 3 FAILED",
        "# Avg bus bandwidth    : 0.3457 GB/s",
        "#",
        "# note: n1",
        "# note: n2",
    ]


def test_the_full_table_unchecked_and_without_intervals():
    # no check rounds: N/A for every count; a row without a median: no interval columns at all
    pad = " " * 49
    record = _two_modes(wrong=(None, None), ci=False, check_iters=0, wrong_total=0, notes=())
    assert col.summarize(record).splitlines() == [
        *_head(0),
        "#" + pad + "            out-of-place                           in-place                 "
        "slowest rank (oop, ip)",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong  "
        "   time   algbw   busbw  #wrong     time     time",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)          "
        "   (us)  (GB/s)  (GB/s)             (us)     (us)",
        "        4096          1024     float     sum      -1    16.00    0.26    0.26     N/A  "
        "  12.80    0.32    0.32     N/A    18.50    15.30",
        "# Out of bounds values : N/A (check off)",
        "# Avg bus bandwidth    : 0.3457 GB/s",
        "#",
    ]
    checked_clean = _two_modes(wrong=(0, 0), wrong_total=0, notes=())
    assert col.summarize(checked_clean).splitlines()[-3] == "# Out of bounds values : 0 OK"


def test_the_full_table_of_one_mode_per_op():
    # one mode: no (oop, ip) after the headings; ops in their order, each its own block; a size's
    # first row gives count, type (nccl-tests' name), redop and root
    lines = col.summarize(_quiet_record()).splitlines()
    assert lines[3:8] == [
        "# broadcast",
        "#" + " " * 49 + "              in-place                 slowest rank   median of blocks "
        "[95% CI]",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong  "
        "   time                    time",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)          "
        "   (us)                    (us)",
        "     1048576        262144     float     sum      -1    250.0    0.25    0.12       0  "
        "  375.0          250 [225, 275]",
    ]
    assert lines[8:11] == ["#", "# all_reduce", lines[4]]
    assert lines[13:15] == [
        "        1024           256     float     sum      -1    12.00    1.00    0.50       0  "
        "  18.00       12.0 [10.8, 13.2]",
        "     1048576        262144     float     sum      -1    400.0    1.50    0.75       0  "
        "  600.0          400 [360, 440]",
    ]
    assert lines[15:] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1 GB/s", "#"]


def test_each_case_s_buffers_as_nccl_tests_lays_them_out():
    # 64 B of float32 over 4 ranks, rank 1: 16 elements, 4 per rank for the split ops
    c = dataclasses.replace(schema.Collectives(), reduce_op=schema.ReduceOp("max"))
    cpu = torch.device("cpu")
    ag = col.Case("all_gather", "in_place", 64, c, 1, 4, cpu)
    assert ag.counts == {"send": 4, "recv": 16, "count": 4}
    assert ag.out.shape == (16,) and ag.send.shape == (4,)
    assert ag.send.data_ptr() == ag.out.data_ptr() + 4 * 4  # rank 1's quarter of the output
    assert (ag.op, ag.mode, ag.rank, ag.world, ag.redop_name) == ("all_gather", "in_place", 1, 4,
                                                                 "none")  # fmt: skip
    rs = col.Case("reduce_scatter", "in_place", 64, c, 1, 4, cpu)
    assert rs.send.shape == (16,) and rs.out.shape == (4,)
    assert rs.out.data_ptr() == rs.send.data_ptr() + 4 * 4
    assert rs.redop_name == "max" and rs.redop == torch.distributed.ReduceOp.MAX
    for op in ("all_reduce", "broadcast"):
        ip = col.Case(op, "in_place", 64, c, 1, 4, cpu)
        assert ip.send is ip.out and ip.out.shape == (16,)
        oop = col.Case(op, "out_of_place", 64, c, 1, 4, cpu)
        assert oop.send is not oop.out and oop.send.shape == oop.out.shape == (16,)
        assert oop.send.data_ptr() != oop.out.data_ptr()
    oop = col.Case("all_gather", "out_of_place", 64, c, 1, 4, cpu)
    assert oop.send.shape == (4,) and oop.out.shape == (16,)
    assert oop.send.data_ptr() != oop.out.data_ptr() + 4 * 4
    oop = col.Case("reduce_scatter", "out_of_place", 64, c, 1, 4, cpu)
    assert oop.send.shape == (16,) and oop.out.shape == (4,)
    c16 = dataclasses.replace(c, dtype=schema.DType("float16"))
    half = col.Case("all_reduce", "in_place", 64, c16, 0, 4, cpu)
    assert half.out.dtype == torch.float16 and half.out.shape == (32,)
    assert half.out.device == cpu and not half.out.any()
    half.out.fill_(3)
    oop.send.fill_(2)
    oop.out.fill_(1)
    oop.zero()
    assert not oop.send.any() and not oop.out.any()


class _Peers:
    """torch.distributed's calls as the case makes them, recorded; the collective's result written
    as the other ranks' inputs make it (they fill theirs with the same salt)."""

    def __init__(self, monkeypatch, world=2, act=True):
        from comm import check

        self.calls, self.salts, self.world, self.act = [], [], world, act
        self.root_salts = []
        self.fake = SimpleNamespace(ReduceOp=torch.distributed.ReduceOp,
                                    DistError=torch.distributed.DistError,
                                    all_reduce=self.all_reduce,
                                    broadcast=self.broadcast)  # fmt: skip
        monkeypatch.setattr(col, "dist", self.fake)
        monkeypatch.setattr(col, "all_gather_single", self.all_gather)
        monkeypatch.setattr(col, "reduce_scatter_single", self.reduce_scatter)

        def fill(buf, redop, rank, world, dtype, salt):
            self.salts.append((rank, salt))
            check.fill_input(buf, redop, rank, world, dtype, salt)

        monkeypatch.setattr(col, "fill_input", fill)

    def _inputs(self, n, redop):
        from comm.check import rank_values

        salt = self.salts[-1][1] if self.salts else 0
        index = torch.arange(n, dtype=torch.int64) + salt
        return [rank_values(redop, r, self.world, index, "float32") for r in range(self.world)]

    def all_reduce(self, out, op):
        self.calls.append(("all_reduce", out.clone(), op))
        if self.act:
            out.copy_(sum(self._inputs(out.numel(), "sum")))

    def broadcast(self, out, src):
        self.calls.append(("broadcast", out.clone(), src))
        if self.act:
            if self.root_salts:  # a non-root: the root filled its input with this round's salt
                self.salts.append((src, self.root_salts.pop(0)))
            out.copy_(self._inputs(out.numel(), None)[src])

    def all_gather(self, out, send):
        self.calls.append(("all_gather", out, send))
        if self.act:
            out.copy_(torch.cat(self._inputs(send.numel(), None)))

    def reduce_scatter(self, out, send, op):
        self.calls.append(("reduce_scatter", out, send, op))


def test_each_case_s_call(monkeypatch):
    peers = _Peers(monkeypatch, act=False)
    c = schema.Collectives()
    cpu = torch.device("cpu")
    oop = col.Case("all_reduce", "out_of_place", 16, c, 1, 2, cpu)
    oop.send.copy_(torch.tensor([1.0, 2, 3, 4]))
    oop()  # the out-of-place form: a copy of the input, then the in-place call on the output
    ((name, out, op),) = peers.calls
    assert name == "all_reduce" and out.tolist() == [1, 2, 3, 4]
    assert op == torch.distributed.ReduceOp.SUM
    ip = col.Case("all_reduce", "in_place", 16, c, 1, 2, cpu)
    ip.send.fill_(5)
    ip()
    assert peers.calls[-1][1].tolist() == [5] * 4
    for rank, copied in ((0, [7] * 4), (1, [0] * 4)):  # only the root copies its input
        b = col.Case("broadcast", "out_of_place", 16, c, rank, 2, cpu)
        b.send.fill_(7)
        b()
        assert peers.calls[-1][0] == "broadcast" and peers.calls[-1][2] == 0
        assert peers.calls[-1][1].tolist() == copied
    ag = col.Case("all_gather", "out_of_place", 16, c, 1, 2, cpu)
    ag()
    assert peers.calls[-1][0] == "all_gather"
    assert peers.calls[-1][1] is ag.out and peers.calls[-1][2] is ag.send
    rs = col.Case("reduce_scatter", "out_of_place", 16, c, 1, 2, cpu)
    rs()
    assert peers.calls[-1][:3] == ("reduce_scatter", rs.out, rs.send)
    assert peers.calls[-1][3] == torch.distributed.ReduceOp.SUM
    assert len(peers.calls) == 6


def test_the_check_rounds(monkeypatch):
    # rank 1 of 2: each round fills its input with salt 1 + 7k, the peers' result comes back; all
    # right (0 wrong), or one element perturbed in the first round only (corrupt_rank: 1 wrong)
    peers = _Peers(monkeypatch)
    c = schema.Collectives()
    cpu = torch.device("cpu")
    for op, mode in (("all_reduce", "in_place"), ("all_reduce", "out_of_place"),
                     ("all_gather", "out_of_place")):  # fmt: skip
        case = col.Case(op, mode, 64, c, 1, 2, cpu)
        peers.salts.clear()
        assert col.run_check(case, c, 3, cpu) == 0
        assert peers.salts == [(1, 1), (1, 8), (1, 15)]
        assert col.run_check(case, c, 3, cpu, corrupt=True) == 1
        assert col.run_check(case, c, 0, cpu, corrupt=True) == 0
    # broadcast: a non-root keeps zeros, so a broadcast that did nothing leaves all 16 wrong
    b = col.Case("broadcast", "in_place", 64, c, 1, 2, cpu)
    peers.salts.clear()
    peers.root_salts = [1, 8]
    assert col.run_check(b, c, 2, cpu) == 0
    assert peers.salts == [(0, 1), (0, 8)]  # the root filled its input; this rank did not
    root = col.Case("broadcast", "in_place", 64, c, 0, 2, cpu)
    peers.salts.clear()
    assert col.run_check(root, c, 1, cpu) == 0 and peers.salts == [(0, 1)]
    peers.act = False
    b.out.fill_(9)  # left over from an earlier round: zeroed before each
    assert col.run_check(b, c, 2, cpu) == 2 * 16
    # all_reduce's check input under sum: (i + 3 rank) mod m + 1; the peer that did nothing
    # leaves this rank's own input, wrong at every element
    ar = col.Case("all_reduce", "in_place", 64, c, 1, 2, cpu)
    assert col.run_check(ar, c, 1, cpu) == 16


def _ctx(cfg, monkeypatch, is_main=True):
    """Rank 0 of 2 with its peer played by _Peers; the peer reports the same times, no wrong
    elements."""
    _Peers(monkeypatch)

    def gather_all(mine):
        return [mine, [(t, None if w is None else 0, b) for t, w, b in mine]]

    monkeypatch.setattr(col, "gather_all", gather_all)
    return SimpleNamespace(cfg=cfg, backend="gloo", torch_device=torch.device("cpu"),
                           local_rank=0, rank=0, world_size=2, is_main=is_main)  # fmt: skip


def test_a_run_of_two_ranks(monkeypatch):
    # blocks of 10 timed calls: 2, 2, 1, 1, 1, 1, 1, 1 (block_sizes); a block of n calls timed at
    # n ms per call, so the time per call is (2 x 2 x 2 + 6 x 1) / 10 = 1.4 ms, the blocks' median 1
    windows = []

    def window(case, n, device):
        windows.append((case.op, case.mode, n, device))
        return 1e-3 * n

    monkeypatch.setattr(col, "time_window", window)
    cfg = _cfg(ops=["all_reduce", "all_gather"], min_bytes="1K", max_bytes="4K", iters=10,
               warmup_iters=2, check_iters=2)  # fmt: skip
    r = col.run(_ctx(cfg, monkeypatch))
    assert [(x.op, x.bytes, x.mode) for x in r.rows] == [
        (op, size, mode)
        for op in ("all_reduce", "all_gather")
        for size in (1024, 4096)
        for mode in ("out_of_place", "in_place")
    ]
    assert windows[:8] == [("all_reduce", "out_of_place", n, torch.device("cpu"))
                           for n in (2, 2, 1, 1, 1, 1, 1, 1)]  # fmt: skip
    assert len(windows) == 8 * 8
    for x in r.rows:
        assert x.time_us == pytest.approx(1400.0) and x.time_median_us == pytest.approx(1000.0)
        assert x.wrong == 0 and x.blocks == 8 and x.requested_bytes == x.bytes
        assert x.count == {"all_reduce": x.bytes // 4, "all_gather": x.bytes // 8}[x.op]
    assert r.notes == [
        "out-of-place all_reduce/broadcast: torch has no out-of-place form; timed as a copy into "
        "the output buffer plus the in-place call"
    ]
    assert r.wrong_total == 0 and r.headline["#wrong"] == 0 and r.world_size == 2
    assert col.run(_ctx(cfg, monkeypatch, is_main=False)) is None
    rounded = _cfg(ops=["all_gather"], min_bytes="1K", max_bytes="1K", inplace=True, factor=2)
    monkeypatch.setattr(col, "sizes", lambda c: [1020, 1024])  # 1020 B: 1016 over 2 ranks
    r = col.run(_ctx(rounded, monkeypatch))
    assert [(x.requested_bytes, x.bytes) for x in r.rows] == [(1020, 1016), (1024, 1024)]
    assert r.notes == ["all_gather: sizes rounded down to a multiple of 8 B (4 B per element x 2 "
                       "ranks): 1020->1016"]  # fmt: skip


def test_a_run_s_notes_and_its_corrupted_check(monkeypatch):
    monkeypatch.setattr(col, "time_window", lambda case, n, device: 1e-3)
    cfg = _cfg(ops=["all_gather"], min_bytes="1K", max_bytes="1K", inplace=True, iters=2,
               warmup_iters=0, check_iters=0)  # fmt: skip
    r = col.run(_ctx(cfg, monkeypatch))
    assert r.notes == [
        "warmup_iters=0: each case still makes one untimed call first (it probes whether the "
        "backend can run the op)"
    ]
    assert r.rows[0].wrong is None and r.headline["#wrong"] is None
    cfg = _cfg(ops=["all_gather", "all_reduce"], min_bytes="1K", max_bytes="1K", inplace=True,
               iters=2, check_iters=3, corrupt_rank=0)  # fmt: skip
    from comm import CorrectnessError

    with pytest.raises(CorrectnessError) as e:
        col.run(_ctx(cfg, monkeypatch))
    assert str(e.value) == (
        "collectives: 2 wrong elements in the correctness check (all_gather, all_reduce)"
    )
    assert [x.wrong for x in e.value.result.rows] == [1, 1]
    assert e.value.result.notes == [
        "collectives.corrupt_rank=0: that rank perturbs one output element in the first check "
        "round of every case (to show the check catches it)"
    ]
    assert col.run(_ctx(cfg, monkeypatch, is_main=False)) is None  # only rank 0 raises
    clean = _cfg(ops=["all_reduce"], min_bytes="1K", max_bytes="1K", inplace=True, iters=2,
                 corrupt_rank=1)  # fmt: skip
    assert col.run(_ctx(clean, monkeypatch)).wrong_total == 0  # rank 1's to perturb, not this one


def test_each_layout_s_buffers_on_the_case_s_device_and_type():
    # the meta device (shapes only): a buffer made anywhere else, or as float32, is wrong
    c = dataclasses.replace(schema.Collectives(), dtype=schema.DType("float16"))
    meta = torch.device("meta")
    for op in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
        for mode in ("in_place", "out_of_place"):
            case = col.Case(op, mode, 64, c, 1, 4, meta)
            for t in (case.send, case.out):
                assert t.device == meta and t.dtype == torch.float16


def test_the_check_uses_the_host_and_backend_it_is_given(monkeypatch):
    from device.host import Host

    host = Host(gpus=0, cpus=2, free_bytes=1 << 34, gpu_free_bytes=None)
    cfg = _cfg()
    seen = []
    monkeypatch.setattr(col, "expected_backend", lambda *a: seen.append(a) or "gloo")
    monkeypatch.setattr(col, "check_buffers", lambda *a, **kw: seen.append(a))
    col.check(cfg, host=host)
    assert len(seen) == 2 and seen[0][0] is cfg and seen[0][1] is host and seen[0][2] is False
    assert seen[1][0] is cfg and seen[1][1] is host
    col.check(cfg, submitting=True, host=host)
    assert seen[2][1] is host and seen[2][2] is True


def test_the_full_table_rounds_times_as_nccl_tests_does():
    # 12.1250001 us prints 12.13 (two decimals under 100 us); 12.12 would be a time off by 1e-6
    record = _two_modes()
    for x in record.result.rows:
        x.time_us, x.time_max_us = 12.1250001, 22.1250001
    row = col.summarize(record).splitlines()[7]
    assert row.split()[5] == "12.13" and row.split()[13] == "22.13"


def test_busbw_against_the_link_at_a_rounding_edge():
    # 0.125 GB/s = 1 Gbit/s over 1.6 Gbit/s is 62.5%: '62%' (half to even); a factor off by
    # 1e-10 would print 63%
    from base.record_types import Link

    record = _quiet_record()
    record.result.rows[3].busbw_GBps = 0.125
    line = col.vs_link(record.result, Link(emulated=True, rate_bit_s=2e9, payload_rate_bit_s=1.6e9))
    assert " = 62% of the 1.6 Gbit/s" in line[0]


def test_the_note_on_out_of_place_all_reduce_and_broadcast(monkeypatch):
    monkeypatch.setattr(col, "time_window", lambda case, n, device: 1e-3)
    note = col.run(_ctx(_cfg(ops=["all_reduce"], max_bytes="1K"), monkeypatch)).notes
    assert note[0].startswith("out-of-place all_reduce/broadcast: torch has no out-of-place form")
    note = col.run(_ctx(_cfg(ops=["broadcast"], max_bytes="1K"), monkeypatch)).notes
    assert note[0].startswith("out-of-place all_reduce/broadcast: torch has no out-of-place form")
    assert col.run(_ctx(_cfg(ops=["all_gather"], max_bytes="1K"), monkeypatch)).notes == []
    in_place = _cfg(ops=["all_reduce"], max_bytes="1K", inplace=True)
    assert col.run(_ctx(in_place, monkeypatch)).notes == []


def test_a_run_places_its_buffers_where_resolve_device_says(monkeypatch):
    monkeypatch.setattr(col, "time_window", lambda case, n, device: 1e-3)
    cpu = torch.device("cpu")
    resolved, made, compared = [], [], []
    monkeypatch.setattr(col, "resolve_device", lambda *a: resolved.append(a) or cpu)
    real_case, real_compare = col.Case, col._compare
    monkeypatch.setattr(col, "Case", lambda *a: made.append(a[-1]) or real_case(*a))
    monkeypatch.setattr(col, "_compare", lambda *a: compared.append(a[3]) or real_compare(*a))
    ctx = _ctx(_cfg(ops=["all_reduce"], max_bytes="1K", inplace=True), monkeypatch)
    ctx.torch_device, ctx.local_rank = torch.device("cpu", 0), 3
    col.run(ctx)
    assert resolved == [(schema.DeviceKind("cpu"), "gloo", torch.device("cpu", 0), 3)]
    assert made == [cpu] and compared == [cpu]


def test_a_backend_that_cannot_run_the_op_is_named(monkeypatch):
    monkeypatch.setattr(col, "time_window", lambda case, n, device: 1e-3)
    ctx = _ctx(_cfg(ops=["all_reduce"], max_bytes="1K", inplace=True), monkeypatch)

    def refuse(out, op):
        raise RuntimeError("not here")

    col.dist.all_reduce = refuse
    with pytest.raises(ConfigError, match=r"^backend gloo cannot run all_reduce \(in-place"):
        col.run(ctx)


def test_the_check_fills_each_input_for_its_op_s_reduction(monkeypatch):
    # all_reduce's inputs are made for a sum; all_gather's and broadcast's for no reduction
    peers = _Peers(monkeypatch)
    filled = []
    real_fill = col.fill_input
    monkeypatch.setattr(
        col, "fill_input", lambda buf, redop, *a: filled.append(redop) or real_fill(buf, redop, *a)
    )
    c = schema.Collectives()
    cpu = torch.device("cpu")
    for op in ("all_reduce", "all_gather", "broadcast"):
        case = col.Case(op, "out_of_place", 64, c, 0, 2, cpu)
        assert col.run_check(case, c, 1, cpu) == 0
    assert filled == ["sum", None, None]
    # a perturbation in the first round: one round is enough to show it
    case = col.Case("all_reduce", "in_place", 64, c, 0, 2, cpu)
    assert col.run_check(case, c, 1, cpu, corrupt=True) == 1
    assert peers.calls


def test_the_perturbation_of_a_one_element_product(monkeypatch):
    # one rank, one float32 (4 B): the in-place all_reduce leaves the rank's own input; under prod
    # its right value is 1 (the check input at index 0 + salt 1), so the perturbation makes it 2
    from comm.check import expected_output

    _Peers(monkeypatch, world=1, act=False)
    c = dataclasses.replace(schema.Collectives(), reduce_op=schema.ReduceOp("prod"))
    cpu = torch.device("cpu")
    assert expected_output("all_reduce", "prod", 0, 1, 1, "float32", cpu, 0, 1).tolist() == [1.0]
    case = col.Case("all_reduce", "in_place", 4, c, 0, 1, cpu)
    assert case.out.numel() == 1
    assert col.run_check(case, c, 1, cpu) == 0
    assert col.run_check(case, c, 1, cpu, corrupt=True) == 1
    assert case.out.tolist() == [2.0]
