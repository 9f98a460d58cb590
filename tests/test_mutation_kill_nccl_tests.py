"""comm/nccl_tests.py (issue 36: a module the mutation run covers): an nccl-tests file's rows and
the time of one all-reduce at its speed, checked on hand-made files against figures worked out
here: log-log interpolation written out, the busbw carried over another rank count through the
all-reduce's bus factor 2(n-1)/n, the table's and the JSON's fields read by hand."""

from __future__ import annotations

import json
import math

import pytest

from comm import nccl_tests as nt

TABLE = """# nccl-tests version 2.13.8 nccl-headers=21903 nccl-library=21903
# Collective test starting: all_reduce_perf
#  Rank  0 Group  0 Pid   1 on host device  0 [0x01] NVIDIA H100
#  Rank  1 Group  0 Pid   2 on host device  1 [0x02] NVIDIA H100
#
# out-of-place in-place
# size count type redop root time algbw busbw #wrong time algbw busbw #wrong
# (B) (elements) (us) (GB/s) (GB/s) (us) (GB/s) (GB/s)
  1024 256 float sum -1 10.50 0.10 0.10 0 10.00 0.10 0.10 N/A
  1048576 262144 float sum -1 40.00 26.21 26.21 0 41.00 25.57 25.57 0
garbage line
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 12.84
"""


def test_a_table_read_field_by_field():
    p = nt.parse(TABLE)
    assert (p["format"], p["program"], p["version"], p["ranks"]) == (
        "table",
        "all_reduce_perf",
        "2.13.8",
        2,
    )
    assert p["avg_busbw_GBps"] == 12.84
    first, second = p["rows"]
    assert (first["bytes"], first["count"], first["type"], first["redop"]) == (
        1024,
        256,
        "float",
        "sum",
    )
    assert first["out_of_place"] == {
        "time_us": 10.5,
        "algbw_GBps": 0.1,
        "busbw_GBps": 0.1,
        "wrong": 0.0,
    }
    assert first["in_place"]["time_us"] == 10.0 and first["in_place"]["wrong"] is None
    assert second["in_place"] == {
        "time_us": 41.0,
        "algbw_GBps": 25.57,
        "busbw_GBps": 25.57,
        "wrong": 0.0,
    }


def test_a_file_without_rows_or_not_an_all_reduce_is_refused():
    with pytest.raises(nt.NcclTestsError, match="no nccl-tests result rows"):
        nt.parse("# nothing here\n")
    with pytest.raises(nt.NcclTestsError, match="all_gather_perf output"):
        nt.parse(TABLE.replace("all_reduce_perf", "all_gather_perf"))
    with pytest.raises(nt.NcclTestsError, match="redop 'none'"):
        nt.parse(TABLE.replace("float sum", "float none"))
    with pytest.raises(nt.NcclTestsError, match="does not parse"):
        nt.parse("{not json")


def test_a_json_file_read_field_by_field():
    doc = {
        "version": "2.16.0",
        "nccl_version": "2.21.5",
        "args": ["/opt/nccl-tests/build/all_reduce_perf", "-b", "8"],
        "config": {"devices": ["a", "b"], "nthreads": 2, "ngpus": 3},
        "average_bus_bandwidth": {"bandwidth": "nan"},
        "results": [
            {
                "size": 2048,
                "count": 512,
                "type": "float",
                "redop": "sum",
                "out_of_place": {"time": 12.0, "alg_bw": 0.17, "bus_bw": "nan", "nwrong": 0},
                "in_place": {"cpu_time": 11.0, "alg_bw": 0.18, "bus_bw": 0.2, "nwrong": "N/A"},
            }
        ],
    }
    p = nt.parse(json.dumps(doc))
    assert (p["format"], p["program"], p["version"], p["nccl_version"]) == (
        "json",
        "all_reduce_perf",
        "2.16.0",
        "2.21.5",
    )
    assert p["ranks"] == 2 * 2 * 3 and p["avg_busbw_GBps"] is None
    row = p["rows"][0]
    assert (row["bytes"], row["count"], row["type"], row["redop"]) == (2048, 512, "float", "sum")
    assert row["out_of_place"] == {
        "time_us": 12.0,
        "algbw_GBps": 0.17,
        "busbw_GBps": None,
        "wrong": 0.0,
    }
    assert row["in_place"]["time_us"] == 11.0 and row["in_place"]["wrong"] is None
    with pytest.raises(nt.NcclTestsError, match="no 'results' list"):
        nt.parse("{}")
    with pytest.raises(nt.NcclTestsError, match="empty 'results' list"):
        nt.parse('{"results": []}')
    bare = nt.parse(json.dumps({"results": doc["results"]}))
    assert bare["ranks"] is None and bare["program"] is None


def _parsed(rows, ranks=2):
    return {
        "ranks": ranks,
        "rows": [{"bytes": b, "in_place": {"time_us": t, "busbw_GBps": bw}} for b, t, bw in rows],
    }


def test_time_at_interpolates_in_log_log():
    p = _parsed([(1000, 10.0, 0.1), (100_000, 1000.0, 0.2), (10, 0.0, None)])
    # below the smallest: its time; above the largest: its rate
    assert nt.time_at(p, 100, 2) == pytest.approx(10e-6)
    assert nt.time_at(p, 1000, 2) == pytest.approx(10e-6)
    assert nt.time_at(p, 400_000, 2) == pytest.approx(4000e-6)
    # halfway in log bytes (10^4): halfway in log time, sqrt(10 * 1000) us
    assert nt.time_at(p, 10_000, 2) == pytest.approx(100e-6)
    w = math.log(3000 / 1000) / math.log(100)
    assert nt.time_at(p, 3000, 2) == pytest.approx(10e-6 * 100**w)


def test_another_rank_count_carries_the_busbw_over():
    p = _parsed([(1000, 10.0, 0.5), (100_000, 1000.0, 2.0)], ranks=8)
    # 4 ranks: bus factor 2 * 3 / 4 = 1.5; t = bytes / (busbw / 1.5)
    assert nt.time_at(p, 1000, 4) == pytest.approx(1000 / (0.5e9 / 1.5))
    assert nt.time_at(p, 200_000, 4) == pytest.approx(2 * 100_000 / (2e9 / 1.5))
    # a row without busbw keeps its time
    q = _parsed([(1000, 10.0, None)], ranks=8)
    assert nt.time_at(q, 1000, 4) == pytest.approx(10e-6)
    # same ranks, or the file did not say: the time
    assert nt.time_at(_parsed([(1000, 10.0, 0.5)], ranks=None), 1000, 4) == pytest.approx(10e-6)
    # one rank: no bus traffic (factor 0): the time
    assert nt.time_at(p, 1000, 1) == pytest.approx(10e-6)


def test_time_at_reads_in_place_rows_else_out_of_place():
    p = {
        "ranks": 2,
        "rows": [
            {"bytes": 1000, "out_of_place": {"time_us": 30.0}, "in_place": {"time_us": 20.0}},
            {"bytes": 2000, "out_of_place": {"time_us": 50.0}},
        ],
    }
    assert nt.time_at(p, 1000, 2) == pytest.approx(20e-6)
    assert nt.time_at(p, 2000, 2) == pytest.approx(50e-6)
    with pytest.raises(nt.NcclTestsError, match=r"^no positive times in the nccl-tests rows$"):
        nt.time_at(_parsed([(1000, 0.0, None), (0, 5.0, None)]), 1000, 2)


def test_numbers_that_are_not_numbers():
    assert nt._num("1.5") == 1.5 and nt._num("N/A") is None
    assert nt._json_num("2") == 2.0 and nt._json_num("nan") is None
    assert nt._json_num(None) is None and nt._json_num(float("inf")) is None


def test_the_calls_one_sync_makes_from_the_record():
    micro = {"microbench": {"sizes": [{"bytes": 4096, "calls": 3}, {"bytes": 1 << 20, "calls": 1}]}}
    assert nt.sync_calls(micro) == (
        [(4096, 3), (1 << 20, 1)],
        "the sizes the on-rank microbenchmark timed",
    )
    # DDP's buckets scaled to the bytes really sent (a half-precision hook: half of them)
    ddp = {
        "sync": "ddp",
        "comm": {"bytes_per_step": 3000, "collectives_per_step": 3},
        "ddp": {"buckets": {"sizes_bytes": [2000, 2000, 2000]}},
    }
    assert nt.sync_calls(ddp) == ([(1000, 3)], "DDP's buckets (scaled to the bytes sent)")
    unscaled = {**ddp, "comm": {"collectives_per_step": 3}}
    assert nt.sync_calls(unscaled)[0] == [(2000, 3)]
    flat = {"sync": "flat", "comm": {"bytes_per_step": 9000, "collectives_per_step": 1}}
    assert nt.sync_calls(flat) == ([(9000, 1)], "one call of the whole gradient")
    per = {"sync": "per_param", "comm": {"bytes_per_step": 9001, "collectives_per_step": 4}}
    assert nt.sync_calls(per) == (
        [(2250, 4)],
        "4 calls of the average size (the record does not list each call's size)",
    )
    assert nt.sync_calls({"sync": "local"}) == ([], "no communication in the record")
    assert nt.sync_calls({"comm": {"bytes_per_step": 10}}) == ([], "no communication in the record")


def test_read_a_file_by_its_path_and_refuse_one_that_is_not_there(tmp_path):
    f = tmp_path / "out.txt"
    # a stray byte that is not UTF-8 (a host name in another encoding) is replaced, not refused
    f.write_bytes(TABLE.replace("on host", "on h\xf6st").encode("latin-1"))
    p = nt.read(str(f))
    assert p["file"] == str(f) and [r["bytes"] for r in p["rows"]] == [1024, 1048576]
    missing = tmp_path / "none.txt"
    with pytest.raises(nt.NcclTestsError) as e:
        nt.read(missing)
    assert str(e.value) == f"--nccl-tests {missing}: cannot read it (No such file or directory)"


def test_a_json_file_after_blank_lines_is_still_json():
    doc = {"results": [{"size": 8, "count": 2, "in_place": {"time": 5.0}}]}
    p = nt.parse("\n\n  " + json.dumps(doc))
    assert p["format"] == "json" and p["rows"][0]["in_place"]["time_us"] == 5.0


def test_an_older_table_without_type_or_redop_columns_and_a_missing_last_field():
    # older builds: no type, redop or root column; -C builds time the CPU ("cputime"); the last
    # #wrong may be missing (one token short of the header is still a row)
    text = (
        "# size count cputime algbw busbw error cputime algbw busbw error\n"
        "  4096 1024 7.0 0.5 0.9 0 8.0 0.4 0.7\n"
    )
    (row,) = nt.parse(text)["rows"]
    assert (row["bytes"], row["count"], row["type"], row["redop"]) == (4096, 1024, None, None)
    assert row["out_of_place"] == {
        "time_us": 7.0,
        "algbw_GBps": 0.5,
        "busbw_GBps": 0.9,
        "wrong": 0.0,
    }
    assert row["in_place"] == {
        "time_us": 8.0,
        "algbw_GBps": 0.4,
        "busbw_GBps": 0.7,
        "wrong": None,
    }


def test_time_at_keeps_one_byte_rows_and_drops_times_that_are_not_positive():
    rows = [
        {"bytes": 1, "in_place": {"time_us": 0.5}},
        {"bytes": 10, "in_place": {"time_us": -3.0}},
        {"bytes": 20, "in_place": {"time_us": None}},
        {"bytes": 100, "in_place": {"time_us": 50.0}},
    ]
    p = {"ranks": 2, "rows": rows}
    # 1 byte: its own half microsecond (a row of one byte is a row)
    assert nt.time_at(p, 1, 2) == pytest.approx(0.5e-6)
    # 10 bytes: halfway in log bytes between 1 and 100, so sqrt(0.5 * 50) = 5 us, the -3 us row
    # and the row without a time left out
    assert nt.time_at(p, 10, 2) == pytest.approx(5e-6)


def test_time_at_with_three_sizes_extrapolates_from_the_largest():
    p = _parsed([(1000, 10.0, None), (10_000, 40.0, None), (100_000, 1000.0, None)])
    # between the second and third: log-log, not the second's rate carried on
    w = math.log(50_000 / 10_000) / math.log(10)
    assert nt.time_at(p, 50_000, 2) == pytest.approx(40e-6 * 25**w)
    # above the largest: the largest's rate, 1000 us per 100 kB
    assert nt.time_at(p, 300_000, 2) == pytest.approx(3000e-6)


def test_another_rank_count_interpolates_between_carried_over_rates():
    # 8-rank file, 2-rank run (bus factor 1): each size's time is bytes / busbw
    p = _parsed([(10**9, 1e5, 2.0), (10**11, 1e8, 4.0)], ranks=8)
    assert nt.time_at(p, 10**9, 2) == pytest.approx(0.5, rel=1e-12)
    t0, t1 = 0.5, 25.0
    assert nt.time_at(p, 10**10, 2) == pytest.approx(math.sqrt(t0 * t1), rel=1e-12)


def test_sync_calls_reads_a_typed_result_and_names_a_bad_field():
    from base.record_types import TrainResult

    flat = {"sync": "flat", "comm": {"bytes_per_step": 9000, "collectives_per_step": 1}}
    assert nt.sync_calls(TrainResult.from_dict(flat, "r")) == nt.sync_calls(flat)
    # DDP's bucket list on a run that did not sync through DDP is not its calls
    flat_with_buckets = {**flat, "ddp": {"buckets": {"sizes_bytes": [2000, 2000]}}}
    assert nt.sync_calls(flat_with_buckets)[0] == [(9000, 1)]
    with pytest.raises(Exception, match=r"^result\.world_size: expected an integer"):
        nt.sync_calls({"world_size": "x"})


# ------------------------------------------------------------ the comparison, and its printed lines
MiB3 = 3 * 2**20


def _file(ranks=2):
    # 2 ranks: 1 MiB in 100 us, 4 MiB in 1000 us, busbw 40 GB/s (used only with another rank count)
    return {
        "file": "ar.txt",
        "ranks": ranks,
        "rows": [
            {"bytes": 2**20, "in_place": {"time_us": 100.0, "busbw_GBps": 40.0}},
            {"bytes": 4 * 2**20, "in_place": {"time_us": 1000.0, "busbw_GBps": 40.0}},
        ],
    }


def _record(**comm):
    return {
        "status": "ok",
        "task": "train",
        "result": {
            "world_size": 2,
            "sync": "flat",
            "comm": {"bytes_per_step": 8 * 2**20, "collectives_per_step": 1, **comm},
        },
    }


def test_versus_a_file_worked_out_by_hand():
    from base.record import Record

    # one call of 8 MiB, above the largest size: 1000 us * 2 = 2 ms; the sync took 8 ms
    rec = _record(time_s=0.008, method="timed allreduce")
    for record in (rec, Record.from_dict(rec)):
        vs = nt.versus(record, _file())
        assert vs["achievable_s"] == pytest.approx(0.002)
        assert vs["efficiency"] == pytest.approx(0.25)
        assert vs["sync_s"] == 0.008 and vs["calls"] == 1 and vs["bytes"] == 8 * 2**20
        # bus factor 2(2-1)/2 = 1: busbw = bytes / time
        assert vs["sync_busbw_GBps"] == pytest.approx(8 * 2**20 / 0.008 / 1e9)
        assert vs["reference_busbw_GBps"] == pytest.approx(8 * 2**20 / 0.002 / 1e9)
        assert vs["overlap_s"] is None and vs["efficiency_is"] == "estimate"
        assert (vs["file"], vs["file_ranks"], vs["sizes_from"]) == (
            "ar.txt",
            2,
            "one call of the whole gradient",
        )
        assert vs["per_size"] == [{"bytes": 8 * 2**20, "calls": 1, "time_s": pytest.approx(0.002)}]
        assert vs["method"] == (
            "efficiency = time the same calls take in the nccl-tests file / the sync's time "
            "(timed allreduce); interval from the reference's per-size intervals only (the sync "
            "time is one figure)"
        )


def test_versus_the_microbenchmark_sizes_overlap_and_another_rank_count():
    rec = _record(time_s=0.01, overlap_s=0.004)
    rec["result"]["microbench"] = {
        "sizes": [{"bytes": 2**20, "calls": 3}, {"bytes": 2**21, "calls": 2}]
    }
    vs = nt.versus(rec, _file())
    # 3 x 100 us, and 2 x (2 MiB halfway in log bytes from 1 to 4 MiB: sqrt(100 * 1000) us)
    per = [100e-6, math.sqrt(100 * 1000) * 1e-6]
    assert [r["time_s"] for r in vs["per_size"]] == pytest.approx(per)
    assert [(r["bytes"], r["calls"]) for r in vs["per_size"]] == [(2**20, 3), (2**21, 2)]
    assert vs["achievable_s"] == pytest.approx(3 * per[0] + 2 * per[1])
    assert vs["calls"] == 5 and vs["overlap_s"] == 0.004 and vs["efficiency_is"] == "lower bound"
    assert vs["sizes_from"] == "the sizes the on-rank microbenchmark timed"
    # the sync's busbw from the 8 MiB the record says it sent, not the 7 MiB the sizes add up to
    assert vs["bytes"] == 7 * 2**20
    assert vs["sync_busbw_GBps"] == pytest.approx(8 * 2**20 / 0.01 / 1e9)
    # no method in the record: the method says "()"
    assert "the sync's time (); interval" in vs["method"]
    # a 4-rank file: 1 MiB at busbw 40 GB/s, bus factor 1 here: 2**20 / 40e9 s per call
    other = nt.versus(rec, _file(ranks=4))
    assert other["per_size"][0]["time_s"] == pytest.approx(2**20 / 40e9)
    assert other["file_ranks"] == 4
    assert other["method"] == (
        vs["method"]
        + "; nccl-tests ran 4 ranks and this run 2: its busbw is carried over, not its time"
    )
    assert "carried" not in vs["method"]
    unsaid = nt.versus(rec, {**_file(), "ranks": None})
    assert "carried" not in unsaid["method"]


def test_versus_nothing_to_compare():
    from base.record import Record

    assert nt.versus(_record(time_s=0.0), _file()) is None
    # no sync time: None before the file's times are read (this file has none to read)
    assert nt.versus(_record(time_s=0.0), {"ranks": 2, "rows": []}) is None
    # a record of another task, or without a result
    other = {"status": "ok", "task": "collectives", "result": {"world_size": 2}}
    assert nt.versus(Record.from_dict(other), _file()) is None
    assert nt.versus(Record.from_dict({"status": "failed", "task": "train"}), _file()) is None
    assert nt.versus(_record(), _file()) is None
    one = _record(time_s=0.01)
    one["result"]["world_size"] = 1
    assert nt.versus(one, _file()) is None
    alone = _record(time_s=0.01)
    alone["result"]["world_size"] = None
    assert nt.versus(alone, _file()) is None
    quiet = _record(time_s=0.01)
    quiet["result"]["comm"] = {"time_s": 0.01}
    assert nt.versus(quiet, _file()) is None
    assert nt.versus({"result": {"world_size": 2, "sync": "flat"}}, _file()) is None
    assert nt.versus({"task": "collectives", "result": {}}, _file()) is None
    two = nt.versus(_record(time_s=0.01), _file())
    assert two is not None and two["calls"] == 1


def _vs(**over):
    # efficiencies of 62, 55 and 70 percent: a factor off by one (101) would print 63, 56 and 71
    vs = {
        "reference": "nccl-tests file",
        "sync_s": 0.008,
        "overlap_s": None,
        "efficiency": 0.62,
        "efficiency_ci_lo": None,
        "efficiency_ci_hi": None,
        "calls": 3,
        "bytes": MiB3,
        "achievable_s": 0.002,
        "sync_busbw_GBps": 0.39321,
        "reference_busbw_GBps": 1.5729,
        "method": "how",
    }
    vs.update(over)
    return vs


def test_format_comparison_line_by_line():
    assert nt.format_comparison(_vs()) == (
        "comm vs nccl-tests file: the sync took 8 ms per step; the same 3 call(s) (3.0 MiB) take "
        "2 ms there: efficiency 62% (no interval); busbw 0.393 vs 1.57 GB/s\n"
        "  (how)"
    )
    spanned = _vs(
        overlap_s=0.0031,
        efficiency_ci_lo=0.55,
        efficiency_ci_hi=0.7,
        reference_busbw_GBps=None,
        one_call_of_total_s=0.00125,
        sync_s=0.1234,
        achievable_s=0.0004567,
    )
    assert nt.format_comparison(spanned) == (
        "comm vs nccl-tests file: the all-reduces spanned 123 ms per step (3.1 ms of it beside "
        "backward, waits for gradients included, so the efficiency is a lower bound); the same 3 "
        "call(s) (3.0 MiB) take 0.457 ms there: efficiency 62% [55, 70]\n"
        "  one all_reduce of the whole gradient alone: 1.25 ms (the VGG11 thread's nccl-tests "
        "comparison)\n"
        "  (how)"
    )
    above = nt.format_comparison(_vs(efficiency=1.5, reference_busbw_GBps=0.0))
    assert above == (
        "comm vs nccl-tests file: the sync took 8 ms per step; the same 3 call(s) (3.0 MiB) take "
        "2 ms there: efficiency not measurable: 150% (no interval), the sync took less time than "
        "the same calls alone, and the two timings are inside each other's noise\n"
        "  (how)"
    )


def test_format_table_line_by_line():
    parsed = {
        "format": "json",
        "program": None,
        "ranks": None,
        "avg_busbw_GBps": 12.5,
        "rows": [
            {
                "bytes": 1024,
                "out_of_place": {"time_us": 9.0, "algbw_GBps": 0.11, "busbw_GBps": 0.22},
                "in_place": {"time_us": 8.0, "algbw_GBps": 0.13, "busbw_GBps": 0.26},
            },
            {
                "bytes": 2048,
                "out_of_place": {"time_us": 9.5, "algbw_GBps": 0.2, "busbw_GBps": 0.4},
                "in_place": None,
            },
        ],
    }
    assert nt.format_table(parsed).split("\n") == [
        "nccl-tests all_reduce_perf (json, ? ranks): 2 sizes; avg busbw 12.5 GB/s",
        "        size B  in-place us    algbw    busbw",
        "          1024          8.0     0.13     0.26",
        "          2048          9.5      0.2      0.4",
    ]
    named = {**parsed, "program": "all_reduce_perf_mpi", "format": "table", "ranks": 16}
    assert nt.format_table(named).split("\n")[0] == (
        "nccl-tests all_reduce_perf_mpi (table, 16 ranks): 2 sizes; avg busbw 12.5 GB/s"
    )


def test_a_bare_table_and_the_lines_that_are_not_rows():
    # no version, program, rank or average lines: each is None; a header written without a space
    # after '#'; lines skipped: a row before any header, one two fields short, a word then numbers
    text = (
        "  512 128 float sum -1 1.0 0.1 0.1 0 1.0 0.1 0.1 0\n"
        "#size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
        "  1024 256\n"
        "  2048 512 float sum -1 1.0 0.1 0.1 0 1.0 0.1\n"
        "  total 5 6 7 8 9 10 11 12 13 14 15 16\n"
        "  4096 1024 float sum -1 3.0 1.5 2.5 0 2.0 1.75 2.75 0\n"
    )
    p = nt.parse(text)
    assert {k: p[k] for k in ("program", "version", "avg_busbw_GBps", "ranks")} == dict.fromkeys(
        ("program", "version", "avg_busbw_GBps", "ranks")
    )
    assert [r["bytes"] for r in p["rows"]] == [4096]
    assert p["rows"][0]["in_place"] == {
        "time_us": 2.0,
        "algbw_GBps": 1.75,
        "busbw_GBps": 2.75,
        "wrong": 0.0,
    }


def test_a_json_file_s_average_busbw_bus_bw_and_ranks_from_devices_alone():
    doc = {
        "average_bus_bandwidth": {"bandwidth": 12.5},
        "config": {"devices": ["a", "b", "c"]},
        "results": [
            {"size": 8, "count": 2, "in_place": {"time": 5.0, "alg_bw": 1.5, "bus_bw": 2.5}}
        ],
    }
    p = nt.parse(json.dumps(doc))
    assert p["avg_busbw_GBps"] == 12.5 and p["ranks"] == 3
    assert p["rows"][0]["in_place"]["busbw_GBps"] == 2.5
    assert p["rows"][0]["in_place"]["algbw_GBps"] == 1.5
