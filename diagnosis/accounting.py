"""Every millisecond of a step, counted once.

The time a step costs is what the throughput implies: the wall clock of the timed blocks (each
block's slowest rank) per step. On rank 0, whose phases the table shows, it splits with the
window's means into rank 0's timed phases, its time outside the phases, and its wait at the block
barrier for the slowest rank. Rank 0's wait for a late peer is the most work any rank did between
two collectives less its own; the part not spent at the barrier is inside the collective, and what
remains of the sync after it is the transfer ("transfer in the window"). DDP's reducer timers over
the probe steps measure the exposed communication a second way ("exposed", the figure the findings
use); both are printed, each named. Records made before the per-rank optimizer and outside-phase
times were recorded leave those parts out of their waits, and say so. The arithmetic, with an
example: docs/diagnosis.md "Every millisecond of the step, counted once".
"""

from __future__ import annotations

import statistics

from base.record_types import (
    Accounting,
    AccountingSync,
    AccountingWait,
    PhaseSeries,
    RankWork,
    TrainRank,
    TrainResult,
)
from stats.fmt import ms


def account(result: TrainResult) -> Accounting | None:
    """The step's accounting from a task=train result, or None when the record cannot give it (no
    throughput). Read through the record's type from the figures it has, so it writes back exactly
    those (result.diagnosis.accounting)."""
    out = _account(result)
    return Accounting.from_dict(out, "accounting") if out is not None else None


def _account(result: TrainResult) -> dict | None:
    steps = result.steps
    tp = result.throughput
    if not steps or tp is None or not tp.wall_s:
        return None
    T = tp.wall_s / steps
    rate, lo, hi = tp.steps_per_s, tp.ci_lo, tp.ci_hi
    out: dict = {
        "step_s": T,
        "step_lo_s": 1 / hi if hi else None,
        "step_hi_s": 1 / lo if lo else None,
        "steps_per_s": rate,
        "basis": "throughput: the timed blocks' wall clock (each block's slowest rank) per step",
        "timer_median_s": result.step_time_s.median if result.step_time_s is not None else None,
        "world_size": int(result.world_size or 1),
    }
    per = [p for p in result.per_rank or [] if p.rank is not None]
    series_phases = result.series.phases if result.series is not None else None
    series_steps = result.series.step_time_s if result.series is not None else None
    r0 = next((p for p in per if p.rank == 0), per[0] if per else TrainRank())
    w0 = _work(r0)
    phases = (w0.phases_mean_s.to_dict() if w0.phases_mean_s is not None else None) or {
        n: _mean(v) for n, v in (series_phases or PhaseSeries()).to_dict().items() if v
    }
    step_mean = w0.step_mean_s or _mean(series_steps)
    walls = r0.block_walls_s
    wall = w0.wall_per_step_s or (sum(walls) / steps if walls else None)
    out["rank0"] = {
        "phases_s": phases,
        "phases_total_s": sum(phases.values()) if phases else step_mean,
        "step_mean_s": step_mean,
        "wall_per_step_s": wall,
    }
    if (
        step_mean is None or wall is None
    ):  # every rank of this tool writes both; a record made otherwise (the tests'
        out["complete"] = (
            False  # hand-made ones) still gets the step from throughput, without the split
        )
        return out
    out["complete"] = True
    outside = max(0.0, wall - step_mean)
    barrier = max(0.0, T - wall)
    out["rank0"].update(
        outside_s=outside, barrier_s=barrier, residual_s=T - step_mean - outside - barrier
    )
    # ---- the ranks' own work, and who waits for whom
    ready = {p.rank: p.work.ready_s.median for p in per if _work(p).ready_s is not None}
    full = all(_work(p).has("optimizer_s") for p in per if p.work is not None and p.work.to_dict())
    out["work_s"] = ready
    out["work_is_complete"] = full
    ranks = []
    for p in per:
        pw = _work(p)
        pwall = pw.wall_per_step_s or (sum(p.block_walls_s) / steps if p.block_walls_s else None)
        ranks.append(
            {
                "rank": p.rank,
                "host": p.host,
                "step_mean_s": pw.step_mean_s,
                "wall_per_step_s": pwall,
                "barrier_s": max(0.0, T - pwall) if pwall is not None else None,
                "work_s": ready.get(p.rank),
            }
        )
    out["ranks"] = ranks
    wait, late = 0.0, None
    if len(ready) >= 2 and 0 in ready:
        late = max(ready, key=ready.get)
        wait = max(0.0, ready[late] - ready[0])
    out["late_rank"] = late if wait > 0 else None
    # ---- rank 0's sync time: the wait for the late rank, then the transfer
    sync = result.sync
    compute = w0.backward_compute_s if sync == "ddp" else None
    if sync == "ddp" and compute is not None and "backward" in phases:
        in_sync = max(0.0, phases["backward"] - compute)
        where = "backward (DDP's all-reduces)"
    elif "sync" in phases and sync in ("per_param", "flat"):
        in_sync = phases["sync"]
        where = "sync"
    else:
        in_sync, where = None, None
    wait_at_barrier = min(wait, barrier)
    wait_in_sync = min(max(0.0, wait - barrier), in_sync) if in_sync is not None else None
    out["wait"] = {
        "rank": out["late_rank"],
        "total_s": wait,
        "at_barrier_s": wait_at_barrier,
        "in_sync_s": wait_in_sync,
        "phase": where,
    }
    out["sync"] = {
        "phase": where,
        "exposed_s": in_sync,
        "transfer_s": in_sync - wait_in_sync if in_sync is not None else None,
        "compute_s": compute,
    }
    probe = result.comm.exposed_s if result.comm is not None else None
    if probe is not None:  # DDP's reducer timers over the probe steps: no barrier there
        out["probe"] = {
            "exposed_s": probe,
            "wait_s": min(wait, probe),
            "transfer_s": max(0.0, probe - wait),
        }
    return out


def _work(rank: TrainRank) -> RankWork:
    """A rank's own work per step (tasks/train/stragglers.py); an empty one where the record has
    none (a replayed CUDA graph times no phases of its own: rank 0's phases and step then come from
    the series)."""
    return rank.work if rank.work is not None else RankWork()


def _mean(xs) -> float | None:
    xs = [x for x in xs or [] if x is not None]
    return statistics.fmean(xs) if xs else None


def lines(acc: Accounting | None) -> list[str]:
    """The printed accounting: the step, and where each of its milliseconds went, once."""
    if (
        acc is None or not acc.complete
    ):  # none, or a rank 0 without step times or block wall clocks: no split
        return []
    T = acc.step_s
    r0 = acc.rank0
    head = (
        f"step accounting: {ms(T)} ms per step from throughput ({acc.steps_per_s:.4g} steps/s, "
        "each block's "
        "slowest rank)"
    )
    parts = []
    sync, wait = acc.sync or AccountingSync(), acc.wait or AccountingWait()
    for name, secs in phase_seconds(acc).items():
        text = f"{name} {ms(secs)}"
        if sync.phase and name == sync.phase.split()[0] and sync.exposed_s is not None:
            inner = []
            if sync.compute_s is not None and sync.compute_s > secs:
                parts.append(
                    f"{text} (DDP's backward compute timer over the probe steps says "
                    f"{ms(sync.compute_s)}:"
                    " no wait inside)"
                )
                continue
            if sync.compute_s is not None:
                inner.append(f"compute {ms(sync.compute_s)}")
            if wait.in_sync_s:
                inner.append(f"waiting for rank {wait.rank} {ms(wait.in_sync_s)}")
            inner.append(f"transfer in the window {ms(sync.transfer_s)}")
            text += f" ({' + '.join(inner)})"
        parts.append(text)
    out = [
        head,
        f"  = rank 0's timed phases {ms(r0.phases_total_s)} ({', '.join(parts)})",
        f"  + outside the phases {ms(r0.outside_s)} (between steps, inside the timed blocks)",
    ]
    barrier = r0.barrier_s
    who = (
        f" for rank {wait.rank}"
        if wait.rank is not None and (wait.at_barrier_s or 0) > 0.5 * barrier
        else " for the slowest rank of each block"
    )
    out.append(f"  + waiting at the block barrier{who}: {ms(barrier)}")
    probe = acc.probe
    if (
        sync.phase
        and sync.phase.startswith("backward")
        and sync.transfer_s is not None
        and probe is not None
        and probe.exposed_s is not None
    ):
        out.append(
            f"  exposed communication, two measurements: {ms(sync.transfer_s)} in the window "
            "(backward less "
            f"DDP's compute timer and the wait) and {ms(probe.exposed_s)} from DDP's reducer "
            "timers over the "
            "probe steps (the sync line's `exposed`, which the findings use)"
        )
    if abs(r0.residual_s or 0.0) > 0.01 * T:
        out.append(
            f"  + not accounted for: {ms(r0.residual_s)} (the device timeline and the host clock "
            "disagree)"
        )
    if (acc.world_size or 1) > 1 and acc.ranks:
        per = "  ".join(f"r{r.rank} {ms(r.work_s)}" for r in acc.ranks if r.work_s is not None)
        if per:
            out.append(
                f"  each rank's own work between collectives: {per}"
                + (
                    ""
                    if acc.work_is_complete
                    else " (data + H2D + forward + backward compute only: an older record)"
                )
                + (
                    f"; rank 0 waits {ms(wait.total_s)} per step for rank {wait.rank}"
                    if wait.rank is not None and (wait.total_s or 0) > 0.02 * T
                    else ""
                )
            )
    return out


def phase_seconds(acc: Accounting | None) -> dict[str, float]:
    """Rank 0's mean seconds per phase, by name, in the record's order (the phases it timed)."""
    phases = acc.rank0.phases_s if acc is not None and acc.rank0 is not None else None
    return (
        {k: v for k, v in phases.to_dict().items() if v is not None} if phases is not None else {}
    )
