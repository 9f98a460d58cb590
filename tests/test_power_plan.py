"""python -m results.plan on committed pilots (issue 39): the plan from a repeated sweep's own
records."""

from pathlib import Path

import pytest

from results.plan import main, pilot_from
from tables.sweep import load_entries

ROOT = Path(__file__).resolve().parents[1]
KNOBS = ROOT / "results/runs/ddp_knobs_vgg11"  # 9 configurations x 3 interleaved rounds of 10 steps


def test_a_repeated_sweep_is_a_pilot_and_the_plan_says_what_the_budget_can_detect(capsys):
    pilot, labels = pilot_from(load_entries([KNOBS]))
    assert len(labels) == 9 and len(pilot.logs) == 9 and all(len(r) == 3 for r in pilot.logs)
    assert pilot.steps == 10 and pilot.startup_s > 0 and pilot.step_s > 0
    assert main([str(KNOBS), "--budget-s", "3600"]) == 0
    out = capsys.readouterr().out
    assert "stopped at compare.budget_s=3600" in out and "5% would take" in out
    assert "repeats=" in out and "python train.py -m" in out and "hydra.sweep.dir" not in out


def test_a_sweep_without_rounds_is_refused_in_one_line(capsys):
    assert main([str(ROOT / "results/runs/vgg11_local")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert main([str(KNOBS), "--target", "2"]) == 2


@pytest.mark.parametrize("target", [0.3])
def test_a_loose_target_is_reached_within_the_budget(capsys, target):
    assert main([str(KNOBS), "--target", str(target)]) == 0
    assert "target reached" in capsys.readouterr().out


def test_a_round_with_a_failed_run_is_left_out_of_the_pilot():
    entries = load_entries([KNOBS])
    entries[0].status = "failed"  # one job of round 0 (a hang the load caused, say)
    pilot, labels = pilot_from(entries)
    assert len(labels) == 9 and all(len(r) == 2 for r in pilot.logs)
    next(
        e for e in entries if e.num == 10
    ).status = "failed"  # round 1 too: one complete round left
    with pytest.raises(ValueError, match="2 rounds or more"):
        pilot_from(entries)
