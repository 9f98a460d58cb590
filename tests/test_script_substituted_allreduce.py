"""The all-reduce task=script puts in place of DDP's built-in (no comm hook asked for) must
leave the script's gradients exactly as DDP's built-in makes them: the built-in multiplies each
gradient by 1 / the world size while copying it into the bucket (reducer.cpp,
copy_grad_to_bucket), where torch's allreduce_hook divides the bucket by the world size, and
x * float(1/3) is not x / 3 in the last bit for some x. Where a gradient already is its bucket
view (gradient_as_bucket_view=True, gradients kept between steps by zero_grad(set_to_none=False))
the built-in divides it in place instead (mark_variable_ready_dense: `bucket_view.div_`), so the
substitution must divide those and multiply the others, bucket by bucket and, in a bucket that
holds both, parameter by parameter. Three gloo ranks, so that the world size is not a power of
two."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from omegaconf import OmegaConf
from torch.nn.parallel import DistributedDataParallel

WORLD = 3


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def _rank(rank: int, store: str, out: str) -> None:
    from tasks.script.attach import Attach

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    cfg = OmegaConf.create(
        {
            "warmup_steps": 0,  # the window open from the start: the timed path
            "steps": 4,
            "script": {"max_steps": None, "first_step_timeout_s": 60},
            "bucket": None,
            "ddp": {"static_graph": False, "gradient_as_bucket_view": False},
            "optim": {"name": "none"},
        }
    )

    def build(as_view: bool) -> DistributedDataParallel:
        torch.manual_seed(0)
        # several buckets of 0.25 MB (the 512x512 weight alone is 1 MiB: a bucket of its own)
        return DistributedDataParallel(
            nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512)),
            bucket_cap_mb=0.25,
            gradient_as_bucket_view=as_view,
        )

    # (gradient_as_bucket_view, zero_grad's set_to_none, a parameter whose gradient the script sets
    # to None each step): fresh gradients each step (the built-in multiplies while copying in);
    # gradients kept as bucket views (it divides them in place from the second step); and a bucket
    # that holds both (the first layer's bias dropped each step, its weight kept); and kept
    # gradients once the window is over (its timing hooks gone: the untimed path)
    cases = {
        "fresh": (False, True, False),
        "kept": (True, False, False),
        "mixed": (True, False, True),
        "kept_after_the_window": (True, False, False),
    }
    pairs = {name: (build(c[0]), None) for name, c in cases.items()}
    attach = Attach(cfg, "cpu", rank).install()
    pairs = {name: (alone, build(cases[name][0])) for name, (alone, _) in pairs.items()}
    equal: dict[str, list[bool]] = {name: [] for name in cases}
    try:
        for name, (_, set_to_none, drop) in cases.items():
            if name == "kept_after_the_window":  # as _opt_post ends it: retired at the next forward
                step, attach.current, attach.over = attach.current, None, True
            torch.manual_seed(1 + rank)
            # DDP's first backward has one bucket; its buckets are rebuilt (0.25 MB) for the
            # second; kept gradients are bucket views from the second step on
            for _ in range(3):
                x = torch.randn(16, 64) * 3
                for model in pairs[name]:
                    model.zero_grad(set_to_none=set_to_none)
                    if drop:
                        model.module[0].bias.grad = None
                    model(x).square().sum().backward()
                equal[name] += [torch.equal(p, q) for p, q in zip(*map(_grads, pairs[name]))]
    finally:
        attach.uninstall()
    torch.save(
        {
            "equal": equal,
            "retired": attach.retired,
            "buckets": len({c[3] for c in step.comm}),
            "collective_s": step.collective_s,
            "substituted_s": step.substituted_s,
            "substituted": all(t.substituted for t in attach.timed),
        },
        f"{out}.{rank}",
    )
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_substituted_all_reduce_gives_the_builtins_gradients_bit_for_bit(tmp_path):
    out = str(tmp_path / "r")
    mp.spawn(_rank, args=(str(tmp_path / "store"), out), nprocs=WORLD)
    for rank in range(WORLD):
        r = torch.load(f"{out}.{rank}")
        assert r["substituted"] and r["buckets"] >= 2 and r["retired"]
        # 3 steps x 4 parameters a case, each gradient equal to the built-in's bit for bit
        differ = {name: equal for name, equal in r["equal"].items() if equal != [True] * 12}
        assert not differ, (rank, differ)
        # the process group's allreduce call is timed inside the substituted all-reduce
        assert 0 < r["collective_s"] < r["substituted_s"]


def test_x_over_3_and_x_times_a_third_differ_in_the_last_bit():
    # why the test above can fail: allreduce_hook's division (the tool's before issue 37's cut)
    # is not the built-in's multiplication on ordinary gradients
    torch.manual_seed(0)
    g = torch.randn(10_000)
    assert not torch.equal(g / 3, g * (1.0 / 3))
    assert torch.equal(g * (1.0 / 3), torch.mul(g, torch.tensor(1.0 / 3, dtype=torch.float64)))
