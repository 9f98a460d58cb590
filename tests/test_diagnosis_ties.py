"""A near-tie between a rule's bound (its saving printed "at most", fraction None, issue 38) and a
measured saving: the default VGG11 run behind link=1gbe on a busy host printed its diagnosis
through a TypeError (the tie line multiplied the bound's None). The tie says what ranked them."""

from __future__ import annotations

from base.record_types import Finding, Saving
from diagnosis.run import ties


def _finding(rule: str, saving: Saving) -> Finding:
    return Finding(rule, "t", "d", [], "", saving, "cmd")


def test_a_tie_with_a_bound_gives_the_figures_that_ranked_them():
    bound = Saving(None, lo=0.0, hi=0.58, source="rule", rule={"fraction": 0.29})
    measured = Saving(0.226, lo=0.226, hi=0.278, source="measured")
    got = ties([_finding("exposed_comm.slow_link", bound), _finding("busy_host", measured)], 0.13)
    assert got == [{"findings": [1, 2], "savings": [0.29, 0.226], "floor": 0.13}]
