"""Hand-made task=train records of the diagnosis benchmark's cases (diagnosis/benchmark.py), built
the way a run builds its record: each rank's steps from its own work, DDP's wait for the late rank
inside backward and the rest at the block barrier (one step per timed block, a barrier before each),
then the tool's own code for the per-rank work, the straggler and the throughput
(tasks/train/stragglers.py, stats). Every case knows the answer: the cause a correct diagnosis ranks
first, and the saving its fix has by construction (`truth`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from stats import block_throughput, describe, steady_state
from tasks.train.stragglers import find_straggler, rank_work
from tests.records import train_record

N = 20  # steps (one per timed block)
PHASES = ("data", "h2d", "forward", "backward", "sync", "optimizer")


@dataclass
class Rank:
    data: float = 0.0003
    h2d: float = 0.0
    forward: float = 0.0015
    backward: float = 0.004  # compute
    optimizer: float = 0.0004
    outside: float = 0.0001  # between steps, inside the timed block
    stall: float = 0.0  # in its `stall_at` phase on every `every`-th step (from the first)
    every: int = 1
    stall_at: str = "optimizer"  # or "data": the others wait for it in the same step's all-reduce

    def stalled(self, i: int, at: str) -> float:
        return self.stall if self.stall_at == at and i % self.every == 0 else 0.0


@dataclass
class Shape:
    """What a run looks like: its ranks' own work, the transfer after the last rank arrives, the
    host's load."""

    ranks: list[Rank] = field(default_factory=lambda: [Rank(), Rank()])
    sync: str = "ddp"
    transfer: float = 0.0002  # exposed communication after the last rank arrives
    overlap: float = 0.003  # DDP: all-reduce time hidden behind backward
    device: str = "cpu"
    layer: str = "cpu"  # device_layer.kind ("fake": the GPU paths on CPU)
    h2d_mode: str = "blocking"
    own_cpu: float = 0.45  # the ranks' CPU share of the host over the window
    host_busy: float = 0.5
    runqueue: float = 0.0  # the loop thread's wait for a core, seconds per step
    efficiency: float | None = None  # comm vs the on-rank microbenchmark
    buckets: list[int] | None = None
    calls: int = 1
    link: str | None = None
    overrides: list[str] = field(default_factory=lambda: ["model=vgg11_tiny"])


def build(s: Shape) -> dict:
    ddp = s.sync == "ddp"
    wiggle = [1 + 0.01 * ((i * 7) % 5 - 2) for i in range(N)]
    # each rank's work before the collective, each step
    pre = [
        [r.data + r.stalled(i, "data") + r.h2d + r.forward + r.backward for i in range(N)]
        for r in s.ranks
    ]
    arrive = [max(p[i] for p in pre) for i in range(N)]
    everyone, walls_all = [], []
    for k, r in enumerate(s.ranks):
        steps = []
        for i, w in enumerate(wiggle):
            wait = arrive[i] - pre[k][i]
            d = {
                "data": r.data * w + r.stalled(i, "data"),
                "h2d": r.h2d * w,
                "forward": r.forward * w,
                "backward": (r.backward + (wait + s.transfer if ddp else 0.0)) * w,
                "sync": (wait + s.transfer) * w if not ddp else 0.00001,
                # a stall after the optimizer step: the others wait at the next block's barrier
                "optimizer": r.optimizer * w + r.stalled(i, "optimizer"),
            }
            d["step"] = sum(d.values())
            steps.append(d)
        walls = [d["step"] + r.outside for d in steps]
        walls_all.append(walls)
        usage = {
            "cpu_s": s.own_cpu * 2 * sum(walls) / len(s.ranks),
            "wall_s": sum(walls),
            "voluntary_switches": 100,
            "involuntary_switches": 50,
            "runqueue_s": s.runqueue * N,
            "main_runqueue_s": s.runqueue * N,
            "host_busy": s.host_busy,
        }
        stats = {"backward_compute_s": r.backward} if ddp else None
        work = {
            **rank_work(steps, stats, usage, walls),
            "torch_threads": 1,
        }  # one intra-op thread, as the launcher
        everyone.append(
            {
                "rank": k,
                "host": "node-a",
                "block_walls_s": walls,
                "work": work,
                "step_median_s": sorted(x["step"] for x in steps)[N // 2],
                "phases_median": {p: sorted(x[p] for x in steps)[N // 2] for p in PHASES},
                "threads": {"intra_op": 1, "inter_op": 2, "OMP_NUM_THREADS": "1"},
                "steps_per_s": 1.0,
                "series": {
                    "step_time_s": [d["step"] for d in steps],
                    "phases": {p: [d[p] for d in steps] for p in PHASES},
                },
            }
        )
        if k == 0:
            rank0 = steps
    blocks = [max(ws[i] for ws in walls_all) for i in range(N)]  # each block's slowest rank
    for e in (
        everyone
    ):  # every rank's window is the same blocks (a fast rank waits at the barrier): its wall too
        e["work"].update(wall_s=sum(blocks), cpu_s=s.own_cpu * 2 * sum(blocks) / len(s.ranks))
    tp = block_throughput(blocks, [1] * N)
    T = sum(blocks) / N
    rec = train_record(overrides=list(s.overrides), steps_per_s=1 / T, steps=N, device=s.device)
    r = rec["result"]
    step_times = [d["step"] for d in rank0]
    r.update(
        sync=s.sync,
        device=s.device,
        steps=N,
        throughput={
            "wall_s": sum(blocks),
            "steps_per_s": tp["steps_per_s"],
            "ci_lo": tp["ci_lo"],
            "ci_hi": tp["ci_hi"],
            "samples_per_s": tp["steps_per_s"] * 4,
            "samples_ci_lo": tp["ci_lo"] and tp["ci_lo"] * 4,
            "samples_ci_hi": tp["ci_hi"] and tp["ci_hi"] * 4,
            "n_blocks": N,
            "blocks": {"walls_s": blocks, "steps": [1] * N},
        },
        series={"step_time_s": step_times, "phases": {p: [d[p] for d in rank0] for p in PHASES}},
        step_time_s=describe(step_times, serial_series=True),
        phases={p: describe([d[p] for d in rank0], serial_series=True) for p in PHASES},
        per_rank=everyone,
        slowest_rank=max(everyone, key=lambda x: x["step_median_s"])["rank"],
        device_layer={"kind": s.layer},
        h2d={"mode": s.h2d_mode, "copies": True, "note": ""},
    )
    st = steady_state(step_times)
    r.update(steady=st["steady"], steady_state=st)
    straggler = find_straggler(everyone, T)
    r["straggler"] = straggler.to_dict() if straggler is not None else None
    wait0 = sum(a - p for a, p in zip(arrive, pre[0])) / N  # rank 0's mean wait a step
    exposed = wait0 + s.transfer
    sizes = s.buckets or [70_000]
    r["comm"] = {
        "bytes_per_step": sum(sizes),
        "collectives_per_step": s.calls if not ddp else len(sizes),
        "time_s": exposed + (s.overlap if ddp else 0.0),
        "overlap_s": s.overlap if ddp else 0.0,
        "exposed_s": exposed,
        "exposed_ci_lo": exposed * 0.97,
        "exposed_ci_hi": exposed * 1.03,
        "exposed_n": 6,
        "backward_compute_s": s.ranks[0].backward if ddp else None,
        "method": "test",
        "buckets": {"count": len(sizes), "sizes_bytes": sizes} if ddp else None,
    }
    if ddp:
        r["ddp"] = {"buckets": {"count": len(sizes), "sizes_bytes": sizes}, "bucket_cap_mb": 25}
    if s.efficiency is not None:
        sync_s = r["comm"]["time_s"]
        r["comm"]["vs_microbench"] = {
            "reference": "on-rank microbenchmark",
            "achievable_s": s.efficiency * sync_s,
            "achievable_ci_lo": None,
            "achievable_ci_hi": None,
            "sync_s": sync_s,
            "efficiency": s.efficiency,
            "efficiency_ci_lo": None,
            "efficiency_ci_hi": None,
            "sync_busbw_GBps": 0.01,
            "reference_busbw_GBps": 0.01 / s.efficiency,
            "calls": len(sizes),
            "bytes": sum(sizes),
            "method": "test",
            "overlap_s": r["comm"]["overlap_s"],
        }
        per_call = s.efficiency * sync_s / len(sizes)
        r["microbench"] = {
            "sizes": [{"bytes": b, "calls": 1, "time_s": {"median": per_call}} for b in sizes]
        }
    if s.link:
        rec["env"]["link"] = {"rate_bit_s": s.link, "qdisc": "htb"}
    rec["config"].update(sync=s.sync, data={"workers": 0}, probe_steps=6)
    return rec


def T(rec: dict) -> float:
    return rec["result"]["throughput"]["wall_s"] / rec["result"]["steps"]


def healthy() -> Shape:
    return Shape()


def case(name: str, delay: float = 0.1) -> tuple[dict, float | None]:
    """(the case's record, the saving its fix has by construction, as a share of the case's
    step)."""
    base = T(build(healthy()))
    if name == "healthy":
        return build(healthy()), None
    if name.startswith("straggler_"):
        where, rank = name[len("straggler_") :].rsplit("_r", 1)
        ranks = [Rank(), Rank()]
        r = ranks[int(rank)]
        if where == "backward":
            r.backward += delay
        elif where == "data":
            r.data += delay
        else:
            r.optimizer += delay
        rec = build(Shape(ranks=ranks))
        return rec, 1 - base / T(rec)
    if name in ("hiccup_r0", "hiccup_data_r0"):
        at = "data" if name == "hiccup_data_r0" else "optimizer"
        rec = build(Shape(ranks=[Rank(stall=0.3, every=5, stall_at=at), Rank()]))
        return rec, 1 - base / T(rec)
    if name == "per_param":
        rec = build(Shape(sync="per_param", transfer=0.004, calls=22, efficiency=0.3, overlap=0.0))
        return rec, 0.004 / T(rec) * 0.9  # DDP hides most of it
    if name == "busy_host":
        slow = Shape(
            ranks=[Rank(forward=0.0025, backward=0.0065), Rank(forward=0.0025, backward=0.0065)],
            host_busy=0.99,
            own_cpu=0.6,
            runqueue=0.0035,
        )
        rec = build(slow)
        return rec, 1 - base / T(rec)
    if name == "h2d_blocking":
        rec = build(Shape(ranks=[Rank(h2d=delay), Rank(h2d=delay)], layer="fake"))
        return rec, delay / T(
            rec
        ) * 0.97  # a side stream hides the copy (compute is shorter, so not all of it)
    if name.startswith("slow_link"):
        mbit = float(name.rsplit("_", 1)[1].removesuffix("mbit"))
        transfer = 0.6 / mbit  # 30 ms at 20 Mbit/s
        rec = build(Shape(transfer=transfer, efficiency=0.9, link=mbit * 1e6))
        return rec, transfer / 2 / T(rec)  # bf16: half the bytes
    if name == "small_buckets":
        rec = build(Shape(transfer=0.012, efficiency=0.9, buckets=[1000] * 60, link=80e6))
        return rec, 0.010 / T(rec)  # one bucket's latency instead of 60
    raise KeyError(name)
