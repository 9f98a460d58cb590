"""Untimed probe after the window: when each gradient becomes ready in backward, and what DDP's
gradient copies and the compression hooks cost on this device. The what-if model reads it from
result.grad_ready (docs/whatif.md; fields: docs/record.md).

Ready times come from post-accumulate-grad hooks in a backward under no_sync ("alone") and, for
DDP, beside its all-reduces ("with_sync"), so the model sees how much communication slows compute;
the forward before each is timed too, to scale the probe to the window (the machine may run at
another speed by then). The costs (DDP's copies, the bf16/fp16 casts, PowerSGD's matrix work, the
latter within diagnose.microbench_budget unless the run uses PowerSGD) are timed on views of one
buffer: about 3.5 x the largest gradient of extra memory, not a copy of the model. No optimizer
step is taken, so the weights do not move.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch


def grad_ready_probe(
    cfg,
    sync,
    criterion,
    autocast,
    device_batches,
    dev,
    n: int | None = None,
    window_s: float | None = None,
    measured_steps: int | None = None,
) -> dict | None:
    """result.grad_ready, or None where there is nothing to time (no trainable parameters, CUDA
    graphs)."""
    if cfg.cuda_graphs or not sync.params:
        return None
    n = max(1, int(cfg.probe_steps if n is None else n))
    model, params = sync.model, sync.params
    names = _names(model, params)
    ddp = getattr(sync, "runtime_stats_kind", None) == "ddp"
    modes = {"alone": sync.no_sync}
    if ddp:
        modes["with_sync"] = nullcontext
    out = {
        "names": names,
        "numel": [p.numel() for p in params],
        "element_size": [p.element_size() for p in params],
        "shapes": [list(p.shape) for p in params],
        "dtype": str(params[0].dtype).removeprefix("torch."),
        "timing": "CUDA events on the backward's stream"
        if dev.kind == "cuda"
        else "time.perf_counter",
    }
    index = {id(p): i for i, p in enumerate(params)}
    runs = {mode: {"ready_s": [], "backward_s": [], "forward_s": []} for mode in modes}
    order = None
    for _ in range(n):  # the modes interleaved, so both see the machine at the same speed
        for mode, context in modes.items():
            marks: list[tuple[int, object]] = []

            def mark(t, marks=marks):
                marks.append((index[id(t)], dev.mark()))

            hooks = [p.register_post_accumulate_grad_hook(mark) for p in params]
            try:
                x, y = next(device_batches)
                for p in params:
                    p.grad = None
                with context():
                    before = dev.mark()
                    with autocast():
                        loss = criterion(model(x), y)
                    start = dev.mark()
                    loss.backward()
                    end = dev.mark()
                dev.synchronize()
            finally:
                for h in hooks:
                    h.remove()
            times = [math.nan] * len(params)
            for i, m in marks:
                if math.isnan(times[i]):
                    times[i] = dev.seconds(start, m)
            r = runs[mode]
            r["ready_s"].append(times)
            r["backward_s"].append(dev.seconds(start, end))
            r["forward_s"].append(dev.seconds(before, start))
            if order is None:
                order = [
                    i
                    for i, _ in sorted(enumerate(times), key=lambda it: (math.isnan(it[1]), it[1]))
                ]
    out["modes"] = runs
    out["order"] = order
    for p in params:
        p.grad = None
    out["costs"] = _costs(cfg, params, dev, _budget_s(cfg, window_s, measured_steps))
    out["method"] = (
        "post-accumulate-grad hooks over an untimed backward per pass (after the window), the "
        "ready time "
        "of each trainable parameter from a mark just before loss.backward(); alone = under "
        "no_sync; "
        f"{n} pass(es) per mode, the modes interleaved; costs: one timed pass each over "
        "pre-touched "
        "buffers"
    )
    return out


def _names(model, params) -> list[str]:
    by_id = {id(p): n.removeprefix("module.") for n, p in model.named_parameters()}
    return [by_id.get(id(p), str(i)) for i, p in enumerate(params)]


def _timed(fn, dev) -> list[float]:
    """One timed pass (buffers are allocated and touched beforehand, so there is no first-touch cost
    to warm up)."""
    dev.synchronize()
    start = dev.mark()
    fn()
    end = dev.mark()
    dev.synchronize()
    return [dev.seconds(start, end)]


def _budget_s(cfg, window_s: float | None, measured_steps: int | None) -> float | None:
    """diagnose.microbench_budget of the run (window + warm-up + probe steps, scaled from the
    window), as the on-rank microbenchmark is budgeted; None: no budget known (no window figures:
    everything is timed)."""
    if not window_s or not measured_steps:
        return None
    run_s = window_s * (cfg.warmup_steps + measured_steps + cfg.probe_steps) / measured_steps
    return float(cfg.diagnose.get("microbench_budget", 0.1)) * run_s


def _costs(cfg, params, dev, budget_s: float | None = None) -> dict:
    """DDP's copies and the hooks' compute on tensors of the gradients' shapes, one after another as
    the reducer and the hooks go through them. Every "gradient" is a view of one buffer of the
    largest gradient's size (filled with ones: these memory-bound kernels do not care about the
    values), so the probe's memory is a few times the largest gradient, not the model. The copies
    and one cast (the run's fp16 if it uses fp16, else bf16: the same bytes) are always timed, one
    pass each (~3 optimizer steps' memory traffic); PowerSGD's matrix work (~6 more) only within the
    budget, estimated from the copy's speed, else skipped with the reason (the model then estimates
    it)."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_initialized() else 1
    device, dtype = params[0].device, params[0].dtype
    biggest = max(p.numel() for p in params)
    source = torch.ones(biggest, dtype=dtype, device=device)
    scratch = torch.zeros(biggest, dtype=dtype, device=device)
    low = torch.float16 if cfg.optim.name == "fp16" else torch.bfloat16
    half = torch.zeros(biggest, dtype=low, device=device)
    grads = [source[: p.numel()].view(p.shape) for p in params]
    scale = 1.0 / world

    def copy_in():
        for g in grads:
            torch.mul(g.view(-1), scale, out=scratch[: g.numel()])

    def copy_out():
        for g in grads:
            g.view(-1).copy_(scratch[: g.numel()])

    def cast():
        for g in grads:
            out = half[: g.numel()]
            out.copy_(g.view(-1))
            out.div_(world)
            scratch[: g.numel()].copy_(out)

    costs = {"copy_in_s": _timed(copy_in, dev), "copy_out_s": _timed(copy_out, dev)}
    name = "fp16" if low == torch.float16 else "bf16"
    costs[f"cast_{name}_s"] = _timed(cast, dev)
    costs["cast_timed"] = name
    o = cfg.optim
    rank = int(o.rank) if o.name == "powersgd" else 1
    min_rate = float(o.get("min_compression_rate", 2.0)) if o.name == "powersgd" else 2.0
    spent = sum(x[0] for k, x in costs.items() if k.endswith("_s"))
    estimate = 44 / 8 * costs["copy_in_s"][0]  # 11 fp32 passes against the copy's 2
    if budget_s is not None and spent + estimate > budget_s and o.name != "powersgd":
        costs["powersgd"] = {
            "rank": rank,
            "skipped": f"~{estimate:.3g} s estimated, over the probe's budget "
            f"(diagnose.microbench_budget of the run: {budget_s:.3g} s, "
            f"{spent:.3g} s spent)",
        }
    else:
        costs["powersgd"] = _powersgd(grads, rank, min_rate, scratch, dev)
    return costs


def _powersgd(grads, rank: int, min_rate: float, scratch, dev) -> dict:
    """torch's PowerSGD hook's matrix work on the tensors it would compress, timed in its three
    parts."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import (
        _orthogonalize,
        _should_compress,
    )

    mats = []
    cpu = grads[0].device.type == "cpu"
    biggest = max(g.numel() for g in grads)
    error = torch.zeros(biggest, dtype=grads[0].dtype, device=grads[0].device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    for g in grads:
        if g.dim() < 2:
            continue
        m = g.reshape(g.shape[0], -1)
        r = min(m.shape[0], m.shape[1], rank)
        if _should_compress(m.shape[0], m.shape[1], r, min_rate)[0]:
            q = torch.randn(m.shape[1], r, generator=gen).to(m.device, m.dtype)
            mats.append(
                (
                    m,
                    q,
                    torch.empty(m.shape[0], r, device=m.device, dtype=m.dtype),
                    error[: m.numel()].view_as(m),
                )
            )
    if not mats:
        return {
            "rank": rank,
            "matrices": 0,
            "pre_s": [0.0],
            "mid_s": [0.0],
            "post_s": [0.0],
            "s": [0.0],
        }

    def pre():
        for m, q, p, err in mats:
            m.add_(err)  # error feedback
            scratch[: m.numel()].copy_(m.reshape(-1))  # the hook's clone, kept to compute the error
            torch.matmul(m, q, out=p)  # P = M Q

    def mid():
        for m, q, p, _ in mats:
            _orthogonalize(p.unsqueeze(0))  # one batch of one matrix, as the hook does
            torch.matmul(m.t(), p, out=q)  # Q = M^T P

    def post():
        for m, q, p, err in mats:
            torch.matmul(p, q.t(), out=m)  # decompress into the gradient
            torch.sub(scratch[: m.numel()].view_as(m), m, out=err)  # the new error

    parts = {
        "pre_s": _timed(pre, dev),
        "mid_s": _timed(mid, dev),
        "post_s": _timed(post, dev),
    }  # in order
    total = [a + b + c for a, b, c in zip(parts["pre_s"], parts["mid_s"], parts["post_s"])]
    return {
        "rank": rank,
        "matrices": len(mats),
        "min_compression_rate": min_rate,
        **parts,
        "s": total,
        **(_fresh(max(grads, key=torch.numel).reshape(-1), scratch, error, dev) if cpu else {}),
    }


def _fresh(g, scratch, error, dev) -> dict:
    """The hook's two allocations a step (input_tensor.clone() and input_tensor_cp - input_tensor,
    each its bucket's size) land in fresh pages on CPU: the step frees the previous ones, and glibc
    hands large blocks back to the kernel, which faults in and zeroes every page again. The probe's
    parts above write into touched buffers, so this times the same two writes both ways, on the
    largest gradient; the model prices the difference per byte of every bucket."""
    n = g.numel()
    s, e = scratch[:n], error[:n]

    def fresh():
        cp = g.clone()
        del cp  # freed before the next, as the step frees the clone before the next bucket's
        diff = g - s
        del diff

    def touched():
        s.copy_(g)
        torch.sub(g, s, out=e)

    return {
        "touched_s": _timed(touched, dev),
        "fresh_s": _timed(fresh, dev),
        "fresh_bytes": 2 * n * g.element_size(),
    }
