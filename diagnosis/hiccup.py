"""A rank that stalls now and then: rank 0 evaluating or writing a checkpoint every N steps, a logger flushing, a slow
disk. Its median step is the others', so the straggler rule (medians of the work between collectives) does not see
it, and the noise floor it inflates hides every finding behind it. This rule reads each rank's per-step series (the
record's per_rank[].series, where the run kept one) and names the rank whose own work, the step less its wait for the
all-reduces, jumps on some steps while the other ranks' does not: its rank, how often (the period when the steps are
evenly spaced), how long, and which part of the step grew. Its evidence is the spikes against the rank's own median
and spread (a spike is past median + max(5 MAD, 25% of it)), not the step's interval: so the noise the spikes make
does not hide the finding (qualitative)."""
from __future__ import annotations

import statistics

from base.record_types import Evidence, Finding, Saving
from diagnosis.sources import cite
from diagnosis.view import RunView

SPIKE_MADS = 5.0          # a step is a spike past the rank's median by this many median absolute deviations ...
SPIKE_SHARE = 0.25        # ... and by this share of the median at least
MIN_SPIKES = 2            # a single slow step is not a pattern
MIN_STEPS = 10
PARTS = ("data", "forward", "backward", "optimizer", "outside")
WHERE = {"outside": "its own code outside the timed phases (evaluation, checkpointing, logging)",
         "data": "its data wait", "forward": "forward", "backward": "backward compute", "optimizer": "the optimizer"}


def _work(series) -> dict[str, list[float]] | None:
    steps = series.step_time_s or []
    ph = series.phases.to_dict() if series.phases is not None else {}
    if len(steps) < MIN_STEPS:
        return None
    col = {name: (ph.get(name) or [0.0] * len(steps)) for name in ("data", "h2d", "forward", "backward", "sync",
                                                                    "optimizer")}
    timed = [sum(col[n][i] for n in col) for i in range(len(steps))]
    return {"ready": [s - col["sync"][i] for i, s in enumerate(steps)],
            "outside": [max(0.0, s - timed[i]) for i, s in enumerate(steps)],
            **{n: col[n] for n in ("data", "forward", "backward", "optimizer")}}


def spikes(values: list[float]) -> list[int]:
    med = statistics.median(values)
    mad = statistics.median(abs(x - med) for x in values)
    cut = med + max(SPIKE_MADS * mad, SPIKE_SHARE * med)
    return [i for i, x in enumerate(values) if x > cut]


def hiccup(v: RunView) -> Finding | None:
    if v.task != "train" or v.world_size < 2 or not v.train.per_rank:
        return None
    works = {p.rank: _work(p.series) for p in v.train.per_rank if p.series is not None}
    works = {r: w for r, w in works.items() if w is not None}
    if len(works) < 2:
        return None
    found = []
    for rank, w in works.items():
        idx = spikes(w["ready"])
        others = [o for r, o in works.items() if r != rank]
        # the rank's own: the other ranks' work is not up on those steps (a machine-wide stall is not a rank's)
        own = [i for i in idx if all(i >= len(o["ready"]) or i not in spikes(o["ready"]) for o in others)]
        if len(own) >= MIN_SPIKES:
            base = statistics.median(w["ready"])
            extra = [w["ready"][i] - base for i in own]
            found.append((sum(extra) / len(w["ready"]), rank, own, extra, w))
    if not found:
        return None
    per_step, rank, own, extra, w = max(found)
    gaps = {b - a for a, b in zip(own, own[1:])}
    every = f"every {gaps.pop()} steps" if len(gaps) == 1 else f"on {len(own)} of {len(w['ready'])} steps"
    grew = {p: statistics.mean(w[p][i] for i in own) - statistics.median(w[p]) for p in PARTS}
    mostly = max(grew, key=grew.get)
    share = v.fraction(per_step)
    offset = v.train.warmup_steps or 0
    steps_text = ", ".join(str(offset + i + 1) for i in own[:6]) + (", ..." if len(own) > 6 else "")
    stall = statistics.median(extra)
    host = next((p.host for p in v.train.per_rank if p.rank == rank), None)
    evidence = [
        Evidence("its stall (median over the spikes)", 1e3 * stall, "ms", source="result.per_rank[].series",
                 note=f"steps {steps_text}, against its own median step work"),
        Evidence("its usual work between collectives", 1e3 * statistics.median(w["ready"]), "ms",
                 source="result.per_rank[].series", note="median"),
        Evidence("what grew on those steps", 1e3 * grew[mostly], "ms", source="result.per_rank[].series",
                 note=mostly),
        Evidence("averaged over every step", 1e3 * per_step, "ms", source="result.per_rank[].series",
                 note="what the other ranks wait, per step"),
    ]
    if mostly == "outside":
        fix = ("Run that work on every rank over its shard, less often, or off the step (an asynchronous "
               "checkpoint: torch.distributed.checkpoint.async_save), then run the same command again.")
        todo = f"in the script, move rank {rank}'s {every.removeprefix('on ')} work off the step; then: "
    else:
        fix = f"Profile rank {rank}'s {mostly} on those steps (profile.enabled=true in task=train)."
        todo = ""
    return Finding(
        rule="hiccup",
        title=f"Rank {rank}" + (f" on {host}" if host else "") + f" stalls {1e3 * stall:.0f} ms {every} in "
              f"{WHERE[mostly]}; the other ranks wait for it: {1e3 * per_step:.1f} ms per step on average"
              + (f" ({100 * share:.0f}% of the step)" if share is not None else ""),
        detail=(f"A median step hides it: rank {rank}'s usual step is the others'. On the spike steps its own work "
                f"(the step less its wait for the all-reduces) jumps while the other ranks' does not, and they wait "
                f"at the next all-reduce. {fix}"),
        evidence=evidence,
        matches=cite("004", "a rank doing more work (logging, evaluation, checkpointing every N steps) holds every "
                            "other one at the barrier"),
        saving=Saving(fraction=share, seconds=per_step, lo=None, hi=share, how="the others' wait averaged over the "
                      "steps, if the stall left the step", basis="range", source="measured"),
        command=todo + v.command(),
        impact=share or 0.0, qualitative=True, pool="wait")
