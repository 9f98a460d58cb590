"""The calibration suite's fast subset (python -m stats.calibrate --fast): simulated runs with a
known truth, judged by the very functions the tables call. It fails when a 95% interval covers
outside [93%, 97%], a false-verdict rate (per row or per sweep family) or the drift test's /
sentinel's false-alarm rate exceeds 5%, or the power at a true 10% change with R=3 and 4% run spread
falls below what the README claims (stats.calibrate.POWER_CLAIM). Seeded: the same numbers every
run. The full table is docs/methods.md's, from `python -m stats.calibrate`."""

from __future__ import annotations

import re
from pathlib import Path

from stats import calibrate

ROOT = Path(__file__).resolve().parents[1]


def test_fast_calibration_meets_every_bound():
    results = calibrate.run(sims=1500, fast=True)
    assert len(results) >= 12
    misses = [r.row() for r in results if r.ok is False]
    assert not misses, "\n".join(misses)
    assert any(
        r.refused for r in results
    )  # R=1 with strong offsets: no verdict is printed, and the table says why
    kinds = " ".join(r.measure for r in results)
    for what in (
        "covers",
        "false faster/slower per row",
        "per sweep (Holm)",
        "false alarm per run",
        "power",
    ):
        assert what in kinds


def test_the_readme_states_the_power_the_calibration_checks():
    text = "".join(
        p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    )
    claim = re.search(
        r"a true 10% change with R=3 and 4% run spread is called faster in at least (\d+)%", text
    )
    assert claim and int(claim.group(1)) == round(100 * calibrate.POWER_CLAIM)


def test_the_calibration_is_seeded():
    a = calibrate.run(sims=200, only=["sentinel"])
    b = calibrate.run(sims=200, only=["sentinel"])
    assert [(r.hits, r.total) for r in a] == [(r.hits, r.total) for r in b]
