"""What a task=train run hands in: per-rank figures gathered on rank 0, the communication figures, the `result`
dict of the run record, and the summary printed from a record. Kept apart from the loop so that the loop reads
top to bottom as the measurement it is."""
from __future__ import annotations

import torch

from results.table import train_headline
from tasks.train.timing import stats


def rank_figures(ctx, steps: list[dict], wall: float) -> dict:
    step_times = [s["step"] for s in steps]
    st = stats(step_times) or {}
    names = [p for p in (steps[0] if steps else {}) if p != "step"]
    return {
        "rank": ctx.rank,
        "host": ctx.hostname,
        "wall_s": wall,
        "steps_per_s": len(steps) / wall if steps else None,
        "step_median_s": st.get("median"),
        "step_p90_s": st.get("p90"),
        "phases_median": {n: stats([s[n] for s in steps])["median"] for n in names},
    }


def comm_figures(described: dict, world_size: int, steps: list[dict], probe: dict | None, collectives: float, nbytes: float) -> dict:
    sync_times = [s["sync"] for s in steps if "sync" in s]
    if probe is not None:  # DDP: its runtime stats from the probe steps
        time_s, overlap_s = probe["comm_s"], probe["overlap_s"]
        exposed_s = max(0.0, time_s - overlap_s)
        backward_compute_s = probe["backward_compute_s"]
        method = probe.get("method") or ("DDP runtime stats (reducer timers) over the untimed probe steps: time = "
                                         "first bucket all-reduce start to last finish; exposed = time - overlap "
                                         "with backward compute")
    elif sync_times and not described.get("buckets"):  # explicit strategies: the sync phase is all communication
        time_s = stats(sync_times)["median"]
        overlap_s, exposed_s, backward_compute_s = 0.0, time_s, None
        method = "median sync phase of the measured steps (no overlap: all-reduce runs after backward)"
    else:  # nothing timed the communication: say so rather than print 0
        time_s = overlap_s = exposed_s = backward_compute_s = None
        method = "not measured: " + ("probe_steps=0, and only DDP's runtime stats in the probe steps time its "
                                     "all-reduce (it runs inside backward)" if described.get("buckets")
                                     else "timing=false, and the sync phase times the explicit strategies")
    algbw = nbytes / time_s / 1e9 if time_s else None
    buckets = described.get("buckets")  # DDP only
    return {
        "bytes_per_step": nbytes,
        "collectives_per_step": collectives,
        "time_s": time_s,
        "overlap_s": overlap_s,
        "exposed_s": exposed_s,
        "backward_compute_s": backward_compute_s,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (world_size - 1) / world_size if algbw is not None else None,
        "method": method,
        "buckets": buckets or None,
    }


def assemble(cfg, ctx, described: dict, feeder, steps, everyone, comm, final_loss, grad_error) -> dict:
    walls = [r["wall_s"] for r in everyone]
    wall = max(walls)  # the job is as fast as its slowest rank
    global_batch = cfg.batch_size * ctx.world_size
    steps_per_s = cfg.steps / wall
    step_time = stats([s["step"] for s in steps]) if steps else None
    phases = None
    if steps:
        names = [p for p in steps[0] if p != "step"]
        phases = {n: stats([s[n] for s in steps]) for n in names}
    slowest = max(everyone, key=lambda r: r["step_median_s"] or r["wall_s"])["rank"]
    ddp = described or None
    device_name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else f"{ctx.hostname} CPU"
    result = {
        "device": ctx.device.type,
        "device_name": device_name,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "sync": cfg.sync,
        "optim": cfg.optim.name,
        "bucket_mb": ddp["bucket_cap_mb"] if ddp else None,
        "precision": cfg.precision,
        "cuda_graphs": bool(cfg.cuda_graphs),
        "batch_per_rank": cfg.batch_size,
        "global_batch": global_batch,
        "accumulate": cfg.accumulate,
        "effective_batch": global_batch * cfg.accumulate,
        "warmup_steps": cfg.warmup_steps,
        "steps": cfg.steps,
        "timing": bool(cfg.timing),
        "profiled": bool(cfg.profile.enabled),
        "throughput": {"wall_s": wall, "steps_per_s": steps_per_s,
                       "samples_per_s": steps_per_s * global_batch * cfg.accumulate},
        "step_time_s": step_time,
        "phases": phases,
        "per_rank": everyone,
        "slowest_rank": slowest,
        "comm": comm,
        "ddp": ddp,
        "accuracy": {"final_loss": final_loss, "grad_rel_error": grad_error,
                     "grad_error_steps": cfg.probe_steps if grad_error is not None else 0},
        "h2d": {"mode": cfg.h2d, "copies": feeder.copies, "note": feeder.note},
        "series": {"step_time_s": [s["step"] for s in steps],
                   "phases": {n: [s[n] for s in steps] for n in (steps[0] if steps else {}) if n != "step"}},
    }
    result["headline"] = train_headline(result)
    return result


def summarize(record: dict) -> str:
    r = record["result"]
    lines = [
        f"task=train  model={record['config']['model']['name']}  sync={r['sync']}  optim={r['optim']}  "
        f"bucket={r['bucket_mb']}  world_size={r['world_size']}  backend={r['backend']}  device={r['device_name']}",
        f"batch/rank={r['batch_per_rank']}  global={r['global_batch']}  accumulate={r['accumulate']}  "
        f"effective={r['effective_batch']}  warm-up={r['warmup_steps']}  measured={r['steps']}",
        "",
        f"throughput  {r['throughput']['steps_per_s']:.3f} steps/s   {r['throughput']['samples_per_s']:.1f} samples/s"
        f"   (wall clock of the measured window, slowest rank)",
    ]
    if r["phases"]:
        step = r["step_time_s"]
        lines += ["", f"{'phase':<12}{'median ms':>12}{'p90 ms':>12}{'share':>8}   (rank 0)"]
        for name, s in r["phases"].items():
            share = s["median"] / step["median"] if step["median"] else 0.0
            lines.append(f"{name:<12}{s['median'] * 1e3:>12.2f}{s['p90'] * 1e3:>12.2f}{share:>8.1%}")
        lines.append(f"{'step':<12}{step['median'] * 1e3:>12.2f}{step['p90'] * 1e3:>12.2f}")
    c = r["comm"]
    if c:
        f = lambda v, scale=1e3: "n/a" if v is None else f"{v * scale:.2f}"  # noqa: E731
        lines += [
            "",
            f"gradient sync: {c['collectives_per_step']:.0f} collectives/step, {c['bytes_per_step'] / 1e6:.2f} MB/step"
            + (f", {c['buckets']['count']} buckets" if c.get("buckets") else ""),
            f"  comm {f(c['time_s'])} ms, overlapped with backward {f(c['overlap_s'])} ms, exposed {f(c['exposed_s'])} ms"
            + (f", backward compute {f(c['backward_compute_s'])} ms" if c["backward_compute_s"] is not None else ""),
            f"  algbw {f(c['algbw_GBps'], 1)} GB/s  busbw {f(c['busbw_GBps'], 1)} GB/s  ({c['method']})",
        ]
    acc = r["accuracy"]
    lines.append("")
    lines.append(f"loss {acc['final_loss']:.4f}" + (f"   gradient rel. error vs exact fp32 all-reduce "
                                                   f"{acc['grad_rel_error']:.3e}" if acc["grad_rel_error"] is not None else ""))
    per = r["per_rank"]
    if len(per) > 1:
        lines.append("per rank: " + "  ".join(
            f"r{p['rank']}@{p['host']} {p['step_median_s'] * 1e3:.1f} ms" for p in per if p["step_median_s"] is not None)
            + f"   slowest: rank {r['slowest_rank']}")
    if r.get("straggler"):  # the rank the others wait for (tasks/train/stragglers.py)
        s = r["straggler"]
        lines.append(f"straggler: rank {s['rank']}, {s['by_s'] * 1e3:+.1f} ms of work per step against the others' "
                     f"median (mostly {s['mostly']})" + {True: "", False: ", inside the ranks' intervals: not "
                                                         "significant", None: ", no interval"}[s["significant"]])
    lines.append(f"h2d: {r['h2d']['mode']} - {r['h2d']['note']}")
    return "\n".join(lines)
