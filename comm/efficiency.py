"""Comm efficiency: how fast the gradient sync moved its bytes against a microbenchmark of the same
calls.

One arithmetic for both references, so an on-rank probe and a pasted nccl-tests table give
comparable numbers:
    achievable_s = sum over the sync's calls of the reference's time for a call of that size
    efficiency   = achievable_s / sync time  (= sync busbw / reference busbw at the same sizes, same
    bytes)
The step loop (tasks/train/probes.py) and the diagnosis both call it.
"""

from __future__ import annotations

from collections import Counter

from base.record_types import CommStats, Comparison, Link
from comm import bandwidth


def call_sizes(sizes: list[int]) -> list[tuple[int, int]]:
    """[(bytes, calls per sync)] for the sizes a sync sends, in first-seen order (per-parameter
    syncs repeat sizes)."""
    return list(Counter(int(s) for s in sizes).items())


def bus_factor(world_size: int) -> float:
    """all_reduce's busbw factor 2(n-1)/n (comm/bandwidth.py); 0 for one rank, which sends
    nothing."""
    return bandwidth.bus_factor("all_reduce", world_size) if world_size > 1 else 0.0


def achievable(calls: list[dict]) -> dict:
    """calls: [{"bytes", "calls", "time_s", "ci_lo", "ci_hi"}] -> the sync's time at the reference's
    speed. The interval adds the per-size bounds (conservative: it assumes the sizes' errors all
    lean the same way)."""
    point = sum(c["calls"] * c["time_s"] for c in calls)
    have_ci = all(c.get("ci_lo") is not None and c.get("ci_hi") is not None for c in calls)
    return {
        "time_s": point,
        "ci_lo": sum(c["calls"] * c["ci_lo"] for c in calls) if have_ci else None,
        "ci_hi": sum(c["calls"] * c["ci_hi"] for c in calls) if have_ci else None,
        "bytes": sum(c["calls"] * c["bytes"] for c in calls),
    }


def versus_sync(
    reference: str,
    calls: list[dict],
    sync_time_s: float | None,
    sync_bytes: float | None,
    world_size: int,
    sync_how: str,
    overlap_s: float | None = None,
) -> dict | None:
    """The comparison the record keeps: the sync's time and busbw against the reference at the same
    calls. overlap_s: how much of the sync's time ran beside backward (DDP). Then the sync's time is
    a span that includes the waits for gradients, and the efficiency is a lower bound (the record
    says so: efficiency_is="lower bound")."""
    if not calls or not sync_time_s or sync_time_s <= 0:
        return None
    a = achievable(calls)
    factor = bus_factor(world_size)
    ref_busbw = a["bytes"] / a["time_s"] / 1e9 * factor if a["time_s"] > 0 else None
    sync_busbw = (sync_bytes or a["bytes"]) / sync_time_s / 1e9 * factor
    return {
        "reference": reference,
        "achievable_s": a["time_s"],
        "achievable_ci_lo": a["ci_lo"],
        "achievable_ci_hi": a["ci_hi"],
        "sync_s": sync_time_s,
        "efficiency": a["time_s"] / sync_time_s,
        "efficiency_ci_lo": a["ci_lo"] / sync_time_s if a["ci_lo"] is not None else None,
        "efficiency_ci_hi": a["ci_hi"] / sync_time_s if a["ci_hi"] is not None else None,
        "sync_busbw_GBps": sync_busbw,
        "reference_busbw_GBps": ref_busbw,
        "calls": sum(c["calls"] for c in calls),
        "bytes": a["bytes"],
        "overlap_s": overlap_s,
        "efficiency_is": "lower bound" if overlap_s else "estimate",
        "method": (
            f"efficiency = time the same calls take in the {reference} / the sync's time "
            f"({sync_how}); "
            "interval from the reference's per-size intervals only (the sync time is one figure)"
        ),
    }


def versus_link(
    link: Link | dict | None, comm: CommStats | dict | None, world_size: int
) -> dict | None:
    """The sync against the emulated link it ran on (record env.link, launchers/link.py), when the
    record has no measured reference: a bandwidth-optimal all-reduce puts 2(N-1)/N of each bucket's
    bytes through every node's NIC (N nodes), which moves at most the link's TCP payload rate. So
    achievable_s is the least time the link allows for the sync's bytes, and the efficiency says
    whether the link (near 100%) or the host (far below) is the limit."""
    link = Link.from_dict(link, "env.link") if isinstance(link, dict) else link
    comm = CommStats.from_dict(comm, "result.comm") if isinstance(comm, dict) else comm
    if (
        link is None
        or not link.emulated
        or not link.payload_rate_bit_s
        or comm is None
        or not comm.to_dict()
    ):
        return None
    nodes = int(link.nodes or world_size)
    sizes = (comm.buckets.sizes_bytes if comm.buckets is not None else None) or (
        [comm.bytes_per_step] if comm.bytes_per_step else []
    )
    if nodes < 2 or not sizes:
        return None
    wire = bandwidth.bus_factor("all_reduce", nodes) * 8 / link.payload_rate_bit_s
    calls = [{"bytes": b, "calls": n, "time_s": b * wire} for b, n in call_sizes(sizes)]
    vs = versus_sync(
        "emulated link",
        calls,
        comm.time_s,
        comm.bytes_per_step,
        world_size,
        comm.method if comm.has("method") else "",
        comm.overlap_s,
    )
    if vs is not None:
        vs["method"] = (
            "efficiency = the least time the emulated link allows the same bytes (2(N-1)/N of "
            "them "
            f"through each of N={nodes} nodes' NICs at {link.payload_rate_bit_s / 1e9:.4g} Gbit/s, "
            "the "
            "TCP payload rate of its shaped rate) / the sync's time; no interval: the rate is a "
            "setting"
        )
        vs["source"] = "result.env.link"
    return vs


def not_measurable(vs: Comparison | dict | None) -> str | None:
    """Why an efficiency cannot be read as one (None: it can). Above 100% the sync took less time
    than the same calls alone: with an interval that reaches 100% or below (e.g. 161% [68, 333]) the
    two timings are inside each other's noise; with one wholly above, the microbenchmark's own
    per-call cost (the barrier before each call, its start) exceeds the sync's. Either way there is
    no efficiency to report."""
    vs = Comparison.from_dict(vs, "comparison") if isinstance(vs, dict) else vs
    if vs is None or vs.efficiency is None or vs.efficiency <= 1:
        return None
    lo, hi = vs.efficiency_ci_lo, vs.efficiency_ci_hi
    interval = (
        f" [{100 * lo:.0f}, {100 * hi:.0f}]"
        if lo is not None and hi is not None
        else " (no interval)"
    )
    shown = f"{100 * vs.efficiency:.0f}%{interval}"
    if lo is not None and lo > 1:
        return (
            f"not measurable: {shown}, the sync took less time than the same calls alone; the "
            "microbenchmark's own "
            "per-call cost (a barrier before each call) is larger than the sync's"
        )
    return (
        f"not measurable: {shown}, the sync took less time than the same calls alone, and the two "
        "timings are "
        "inside each other's noise"
    )
