"""task=train_reference: the training step written by hand, as small as DDP training gets, for
measuring the harness itself (`python -m tasks.train.harness_cost --reference`).

Same config, started the same way (train.py, the same launcher and rank set-up), the same model,
batch, optimizer and bucket, and the same timed blocks as task=train (a device sync and a barrier at
each block's ends), so the only difference to task=train is the loop: one batch made once, no
loader, no phase timer, no counters, no probes."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from base.record import Record, typed_block
from base.record_types import Blocks, Threads, Throughput, TrainReferenceResult
from models import build_model
from comm.buckets import bucket_cap_mb
from tasks.train.loop import set_precision
from stats import block_throughput, fmt_ci
from tasks.train.check import check as train_check
from tasks.train.result import thread_counts
from tasks.train.window import settle_collector, timed_span


def check(cfg, submitting: bool = False, host=None) -> None:
    train_check(cfg, submitting, host)


def run(ctx) -> TrainReferenceResult | None:
    cfg, device = ctx.cfg, ctx.torch_device
    torch.manual_seed(cfg.seed)
    precision = set_precision(
        cfg.precision
    )  # task=train's own settings, so the two loops compute alike
    model = build_model(cfg.model, cfg.data.image_size).to(device)
    model = DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=bucket_cap_mb(cfg.bucket),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.solver.lr, momentum=cfg.solver.momentum)
    size = cfg.data.image_size
    x = torch.randn(cfg.batch_size, 3, size, size, device=device)
    y = torch.randint(0, cfg.model.num_classes, (cfg.batch_size,), device=device)

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(cfg.warmup_steps):
        step()
    settle_collector()  # as task=train's loop does before its window
    walls, sizes = [], []
    cpu = time.process_time()
    while sum(sizes) < cfg.steps:
        n = min(cfg.measure.block_steps, cfg.steps - sum(sizes))
        with timed_span(device, walls):
            for _ in range(n):
                step()
        sizes.append(n)
    everyone = [None] * ctx.world_size
    cpu_per_step = (time.process_time() - cpu) / sum(sizes)
    dist.all_gather_object(
        everyone, {"walls": walls, "threads": thread_counts(), "cpu_s_per_step": cpu_per_step}
    )
    if not ctx.is_main:
        return None
    slowest = [max(r["walls"][i] for r in everyone) for i in range(len(walls))]
    tp = block_throughput(slowest, sizes)
    per_step = cfg.batch_size * ctx.world_size
    throughput = Throughput(
        wall_s=sum(slowest),
        steps_per_s=tp["steps_per_s"],
        ci_lo=tp["ci_lo"],
        ci_hi=tp["ci_hi"],
        samples_per_s=tp["steps_per_s"] * per_step,
        n_blocks=tp["n_blocks"],
        method=tp["method"],
        blocks=Blocks(walls_s=slowest, steps=sizes),
    )
    return TrainReferenceResult(
        steps=sum(sizes),
        global_batch=per_step,
        world_size=ctx.world_size,
        throughput=throughput,
        precision=cfg.precision,
        precision_flags=precision,
        threads=[typed_block(Threads, r["threads"], "result.threads") for r in everyone],
        cpu_s_per_step=[r["cpu_s_per_step"] for r in everyone],
        headline={"steps/s": tp["steps_per_s"], "samples/s": tp["steps_per_s"] * per_step},
    )


def summarize(record: Record) -> str:
    r = record.result
    tp = r.throughput
    return (
        f"task=train_reference  model={record.setting('model.name')}  world_size={r.world_size}\n"
        f"throughput {fmt_ci(tp.steps_per_s, tp.ci_lo, tp.ci_hi, 'steps/s')} over {r.steps} steps "
        "(a hand-written DDP loop; compare with task=train: python -m tasks.train.harness_cost "
        "--reference)"
    )
