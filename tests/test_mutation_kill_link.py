"""comm/link.py (issue 36: a module the mutation run covers): the emulated link's numbers a run
prints and shapes with, checked against figures worked out by hand: rates read from tc's words,
the rate in words, the TCP payload share of a frame (1448 of 1514 bytes at MTU 1500), the token
bucket's depth (1 ms at the rate, at least 3 frames), the segment cap one frame under it, htb's
quantum."""

from __future__ import annotations

import pytest

from comm import link as lk


@pytest.mark.parametrize(
    "text, rate",
    [
        (1_000_000_000, 1e9),
        (2.5e9, 2.5e9),
        ("1e9", 1e9),
        ("1gbit", 1e9),
        ("2.5Gbit", 2.5e9),
        ("100mbit", 1e8),
        ("1Gbit/s", 1e9),
        ("20kbit", 2e4),
        ("1tbit", 1e12),
        ("5bit", 5.0),
        (" 3m/s ", 3e6),
        ("1.5e3kbit", 1.5e6),
    ],
)
def test_rates_in_tcs_words(text, rate):
    assert lk.parse_rate(text) == pytest.approx(rate)


@pytest.mark.parametrize(
    "text, says",
    [
        ("1gbps", "write the rate in bits"),
        ("100Mbps", "write the rate in bits"),
        ("1gbyte", "write the rate in bits"),
        ("1g", "not a rate"),
        ("fast", "not a rate"),
        (True, "not a rate"),
        (0, "must be a positive rate"),
        (-1e9, "must be a positive rate"),
        (float("inf"), "must be a positive rate"),
        ("0bit", "must be a positive rate"),
    ],
)
def test_a_rate_that_cannot_be_read_says_how_to_write_one(text, says):
    with pytest.raises(lk.RateError, match=says):
        lk.parse_rate(text)


def test_a_rate_in_words():
    assert lk.human(None) == "-"
    assert lk.human(1e9) == "1 Gbit/s"
    assert lk.human(2.5e9) == "2.5 Gbit/s"
    assert lk.human(1e8) == "100 Mbit/s"
    assert lk.human(2e12) == "2 Tbit/s"
    assert lk.human(999_999) == "1000 kbit/s"
    assert lk.human(1e3) == "1 kbit/s"
    assert lk.human(999) == "999 bit/s"
    assert lk.tc_rate(1e9) == "1000000000bit"
    assert lk.tc_rate(2.6) == "3bit"


def test_the_payload_share_of_a_frame():
    # 1500 - 20 (IPv4) - 20 (TCP) - 12 (timestamps) = 1448 payload bytes per 1514-byte frame
    assert lk.payload_fraction() == pytest.approx(1448 / 1514)
    assert lk.payload_fraction(9000) == pytest.approx(8948 / 9014)
    assert lk.payload_rate(1e9) == pytest.approx(1e9 * 1448 / 1514)


def test_the_token_buckets_depth():
    assert lk.default_burst(1e9) == 125_000  # 1 ms at 1 Gbit/s = 125 kB
    assert lk.default_burst(2e7) == 3 * 1514  # 2.5 kB < 3 frames
    assert lk.default_burst(1e8 + 8) == 12_501  # rounded up
    assert lk.default_burst(1e7, mtu=9000) == 3 * 9014


def test_the_segment_cap_one_frame_under_the_bucket():
    assert lk.gso_cap(125_000) == (65536, 65535)  # 123486 >= 64 KiB: the kernel's own
    assert lk.gso_cap(65536 + 1514) == (65536, 65535)
    assert lk.gso_cap(65535 + 1514) == (65535, 65535 // 1514)
    assert lk.gso_cap(3 * 1514) == (2 * 1514, 2)
    assert lk.gso_cap(2000) == (1514, 1)  # at least one frame
    assert lk.gso_cap(10_000) == (8486, 5)


def test_htbs_quantum():
    assert lk.htb_quantum(1e9) == 125_000
    assert lk.htb_quantum(1e7) == 1514  # 1250 < one frame
    assert lk.htb_quantum(1e10) == 200_000  # capped
    assert lk.htb_quantum(1.6e9) == 200_000
    assert lk.htb_quantum(1.6e9 - 8000) == 199_999


EMULATED = {
    "emulated": True,
    "source": "link=",
    "rate_bit_s": 1e9,
    "payload_rate_bit_s": 1e9 * 1448 / 1514,
    "qdisc": "htb",
    "burst_bytes": 125000,
    "nodes": 2,
    "ranks_per_node": 1,
    "latency_us": 50.0,
    "check": {"rate_bit_s": 9.2e8, "of_payload_rate": 0.962, "rtt_us": 112.4},
}


def test_a_links_line_in_the_summary():
    assert lk.describe(None) is None and lk.describe({}) is None
    assert lk.describe({"emulated": False, "source": "loopback"}) == (
        "link: none emulated (ranks on one host talk over loopback)"
    )
    real = {"emulated": False, "source": "nic", "interface": "eth0", "speed_bit_s": 2.5e10}
    assert lk.describe(real) == "link: none emulated on eth0, interface speed 25 Gbit/s"
    assert (
        lk.describe({"emulated": False, "source": "nic", "note": "n"}) == "link: none emulated (n)"
    )
    assert lk.describe(EMULATED) == (
        "link: EMULATED 1 Gbit/s (htb, burst 125000 B); 2 node(s) x 1 rank(s), each node's NIC and "
        "its switch port shaped; added latency 50 us one way; check transfer 920 Mbit/s (96% of "
        "the 956.4 Mbit/s TCP payload rate); RTT 112 us"
    )
    outside = {
        **EMULATED,
        "source": "outside",
        "interface": "veth0",
        "burst_bytes": None,
        "latency_us": None,
        "check": {"rate_bit_s": 5e8},
        "warning": "slow",
    }
    assert lk.describe(outside) == (
        "link: EMULATED 1 Gbit/s (htb); shaped outside this run on veth0; rate only, no added "
        "latency; check transfer 500 Mbit/s. WARNING: slow"
    )


def test_a_links_label_tags_and_table_note():
    assert lk.short_label(EMULATED) == "emulated link 1 Gbit/s"
    assert lk.short_label({"emulated": False}) is None and lk.short_label(None) is None
    assert lk.tags(EMULATED) == ["emulated-link", "link:1 Gbit/s"]
    assert lk.tags(None) == [] and not lk.is_emulated({"emulated": None})
    slower = {**EMULATED, "check": {"rate_bit_s": 8e8}}
    none = {**EMULATED, "latency_us": None, "check": None}
    assert lk.table_note([None, {"emulated": False}]) is None
    assert lk.table_note([EMULATED, slower, None]) == (
        "EMULATED LINK: rows ran behind 1 Gbit/s (htb), check transfers 800 Mbit/s..920 Mbit/s "
        "(rate only; the compute is this machine's CPU; see each record's env.link); 1 run(s) "
        "without one (loopback)."
    )
    assert lk.table_note([none]) == (
        "EMULATED LINK: rows ran behind 1 Gbit/s (htb) (rate only, no added latency; the compute "
        "is this machine's CPU; see each record's env.link)."
    )


def test_the_rates_edges():
    assert lk.parse_rate(0.5) == 0.5 and lk.parse_rate(1) == 1.0  # tiny, but positive
    with pytest.raises(lk.RateError, match="write the rate in bits"):
        lk.parse_rate("1GBPS")  # any case
    assert lk.human(1e12) == "1 Tbit/s" and lk.human(1e6) == "1 Mbit/s"
    assert lk.human(999_999_999_999) == "1000 Gbit/s"


def test_a_round_trip_without_a_check_rate_and_two_kinds_of_link():
    rtt_only = {**EMULATED, "check": {"rtt_us": 100.0}}
    assert lk.describe(rtt_only).endswith("added latency 50 us one way; RTT 100 us")
    slow = {**EMULATED, "rate_bit_s": 1e8, "check": None}
    assert lk.table_note([EMULATED, slow]).startswith(
        "EMULATED LINK: rows ran behind 1 Gbit/s (htb), check transfers 920 Mbit/s..920 Mbit/s; "
        "100 Mbit/s (htb) (rate only;"
    )
