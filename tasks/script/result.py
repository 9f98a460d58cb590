"""task=script's figures, mapped onto task=train's record (the same phases, per-rank work,
throughput blocks, comm block), so that the summary, the diagnosis and the what-if model read a
script's run as they read the built-in loop's.

    data       the script's waits in its DataLoader's __next__ h2d        its copies of the batch's
    host tensors to the device (.to / .cuda on them), where it makes them forward    DDP modules'
    forward (pre-hook to hook), summed over the step's micro-batches backward   backward compute:
    the DDP output's gradient to the end of the autograd graph sync       DDP's wait for its
    all-reduces at the end of backward: the exposed communication optimizer  optimizer.step() (every
    optimizer of the step) step       one optimizer step's end to the next: what is left (loss,
    logging, evaluation, checkpoints: the
               script's own code) is the time outside the timed phases, as in task=train"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from base.record import train_headline, typed_block
from base.record_types import (
    BucketInfo,
    DdpInfo,
    DeviceLayer,
    GradReady,
    H2d,
    Measure,
    PhaseSeries,
    PhaseSummaries,
    ScriptResult,
    Series,
    SteadyState,
    Summary,
    TrainRank,
)
from stats import block_throughput, describe, steady_state
from tasks.train.result import comm_figures, thread_counts, throughput_of, time_budget
from tasks.train.stragglers import find_straggler

PHASES = ("data", "h2d", "forward", "backward", "sync", "optimizer")


def step_series(attach) -> tuple[list[dict], list[dict]]:
    """Per measured step: seconds per phase and the whole step; and its communication (per bucket
    start/end, bytes, the overlap with backward compute). Read after the script ended (the device
    synchronised first)."""
    if torch.cuda.is_available() and attach.clock.device.kind == "cuda":
        torch.cuda.synchronize()
    sec = attach.clock.seconds
    steps, comms = [], []
    for st in attach.measured:
        d = dict.fromkeys(PHASES, 0.0)
        compute_end = None
        for name, a, b in st.spans:
            d[name] += sec(a, b)
            if name == "backward":
                compute_end = b
        d["step"] = sec(st.start, st.end)
        steps.append(d)
        if st.comm:
            first = min(st.comm, key=lambda c: sec(st.start, c[0]))[0]
            last = max(st.comm, key=lambda c: sec(st.start, c[1]))[1]
            time_s = sec(first, last)
            overlap = (
                min(max(0.0, sec(first, compute_end)), time_s) if compute_end is not None else 0.0
            )
            comms.append(
                {
                    "time_s": time_s,
                    "overlap_s": overlap,
                    "bytes": sum(c[2] for c in st.comm),
                    "buckets": len(st.comm),
                    "sizes": [c[2] for c in st.comm],
                }
            )
        else:
            comms.append(None)
    return steps, comms


def ready_series(attach) -> dict | None:
    """When each gradient was ready in each measured step's synchronised backward, for the what-if
    model (result.grad_ready, mode with_sync): a bucket's comm hook starts once its last gradient is
    ready (and the buckets before it launched), so every parameter of a bucket is given that start,
    from the start of the backward the hooks ran in. The DDP whose buckets carried the most bytes in
    the window is the one described."""
    sec = attach.clock.seconds
    carried: dict = {}
    for st in attach.measured:
        for c in st.comm:
            carried[c[4]] = carried.get(c[4], 0) + c[2]
    if not carried:
        return None
    timed = max(carried, key=carried.get)
    grads, n = timed.grads, len(timed.grads["names"])
    if not n or not timed.layout:
        return None
    backward_s, ready_s = [], []
    for st in attach.measured:
        mine = [c for c in st.comm if c[4] is timed]
        spans = [
            (sec(st.start, a), sec(st.start, b)) for name, a, b in st.spans if name == "backward"
        ]
        first = min((sec(st.start, c[0]) for c in mine), default=None)
        began = [s for s in spans if first is not None and s[0] <= first]
        if not began:
            continue
        b0, b1 = max(began)  # the backward the buckets were launched in (the last micro-step's)
        at = {c[3]: min(sec(st.start, c[0]) - b0, b1 - b0) for c in mine}
        ready = [b1 - b0] * n  # a parameter in no bucket seen: at the end of backward compute
        for index, params in timed.layout.items():
            for i in params:
                if 0 <= i < n and index in at:
                    ready[i] = max(0.0, at[index])
        backward_s.append(b1 - b0)
        ready_s.append(ready)
    if not ready_s:
        return None
    laid = [i for index in sorted(timed.layout) for i in timed.layout[index] if 0 <= i < n]
    order = list(dict.fromkeys(laid)) + [i for i in reversed(range(n)) if i not in set(laid)]
    return {
        "method": "task=script: each bucket's comm hook start (its last gradient ready and the "
        "buckets "
        "before it launched), from the start of the backward it ran in, with the all-reduces "
        "beside it; "
        "every parameter of a bucket given its bucket's start",
        "timing": "cuda events" if attach.clock.device.kind == "cuda" else "host clock",
        "dtype": None,
        **grads,
        "order": order,
        "modes": {"with_sync": {"backward_s": backward_s, "ready_s": ready_s}},
    }


def device_layer(ctx) -> dict | None:
    """The fake device's counts (device=fake, tests: the script's ops checked against the stream
    rules, its copies seen); the script's own host syncs are its own, so the window is watched, not
    enforced."""
    dev = ctx.device
    if getattr(dev, "kind", "cpu") != "fake":
        return None
    return {
        **dev.report(),
        "window_sync_check": "none: the script's own syncs are its own",
        "window_unchecked_because": "task=script runs the user's code in the window",
    }


def rank_figures(ctx, attach, ended: str) -> dict:
    steps, comms = step_series(attach)
    step_times = [s["step"] for s in steps]
    usage = attach.cpu1 or {}
    work = None
    if steps:
        n = len(steps)
        outside = [max(0.0, s["step"] - sum(s[p] for p in PHASES)) for s in steps]
        work = {
            "ready_s": describe([s["step"] - s["sync"] for s in steps]),
            "data_s": statistics.median(s["data"] for s in steps),
            "h2d_s": statistics.median(s["h2d"] for s in steps),
            "forward_s": statistics.median(s["forward"] for s in steps),
            "backward_compute_s": statistics.median(s["backward"] for s in steps),
            "compute_s": statistics.median(s["forward"] + s["backward"] for s in steps),
            "optimizer_s": statistics.median(s["optimizer"] for s in steps),
            "outside_s": statistics.median(outside),
            "backward_from": "backward phase (the DDP output's gradient to autograd's last "
            "callback before DDP's)",
            "what": "work between two collectives per step: the step less DDP's wait for its "
            "all-reduces (data, "
            "forward, backward compute, optimizer and the script's own code: loss, logging, "
            "evaluation)",
            "phases_mean_s": {p: sum(s[p] for s in steps) / n for p in PHASES},
            # as task=train's: the phases' own span per step, and the wall per step; what lies
            # between (the script's own code) is the outside time the step accounting shows
            # (diagnosis/accounting.py)
            "step_mean_s": sum(sum(s[p] for p in PHASES) for s in steps) / n,
            "wall_per_step_s": sum(step_times) / n,
            "torch_threads": torch.get_num_threads(),
            **usage,
            "steps": n,
        }
    wall = sum(step_times)
    return {
        "rank": ctx.rank,
        "host": ctx.hostname,
        "wall_s": wall,
        "steps_per_s": len(steps) / wall if wall else None,
        "step_median_s": float(np.median(step_times)) if steps else None,
        "step_p90_s": float(np.percentile(step_times, 90)) if steps else None,
        "phases_median": {p: float(np.median([s[p] for s in steps])) for p in PHASES}
        if steps
        else None,
        "block_walls_s": step_times,
        "cpu_s_per_step": usage.get("cpu_s", 0.0) / len(steps) if steps and usage else None,
        "threads": thread_counts(),
        "work": work,
        "series": {
            "step_time_s": step_times,
            "phases": {p: [s[p] for s in steps] for p in PHASES},
            "tool_s": [s.tool_s for s in attach.measured],
            "substituted_hook_s": [s.substituted_s for s in attach.measured],
            "substituted_collective_s": [s.collective_s for s in attach.measured],
            "gc_s": [s.gc_s for s in attach.measured],
        },
        # what rank 0 needs beside the per-rank block: kept out of the record's per_rank by
        # assemble()
        "_steps": steps,
        "_comms": comms,
        "_samples": [s.samples for s in attach.measured],
        # micro-batches per step: backward passes (no_sync or require_backward_grad_sync
        # accumulation)
        "_micro": [sum(name == "backward" for name, _, _ in s.spans) for s in attach.measured],
        "_steps_done": attach.steps_done,
        "_ended": ended,
        "_ddps": attach.ddps,
        "_grad_ready": ready_series(attach) if ctx.rank == 0 else None,
        "_serialized": attach.serialized,
    }


def assemble(cfg, ctx, everyone: list[dict], marks: dict, script: dict) -> ScriptResult:
    mine = everyone[0]
    steps, comms = mine["_steps"], mine["_comms"]
    n = min(len(r["_steps"]) for r in everyone)
    walls = [max(r["block_walls_s"][i] for r in everyone) for i in range(n)]
    sizes = [1] * n
    tp = block_throughput(walls, sizes)
    samples = [sum(r["_samples"][i] for r in everyone) for i in range(n)]
    per_step = statistics.median(samples) if samples and all(samples) else None
    copied = any(s["h2d"] for s in steps)
    micro = max(1, round(statistics.median(mine["_micro"]))) if mine["_micro"] else 1
    step_times = [s["step"] for s in steps]
    seen = [p for p in PHASES if any(s[p] for s in steps)]
    ddps = mine["_ddps"]
    ddp = ddps[0] if ddps else {}
    counted = [c for c in comms if c]
    probe = None
    if counted:
        probe = {
            "comm_s": statistics.median(c["time_s"] for c in counted),
            "overlap_s": statistics.median(c["overlap_s"] for c in counted),
            "exposed_samples_s": [s["sync"] for s, c in zip(steps, comms) if c],
            "backward_compute_s": statistics.median(
                s["backward"] for s, c in zip(steps, comms) if c
            ),
            "method": "comm hook on the script's DDP: first bucket's start to the last one's end "
            "(the hook "
            "future's callback); exposed = DDP's wait for its all-reduces after backward compute "
            "(the sync phase), every measured step",
        }
    buckets = (
        BucketInfo(
            count=len(counted[-1]["sizes"]),
            sizes_bytes=counted[-1]["sizes"],
            order="as all-reduced",
            rebuilt=True,
        )
        if counted
        else None
    )
    described = DdpInfo(
        bucket_cap_mb=ddp.get("bucket_cap_mb") or "default",
        buckets=buckets,
        static_graph=ddp.get("static_graph"),
        serialized=mine["_serialized"],
        comm_hook=ddp.get("script_hook_replaced_by") or ddp.get("optim")
        if ddp.get("optim") != "none"
        else ddp.get("script_hook") or "allreduce_hook (timing)",
    )
    comm = None
    if counted:
        comm = comm_figures(
            described,
            ctx.world_size,
            steps,
            probe,
            collectives=statistics.median(c["buckets"] for c in counted),
            nbytes=statistics.median(c["bytes"] for c in counted),
        )
    steady = steady_state(step_times)
    steady["of"] = "step times (rank 0)"
    window_s = sum(walls)
    marks.setdefault("window", marks["probes"])
    per_rank = [{k: v for k, v in r.items() if not k.startswith("_")} for r in everyone]
    for r in per_rank:
        r["block_walls_s"] = r["block_walls_s"][:n]
        r["series"] = {
            "step_time_s": r["series"]["step_time_s"][:n],
            "phases": {p: v[:n] for p, v in r["series"]["phases"].items()},
            "tool_s": r["series"]["tool_s"][:n],
            "substituted_hook_s": r["series"]["substituted_hook_s"][:n],
            "substituted_collective_s": r["series"]["substituted_collective_s"][:n],
            "gc_s": r["series"]["gc_s"][:n],
        }
    result = ScriptResult(
        device=ctx.torch_device.type,
        device_name=torch.cuda.get_device_name(ctx.torch_device)
        if ctx.torch_device.type == "cuda"
        else f"{ctx.hostname} CPU",
        world_size=ctx.world_size,
        backend=ctx.backend,
        sync="ddp",
        optim=cfg.optim.name,
        bucket_mb=described.bucket_cap_mb,
        precision="the script's",
        cuda_graphs=False,
        batch_per_rank=int(per_step / ctx.world_size / micro) if per_step else None,
        global_batch=int(per_step / micro) if per_step else None,
        accumulate=micro,
        effective_batch=int(per_step) if per_step else None,
        warmup_steps=int(cfg.warmup_steps),
        steps=n,
        timing=True,
        profiled=False,
        measure=Measure(
            policy="fixed",
            min_steps=int(cfg.steps),
            block_steps=1,
            steps=n,
            blocks=n,
            window_s=window_s,
            stopped_by="fixed" if n >= int(cfg.steps) else "the script's end",
            precision_of="step times (rank 0's hooks)",
        ),
        throughput=throughput_of(
            tp,
            per_step,
            window_s,
            walls,
            sizes,
            "each measured step's time (optimizer step to optimizer step) on its slowest rank",
        ),
        step_time_s=typed_block(
            Summary, describe(step_times, serial_series=True), "result.step_time_s"
        )
        if step_times
        else None,
        phases=typed_block(
            PhaseSummaries,
            {p: describe([s[p] for s in steps], serial_series=True) for p in seen},
            "result.phases",
        )
        if steps
        else None,
        steady=steady["steady"],
        steady_state=typed_block(SteadyState, steady, "result.steady_state"),
        per_rank=[
            typed_block(TrainRank, r, f"result.per_rank[{i}]") for i, r in enumerate(per_rank)
        ],
        slowest_rank=max(per_rank, key=lambda r: r["step_median_s"] or 0)["rank"],
        comm=comm,
        ddp=described,
        h2d=H2d(
            mode="the script's",
            copies=copied,
            note="timed: the script's .to()/.cuda() of its loader batch's host tensors (the h2d "
            "phase)"
            if copied
            else "none seen: no .to()/.cuda() of a loader batch's host tensor moved it to another "
            "device "
            "(a CPU run, or copies made elsewhere: in the script's outside time)",
        ),
        device_layer=typed_block(DeviceLayer, device_layer(ctx), "result.device_layer"),
        time_budget=time_budget(marks, window_s),
        series=Series(
            step_time_s=step_times,
            phases=typed_block(
                PhaseSeries, {p: [s[p] for s in steps] for p in seen}, "result.series"
            ),
        ),
        grad_ready=typed_block(GradReady, mine["_grad_ready"], "result.grad_ready"),
        straggler=find_straggler(per_rank, tp["steps_per_s"] and 1 / tp["steps_per_s"]),
        script=script,
    )
    result.headline = train_headline(result)
    return result
