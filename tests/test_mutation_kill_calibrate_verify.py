"""stats/calibrate_verify.py (issue 36: a module the mutation run covers): the in-job check's
calibration, checked by hand. The simulated walls on a generator whose normals, uniforms and
integers are given (no noise: a base step of 1 s, the fix's 1 - saving, a switch's extra on the
first step after a change, a drift, a neighbour's load, a stall), the order of blocks (AB, BA,
...), the truth a fixed-length stall leaves, and the coverage row's counts and widths on a stand-in
comparison whose interval is read off the walls. tests/test_verify_calibration.py runs the real
simulation's fast rows."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from stats import calibrate_verify as cv
from tests.conftest import ROOT
from stats.calibrate import HEADER, SIGMA, Result


class _Rng:
    """Normals: the queued arrays in order (zeros once they run out); uniforms and integers: the
    queued ones."""

    def __init__(self, normals=(), uniforms=(), integers=()):
        self.normals, self.uniforms, self.ints = list(normals), list(uniforms), list(integers)
        self.calls = []

    def normal(self, loc, scale, size):
        self.calls.append(("normal", scale, size))
        if self.normals:
            return np.asarray(self.normals.pop(0), dtype=float).reshape(size)
        return np.zeros(size)

    def random(self, size):
        self.calls.append(("random", size))
        return np.asarray(self.uniforms.pop(0), dtype=float).reshape(size)

    def integers(self, lo, hi, size):
        self.calls.append(("integers", lo, hi, size))
        return np.asarray(self.ints.pop(0))


def test_constants():
    assert cv.BOUND == (0.90, 0.98) and cv.SEED == 38 and cv.SAVING == 0.30
    c = cv.Case("c", 3)
    assert (c.block, c.phi, c.sigma, c.stall, c.stall_s, c.drift, c.switch, c.shift, c.ranks) == (
        1,
        0.0,
        SIGMA,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        1,
    )
    assert (c.saving, c.fast, c.width) == (0.30, False, 0.0)


def test_the_truth_moves_only_with_a_fixed_length_stall():
    assert cv.Case("a", 3).truth() == 0.30
    assert cv.Case("a", 3, saving=0.1, stall=0.05).truth() == 0.1  # a doubling stall: no move
    # (0.7 + 0.05) / (1 + 0.05) of the base step's time is the fix's: 1 - 0.75 / 1.05 saved
    assert cv.Case("s", 3, stall=0.05, stall_s=1.0).truth() == pytest.approx(1 - 0.75 / 1.05)
    assert cv.Case("s", 3, saving=0.2, stall=0.1, stall_s=2.0).truth() == pytest.approx(
        1 - 1.0 / 1.2
    )


def test_blocks_alternate_ab_ba_and_a_switch_costs_its_first_step():
    # 2 rounds of blocks of 2 steps: arms 0 0 1 1 | 1 1 0 0; the first step after a change +10%
    case = cv.Case("c", 2, block=2, sigma=0.0, switch=0.1)
    base, fix = cv.block_walls(_Rng(), case, 1)
    # steps 1 1 | 0.77 0.7 | 0.7 0.7 | 1.1 1: blocks 2, 1.47, 1.4, 2.1; round 1 runs BA
    assert base.shape == (1, 2) and fix.shape == (1, 2)
    assert base[0] == pytest.approx([2.0, 2.1], rel=1e-12)
    assert fix[0] == pytest.approx([1.47, 1.4], rel=1e-12)
    # three rounds of one step: AB BA AB; a switch on every step but the first and the 4th
    case = cv.Case("c", 3, sigma=0.0, switch=0.5, saving=0.5)
    base, fix = cv.block_walls(_Rng(), case, 2)
    # arms 0 1 1 0 0 1; steps 1, 0.75, 0.5, 1.5, 1, 0.75
    assert base == pytest.approx(np.array([[1.0, 1.5, 1.0]] * 2), rel=1e-12)
    assert fix == pytest.approx(np.array([[0.75, 0.5, 0.75]] * 2), rel=1e-12)


def test_drift_and_a_neighbours_load_multiply_the_steps_from_where_they_act():
    case = cv.Case("d", 2, sigma=0.0, drift=1.0, saving=0.5)
    base, fix = cv.block_walls(_Rng(), case, 1)
    # drift doubles the step across the check: x 2^(0, 1/3, 2/3, 1); arms 0 1 1 0
    assert base[0] == pytest.approx([1.0, 2.0], rel=1e-12)
    assert fix[0] == pytest.approx([0.5 * 2 ** (1 / 3), 0.5 * 2 ** (2 / 3)], rel=1e-12)
    case = cv.Case("n", 2, sigma=0.0, shift=0.5, saving=0.5)
    rng = _Rng(integers=[np.array([2, 0])])
    base, fix = cv.block_walls(rng, case, 2)
    assert ("integers", 0, 4, 2) in rng.calls
    # from step 2 on (sim 0), from step 0 (sim 1): x 1.5
    assert base == pytest.approx(np.array([[1.0, 1.5], [1.5, 1.5]]), rel=1e-12)
    assert fix == pytest.approx(np.array([[0.5, 0.75], [0.75, 0.75]]), rel=1e-12)


def test_noise_is_drawn_per_rank_and_the_slowest_rank_counts():
    # 2 ranks, 1 round of 1 step a block: rank 0's normals (e then x0), rank 1's
    case = cv.Case("r", 1, sigma=0.1, ranks=2, saving=0.5)
    log2 = math.log(2.0)
    rng = _Rng(normals=[[[0.0, 0.0]], [0.0], [[0.0, log2]], [log2]])
    base, fix = cv.block_walls(rng, case, 1)
    # rank 1's first step (x0) is 2 s, its second (e) 2 x 0.5: the slowest in both blocks
    assert base[0] == pytest.approx([2.0], rel=1e-12)
    assert fix[0] == pytest.approx([1.0], rel=1e-12)
    assert rng.calls[0] == ("normal", 0.1, (1, 2)) and rng.calls[1] == ("normal", 0.1, (1,))


def test_stalls_double_a_step_or_add_fixed_seconds():
    # doubling: series draws the stalls (uniform < 0.05): step 1 of 2
    case = cv.Case("s", 1, sigma=0.0, stall=0.05, saving=0.5)
    rng = _Rng(uniforms=[[[0.5, 0.01]]])
    base, fix = cv.block_walls(rng, case, 1)
    assert base[0] == pytest.approx([1.0]) and fix[0] == pytest.approx([1.0])  # 0.5 x 2
    # fixed length: 1.5 base steps added where the uniform is under 0.05, after the noise
    case = cv.Case("s", 1, sigma=0.0, stall=0.05, stall_s=1.5, saving=0.5)
    rng = _Rng(uniforms=[[[[0.01, 0.9]]]])
    base, fix = cv.block_walls(rng, case, 1)
    assert ("random", (1, 1, 2)) in rng.calls
    assert base[0] == pytest.approx([2.5]) and fix[0] == pytest.approx([0.5])
    rng = _Rng(uniforms=[[[[0.05, 0.049]]]])  # "under" is strict
    base, fix = cv.block_walls(rng, case, 1)
    assert base[0] == pytest.approx([1.0]) and fix[0] == pytest.approx([2.0])


def _fake_ab(calls):
    """A stand-in for block_ab whose interval on the time saved is b[0] +- f[-1] / 2 (so each row
    says its own centre and width), recording the rounds it was given."""

    def block_ab(b, f, block):
        assert isinstance(b, list) and isinstance(f, list)
        calls.append((len(b), block))
        c, w = b[0], f[-1]
        return NS(ci_lo=1 / (1 - (c - w / 2)), ci_hi=1 / (1 - (c + w / 2)))

    return block_ab


def test_coverage_counts_the_intervals_that_hold_the_truth(monkeypatch):
    calls = []
    monkeypatch.setattr(cv, "block_ab", _fake_ab(calls))
    base = np.array([[0.3, 1, 1], [0.5, 1, 1], [0.31, 1, 1], [0.3, 1, 1]], dtype=float)
    fix = np.array([[1, 1, 0.1], [1, 1, 0.1], [1, 1, 0.1], [1, 1, 0.4]], dtype=float)
    case = cv.Case("row", 3, block=2)
    rng = object()

    def block_walls(r, c, sims):
        assert r is rng and c is case and sims == 4
        return base, fix

    monkeypatch.setattr(cv, "block_walls", block_walls)
    r = cv.coverage(rng, case, 4)
    assert calls == [(3, 2)] * 4
    assert isinstance(r, Result)
    assert (r.name, r.hits, r.total, r.bound, r.nominal) == ("row", 3, 4, (0.90, 0.98), "95%")
    assert r.measure == "the saving's interval holds the truth (30.0%)"
    # widths 10, 10, 10, 40 points: median 10, p90 at 2.7 of 3 between 10 and 40: 31
    assert r.note == "width median 10.0 points (p90 31.0)"


def test_coverage_with_the_stopping_rule_uses_the_interval_where_it_stopped(monkeypatch):
    calls = []
    monkeypatch.setattr(cv, "block_ab", _fake_ab(calls))
    f = np.full((3, 8), 0.5)
    f[0, 5] = 0.1  # 6 rounds: narrow enough, stops there
    f[2, 6] = 0.1  # 7 rounds
    f[:, 4] = 0.01  # 5 rounds is narrow everywhere, but too few to stop on
    b = np.ones((3, 8))
    b[:, 0] = [0.3, 0.6, 0.3]  # row 1 (8 rounds, 50 points wide) misses 30%: [0.35, 0.85]
    monkeypatch.setattr(cv, "block_walls", lambda rng, case, sims: (b, f))
    r = cv.coverage(None, cv.Case("w", 8, width=0.15), 3)
    assert r.hits == 2 and r.total == 3
    # rounds 6, 8, 7: median 7, p90 7.8 -> 8; widths 10, 50, 10: median 10, p90 at 1.8: 42
    assert r.note == "width median 10.0 points (p90 42.0); rounds median 7 (p90 8)"
    assert (8, 1) in calls and (6, 1) in calls and (7, 1) in calls and (5, 1) not in calls


def test_stop_round_needs_the_minimum_rounds_and_a_narrow_interval(monkeypatch):
    calls = []
    monkeypatch.setattr(cv, "block_ab", _fake_ab(calls))
    b = np.full(10, 0.3)
    f = np.full(10, 0.5)
    case = cv.Case("w", 10, block=3, width=0.1)
    assert cv.stop_round(b, f, case) == 10
    f[4] = 0.05
    assert cv.stop_round(b, f, case) == 10  # 5 rounds: never, however narrow
    f[5] = 0.09
    assert cv.stop_round(b, f, case) == 6
    f[5], f[8] = 0.11, 0.09
    assert cv.stop_round(b, f, case) == 9
    f[8], f[9] = 0.5, 0.01
    assert cv.stop_round(b, f, case) == 10
    assert {blk for _, blk in calls} == {3}  # the case's block length, every time


def _raw_ab(b, f, block):
    """A stand-in for block_ab whose interval is (b[0], b[1]) as ratios."""
    return NS(ci_lo=b[0], ci_hi=b[1])


def test_an_interval_with_the_truth_on_an_end_holds_it(monkeypatch):
    monkeypatch.setattr(cv, "block_ab", _raw_ab)
    # ratios 2 and 4 save 50% and 75%: a truth of 50% is on the low end; 1.6 and 2, 37.5% and 50%,
    # on the high end; 4 and 8 (75%, 87.5%) miss it
    base = np.array([[2.0, 4.0, 1.0], [1.6, 2.0, 1.0], [4.0, 8.0, 1.0]])
    fix = np.ones((3, 3))
    monkeypatch.setattr(cv, "block_walls", lambda rng, case, sims: (base, fix))
    r = cv.coverage(None, cv.Case("e", 3, saving=0.5), 3)
    assert r.hits == 2 and r.measure.endswith("(50.0%)")
    # widths 25, 12.5, 12.5 points
    assert r.note == "width median 12.5 points (p90 22.5)"


def test_without_a_width_every_round_counts_even_a_narrow_one(monkeypatch):
    calls = []
    monkeypatch.setattr(cv, "block_ab", _fake_ab(calls))
    f = np.full((1, 8), 0.5)
    f[0, 5] = 0.0  # no width at 6 rounds: the stopping rule would stop there; none is asked
    monkeypatch.setattr(cv, "block_walls", lambda rng, case, sims: (np.full((1, 8), 0.3), f))
    r = cv.coverage(None, cv.Case("n", 8), 1)
    assert calls == [(8, 1)] and r.note == "width median 50.0 points (p90 50.0)"


def test_the_rounds_p90_is_the_90th_percentile(monkeypatch):
    monkeypatch.setattr(cv, "block_ab", _fake_ab([]))
    f = np.full((2, 56), 0.5)
    f[0, 5] = 0.01  # row 0 stops at 6 rounds, row 1 runs all 56: p90 = 6 + 0.9 x 50 = 51
    monkeypatch.setattr(cv, "block_walls", lambda rng, case, sims: (np.full((2, 56), 0.3), f))
    r = cv.coverage(None, cv.Case("p", 56, width=0.1), 2)
    assert r.note.endswith("; rounds median 31 (p90 51)")


# every row of the table: name, rounds, block, phi, sigma, stall, stall_s, drift, switch, shift,
# ranks, saving, fast, width (each as its name states it; sigma 5% and saving 30% unless named)
ROWS = [
    ("iid, 3 rounds", 3, 1, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, True, 0.0),
    ("iid, 5 rounds", 5, 1, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, False, 0.0),
    ("iid, 8 rounds", 8, 1, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, False, 0.0),
    ("iid, 20 rounds", 20, 1, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, False, 0.0),
    ("AR(1) phi=0.5, 3 rounds", 3, 1, 0.5, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, False, 0.0),
    ("AR(1) phi=0.5, 8 rounds", 8, 1, 0.5, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, False, 0.0),
    ("AR(1) phi=0.5, 20 rounds", 20, 1, 0.5, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, False, 0.0),
    ("AR(1) phi=0.9, 3 rounds", 3, 1, 0.9, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, True, 0.0),
    ("AR(1) phi=0.9, 8 rounds", 8, 1, 0.9, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, True, 0.0),
    ("AR(1) phi=0.9, 20 rounds", 20, 1, 0.9, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.3, True, 0.0),
    ("A/A (saving 0), iid, 5 rounds", 5, 1, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.0, True, 0.0),
    (
        "A/A (saving 0), AR(1) phi=0.7, 8 rounds",
        8,
        1,
        0.7,
        0.05,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        1,
        0.0,
        False,
        0.0,
    ),
    (
        "blocks of 5 steps, phi=0.7, 5 rounds",
        5,
        5,
        0.7,
        0.05,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "stalls doubling 5% of steps, 8 rounds",
        8,
        1,
        0.0,
        0.05,
        0.05,
        0.0,
        0.0,
        0.0,
        0.0,
        1,
        0.3,
        True,
        0.0,
    ),
    (
        "stalls of 1 base step on 5% of steps, 8 rounds",
        8,
        1,
        0.0,
        0.05,
        0.05,
        1.0,
        0.0,
        0.0,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "stalls of 1 base step on 5% of steps, 20 rounds",
        20,
        1,
        0.0,
        0.05,
        0.05,
        1.0,
        0.0,
        0.0,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "drift +20% across the check, 5 rounds",
        5,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.2,
        0.0,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "drift +20% across the check, 4 rounds (even)",
        4,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.2,
        0.0,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "first step after a switch +10%, 3 rounds",
        3,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.0,
        0.1,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "first step after a switch +10%, 4 rounds",
        4,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.0,
        0.1,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "first step after a switch +10%, 5 rounds",
        5,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.0,
        0.1,
        0.0,
        1,
        0.3,
        True,
        0.0,
    ),
    (
        "first step after a switch +10%, 8 rounds",
        8,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.0,
        0.1,
        0.0,
        1,
        0.3,
        True,
        0.0,
    ),
    (
        "first step after a switch +30%, phi=0.5, 12 rounds",
        12,
        1,
        0.5,
        0.05,
        0.0,
        0.0,
        0.0,
        0.3,
        0.0,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "a neighbour's load +50% part-way, 8 rounds",
        8,
        1,
        0.5,
        0.05,
        0.0,
        0.0,
        0.0,
        0.0,
        0.5,
        1,
        0.3,
        False,
        0.0,
    ),
    (
        "2 ranks, slowest counts, phi=0.5, 8 rounds",
        8,
        1,
        0.5,
        0.05,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        2,
        0.3,
        False,
        0.0,
    ),
    (
        "iid, until 10 points wide (6-40 rounds)",
        40,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        1,
        0.3,
        True,
        0.1,
    ),
    (
        "first step after a switch +10%, until 10 points wide",
        40,
        1,
        0.0,
        0.05,
        0.0,
        0.0,
        0.0,
        0.1,
        0.0,
        1,
        0.3,
        False,
        0.1,
    ),
    (
        "stalls of 1 base step on 5% of steps, until 15 points wide",
        40,
        1,
        0.0,
        0.05,
        0.05,
        1.0,
        0.0,
        0.0,
        0.0,
        1,
        0.3,
        False,
        0.15,
    ),
]


def test_the_rows_of_the_table():
    got = [
        (c.name, c.rounds, c.block, c.phi, c.sigma, c.stall, c.stall_s, c.drift, c.switch, c.shift,
         c.ranks, c.saving, c.fast, c.width)
        for c in cv.cases()
    ]  # fmt: skip
    assert got == ROWS
    # the committed table's rows are these, in this order
    table = (ROOT / "results/verify_calibration/table.md").read_text().splitlines()
    names = [line.split(" | ")[0][2:] for line in table if line.startswith("| ")][1:]
    assert names == [r[0] for r in ROWS]
    # each name states its rounds and phi
    for r in ROWS:
        assert "rounds" not in r[0] or "until" in r[0] or f"{r[1]} rounds" in r[0]
        assert "phi=" not in r[0] or f"phi={r[3]}" in r[0]
        assert ("saving 0" in r[0]) == (r[11] == 0.0)


def test_run_picks_the_rows_and_seeds_each_by_its_place(monkeypatch):
    seen = []

    def coverage(rng, case, sims):
        seen.append((case.name, sims, rng.integers(0, 1 << 30)))
        return case.name

    monkeypatch.setattr(cv, "coverage", coverage)
    names = [c.name for c in cv.cases()]
    out = cv.run(sims=7, seed=5, fast=True)
    assert out == [c.name for c in cv.cases() if c.fast]
    i = names.index("AR(1) phi=0.9, 8 rounds")
    want = np.random.default_rng([5, i]).integers(0, 1 << 30)
    assert ("AR(1) phi=0.9, 8 rounds", 7, want) in seen
    seen.clear()
    assert cv.run(sims=3, only=["drift", "neighbour"]) == [
        "drift +20% across the check, 5 rounds",
        "drift +20% across the check, 4 rounds (even)",
        "a neighbour's load +50% part-way, 8 rounds",
    ]
    assert cv.run(sims=3, only=["drift"], fast=True) == []
    assert len(cv.run(sims=3)) == 28
    assert seen[0][1] == 3
    i = names.index("drift +20% across the check, 5 rounds")
    assert seen[0][2] == np.random.default_rng([cv.SEED, i]).integers(0, 1 << 30)
    seen.clear()
    cv.run(only=["iid, 3 rounds"])
    assert [x[1] for x in seen] == [2000]


def test_help_says_what_the_command_and_its_options_do(capsys):
    with pytest.raises(SystemExit):
        cv.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m stats.calibrate_verify [-h] [--sims SIMS]")
    assert "Calibration of the in-job check's interval (diagnose.verify, issue 38)" in out
    assert "--sims SIMS simulated checks per row" in out
    assert "rows whose name contains one of these words" in out
    assert "--fast the pytest subset only" in out


def test_the_command_line_is_the_one_given(monkeypatch, capsys):
    monkeypatch.setattr(cv, "run", lambda *a: [])
    monkeypatch.setattr(cv.sys, "argv", ["calibrate_verify.py", "--sims", "5"])
    assert cv.main() == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("command: python -m stats.calibrate_verify --sims 5")
    assert "5 simulated checks per row" in out


def test_main_prints_the_table_and_fails_on_a_miss(monkeypatch, capsys):
    got = {}

    def run(sims, seed, only, fast):
        got["args"] = (sims, seed, only, fast)
        return [
            Result("a", "m", 95, 100, (0.90, 0.98), "95%"),
            Result("b", "m", 80, 100, (0.90, 0.98), "95%"),
        ]

    # the rate's Clopper-Pearson interval is stats.calibrate's (scipy.stats: seconds to import)
    monkeypatch.setattr(Result, "interval", lambda self: (0.5, 0.99))
    monkeypatch.setattr(cv, "run", run)
    assert cv.main(["--sims", "100", "--seed", "3", "--only", "x", "y", "--fast"]) == 1
    assert got["args"] == (100, 3, ["x", "y"], True)
    out = capsys.readouterr().out
    assert out.startswith(
        "In-job check calibration: 100 simulated checks per row, seed 3; base step 1 s, log step "
        "SD 5%, true saving 30% unless named; the check's 95% interval (stats.block_ab); rate "
        "[95% Clopper-Pearson interval].\n\n" + HEADER + "\n| a |"
    )
    assert "\n2 rows, 1 miss the bound; numpy " in out
    assert out.rstrip().endswith(
        "command: python -m stats.calibrate_verify --sims 100 --seed 3 --only x y --fast"
    )
    monkeypatch.setattr(cv, "run", lambda *a: [Result("a", "m", 95, 100, (0.90, 0.98))])
    assert cv.main([]) == 0
    assert "\n1 rows, 0 miss the bound;" in capsys.readouterr().out
    got.clear()
    monkeypatch.setattr(cv, "run", run)
    cv.main([])
    assert got["args"] == (2000, 38, None, False)
