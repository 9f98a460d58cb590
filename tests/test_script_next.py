"""A task=script run where the diagnosis finds nothing still ends on a next step phrased for the
script (docs/output.md: every screen ends with a next step): its own command, made longer, and
what the script must do for it, since the tool cannot lengthen the user's script."""

import json
from pathlib import Path

import diagnosis
from base.record import Record
from job import brief

ROOT = Path(__file__).resolve().parent.parent
# the script benchmark's healthy run of 2026-11-28 (no finding), kept here: its later reruns may
# name findings (2026-12-07's named a two-spike hiccup in both healthy runs)
HEALTHY = ROOT / "tests/fixtures/script_healthy_2026-11-28/run_record.json"


def _record(**script) -> Record:
    d = json.loads(HEALTHY.read_text())
    assert d["task"] == "script" and not d["result"]["diagnosis"]["findings"]
    d["result"]["script"].update(script)
    return Record.from_dict(d)


def _next(lines: list[str]) -> str:
    (line,) = [x for x in lines if x.startswith("next:")]
    return line


def test_a_script_run_with_no_findings_ends_on_the_scripts_longer_run():
    r = _record()
    floor = r.result.diagnosis.noise.floor
    line = _next(brief.diagnosis_lines(r.result.diagnosis, 20, "<dir>", r))
    want = int(20 * (floor / 0.02) ** 2) + 1
    assert "python train.py task=script script.path=diagnosis/cases/user_loop.py" in line
    assert f" steps={want} " in line and " -m " not in line
    # the script took 40 steps; the window needs 3 warm-up steps and `want` measured ones
    assert f"the script must take {want + 3} optimizer steps (it took 40)" in line
    assert "script.args" in line
    full = diagnosis.format_text(r.result.diagnosis, record=r).splitlines()[-1]
    assert full.startswith(
        "next: nothing here is above the noise floor: python train.py task=script"
    )
    assert f"steps={want} " in full and f"must take {want + 3}" in full


def test_a_script_stopped_by_max_steps_gets_max_steps_raised_and_no_lengthen_note_when_long():
    r = _record(max_steps=40, steps_taken=100_000)
    line = _next(brief.diagnosis_lines(r.result.diagnosis, 20, "<dir>", r))
    want = int(20 * (r.result.diagnosis.noise.floor / 0.02) ** 2) + 1
    assert f"script.max_steps={want + 3}" in line
    assert "must take" not in line


def test_without_its_record_the_text_keeps_the_generic_next_step():
    r = _record()
    assert (
        diagnosis.format_text(r.result.diagnosis)
        .splitlines()[-1]
        .startswith("next: nothing here is above the noise floor; to look closer")
    )
