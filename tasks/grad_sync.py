"""task=grad_sync: the VGG11 thread's comparison, for any model of the project.

The model is built on the meta device for its shapes only; each rank holds one fp32 "gradient" per
parameter with a deterministic pattern, so every method's result is checked exactly against the
expected sum. On the same ranks and buffers it times one gradient synchronisation five ways:
per_param, flat, bucketed (torch's own bucket assignment, DDP's reducer without a backward to
overlap), coalesced and the microbenchmark of the same bytes (docs/config.md). The figure is the
median over `iters` syncs, averaged over ranks, and the slowest rank's.
"""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

from comm import CorrectnessError
from comm import bandwidth as bw
from comm.fit import fit_latency_bandwidth
from comm.measure import Clock, gather_all, rank_stats, resolve_device, time_window
from device import synchronize
import base.schema as schema
from device.host import Host, check_buffers
from base.errors import ConfigError
from base.schema import typed
from base.record import Record, typed_block
from base.record_types import (
    Bandwidth,
    GradSyncResult,
    GroupSync,
    LatencyFit,
    ParamSync,
    SyncMethod,
    SyncMethods,
)
from comm.buckets import bucket_rule, limits as bucket_limits

METHODS = ("per_param", "flat", "bucketed", "coalesced")
PATTERN_PERIOD = 7  # gradient values are ((i + k) % 7 + 1) * (rank + 1) for element i of tensor k
PATTERN_LEN = PATTERN_PERIOD * 4096
LATENCY_BYTES = 4
SMALL_CALL_BYTES = 64 << 10  # per-parameter calls this small are all latency (biases, small convs)


# ------------------------------------------------------------------------------------------- config
def settings(cfg) -> schema.GradSync:
    """cfg.grad_sync as its typed dataclass (the bucket size is the top-level `bucket`, as for
    task=train)."""
    return typed(schema.GradSync, cfg.grad_sync)


def check(cfg, submitting: bool = False, host: Host | None = None) -> None:
    from models import check as check_model

    host = host or Host.probe()
    check_model(cfg.model)
    total = sum(torch.Size(s).numel() for _, s in param_shapes(cfg)) * 4
    check_buffers(
        cfg,
        host,
        key="grad_sync.device",
        per_rank_bytes=3 * total,  # the gradients three times: gradients, flat buffer, DDP buckets
        what=f"task=grad_sync with model={cfg.model.name} (3 copies of {bw.fmt_bytes(total)} of "
        "gradients "
        "per rank)",
        fix="Use fewer ranks per node or a smaller model",
        submitting=submitting,
    )


def largest_collective(cfg) -> tuple[int, str]:
    """The model's fp32 gradients in one call (the microbenchmark row; the emulated link's timeout
    check)."""
    from models import gradient_bytes

    return gradient_bytes(cfg.model, 224), "one step's fp32 gradients"


def param_shapes(cfg) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every trainable parameter, in model.parameters() order, without allocating
    the model."""
    return model_gradients(cfg)[0]


def model_gradients(cfg) -> tuple[list[tuple[str, tuple[int, ...]]], list[int], str]:
    """Parameter shapes, the order autograd makes their gradients ready (what DDP's reducer records
    to rebuild its buckets), and how that order was found. Model and backward run on the meta
    device: shapes only, no memory."""
    from models import build_model

    image_size = int(cfg.scale.image_size)
    try:
        with torch.device("meta"):
            model = build_model(cfg.model, image_size)
    except (
        RuntimeError,
        NotImplementedError,
    ):  # a model whose __init__ reads tensor values: build it for real
        model = build_model(cfg.model, image_size)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    shapes = [(n, tuple(p.shape)) for n, p in params]
    reverse = list(reversed(range(len(params))))
    if not params or params[0][1].device.type != "meta":
        return shapes, reverse, "reverse parameter order (DDP's initial guess)"
    index = {id(p): i for i, (_, p) in enumerate(params)}
    order: list[int] = []
    handles = [
        p.register_post_accumulate_grad_hook(lambda t: order.append(index[id(t)]))
        for _, p in params
    ]
    try:
        shape = tuple(
            cfg.model.get("input_shape") or (3, image_size, image_size)
        )  # model=custom says its own
        model(torch.zeros(1, *shape, device="meta")).sum().backward()
    except Exception as e:  # noqa: BLE001 - any model whose forward does not run on meta tensors
        return (
            shapes,
            reverse,
            (
                f"reverse parameter order (DDP's initial guess; meta backward failed: "
                f"{type(e).__name__})"
            ),
        )
    finally:
        for h in handles:
            h.remove()
    seen = set(order)
    order = list(dict.fromkeys(order)) + [
        i for i in reverse if i not in seen
    ]  # unused parameters last
    return (
        shapes,
        order,
        "autograd's gradient-ready order (meta-device backward), as DDP rebuilds its buckets",
    )


# ---------------------------------------------------------------------------------------- gradients
class Grads:
    """One fp32 gradient per parameter, filled with an exact, rank-dependent pattern."""

    def __init__(self, shapes, rank: int, world: int, device: torch.device):
        self.names = [n for n, _ in shapes]
        self.tensors = [torch.empty(s, dtype=torch.float32, device=device) for _, s in shapes]
        self.rank, self.world = rank, world
        base = torch.arange(PATTERN_LEN + PATTERN_PERIOD, device=device) % PATTERN_PERIOD + 1
        self._base = base.float()

    def _pattern(self, k: int) -> torch.Tensor:
        s = k % PATTERN_PERIOD
        return self._base[s : s + PATTERN_LEN]

    @staticmethod
    def _tiles(t: torch.Tensor):
        flat = t.view(-1)
        full = flat.numel() // PATTERN_LEN * PATTERN_LEN
        return flat[:full].view(-1, PATTERN_LEN), flat[full:]

    def fill(self) -> None:
        for k, t in enumerate(self.tensors):
            body, tail = self._tiles(t)
            p = self._pattern(k) * (self.rank + 1)
            body.copy_(p.expand_as(body))
            tail.copy_(p[: tail.numel()])

    def wrong_after_sum(self) -> int:
        """Elements that differ from the exact SUM over ranks of what fill() wrote."""
        scale = self.world * (self.world + 1) / 2
        wrong = 0
        for k, t in enumerate(self.tensors):
            body, tail = self._tiles(t)
            p = self._pattern(k) * scale
            wrong += int((body != p).sum().item()) + int((tail != p[: tail.numel()]).sum().item())
        return wrong

    @property
    def total_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)


# ------------------------------------------------------------------------------------------ methods
class PerParam:
    """The thread's loop; a mark before every call gives per-parameter times (CUDA events on GPU,
    like the thread)."""

    name, calls_label = "per_param", "one all_reduce per parameter"

    def __init__(self, grads: Grads):
        self.grads = grads
        self.calls = len(grads.tensors)

    def __call__(self, clock: Clock) -> list:
        marks = []
        for t in self.grads.tensors:
            marks.append(clock.mark())
            dist.all_reduce(t)
        marks.append(clock.mark())
        return marks


class Flat:
    name, calls = "flat", 1
    calls_label = "copy into one buffer, one all_reduce, copy back"

    def __init__(self, grads: Grads, device):
        self.grads = grads
        self.views = [t.view(-1) for t in grads.tensors]
        # zeros, not empty: the pages are touched here, so first-touch faults stay out of the first
        # timed sync
        self.buffer = torch.zeros(
            sum(v.numel() for v in self.views), dtype=torch.float32, device=device
        )
        self.outs = list(self.buffer.split([v.numel() for v in self.views]))

    def __call__(self, clock: Clock) -> list:
        m0 = clock.mark()
        torch.cat(self.views, out=self.buffer)
        m1 = clock.mark()
        dist.all_reduce(self.buffer)
        m2 = clock.mark()
        torch._foreach_copy_(self.views, self.outs)
        return [m0, m1, m2, clock.mark()]


class Bucketed:
    name = "bucketed"

    def __init__(
        self, grads: Grads, bucket_mb: float | None, device, ready: list[int] | None = None
    ):
        self.grads = grads
        ready = list(reversed(range(len(grads.tensors)))) if ready is None else ready
        limits = bucket_limits(bucket_mb)  # as DDP(bucket_cap_mb=...) rebuilds its buckets
        order, _ = dist._compute_bucket_assignment_by_size(
            [grads.tensors[i] for i in ready], limits
        )
        self.buckets = [[ready[j] for j in b] for b in order]
        self.views = [[grads.tensors[i].view(-1) for i in b] for b in self.buckets]
        self.buffers = [
            torch.zeros(sum(v.numel() for v in vs), dtype=torch.float32, device=device)
            for vs in self.views
        ]
        self.outs = [
            list(buf.split([v.numel() for v in vs])) for buf, vs in zip(self.buffers, self.views)
        ]
        self.calls = len(self.buckets)
        self.calls_label = (
            f"{self.calls} DDP buckets ({bucket_rule(bucket_mb)}), async all_reduce per bucket, "
            "wait "
            "at the end"
        )
        self.bucket_bytes = [b.numel() * 4 for b in self.buffers]

    def __call__(self, clock: Clock) -> list:
        m0 = clock.mark()
        works = []
        for buf, vs in zip(self.buffers, self.views):
            torch.cat(vs, out=buf)
            works.append(dist.all_reduce(buf, async_op=True))
        for w in works:
            w.wait()
        m1 = clock.mark()
        for vs, outs in zip(self.views, self.outs):
            torch._foreach_copy_(vs, outs)
        return [m0, m1, clock.mark()]


class Coalesced:
    name, calls = "coalesced", 1

    def __init__(self, grads: Grads, backend: str, device):
        self.grads = grads
        self.calls_label = (
            f"_coalescing_manager around the {len(grads.tensors)} all_reduce calls -> "
            f"ProcessGroup({backend}).allreduce_coalesced, one call"
        )

    def __call__(self, clock: Clock) -> list:
        from torch.distributed.distributed_c10d import _coalescing_manager

        m0 = clock.mark()
        with _coalescing_manager():
            for t in self.grads.tensors:
                dist.all_reduce(t)
        return [m0, clock.mark()]


# ---------------------------------------------------------------------------------------------- run
def run(ctx) -> GradSyncResult | None:
    gs = settings(ctx.cfg)
    device = resolve_device(gs.device, ctx.backend, ctx.torch_device, ctx.local_rank)
    rank, world = ctx.rank, ctx.world_size
    shapes, ready, order_how = model_gradients(ctx.cfg)
    if not shapes:
        raise ConfigError(
            f"model {ctx.cfg.model.get('name')} has no trainable parameters to synchronise."
        )
    grads = Grads(shapes, rank, world, device)
    methods = [
        PerParam(grads),
        Flat(grads, device),
        Bucketed(grads, ctx.cfg.bucket, device, ready),
        Coalesced(grads, ctx.backend, device),
    ]

    mine: dict = {"methods": {}, "micro": {}}
    for m in methods:
        mine["methods"][m.name] = _time_method(m, grads, gs, device)

    # the microbenchmark: one all_reduce of the same bytes, back-to-back, in the flat buffer
    # (zeroed: values don't grow)
    flat = methods[1].buffer
    groups = _groups(grads.names)
    sizes = {"total": grads.total_bytes, "latency": LATENCY_BYTES}
    for g, idx in groups.items():
        sizes[f"group:{g}"] = sum(grads.tensors[i].numel() * 4 for i in idx)
    for key, nbytes in sizes.items():
        buf = flat[: nbytes // 4]
        buf.zero_()
        for _ in range(gs.warmup_iters):
            dist.all_reduce(buf)
        iters = gs.iters if key != "latency" else max(20, gs.iters)
        mine["micro"][key] = time_window(lambda buf=buf: dist.all_reduce(buf), iters, device)

    everyone = gather_all(mine)
    result = (
        _result(ctx, gs, device, grads, methods, groups, sizes, everyone, order_how)
        if ctx.is_main
        else None
    )
    wrong = {
        name: sum(r["methods"][name]["wrong"] or 0 for r in everyone) for name in mine["methods"]
    }
    if (
        any(wrong.values()) and ctx.is_main
    ):  # only rank 0: its record must be written before peers exit
        bad = ", ".join(f"{k}: {v}" for k, v in wrong.items() if v)
        raise CorrectnessError(
            f"grad_sync: gradients differ from the exact sum after sync ({bad} wrong elements)",
            result,
        )
    return result


def _time_method(method, grads: Grads, gs: schema.GradSync, device) -> dict:
    clock = Clock(device)
    runs = []
    try:
        for i in range(gs.warmup_iters + gs.iters):
            grads.fill()
            synchronize(device)
            dist.barrier()
            marks = method(clock)
            synchronize(device)
            if i >= gs.warmup_iters:
                runs.append([clock.seconds(a, b) for a, b in zip(marks[:-1], marks[1:])])
    except dist.DistError:
        raise
    except (RuntimeError, NotImplementedError, ValueError) as e:
        if (
            not isinstance(method, Coalesced) or runs
        ):  # only coalescing may be missing from a backend
            raise
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return {"unsupported": msg, "wrong": None}
    parts = [statistics.median(col) for col in zip(*runs)]
    return {
        "total_s": statistics.median(sum(r) for r in runs),
        "parts_s": parts,
        "wrong": grads.wrong_after_sum(),
    }


def _groups(names: list[str]) -> dict[str, list[int]]:
    """Top-level modules (VGG11: features, classifier), in parameter order."""
    groups: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        groups.setdefault(n.split(".")[0], []).append(i)
    return groups


def _across(everyone, getter) -> dict:
    vals = [getter(r) for r in everyone]
    st = rank_stats(vals)
    return {"time_s": st["avg"], "time_max_s": st["max"], "slowest_rank": st["slowest_rank"]}


def _bw(nbytes: int, t: float, world: int) -> dict:
    return {
        "algbw_GBps": bw.algbw(nbytes, t),
        "busbw_GBps": bw.busbw("all_reduce", nbytes, t, world),
    }


def _result(
    ctx, gs: schema.GradSync, device, grads, methods, groups, sizes, everyone, order_how
) -> GradSyncResult:
    world = ctx.world_size
    total = grads.total_bytes
    per_param = []
    for k, (name, t) in enumerate(zip(grads.names, grads.tensors)):
        nbytes = t.numel() * 4
        x = _across(everyone, lambda r, k=k: r["methods"]["per_param"]["parts_s"][k])
        per_param.append(
            ParamSync(
                name=name,
                group=name.split(".")[0],
                shape=list(t.shape),
                numel=t.numel(),
                bytes=nbytes,
                **x,
                **_bw(nbytes, x["time_s"], world),
            )
        )

    out_methods = SyncMethods()
    for m in methods:
        mine0 = everyone[0]["methods"][m.name]
        if mine0.get("unsupported"):
            setattr(
                out_methods,
                m.name,
                SyncMethod(calls=m.calls, how=m.calls_label, unsupported=mine0["unsupported"]),
            )
            continue
        x = _across(everyone, lambda r, m=m: r["methods"][m.name]["total_s"])
        entry = SyncMethod(
            calls=m.calls,
            how=m.calls_label,
            **x,
            **_bw(total, x["time_s"], world),
            wrong=sum(r["methods"][m.name]["wrong"] for r in everyone),
        )
        if m.name == "flat":
            pk, ar, up = (
                _across(everyone, lambda r, i=i: r["methods"]["flat"]["parts_s"][i])["time_s"]
                for i in range(3)
            )
            entry.phases_s = {"pack": pk, "all_reduce": ar, "unpack": up}
        if m.name == "bucketed":
            entry.bucket_mb = "default" if ctx.cfg.bucket is None else float(ctx.cfg.bucket)
            entry.bucket_rule = bucket_rule(ctx.cfg.bucket)
            entry.bucket_bytes = m.bucket_bytes
            entry.bucket_params = [[grads.names[i] for i in b] for b in m.buckets]
            entry.order = order_how
            red, up = (
                _across(everyone, lambda r, i=i: r["methods"]["bucketed"]["parts_s"][i])["time_s"]
                for i in range(2)
            )
            entry.phases_s = {"pack+all_reduce": red, "unpack": up}
        setattr(out_methods, m.name, entry)
    micro = {}
    for key, nbytes in sizes.items():
        x = _across(everyone, lambda r, key=key: r["micro"][key])
        micro[key] = Bandwidth(bytes=nbytes, **x, **_bw(nbytes, x["time_s"], world))
    t = micro["total"]
    out_methods.microbench = SyncMethod(
        calls=1,
        how="one all_reduce of a standalone buffer of the same bytes, "
        "back-to-back like task=collectives",
        bytes=t.bytes,
        time_s=t.time_s,
        time_max_s=t.time_max_s,
        slowest_rank=t.slowest_rank,
        algbw_GBps=t.algbw_GBps,
        busbw_GBps=t.busbw_GBps,
    )

    group_rows = []
    for g, idx in groups.items():
        pp = sum(per_param[i].time_s for i in idx)
        mg = micro[f"group:{g}"]
        mb = mg.time_s
        group_rows.append(
            GroupSync(
                group=g,
                tensors=len(idx),
                bytes=mg.bytes,
                per_param_s=pp,
                microbench_s=mb,
                microbench_busbw_GBps=mg.busbw_GBps,
                ratio=pp / mb if mb > 0 else None,
            )
        )

    fit = fit_latency_bandwidth([{"bytes": p.bytes, "time_s": p.time_s} for p in per_param])
    result = GradSyncResult(
        model=ctx.cfg.model.get("name"),
        params=sum(p.numel for p in per_param),
        param_tensors=len(per_param),
        total_bytes=total,
        dtype="float32",
        reduce_op="sum",
        world_size=world,
        backend=ctx.backend,
        device=str(device),
        warmup_iters=gs.warmup_iters,
        iters=gs.iters,
        timing="CUDA events on the current stream"
        if device.type == "cuda"
        else "time.perf_counter",
        per_param=per_param,
        groups=group_rows,
        methods=out_methods,
        latency=micro["latency"],
        fit=typed_block(LatencyFit, fit, "result.fit"),
    )
    result.explanation = explain(result)
    result.headline = _headline(result)
    return result


def explain(r: GradSyncResult) -> list[str]:
    """What explains per-parameter vs one call of the same bytes, from this run's numbers."""
    meth = r.methods
    n = r.param_tensors
    t_pp = meth.per_param.time_s
    t_mb = meth.microbench.time_s
    probe = r.latency.time_s
    small = sorted(p.time_s for p in r.per_param if p.bytes <= SMALL_CALL_BYTES)
    ms = lambda t: f"{t * 1e3:.3g} ms"  # noqa: E731 - a one-line formatter, here only
    if (
        len(small) >= 3
    ):  # latency as the loop itself pays it: its calls too small to be bandwidth-bound
        lat = statistics.median(small)
        lat_how = (
            f"median of the {len(small)} per-parameter calls of <= "
            f"{bw.fmt_bytes(SMALL_CALL_BYTES)}; an "
            f"isolated {LATENCY_BYTES} B all_reduce, back-to-back: {ms(probe)}"
        )
    else:
        lat, lat_how = probe, f"an isolated {LATENCY_BYTES} B all_reduce, back-to-back"
    gap = t_pp - t_mb
    extra_latency = (n - 1) * lat
    lines = [
        f"per_param made {n} all_reduce calls, microbench 1, for the same "
        f"{bw.fmt_bytes(r.total_bytes)}: "
        f"{ms(t_pp)} vs {ms(t_mb)} ({t_pp / t_mb:.2f}x).",
        f"Per-call latency here: {ms(lat)} ({lat_how}); one call of the total moves "
        f"{meth.microbench.busbw_GBps:.3g} GB/s busbw.",
    ]
    noise = max(
        0.05 * max(t_pp, t_mb),
        abs(meth.microbench.time_max_s - t_mb),
        abs(meth.per_param.time_max_s - t_pp),
    )
    if abs(gap) <= noise:
        lines.append(
            f"The two differ by {ms(gap)}, within the spread of this measurement ({ms(noise)}): "
            f"the {n} calls' latency "
            f"({n} x {ms(lat)} = {ms(n * lat)}, {100 * n * lat / t_pp:.0f}% of per_param) is small "
            "next to moving "
            "the bytes, so this sync is bandwidth-bound and fewer, larger calls would not help "
            "much here."
        )
    elif gap > 0:
        share = extra_latency / gap
        if share >= 0.5:
            lines.append(
                f"per_param is {ms(gap)} slower; {n - 1} extra calls x {ms(lat)} latency = "
                f"{ms(extra_latency)} "
                f"explain {100 * min(share, 1):.0f}% of it: the number of collectives x per-call "
                "latency dominates. "
                f"Fewer, larger calls (flat, bucketed, coalesced) remove it."
            )
        else:
            moving = t_pp - n * lat
            eff = bw.algbw(r.total_bytes, moving) if moving > 0 else None
            lines.append(
                f"per_param is {ms(gap)} slower; {n - 1} extra calls x {ms(lat)} latency = "
                f"{ms(extra_latency)} "
                f"explain only {100 * max(share, 0):.0f}% of it. The rest "
                f"({ms(gap - extra_latency)}) is bandwidth: "
                + (
                    f"with the latency taken out, the per-parameter calls move {eff:.3g} GB/s "
                    "algbw against "
                    f"{meth.microbench.algbw_GBps:.3g} GB/s for one call of the total"
                    if eff is not None
                    else "the per-parameter calls move data slower than one call of the total"
                )
                + "."
            )
    else:
        lines.append(
            f"per_param is {ms(-gap)} faster than one call of the total: on this backend several "
            "smaller "
            f"calls move the bytes faster than one large one (per-call latency {ms(lat)})."
        )
    flat = meth.flat
    if flat is not None and flat.phases_s is not None:
        ph = flat.phases_s
        lines.append(
            f"flat = pack {ms(ph['pack'])} + all_reduce {ms(ph['all_reduce'])} + unpack "
            f"{ms(ph['unpack'])}: "
            f"the copies cost {100 * (ph['pack'] + ph['unpack']) / flat.time_s:.0f}% of it."
        )
    fit = r.fit
    if fit is not None and fit.beta_GBps and fit.alpha_s > 0:
        lines.append(
            f"Fit over the {fit.points} per-parameter calls, t = alpha + bytes/beta (relative "
            "error): "
            f"alpha = {ms(fit.alpha_s)} per call, beta = {fit.beta_GBps:.3g} GB/s algbw; "
            f"{n} x alpha = {ms(n * fit.alpha_s)} of per_param's {ms(t_pp)}."
        )
    return lines


def _headline(r: GradSyncResult) -> dict:
    m = r.methods
    h = {"model": r.model, "ranks": r.world_size, "MiB": round(r.total_bytes / 2**20, 1)}
    for name in ("per_param", "flat", "bucketed", "coalesced", "microbench"):
        t = getattr(m, name).time_s if getattr(m, name) is not None else None
        h[f"{name} ms"] = round(t * 1e3, 3) if t is not None else None
    if m.microbench.time_s > 0:
        h["per_param/microbench x"] = round(m.per_param.time_s / m.microbench.time_s, 3)
    return h


# ---------------------------------------------------------------------------------------- summarize
def summarize(record: Record) -> str:
    r: GradSyncResult = record.result
    if r is None or not r.per_param:
        return "grad_sync: no result"
    ms = lambda t: f"{t * 1e3:10.3f}"  # noqa: E731 - a one-line formatter, here only
    lines = [
        f"grad_sync: {r.model}, {r.param_tensors} parameter tensors, {r.params:,} params = "
        f"{bw.fmt_bytes(r.total_bytes)} of fp32 gradients; {r.world_size} ranks, backend "
        f"{r.backend}, "
        f"device {r.device}",
        f"each method: {r.warmup_iters} warm-up + {r.iters} timed syncs (median; barrier before "
        "each, "
        f"{r.timing}); time = average over ranks; busbw = algbw x 2(n-1)/n, GB = 1e9 B",
        "",
        "per-parameter all_reduce (the thread's loop):",
        f"{'#':>3}  {'parameter':<34} {'shape':<20} {'bytes':>12} {'time ms':>10} {'algbw':>7} "
        f"{'busbw':>7}",
    ]
    for i, p in enumerate(r.per_param):
        lines.append(
            f"{i:>3}  {p.name:<34} {'x'.join(map(str, p.shape)):<20} {p.bytes:>12} "
            f"{ms(p.time_s)} {p.algbw_GBps:>7.3f} {p.busbw_GBps:>7.3f}"
        )
    lines += [
        "",
        "by top-level module (per-parameter sum vs one all_reduce of the same bytes):",
        f"     {'module':<16} {'tensors':>7} {'size':>11} {'per-param ms':>13} {'one call ms':>12} "
        f"{'ratio':>6}",
    ]
    for g in r.groups:
        ratio = f"{g.ratio:.2f}x" if g.ratio else "-"
        lines.append(
            f"     {g.group:<16} {g.tensors:>7} {bw.fmt_bytes(g.bytes):>11} "
            f"{g.per_param_s * 1e3:>13.3f} {g.microbench_s * 1e3:>12.3f} {ratio:>6}"
        )
    lines += [
        "",
        f"one sync of all {bw.fmt_bytes(r.total_bytes)}:",
        f"     {'method':<11} {'calls':>5} {'time ms':>10} {'slowest':>10} {'algbw':>7} "
        f"{'busbw':>7}  how",
    ]
    for name in ("per_param", "flat", "bucketed", "coalesced", "microbench"):
        m = getattr(r.methods, name)
        if m is None or not m.to_dict():
            continue
        if m.unsupported:
            lines.append(
                f"     {name:<11} {m.calls:>5} {'n/a':>10} {'':>10} {'':>7} {'':>7}  "
                f"not supported here: {m.unsupported}"
            )
            continue
        lines.append(
            f"     {name:<11} {m.calls:>5} {ms(m.time_s)} {ms(m.time_max_s)} "
            f"{m.algbw_GBps:>7.3f} {m.busbw_GBps:>7.3f}  {m.how}"
        )
    lat = r.latency
    b = r.methods.bucketed
    if b is not None and b.bucket_bytes:
        sizes = ", ".join(bw.fmt_bytes(x) for x in b.bucket_bytes[:8]) + (
            " ..." if len(b.bucket_bytes) > 8 else ""
        )
        lines.append(f"     {'':<11} {'':>5} buckets: {sizes}; order: {b.order}")
    lines.append(
        f"     {'latency':<11} {1:>5} {ms(lat.time_s)} {ms(lat.time_max_s)} {'':>7} {'':>7}  "
        f"one all_reduce of {lat.bytes} B"
    )
    lines += ["", "why:"] + [f"  {x}" for x in r.explanation]
    return "\n".join(lines)
