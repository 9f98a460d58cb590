"""Which rank the others wait for, and each rank's work between two collectives.

Under DDP every rank's step ends at the same all-reduce, so the ranks' step times come out alike and
the slowest wall clock names nobody. What differs is the work a rank does between two collectives:
everything the loop runs (its data wait, its host-to-device copy, forward, backward compute, the
optimizer step and whatever runs outside the timed phases: hooks, logging), none of its waiting for
the others. Each rank measures that, and its CPU use and run-queue wait over the window; rank 0
names the rank whose work takes longest, and by how much: that is what the others wait."""

from __future__ import annotations

import glob
import resource
import statistics
import time

import torch

from base.record_types import Straggler, StragglerRank
from stats import describe

PARTS = (
    "data",
    "h2d",
    "compute",
    "optimizer",
    "outside",
)  # a rank's work between collectives, in the loop's order


def cpu_usage(since: dict | None = None) -> dict:
    """This process's CPU seconds, context switches and run-queue wait (all its threads), and the
    whole host's CPU counters, now; or the change since an earlier reading, with host_busy = the
    host's busy share over that time (every process). runqueue_s: time this process's threads were
    ready to run but waited for a core (Linux's /proc/<pid>/task/*/schedstat; None where the kernel
    does not keep it); main_runqueue_s: the same for the thread that runs the loop."""
    from device.host import host_cpu_jiffies as _host_cpu_jiffies

    ru = resource.getrusage(resource.RUSAGE_SELF)
    now = {
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "voluntary_switches": ru.ru_nvcsw,
        "involuntary_switches": ru.ru_nivcsw,
        "wall_s": time.perf_counter(),
        "runqueue_s": _runqueue_s(),
        "main_runqueue_s": _runqueue_s("/proc/self/schedstat"),
        "host": _host_cpu_jiffies(),
    }
    if since is None:
        return now
    queues = ("runqueue_s", "main_runqueue_s")
    out = {k: now[k] - since[k] for k in now if k not in ("host", *queues)}
    for k in queues:
        out[k] = now[k] - since[k] if now[k] is not None and since[k] is not None else None
    a, b = since["host"], now["host"]
    out["host_busy"] = (b[0] - a[0]) / (b[1] - a[1]) if a and b and b[1] > a[1] else None
    return out


def _runqueue_s(pattern: str = "/proc/self/task/*/schedstat") -> float | None:
    """Seconds the threads matching `pattern` (this process's live threads; /proc/self/schedstat:
    the main thread) have waited on a run queue (schedstat's second field, nanoseconds)."""
    total, seen = 0, False
    for path in glob.glob(pattern):
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9 if seen else None


def rank_work(
    steps: list[dict], comm_stats: dict | None, window_usage: dict, walls: list[float] | None = None
) -> dict | None:
    """This rank's work per step between two collectives, and where its window's time went.

    With DDP the backward phase also holds the wait for the all-reduce (and so for the other ranks),
    so backward compute comes from DDP's own timer (the probe steps); explicit strategies
    communicate in their sync phase (left out: it is the collective), so their backward phase is
    compute only. `outside`: the time inside the timed blocks that no phase holds (walls: this
    rank's block wall clocks), per step: whatever the loop runs between steps. A replayed CUDA graph
    has no forward or backward phase of its own (one graph_replay): None, as without steps."""
    if not steps or "forward" not in steps[0]:
        return None
    ddp_backward = comm_stats.get("backward_compute_s") if comm_stats else None
    n = len(steps)
    names = [p for p in steps[0] if p != "step"]
    mean = {p: sum(s[p] for s in steps) / n for p in names}
    step_mean = sum(s["step"] for s in steps) / n
    wall_per_step = sum(walls) / n if walls else None
    outside = max(0.0, wall_per_step - step_mean) if wall_per_step is not None else 0.0
    local = [
        s["data"]
        + s["h2d"]
        + s["forward"]
        + (0.0 if comm_stats else s["backward"])
        + s.get("optimizer", 0.0)
        for s in steps
    ]
    backward = ddp_backward if comm_stats else statistics.median(s["backward"] for s in steps)
    ready = describe([x + (ddp_backward or 0.0) + outside for x in local])
    forward = statistics.median(s["forward"] for s in steps)
    return {
        "ready_s": ready,
        "data_s": statistics.median(s["data"] for s in steps),
        "h2d_s": statistics.median(s["h2d"] for s in steps),
        "forward_s": forward,
        "backward_compute_s": backward,
        "compute_s": forward + (backward or 0.0),
        "optimizer_s": statistics.median(s.get("optimizer", 0.0) for s in steps),
        "outside_s": outside,
        "backward_from": "DDP's reducer timer (median of the probe steps)"
        if comm_stats
        else "backward phase",
        "what": "work between two collectives per step: data + H2D + forward + backward compute + "
        "optimizer + the "
        "time outside the timed phases (hooks, logging); no waiting for other ranks",
        # the window's means, which add up (the accounting of a step: diagnosis)
        "phases_mean_s": mean,
        "step_mean_s": step_mean,
        "wall_per_step_s": wall_per_step,
        "torch_threads": torch.get_num_threads(),
        # over the window: cpu_s, wall_s, voluntary/involuntary_switches, runqueue_s, host_busy
        **window_usage,
        "steps": n,
    }


def find_straggler(everyone: list[dict], step_s: float | None) -> Straggler | None:
    """The rank the others wait for: the longest work between collectives, against the other ranks'
    median. step_s: the time per step the run's throughput implies (the share's denominator)."""
    ranks = [r for r in everyone if r.get("work")]
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r["work"]["ready_s"]["median"])
    others = [r for r in ranks if r is not slow]
    median_of = lambda key: statistics.median(_part(r, key) for r in others)  # noqa: E731 - one use, below
    gap = slow["work"]["ready_s"]["median"] - median_of("ready")
    parts = {
        key: _part(slow, key) - median_of(key) for key in PARTS if _part(slow, key) is not None
    }
    s = slow["work"]["ready_s"]
    significant = (
        s["ci_lo"] > max(r["work"]["ready_s"]["ci_hi"] for r in others)
        if s.get("ci_level", 0) >= 0.75
        else None
    )
    return Straggler(
        rank=slow["rank"],
        host=slow.get("host"),
        by_s=gap,
        share_of_step=gap / step_s if step_s else None,
        significant=significant,
        mostly=max(parts, key=parts.get),
        parts_s=parts,
        per_rank=[
            StragglerRank(
                rank=r["rank"],
                host=r.get("host"),
                ready_s=r["work"]["ready_s"]["median"],
                ready_ci=[r["work"]["ready_s"]["ci_lo"], r["work"]["ready_s"]["ci_hi"]],
                data_s=r["work"]["data_s"],
                h2d_s=r["work"]["h2d_s"],
                compute_s=r["work"]["compute_s"],
                optimizer_s=r["work"].get("optimizer_s"),
                outside_s=r["work"].get("outside_s"),
                torch_threads=r["work"]["torch_threads"],
                cpu_s=r["work"]["cpu_s"],
                runqueue_s=r["work"].get("runqueue_s"),
                involuntary_switches=r["work"]["involuntary_switches"],
            )
            for r in ranks
        ],
        method=(
            "work between collectives per step = data wait + H2D + forward + backward compute + "
            "optimizer + "
            "time outside the timed phases; the rank with the largest median against the other "
            "ranks' median; "
            "significant when its interval clears every other rank's"
        ),
    )


def _part(r: dict, key: str) -> float | None:
    w = r["work"]
    return w["ready_s"]["median"] if key == "ready" else w.get(f"{key}_s")
