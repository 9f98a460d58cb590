"""The in-job check's ranks end their rounds together: each decides after every round from
numbers all_reduced across the ranks (tasks/train/verify.py, _measure), never from its own clock.
A rank that stopped alone would leave the others waiting in the next round's barrier until the
hang watch ended the job. Two gloo ranks, rank 1's clock running 100x fast (a slow rank, in the
check's own terms), so the two ranks' own estimates of a round's cost are 100x apart."""

from __future__ import annotations

import datetime
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from omegaconf import OmegaConf

WORLD = 2


def _rank(rank: int, store: str, out: str) -> None:
    from base.record_types import InJobCheck
    from tasks.train import verify

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=30),
    )
    if rank == 1:
        t0, fast = time.perf_counter(), 100.0
        verify.time = SimpleNamespace(perf_counter=lambda: t0 + fast * (time.perf_counter() - t0))
    cfg = OmegaConf.create(
        # a width never reached: the rounds end on the clock; verify_max_s=0: at the budget
        {"diagnose": {"verify_width": 1e-9, "verify_max_s": 0.0}, "h2d": "pageable"}
    )
    ctx = SimpleNamespace(cfg=cfg, torch_device=torch.device("cpu"))

    def make_step(sync, h2d=None):
        return lambda: time.sleep(0.004 if h2d is None else 0.003)

    check = InJobCheck(budget_s=100.0)  # 1 s of rank 0's clock: admitted under load
    decided = verify.time.perf_counter()
    verify._measure(ctx, make_step, None, SimpleNamespace(block=1), check, {"h2d": "x"}, decided)
    got = {"rounds": check.rounds, "stopped": check.stopped, "skipped": check.skipped}
    torch.save(got, f"{out}.{rank}")
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_ranks_end_the_checks_rounds_together_whatever_their_own_clocks(tmp_path):
    out = str(tmp_path / "r")
    mp.spawn(_rank, args=(str(tmp_path / "store"), out), nprocs=WORLD)
    got = [torch.load(f"{out}.{rank}") for rank in range(WORLD)]
    assert got[0]["skipped"] is None and got[0]["stopped"] == "budget", got
    assert got[0]["rounds"] >= 3 and got[0] == got[1], got
