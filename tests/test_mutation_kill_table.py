"""tables/table.py (issue 36: a module the mutation run covers): what the sweep table's cells say,
checked on hand-made rows against the text written out here: a cell's escaping, a failed run's
error line and where its log is, a value with or without its interval, the speed-up cell (never a
bare ratio on a row without an interval), the status and steady columns counted by hand."""

from __future__ import annotations

from types import SimpleNamespace as NSp

from tables import table as t


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
