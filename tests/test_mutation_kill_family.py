"""stats/family.py, the family-adjusted verdicts of a sweep table (issue 36: a module the mutation
run covers), on paired rows whose per-round log ratios are chosen by hand: their mean, standard
error and t statistic worked out apart from the code, t quantiles from the printed table, Holm and
Benjamini-Hochberg stepped through."""

from __future__ import annotations

import math

import pytest

from stats.family import Row, _pct, family_verdicts, pair_verdicts

T975_DF2 = (
    4.302652729911275  # Student t, 0.975 quantile, 2 degrees of freedom (printed tables: 4.303)
)
BASE = Row("base", [0.0, 0.01, -0.01], [0, 1, 2])


def _row(label: str, diffs: list[float], unsteady: list | None = None) -> Row:
    """A row whose log ratio to BASE in round i is diffs[i]."""
    return Row(label, [b + d for b, d in zip(BASE.logs, diffs)], [0, 1, 2], unsteady or [])


def test_family_verdicts_by_hand():
    """Row 2x: log ratios ln 2, ln 2 + 0.01, ln 2: mean ln 2 + 0.01/3, sd sqrt(((0.01/3)^2 x 2 +
    (0.02/3)^2) / 2) = 0.005774, se 0.003333; its interval clear above 1.02: faster. Row ~1: 0,
    0.002, -0.001: se 0.000882, inside +-2%: equivalent, resting on its unsteady second run. The
    baseline's place holds None."""
    two = _row("2x", [math.log(2), math.log(2) + 0.01, math.log(2)])
    one = _row("1x", [0.0, 0.002, -0.001], [False, True, False])
    out = family_verdicts([BASE, two, one], 0)
    assert out[0] is None
    d = out[1]
    mean, se = math.log(2) + 0.01 / 3, 0.01 / math.sqrt(3) / math.sqrt(3)
    assert d["ratio"] == pytest.approx(math.exp(mean)) and d["log_se"] == pytest.approx(se)
    assert d["ci_lo"] == pytest.approx(math.exp(mean - T975_DF2 * se))
    assert d["ci_hi"] == pytest.approx(math.exp(mean + T975_DF2 * se))
    assert d["log_ratio"] == pytest.approx(mean) and d["df"] == 2 and d["paired"] is True
    assert d["verdict"] == d["verdict_unadjusted"] == d["claim"] == "faster" and d["notes"] == []
    assert d["n_baseline"] == d["n_candidate"] == 3 and d["noise"] == d["floor"] == 0.02
    assert d["family"] == "Holm's step-down (family-wise error) over 2 comparison(s)"
    assert d["method"].startswith("paired t") and d["repeats_needed"] is None and 0 < d["p"] < 1e-3
    assert d["detectable"] is not None and d["detectable"] > 0
    e = out[2]
    assert e["verdict"] == "equivalent" and e["notes"] == ["rests on an unsteady run"]
    assert e["log_se"] == pytest.approx(
        math.sqrt((1 / 9 + 25 / 9 + 16 / 9) * 1e-6 / 2) / math.sqrt(3)
    )
    # the base anywhere: None in its place, the others in order
    moved = family_verdicts([two, BASE, one], 1)
    assert (
        moved[1] is None and moved[0]["verdict"] == "faster" and moved[2]["verdict"] == "equivalent"
    )


def test_holm_takes_back_what_each_row_alone_would_claim():
    """Two rows of log ratios ln 1.2 + (0, 0.05, -0.05): se 0.05 / sqrt(3) = 0.0289, t = (ln 1.2 -
    ln 1.02) / se = 5.63 on 2 df, between t(0.975) 4.303 and t(0.9875) 6.205: p between 0.025 and
    0.05. Each alone is faster; Holm needs 0.05 / 2 of the first: neither stands, and each says why;
    Benjamini-Hochberg keeps both (the larger p under 2/2 of 0.05). A noise floor of 10% lifts
    faster's bar over both intervals' lower ends."""
    diffs = [math.log(1.2), math.log(1.2) + 0.05, math.log(1.2) - 0.05]
    rows = [_row("a", diffs), _row("b", diffs)]
    holm = pair_verdicts([(BASE, r) for r in rows])
    for d in holm:
        assert 0.025 < d["p"] < 0.05 and d["verdict_unadjusted"] == "faster"
        assert d["verdict"] == "no significant difference"
        assert d["notes"] == [
            f"would have seen a difference over {_pct(d['detectable'])} (80% power, 2 row(s))",
            "faster alone, not after Holm over 2 rows",
        ]
    bh = pair_verdicts([(BASE, r) for r in rows], method="fdr_bh")
    assert [d["verdict"] for d in bh] == ["faster", "faster"] and bh[0]["notes"] == []
    assert bh[0]["family"] == "Benjamini-Hochberg (false discovery rate) over 2 comparison(s)"
    floored = pair_verdicts([(BASE, rows[0])], floor=0.1)
    assert floored[0]["floor"] == 0.1 and floored[0]["verdict_unadjusted"] != "faster"
    # a 90% family: the rows' own intervals at 90%, the family at 10%: BH and Holm both keep them
    assert [d["verdict"] for d in pair_verdicts([(BASE, r) for r in rows], level=0.90)] == [
        "faster",
        "faster",
    ]


def test_one_run_a_side_gives_no_verdict_and_no_claim():
    d = pair_verdicts([(Row("b", [0.0]), Row("c", [math.log(2)]))])[0]
    assert d["verdict"] == d["verdict_unadjusted"] == "no verdict"
    assert d["claim"] is None and d["p"] is None and d["family"] is None and d["detectable"] is None


def test_pct_of_a_detectable_difference():
    assert (
        _pct(0.05) == "5.0%"
        and _pct(0.0999) == "10.0%"
        and _pct(0.1) == "10%"
        and _pct(0.25) == "25%"
    )


def test_level_noise_and_floor_reach_every_row():
    """The 2x row of test_family_verdicts_by_hand at 90%: t(0.95, 2) = 2.920; the ratio-1.2 rows
    inside a band of +-50%: equivalent, not faster; a 10% floor, through family_verdicts too: not
    faster, and a larger difference needed to be seen. Benjamini-Hochberg over the 1.2 row and two
    rows of no difference (log ratios 0, +-0.05): the 1.2 row's p (0.025 to 0.05) is over 1/3 of
    0.05, so nothing stands, and the row says which procedure."""
    two = _row("2x", [math.log(2), math.log(2) + 0.01, math.log(2)])
    mean, se = math.log(2) + 0.01 / 3, 0.01 / 3
    d = pair_verdicts([(BASE, two)], level=0.90)[0]
    assert d["ci_lo"] == pytest.approx(math.exp(mean - 2.919985580355516 * se))
    a = _row("a", [math.log(1.2), math.log(1.2) + 0.05, math.log(1.2) - 0.05])
    d = pair_verdicts([(BASE, a)], noise=0.5)[0]
    assert d["verdict_unadjusted"] == "equivalent" and d["noise"] == 0.5
    floored = family_verdicts([BASE, a], 0, floor=0.1)[1]
    assert floored["floor"] == 0.1 and floored["verdict_unadjusted"] == "no significant difference"
    plain = pair_verdicts([(BASE, a)])[0]
    assert pair_verdicts([(BASE, a)], floor=0.1)[0]["detectable"] > plain["detectable"]
    null = [_row(k, [0.0, 0.05, -0.05]) for k in "xy"]
    out = pair_verdicts([(BASE, r) for r in (a, *null)], method="fdr_bh")
    assert out[0]["verdict"] == "no significant difference"
    assert out[0]["notes"][-1] == "faster alone, not after Benjamini-Hochberg over 3 rows"
