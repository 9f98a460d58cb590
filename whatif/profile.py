"""What the step model needs from one measured run, read from its record (never measured here).

The compute of one micro-step (data wait, host-to-device copy, forward, backward compute alone,
optimizer), each with its 95% interval; the parameters (sizes, DDP's ready order, and when in
backward each gradient is ready); DDP's gradient copies and the compression schemes' compute; on a
CPU host with gloo, how much the all-reduce and the compute slow each other down; the link the
run's own ranks had. Each figure comes from the best source the record holds (the grad_ready probe
first); where it holds none, an assumption stands in and Profile.notes says which, so the command
prints it. The sources, best first: docs/whatif.md "The step model in detail".
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from base.record import Record, setting
from base.record_types import Env, GradReady, HookCosts, PowersgdCosts, ReadyMode, TrainResult
from comm import buckets as bk
from whatif.links import Link, from_microbench
from whatif.quantity import Quantity

FLOP_MODEL_EXTRA = (
    0.10  # backward = forward x FLOP ratio: +-10% stated on top of the forward's interval
)
# Run-to-run scatter of a step median (log-normal sd): another process, allocator state, core
# placement. CPU: the pooled sd of log step medians over the committed repeats of VGG11 and ViT-L/32
# on the 2-core machine was 3-10% per configuration (results/runs/vgg11_*, vit_ddp_*; 5% taken);
# GPU: 2% stated (no GPU repeats measured yet). A validation set with repeats estimates its own
# (whatif.validate).
RUN_TO_RUN_SD = {"cpu": 0.05, "cuda": 0.02}
MIN_DUTY_REL = 0.15  # a calibrated contention factor's interval, at least +-15% (one probe step)
# PowerSGD's passes over each compressed matrix when rank << rows, cols (matrix-vector work is
# memory-bound): pre = error feedback add (3) + the clone kept for the error (2) + P = M Q (1); mid
# = Q = M^T P (1); post = P Q^T (1) + the new error (3). Used where the probe did not time the three
# parts.
PSGD_PASSES = {"pre": 6, "mid": 1, "post": 4}
PSGD_PASSES_SHARE = {k: v / sum(PSGD_PASSES.values()) for k, v in PSGD_PASSES.items()}
# PowerSGD's hook allocates two tensors of its bucket's size every step (the clone kept for the
# error, and the new error, `input_tensor_cp - input_tensor`), and the step frees the previous ones:
# at these sizes glibc hands the memory back to the kernel, so every step writes them into fresh
# pages, each a page fault and the kernel zeroing it. What that costs beyond a write into touched
# memory, per byte, where the probe did not time it (records before its `fresh_s`): see
# FRESH_PAGE_S_PER_BYTE_HOW (whatif/calibrate.py).
FRESH_PAGE_S_PER_BYTE = (0.416e-9, 0.33e-9, 0.53e-9)  # median [range]
FRESH_PAGE_S_PER_BYTE_HOW = (
    "calibrated on the 9 PowerSGD runs of results/runs/headline_smoke_auto (loopback, the quiet "
    "2-core VM; python -m whatif.calibrate fresh_pages results/runs/headline_smoke_auto): their "
    "median [range]"
)


class ProfileError(ValueError):
    pass


@dataclass
class Params:
    names: list[str]
    numel: list[int]
    element_size: list[int]
    order: list[int]  # DDP's ready order (parameter indices)
    ready: list[
        float
    ]  # fraction of backward compute alone done when each parameter's gradient is ready
    how: str

    @property
    def total_bytes(self) -> int:
        return sum(n * e for n, e in zip(self.numel, self.element_size))


@dataclass
class Contention:
    """gloo on CPU: while an all-reduce runs beside backward, compute runs s_compute times slower
    and the all-reduce s_comm times slower than alone (calibrated on the run's own DDP timers); 1
    and 1 where nothing was measured."""

    s_compute: Quantity
    s_comm: Quantity
    how: str
    # seconds each DDP all-reduce costs in training beyond the microbenchmark's call, where the
    # run's span asks for more than overlap can explain (calibrate_contention); 0 elsewhere
    per_call: Quantity = field(default_factory=lambda: Quantity.exact(0.0))


@dataclass
class Profile:
    record: Record
    path: str
    model: str
    device: str
    backend: str
    world_size: int
    batch_per_rank: int
    accumulate: int
    sync: str
    optim: str
    bucket_cap: object  # MB, or None: DDP's default
    static_graph: bool
    bucket_view: bool
    psgd_rank: int
    psgd_min_rate: float
    psgd_batched: bool
    params: Params
    shapes: list[tuple[int, ...]] | None
    data: Quantity
    h2d: Quantity
    forward: Quantity
    backward: Quantity  # compute alone, one micro-step
    optimizer: Quantity
    copy_in: Quantity  # DDP's copy of every gradient into its bucket (per synchronised step)
    copy_out: Quantity  # and back (gradient_as_bucket_view=False)
    cast: dict[str, Quantity]  # bf16 / fp16 hook compute, whole gradient
    powersgd: Quantity | None  # PowerSGD compute at psgd_rank, whole gradient (None: not measured)
    powersgd_measured_rank: int
    powersgd_split: dict[
        str, float
    ]  # its shares: pre (compute thread), mid and post (the hook's callbacks)
    psgd_alloc: Quantity | None  # PowerSGD's fresh pages: one pass over the whole gradient's bytes
    contention: Contention
    link: Link | None  # the run's own ranks (on-rank microbenchmark), None if not measured
    step: Quantity | None  # measured step median
    samples_per_s: Quantity | None
    step_noise: (
        Quantity | None
    )  # the measured step median's 95% interval relative to it (a factor about 1)
    run_to_run_sd: float = (
        0.05  # log-normal sd of a run's step median about its configuration's (see above)
    )
    cores: int | None = (
        None  # CPU cores per host, torch intra-op threads per rank, hosts (CPU core sharing)
    )
    threads: int | None = None
    hosts: int = 1
    core_scaling: tuple[float, float, float] | None = None  # None: whatif.step.CORE_SCALING
    link_share: tuple[float, float, float] | None = None  # None: whatif.links.LINK_SHARE
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.record.command or self.path


# ------------------------------------------------------------------------------------------ reading
def load_record(path: str | Path) -> tuple[Record, str]:
    from base.record import RecordError, record_path

    p = Path(path)
    if not p.exists():
        raise ProfileError(
            f"{path} does not exist: give a run directory (holding run_record.json) or a record "
            "file"
        )
    try:
        return Record.read(p), str(record_path(p))
    except (RecordError, OSError, json.JSONDecodeError) as e:
        raise ProfileError(f"{path}: cannot read the run record ({e})") from None


def from_record(record: Record | dict, path: str = "", model: str | None = None) -> Profile:
    """model: a conf/model name standing in for the run's model (its sizes and FLOPs); a script's
    record holds only what its DDP buckets carried."""
    if isinstance(record, dict):
        record = Record.from_dict(record)
    script = record.task == "script"
    if script and (record.result is None or record.result.grad_ready is None) and not model:
        raise ProfileError(
            f"{path or 'record'}: task=script, and the record holds no parameter sizes of the "
            "script's "
            "model (no bucket was all-reduced in the window, it was made before they were "
            "recorded, or with script.comm_timing=ddp_logging: no bucket's start): name a model "
            "of the same sizes with --model NAME (conf/model/NAME.yaml)"
        )
    if record.task not in ("train", "script"):
        raise ProfileError(
            f"{path or 'record'}: task={record.task}; the what-if model reads task=train runs "
            "(a task=collectives record can be its link: --collectives)"
        )
    if record.status != "ok":
        raise ProfileError(
            f"{path or 'record'}: the run's status is {record.status!r}; only finished runs "
            "have the figures the model needs"
        )
    r: TrainResult = record.result
    cfg = record.config
    notes: list[str] = []
    K = int(r.accumulate or 1)
    phases = r.phases
    if phases is None or phases.forward is None:
        raise ProfileError(
            f"{path or 'record'}: no phase timings (timing=false or cuda_graphs=true); the model "
            "needs "
            "forward, backward and optimizer times"
        )
    q = lambda name, per=1.0: (  # noqa: E731 - local
        Quantity.from_describe(getattr(phases, name), f"result.phases.{name}", per)
        or Quantity.exact(0.0, f"result.phases.{name} (absent: 0)")
    )
    data, h2d, forward = q("data", 1 / K), q("h2d", 1 / K), q("forward", 1 / K)
    optimizer = q("optimizer")
    ddp = r.ddp
    gr = r.grad_ready
    params, shapes, fwd_bwd = _params(record, gr, notes, model)
    sync = r.sync or "ddp"
    mem = _memory_speed(cfg, optimizer, params)
    backward = _backward_alone(r, phases, forward, gr, fwd_bwd, sync, K, notes, mem, params)
    copy_in, copy_out, cast, psgd, psgd_rank, psgd_split = _costs(
        gr, notes, mem, params, shapes, cfg
    )
    link = None
    try:
        link = from_microbench(r)
    except ValueError as e:
        notes.append(f"the on-rank microbenchmark could not be fitted: {e}")
    if link is None:
        link = _emulated(record.env, notes) or _link_from_sync(r, notes)
    step = Quantity.from_describe(r.step_time_s, "result.step_time_s")
    tp = r.throughput
    sps = None
    if tp is not None and tp.samples_per_s:
        lo, hi = tp.samples_ci_lo, tp.samples_ci_hi
        sps = (
            Quantity(tp.samples_per_s, lo, hi, "result.throughput")
            if lo is not None and lo <= tp.samples_per_s <= hi
            else Quantity.exact(tp.samples_per_s, "result.throughput")
        )
    noise = None
    if step and step.has_interval and step.lo > 0:
        noise = Quantity(
            1.0, step.lo / step.value, step.hi / step.value, "the step median's interval, relative"
        )
    rank0 = r.per_rank[0] if r.per_rank else None
    threads = rank0.threads.intra_op if rank0 is not None and rank0.threads is not None else None
    env = record.env
    prof = Profile(
        record=record,
        path=path,
        model=model
        or (
            f"the script {Path(str((r.script or {}).get('path') or '?')).name}"
            if script
            else setting(cfg, "model.name", "?")
        ),
        device=r.device or "cpu",
        backend=r.backend or "gloo",
        world_size=int(r.world_size or 1),
        batch_per_rank=int(r.batch_per_rank or 1),
        accumulate=K,
        sync=sync,
        optim=r.optim or "none",
        bucket_cap=_bucket_cap(r),
        static_graph=bool(ddp is not None and ddp.static_graph),
        bucket_view=bool(ddp is not None and ddp.gradient_as_bucket_view),
        psgd_rank=int(setting(cfg, "optim.rank") or psgd_rank or 1),
        psgd_min_rate=float(setting(cfg, "optim.min_compression_rate") or 2.0),
        psgd_batched=bool(setting(cfg, "optim.batched", False)),
        params=params,
        shapes=shapes,
        data=data,
        h2d=h2d,
        forward=forward,
        backward=backward,
        optimizer=optimizer,
        copy_in=copy_in,
        copy_out=copy_out,
        cast=cast,
        powersgd=psgd,
        powersgd_measured_rank=psgd_rank,
        powersgd_split=psgd_split,
        psgd_alloc=_fresh_pages(gr, params, r.device or "cpu"),
        contention=Contention(
            Quantity.exact(1.0), Quantity.exact(1.0), "none: not a multi-rank gloo run on CPU"
        ),
        link=link,
        step=step,
        samples_per_s=sps,
        step_noise=noise,
        run_to_run_sd=RUN_TO_RUN_SD.get(r.device or "cpu", 0.05),
        notes=notes,
        cores=int(env.cpu_count or 0) or None,
        threads=int(threads) if threads else None,
        hosts=max(1, len(set(env.hostnames or [None]))),
    )
    _contention(prof, r)
    return prof


def _emulated(env: Env | None, notes: list[str]) -> Link | None:
    """No microbenchmark, but the ranks ran behind a link this tool shaped between nodes: its rate
    is known, where the sync's own span only bounds the link's speed from below (DDP's span holds
    its waits for gradients). The default run behind link=1gbe skips the microbenchmark (one pass
    of VGG11's 531 MB costs over its budget), and its slow-link finding had no saving."""
    from whatif.links import emulated

    lk = env.link if env is not None else None
    if lk is None or not lk.emulated or not lk.rate_bit_s or (lk.nodes or 0) < 2:
        return None
    notes.append(
        f"no on-rank microbenchmark in this record: the link is the emulated one the run was "
        f"shaped to ({lk.rate_bit_s / 1e9:g} Gbit/s, env.link), at the share of the rate gloo "
        "reaches through it"
    )
    return emulated(lk.rate_bit_s / 1e9)


def _link_from_sync(r: TrainResult, notes: list[str]) -> Link | None:
    """No microbenchmark (skipped, or PowerSGD's sizes): the sync's own time per call, as a
    latency-only link for small calls or a bandwidth-only one for large: a lower bound on the link's
    speed (DDP's span includes waits)."""
    comm = r.comm
    n = int(r.world_size or 1)
    if comm is None:
        return None
    t, nbytes, calls = comm.time_s, comm.bytes_per_step, comm.collectives_per_step
    if n < 2 or not t or not nbytes or not calls:
        return None
    per_call = t / calls
    size = nbytes / calls
    notes.append(
        "no on-rank microbenchmark in this record: the link is taken from the sync's own time "
        f"({t * 1e3:.4g} "
        f"ms for {calls:.0f} call(s) of {size / 1e6:.3g} MB on average), a lower bound on its "
        "speed (the span "
        "includes waits for gradients), +-50%"
    )
    from whatif.links import fit_alpha_beta

    fit = fit_alpha_beta(
        [(size, per_call, None, None)],
        n,
        name="this run's sync (no microbenchmark)",
        source="result.comm: the sync's own span per call",
    )
    return Link(
        fit.name,
        fit.alpha,
        fit.busbw.with_extra(0.5),
        fit.source,
        measured_ranks=n,
        notes=fit.notes,
    )


def _bucket_cap(r: TrainResult):
    cap = r.ddp.bucket_cap_mb if r.ddp is not None and r.ddp.has("bucket_cap_mb") else r.bucket_mb
    return None if bk.is_default(cap) else float(cap)


def _params(record: Record, gr: GradReady | None, notes: list[str], model: str | None = None):
    """(Params, shapes or None, (forward FLOPs, backward FLOPs) or None). model: a conf/model name
    instead of the record's model= (a script's record has the tool's default there, not the script's
    model)."""
    cfg = record.config
    flops = None
    shapes = None
    if model:
        model_cfg = named_model(model)
        gr = None  # the named model's sizes, not the record's
    else:
        model_cfg = {} if record.task == "script" else setting(cfg, "model", {})
    analysed = analyse_model(json.dumps(model_cfg, sort_keys=True), _image_size(cfg))
    if model and analysed is None:
        raise ProfileError(f"--model {model}: cannot build it here on the meta device")
    if analysed is not None:
        shapes = analysed["shapes"]
        # a model whose forward does not run on meta tensors has sizes but no FLOP count: no ratio
        # (it was (None, None), and backward's None / None raised where no probe timed it)
        if analysed["fwd_flops"] and analysed["bwd_flops"]:
            flops = (analysed["fwd_flops"], analysed["bwd_flops"])
    if gr is not None and gr.numel:
        alone = _mode(gr, "alone")
        if not alone.ready_s and record.task == "script":
            alone = _mode(
                gr, "with_sync"
            )  # a script has no no_sync probe: its window's own backward
        per_rep = alone.ready_s or []
        totals = alone.backward_s or []
        if per_rep and totals:
            n = len(gr.numel)
            med = [_median([rep[i] for rep in per_rep]) for i in range(n)]
            total = _median(totals)
            ready = [min(1.0, max(0.0, t / total)) if total > 0 else 0.0 for t in med]
            order = list(gr.order or sorted(range(n), key=lambda i: med[i]))
            if gr.shapes:
                shapes = [tuple(x) for x in gr.shapes]
            elif shapes is not None and len(shapes) != n:
                shapes = None
            return (
                Params(
                    list(gr.names or [str(i) for i in range(n)]),
                    [int(x) for x in gr.numel],
                    [int(x) for x in gr.element_size],
                    order,
                    ready,
                    f"measured: post-accumulate-grad hooks in {len(per_rep)} untimed backward(s) "
                    "under "
                    "DDP's no_sync (result.grad_ready)"
                    if record.task != "script"
                    else f"measured: each bucket's comm hook start in {len(per_rep)} window "
                    "step(s) "
                    "(result.grad_ready)",
                ),
                shapes,
                flops,
            )
    if analysed is None:
        raise ProfileError(
            "the record has no gradient-ready probe and its model cannot be rebuilt here "
            f"(model={setting(cfg, 'model.name')}); the parameter sizes are unknown"
        )
    if analysed["ready"] is not None:
        why = f"those of --model {model}" if model else "the record predates the grad_ready probe"
        notes.append(
            f"gradient-ready times: not measured ({why}); assumed at the "
            "share of backward FLOPs done when each gradient is accumulated (torch FlopCounterMode "
            "over a "
            "meta-device backward; elementwise ops not counted)"
        )
        ready, how = analysed["ready"], "assumed: share of backward FLOPs (meta-device backward)"
    else:
        n = len(analysed["numel"])
        ready = [1 - i / n for i in range(n)]
        how = (
            "assumed: proportional to the parameter's position in backward (reverse definition "
            "order)"
        )
        notes.append("gradient-ready times: not measured and the FLOP count failed; " + how)
    return (
        Params(
            analysed["names"],
            analysed["numel"],
            analysed["element_size"],
            analysed["order"],
            ready,
            how,
        ),
        shapes,
        flops,
    )


def named_model(name: str) -> dict:
    """conf/model/<name>.yaml as the run would have it (Hydra's compose of the project's config,
    model=<name>)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    conf = Path(__file__).resolve().parent.parent / "conf"
    if not (conf / "model" / f"{name}.yaml").is_file():
        known = sorted(p.stem for p in (conf / "model").glob("*.yaml"))
        raise ProfileError(f"--model {name}: no conf/model/{name}.yaml; one of: {', '.join(known)}")
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"model={name}"])
    except HydraException as e:
        raise ProfileError(f"--model {name}: {e}") from None
    return OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True)


def _image_size(cfg: dict | None) -> int:
    return int(setting(cfg, "data.image_size") or setting(cfg, "scale.image_size") or 224)


def _mode(gr: GradReady | None, name: str) -> ReadyMode:
    """One mode of the grad_ready probe (alone, with_sync); an empty one where the probe did not run
    it."""
    mode = getattr(gr.modes, name) if gr is not None and gr.modes is not None else None
    return mode if mode is not None else ReadyMode()


@functools.lru_cache(maxsize=16)
def analyse_model(model_json: str, image_size: int) -> dict | None:
    """The record's model on the meta device: parameter sizes, autograd's ready order, and the
    backward FLOPs done when each gradient is accumulated (a stand-in for measured ready times).
    None if the model cannot be built."""
    import torch
    from omegaconf import OmegaConf

    from models import build_model

    model_cfg = json.loads(model_json)
    if not model_cfg:
        return None
    try:
        with torch.device("meta"):
            model = build_model(OmegaConf.create(model_cfg), image_size)
    except Exception:  # noqa: BLE001 - any model this environment cannot build: the caller says so
        return None
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    out = {
        "names": [n for n, _ in named],
        "numel": [p.numel() for _, p in named],
        "element_size": [p.element_size() for _, p in named],
        "shapes": [tuple(p.shape) for _, p in named],
        "order": list(reversed(range(len(named)))),
        "ready": None,
        "fwd_flops": None,
        "bwd_flops": None,
    }
    if not named or named[0][1].device.type != "meta":
        return out
    from torch.utils.flop_counter import FlopCounterMode

    index = {id(p): i for i, (_, p) in enumerate(named)}
    events: list[tuple[int, int]] = []
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            y = model(torch.zeros(2, 3, image_size, image_size, device="meta"))
            fwd = counter.get_total_flops()
            hooks = [
                p.register_post_accumulate_grad_hook(
                    lambda t: events.append((index[id(t)], counter.get_total_flops()))
                )
                for _, p in named
            ]
            try:
                y.float().sum().backward()
            finally:
                for h in hooks:
                    h.remove()
            total = counter.get_total_flops()
    except Exception:  # noqa: BLE001 - a forward that does not run on meta tensors: sizes only
        return out
    bwd = max(total - fwd, 1)
    seen: dict[int, float] = {}
    for i, f in events:
        seen.setdefault(i, (f - fwd) / bwd)
    order = list(seen) + [i for i in reversed(range(len(named))) if i not in seen]
    out.update(
        order=order,
        ready=[min(1.0, max(0.0, seen.get(i, 1.0))) for i in range(len(named))],
        fwd_flops=fwd,
        bwd_flops=bwd,
    )
    return out


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def probe_scale(mode: ReadyMode, forward: Quantity) -> float:
    """Window forward / probe forward for one probe mode: how much faster the window ran than the
    untimed probe."""
    f = mode.forward_s or []
    if not f or _median(f) <= 0 or not forward.value:
        return 1.0
    return forward.value / _median(f)


def _memory_speed(cfg: dict | None, optimizer: Quantity, params: Params) -> Quantity | None:
    """Bytes per second this rank streams through memory, from the optimizer phase: SGD reads each
    parameter and gradient (and momentum buffer) and writes the parameter (and buffer): 20 bytes per
    fp32 parameter with momentum, 12 without. A stand-in, stated, for the memory-bound costs a
    record without the grad_ready probe did not time."""
    if not optimizer.value or optimizer.value <= 0:
        return None
    momentum = float(setting(cfg, "solver.momentum") or 0.0)
    per = 20 if momentum else 12
    nbytes = per * sum(params.numel)
    src = f"{per} bytes per parameter / the optimizer phase"
    if optimizer.has_interval and optimizer.lo > 0:
        return Quantity(nbytes / optimizer.value, nbytes / optimizer.hi, nbytes / optimizer.lo, src)
    return Quantity.exact(nbytes / optimizer.value, src)


def _bytes_time(nbytes: float, mem: Quantity, what: str, extra: float = 0.25) -> Quantity:
    """nbytes at the record's memory speed, +-25% stated on top of its interval."""
    v = nbytes / mem.value
    q = (
        Quantity(v, nbytes / mem.hi, nbytes / mem.lo, what)
        if mem.has_interval
        else Quantity.exact(v, what)
    )
    return q.with_extra(extra)


def _backward_alone(
    r,
    phases,
    forward: Quantity,
    gr,
    flops,
    sync: str,
    K: int,
    notes: list[str],
    mem: Quantity | None = None,
    params: Params | None = None,
) -> Quantity:
    alone = _mode(gr, "alone")
    if alone.backward_s:
        xs = alone.backward_s
        scale = probe_scale(alone, forward)
        v = _median(xs) * scale
        how = (
            f"result.grad_ready: backward under no_sync, {len(xs)} probe pass(es), x {scale:.3g} "
            "(the window's "
            "forward / the probe's); interval: the window's forward phase's, relative"
        )
        if forward.has_interval and forward.lo > 0:
            return Quantity(v, v * forward.lo / forward.value, v * forward.hi / forward.value, how)
        return Quantity.relative(v, 0.05, how + " (none there: +-5% stated)")
    if sync in ("local", "per_param", "flat"):  # every sync but ddp (base/schema.py Sync)
        return Quantity.from_describe(phases.backward, "result.phases.backward", 1 / K)
    if getattr(r, "script", None) is not None and phases.backward is not None:
        notes.append(
            "backward compute alone: the script's backward phase (its DDP output's gradient to the "
            "end of "
            "backward compute), measured with the all-reduces beside it (a script has no no_sync "
            "probe): "
            "on CPU with gloo it holds their slow-down, so the model's contention starts from it"
        )
        return Quantity.from_describe(phases.backward, "result.phases.backward", 1 / K)
    if flops:
        ratio = flops[1] / flops[0]
        b = forward.scaled(ratio, "forward x backward/forward FLOP ratio").with_extra(
            FLOP_MODEL_EXTRA
        )
        how = (
            f"forward x {ratio:.3g}, the model's backward/forward FLOP ratio, "
            f"+-{FLOP_MODEL_EXTRA:.0%}"
        )
        if mem is not None and params is not None:
            w = _bytes_time(4 * sum(params.numel), mem, "writing every gradient once")
            b = Quantity(
                b.value + w.value, b.lo + w.lo, b.hi + w.hi, b.source + " + writing every gradient"
            )
            how += (
                ", plus writing every gradient once at the optimizer's memory speed "
                f"({w.value * 1e3:.3g} ms; the "
                "FLOP count leaves out memory-bound work)"
            )
        notes.append(
            "backward compute alone: not measured (DDP overlaps it with the all-reduce); assumed "
            + how
        )
        return b
    notes.append(
        "backward compute alone: assumed 2 x forward (no FLOP count for this model), +-25%"
    )
    return forward.scaled(2.0, "2 x forward (assumed)").with_extra(0.25)


def _costs(
    gr: GradReady | None,
    notes: list[str],
    mem: Quantity | None = None,
    params: Params | None = None,
    shapes=None,
    cfg: dict | None = None,
):
    c = gr.costs if gr is not None and gr.costs is not None else HookCosts()
    zero = lambda what: Quantity.exact(0.0, f"{what}: not measured (taken as 0)")  # noqa: E731 - local

    def measured(key: str, what: str, nbytes_per_elt: float) -> Quantity:
        v = getattr(c, key)
        if v is None:
            if mem is not None and params is not None:
                return _bytes_time(
                    nbytes_per_elt * sum(params.numel),
                    mem,
                    f"{what}: {nbytes_per_elt:g} bytes per "
                    "element at the optimizer's memory speed (not measured)",
                )
            return zero(what)
        xs = v if isinstance(v, list) else [v]
        return Quantity.relative(
            _median(xs), 0.15, f"result.grad_ready.costs.{key} ({len(xs)} timing(s), +-15% stated)"
        )

    copy_in = measured("copy_in_s", "DDP's copy into buckets", 8)
    copy_out = measured("copy_out_s", "DDP's copy back", 8)
    cast = {
        "bf16": measured("cast_bf16_s", "bf16 cast", 16),
        "fp16": measured("cast_fp16_s", "fp16 cast", 16),
    }
    timed = c.cast_timed
    if timed in cast:  # one cast timed: the other moves the same bytes
        other = "fp16" if timed == "bf16" else "bf16"
        cast[other] = Quantity(
            cast[timed].value,
            cast[timed].lo,
            cast[timed].hi,
            f"{cast[timed].source}; {other} taken as {timed} (the same bytes)",
        )
    ps = c.powersgd if c.powersgd is not None else PowersgdCosts()
    psgd = None
    comp = None
    if params is not None and shapes is not None:
        comp = _compressible(
            params,
            shapes,
            int(ps.rank or setting(cfg, "optim.rank") or 1),
            float(setting(cfg, "optim.min_compression_rate") or 2.0),
        )
    if ps.s is not None:
        xs = ps.s if isinstance(ps.s, list) else [ps.s]
        psgd = Quantity.relative(
            _median(xs), 0.15, f"result.grad_ready.costs.powersgd at rank {ps.rank} (+-15% stated)"
        )
    elif c.copy_in_s and comp is not None and params is not None:
        total = sum(params.numel) or 1
        psgd = Quantity.relative(
            _median(c.copy_in_s) * 44 / 8 * comp / total,
            0.5,
            "PowerSGD: 11 fp32 passes over the compressed matrices at the measured copy's speed "
            f"(not timed: {ps.skipped or 'absent'}), +-50%",
        )
        notes.append("PowerSGD's compute: " + psgd.source)
    elif mem is not None and comp is not None:
        psgd = _bytes_time(
            sum(PSGD_PASSES.values()) * 4 * comp,
            mem,
            "PowerSGD: 11 fp32 passes over the compressed matrices at the optimizer's memory speed "
            "(not measured)",
            extra=0.5,
        )
    split = dict(PSGD_PASSES_SHARE)
    parts = {k: getattr(ps, f"{k}_s") for k in split}
    if all(parts.values()) and sum(_median(v) for v in parts.values()) > 0:
        tot = sum(_median(v) for v in parts.values())
        split = {k: _median(v) / tot for k, v in parts.items()}
    if gr is None or gr.costs is None or not gr.costs.to_dict():
        why = (
            "a script's run does not probe them"
            if gr is not None and (gr.method or "").startswith("task=script")
            else "the record predates the grad_ready probe"
        )
        notes.append(
            f"DDP's gradient copies and the bf16/fp16/PowerSGD compute: not measured ({why}): "
            + (
                "estimated as memory traffic at the speed the optimizer phase "
                "streamed its 12-20 bytes per parameter (+-25%; PowerSGD +-50%)"
                if mem is not None
                else "taken as 0"
            )
        )
    return copy_in, copy_out, cast, psgd, int(ps.rank or setting(cfg, "optim.rank") or 1), split


def _fresh_pages(gr: GradReady | None, params: Params, device: str) -> Quantity | None:
    """The PowerSGD hook's two per-step allocations of its bucket's size, as one pass over the
    whole gradient's bytes: what writing into fresh pages costs beyond writing into touched ones.
    Timed by the probe where the record has it (costs.powersgd.fresh_s against touched_s, the same
    bytes); else the stated figure (FRESH_PAGE_S_PER_BYTE). On a GPU the caching allocator reuses
    its blocks: none."""
    if device != "cpu":
        return None
    nbytes = params.total_bytes
    ps = gr.costs.powersgd if gr is not None and gr.costs is not None else None
    fresh = getattr(ps, "fresh_s", None) if ps is not None else None
    touched = getattr(ps, "touched_s", None) if ps is not None else None
    fb = getattr(ps, "fresh_bytes", None) if ps is not None else None
    if fresh and touched and fb:
        per = max(0.0, (_median(fresh) - _median(touched)) / fb)
        return Quantity.relative(
            per * nbytes,
            0.25,
            f"result.grad_ready.costs.powersgd: fresh pages {per * 1e9:.3g} ns per byte beyond "
            f"a touched write ({len(fresh)} timing(s) of {fb / 1e6:.3g} MB, +-25% stated)",
        )
    v, lo, hi = FRESH_PAGE_S_PER_BYTE
    return Quantity(
        v * nbytes,
        lo * nbytes,
        hi * nbytes,
        f"fresh pages {v * 1e9:.3g} [{lo * 1e9:.3g}, {hi * 1e9:.3g}] ns per byte beyond a "
        f"touched write, not timed in this record: {FRESH_PAGE_S_PER_BYTE_HOW}",
    )


def _compressible(params: Params, shapes, rank: int, min_rate: float) -> int:
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    total = 0
    for i, shape in enumerate(shapes):
        if len(shape) < 2:
            continue
        n = int(shape[0])
        m = params.numel[i] // n
        if _should_compress(n, m, min(n, m, rank), min_rate)[0]:
            total += params.numel[i]
    return total


def _contention(prof: Profile, r: TrainResult) -> None:
    """gloo on a CPU host, DDP with >= 2 ranks: calibrate the two slow-down factors on this run's
    own timers."""
    if prof.device != "cpu" or prof.backend != "gloo":
        prof.contention.how = (
            "none modelled: NCCL kernels share the GPU with compute, which this model does not "
            "carry (stated)"
        )
        return
    comm = r.comm
    if prof.sync == "per_param" and comm is not None and comm.time_s:
        from whatif.step import calibrate_serial_calls

        got = calibrate_serial_calls(prof, float(comm.time_s))
        if got is not None:
            per, how = got
            prof.contention.per_call = Quantity.relative(
                per, max(MIN_DUTY_REL, _rel(prof.link.alpha)), "calibrated cost per all-reduce"
            )
            prof.notes.append(f"cost per call in training: {how}")
    if (
        prof.sync != "ddp"
        or prof.world_size < 2
        or comm is None
        or not comm.time_s
        or prof.link is None
    ):
        prof.contention.how = (
            "not measurable from this run (no DDP all-reduce beside backward): none assumed, so a "
            "prediction for DDP with gloo on CPU over-predicts the overlap"
        )
        if prof.world_size < 2 or prof.sync != "ddp":
            prof.notes.append(
                "CPU contention between gloo's all-reduce and backward: " + prof.contention.how
            )
        return
    from whatif.step import calibrate_contention

    gr_sync, gr_alone = _mode(r.grad_ready, "with_sync"), _mode(r.grad_ready, "alone")
    if gr_sync.ready_s and gr_alone.backward_s:
        # the probe's own ratio (its modes interleaved: the same machine speed) of the last gradient
        # ready with the all-reduces running to the backward alone, applied to the backward alone in
        # the window
        last = _median([max(x for x in rep if x == x) for rep in gr_sync.ready_s])
        under = last / _median(gr_alone.backward_s) * prof.backward.value
    else:
        under = comm.backward_compute_s
    if not under:
        # a multi-rank gloo run on CPU all the same: say why nothing was calibrated (it read "not a
        # multi-rank gloo run on CPU", the placeholder from_record starts with, until issue 36)
        prof.contention.how = (
            "not measurable from this run (no backward compute time beside its all-reduces: no "
            "grad_ready probe with the sync, and no comm.backward_compute_s): none assumed, so a "
            "prediction for DDP with gloo on CPU over-predicts the overlap"
        )
        prof.notes.append(
            "CPU contention between gloo's all-reduce and backward: " + prof.contention.how
        )
        return
    s_c, s_m, per_call, how = calibrate_contention(
        prof, compute_under_comm=float(under), comm_span=float(comm.time_s)
    )
    rel_c = max(MIN_DUTY_REL, _rel(prof.backward))
    prof.contention = Contention(
        Quantity.relative(s_c, rel_c, "calibrated compute slow-down under all-reduce"),
        Quantity.relative(
            s_m,
            max(MIN_DUTY_REL, _rel(prof.link.busbw)),
            "calibrated all-reduce slow-down beside compute",
        ),
        how,
        Quantity.relative(
            per_call, max(MIN_DUTY_REL, _rel(prof.link.alpha)), "calibrated cost per all-reduce"
        )
        if per_call > 0
        else Quantity.exact(0.0),
    )
    prof.notes.append(f"CPU contention (gloo): {how}")


def _rel(q: Quantity) -> float:
    if not q.has_interval or q.value <= 0 or q.lo <= 0:
        return 0.0
    return math.log(q.hi / q.lo) / 2


# --------------------------------------------------------------------------------- without a record
def synthetic(
    *,
    model: dict,
    image_size: int,
    batch_per_rank: int,
    world_size: int,
    device: str,
    backend: str,
    forward: Quantity,
    backward: Quantity,
    optimizer: Quantity,
    link: Link | None,
    sync: str = "ddp",
    optim: str = "none",
    bucket_cap=None,
    bucket_view: bool = False,
    static_graph: bool = False,
    copy_in: Quantity | None = None,
    copy_out: Quantity | None = None,
    cast: dict | None = None,
    powersgd: Quantity | None = None,
    psgd_rank: int = 1,
    data: Quantity | None = None,
    step: Quantity | None = None,
    notes: list[str] | None = None,
    label: str = "",
) -> Profile:
    """A profile from published figures instead of a record (the source checks, whatif.sources): the
    model's parameters and ready times from its meta-device FLOP count, every time given with its
    interval and source."""
    a = analyse_model(json.dumps(model, sort_keys=True), image_size)
    if a is None:
        raise ProfileError(f"cannot build model {model.get('name')} here")
    ready = a["ready"] or [1 - i / len(a["numel"]) for i in range(len(a["numel"]))]
    params = Params(
        a["names"],
        a["numel"],
        a["element_size"],
        a["order"],
        ready,
        "assumed: share of backward FLOPs (meta-device backward)",
    )
    zero = Quantity.exact(0.0, "none")
    record = Record(
        status="ok",
        task="train",
        config={"model": model},
        env=Env(hostnames=["published"]),
        result=TrainResult(device=device, device_name=label),
    )
    return Profile(
        record=record,
        path=label,
        model=model.get("name", "?"),
        device=device,
        backend=backend,
        world_size=world_size,
        batch_per_rank=batch_per_rank,
        accumulate=1,
        sync=sync,
        optim=optim,
        bucket_cap=bucket_cap,
        static_graph=static_graph,
        bucket_view=bucket_view,
        psgd_rank=psgd_rank,
        psgd_min_rate=2.0,
        psgd_batched=False,
        params=params,
        shapes=a["shapes"],
        data=data or zero,
        h2d=zero,
        forward=forward,
        backward=backward,
        optimizer=optimizer,
        copy_in=copy_in or zero,
        copy_out=copy_out or zero,
        cast=cast or {"bf16": zero, "fp16": zero},
        powersgd=powersgd,
        powersgd_measured_rank=psgd_rank,
        powersgd_split=dict(PSGD_PASSES_SHARE),
        psgd_alloc=None,
        contention=Contention(Quantity.exact(1.0), Quantity.exact(1.0), "none modelled (GPU)"),
        link=link,
        step=step,
        samples_per_s=None,
        step_noise=None,
        run_to_run_sd=RUN_TO_RUN_SD.get(device, 0.05),
        notes=list(notes or []),
    )
