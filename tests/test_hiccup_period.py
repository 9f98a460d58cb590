"""The hiccup rule's period (diagnosis.rules._period): a rank-0 stall every N steps is named with N
even when one spike is added or missed, which named it "on 4 of 10 steps" in a full-suite run."""

from __future__ import annotations

from diagnosis.rules import _period


def test_evenly_spaced_spikes_give_their_gap():
    assert _period([2, 5, 8], 10) == (3, [], [])
    assert _period([4, 9], 10) == (5, [], [])


def test_one_extra_spike_off_the_lattice_keeps_the_period_and_is_named():
    # evaluation every 3 steps (steps 0, 3, 6, 9 of the window) and one more stall at 4
    assert _period([0, 3, 4, 6, 9], 10) == (3, [4], [])


def test_one_missing_lattice_step_keeps_the_period_and_is_named():
    assert _period([1, 4, 10, 13], 14) == (3, [], [7])


def test_no_period_where_the_lattice_holds_too_few_or_too_many_exceptions():
    assert _period([0, 3, 5], 10) is None  # two on a lattice: too few to forgive the third
    assert _period([0, 3, 4, 5, 6, 9], 10) is None  # two spikes off the lattice
    assert _period([0, 1, 3, 7], 10) is None
