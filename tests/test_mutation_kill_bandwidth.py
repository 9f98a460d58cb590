"""comm/bandwidth.py (issue 36: a module the mutation run covers), where the targeted tests leave a
change unseen: element counts of sizes that do not divide evenly (nccl-tests counts whole elements,
and a split collective whole elements per rank), and the messages of a wrong name."""

from __future__ import annotations

import re

import pytest

from comm import bandwidth
from comm.bandwidth import OPS, bus_factor, counts


def test_counts_are_whole_elements():
    # 10 bytes of 4-byte elements: 2 whole elements; 24 bytes: 6, split over 4 ranks: 1 each
    assert counts("all_reduce", 10, 4, 2) == {"send": 2, "recv": 2, "count": 2}
    assert counts("all_gather", 24, 4, 4) == {"send": 1, "recv": 4, "count": 1}
    assert counts("reduce_scatter", 24, 4, 4) == {"send": 4, "recv": 1, "count": 1}


def test_wrong_names_are_named_with_the_right_ones():
    with pytest.raises(ValueError, match=re.escape(f"one of {', '.join(OPS)}")):
        bus_factor("all_to_everyone", 2)
    with pytest.raises(AttributeError, match="^module 'comm.bandwidth' has no attribute 'nope'$"):
        bandwidth.nope  # noqa: B018 - the module's __getattr__ is what is tested
