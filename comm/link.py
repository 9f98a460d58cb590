"""A network link's arithmetic and its one-line description: what readers (the summary, the sweep
table, W&B, the what-if model) need to know about the link a run's ranks talked over, read from the
record's `env.link`.

The link itself is built by launchers/link.py (network namespaces, veth pairs, a bridge, tc); this
module only does the arithmetic, so that every layer can read a record's link without importing the
launcher.

Units: rates in bit/s (SI: 1 Gbit/s = 1e9 bit/s, as tc and Ethernet count them), sizes in bytes.

What a shaped rate allows a TCP stream to carry: `tc` counts every byte of the Ethernet frame it
sends (14 bytes of Ethernet header + the IP packet; not the preamble or the inter-frame gap), so at
MTU 1500 a full frame of 1514 bytes carries 1448 bytes of payload (1500 - 20 IPv4 - 20 TCP - 12 TCP
timestamp option): 95.6% of the shaped rate. That is the most any gloo transfer can reach on the
link (`payload_rate`), and what busbw is compared with."""

from __future__ import annotations

import math
import re

from base.record_types import Link

ETHERNET_HEADER = 14  # bytes tc counts per frame besides the IP packet
TCP_IP_OVERHEAD = (
    20 + 20 + 12
)  # IPv4, TCP, TCP timestamps (Linux default): per segment, inside the MTU
DEFAULT_MTU = 1500
GSO_MAX_SIZE, GSO_MAX_SEGS = 65536, 65535  # a veth's defaults (ip -d link show)

_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]?)(bit|bits)?(?:/s)?\s*$", re.IGNORECASE
)


class RateError(ValueError):
    """A rate that cannot be read; the message says how to write one."""


def parse_rate(value) -> float:
    """bit/s from what a user types: 1000000000, 1e9, "1gbit", "2.5gbit", "100mbit", "1Gbit/s" (tc's
    own printing). "bps"/"gbps" are refused: tc reads "bps" as *bytes* per second, a factor of 8
    that must not be guessed."""
    if isinstance(value, bool):
        raise RateError(f"link.rate={value!r}: not a rate")
    if isinstance(value, (int, float)):
        rate = float(value)
    else:
        text = str(value).strip()
        if re.search(r"[kmgt]?bps$|[kmgt]?byte", text, re.IGNORECASE) and not re.search(
            r"bit", text, re.IGNORECASE
        ):
            raise RateError(
                f"link.rate={text!r}: write the rate in bits, e.g. link.rate=1gbit (tc reads 'bps' "
                "as "
                "bytes per second, 8 times more)"
            )
        m = _RATE.match(text)
        if not m or (m.group(2) and not m.group(3) and not text.lower().endswith("/s")):
            raise RateError(
                f"link.rate={text!r}: not a rate; write it as tc does, e.g. link.rate=2.5gbit, "
                "100mbit, "
                "or in bit/s (link.rate=1e9)"
            )
        rate = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(rate) or rate <= 0:
        raise RateError(f"link.rate={value!r}: must be a positive rate, e.g. link.rate=1gbit")
    return rate


def human(bit_s: float | None) -> str:
    """1e9 -> '1 Gbit/s', 2.5e9 -> '2.5 Gbit/s', 1e8 -> '100 Mbit/s'."""
    if bit_s is None:
        return "-"
    for unit, factor in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bit_s >= factor:
            return f"{bit_s / factor:.4g} {unit}"
    return f"{bit_s:.4g} bit/s"


def tc_rate(bit_s: float) -> str:
    """The rate as tc reads it, exactly: '1000000000bit'."""
    return f"{int(round(bit_s))}bit"


def payload_fraction(mtu: int = DEFAULT_MTU) -> float:
    """Share of a shaped rate a bulk TCP stream can carry as payload: full segments of MTU - 52
    bytes in frames of MTU + 14 bytes (IPv4, TCP with timestamps, Ethernet header). ACKs travel the
    other way."""
    return (mtu - TCP_IP_OVERHEAD) / (mtu + ETHERNET_HEADER)


def payload_rate(bit_s: float, mtu: int = DEFAULT_MTU) -> float:
    return bit_s * payload_fraction(mtu)


def default_burst(bit_s: float, mtu: int = DEFAULT_MTU) -> int:
    """Token-bucket depth in bytes: 1 ms at the rate, at least 3 frames. Not a 64 KiB GSO packet:
    a real link has no bucket, and behind 20 Mbit/s a 67 KB one refilled while the ranks computed
    and waited at the window's barriers, so VGG11-tiny's 71.5 KB all-reduce rode it at the line's
    speed (comm 22.6-24.6 ms a step where the payload rate needs 29.9; with 3 frames, 28.8-31.8).
    The veths' segments are capped to fit (gso_cap), so a smaller bucket starves nothing."""
    return int(max(math.ceil(bit_s / 8 * 1e-3), 3 * (mtu + ETHERNET_HEADER)))


def gso_cap(burst: int, mtu: int = DEFAULT_MTU) -> tuple[int, int]:
    """(gso_max_size, gso_max_segs) for the emulated veths: the largest packet the stack may hand
    the qdisc, one frame below the bucket's depth (at least one frame; the kernel's 64 KiB default
    where the bucket holds more). htb sends a packet bigger than its bucket on credit, so without
    the cap a small bucket still let 64 KiB segments through at the line's speed (a 4.5 KB bucket
    behind 20 Mbit/s: the window's one-step blocks timed 86% of the elapsed step, 94-95% with
    one-frame segments, 97-98% with this cap's two; docs/links.md). Above ~530 Mbit/s (1 ms at the
    rate > 64 KiB) nothing changes; below it a segment carries at most 1 ms of the rate, so the host
    handles about 1000 packets a second whatever the rate (frame-sized segments at 500 Mbit/s
    reached only 71% of the rate on a busy 2-core host)."""
    frame = mtu + ETHERNET_HEADER
    if burst - frame >= GSO_MAX_SIZE:
        return GSO_MAX_SIZE, GSO_MAX_SEGS  # the kernel's own defaults: no cap
    size = max(frame, burst - frame)
    return size, size // frame


def htb_quantum(bit_s: float, mtu: int = DEFAULT_MTU) -> int:
    """htb's quantum (bytes a class may send per round): rate/1000 bytes, kept inside the range htb
    accepts without a warning (>= one frame, <= 200000 bytes; the default rate/r2q with r2q=10 is
    far too big at 1 Gbit/s and up)."""
    return int(min(200_000, max(mtu + ETHERNET_HEADER, bit_s / 8 / 1000)))


def as_link(link: Link | dict | None) -> Link | None:
    """The record's env.link as its type (a reader still on dicts may pass the JSON object)."""
    return Link.from_dict(link, "env.link") if isinstance(link, dict) else link


def is_emulated(link: Link | dict | None) -> bool:
    link = as_link(link)
    return link is not None and bool(link.emulated)


def short_label(link: Link | dict | None) -> str | None:
    """'emulated link 1 Gbit/s' for a run behind an emulated link, else None: the label tables and
    W&B use."""
    link = as_link(link)
    if not is_emulated(link):
        return None
    return f"emulated link {human(link.rate_bit_s)}"


def describe(link: Link | dict | None) -> str | None:
    """One line about the link a run used, for the summary and the sweep table; None when the record
    has no link (a run that failed before its ranks started; the committed records made before
    env.link was written, whose loopback interface was never observed)."""
    link = as_link(link)
    if link is None or not link.to_dict():
        return None
    if not link.emulated:
        if link.source == "loopback":
            return "link: none emulated (ranks on one host talk over loopback)"
        where = f" on {link.interface}" if link.interface else ""
        speed = f", interface speed {human(link.speed_bit_s)}" if link.speed_bit_s else ""
        return f"link: none emulated{where}{speed}" + (f" ({link.note})" if link.note else "")
    parts = [
        f"link: EMULATED {human(link.rate_bit_s)} ({link.qdisc}"
        + (f", burst {link.burst_bytes} B" if link.burst_bytes else "")
        + ")"
    ]
    if link.source == "link=":
        parts.append(
            f"{link.nodes} node(s) x {link.ranks_per_node} rank(s), each node's NIC and its "
            "switch port shaped"
        )
    else:
        parts.append(f"shaped outside this run on {link.interface}")
    if link.latency_us is not None:
        parts.append(f"added latency {link.latency_us:g} us one way")
    else:
        parts.append("rate only, no added latency")
    check = link.check
    if check is not None and check.rate_bit_s:
        of = check.of_payload_rate
        parts.append(
            f"check transfer {human(check.rate_bit_s)}"
            + (
                f" ({of:.0%} of the {human(link.payload_rate_bit_s)} TCP payload rate)"
                if of
                else ""
            )
        )
    if check is not None and check.rtt_us:
        parts.append(f"RTT {check.rtt_us:.0f} us")
    line = "; ".join(parts)
    return line + (f". WARNING: {link.warning}" if link.warning else "")


def tags(link: Link | dict | None) -> list[str]:
    """W&B tags of a run behind an emulated link: 'emulated-link' and 'link:1 Gbit/s'."""
    link = as_link(link)
    return ["emulated-link", f"link:{human(link.rate_bit_s)}"] if is_emulated(link) else []


def table_note(links: list[Link | dict | None]) -> str | None:
    """The sweep table's line about the network its rows ran on, when any ran behind an emulated
    link."""
    links = [as_link(link) for link in links]
    emulated = [link for link in links if is_emulated(link)]
    if not emulated:
        return None
    kinds: dict[str, list[float]] = {}
    for link in emulated:
        kind = f"{human(link.rate_bit_s)} ({link.qdisc})"
        check = link.check.rate_bit_s if link.check is not None else None
        kinds.setdefault(kind, []).extend([check] if check else [])
    parts = [
        kind + (f", check transfers {human(min(c))}..{human(max(c))}" if c else "")
        for kind, c in kinds.items()
    ]
    rest = len(links) - len(emulated)
    return (
        "EMULATED LINK: rows ran behind "
        + "; ".join(parts)
        + " (rate only"
        + ("" if any(link.latency_us is not None for link in emulated) else ", no added latency")
        + "; the compute is this machine's CPU; see each record's env.link)"
        + (f"; {rest} run(s) without one (loopback)" if rest else "")
        + "."
    )
