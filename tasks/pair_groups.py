"""task=pair_groups: the gloo thread's experiment, with what it needs to see why it scales as it
does.

pairs=p runs 2p ranks, one process group per consecutive pair, each rank timing `iters`
all-reduces in its own pair's group as the thread's loop did (docs/config.md), in 8 blocks for a
median and its 95% interval (on GPU each block ends with a device synchronise: wall-clock, like the
thread's). To tell transport cost from CPU contention, every rank also records its CPU time and
context switches over the same window (getrusage), and rank 0 how busy the whole host was
(/proc/stat); the printed explanation is read from those numbers.
"""

from __future__ import annotations

import os
import resource
import time
import warnings

import torch
import torch.distributed as dist

import base.schema as schema
from comm.measure import block_sizes, gather_all
from device import synchronize
from stats import describe, fmt_ci
from device.host import (
    RANK_MEMORY_BYTES,
    Host,
    check_fits,
    host_cpu_jiffies,
    on_gpus,
    ranks_per_node,
)
from base.errors import ConfigError
from base.schema import typed
from base.record import Record, typed_block
from base.record_types import PairGroupsResult, PairRank, Summary


def settings(cfg) -> schema.PairGroups:
    """cfg.pair_groups as its typed dataclass; the number of pairs is the top-level `pairs` (world
    size 2 x pairs)."""
    return typed(schema.PairGroups, cfg.pair_groups)


RANKS_KNOB = ("pairs", 2)  # pairs=p runs 2p ranks
CPU_BY_DEFAULT = True  # the gloo thread's CPU experiment: device=auto is CPU unless backend=nccl


def derive(cfg, unresolved) -> None:
    """pairs=p is 2p ranks (the local launcher's world_size; on Slurm the launcher's tasks are)."""
    if cfg.launcher.name == "local":
        cfg.world_size = 2 * cfg.pairs


def check(cfg, submitting: bool = False, host: Host | None = None) -> None:
    """Refuse a pairs= that the ranks cannot hold, before any rank starts."""
    host = host or Host.probe()
    p = settings(cfg)
    world = 2 * cfg.pairs
    if not all(d >= 1 for d in p.shape):
        raise ConfigError(
            f"pair_groups.shape={list(p.shape)}: a list of positive dimensions, e.g. [10,10]."
        )
    if cfg.world_size != world:
        raise ConfigError(
            f"task=pair_groups with pairs={cfg.pairs} needs {world} ranks and this run has "
            f"world_size={cfg.world_size}: set pairs={cfg.world_size // 2} (launcher=slurm: "
            "launcher.nodes x launcher.tasks_per_node = 2 x pairs)."
        )
    if submitting:
        return  # GPUs, CPUs and memory are the compute nodes': checked there, in the job
    node_ranks = ranks_per_node(
        cfg
    )  # backend=nccl: one GPU per rank is job.config.validate's check
    if on_gpus(cfg, host):
        return
    check_fits(
        cfg,
        host,
        ranks=node_ranks,
        per_rank_bytes=RANK_MEMORY_BYTES,
        what=f"pairs={cfg.pairs}",
        fix="Use fewer pairs, or more nodes (launcher=slurm)",
    )
    threads = p.threads or 1
    if node_ranks * threads > host.cpus:
        each = f" x {threads} threads" if threads > 1 else ""
        warnings.warn(
            f"pairs={cfg.pairs}: {node_ranks} ranks{each} on {host.cpus} CPUs oversubscribe this "
            "machine; "
            "the result shows the contention (CPU busy %, involuntary context switches).",
            stacklevel=2,
        )


def run(ctx) -> PairGroupsResult | None:
    p, pairs = settings(ctx.cfg), ctx.cfg.pairs
    world, rank = ctx.world_size, ctx.rank
    if world != 2 * pairs:  # torchrun decides the world size itself
        raise ConfigError(
            f"task=pair_groups with pairs={pairs} needs world_size={2 * pairs}, this run has "
            f"{world} ranks. Start 2 x pairs ranks, or set pairs={world // 2}."
        )
    if p.threads:
        os.environ["OMP_NUM_THREADS"] = str(p.threads)
        torch.set_num_threads(p.threads)
    device = ctx.torch_device if ctx.backend == "nccl" else torch.device("cpu")

    t0 = time.perf_counter()
    mine = None
    for i in range(0, world, 2):  # every rank creates every pair's group, as in the thread
        g = dist.new_group([i, i + 1])
        if rank in (i, i + 1):
            mine = g
    setup_s = time.perf_counter() - t0

    def loop(n: int) -> None:
        works = []
        for _ in range(n):
            x = torch.randn(*p.shape, device=device)
            w = dist.all_reduce(x, group=mine, async_op=p.async_op)
            if p.async_op:
                works.append(w)
        for w in works:
            w.wait()

    loop(p.warmup_iters)
    synchronize(device)
    dist.barrier()
    host0 = host_cpu_jiffies()
    ru0, cpu0, t0 = (
        resource.getrusage(resource.RUSAGE_SELF),
        time.process_time(),
        time.perf_counter(),
    )
    block_walls, sizes = [], block_sizes(p.iters)
    for n in sizes:  # contiguous blocks, no barrier between them: their sum is the whole loop
        b0 = time.perf_counter()
        loop(n)
        synchronize(device)
        block_walls.append(time.perf_counter() - b0)
    wall = time.perf_counter() - t0
    cpu, ru1 = time.process_time() - cpu0, resource.getrusage(resource.RUSAGE_SELF)
    host1 = host_cpu_jiffies()
    host_busy = (
        (host1[0] - host0[0]) / (host1[1] - host0[1])
        if host0 and host1 and host1[1] > host0[1]
        else None
    )

    figures = {
        "rank": rank,
        "host": ctx.hostname,
        "wall_s": wall,
        "cpu_s": cpu,
        "block_us_per_op": [w / n * 1e6 for w, n in zip(block_walls, sizes)],
        "voluntary_switches": ru1.ru_nvcsw - ru0.ru_nvcsw,
        "involuntary_switches": ru1.ru_nivcsw - ru0.ru_nivcsw,
        "torch_threads": torch.get_num_threads(),
        "group_setup_s": setup_s,
        "host_busy_fraction": host_busy,
    }
    everyone = gather_all(figures)
    dist.barrier()
    dist.destroy_process_group(mine)
    return _result(ctx, p, device, everyone) if ctx.is_main else None


def _result(ctx, p: schema.PairGroups, device, everyone) -> PairGroupsResult:
    world, pairs = ctx.world_size, ctx.cfg.pairs
    walls = [r["wall_s"] for r in everyone]
    slowest = max(range(world), key=walls.__getitem__)
    hosts = sorted({r["host"] for r in everyone})
    cpus = os.cpu_count() or 1
    cpu_total = sum(r["cpu_s"] for r in everyone)
    # machine share: CPU-seconds the ranks used / CPU-seconds this host offered over the slowest
    # window (one host)
    busy = cpu_total / (cpus * max(walls)) if len(hosts) == 1 and max(walls) > 0 else None
    invol = sum(r["involuntary_switches"] for r in everyone)
    result = PairGroupsResult(
        pairs=pairs,
        world_size=world,
        backend=ctx.backend,
        device=str(device),
        iters=p.iters,
        warmup_iters=p.warmup_iters,
        shape=list(p.shape),
        async_op=p.async_op,
        torch_threads=everyone[0]["torch_threads"],
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        cpu_count=cpus,
        hosts=hosts,
        rank0_s=walls[0],
        slowest_s=walls[slowest],
        slowest_rank=slowest,
        per_op_us_rank0=walls[0] / p.iters * 1e6,
        # rank 0's blocks: median time per all_reduce with its order-statistic 95% CI (8 blocks:
        # 96.9%)
        per_op_us=typed_block(
            Summary, describe(everyone[0]["block_us_per_op"]), "result.per_op_us"
        ),
        cpu_s_total=cpu_total,
        cpu_busy_fraction=busy,
        host_busy_fraction=everyone[0]["host_busy_fraction"] if len(hosts) == 1 else None,
        ranks_per_cpu=world / cpus if len(hosts) == 1 else None,
        involuntary_switches=invol,
        voluntary_switches=sum(r["voluntary_switches"] for r in everyone),
        group_setup_s_rank0=everyone[0]["group_setup_s"],
        per_rank=[
            typed_block(PairRank, r, f"result.per_rank[{i}]") for i, r in enumerate(everyone)
        ],
    )
    result.explanation = explain(result)
    result.headline = {
        "pairs": pairs,
        "ranks": world,
        "rank 0 s": round(walls[0], 4),
        "slowest s": round(walls[slowest], 4),
        "us per all_reduce": round(result.per_op_us_rank0, 2),
        "CPU busy %": round(100 * busy, 1) if busy is not None else None,
        "host busy %": (
            round(100 * result.host_busy_fraction, 1)
            if result.host_busy_fraction is not None
            else None
        ),
        "invol. switches / op": round(invol / (world * p.iters), 3),
    }
    return result


def explain(r: PairGroupsResult) -> list[str]:
    """A reading of this run's own figures; the sweep over pairs shows the trend."""
    it, world = r.iters, r.world_size
    d = r.per_op_us
    per_op = (
        f"{fmt_ci(d.median, d.ci_lo, d.ci_hi)} us each (median of {d.n} timed blocks, 95% CI)"
        if d is not None and d.median is not None
        else f"{r.per_op_us_rank0:.1f} us each"
    )
    lines = [
        f"rank 0: {r.iters} all_reduces of {'x'.join(map(str, r.shape))} in {r.rank0_s:.4g} s = "
        f"{per_op}; slowest rank {r.slowest_rank}: {r.slowest_s:.4g} s."
    ]
    busy, invol = r.cpu_busy_fraction, r.involuntary_switches / (world * it)
    if busy is None:
        lines.append(
            "ranks span several hosts: CPU share not computed (per-rank CPU time is in per_rank)."
        )
        return lines
    host = r.host_busy_fraction
    lines.append(
        f"{world} ranks on {r.cpu_count} CPUs ({r.ranks_per_cpu:.2g} ranks per CPU, "
        f"{r.torch_threads} torch thread(s) each) used {r.cpu_s_total:.3g} CPU-s in the window: "
        f"{100 * busy:.0f}% of the machine"
        + (
            f" ({100 * host:.0f}% busy counting every process on the host)"
            if host is not None
            else ""
        )
        + f"; {invol:.2f} involuntary context switches (the kernel preempting a runnable thread) "
        "per "
        f"all_reduce per rank."
    )
    if r.ranks_per_cpu > 1 or busy >= 0.8 or (host is not None and host >= 0.8):
        if r.ranks_per_cpu > 1:
            why = f"more ranks than CPUs ({world} on {r.cpu_count})"
        elif busy >= 0.8:
            why = f"the ranks kept {100 * busy:.0f}% of the CPUs busy"
        else:
            why = f"other processes kept the host {100 * host:.0f}% busy"
        lines.append(
            f"CPU contention: {why}, so a rank that is ready to answer its peer often waits for a "
            "CPU; "
            "time per all_reduce then grows with the number of pairs although each pair's traffic "
            "is "
            "independent. Compare pairs values at the same ranks-per-CPU, or pair_groups.threads=1 "
            "/ "
            "async_op=true, to separate it from the transport."
        )
    else:
        lines.append(
            f"No sign of CPU contention (no more ranks than CPUs, CPUs {100 * busy:.0f}% busy): "
            "the time "
            "per all_reduce is the round trip of the backend's transport (per-call latency), which "
            "other "
            "pairs do not share."
        )
    return lines


def summarize(record: Record) -> str:
    r: PairGroupsResult = record.result
    if r is None or r.rank0_s is None:
        return "pair_groups: no result"
    lines = [
        f"pair_groups: pairs={r.pairs} ({r.world_size} ranks), backend {r.backend}, device "
        f"{r.device}, "
        f"{r.iters} all_reduces of {'x'.join(map(str, r.shape))} per rank in its pair's group"
        f"{' (async_op=True, waited at the end of each timed block)' if r.async_op else ''}; "
        f"{r.warmup_iters} untimed first",
        f"{'rank':>5} {'host':<16} {'time s':>9} {'us/op':>9} {'CPU s':>8} {'vol.sw':>8} "
        f"{'invol.sw':>9} "
        f"{'threads':>7}",
    ]
    for p in r.per_rank:
        lines.append(
            f"{p.rank:>5} {p.host[:16]:<16} {p.wall_s:>9.4f} {p.wall_s / r.iters * 1e6:>9.1f} "
            f"{p.cpu_s:>8.3f} {p.voluntary_switches:>8} {p.involuntary_switches:>9} "
            f"{p.torch_threads:>7}"
        )
    lines += [
        f"Time to run target() (rank 0) = {r.rank0_s:.6f} s; slowest rank {r.slowest_rank}: "
        f"{r.slowest_s:.6f} s",
        "why:",
    ] + [f"  {x}" for x in r.explanation]
    return "\n".join(lines)
