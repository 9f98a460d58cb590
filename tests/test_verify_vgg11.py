"""Issue 38, the case from the issue: VGG11 at scale=smoke with sync=per_param. The saving of
sync=ddp the run prints (measured in the job by diagnose.verify) is within 5 points of the saving
the separate runs of both settings measure, interleaved by round (never more than 10 points off
in a run). The records are tests/fixtures/verify_vgg11_smoke, written by `python -m
results.verify_vgg11` (its manifest.json says where, when and at what load).

Records from before that harness (no manifest.json: one round on the VM at load 20) cannot judge
5 points: there the goal tests are expected failures (strict: records that pass make them fail
until the mark goes)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from results.verify_vgg11 import MANIFEST, comparison

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "verify_vgg11_smoke"
HARNESS = (FIXTURE / MANIFEST).exists()
OLD = pytest.mark.xfail(
    not HARNESS,
    strict=True,
    reason="the committed records predate python -m results.verify_vgg11: one round on the 2-core "
    "VM at load 20 (the in-job 5.4% [-24, 28] against -7.1% from the two runs)",
)


@cache
def _c() -> dict:
    return comparison(FIXTURE)


def test_every_per_param_run_measured_ddp_in_the_job():
    for r, check in _c()["checks"].items():
        assert check.change == {"sync": "ddp"} and check.rule == "per_param", (r, check)
        assert (
            check.skipped is None and check.rounds >= 3 and len(check.fix_walls_s) == (check.rounds)
        ), (r, check)
        fraction, lo, hi, _ = _c()["printed"][r]
        assert lo is not None and hi is not None and lo <= fraction <= hi


def test_the_fixture_was_measured_quietly():
    if not HARNESS:
        pytest.skip("records from before the harness: no manifest.json")
    m = json.loads((FIXTURE / MANIFEST).read_text())
    # its own two ranks keep a quiet host's load near the cores' count; other work's takes it past
    # twice that (6-20 on this VM while other sessions ran)
    assert max(m["loadavg_before"][0], m["loadavg_after"][0]) < 2 * m["cpus"], m
    assert len(_c()["rounds"]) >= 3, "the separate measurement needs rounds to pair"


@OLD
@pytest.mark.xfail(
    HARNESS,
    strict=True,
    reason="4 quiet rounds (2026-11-28 14:14 UTC): the separate runs' saving moved -7.6% to +7.9% "
    "between rounds, an interval 25 points wide; about 6 rounds reach 20 points at that spread",
)
def test_the_separate_measurement_can_judge_5_points():
    c = _c()
    assert c["measured_lo"] is not None and c["measured_hi"] is not None
    assert c["measured_hi"] - c["measured_lo"] <= 0.20, (c["measured_lo"], c["measured_hi"])


@OLD
def test_the_printed_saving_of_ddp_is_within_5_points_of_the_interleaved_measurement():
    c = _c()
    assert c["printed_median"] == pytest.approx(c["measured"], abs=0.05), c
    for r, (fraction, *_rest) in c["printed"].items():
        assert fraction == pytest.approx(c["measured"], abs=0.10), (r, fraction, c["measured"])


def test_the_harness_files_a_sweeps_records_by_setting_and_round(tmp_path):
    """results.verify_vgg11 keeps each job's record as <sync>/<round>/run_record.json, the old ones
    gone, and the comparison reads them back."""
    from results.verify_vgg11 import _write, command

    sweep = tmp_path / "sweep"
    for i, sync in enumerate(("per_param", "ddp")):
        (sweep / str(i)).mkdir(parents=True)
        first = sorted((FIXTURE / sync).glob("**/run_record.json"))[0]  # either layout
        (sweep / str(i) / "run_record.json").write_bytes(first.read_bytes())
    out = tmp_path / "fixture"
    (out / "per_param" / "stale").mkdir(parents=True)
    _write(out, sweep, {"command": " ".join(command(1, 20, 1.0))})
    assert sorted(p.relative_to(out).as_posix() for p in out.glob("**/run_record.json")) == [
        "ddp/0/run_record.json",
        "per_param/0/run_record.json",
    ]
    assert "sync=per_param,ddp repeats=1" in json.loads((out / MANIFEST).read_text())["command"]
    assert comparison(out)["rounds"] == [0]
