"""tables/table.py (issue 36: a module the mutation run covers): what the sweep table's cells say,
checked on hand-made rows against the text written out here: a cell's escaping, a failed run's
error line and where its log is, a value with or without its interval, the speed-up cell (never a
bare ratio on a row without an interval), the status and steady columns counted by hand."""

from __future__ import annotations

import csv
from types import SimpleNamespace as NSp

import numpy as np
import pytest

from stats import block_throughput
from tables import table as t
from tables.table import Entry, build_table, comm_table, phase_table, rows_table, scaling_table
from tests.records import collectives_record, train_record


def _entry(error=None, slurm_job_id=None, log=None, status="ok"):
    return NSp(error=error, slurm_job_id=slurm_job_id, log=log, status=status)


def test_a_cell_escapes_pipes_and_newlines():
    assert t._md_cell("a|b\nc") == "a\\|b c"


def test_a_failed_runs_error_line_and_its_log():
    assert t.short_error(_entry()) == "failed"
    assert t.short_error(_entry("\n  first line \nsecond\n")) == "first line"
    tb = "Traceback (most recent call last):\n  File x\nValueError: bad"
    assert t.short_error(_entry(tb)) == "ValueError: bad"
    assert t.short_error(_entry("x" * 200), limit=10) == "x" * 9 + "…"
    assert t.short_error(_entry("x" * 10), limit=10) == "x" * 10
    assert t.short_error(_entry("boom", slurm_job_id=7, log="run.log")) == (
        "boom [slurm job 7, log run.log]"
    )
    assert t.short_error(_entry(None, log="run.log")) == "log run.log"
    assert t.short_error(_entry("", slurm_job_id=3)) == "slurm job 3"


def test_a_value_with_its_interval_or_alone():
    cell = t._interval("steps/s", "lo", "hi")
    assert cell({"steps/s": 12.345, "lo": 12.0, "hi": 12.7}) == "12.35 [12.00, 12.70]"
    assert cell({"steps/s": 12.345}) == "12.35"
    assert cell({"steps/s": 12.345, "lo": None, "hi": 12.7}) == "12.35"
    assert cell({"steps/s": None}) == t.MISSING
    assert cell({"steps/s": float("nan")}) == t.MISSING
    assert cell({}) == t.MISSING


def test_the_speed_up_cell():
    assert t._speedup_text({"baseline": True, "speed-up": 1.3}) == "1"
    assert t._speedup_text({"speed-up": None}) == t.MISSING
    assert t._speedup_text({"speed-up": 1.04, "verdict": t.NO_INTERVAL}) == "no CI"
    row = {"speed-up": 1.1, "speed-up lo": 1.05, "speed-up hi": 1.15, "verdict": "faster"}
    assert t._speedup_text(row) == "1.100x [1.050, 1.150]"


def test_the_verdict_cell_of_rows_without_a_comparison():
    assert t._verdict_cell({}) == t.MISSING
    assert t._verdict_cell({"verdict": "baseline"}) == "baseline"
    assert t._verdict_cell({"verdict": t.NO_INTERVAL}) == t.NO_INTERVAL


def _config(statuses):
    entries = [_entry(status=s) for s in statuses]
    return NSp(entries=entries, ok=[e for e in entries if e.status == "ok"])


def test_the_status_column_counts_the_runs():
    assert t._status(_config(["ok", "ok"])) == "ok"
    assert t._status(_config(["ok", "failed", "ok"])) == "2/3 ok"
    assert t._status(_config(["failed", "interrupted"])) == "failed"
    assert t._status(_config(["interrupted", "interrupted"])) == "interrupted"


def test_the_steady_column_counts_the_flagged_runs():
    c = _config(["ok", "ok", "ok", "failed"])
    a, b, d, _ = c.entries
    tested = {id(a), id(b), id(d)}
    assert t._steady(c, set(), tested) == "yes"
    assert t._steady(c, {id(b)}, tested) == "no (1/3)"
    assert t._steady(c, {id(a), id(b)}, {id(a), id(b)}) == "no (2/2)"
    assert t._steady(c, {id(a)}, {id(a)}) == "no"
    assert t._steady(c, {id(a)}, set()) is None


# ------------------------------------------------ the tables on small hand-made sweeps (issue 36)
# Every expected table below is the text a user reads, written out here: the plain numbers are
# worked out from the records' inputs in the comments (steps/s s -> step 1000/s ms; a phase is its
# share of the step: data 5%, h2d 5%, forward 25%, backward 45%, sync 10%, optimizer 10%; comm
# time 30% of the step, backward compute 40%, overlap = comm - exposed; samples/s = steps/s x 4 x
# world size); the intervals and verdicts come from tables.aggregate (checked in
# tests/test_mutation_kill_aggregate.py), and what is checked here is that the table prints them
# in the right cell, with the right notes, columns and CSV values.


def _records_entries(records):
    return [Entry.from_record(r) for r in records]


def _lines(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def _run(overrides, step_s, num, world_size=2, steps=12, quiet=True, **kw):
    """A train record whose steps alternate -1% and +1% around step_s (the mean is exact);
    quiet: its forward and data series are the same in every row (else the forward time is a
    quarter of the step, which the noise sentinel reads as the machine changing)."""
    rec = train_record(
        overrides=overrides,
        steps_per_s=1 / step_s,
        num=num,
        steps=steps,
        world_size=world_size,
        **kw,
    )
    walls = [step_s * (1 + (0.01 if i % 2 else -0.01)) for i in range(steps)]
    b = block_throughput(walls, [1] * steps)
    rec["result"]["throughput"].update(
        wall_s=sum(walls),
        steps_per_s=b["steps_per_s"],
        samples_per_s=b["steps_per_s"] * 4 * world_size,
        blocks={"walls_s": walls, "steps": [1] * steps},
    )
    series = rec["result"]["series"]
    series["step_time_s"] = walls
    rng = np.random.default_rng(num)
    for phase in ("forward", "data") if quiet else ():
        series["phases"][phase] = list(0.02 * (1 + rng.uniform(-0.01, 0.01, steps)))
    return rec


def _rounds(scales, steps=12, quiet=True, common=()):
    """Rounds of bucket=25 at 100 ms a step and bucket=100 at 80 ms, round r scaled by
    scales[r]."""
    recs = []
    for r, (s1, s2) in enumerate(scales):
        over = [f"repeat={r}", *common]
        recs.append(_run([*over, "bucket=25"], 0.100 * s1, len(recs), steps=steps, quiet=quiet))
        recs.append(
            _run(
                [*over, "bucket=100"],
                0.080 * s2,
                len(recs),
                bucket=100,
                steps=steps,
                quiet=quiet,
            )
        )
    return recs


def _phase_sweep():
    """bucket=25: 2 steps/s (500 ms); bucket=100: two repeats at 4 and 5 steps/s (250, 200 ms:
    the median 225 ms), the second with a phase this version does not declare (gc, 4 ms); a
    collectives run and a failed train run, neither in the table."""
    a = train_record(overrides=["bucket=25"], bucket=25, steps_per_s=2.0, num=0)
    b = train_record(overrides=["bucket=100", "repeat=0"], bucket=100, steps_per_s=4.0, num=1)
    b2 = train_record(overrides=["bucket=100", "repeat=1"], bucket=100, steps_per_s=5.0, num=2)
    b2["result"]["phases"]["gc"] = {"median": 0.004, "p90": 0.005, "mean": 0.004}
    c = collectives_record(overrides=["bucket=5"], num=3)
    f = train_record(
        overrides=["bucket=50"], bucket=50, steps_per_s=1.0, num=4, status="failed", error="boom"
    )
    return _records_entries([a, b, b2, c, f])


def _no_phases():
    n = train_record(overrides=["bucket=10"], bucket=10, steps_per_s=2.0, num=0)
    n["result"]["phases"] = None
    return _records_entries([n])


def _comm_sweep():
    """bucket=25: 2 steps/s, 8 MB, exposed 10 ms [8, 13] from 6 probe steps; bucket=100: two
    repeats at 4 and 5 steps/s, 4 MB, no bucket list, 6 and 8 probe steps; a run without comm
    figures, a collectives run and a failed run, none in the table."""
    a = train_record(overrides=["bucket=25"], bucket=25, steps_per_s=2.0, num=0, exposed_s=0.010)
    a["result"]["comm"].update(exposed_n=6, exposed_ci_lo=0.008, exposed_ci_hi=0.013)
    reps = []
    for i, (sps, n) in enumerate(((4.0, 6), (5.0, 8))):
        r = train_record(
            overrides=["bucket=100", f"repeat={i}"],
            bucket=100,
            steps_per_s=sps,
            num=1 + i,
            bytes_per_step=4_000_000,
        )
        r["result"]["comm"].update(buckets=None, exposed_n=n)
        reps.append(r)
    nc = train_record(overrides=["bucket=1"], bucket=1, steps_per_s=1.0, num=3)
    nc["result"]["comm"] = None
    c = collectives_record(overrides=["bucket=5"], num=4)
    f = train_record(
        overrides=["bucket=50"], bucket=50, steps_per_s=1.0, num=5, status="failed", error="boom"
    )
    return _records_entries([a, *reps, nc, c, f])


def _comm_bare():
    """comm figures without exposed time, overlap, backward compute, bandwidths or a method."""
    m = train_record(overrides=["bucket=7"], bucket=7, steps_per_s=2.0, num=0)
    for k in ("exposed_s", "exposed_n", "method", "overlap_s", "backward_compute_s"):
        m["result"]["comm"][k] = None
    m["result"]["comm"].update(algbw_GBps=None, busbw_GBps=None)
    return _records_entries([m])


def _collectives(overrides, num, peak, extra=False):
    """all_reduce at 1 KiB and 4 MiB: busbw = peak x size / (size + 64 KiB), algbw = busbw at 2
    ranks, time = size / algbw."""
    r = collectives_record(overrides=overrides, num=num, busbw_peak=peak)
    r["result"]["rows"] = [
        x for x in r["result"]["rows"] if x["op"] == "all_reduce" and x["bytes"] in (1024, 4194304)
    ]
    if extra:
        for x in r["result"]["rows"]:
            x.update(mode="in-place", wrong=0)
    return r


def _rows_sweep():
    a = _collectives(["world_size=2"], 0, 2.0)
    b = _collectives(["world_size=4"], 3, 4.0, extra=True)
    t = train_record(overrides=["world_size=3"], steps_per_s=2.0, num=1)
    f = train_record(overrides=["world_size=8"], steps_per_s=2.0, num=2, status="failed", error="x")
    return _records_entries([a, t, f, b])


def _scaling_single():
    """One run per world size: sync=local at 1 rank, 2 steps/s (8 samples/s); DDP at 2 ranks,
    1.5 steps/s (12 samples/s: 1.5x, efficiency 0.75); at 4 ranks 1 step/s (16: 2x, 0.5)."""
    recs = []
    for num, (ws, sps, sync) in enumerate(((1, 2.0, "local"), (2, 1.5, "ddp"), (4, 1.0, "ddp"))):
        r = train_record(
            overrides=[f"world_size={ws}", f"sync={sync}"], steps_per_s=sps, world_size=ws, num=num
        )
        r["result"]["sync"] = r["config"]["sync"] = sync
        recs.append(r)
    recs[0]["result"]["comm"] = None
    return _records_entries(recs)


def _scaling_repeats():
    """Three rounds of 1 rank at 100 ms a step (40 samples/s) and 2 ranks at 125 ms (64
    samples/s: 1.6x, efficiency 0.8), the rounds scaled by (1, 1.01, 0.99) and (1, 0.98, 1.03)."""
    recs = []
    for r, (s1, s2) in enumerate(((1.0, 1.0), (1.01, 0.98), (0.99, 1.03))):
        recs.append(_run([f"repeat={r}", "world_size=1"], 0.100 * s1, len(recs), 1))
        recs.append(_run([f"repeat={r}", "world_size=2"], 0.125 * s2, len(recs), 2))
    return _records_entries(recs)


def _sweep():
    """Three rounds of bucket=25 at 100 ms a step (10 steps/s, 80 samples/s) and bucket=100 at
    80 ms (12.5 steps/s, 100 samples/s: 1.25x), rounds scaled by (1, 1.01, 0.99) and (1, 0.98,
    1.03); bucket=25's runs kept their run directories; one failed job."""
    recs = []
    for r, (s1, s2) in enumerate(((1.0, 1.0), (1.01, 0.98), (0.99, 1.03))):
        recs.append(
            _run(
                [f"repeat={r}", "bucket=25", "model=tiny"],
                0.100 * s1,
                len(recs),
                output_dir=f"out/{len(recs)}",
            )
        )
        recs.append(
            _run([f"repeat={r}", "bucket=100", "model=tiny"], 0.080 * s2, len(recs), bucket=100)
        )
    recs.append(
        train_record(
            overrides=["bucket=50", "model=tiny"],
            bucket=50,
            steps_per_s=1.0,
            num=6,
            status="failed",
            error="Traceback\nRuntimeError: boom",
        )
    )
    return _records_entries(recs)


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _same(cells, expected):
    """A CSV line against the values written out: a float within 1e-9 relative, else the text."""
    assert len(cells) == len(expected), cells
    for cell, want in zip(cells, expected):
        if isinstance(want, float):
            assert float(cell) == pytest.approx(want, rel=1e-9), (cell, want)
        else:
            assert cell == want, (cell, want)


def test_the_phase_table_on_a_hand_made_sweep():
    table = phase_table(_phase_sweep())
    assert table.markdown("##") == PHASES
    # bucket=100: the step median 225 ms plus gc's 4 ms, the one run that timed it
    assert table.rows[1]["sum of phases ms"] == pytest.approx(229.0)
    assert table.rows[0]["gc ms"] is None
    # runs that timed no phase: no phase columns, and no sum (not 0)
    assert phase_table(_no_phases()).markdown() == NO_PHASES


def test_the_comm_table_and_its_csv(tmp_path):
    table = comm_table(_comm_sweep())
    assert table.markdown("##") == COMM
    path = table.write_csv(tmp_path / "comm.csv")
    assert path == tmp_path / "comm.csv"
    lines = _csv(path)
    assert lines[0] == [
        "configuration",
        "MB/step",
        "collectives/step",
        "buckets",
        "comm ms",
        "overlap ms",
        "exposed ms",
        "backward compute ms",
        "algbw GB/s",
        "busbw GB/s",
        "slowest rank",
        "method",
        "exposed comm ms lo",
        "exposed comm ms hi",
        "exposed comm ms n",
    ]
    method = "ddp comm hook timestamps"
    # bucket=25: 500 ms a step; 8 MB in 150 ms = 0.0533 GB/s
    _same(
        lines[1],
        ["bucket=25", 8.0, 3.0, "3", 150.0, 140.0, 10.0, 200.0, 8 / 150, 8 / 150, "1", method]
        + [8.0, 13.0, "6"],
    )
    # bucket=100: medians of 250 and 200 ms steps: comm 75 and 60 -> 67.5; 4 MB in 75 and 60 ms
    _same(
        lines[2],
        ["bucket=100", 4.0, 3.0, "", 67.5, 63.5, 4.0, 90.0, 0.06, 0.06, "1", method, "", "", "6"],
    )
    assert len(lines) == 3
    assert comm_table(_comm_bare()).markdown("##") == COMM_BARE


def test_the_collectives_rows_table():
    assert rows_table(_rows_sweep()).markdown("##") == ROWS
    # one collectives run: no configuration column
    assert rows_table(_rows_sweep()[:2]).markdown("##") == ROWS_ONE


def test_the_scaling_table_with_one_run_per_world_size():
    assert scaling_table(_scaling_single()).markdown("##") == SCALING_SINGLE


def test_the_scaling_table_with_repeats_and_its_csv(tmp_path):
    table = scaling_table(_scaling_repeats())
    assert table.markdown("##") == SCALING_REPEATS
    lines = _csv(table.write_csv(tmp_path / "scaling.csv"))
    assert lines[0] == [
        "configuration",
        "world size",
        "sync",
        "runs",
        "samples/s",
        "speed-up",
        "verdict",
        "scaling efficiency",
        "exposed comm ms",
        "samples/s lo",
        "samples/s hi",
        "speed-up lo",
        "speed-up hi",
        "scaling efficiency lo",
        "scaling efficiency hi",
        "exposed comm ms n",
        "method",
    ]
    one = 40 / np.cbrt(1.01 * 0.99)  # geometric mean over the rounds
    two = 64 / np.cbrt(0.98 * 1.03)
    assert lines[1][:9] == [
        "default",
        "1",
        "ddp",
        "3",
        lines[1][4],
        "1.0",
        "baseline",
        "1.0",
        "4.0",
    ]
    assert float(lines[1][4]) == pytest.approx(one, rel=1e-9)
    assert lines[1][11:] == ["", "", "", "", "1", ""]
    assert lines[2][:4] == ["default", "2", "ddp", "3"]
    assert float(lines[2][4]) == pytest.approx(two, rel=1e-9)
    assert float(lines[2][5]) == pytest.approx(two / one, rel=1e-9)
    assert float(lines[2][7]) == pytest.approx(two / one / 2, rel=1e-9)
    lo, hi, elo, ehi = map(float, lines[2][11:15])
    assert (elo, ehi) == (pytest.approx(lo / 2, rel=1e-12), pytest.approx(hi / 2, rel=1e-12))
    assert lo < two / one < hi
    assert lines[2][6] == "faster" and lines[2][16].startswith("paired t on the per-round")


def test_the_sweep_table_its_notes_and_its_csv(tmp_path):
    table = build_table(_sweep(), title="Sweep")
    assert table.markdown("##") == SWEEP
    assert table.markdown() == SWEEP.split("\n", 2)[2]  # no heading asked: the title left out
    lines = _csv(table.write_csv(tmp_path / "table.csv"))
    assert lines[0] == [
        "job",
        "overrides",
        "status",
        "runs",
        "steps/s",
        "samples/s",
        "speed-up",
        "verdict",
        "step median ms",
        "exposed comm ms",
        "MB/step",
        "grad rel err",
        "steady",
        "error",
        "steps/s lo",
        "steps/s hi",
        "samples/s lo",
        "samples/s hi",
        "speed-up lo",
        "speed-up hi",
        "step median ms lo",
        "step median ms hi",
        "exposed comm ms lo",
        "exposed comm ms hi",
        "exposed comm ms n",
        "verdict notes",
        "baseline",
        "run dir",
    ]
    base, fast = 10 / np.cbrt(1.01 * 0.99), 12.5 / np.cbrt(0.98 * 1.03)
    _same(
        lines[1][:14],
        ["0,2,4", "bucket=25", "ok", "3", base, 8 * base, 1.0, "baseline", 1e3 / base]
        + [4.0, 8.0, 0.0, "", ""],
    )
    _same(
        lines[2][:14],
        ["1,3,5", "bucket=100", "ok", "3", fast, 8 * fast, fast / base, "faster", 1e3 / fast]
        + [4.0, 8.0, 0.0, "", ""],
    )
    assert lines[1][-3:] == ["", "True", "out/0;out/2;out/4"]
    assert lines[2][-3:] == ["", "False", ""]
    assert lines[3] == ["6", "bucket=50", "failed", "0"] + [""] * 9 + ["RuntimeError: boom"] + [
        ""
    ] * 11 + ["", "False", ""]
    # the step median's interval, in ms, around the median
    lo, hi = map(float, lines[1][20:22])
    assert lo < 1e3 / base < hi and lo == pytest.approx(97.54, abs=0.01)
    # a study names its rows by configuration, no job column; one run each: no verdict
    assert build_table(_sweep()[:2], first="configuration").markdown("##") == STUDY


_ROUNDS = ((1.0, 1.0), (1.01, 0.98), (0.99, 1.03))


def test_two_runs_a_side_warn_that_their_intervals_are_wide():
    # the "A row merges" note stands for 2 runs as for 3
    assert build_table(_records_entries(_rounds(_ROUNDS[:2]))).markdown() == TWO_RUNS


def test_one_configuration_has_no_baseline_and_a_wide_spread_needs_over_100_runs():
    """Runs at 100, 140, 70 ms a step: SD of the log throughput 34.7%; no comparison, so no
    baseline note, no verdict, no "Same in every row" (one row)."""
    records = [
        _run([f"repeat={r}", "bucket=25", "model=tiny"], 0.1 * s, r)
        for r, s in enumerate((1.0, 1.4, 0.7))
    ]
    table = build_table(_records_entries(records))
    assert table.markdown() == ONE_CONFIG
    assert table.rows[0]["steps/s"] == pytest.approx(10 / np.cbrt(1.4 * 0.7), rel=1e-9)


def test_the_noise_sentinel_raises_the_floor_and_the_verdict_says_how_many_runs_would_decide(
    tmp_path,
):
    """The forward time a quarter of each row's step: it differs between rows more than within,
    which the sentinel reads as the machine changing; the floor rises and 1.25x is no longer a
    verdict."""
    table = build_table(_records_entries(_rounds(_ROUNDS, quiet=False)))
    assert table.markdown() == SENTINEL
    lines = _csv(table.write_csv(tmp_path / "t.csv"))
    notes = lines[0].index("verdict notes")
    assert [line[notes] for line in lines[1:]] == [
        "",
        "would have seen a difference over 72% (80% power, 1 row(s))",
    ]


def test_a_drifting_run_is_named_in_the_warning_and_its_rows_steady_cell():
    records = _rounds(_ROUNDS, steps=20)
    drifting = records[3]["result"]["series"]  # round 1 of bucket=100 slows by 30%
    drifting["step_time_s"] = list(np.array(drifting["step_time_s"]) * np.linspace(1.0, 1.3, 20))
    assert build_table(_records_entries(records)).markdown() == UNSTEADY


def test_a_table_of_collectives_runs_has_no_train_columns(tmp_path):
    """No verdict, interval or notes columns; a job whose number is unknown shows "–"; the job
    column is text (left-aligned) even when every job is a number."""
    a = collectives_record(overrides=["world_size=2"], num=0, busbw_peak=2.0)
    b = collectives_record(overrides=["world_size=4"], num=None, busbw_peak=3.0)
    table = build_table(_records_entries([a, b]))
    # peak busbw: peak x 4 MiB / (4 MiB + 64 KiB)
    assert table.markdown() == _lines(
        "| job | overrides    | status | peak busbw GB/s (all_reduce) |",
        "|-----|--------------|--------|-----------------------------:|",
        "| 0   | world_size=2 | ok     |                        1.969 |",
        "| –   | world_size=4 | ok     |                        2.954 |",
    )
    lines = _csv(table.write_csv(tmp_path / "t.csv"))
    assert [line[0] for line in lines[1:]] == ["0", "–"]
    assert lines[0] == [
        "job",
        "overrides",
        "status",
        "peak busbw GB/s (all_reduce)",
        "baseline",
        "run dir",
    ]
    b["job"]["num"] = 1
    assert build_table(_records_entries([a, b])).markdown().split("\n")[2:4] == [
        "| 0   | world_size=2 | ok     |                        1.969 |",
        "| 1   | world_size=4 | ok     |                        2.954 |",
    ]
    # no train run: the phase table has no notes, the scaling table no rows
    assert phase_table(_records_entries([a])).notes == []
    assert scaling_table(_records_entries([a])).rows == []


def test_a_rows_headline_values_are_the_median_over_its_runs_and_text_is_the_first_runs():
    """MB/step 8, 9, 13 -> 9; grad rel err 0, 1e-3, 4e-3 -> 1e-3; a text headline: the first
    run's."""
    records = [
        train_record(
            overrides=[f"repeat={r}", "bucket=25"],
            steps_per_s=2.0,
            num=r,
            bytes_per_step=mb * 1_000_000,
            grad_rel_error=g,
        )
        for r, (mb, g) in enumerate(((8, 0.0), (9, 1e-3), (13, 4e-3)))
    ]
    for r, backend in zip(records, ("gloo", "nccl", "mpi")):
        r["result"]["headline"]["backend"] = backend
    row = build_table(_records_entries(records)).rows[0]
    assert row["MB/step"] == pytest.approx(9.0) and row["grad rel err"] == pytest.approx(1e-3)
    assert row["backend"] == "gloo" and row["runs"] == 3


def test_a_long_error_is_cut_at_160_characters():
    assert t.short_error(_entry("y" * 161)) == "y" * 159 + "…"
    assert t.short_error(_entry("y" * 160)) == "y" * 160


def test_the_emulated_link_note_counts_the_finished_runs_only():
    """One finished run behind a 1 Gbit/s link (its check moved 940 Mbit/s), one on loopback, one
    failed behind 10 Gbit/s: the note names the first and counts the second; the failed run's
    link is not the table's."""

    def link(rate, check):
        return {
            "emulated": True,
            "source": "link=",
            "rate_bit_s": rate,
            "qdisc": "htb",
            "latency_us": None,
            "check": {"rate_bit_s": check},
        }

    behind = train_record(overrides=["link=1gbe"], steps_per_s=1.0, num=0)
    plain = train_record(overrides=["link=none"], steps_per_s=2.0, num=1)
    failed = train_record(
        overrides=["link=10gbe"], steps_per_s=2.0, num=2, status="failed", error="x"
    )
    behind["env"]["link"], plain["env"]["link"] = link(1e9, 0.94e9), None
    failed["env"]["link"] = link(1e10, None)
    entries = _records_entries([behind, plain, failed])
    note = (
        "EMULATED LINK: rows ran behind 1 Gbit/s (htb), check transfers 940 Mbit/s..940 Mbit/s "
        "(rate only, no added latency; the compute is this machine's CPU; see each record's "
        "env.link); 1 run(s) without one (loopback)."
    )
    assert build_table(entries).notes[-1] == note
    assert scaling_table(entries).notes[-1] == note
    assert not any("EMULATED" in n for n in build_table(entries[1:]).notes)


def test_an_inconclusive_scaling_row_says_what_would_decide_it():
    """2 ranks at 200 ms a step: the same 40 samples/s as 1 rank at 100 ms (speed-up ~1,
    efficiency ~0.5), rounds scaled by (1, 1.05, 0.93): no significant difference."""
    records = []
    for r, (s1, s2) in enumerate(((1.0, 1.0), (1.01, 1.05), (0.99, 0.93))):
        records.append(_run([f"repeat={r}", "world_size=1"], 0.100 * s1, len(records), 1))
        records.append(_run([f"repeat={r}", "world_size=2"], 0.200 * s2, len(records), 2))
    table = scaling_table(_records_entries(records))
    assert table.text(table.rows[1], "speed-up") == "~1 (0.89-1.14, n.s.)"
    assert table.text(table.rows[1], "verdict") == (
        "no significant difference (~74 runs each would decide); would have seen a difference "
        "over 21% (80% power, 1 row(s))"
    )
    assert table.text(table.rows[1], "scaling efficiency") == "0.50 [0.44, 0.57]"


# ------------------------------------------------------------------ the tables, written out


PHASES = _lines(
    "## Step-time breakdown (median ms per phase)",
    "",
    (
        "| configuration | step median ms | data ms | h2d ms | forward ms | backward ms | syn"
        "c ms | optimizer ms | gc ms | sum of phases ms |"
    ),
    (
        "|---------------|---------------:|--------:|-------:|-----------:|------------:|----"
        "----:|-------------:|------:|-----------------:|"
    ),
    (
        "| bucket=25     |          500.0 |   25.00 |  25.00 |      125.0 |       225.0 |   5"
        "0.00 |        50.00 |     – |            500.0 |"
    ),
    (
        "| bucket=100    |          225.0 |   11.25 |  11.25 |      56.25 |       101.2 |   2"
        "2.50 |        22.50 | 4.000 |            229.0 |"
    ),
    "",
    (
        "Medians over the measured steps on rank 0 (median over repeats); a phase median is t"
        "aken per phase, so the sum of medians need not equal the step median. Intervals per "
        "phase are in each run's summary and record."
    ),
)


NO_PHASES = _lines(
    "| configuration | step median ms | sum of phases ms |",
    "|---------------|---------------:|-----------------:|",
    "| bucket=10     |          500.0 |                – |",
    "",
    (
        "Medians over the measured steps on rank 0 (median over repeats); a phase median is t"
        "aken per phase, so the sum of medians need not equal the step median. Intervals per "
        "phase are in each run's summary and record."
    ),
)


COMM = _lines(
    "## Gradient communication per step",
    "",
    (
        "| configuration | MB/step | collectives/step | buckets | comm ms | overlap ms |     "
        "  exposed ms | backward compute ms | algbw GB/s | busbw GB/s | slowest rank |"
    ),
    (
        "|---------------|--------:|-----------------:|--------:|--------:|-----------:|-----"
        "------------:|--------------------:|-----------:|-----------:|-------------:|"
    ),
    (
        "| bucket=25     |   8.000 |                3 |       3 |   150.0 |      140.0 | 10.0"
        " [8.0, 13.0] |               200.0 |     0.0533 |     0.0533 |            1 |"
    ),
    (
        "| bucket=100    |   4.000 |                3 |       – |   67.50 |      63.50 |     "
        "       4.000 |               90.00 |     0.0600 |     0.0600 |            1 |"
    ),
    "",
    "Measured with ddp comm hook timestamps.  ",
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone."
    ),
)


COMM_BARE = _lines(
    "## Gradient communication per step",
    "",
    "| configuration | MB/step | collectives/step | buckets | comm ms | slowest rank |",
    "|---------------|--------:|-----------------:|--------:|--------:|-------------:|",
    "| bucket=7      |   8.000 |                3 |       3 |   150.0 |            1 |",
)


ROWS = _lines(
    "## Collectives (nccl-tests style)",
    "",
    (
        "| configuration | op         | mode     |  size B |   count | dtype   | time us | al"
        "gbw GB/s | busbw GB/s | wrong |"
    ),
    (
        "|---------------|------------|----------|--------:|--------:|---------|--------:|---"
        "--------:|-----------:|------:|"
    ),
    (
        "| world_size=2  | all_reduce | –        |    1024 |     256 | float32 |   33.28 |   "
        "  0.0308 |     0.0308 |     – |"
    ),
    (
        "| world_size=2  | all_reduce | –        | 4194304 | 1048576 | float32 |    2130 |   "
        "   1.969 |      1.969 |     – |"
    ),
    (
        "| world_size=4  | all_reduce | in-place |    1024 |     256 | float32 |   16.64 |   "
        "  0.0615 |     0.0615 |     0 |"
    ),
    (
        "| world_size=4  | all_reduce | in-place | 4194304 | 1048576 | float32 |    1065 |   "
        "   3.938 |      3.938 |     0 |"
    ),
)


ROWS_ONE = _lines(
    "## Collectives (nccl-tests style)",
    "",
    "| op         |  size B |   count | dtype   | time us | algbw GB/s | busbw GB/s |",
    "|------------|--------:|--------:|---------|--------:|-----------:|-----------:|",
    "| all_reduce |    1024 |     256 | float32 |   33.28 |     0.0308 |     0.0308 |",
    "| all_reduce | 4194304 | 1048576 | float32 |    2130 |      1.969 |      1.969 |",
)


SCALING_SINGLE = _lines(
    "## Scaling against world size",
    "",
    (
        "> **Warning**: one run per world size behind `default` (2 ranks), `default` (4 ranks"
        "): no verdict; an interval from one run holds the noise inside it, not the spread be"
        "tween runs, which can be larger. Run repeats=3 or more."
    ),
    "",
    (
        "| configuration | world size | sync  | runs | samples/s |            speed-up | verd"
        "ict    | scaling efficiency | exposed comm ms |"
    ),
    (
        "|---------------|-----------:|-------|-----:|----------:|--------------------:|-----"
        "-------|-------------------:|----------------:|"
    ),
    (
        "| sync=local    |          1 | local |    1 |     8.000 |                   1 | base"
        "line   |              1.000 |               – |"
    ),
    (
        "| default       |          2 | ddp   |    1 |     12.00 | 1.50 (1 run: no CI) | no v"
        "erdict |             0.7500 |     4.000 (n=1) |"
    ),
    (
        "| default       |          4 | ddp   |    1 |     16.00 | 2.00 (1 run: no CI) | no v"
        "erdict |             0.5000 |     4.000 (n=1) |"
    ),
    "",
    (
        "speed-up = samples/s ÷ the line's first row's (the smallest world size; one common b"
        "aseline where that size has one configuration), with its 95% CI as in the sweep tabl"
        "e; scaling efficiency = speed-up × n0 ÷ n, the same interval scaled: 1 is linear sca"
        "ling.  "
    ),
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone.  "
    ),
    (
        "The baseline trains without DDP (sync=local): the efficiency counts DDP's own cost a"
        "t one rank as a scaling loss, as the ViT study does."
    ),
)


SCALING_REPEATS = _lines(
    "## Scaling against world size",
    "",
    (
        "| configuration | world size | sync | runs |         samples/s |           speed-up "
        "| verdict  | scaling efficiency | exposed comm ms |"
    ),
    (
        "|---------------|-----------:|------|-----:|------------------:|-------------------:"
        "|----------|-------------------:|----------------:|"
    ),
    (
        "| default       |          1 | ddp  |    3 | 40.0 [39.0, 41.0] |                  1 "
        "| baseline |              1.000 |     4.000 (n=1) |"
    ),
    (
        "| default       |          2 | ddp  |    3 | 63.8 [60.0, 67.9] | 1.59x [1.46, 1.74] "
        "| faster   |  0.80 [0.73, 0.87] |     4.000 (n=1) |"
    ),
    "",
    (
        "speed-up = samples/s ÷ the line's first row's (the smallest world size; one common b"
        "aseline where that size has one configuration), with its 95% CI as in the sweep tabl"
        "e; scaling efficiency = speed-up × n0 ÷ n, the same interval scaled: 1 is linear sca"
        "ling.  "
    ),
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone.  "
    ),
    ("Verdicts as in the sweep table, Holm's step-down (family-wise error) over 1 comparison(s)."),
)


SWEEP = _lines(
    "## Sweep",
    "",
    (
        "| job              | overrides  | status | runs |             steps/s |         samp"
        "les/s |           speed-up | verdict  |      step median ms | exposed comm ms | MB/s"
        "tep | grad rel err | steady | error              |"
    ),
    (
        "|------------------|------------|--------|-----:|--------------------:|-------------"
        "-----:|-------------------:|----------|--------------------:|----------------:|-----"
        "---:|-------------:|-------:|--------------------|"
    ),
    (
        "| 0,2,4 (baseline) | bucket=25  | ok     |    3 | 10.00 [9.75, 10.25] | 80.0 [78.0, "
        "82.0] |                  1 | baseline | 100.0 [97.5, 102.5] |     4.000 (n=1) |   8."
        "000 |            0 |      – | –                  |"
    ),
    (
        "| 1,3,5            | bucket=100 | ok     |    3 |   12.5 [11.7, 13.3] |     100 [94,"
        " 106] | 1.25x [1.18, 1.31] | faster   |   80.2 [75.4, 85.4] |     4.000 (n=1) |   8."
        "000 |            0 |      – | –                  |"
    ),
    (
        "| 6                | bucket=50  | failed |    0 |                   – |             "
        "    – |                  – | –        |                   – |               – |     "
        "  – |            – |      – | RuntimeError: boom |"
    ),
    "",
    (
        "Baseline for speed-up: job 0,2,4 (bucket=25), optim=none with bucket=25 (every bucke"
        "t capped at 25 MiB, the first too: the tool's default before it left DDP's own; stoc"
        "k DDP caps the first bucket at 1 MiB), as no finished job ran DDP's default bucket; "
        "speed-up = samples/s ÷ baseline samples/s, with its 95% CI. Verdict: faster / slower"
        " only when the whole CI lies beyond 1 ± 0.02 (compare.noise; criterion.rs's rule); e"
        "quivalent when it lies inside (two one-sided tests, Schuirmann 1987); otherwise no s"
        "ignificant difference, shown as ~1 with its range and the runs that would decide it."
        "  "
    ),
    (
        "Multiplicity: the verdicts control the chance of any false verdict in this table at "
        "5% (Holm's step-down (family-wise error) over 1 comparison(s), Holm 1979); each row'"
        "s interval is its own 95% interval.  "
    ),
    (
        "Speed-up intervals (95%, log scale, the run is the unit): Welch t on the runs' log v"
        "alues.  "
    ),
    (
        "A row merges the repeats of one configuration (runs: how many finished): throughput "
        "and step median are geometric means over runs with t(R-1) intervals (Kalibera & Jone"
        "s 2013); one run: its own noise only: throughput from 60 timed blocks (3 batch means"
        "; a shorter run may hold none of the stalls the rate includes), the step median from"
        " 10 steps (2-5 batch medians).  "
    ),
    (
        "Repeats for ±2% on throughput (measure.rel_ci; Kalibera & Jones 2013): 9 runs per co"
        "nfiguration at the measured spread (SD of a run's log throughput up to 2.5%, of whic"
        "h between runs up to 2.5%: more steps per run do not narrow that part, more runs do)"
        ".  "
    ),
    (
        "Noise sentinel: forward time agrees across rows (random-effects F test p=0.68, betwe"
        "en-row spread 0.0% [0.0%, 2.1%]); data time agrees across rows (random-effects F tes"
        "t p=0.22, between-row spread 0.1% [0.0%, 4.9%]).  "
    ),
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone.  "
    ),
    "Same in every row: model=tiny.  ",
    "1 of 7 failed; their rows keep the error.",
)


STUDY = _lines(
    (
        "> **Warning**: one run behind `bucket=100` (or its baseline): no verdict. One run ho"
        "lds the noise inside it, not the spread between runs (a new process, allocator state"
        ", core placement), which is often larger: single-run verdicts on identical configura"
        "tions were false in 58% of simulated comparisons with 4% run offsets (docs/methods.m"
        "d). Run repeats=3 or more."
    ),
    "",
    (
        "| configuration        | status | steps/s | samples/s |            speed-up | verdic"
        "t    | step median ms | exposed comm ms | MB/step | grad rel err | steady |"
    ),
    (
        "|----------------------|--------|--------:|----------:|--------------------:|-------"
        "-----|---------------:|----------------:|--------:|-------------:|-------:|"
    ),
    (
        "| bucket=25 (baseline) | ok     |   10.00 |     80.00 |                   1 | baseli"
        "ne   |            100 |     4.000 (n=1) |   8.000 |            0 |      – |"
    ),
    (
        "| bucket=100           | ok     |   12.50 |    100.00 | 1.25 (1 run: no CI) | no ver"
        "dict |             80 |     4.000 (n=1) |   8.000 |            0 |      – |"
    ),
    "",
    (
        "Baseline for speed-up: `bucket=25`, optim=none with bucket=25 (every bucket capped a"
        "t 25 MiB, the first too: the tool's default before it left DDP's own; stock DDP caps"
        " the first bucket at 1 MiB), as no finished job ran DDP's default bucket; speed-up ="
        " samples/s ÷ baseline samples/s, with its 95% CI. Verdict: faster / slower only when"
        " the whole CI lies beyond 1 ± 0.02 (compare.noise; criterion.rs's rule); equivalent "
        "when it lies inside (two one-sided tests, Schuirmann 1987); otherwise no significant"
        " difference, shown as ~1 with its range and the runs that would decide it.  "
    ),
    (
        "Speed-up intervals (95%, log scale, the run is the unit): no run-level interval: 1 r"
        "un on a side; the spread between runs is unknown, so no verdict.  "
    ),
    (
        "Noise sentinel: could not judge: forward and data time are under 5% of the step, or "
        "fewer than 2 rows have 2 runs (repeats).  "
    ),
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone.  "
    ),
    "Same in every row: model=tiny.",
)


TWO_RUNS = _lines(
    (
        "> **Warning**: two runs behind `bucket=25`, `bucket=100`: their intervals are valid "
        "but wide (t on 1 degree of freedom); repeats=3 or more."
    ),
    "",
    (
        "| job            | overrides  | status | runs |           steps/s |     samples/s | "
        "          speed-up | verdict  | step median ms | exposed comm ms | MB/step | grad re"
        "l err | steady |"
    ),
    (
        "|----------------|------------|--------|-----:|------------------:|--------------:|-"
        "------------------:|----------|---------------:|----------------:|--------:|--------"
        "-----:|-------:|"
    ),
    (
        "| 0,2 (baseline) | bucket=25  | ok     |    2 |  10.0 [9.3, 10.6] |   80 [75, 85] | "
        "                 1 | baseline |  100 [94, 107] |     4.000 (n=1) |   8.000 |        "
        "    0 |      – |"
    ),
    (
        "| 1,3            | bucket=100 | ok     |    2 | 12.6 [11.1, 14.4] | 101 [89, 115] | "
        "1.27x [1.05, 1.54] | faster   |    79 [70, 90] |     4.000 (n=1) |   8.000 |        "
        "    0 |      – |"
    ),
    "",
    (
        "Baseline for speed-up: job 0,2 (bucket=25), optim=none with bucket=25 (every bucket "
        "capped at 25 MiB, the first too: the tool's default before it left DDP's own; stock "
        "DDP caps the first bucket at 1 MiB), as no finished job ran DDP's default bucket; sp"
        "eed-up = samples/s ÷ baseline samples/s, with its 95% CI. Verdict: faster / slower o"
        "nly when the whole CI lies beyond 1 ± 0.02 (compare.noise; criterion.rs's rule); equ"
        "ivalent when it lies inside (two one-sided tests, Schuirmann 1987); otherwise no sig"
        "nificant difference, shown as ~1 with its range and the runs that would decide it.  "
    ),
    (
        "Multiplicity: the verdicts control the chance of any false verdict in this table at "
        "5% (Holm's step-down (family-wise error) over 1 comparison(s), Holm 1979); each row'"
        "s interval is its own 95% interval.  "
    ),
    (
        "Speed-up intervals (95%, log scale, the run is the unit): paired t on the per-round "
        "log ratios.  "
    ),
    (
        "A row merges the repeats of one configuration (runs: how many finished): throughput "
        "and step median are geometric means over runs with t(R-1) intervals (Kalibera & Jone"
        "s 2013); one run: its own noise only: throughput from 60 timed blocks (3 batch means"
        "; a shorter run may hold none of the stalls the rate includes), the step median from"
        " 10 steps (2-5 batch medians).  "
    ),
    (
        "Repeats for ±2% on throughput (measure.rel_ci; Kalibera & Jones 2013): 5 runs per co"
        "nfiguration at the measured spread (SD of a run's log throughput up to 1.4%, of whic"
        "h between runs up to 1.4%: more steps per run do not narrow that part, more runs do)"
        ".  "
    ),
    (
        "Noise sentinel: forward time agrees across rows (random-effects F test p=0.94, betwe"
        "en-row spread 0.0% [0.0%, 0.5%]); data time agrees across rows (random-effects F tes"
        "t p=0.4, between-row spread 0.0% [0.0%, 3.6%]).  "
    ),
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone."
    ),
)


ONE_CONFIG = _lines(
    (
        "| job   | overrides            | status | runs |    steps/s |    samples/s | speed-u"
        "p | verdict | step median ms | exposed comm ms | MB/step | grad rel err | steady |"
    ),
    (
        "|-------|----------------------|--------|-----:|-----------:|-------------:|--------"
        "-:|--------:|---------------:|----------------:|--------:|-------------:|-------:|"
    ),
    (
        "| 0,1,2 | bucket=25 model=tiny | ok     |    3 | 10 [4, 24] | 80 [30, 190] |        "
        "– |       – |  100 [40, 230] |     4.000 (n=1) |   8.000 |            0 |      – |"
    ),
    "",
    (
        "A row merges the repeats of one configuration (runs: how many finished): throughput "
        "and step median are geometric means over runs with t(R-1) intervals (Kalibera & Jone"
        "s 2013); one run: its own noise only: throughput from 60 timed blocks (3 batch means"
        "; a shorter run may hold none of the stalls the rate includes), the step median from"
        " 10 steps (2-5 batch medians).  "
    ),
    (
        "Repeats for ±2% on throughput (measure.rel_ci; Kalibera & Jones 2013): more than 100"
        " runs at the measured spread (SD of a run's log throughput up to 34.7%, of which bet"
        "ween runs up to 34.7%: more steps per run do not narrow that part, more runs do).  "
    ),
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone."
    ),
)


SENTINEL = _lines(
    (
        "> **Warning**: forward time, which the compared knobs do not change, differs between"
        " rows by more than their runs do (random-effects F test p=0.00015; between-row sprea"
        "d 16.8% [4.4%, 10523.3%], `bucket=100` fastest, `bucket=25` slowest): the machine ch"
        "anged between rows. Verdicts are judged against ±54% (what two rows can differ by fr"
        "om the machine alone) instead of compare.noise."
    ),
    "",
    (
        "| job              | overrides  | status | runs |             steps/s |         samp"
        "les/s |             speed-up | verdict                                              "
        "                                                              |      step median ms "
        "| exposed comm ms | MB/step | grad rel err | steady |"
    ),
    (
        "|------------------|------------|--------|-----:|--------------------:|-------------"
        "-----:|---------------------:|------------------------------------------------------"
        "--------------------------------------------------------------|--------------------:"
        "|----------------:|--------:|-------------:|-------:|"
    ),
    (
        "| 0,2,4 (baseline) | bucket=25  | ok     |    3 | 10.00 [9.75, 10.25] | 80.0 [78.0, "
        "82.0] |                    1 | baseline                                             "
        "                                                              | 100.0 [97.5, 102.5] "
        "|     4.000 (n=1) |   8.000 |            0 |      – |"
    ),
    (
        "| 1,3,5            | bucket=100 | ok     |    3 |   12.5 [11.7, 13.3] |     100 [94,"
        " 106] | ~1 (1.14-1.36, n.s.) | no significant difference (~4 runs each would decide)"
        "; would have seen a difference over 72% (80% power, 1 row(s)) |   80.2 [75.4, 85.4] "
        "|     4.000 (n=1) |   8.000 |            0 |      – |"
    ),
    "",
    (
        "Baseline for speed-up: job 0,2,4 (bucket=25), optim=none with bucket=25 (every bucke"
        "t capped at 25 MiB, the first too: the tool's default before it left DDP's own; stoc"
        "k DDP caps the first bucket at 1 MiB), as no finished job ran DDP's default bucket; "
        "speed-up = samples/s ÷ baseline samples/s, with its 95% CI. Verdict: faster / slower"
        " only when the whole CI lies beyond 1 ± 0.537 (compare.noise, raised to the machine "
        "spread; criterion.rs's rule); equivalent when it lies inside (two one-sided tests, S"
        "chuirmann 1987); otherwise no significant difference, shown as ~1 with its range and"
        " the runs that would decide it.  "
    ),
    (
        "Multiplicity: the verdicts control the chance of any false verdict in this table at "
        "5% (Holm's step-down (family-wise error) over 1 comparison(s), Holm 1979); each row'"
        "s interval is its own 95% interval.  "
    ),
    (
        "Speed-up intervals (95%, log scale, the run is the unit): paired t on the per-round "
        "log ratios.  "
    ),
    (
        "A row merges the repeats of one configuration (runs: how many finished): throughput "
        "and step median are geometric means over runs with t(R-1) intervals (Kalibera & Jone"
        "s 2013); one run: its own noise only: throughput from 60 timed blocks (3 batch means"
        "; a shorter run may hold none of the stalls the rate includes), the step median from"
        " 10 steps (2-5 batch medians).  "
    ),
    (
        "Repeats for ±2% on throughput (measure.rel_ci; Kalibera & Jones 2013): 9 runs per co"
        "nfiguration at the measured spread (SD of a run's log throughput up to 2.5%, of whic"
        "h between runs up to 2.5%: more steps per run do not narrow that part, more runs do)"
        ".  "
    ),
    "Noise sentinel: forward time, see the warning above.  ",
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone."
    ),
)


UNSTEADY = _lines(
    (
        "> **Warning**: not at steady state: 1 of 6 tested runs drifted by more than 2% (drif"
        "t trend test per run, Benjamini-Hochberg over the 6 tested runs at FDR 1%), in `buck"
        "et=100`; a verdict resting on them says so. Their warm-up was not enough or the mach"
        "ine changed during the window: raise warmup_steps and run them again."
    ),
    "",
    (
        "| job              | overrides  | status | runs |             steps/s |         samp"
        "les/s |           speed-up | verdict                          |      step median ms "
        "| exposed comm ms | MB/step | grad rel err | steady   |"
    ),
    (
        "|------------------|------------|--------|-----:|--------------------:|-------------"
        "-----:|-------------------:|----------------------------------|--------------------:"
        "|----------------:|--------:|-------------:|----------|"
    ),
    (
        "| 0,2,4 (baseline) | bucket=25  | ok     |    3 | 10.00 [9.75, 10.25] | 80.0 [78.0, "
        "82.0] |                  1 | baseline                         | 100.0 [97.5, 102.5] "
        "|     4.000 (n=1) |   8.000 |            0 | yes      |"
    ),
    (
        "| 1,3,5            | bucket=100 | ok     |    3 |   12.5 [11.7, 13.3] |     100 [94,"
        " 106] | 1.25x [1.14, 1.36] | faster; rests on an unsteady run |   80.2 [75.4, 85.4] "
        "|     4.000 (n=1) |   8.000 |            0 | no (1/3) |"
    ),
    "",
    (
        "Baseline for speed-up: job 0,2,4 (bucket=25), optim=none with bucket=25 (every bucke"
        "t capped at 25 MiB, the first too: the tool's default before it left DDP's own; stoc"
        "k DDP caps the first bucket at 1 MiB), as no finished job ran DDP's default bucket; "
        "speed-up = samples/s ÷ baseline samples/s, with its 95% CI. Verdict: faster / slower"
        " only when the whole CI lies beyond 1 ± 0.02 (compare.noise; criterion.rs's rule); e"
        "quivalent when it lies inside (two one-sided tests, Schuirmann 1987); otherwise no s"
        "ignificant difference, shown as ~1 with its range and the runs that would decide it."
        "  "
    ),
    (
        "Multiplicity: the verdicts control the chance of any false verdict in this table at "
        "5% (Holm's step-down (family-wise error) over 1 comparison(s), Holm 1979); each row'"
        "s interval is its own 95% interval.  "
    ),
    (
        "Speed-up intervals (95%, log scale, the run is the unit): paired t on the per-round "
        "log ratios.  "
    ),
    (
        "A row merges the repeats of one configuration (runs: how many finished): throughput "
        "and step median are geometric means over runs with t(R-1) intervals (Kalibera & Jone"
        "s 2013); one run: its own noise only: throughput from 60 timed blocks (3 batch means"
        "; a shorter run may hold none of the stalls the rate includes), the step median from"
        " 10 steps (2-5 batch medians).  "
    ),
    (
        "Repeats for ±2% on throughput (measure.rel_ci; Kalibera & Jones 2013): 9 runs per co"
        "nfiguration at the measured spread (SD of a run's log throughput up to 2.5%, of whic"
        "h between runs up to 2.5%: more steps per run do not narrow that part, more runs do)"
        ".  "
    ),
    (
        "Noise sentinel: forward time agrees across rows (random-effects F test p=0.19, betwe"
        "en-row spread 0.1% [0.0%, 4.0%]); data time agrees across rows (random-effects F tes"
        "t p=0.25, between-row spread 0.1% [0.0%, 2.3%]).  "
    ),
    (
        "exposed comm: communication backward did not hide, per step (DDP: its reducer timers"
        " over probe_steps untimed steps after the window; explicit syncs: the sync phase); ("
        "n=1): a single sample, no interval (probe_steps=6 gives a 95% one), which the diagno"
        "sis never acts on alone."
    ),
)
