"""The in-job check on real ranks against a known truth (issue 38): A/A checks, the fix being the
run's own setting (diagnose.verify_fix={sync:ddp} on a sync=ddp run: a new DDP wrapper of the same
setting), so the true saving is 0. The committed 30 (results/verify_calibration/aa, their command in
results/verify_calibration/README.md) hold 0 in their intervals as a 95% interval should; one
fresh run checks the path end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from results.verify_aa import rows, table
from tests.conftest import TINY, read, run_train

AA = Path(__file__).resolve().parent.parent / "results" / "verify_calibration" / "aa"


def test_the_committed_aa_checks_hold_zero_as_a_95_percent_interval_should(monkeypatch):
    got = [r for r in rows(AA) if "held" in r]
    n = sum(r["checks"] for r in got)
    held = sum(r["held"] for r in got)
    assert n >= 30 and held >= 0.9 * n, got  # 29 of 30; binomial(30, 0.95) < 27 has p 0.06
    monkeypatch.chdir(AA.parents[2])  # the committed table's command, from the repository root
    assert table(AA.relative_to(AA.parents[2])) == (AA.parent / "aa.md").read_text()


@pytest.mark.slow
@pytest.mark.subprocess
def test_one_aa_check_on_real_ranks(tmp_path):
    proc = run_train(
        [*TINY, "steps=60", "diagnose.verify_budget=1.0", "diagnose.verify_fix={sync:ddp}"],
        tmp_path,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read(proc.out_dir)["result"]
    v = result["verify"]
    assert v["change"] == {"sync": "ddp"} and v["rule"] == "diagnose.verify_fix", v
    assert v["skipped"] is None and v["rounds"] >= 5
    assert v["ci_lo"] <= v["saving"] <= v["ci_hi"] and abs(v["saving"]) < 0.5, v
    # the user's A/A is no finding's measurement
    assert "measured in this job" not in proc.stdout
