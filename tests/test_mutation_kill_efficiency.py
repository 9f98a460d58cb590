"""comm/efficiency.py (issue 36: a module the mutation run covers), where the targeted tests leave a
change unseen: a malformed record block is refused with its place in the record named (what a
user reads to find the bad field)."""

from __future__ import annotations

import pytest

from base.typed import RecordError
from comm.efficiency import not_measurable, versus_link


def test_a_malformed_block_is_named_by_its_place_in_the_record():
    with pytest.raises(RecordError, match=r"^env\.link\.emulated: expected true or false"):
        versus_link({"emulated": "yes please"}, None, 2)
    with pytest.raises(RecordError, match=r"^result\.comm\.time_s: expected a number"):
        versus_link(None, {"time_s": "long"}, 2)
    with pytest.raises(RecordError, match=r"^comparison\.efficiency: expected a number"):
        not_measurable({"efficiency": "high"})


def test_versus_link_method_names_the_links_rate():
    """0.9e9 bit/s of TCP payload is 0.9 Gbit/s, as the method says; 2 nodes."""
    vs = versus_link(
        {"emulated": True, "payload_rate_bit_s": 0.9e9, "nodes": 2},
        {"time_s": 0.01, "bytes_per_step": 1_000_000},
        2,
    )
    assert vs["method"] == (
        "efficiency = the least time the emulated link allows the same bytes (2(N-1)/N of them "
        "through each of N=2 nodes' NICs at 0.9 Gbit/s, the TCP payload rate of its shaped rate) / "
        "the sync's time; no interval: the rate is a setting"
    )
    # 2(N-1)/N = 1 of 1e6 bytes, 8 bits each, at 0.9e9 bit/s
    assert vs["achievable_s"] == pytest.approx(8e6 / 0.9e9) and vs["source"] == "result.env.link"


def test_versus_link_method_rounds_the_rate_in_gbit_s():
    """1.2345000005e9 bit/s is 1.2345000005 Gbit/s: 1.235 at four significant digits."""
    vs = versus_link(
        {"emulated": True, "payload_rate_bit_s": 1.2345000005e9, "nodes": 2},
        {"time_s": 0.01, "bytes_per_step": 1_000_000},
        2,
    )
    assert "NICs at 1.235 Gbit/s," in vs["method"]
