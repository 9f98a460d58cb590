"""Rank function for tests/test_diagnosis_runs.py: the on-rank microbenchmark on a real 2-rank gloo
group (module level so spawned ranks can import it)."""

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from models import build_model
from tasks.train.probes import comm_microbench
from tasks.train.loop import make_sync


def microbench_cases(cases: dict, model_cfg: dict) -> dict:
    """{name: microbench's result} for cases {name: (sync, diagnose, comm_s, wall_s)}, one after
    another on one gloo group: one launch of 2 ranks for the cases, not one per case (each paid
    two ranks' start-up; issue 36)."""
    dist.init_process_group("gloo")
    out = {name: microbench(case[0], model_cfg, *case[1:]) for name, case in cases.items()}
    dist.destroy_process_group()
    return out


def microbench(sync_name: str, model_cfg: dict, diagnose: dict, comm_s: float, wall_s: float):
    """One case: a fresh sync (DDP or per-param) of vgg11_tiny on the group, and its
    comm_microbench."""
    cfg = OmegaConf.create(
        {
            "sync": sync_name,
            "bucket": 0.01,
            "cuda_graphs": False,
            "optim": {"name": "none"},
            "warmup_steps": 1,
            "steps": 10,
            "probe_steps": 1,
            "diagnose": diagnose,
            "ddp": {
                "static_graph": False,
                "gradient_as_bucket_view": False,
                "find_unused_parameters": False,
                "broadcast_buffers": True,
            },
        }
    )
    torch.manual_seed(0)
    sync = make_sync(
        cfg, build_model(OmegaConf.create(model_cfg), image_size=32), torch.device("cpu")
    )
    if (
        sync_name == "ddp"
    ):  # DDP rebuilds its buckets after its first backward and reports them a step later
        for _ in range(3):
            sync.model(torch.randn(2, 3, 32, 32)).sum().backward()
    out = comm_microbench(
        cfg,
        sync,
        torch.device("cpu"),
        steps=[{"sync": comm_s}] * 3,
        comm_stats={"comm_s": comm_s} if sync_name == "ddp" else None,
        wall_s=wall_s,
        measured_steps=cfg.steps,
    )
    if out is not None:
        out["expected_sizes"] = (
            sync.buckets() if sync_name == "ddp" else [p.numel() * 4 for p in sync.params]
        )
    return out
