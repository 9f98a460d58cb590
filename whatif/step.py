"""One predicted training step: compute, DDP's buckets on one communication queue, their overlap.

    step = K (data + h2d + forward) + (K-1) backward alone          # no_sync micro-steps
         + synchronised backward, with DDP's all-reduces beside it   # the simulation below
         + DDP's copy back into .grad (unless gradient_as_bucket_view) + optimizer

The synchronised backward (sync=ddp) follows torch's reducer (reducer.cpp): a bucket is ready with
its last gradient, buckets launch in order, and their collectives run one after another on one
communication queue; PowerSGD is serial. With gloo on CPU, compute and all-reduce slow each other
down by factors calibrated on the run's own DDP timers (calibrate_contention). The simulation's
rules, the other sync modes, and what is not modelled (NOT_MODELLED, printed with every table):
docs/whatif.md "The step model in detail".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from comm import buckets as bk
from whatif.links import Link
from whatif.quantity import Draws, Quantity, Z95, interval

SYNCS = ("ddp", "per_param", "flat", "local")
MAX_SLOWDOWN = (
    5.0  # contention factors beyond this are not CPU sharing (two busy threads per core give ~2)
)
OPTIMS = ("none", "bf16", "fp16", "powersgd")
NOT_MODELLED = (
    "NCCL kernels competing with compute on the GPU",
    "stragglers and skew between ranks",
    "PowerSGD before optim.start_iter (the steady state is predicted)",
    "the optimizer's and data loader's dependence on the world size",
    "how gloo's CPU contention changes with the ranks on a host (the run's own calibration is "
    "kept)",
)


# --------------------------------------------------------------------------------------- the config
@dataclass(frozen=True)
class Config:
    world_size: int
    sync: str
    optim: str
    bucket_cap: object  # MB, or None: DDP's default
    accumulate: int
    bucket_view: bool
    static_graph: bool
    psgd_rank: int
    link: Link | None  # None: the run's own ranks
    link_name: str = "own"
    ranks_per_host: int | None = (
        None  # None: a one-host run stays on its host unless a network link is named
    )

    @classmethod
    def of(cls, prof) -> "Config":
        return cls(
            prof.world_size,
            prof.sync,
            prof.optim,
            prof.bucket_cap,
            prof.accumulate,
            prof.bucket_view,
            prof.static_graph,
            prof.psgd_rank,
            None,
            "own",
        )

    def label(self, base: "Config | None" = None) -> str:
        items = self.items()
        if base is not None:
            b = base.items()
            items = {k: v for k, v in items.items() if b.get(k) != v}
        return " ".join(f"{k}={v}" for k, v in items.items()) or "(the run's own config)"

    def items(self) -> dict[str, str]:
        return {
            "world_size": str(self.world_size),
            **({"ranks_per_host": str(self.ranks_per_host)} if self.ranks_per_host else {}),
            "sync": self.sync,
            "optim": self.optim,
            "bucket": bk.label(self.bucket_cap),
            "accumulate": str(self.accumulate),
            "ddp.gradient_as_bucket_view": str(self.bucket_view).lower(),
            "ddp.static_graph": str(self.static_graph).lower(),
            **({"optim.rank": str(self.psgd_rank)} if self.optim == "powersgd" else {}),
            "link": self.link_name,
        }


KNOB_ALIASES = {
    "bucket": "bucket",
    "bucket_cap_mb": "bucket",
    "optim": "optim",
    "accumulate": "accumulate",
    "sync": "sync",
    "world_size": "world_size",
    "n": "world_size",
    "static_graph": "static_graph",
    "ddp.static_graph": "static_graph",
    "bucket_view": "bucket_view",
    "gradient_as_bucket_view": "bucket_view",
    "ddp.gradient_as_bucket_view": "bucket_view",
    "optim.rank": "psgd_rank",
    "rank": "psgd_rank",
    "link": "link",
    "ranks_per_host": "ranks_per_host",
}


def changed(cfg: Config, change: dict, links: dict | None = None) -> Config:
    """cfg with the knobs of `change` (command-line words: bucket=100, optim=bf16, accumulate=4,
    ...)."""
    out = cfg
    for key, value in (change or {}).items():
        k = KNOB_ALIASES.get(str(key).strip())
        if k is None:
            raise ValueError(
                f"unknown knob {key!r}; the model covers: {', '.join(sorted(set(KNOB_ALIASES)))}"
            )
        v = str(value).strip()
        if k == "bucket":
            out = replace(out, bucket_cap=None if bk.is_default(v) else _positive(float(v), key))
        elif k == "optim":
            if v not in OPTIMS:
                raise ValueError(f"optim={v}: one of {', '.join(OPTIMS)}")
            out = replace(out, optim=v)
        elif k == "sync":
            if v not in SYNCS:
                raise ValueError(f"sync={v}: one of {', '.join(SYNCS)}")
            out = replace(out, sync=v)
        elif k in ("accumulate", "world_size", "psgd_rank", "ranks_per_host"):
            out = replace(out, **{k: int(_positive(float(v), key))})
        elif k in ("static_graph", "bucket_view"):
            if v.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"{key}={v}: true or false")
            out = replace(out, **{k: v.lower() in ("true", "1")})
        elif k == "link":
            if v in ("own", "none", "measured"):
                out = replace(out, link=None, link_name="own")
            else:
                from whatif.links import preset

                link = (links or {}).get(v) or preset(v)
                out = replace(out, link=link, link_name=v)
    if out.sync == "local":
        out = replace(out, world_size=1)
    return out


def _positive(x: float, key: str) -> float:
    if not x > 0 or not math.isfinite(x):
        raise ValueError(f"{key} must be a positive number, got {x}")
    return x


# ---------------------------------------------------------------------------------- the bucket plan
@dataclass
class Seg:
    kind: str  # "net": one all-reduce; "cpu": hook work in the communication queue
    label: str
    nbytes: int = 0
    cost: str = ""  # "cpu": which measured cost, and which share of it
    share: float = 0.0


@dataclass
class BucketPlan:
    index: int
    nbytes: int
    ready_frac: (
        float  # share of backward compute alone done when the bucket's last gradient is ready
    )
    copy_frac: float  # share of DDP's copy_in done by then (bytes ready / all bytes)
    pre: list[
        tuple[str, float]
    ]  # (cost, share) run on the compute thread when the bucket is launched
    segs: list[Seg]
    serial: bool


@dataclass
class Plan:
    buckets: list[BucketPlan]
    copy_in: bool
    copy_out: bool
    notes: list[str]


def plan(prof, cfg: Config) -> Plan:
    p = prof.params
    bkts = bk.assign(p.numel, p.element_size, p.order, cfg.bucket_cap)
    total = p.total_bytes or 1
    seen = 0
    hook = cfg.optim != "none"
    notes = []
    out = []
    psgd_elems, psgd_info = (
        _powersgd_split(prof, bkts, cfg) if cfg.optim == "powersgd" else (None, None)
    )
    for k, b in enumerate(bkts):
        seen += b.nbytes
        ready = max(p.ready[i] for i in b.params)
        share = b.nbytes / total
        pre: list[tuple[str, float]] = []
        serial = False
        if cfg.optim == "none":
            segs = [Seg("net", f"all-reduce {_mb(b.nbytes)}", b.nbytes)]
        elif cfg.optim in ("bf16", "fp16"):
            pre = [(f"cast_{cfg.optim}", share / 2)]
            segs = [
                Seg("net", f"all-reduce {_mb(b.nbytes // 2)} ({cfg.optim})", b.nbytes // 2),
                Seg("cpu", f"{cfg.optim} cast back", cost=f"cast_{cfg.optim}", share=share / 2),
            ]
        else:
            unc, pb, qb, frac = psgd_info[k]
            # the clone kept for the error and the new error: the bucket's bytes in fresh pages (on
            # CPU; a GPU's caching allocator reuses its blocks)
            fresh = getattr(prof, "psgd_alloc", None) is not None
            pre = [("psgd_pre", frac)] + ([("psgd_alloc", share)] if fresh else [])
            segs = [
                Seg("net", f"all-reduce uncompressed {_mb(unc)}", unc),
                Seg("net", f"all-reduce P {_mb(pb)}", pb),
                Seg("cpu", "PowerSGD: orthogonalise P, Q = M^T P", cost="psgd_mid", share=frac),
                Seg("net", f"all-reduce Q {_mb(qb)}", qb),
                Seg("cpu", "PowerSGD: P Q^T, error feedback", cost="psgd_post", share=frac),
            ]
            if fresh:
                segs.append(
                    Seg(
                        "cpu",
                        "PowerSGD: the new error in fresh pages",
                        cost="psgd_alloc",
                        share=share,
                    )
                )
            serial = True
        out.append(BucketPlan(k, b.nbytes, ready, seen / total, pre, segs, serial))
    if cfg.optim == "powersgd" and psgd_elems is not None:
        notes.append(
            f"PowerSGD rank {cfg.psgd_rank}: {psgd_elems[0]:,} of {psgd_elems[1]:,} gradient "
            "elements "
            f"compressed (torch's _should_compress at min_compression_rate {prof.psgd_min_rate:g})"
            + ("; batched_powerSGD_hook: one square matrix per bucket" if prof.psgd_batched else "")
        )
    copy_in = not (cfg.bucket_view and hook)
    return Plan(out, copy_in, not cfg.bucket_view, notes)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.3g} MB"


def _powersgd_split(prof, bkts, cfg: Config):
    """Per bucket: (uncompressed bytes, P bytes, Q bytes, share of the compressed elements), as
    torch's hook splits it (per tensor: view(rows, -1), rank min(rows, cols, r), compressed when
    (rows + cols) r x min_rate < rows cols)."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    p = prof.params
    info, comp_total = [], 0
    rows = []
    for b in bkts:
        unc = pe = qe = comp = 0
        if prof.psgd_batched:
            total = sum(p.numel[i] for i in b.params)
            side = math.ceil(math.sqrt(total))
            pe = qe = side * cfg.psgd_rank
            comp = total
        else:
            for i in b.params:
                shape = prof.shapes[i] if prof.shapes is not None else (p.numel[i],)
                n = int(shape[0])
                m = p.numel[i] // n if n else 0
                r = min(n, m, cfg.psgd_rank)
                if len(shape) > 1 and _should_compress(n, m, r, prof.psgd_min_rate)[0]:
                    pe += n * r
                    qe += m * r
                    comp += p.numel[i]
                else:
                    unc += p.numel[i]
        es = p.element_size[b.params[0]]
        rows.append((unc * es, pe * es, qe * es, comp))
        comp_total += comp
    for unc, pb, qb, comp in rows:
        info.append((unc, pb, qb, comp / comp_total if comp_total else 0.0))
    return (comp_total, sum(p.numel)), info


# --------------------------------------------------------------------------------------- simulation
@dataclass
class Lane:
    compute: list[tuple[float, float, str]] = field(default_factory=list)
    comm: list[tuple[float, float, str, int]] = field(default_factory=list)


@dataclass
class Backward:
    compute_end: float  # the last bucket ready (DDP's backward compute end)
    end: float  # compute done and the queue empty (DDP's finalize)
    first_launch: float
    lane: Lane | None


# The compute thread's script: gradient work (Work) and, at no cost in time, a bucket's last
# gradient ready (Ready), its launch into the communication queue (Launch), and, for a serial hook,
# the wait for it (Wait).
@dataclass(frozen=True)
class Work:
    seconds: float  # alone, without contention
    label: str


@dataclass(frozen=True)
class Ready:
    bucket: int


@dataclass(frozen=True)
class Launch:
    bucket: int


@dataclass(frozen=True)
class Wait:
    bucket: int


Script = list[Work | Ready | Launch | Wait]


@dataclass(frozen=True)
class Queued:
    """One segment of a launched bucket in the communication queue."""

    bucket: int
    last: bool  # the bucket's last segment: the bucket is done when it is
    seconds: float  # alone, without contention
    duty: float  # the share of it that is CPU work (1 for hook work)
    label: str


@dataclass
class Running:
    """A Work item or a segment under way: what is left of it (seconds alone) and when it
    started."""

    item: Work | Queued
    left: float
    start: float


def backward_script(
    buckets: list[BucketPlan], B: float, copy_in: float, costs: dict[str, float]
) -> Script:
    """Gradient work up to each bucket's ready point, the bucket's pre-hook work, its launch, a wait
    for it if its hook is serial; then the rest of backward."""
    script: Script = []
    done_work = 0.0
    for b in buckets:
        ready = b.ready_frac * B + b.copy_frac * copy_in
        if ready > done_work:
            script.append(Work(ready - done_work, "backward"))
            done_work = ready
        script.append(Ready(b.index))
        pre = sum(costs.get(c, 0.0) * s for c, s in b.pre)
        if pre > 0:
            script.append(Work(pre, "comm hook"))
        script.append(Launch(b.index))
        if b.serial:
            script.append(Wait(b.index))
    if B + copy_in > done_work:
        script.append(Work(B + copy_in - done_work, "backward"))
    return script


def simulate_backward(
    buckets: list[BucketPlan],
    B: float,
    copy_in: float,
    costs: dict[str, float],
    net_time: list[list[float]],
    duty: list[list[float]],
    s_c: float = 1.0,
    s_m: float = 1.0,
    record: bool = False,
) -> Backward:
    """One synchronised backward for scalar inputs (seconds of work alone). net_time[k][j] and
    duty[k][j] belong to the j-th segment of bucket k (ignored for "cpu" segments, whose work is
    costs[cost] x share and whose duty is 1).

    The compute thread runs its script (backward_script); the queue runs one segment at a time, in
    order. While both run, compute advances at 1/(1 + (s_c - 1) duty) and the queue at 1/(1 + (s_m -
    1) duty) of their speed alone."""
    script = backward_script(buckets, B, copy_in, costs)
    segs = {
        b.index: [
            Queued(
                b.index,
                j == len(b.segs) - 1,
                net_time[k][j] if s.kind == "net" else costs.get(s.cost, 0.0) * s.share,
                duty[k][j] if s.kind == "net" else 1.0,
                s.label,
            )
            for j, s in enumerate(b.segs)
        ]
        for k, b in enumerate(buckets)
    }
    lane = Lane() if record else None
    done = 1e-12 * max(1.0, B)  # what is left of a piece of work when it is done, but for rounding
    t, ci = 0.0, 0
    doing: Running | None = None  # the compute thread's Work item under way (script[ci])
    queue: list[Queued] = []
    sending: Running | None = None  # the segment in flight
    finished: set[int] = set()
    first_launch = None
    compute_end = 0.0
    last_ready = buckets[-1].index if buckets else None
    # Each pass ends a Work item or a segment (the one that ends first), or the backward; one more
    # pass each where rounding leaves a sliver over `done`. More passes than that is a bug here, not
    # a long backward.
    passes = 2 * (len(script) + sum(map(len, segs.values()))) + 1
    for _ in range(passes):
        while ci < len(script):  # the zero-time items up to the next Work or a pending Wait
            item = script[ci]
            if isinstance(item, Ready):
                if item.bucket == last_ready:
                    compute_end = t
            elif isinstance(item, Launch):
                queue.extend(segs[item.bucket])
                if first_launch is None:
                    first_launch = t
                if not segs[item.bucket]:
                    finished.add(item.bucket)
            elif isinstance(item, Wait):
                if item.bucket not in finished:
                    break
            else:
                if doing is None:
                    doing = Running(item, item.seconds, t)
                break
            ci += 1
        if sending is None and queue:
            seg = queue.pop(0)
            sending = Running(seg, seg.seconds, t)
        computing = ci < len(script) and isinstance(script[ci], Work)
        if not computing and sending is None:
            if ci >= len(script):
                break
            raise RuntimeError(f"simulation stuck at {script[ci]}")
        both = computing and sending is not None
        c_rate = 1.0 / (1.0 + (s_c - 1.0) * sending.item.duty) if both else 1.0
        q_rate = 1.0 / (1.0 + (s_m - 1.0) * sending.item.duty) if both else 1.0
        dts = []
        if computing:
            dts.append(doing.left / c_rate)
        if sending is not None:
            dts.append(sending.left / q_rate)
        dt = max(0.0, min(dts))
        t += dt
        if computing:
            doing.left -= dt * c_rate
            if doing.left <= done:
                if record:
                    lane.compute.append((doing.start, t, doing.item.label))
                doing = None
                ci += 1
        if sending is not None:
            sending.left -= dt * q_rate
            if sending.left <= done:
                seg = sending.item
                if record:
                    lane.comm.append((sending.start, t, seg.label, seg.bucket))
                if seg.last:
                    finished.add(seg.bucket)
                sending = None
    else:
        raise RuntimeError(
            f"the backward simulation did not end in {passes} passes: each pass ends a piece of "
            "work, "
            "so the simulation has a bug"
        )
    return Backward(compute_end, t, first_launch or 0.0, lane)


MIN_CALLS_PER_CALL = 8  # all-reduces a step needs before a longer span is priced per call


def calibrate_serial_calls(prof, comm_span: float) -> tuple[float, str] | None:
    """sync=per_param: its all-reduces run one after another after backward, nothing beside them, so
    their span less the microbenchmark's time for the same calls is what each call costs more in
    training (the sync's Python loop, gloo's queue, a thread's wake-up on busy cores): (seconds per
    call, how), or None with fewer than MIN_CALLS_PER_CALL calls, no longer span, or calls whose
    microbenchmark time is mostly bytes (then a longer span cannot be told from a link slower per
    byte in training: VGG11's 531 MB in 22 calls)."""
    if prof.sync != "per_param" or prof.world_size < 2 or prof.link is None:
        return None
    p = prof.params
    sizes = [ne * es for ne, es in zip(p.numel, p.element_size)]
    if len(sizes) < MIN_CALLS_PER_CALL:
        return None
    point = PointDraws()
    uniq = sorted(set(sizes))
    times, _ = link_times(prof.link, prof.world_size, uniq, point)
    t_of = {s: float(t[0]) for s, t in zip(uniq, times)}
    alone = sum(t_of[s] for s in sizes)
    latency = sum(
        prof.link.time(1, prof.world_size, prof.link.alpha.value, prof.link.busbw.value)
        for _ in sizes
    )
    if comm_span <= alone or latency < 0.5 * alone:
        return None
    per = (comm_span - alone) / len(sizes)
    return per, (
        f"sync=per_param's {len(sizes)} all-reduces took {comm_span * 1e3:.3g} ms against "
        f"{alone * 1e3:.3g} ms for the same calls in the microbenchmark: {per * 1e3:.3g} ms more "
        "per call in training (every call of every configuration pays it)"
    )


def calibrate_contention(prof, compute_under_comm: float, comm_span: float):
    """The two slow-down factors that make the model reproduce this run's own DDP timers:
    compute_under_comm (the last bucket ready, measured with the all-reduces running) and comm_span
    (first launch to the end of finalize, DDP's backward_comm_time), at the inputs' point values.
    Bisection on each, alternated until both settle."""
    cfg = Config.of(prof)
    pl = plan(prof, cfg)
    point = PointDraws()
    x = _inputs(prof, cfg, point)
    link = prof.link
    sizes = sorted({s.nbytes for b in pl.buckets for s in b.segs if s.kind == "net"})
    times, duties = link_times(link, cfg.world_size, sizes, point)
    t_of = {s: float(t[0]) for s, t in zip(sizes, times)}
    net = [[t_of[s.nbytes] if s.kind == "net" else 0.0 for s in b.segs] for b in pl.buckets]
    du = [[1.0 for _ in b.segs] for b in pl.buckets]
    costs = {k: float(v[0]) for k, v in x.items() if k.startswith(("cast_", "psgd_"))}
    B = float(x["backward"][0])
    cin = float(x["copy_in"][0]) if pl.copy_in else 0.0
    cout = float(x["copy_out"][0]) if pl.copy_out else 0.0

    def run(sc, sm):
        return simulate_backward(pl.buckets, B, cin, costs, net, du, sc, sm)

    def solve(f, target, lo=1.0, hi=MAX_SLOWDOWN):
        """(factor, identifiable): the factor in [lo, hi] that brings f to target. Not identifiable
        when the factor barely moves f (nothing overlaps in the simulation): then 1. A target out of
        reach gives the bound (said)."""
        f_lo, f_hi = f(lo), f(hi)
        if f_hi - f_lo < 0.02 * target:
            return 1.0, False
        if f_lo >= target:
            return lo, True
        if f_hi <= target:
            return hi, True
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
        return (lo + hi) / 2, True

    s_c = s_m = 1.0
    ok_c = ok_m = False
    span = lambda r: r.end - r.first_launch + cout  # noqa: E731 - DDP's comm span ends after finalize's copy back
    for _ in range(4):
        s_c, ok_c = solve(lambda v, s_m=s_m: run(v, s_m).compute_end, compute_under_comm)
        s_m, ok_m = solve(lambda v, s_c=s_c: span(run(s_c, v)), comm_span)
    r = run(s_c, s_m)
    per_call = 0.0
    calls = sum(s.kind == "net" for b in pl.buckets for s in b.segs)
    if (
        (not ok_m or s_m >= MAX_SLOWDOWN - 1e-9)
        and span(r) < 0.98 * comm_span
        and calls >= MIN_CALLS_PER_CALL
    ):
        # the span is longer than overlap can make it: what is left is a cost per all-reduce that
        # the microbenchmark's calls (alone, after a barrier) did not see: the reducer's launch, the
        # hook's future, gloo's queue, a thread's wake-up on busy cores. Each of this run's calls
        # gets an equal share of it. With a few calls it cannot be told from a link slower per byte
        # in training (a shaped link's burst spent by back-to-back probe steps): nothing is added.
        base = [row[:] for row in net]

        def with_call(v: float):
            for k, b in enumerate(pl.buckets):
                for j, s in enumerate(b.segs):
                    net[k][j] = base[k][j] + (v if s.kind == "net" else 0.0)
            return span(run(s_c, s_m))

        lo, hi = 0.0, comm_span / max(calls, 1)
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if with_call(mid) < comm_span else (lo, mid)
        per_call = (lo + hi) / 2
        r = run(s_c, s_m)
    how = (
        f"compute {s_c:.2f}x and all-reduce {s_m:.2f}x slower while both run, calibrated so the "
        "model reproduces "
        f"this run's DDP timers (backward compute under all-reduce {compute_under_comm * 1e3:.0f} "
        "ms, model "
        f"{r.compute_end * 1e3:.0f}; all-reduce span {comm_span * 1e3:.0f} ms, model "
        f"{span(r) * 1e3:.0f}) from "
        f"backward alone {B * 1e3:.0f} ms and the all-reduces alone (on-rank microbenchmark)"
    )
    at_bound = [w for w, v in (("compute", s_c), ("all-reduce", s_m)) if v >= MAX_SLOWDOWN - 1e-9]
    if at_bound:
        how += (
            f"; the {' and '.join(at_bound)} factor stopped at its bound {MAX_SLOWDOWN:g} (the "
            "timers ask for more "
            "than the overlap can explain: a noisy or busy run)"
        )
    if not (ok_c and ok_m):
        how += (
            "; "
            + " and ".join(
                w
                for w, ok in (("the compute factor", ok_c), ("the all-reduce factor", ok_m))
                if not ok
            )
            + " could not be calibrated (little or no overlap in this run's own "
            "step): 1 assumed"
        )
    if per_call > 0:
        how += (
            f"; the rest of the span, {per_call * 1e3:.3g} ms per all-reduce, is a cost per call "
            "in training beyond the microbenchmark's (each bucket pays it)"
        )
    return s_c, s_m, per_call, how


# --------------------------------------------------------------------------------------- prediction
class PointDraws:
    """The Draws interface with every input at its point value (one sample)."""

    n = 1
    seed = 0

    def get(self, name: str, q: Quantity) -> np.ndarray:
        return np.array([q.value])


@dataclass
class Prediction:
    config: Config
    label: str
    step_s: float
    lo: float
    hi: float
    samples_per_s: float
    sps_lo: float
    sps_hi: float
    speedup: float | None = None
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    dominant: str = "compute"
    parts: dict[str, float] = field(default_factory=dict)  # point values, seconds
    buckets: list[int] = field(default_factory=list)
    timeline: dict | None = None
    notes: list[str] = field(default_factory=list)
    sps_samples: np.ndarray | None = field(default=None, repr=False)
    sps_model: np.ndarray | None = field(default=None, repr=False)  # without the runs' own scatter

    def as_dict(self) -> dict:
        return {
            "config": self.config.items(),
            "label": self.label,
            "step_s": self.step_s,
            "step_lo": self.lo,
            "step_hi": self.hi,
            "samples_per_s": self.samples_per_s,
            "samples_lo": self.sps_lo,
            "samples_hi": self.sps_hi,
            "speedup": self.speedup,
            "speedup_lo": self.speedup_lo,
            "speedup_hi": self.speedup_hi,
            "dominant": self.dominant,
            "parts_s": self.parts,
            "buckets_bytes": self.buckets,
            "notes": self.notes,
            "level": 0.95,
        }


# How compute time follows the cores a rank gets: time x (cores before / cores after) ** e. 1 would
# be perfect scaling, a best case: one rank with both cores of the 2-core VM ran 5-38% slower than
# that in every committed loopback record (small batches, memory-bound layers). Median [range] of
# the 10 one-rank runs among the loopback records of results/whatif/validation_committed, each
# predicted from its 2-rank source (python -m whatif.calibrate core_scaling <those dirs>); the
# emulated-link validation's one-rank rows are not in it.
CORE_SCALING = (0.577, 0.298, 0.922)


def cpu_share(prof, cfg: Config) -> Quantity:
    """Compute time per rank when a CPU host holds another number of ranks: each rank gets
    min(threads, cores / ranks on its host) cores, and compute takes (cores before / cores after) **
    e as long (CORE_SCALING: calibrated; 1 would be perfect scaling). Ranks per host: as the
    configuration says (ranks_per_host), else a single-host run keeps its one host (more ranks
    share it; an emulated link too) unless a network link is named (then, as a multi-host run, it
    keeps its ranks per host: more hosts). The local launcher gives several ranks one thread each,
    one rank every core."""
    if prof.device != "cpu" or not prof.cores:
        return Quantity.exact(1.0, "same ranks per host")
    per_src = math.ceil(prof.world_size / prof.hosts)
    if cfg.ranks_per_host:
        per_tgt = min(cfg.ranks_per_host, cfg.world_size)
    elif prof.hosts == 1 and (cfg.link is None or cfg.link.same_host):
        per_tgt = cfg.world_size
    else:
        per_tgt = min(per_src, cfg.world_size)
    if per_tgt == per_src:
        return Quantity.exact(1.0, "same ranks per host")
    threads_src = prof.threads or 1
    threads_tgt = 1 if per_tgt > 1 else prof.cores
    c_src = min(threads_src, prof.cores / per_src)
    c_tgt = min(threads_tgt, prof.cores / per_tgt)
    f = c_src / c_tgt
    e, e_lo, e_hi = getattr(prof, "core_scaling", None) or CORE_SCALING
    lo, hi = sorted((f**e_lo, f**e_hi))
    return Quantity(
        f**e,
        lo,
        hi,
        f"CPU cores per rank {c_src:g} -> {c_tgt:g} ({per_src} -> {per_tgt} ranks on "
        f"{prof.cores} cores), compute time x (cores before / after) ** {e:.3g} "
        f"[{e_lo:.3g}, {e_hi:.3g}]",
    )


def _inputs(prof, cfg: Config, draws) -> dict[str, np.ndarray]:
    g = draws.get
    d = {
        "data": g("data", prof.data),
        "h2d": g("h2d", prof.h2d),
        "forward": g("forward", prof.forward),
        "backward": g("backward", prof.backward),
        "optimizer": g("optimizer", prof.optimizer),
        "copy_in": g("copy_in", prof.copy_in),
        "copy_out": g("copy_out", prof.copy_out),
        "cast_bf16": g("cast_bf16", prof.cast["bf16"]),
        "cast_fp16": g("cast_fp16", prof.cast["fp16"]),
        "s_c": g("s_c", prof.contention.s_compute),
        "s_m": g("s_m", prof.contention.s_comm),
        "per_call": g("per_call", prof.contention.per_call),
    }
    psgd = g("psgd", _psgd_cost(prof, cfg))
    for part, share in prof.powersgd_split.items():
        d[f"psgd_{part}"] = psgd * share
    alloc = getattr(prof, "psgd_alloc", None)
    d["psgd_alloc"] = g("psgd_alloc", alloc) if alloc is not None else d["data"] * 0.0
    share = cpu_share(prof, cfg)
    if share.value != 1.0 or share.has_interval:
        f = g(f"cpu_share:{cfg.world_size}", share)
        for k in list(d):
            if k not in ("s_c", "s_m", "per_call"):
                d[k] = d[k] * f
    return d


def _psgd_cost(prof, cfg: Config) -> Quantity:
    """PowerSGD's compute at the configuration's rank: measured at one rank; assumed memory-bound
    (the same) up to rank 4, then proportional to the rank (stated)."""
    if prof.powersgd is None:
        return Quantity.exact(0.0, "PowerSGD compute not measured: 0")
    r, rm = cfg.psgd_rank, prof.powersgd_measured_rank
    factor = 1.0 if max(r, rm) <= 4 else max(r, 4) / max(rm, 4)
    return prof.powersgd.scaled(factor)


def link_times(
    link: Link, n: int, sizes: list[int], draws
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per size: the all-reduce's time (one value per draw) and its CPU duty (host time / time; 1
    without a floor)."""
    a = draws.get(f"link:{link.name}:alpha", link.alpha)
    b = draws.get(f"link:{link.name}:busbw", link.busbw)
    times, duties = [], []
    for s in sizes:
        t = np.asarray(link.time(s, n, a, b), dtype=float) * np.ones_like(a)
        if link.floor is not None:
            fa = draws.get(f"link:{link.floor.name}:alpha", link.floor.alpha)
            fb = draws.get(f"link:{link.floor.name}:busbw", link.floor.busbw)
            f = np.asarray(link.floor.time(s, n, fa, fb), dtype=float) * np.ones_like(a)
            t = np.maximum(t, f)
            duties.append(np.where(t > 0, f / np.where(t > 0, t, 1.0), 1.0))
        else:
            duties.append(np.ones_like(t))
        times.append(t)
    return times, duties


def resolve_link(prof, cfg: Config) -> Link | None:
    """The link a configuration runs on: the record's own ranks (its microbenchmark fit), or the
    named one. gloo on one CPU host keeps the record's own fit as the host floor under a named link
    (see whatif.links)."""
    if cfg.link is None:
        return prof.link
    link = cfg.link
    hosts = prof.record.env.hostnames or []
    if (
        link.floor is None
        and prof.backend == "gloo"
        and prof.device == "cpu"
        and prof.link is not None
        and len(set(hosts)) <= 1
    ):
        link = replace(link, floor=prof.link)
    return link


@dataclass
class _Eval:
    step: np.ndarray
    compute: np.ndarray
    compression: np.ndarray
    buckets: list[int]
    notes: list[str]
    timeline: dict | None


def _evaluate(prof, cfg: Config, draws, timeline: bool = False) -> _Eval:
    n, K, N = cfg.world_size, cfg.accumulate, draws.n
    link = resolve_link(prof, cfg)
    if n > 1 and cfg.sync != "local" and link is None:
        raise ValueError(
            "this record has no measurement of its ranks' link (a one-rank run, or no "
            "microbenchmark): "
            "give one with --link NAME, --nccl-tests FILE or --collectives RECORD"
        )
    x = _inputs(prof, cfg, draws)
    notes: list[str] = []
    zero = np.zeros(N)
    micro = x["data"] + x["h2d"] + x["forward"]
    compression = zero
    bucket_bytes: list[int] = []
    tl = None
    if cfg.sync == "ddp":
        pl = plan(prof, cfg)
        notes += pl.notes
        bucket_bytes = [b.nbytes for b in pl.buckets]
        sizes = sorted({s.nbytes for b in pl.buckets for s in b.segs if s.kind == "net"})
        times, duties = (
            link_times(link, n, sizes, draws)
            if n > 1
            else ([zero] * len(sizes), [zero + 1] * len(sizes))
        )
        # DDP's cost per call in training beyond the microbenchmark's (calibrate_contention)
        times = [t + x["per_call"] for t in times] if n > 1 else times
        t_of, d_of = dict(zip(sizes, times)), dict(zip(sizes, duties))
        copy_in = x["copy_in"] if pl.copy_in else zero
        copy_out = x["copy_out"] if pl.copy_out else zero
        bwd = np.empty(N)
        for i in range(N):
            costs = {k: float(v[i]) for k, v in x.items() if k.startswith(("cast_", "psgd_"))}
            net = [
                [float(t_of[s.nbytes][i]) if s.kind == "net" else 0.0 for s in b.segs]
                for b in pl.buckets
            ]
            du = [
                [float(d_of[s.nbytes][i]) if s.kind == "net" else 1.0 for s in b.segs]
                for b in pl.buckets
            ]
            r = simulate_backward(
                pl.buckets,
                float(x["backward"][i]),
                float(copy_in[i]),
                costs,
                net,
                du,
                float(x["s_c"][i]),
                float(x["s_m"][i]),
                record=timeline and i == 0,
            )
            bwd[i] = r.end
            if timeline and i == 0:
                tl = _timeline(prof, cfg, x, r, float(copy_out[0]), K)
        if cfg.optim in ("bf16", "fp16"):
            compression = x[f"cast_{cfg.optim}"]
        elif cfg.optim == "powersgd":
            compression = sum(x[f"psgd_{p}"] for p in prof.powersgd_split) + 2 * x["psgd_alloc"]
        step = K * micro + (K - 1) * x["backward"] + bwd + copy_out + x["optimizer"]
        compute = K * micro + K * x["backward"] + copy_in + copy_out + x["optimizer"]
        alloc = getattr(prof, "psgd_alloc", None)
        if cfg.optim == "powersgd" and alloc is not None:
            notes.append(
                f"PowerSGD's clone and new error, 2 x {prof.params.total_bytes / 1e6:.4g} MB a "
                f"step in fresh pages: {2 * alloc.value * 1e3:.3g} ms ({alloc.source})"
            )
        if cfg.optim == "powersgd" and prof.powersgd is None:
            notes.append(
                "PowerSGD's compute is not in this record (no grad_ready probe): left out, so this "
                "row is a "
                "lower bound on the step"
            )
        if cfg.optim in ("bf16", "fp16") and not prof.cast[cfg.optim].value:
            notes.append(f"the {cfg.optim} cast is not in this record: left out (optimistic)")
        if cfg.bucket_view != prof.bucket_view and not prof.copy_out.value:
            notes.append(
                "DDP's gradient copies are not in this record: gradient_as_bucket_view's saving "
                "shows as 0"
            )
    else:
        comm = zero
        extra = zero
        if cfg.sync in ("per_param", "flat") and n > 1:
            sizes = (
                [ne * es for ne, es in zip(prof.params.numel, prof.params.element_size)]
                if cfg.sync == "per_param"
                else [prof.params.total_bytes]
            )
            uniq = sorted(set(sizes))
            times, _ = link_times(link, n, uniq, draws)
            t_of = dict(zip(uniq, times))
            # the cost per call in training beyond the microbenchmark's (calibrate_contention;
            # sync=per_param: calibrate_serial_calls)
            comm = sum(t_of[s] + x["per_call"] for s in sizes)
            if cfg.sync == "flat":
                extra = x["copy_in"] + x["copy_out"]
        step = K * (micro + x["backward"]) + extra + comm + x["optimizer"]
        compute = step - comm
        if timeline:
            tl = _timeline_serial(cfg, x, K, comm, extra)
    share = cpu_share(prof, cfg)
    if share.value != 1.0:
        notes.append(
            f"compute per rank x {share.value:.3g} [{share.lo:.3g}, {share.hi:.3g}]: "
            f"{share.source} "
            "(stated scaling, cores / ranks)"
        )
    if cfg.static_graph != prof.static_graph:
        notes.append(
            "ddp.static_graph: modelled as no change (without find_unused_parameters DDP does no "
            "per-step "
            "graph search that a static graph would save; source 003 measured 'negligible')"
        )
    if cfg.link is not None and link is not None and link.floor is not None:
        notes.append(
            f"link {cfg.link_name}: the slower of the link and this host's own all-reduce "
            f"({link.floor.name})"
        )
    return _Eval(step, compute, compression, bucket_bytes, notes, tl)


def predict(
    prof, cfg: Config, draws: Draws, own: "Prediction | None" = None, timeline: bool = False
) -> Prediction:
    """The configuration's step: the model at the inputs' point values, and its 95% prediction
    interval over the joint draws, widened by a new run's own scatter (_noise). The speed-up against
    `own` is the typical one: its interval is the model's uncertainty over paired draws, without the
    scatter of single runs."""
    pt = _evaluate(prof, cfg, PointDraws(), timeline=timeline)
    ev = _evaluate(prof, cfg, draws)
    samples = cfg.world_size * prof.batch_per_rank * cfg.accumulate
    step_draws = ev.step * _noise(prof, draws, cfg)
    lo, hi = interval(step_draws)
    sps = samples / step_draws
    slo, shi = interval(sps)
    step = float(pt.step[0])
    compute, compression = float(pt.compute[0]), float(pt.compression[0])
    exposed = max(0.0, step - compute - compression)
    parts = {"compute_s": compute, "exposed_comm_s": exposed, "compression_s": compression}
    dominant = max(
        (("compute", compute), ("exposed comm", exposed), ("compression", compression)),
        key=lambda kv: kv[1],
    )[0]
    pred = Prediction(
        cfg,
        cfg.label(Config.of(prof)),
        step,
        lo,
        hi,
        samples / step,
        slo,
        shi,
        dominant=dominant,
        parts=parts,
        buckets=pt.buckets,
        timeline=pt.timeline,
        notes=pt.notes,
        sps_samples=sps,
        sps_model=samples / ev.step,
    )
    if own is not None and own.sps_model is not None:
        # the typical speed-up: the model's uncertainty (paired draws), not the scatter of two
        # single runs
        pred.speedup = pred.samples_per_s / own.samples_per_s
        pred.speedup_lo, pred.speedup_hi = interval(pred.sps_model / own.sps_model)
    return pred


def _noise(prof, draws, cfg: Config) -> np.ndarray:
    """How a measured step median scatters about the model's value, as a factor about 1
    (log-normal):
    - the source run's own offset from its configuration's typical run: the run-to-run sd less the
      part the inputs'
      intervals already carry (the source's step-median interval), shared by every configuration
      predicted from it, so it cancels in a speed-up;
    - the target run's offset from its configuration's typical run: the larger of the run-to-run sd
      and the source's
      own step-median interval, drawn independently for every configuration."""
    if draws.n <= 1:
        return np.ones(draws.n)
    within = (
        prof.step_noise if prof.step_noise is not None and prof.step_noise.has_interval else None
    )
    w_sd = math.log(within.hi / within.lo) / (2 * Z95) if within is not None else 0.0
    rr = prof.run_to_run_sd
    src_sd = math.sqrt(max(0.0, rr * rr - w_sd * w_sd))
    tgt_sd = max(rr, w_sd)
    out = np.ones(draws.n)
    if src_sd > 0:
        out = out * draws.get("noise:source", Quantity.relative(1.0, math.exp(Z95 * src_sd) - 1.0))
    if tgt_sd > 0:
        tgt = (
            within
            if w_sd >= rr and within is not None
            else Quantity.relative(1.0, math.exp(Z95 * rr) - 1.0)
        )
        out = out * draws.get(f"noise:{cfg.label()}", tgt)
    return out


# ---------------------------------------------------------------------------------------- timelines
def _timeline(prof, cfg: Config, x: dict, r: Backward, copy_out: float, K: int) -> dict:
    """One predicted step (point values) as lanes of (start, end, label) in seconds from the step's
    start."""
    before = []
    t = 0.0
    for _ in range(K - 1):
        w = float((x["data"] + x["h2d"] + x["forward"] + x["backward"])[0])
        before.append((t, t + w, "no_sync micro-step"))
        t += w
    w = float((x["data"] + x["h2d"])[0])
    if w > 0:
        before.append((t, t + w, "data + h2d"))
        t += w
    f = float(x["forward"][0])
    before.append((t, t + f, "forward"))
    t += f
    compute = before + [(t + a, t + b, lab) for a, b, lab in r.lane.compute]
    comm = [(t + a, t + b, lab, k) for a, b, lab, k in r.lane.comm]
    end = t + r.end
    if copy_out > 0:
        compute.append((end, end + copy_out, "DDP copy back"))
        end += copy_out
    o = float(x["optimizer"][0])
    compute.append((end, end + o, "optimizer"))
    return {"compute": compute, "comm": comm, "step_s": end + o, "backward_start_s": t}


def _timeline_serial(cfg: Config, x: dict, K: int, comm, extra) -> dict:
    t = 0.0
    compute = []
    for k in range(K):
        w = float((x["data"] + x["h2d"] + x["forward"] + x["backward"])[0])
        compute.append((t, t + w, "forward + backward" if k == K - 1 else "micro-step"))
        t += w
    c = float(np.asarray(comm)[0]) if np.ndim(comm) else float(comm)
    e = float(np.asarray(extra)[0]) if np.ndim(extra) else float(extra)
    lanes = []
    if e > 0:
        compute.append((t, t + e / 2, "copy in"))
        t += e / 2
    if c > 0:
        lanes.append(
            (t, t + c, f"{cfg.sync} all-reduce" + ("s" if cfg.sync == "per_param" else ""), 0)
        )
        t += c
    if e > 0:
        compute.append((t, t + e / 2, "copy out"))
        t += e / 2
    o = float(x["optimizer"][0])
    compute.append((t, t + o, "optimizer"))
    return {"compute": compute, "comm": lanes, "step_s": t + o, "backward_start_s": None}
