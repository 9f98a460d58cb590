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
    with pytest.raises(nt.NcclTestsError, match="no positive times"):
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
