"""Untimed measurements after the window, so they cannot disturb the throughput figures."""
from __future__ import annotations

import statistics

import torch
import torch.distributed as dist


def ddp_comm_probe(sync, train_step, n: int) -> dict | None:
    """Median of DDP's runtime stats over n probe steps. DDP fills them in at the start of the next forward
    (synchronising the host with the GPU's timing events there, which is why this is not done in the window), so
    sampling is turned off again at the end."""
    if sync.runtime_stats_kind is None or n < 1:
        return None
    sync.enable_runtime_stats()
    samples = []
    for i in range(n + 1):
        train_step()
        if i > 0:  # stats now describe the previous step's backward
            samples.append(sync.runtime_stats())
    sync.disable_runtime_stats()
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def grad_error_probe(sync, criterion, autocast, device_batches, n: int) -> float | None:
    """Relative error ||g_scheme - g_exact|| / ||g_exact|| of the gradient a lossy comm hook delivers, against an exact
    fp32 all-reduce of the same local gradients (same batch, same weights), median over n batches. No optimizer
    step is taken, so the weights do not move."""
    if n < 1:
        return None
    model, params = sync.model, sync.params
    errors = []
    for _ in range(n):
        x, y = next(device_batches)
        for p in params:
            p.grad = None
        with sync.no_sync():
            with autocast():
                loss = criterion(model(x), y)
            loss.backward()
        exact = torch.cat([p.grad.detach().reshape(-1).float() for p in params])
        dist.all_reduce(exact)
        exact /= dist.get_world_size()
        for p in params:
            p.grad = None
        with autocast():
            loss = criterion(model(x), y)
        loss.backward()
        synced = torch.cat([p.grad.detach().reshape(-1).float() for p in params])
        errors.append(((synced - exact).norm() / exact.norm().clamp_min(1e-30)).item())
    for p in params:
        p.grad = None
    return statistics.median(errors)
