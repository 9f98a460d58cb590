"""Issue 25: what a default run prints is short and answers first (the line-count of a real run is in
tests/test_train_runs.py::test_default_strategy_ddp_record)."""
from diagnosis.finding import Evidence, Finding, Saving
from job import brief


def _finding(i: int, first: bool = False) -> dict:
    return Finding(rule=f"r{i}", title=f"finding {i}", detail=f"why {i} in one sentence. More words that stay out.",
                   evidence=[Evidence(name=f"e{k}", value=float(k), unit="ms") for k in range(8)], seed="no seed",
                   saving=Saving(0.1 * (5 - i), how="fewer syncs"), command=f"python train.py x={i}",
                   first=first).to_dict()


def test_the_brief_diagnosis_keeps_its_budget_and_says_what_it_left_out():
    diag = {"findings": [_finding(0, first=True), *(_finding(i) for i in range(1, 6))], "inside_noise": [],
            "noise": {"floor": 0.05, "noisy": True, "reasons": ["step median known only to +-5%"]}}
    lines = brief.diagnosis_lines(diag, budget=17, where="outputs/run")
    assert len(lines) <= 17
    assert lines[0].startswith("diagnosis: 5 finding(s) above the noise floor of 5.0%")
    assert lines[1].startswith("   noisy: step median known only to +-5%") and "python train.py x=0" in lines[1]
    assert "1. finding 1" in lines and "2. finding 2" in lines and not any(line.startswith("3.") for line in lines)
    assert sum("evidence: " in line for line in lines) == 2 * brief.MAX_EVIDENCE
    assert any(line.strip() == "why: why 1 in one sentence." for line in lines)
    assert lines[-1] == "(3 more finding(s): python -m diagnosis outputs/run, or verbose=true)"
    wide = brief.diagnosis_lines(diag, budget=100)
    assert sum(line[:2] in ("1.", "2.", "3.") for line in wide) == brief.MAX_FINDINGS


def test_the_sweep_terminal_table_has_five_columns_within_120_characters():
    """The committed 27-job knob sweep (9 configurations x 3 repeats), read back as the end of a sweep reads it."""
    from pathlib import Path

    from results.callbacks import TERMINAL_WIDTH, terminal_table
    from results.sweep import sweep_entries
    from results.table import build_table

    sweep = Path(__file__).resolve().parents[1] / "results" / "runs" / "ddp_knobs_vgg11"
    entries = sweep_entries(sweep)
    table = build_table(entries, first="job", title="knobs")
    lines = terminal_table(table, entries).splitlines()
    rows = [line for line in lines if line.startswith("|")]
    assert len(rows) == 2 + 9 and max(map(len, rows)) <= TERMINAL_WIDTH
    assert [c.strip() for c in rows[0].strip("|").split("|")] == [
        "configuration", "samples/s [95% CI]", "speed-up [95% CI]", "verdict", "top finding"]
    assert any(r.startswith("| optim=powersgd bucket=25 ") for r in rows)
    assert rows[2].startswith("| optim=none bucket=25 ") and "| baseline " in rows[2]
    assert "sweep_table.md" in lines[-1]
