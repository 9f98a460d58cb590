"""The sweep table: one builder for the end-of-sweep callback and the report; failed and missing
jobs as rows."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from results.callbacks import TABLE_CSV, TABLE_MD, sweep_entries
from tests.records import train_record, write_sweep
from base.record import train_headline
from tables.table import Entry, build_table, fmt

REPO = Path(__file__).resolve().parents[1]


def _entries(records):
    return [Entry.from_record(r) for r in records]


def _four(first_optim="none"):
    """optim x bucket sweep: steps/s chosen so every speed-up is a known ratio."""
    records, num = [], 0
    optims = [first_optim] + [o for o in ("none", "bf16") if o != first_optim]
    for optim in optims:
        for bucket in (100, 25):
            sps = {"none": 2.0, "bf16": 3.0}[optim] + (0.5 if bucket == 100 else 0.0)
            records.append(
                train_record(
                    overrides=[f"optim={optim}", f"bucket={bucket}", "model=vgg11_tiny"],
                    steps_per_s=sps,
                    optim=optim,
                    bucket=bucket,
                    num=num,
                    grad_rel_error=0.0 if optim == "none" else 3e-3,
                )
            )
            num += 1
    return records


def test_rows_follow_the_records_and_the_baseline_is_none_bucket25_wherever_it_sits():
    records = _four(first_optim="bf16")  # jobs: bf16/100, bf16/25, none/100, none/25
    table = build_table(_entries(records))
    assert [r["job"] for r in table.rows][:3] == [0, 1, 2]
    assert table.rows[3]["baseline"] and not any(r["baseline"] for r in table.rows[:3])
    assert "job 3 (optim=none bucket=25)" in table.notes[0] and "default bucket" in table.notes[0]
    base = records[3]["result"]["throughput"]["samples_per_s"]
    for row, rec in zip(table.rows, records):
        res = rec["result"]
        assert row["steps/s"] == res["throughput"]["steps_per_s"]
        assert row["samples/s"] == res["throughput"]["samples_per_s"]
        assert row["speed-up"] == pytest.approx(res["throughput"]["samples_per_s"] / base)
        assert row["step median ms"] == pytest.approx(res["step_time_s"]["median"] * 1e3)
        assert row["exposed comm ms"] == pytest.approx(res["comm"]["exposed_s"] * 1e3)
        assert row["MB/step"] == pytest.approx(res["comm"]["bytes_per_step"] / 1e6)
        assert row["grad rel err"] == res["accuracy"]["grad_rel_error"]
    # only the varying overrides name a row; the shared ones are stated once
    assert table.rows[0]["overrides"] == "optim=bf16 bucket=100"
    assert any("model=vgg11_tiny" in n for n in table.notes)
    md = table.markdown()
    assert (
        "| 3 (baseline)" in md and "1.75 (1 run: no CI)" in md
    )  # bf16/100: 3.5 / 2.0; one run: no verdict


def test_without_the_default_baseline_the_first_job_is_used_and_the_table_says_so():
    records = [
        train_record(
            overrides=["optim=bf16", f"bucket={b}"], optim="bf16", bucket=b, steps_per_s=s, num=i
        )
        for i, (b, s) in enumerate([(100, 4.0), (2000, 2.0)])
    ]
    table = build_table(_entries(records))
    assert table.rows[0]["baseline"] and table.rows[1]["speed-up"] == pytest.approx(0.5)
    assert "first finished job" in table.notes[0]


def test_missing_headline_falls_back_to_the_structured_fields():
    records = [
        train_record(overrides=[f"bucket={b}"], bucket=b, steps_per_s=s, num=i, headline=False)
        for i, (b, s) in enumerate([(25, 2.0), (100, 3.0)])
    ]
    table = build_table(_entries(records))
    assert table.rows[1]["steps/s"] == 3.0 and table.rows[1]["speed-up"] == pytest.approx(1.5)
    assert table.rows[0]["MB/step"] == pytest.approx(8.0)


def test_headline_columns_are_the_union_in_first_seen_order():
    a = train_record(overrides=["bucket=25"], steps_per_s=2.0, num=0)
    b = train_record(overrides=["bucket=100"], bucket=100, steps_per_s=2.0, num=1)
    a["result"]["headline"]["loss"] = 2.3
    b["result"]["headline"]["h2d ms"] = 0.1
    table = build_table(_entries([a, b]))
    assert table.columns.index("loss") < table.columns.index("h2d ms")
    assert table.rows[0]["loss"] == 2.3 and table.rows[0]["h2d ms"] is None


def test_failed_rows_keep_the_error_and_the_slurm_job_the_others_keep_their_numbers():
    ok = train_record(overrides=["optim=none"], steps_per_s=2.0, num=0)
    bad = train_record(
        overrides=["optim=powersgd"],
        steps_per_s=1.0,
        num=1,
        status="failed",
        error='Traceback (most recent call last):\n  File "x.py"\nRuntimeError: NCCL timeout',
    )
    bad["job"].update(slurm_job_id="4242", log="/logs/4242_0_log.err")
    table = build_table(_entries([ok, bad]))
    assert table.rows[0]["steps/s"] == 2.0 and table.rows[0]["status"] == "ok"
    assert table.rows[1]["status"] == "failed" and table.rows[1]["steps/s"] is None
    assert (
        table.rows[1]["error"]
        == "RuntimeError: NCCL timeout [slurm job 4242, log /logs/4242_0_log.err]"
    )
    assert "1 of 2 failed" in table.markdown()


def test_sweep_entries_merge_records_crashed_dirs_and_jobs_that_never_started(tmp_path):
    records = _four()
    records[1]["status"] = "crashed"  # write_sweep leaves its record out: a job that died hard
    write_sweep(tmp_path, records)
    expected = [r["overrides"] for r in records] + [["optim=fp16", "bucket=25", "model=vgg11_tiny"]]
    entries = sweep_entries(
        tmp_path, expected=expected, returns={3: {"error": "ValueError: bad", "overrides": []}}
    )
    assert [e.num for e in entries] == [0, 1, 2, 3, 4]
    assert [e.status for e in entries] == ["ok", "failed", "ok", "ok", "failed"]
    assert (
        "crashed or was killed" in entries[1].error
        and entries[1].overrides == records[1]["overrides"]
    )
    assert (
        entries[1].task == "train"
    )  # inferred from the other jobs, so it lands in the train table
    assert "never started" in entries[4].error and entries[4].overrides[0] == "optim=fp16"


def test_fmt_rounds_for_reading():
    assert [fmt(v) for v in (None, 0.0, 1234.56, 310.44, 47.355, 3.8744, 0.0031, 1.2e-7, 3)] == [
        "–",
        "0",
        "1235",
        "310.4",
        "47.35",
        "3.874",
        "0.0031",
        "1.20e-07",
        "3",
    ]
    assert fmt(1.4567, "speed-up") == "1.46x"


def test_train_headline_labels_are_the_table_columns():
    rec = train_record(overrides=[], steps_per_s=2.0)
    assert list(train_headline(rec["result"])) == [
        "steps/s",
        "samples/s",
        "step median ms",
        "exposed comm ms",
        "MB/step",
        "grad rel err",
    ]


# --- the Hydra callback, in a real multirun of a tiny app (no torch: the app writes sample records)
# -------------

APP = """
import sys
sys.path.insert(0, {repo!r})
import hydra
from hydra.core.hydra_config import HydraConfig
from tests.records import write_record
from tests.records import train_record

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    hc = HydraConfig.get()
    rec = train_record(overrides=list(hc.overrides.task), optim=cfg.optim, bucket=cfg.bucket,
                       steps_per_s={{"none": 2.0, "bf16": 3.0}}[cfg.optim]
                       * (1.5 if cfg.bucket == 100 else 1.0),
                       num=hc.job.num, sweep_dir=hc.sweep.dir, output_dir=hc.runtime.output_dir)
    if cfg.optim == "bf16" and cfg.bucket == 25:
        return None  # ends without a record (as a hard crash would look)
    if cfg.optim == "bf16" and cfg.bucket == 100:    # the lead's failed-job contract
        rec.update(status="failed", error="RuntimeError: injected")
        write_record(hc.runtime.output_dir, rec)
        return {{"status": "failed", "error": "RuntimeError: injected"}}
    write_record(hc.runtime.output_dir, rec)
    return {{"status": "ok"}}

main()
"""

CONFIG = """
optim: none
bucket: 25
logger:
  name: none
hydra:
  callbacks:
    sweep_table:
      _target_: results.callbacks.SweepTable
      fail_on_failed_jobs: {fail}
"""


def _run_app(tmp_path, fail="true", sweep="optim=none,bf16"):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(CONFIG.format(fail=fail))
    (tmp_path / "app.py").write_text(APP.format(repo=str(REPO)))
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "app.py", "-m", sweep, "bucket=25,100", f"hydra.sweep.dir={sweep_dir}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    return proc, sweep_dir


@pytest.mark.subprocess
def test_callback_prints_progress_saves_the_table_then_exits_nonzero(tmp_path):
    proc, sweep_dir = _run_app(tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, proc.stderr
    for i in range(1, 5):
        assert f"job {i}/4" in out
    assert "[sweep] 4 jobs" in out
    assert "2 of 4 jobs failed (job 2, 3)" in proc.stderr  # after the table was saved
    with open(sweep_dir / TABLE_CSV) as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["ok", "ok", "failed", "failed"]
    assert rows[0]["baseline"] == "True" and float(rows[1]["speed-up"]) == pytest.approx(1.5)
    assert (
        "without writing a run record" in rows[2]["error"]
        and "RuntimeError: injected" in rows[3]["error"]
    )
    assert rows[2]["overrides"] == "optim=bf16 bucket=25"
    md = (sweep_dir / TABLE_MD).read_text()
    assert "python app.py -m optim=none,bf16 bucket=25,100" in md and "| 0 (baseline)" in md
    assert (sweep_dir / "sweep_throughput.png").stat().st_size > 1000
    assert f"table: {sweep_dir / TABLE_MD}" in out


def test_callback_can_leave_the_exit_code_alone(tmp_path, capsys):
    """A sweep with a failed job and a job that wrote no record: with fail_on_failed_jobs false the
    callback saves the table and raises nothing, so the sweep's exit code is Hydra's own (0); with
    true, the same sweep raises SweepFailed (exit 1 through app.py: the test above). In this
    process (issue 36: the app's second start was ~3 CPU s), the config reaching the callback from
    hydra.callbacks being the test above's."""
    from omegaconf import OmegaConf

    from results.callbacks import SweepFailed, SweepTable

    records = [train_record(overrides=["bucket=25"], bucket=25, steps_per_s=2.0)]
    records.append(train_record(overrides=["bucket=100"], bucket=100, steps_per_s=3.0))
    records[1].update(status="failed", error="RuntimeError: injected")
    records.append(train_record(overrides=["bucket=200"], bucket=200, steps_per_s=3.0))
    records[2]["status"] = "crashed"  # write_sweep writes no record for it
    sweep_dir = write_sweep(tmp_path / "sweep", records, ["bucket=25,100,200"])
    config = OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": str(sweep_dir)},
                "job": {"name": "app"},
                "mode": "MULTIRUN",
                "overrides": {"hydra": [], "task": ["bucket=25,100,200"]},
            },
            "logger": {"name": "none"},
        }
    )
    SweepTable(fail_on_failed_jobs=False, plots=False).on_multirun_end(config)
    assert (sweep_dir / TABLE_MD).is_file()
    with open(sweep_dir / TABLE_CSV) as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["ok", "failed", "failed"]
    with pytest.raises(SweepFailed, match="2 of 3 jobs failed"):
        SweepTable(fail_on_failed_jobs=True, plots=False).on_multirun_end(config)
    capsys.readouterr()


def test_the_baseline_is_stock_ddp_and_the_table_names_the_bucket_rule_it_used():
    """bucket=null (the record's "default": DDP's own caps, the first bucket 1 MiB) is the baseline;
    an explicit bucket=25 caps the first bucket at 25 MiB too, so it is a configuration like any
    other (issue 19, item 3)."""
    records = [
        train_record(overrides=["bucket=25"], bucket=25, steps_per_s=2.0, num=0),
        train_record(overrides=["bucket=100"], bucket=100, steps_per_s=2.5, num=1),
        train_record(overrides=[], bucket="default", steps_per_s=3.0, num=2),
    ]
    table = build_table(_entries(records))
    assert table.rows[2]["baseline"] and not table.rows[0]["baseline"]
    assert (
        "optim=none with DDP's default bucket (bucket=null" in table.notes[0]
        and "stock DDP" in table.notes[0]
    )
    # records made when the tool's default was bucket=25 (the committed reproductions): their
    # baseline says so
    table = build_table(_entries(records[:2]))
    assert table.rows[0]["baseline"]
    assert (
        "optim=none with bucket=25 (every bucket capped at 25 MiB, the first too" in table.notes[0]
    )


def test_exposed_comm_from_one_probe_step_is_marked_in_every_table():
    """Issue 19.13: the exposed time of a DDP run is one untimed probe step unless probe_steps asks
    for more; a table never shows it as if it had an interval. With 6 probe steps (the record's
    exposed_ci_*) it shows the interval."""
    from tables.table import comm_table, scaling_table

    one = train_record(overrides=["bucket=25"], bucket=25, steps_per_s=2.0, num=0, exposed_s=0.658)
    six = train_record(
        overrides=["bucket=100"], bucket=100, steps_per_s=2.5, num=1, exposed_s=0.058
    )
    six["result"]["comm"].update(exposed_n=6, exposed_ci_lo=0.050, exposed_ci_hi=0.070)
    entries = _entries([one, six])
    table = build_table(entries)
    md = table.markdown()
    assert "658.0 (n=1)" in md and "58 [50, 70]" in md and "(n=1): a single sample" in md
    assert [r["exposed comm ms n"] for r in table.rows] == [1, 6]
    assert "658.0 (n=1)" in comm_table(entries).markdown()
    one_rank = train_record(
        overrides=["world_size=1", "sync=local"], steps_per_s=3.0, world_size=1, num=2
    )
    one_rank["result"]["comm"] = None
    assert "(n=1)" in scaling_table(_entries([one_rank, one])).markdown()
