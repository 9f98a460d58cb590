"""What the diagnosis reads besides records: nccl-tests output (its table and -J JSON), HTA over
profiler traces, and the command line; and what it writes into the report and plots."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diagnosis import diagnose, format_text
from comm.efficiency import achievable, versus_sync
from diagnosis.hta import cross_check, format_hta
from comm.nccl_tests import NcclTestsError, parse, read, sync_calls, time_at, versus
from tests.conftest import ROOT
from tests.records import write_record, write_sweep
from tests.test_diagnosis import _pairs, train

FIXTURES = ROOT / "tests" / "fixtures" / "nccl_tests"
TABLE, JSON = FIXTURES / "all_reduce_perf_2xH100.log", FIXTURES / "all_reduce_perf_2xH100.json"


# --------------------------------------------------------------------------------------- efficiency
def test_efficiency_arithmetic():
    calls = [
        {"bytes": 1000, "calls": 2, "time_s": 0.001, "ci_lo": 0.0009, "ci_hi": 0.0012},
        {"bytes": 4000, "calls": 1, "time_s": 0.003, "ci_lo": 0.0028, "ci_hi": 0.0035},
    ]
    a = achievable(calls)
    assert a == {
        "time_s": pytest.approx(0.005),
        "ci_lo": pytest.approx(0.0046),
        "ci_hi": pytest.approx(0.0059),
        "bytes": 6000,
    }
    v = versus_sync("ref", calls, 0.01, 6000, 4, "how")
    assert v["efficiency"] == pytest.approx(0.5) and v["efficiency_ci_lo"] == pytest.approx(0.46)
    # busbw of the sync / busbw of the reference at the same bytes = the same ratio
    assert v["sync_busbw_GBps"] / v["reference_busbw_GBps"] == pytest.approx(0.5)
    assert versus_sync("ref", calls, 0.0, 6000, 4, "how") is None


# --------------------------------------------------------------------------------------- nccl-tests
def test_table_and_json_fixtures_parse_to_the_same_rows():
    t, j = read(TABLE), read(JSON)
    assert t["format"] == "table" and j["format"] == "json"
    assert t["program"] == j["program"] == "all_reduce_perf" and t["ranks"] == j["ranks"] == 2
    assert (
        len(t["rows"]) == len(j["rows"]) == 27
        and t["rows"][0]["bytes"] == 8
        and t["rows"][-1]["bytes"] == 2**29
    )
    for a, b in zip(t["rows"], j["rows"]):
        assert (
            a["bytes"] == b["bytes"]
            and a["count"] == b["count"]
            and a["redop"] == b["redop"] == "sum"
        )
        # the table prints %7s of getFloatStr (2 decimals or fewer), the JSON %lf: the same figure,
        # rounded
        assert a["in_place"]["time_us"] == pytest.approx(b["in_place"]["time_us"], abs=0.06)
        assert a["out_of_place"]["busbw_GBps"] == pytest.approx(
            b["out_of_place"]["busbw_GBps"], abs=0.006
        )
    assert t["avg_busbw_GBps"] == pytest.approx(j["avg_busbw_GBps"], rel=1e-5)


def test_table_columns_are_found_by_name_in_older_layouts():
    old = """#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144   float     sum    43.51   24.10   42.17  0e+00    43.10   24.33   42.58  0e+00
     4194304       1048576   float     sum    95.20   44.06   77.10  0e+00    94.80   44.24   77.42  0e+00
"""
    p = parse(old)
    assert [r["bytes"] for r in p["rows"]] == [1048576, 4194304]
    assert p["rows"][0]["in_place"] == {
        "time_us": 43.10,
        "algbw_GBps": 24.33,
        "busbw_GBps": 42.58,
        "wrong": 0.0,
    }
    assert p["ranks"] is None  # no "# Using devices" lines: unknown


def test_not_all_reduce_or_not_nccl_tests_is_one_clear_error():
    with pytest.raises(NcclTestsError, match="all_gather_perf output"):
        parse(TABLE.read_text().replace("all_reduce_perf", "all_gather_perf"))
    with pytest.raises(NcclTestsError, match="no nccl-tests result rows"):
        parse("hello\nworld\n")
    with pytest.raises(NcclTestsError, match="does not parse"):
        parse("{ not json")


def test_time_at_interpolates_in_log_space_and_extrapolates_by_bandwidth():
    p = read(TABLE)
    rows = {r["bytes"]: r["in_place"]["time_us"] * 1e-6 for r in p["rows"]}
    assert time_at(p, 2**20, 2) == pytest.approx(rows[2**20])
    mid = time_at(p, 3 * 2**19, 2)
    assert rows[2**20] < mid < rows[2**21]
    assert time_at(p, 4, 2) == pytest.approx(rows[8])  # latency-bound below the table
    assert time_at(p, 2**30, 2) == pytest.approx(
        rows[2**29] * 2
    )  # the largest size's bandwidth above it
    four = time_at(p, 2**29, 4)  # another rank count: busbw carried over, 2(n-1)/n = 1.5 at 4 ranks
    assert four == pytest.approx(2**29 / (p["rows"][-1]["in_place"]["busbw_GBps"] / 1.5 * 1e9))


def _ddp_record(buckets=(200 * 2**20, 50 * 2**20), time_s=0.02) -> dict:
    rec = train(exposed_s=0.004)
    rec["result"]["ddp"] = {"buckets": {"count": len(buckets), "sizes_bytes": list(buckets)}}
    rec["result"]["comm"].update(
        bytes_per_step=sum(buckets), time_s=time_s, collectives_per_step=len(buckets)
    )
    return rec


def test_versus_nccl_tests_uses_ddps_buckets():
    rec, p = _ddp_record(), read(TABLE)
    calls, how = sync_calls(rec["result"])
    assert calls == [(200 * 2**20, 1), (50 * 2**20, 1)] and "buckets" in how
    vs = versus(rec, p)
    expect = time_at(p, 200 * 2**20, 2) + time_at(p, 50 * 2**20, 2)
    assert vs["achievable_s"] == pytest.approx(expect) and vs["efficiency"] == pytest.approx(
        expect / 0.02
    )
    assert vs["reference"] == "nccl-tests file" and vs["file_ranks"] == 2
    d = diagnose(rec, nccl_tests=p)
    assert d["comparisons"]["nccl_tests"]["efficiency"] == pytest.approx(expect / 0.02)
    assert "comm vs nccl-tests file" in format_text(d)


def test_compression_hooks_scale_the_buckets_to_the_bytes_sent():
    rec = _ddp_record()
    rec["result"]["comm"]["bytes_per_step"] = 125 * 2**20  # bf16: half of what DDP's buckets hold
    assert sync_calls(rec["result"])[0] == [(100 * 2**20, 1), (25 * 2**20, 1)]


# ---------------------------------------------------------------------------------------------- HTA
def _trace(rank: int, comm: tuple, comp: tuple | None) -> dict:
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            "pid": 1,
            "tid": 1,
            "ts": 0.0,
            "dur": 1000.0,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 1.0,
            "dur": 5.0,
            "args": {"External id": 2},
        },
    ]
    if comp is not None:
        kernels = [
            ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 7, comm),
            ("void at::native::vectorized_elementwise_kernel<4>()", 8, comp),
        ]
        for c, (name, stream, (a, b)) in enumerate(kernels):
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": a,
                    "dur": b - a,
                    "args": {
                        "stream": stream,
                        "correlation": 10 + c,
                        "device": 0,
                        "External id": 2,
                    },
                }
            )
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": "test"}],
        "traceEvents": ev,
    }


def _profiled(tmp_path, comps) -> dict:
    rec = train(exposed_s=0.004)
    rec["result"]["profiled"] = True
    rec["result"]["comm"].update(time_s=0.02, overlap_s=0.01)
    rec["job"]["output_dir"] = str(tmp_path)
    for rank, comp in enumerate(comps):
        (tmp_path / f"trace.rank{rank}.json").write_text(
            json.dumps(_trace(rank, (100.0, 300.0), comp))
        )
    return rec


@pytest.mark.hta
def test_hta_says_it_cannot_read_a_cpu_only_trace(tmp_path):
    h = cross_check(_profiled(tmp_path, [None, None]))
    assert (
        h["status"] == "cpu_only"
        and "CPU operators only" in h["note"]
        and h["tool_overlap"] == pytest.approx(0.5)
    )
    assert "HTA cannot read these traces" in format_hta(h)


@pytest.mark.hta
def test_hta_overlap_beside_the_tools_own(tmp_path):
    # comm 100-300 us; compute 50-150 (rank 0: 50 of 200 us overlapped) and 50-250 (rank 1: 150 of
    # 200)
    h = cross_check(_profiled(tmp_path, [(50.0, 150.0), (50.0, 250.0)]))
    assert h["status"] == "ok" and [r["overlap"] for r in h["per_rank"]] == pytest.approx(
        [0.25, 0.75]
    )
    assert h["hta_overlap"] == pytest.approx(0.5) and h["disagreement"] == pytest.approx(0.0)
    assert h["per_rank"][0]["compute_pct"] == pytest.approx(40.0)
    d = diagnose(_profiled(tmp_path, [(50.0, 150.0), (50.0, 250.0)]))
    assert d["hta"]["status"] == "ok" and "HTA cross-check over 2 rank trace(s)" in format_text(d)


def test_hta_missing_or_no_traces(tmp_path, monkeypatch):
    assert cross_check(_profiled(tmp_path, []))["status"] == "no_traces"
    monkeypatch.setitem(
        sys.modules, "hta.trace_analysis", None
    )  # import fails: say how to install it
    h = cross_check(_profiled(tmp_path, [(50.0, 150.0)]))
    assert h["status"] == "unavailable" and "pip install HolisticTraceAnalysis" in h["note"]


# ------------------------------------------------------------------------------------- command line
def _cli(*args):
    """`python -m diagnosis args` as its own process: the entry point itself (exit code, stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "diagnosis", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _main(capsys, *args):
    """The same command's main() in this process (its return is the exit code __main__ passes to
    sys.exit): what it prints, without a process start per call (issue 36). _cli keeps one test
    on the entry point."""
    from types import SimpleNamespace

    from diagnosis.__main__ import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def test_cli_run_dir_with_nccl_tests(tmp_path, capsys):
    write_record(tmp_path / "run", _ddp_record())
    p = _main(capsys, tmp_path / "run", "--nccl-tests", TABLE)
    assert p.returncode == 0, p.stderr
    assert "diagnosis:" in p.stdout and "comm vs nccl-tests file" in p.stdout


def test_cli_sweep_and_nccl_tests_alone(tmp_path, capsys):
    write_sweep(tmp_path / "sweep", [_pairs(1, 0.5, cpus=4), _pairs(4, 0.97, cpus=4)])
    p = _main(capsys, tmp_path / "sweep")
    assert p.returncode == 0, p.stderr
    assert (
        "sweep diagnosis (2 finished runs" in p.stdout
        and "pair groups (one curve across pairs)" in p.stdout
    )
    q = _main(capsys, "--nccl-tests", JSON)
    assert q.returncode == 0 and "all_reduce_perf (json, 2 ranks): 27 sizes" in q.stdout


@pytest.mark.subprocess
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    """The first case through the entry point (its exit code and its one stderr line), the others
    through main() in this process."""
    p = _cli(tmp_path / "nope")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("python -m diagnosis:")
    for args in (["--nccl-tests", tmp_path / "nope.log"], []):
        p = _main(capsys, *args)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert p.stderr.startswith("python -m diagnosis:")
    (tmp_path / "gather.log").write_text(
        TABLE.read_text().replace("all_reduce_perf", "all_gather_perf")
    )
    p = _main(capsys, "--nccl-tests", tmp_path / "gather.log")
    assert p.returncode == 2 and "needs all_reduce_perf" in p.stderr


# ------------------------------------------------------------------------------------ report, plots
def test_report_has_diagnosis_checked_estimates_and_one_pair_groups_table(tmp_path):
    from results.report import main as report

    a = train(
        sync="per_param", shares={"sync": 0.3, "backward": 0.25}, overrides=["sync=per_param"]
    )
    b = train(sync="ddp", step_s=0.08, overrides=["sync=ddp"])
    b["config"] = {**a["config"], "sync": "ddp"}
    write_sweep(tmp_path / "sync", [a, b])
    write_sweep(
        tmp_path / "pairs",
        [_pairs(1, 0.5, cpus=4), _pairs(2, 0.9, cpus=4), _pairs(4, 0.97, cpus=4)],
    )
    out = tmp_path / "report"
    assert report([str(tmp_path / "sync"), str(tmp_path / "pairs"), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert md.count("### Pair groups across pairs") == 1 and "| pairs=4" in md
    assert "### Diagnosis" in md and "Checked estimates" in md and "per_param" in md
    checked = (out / "node-a-cpu-checked-estimates.csv").read_text().splitlines()
    assert len(checked) == 2 and "sync=ddp" in checked[1]
    assert (out / "node-a-cpu-pair-groups.png").is_file()


def test_plots_draw_no_single_point_lines(tmp_path):
    from results import plots
    from tables.table import Entry

    one = Entry.from_record(train(overrides=["bucket=25", "optim=none"]))
    other = Entry.from_record(train(overrides=["bucket=100", "optim=bf16"]))
    other.result.bucket_mb = 100
    # two bucket sizes, but each configuration ran only one: no line to draw
    assert plots.bucket_throughput([one, other], tmp_path / "b.png") is None
    pairs = [Entry.from_record(_pairs(p, 0.5)) for p in (1, 2)]
    assert plots.pair_groups(pairs, tmp_path / "p.png").is_file()
    assert plots.pair_groups(pairs[:1], tmp_path / "p1.png") is None
