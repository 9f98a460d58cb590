"""Which rank the others wait for.

Under DDP every rank's step ends at the same all-reduce, so the ranks' step times come out alike and the slowest wall
clock names nobody. What differs is the work a rank does before it can join the collective: its data wait, its
host-to-device copy and its compute (forward + backward compute). Each rank measures those, and its CPU use over the
window; rank 0 names the rank whose work takes longest, and by how much.
"""
from __future__ import annotations

import resource
import statistics
import time

import torch

from stats import describe


def cpu_usage(since: dict | None = None) -> dict:
    """This process's CPU seconds and context switches (all its threads), and the whole host's CPU counters, now; or
    the change since an earlier reading, with host_busy = the host's busy share over that time (every process)."""
    from device.host import host_cpu_jiffies as _host_cpu_jiffies

    ru = resource.getrusage(resource.RUSAGE_SELF)
    now = {"cpu_s": ru.ru_utime + ru.ru_stime, "voluntary_switches": ru.ru_nvcsw,
           "involuntary_switches": ru.ru_nivcsw, "wall_s": time.perf_counter(), "host": _host_cpu_jiffies()}
    if since is None:
        return now
    out = {k: now[k] - since[k] for k in now if k != "host"}
    a, b = since["host"], now["host"]
    out["host_busy"] = (b[0] - a[0]) / (b[1] - a[1]) if a and b and b[1] > a[1] else None
    return out


def rank_work(steps: list[dict], comm_stats: dict | None, window_usage: dict) -> dict | None:
    """This rank's work per step. With DDP the backward phase also holds the wait for the all-reduce (and so for the
    other ranks), so backward compute comes from DDP's own timer (the probe steps); explicit strategies communicate
    in their sync phase, so their backward phase is compute only. A replayed CUDA graph has no forward or backward
    phase of its own (one graph_replay): None, as without steps."""
    if not steps or "forward" not in steps[0]:
        return None
    ddp_backward = comm_stats.get("backward_compute_s") if comm_stats else None
    local = [s["data"] + s["h2d"] + s["forward"] + (0.0 if comm_stats else s["backward"]) for s in steps]
    backward = ddp_backward if comm_stats else statistics.median(s["backward"] for s in steps)
    ready = describe([x + (ddp_backward or 0.0) for x in local])
    forward = statistics.median(s["forward"] for s in steps)
    return {
        "ready_s": ready,
        "data_s": statistics.median(s["data"] for s in steps),
        "h2d_s": statistics.median(s["h2d"] for s in steps),
        "forward_s": forward,
        "backward_compute_s": backward,
        "compute_s": forward + (backward or 0.0),
        "backward_from": "DDP's reducer timer (median of the probe steps)" if comm_stats else "backward phase",
        "torch_threads": torch.get_num_threads(),
        **window_usage,          # over the window: cpu_s, wall_s, voluntary/involuntary_switches, host_busy
        "steps": len(steps),
    }


def find_straggler(everyone: list[dict], step_median_s: float | None) -> dict | None:
    """The rank the others wait for: the longest work before the collective, against the other ranks' median."""
    ranks = [r for r in everyone if r.get("work")]
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r["work"]["ready_s"]["median"])
    others = [r for r in ranks if r is not slow]
    median_of = lambda key: statistics.median(_part(r, key) for r in others)  # noqa: E731 - one use, below
    gap = slow["work"]["ready_s"]["median"] - median_of("ready")
    parts = {key: _part(slow, key) - median_of(key) for key in ("data", "h2d", "compute")}
    s = slow["work"]["ready_s"]
    significant = s["ci_lo"] > max(r["work"]["ready_s"]["ci_hi"] for r in others) if s.get("ci_level", 0) >= 0.75 \
        else None
    return {
        "rank": slow["rank"], "host": slow.get("host"), "by_s": gap,
        "share_of_step": gap / step_median_s if step_median_s else None,
        "significant": significant, "mostly": max(parts, key=parts.get), "parts_s": parts,
        "per_rank": [{"rank": r["rank"], "host": r.get("host"), "ready_s": r["work"]["ready_s"]["median"],
                      "ready_ci": [r["work"]["ready_s"]["ci_lo"], r["work"]["ready_s"]["ci_hi"]],
                      "data_s": r["work"]["data_s"], "h2d_s": r["work"]["h2d_s"], "compute_s": r["work"]["compute_s"],
                      "torch_threads": r["work"]["torch_threads"], "cpu_s": r["work"]["cpu_s"],
                      "involuntary_switches": r["work"]["involuntary_switches"]} for r in ranks],
        "method": ("work before the collective per step = data wait + H2D + forward + backward compute; the rank with "
                   "the largest median against the other ranks' median; significant when its interval clears every "
                   "other rank's"),
    }


def _part(r: dict, key: str) -> float:
    w = r["work"]
    return w["ready_s"]["median"] if key == "ready" else w[f"{key}_s"]
