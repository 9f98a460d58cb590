"""Rank function for tests/test_sync_equivalence.py (module level so spawned ranks can import
it)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from omegaconf import OmegaConf

from tasks.train.loop import make_sync
from models import build_model


def every_strategy(
    strategies: list[str], model_cfg: dict, steps: int = 2
) -> dict[str, torch.Tensor]:
    """One process group, each strategy in turn from the same initial weights and the same data:
    {strategy: flat parameters after `steps` steps}."""
    dist.init_process_group("gloo")
    try:
        return {s: one_step(s, model_cfg, steps) for s in strategies}
    finally:
        dist.destroy_process_group()


def one_step(strategy: str, model_cfg: dict, steps: int = 2) -> torch.Tensor:
    rank = dist.get_rank()
    cfg = OmegaConf.create(
        {
            "sync": strategy,
            "bucket": 0.001,
            "cuda_graphs": False,
            "optim": {"name": "none"},
            "ddp": {
                "static_graph": False,
                "gradient_as_bucket_view": False,
                "find_unused_parameters": False,
                "broadcast_buffers": True,
            },
        }
    )
    torch.manual_seed(0)
    model = build_model(OmegaConf.create(model_cfg), image_size=32)
    sync = make_sync(cfg, model, torch.device("cpu"))
    opt = torch.optim.SGD(sync.model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(
        100 + rank
    )  # different data on each rank: only averaging makes them agree
    for _ in range(steps):
        x, y = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
        nn.functional.cross_entropy(sync.model(x), y).backward()
        sync.after_backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.barrier()  # the next strategy starts with every rank done with this one
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
