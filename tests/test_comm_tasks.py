"""The three comm tasks end to end: a real `python train.py` run for collectives and pair_groups
(Hydra, elastic launcher, 2 gloo ranks, run record, sweep table); grad_sync's full-size VGG11 run,
the failure and bad-input cases in this process (run_job on a composed config, ranks spawned as
train.py's), plus real 2-rank gloo checks that the correctness check catches a wrong collective
and that grad_sync's buckets are the ones DistributedDataParallel builds."""

import json
import time

import pytest
import torch

from comm import bandwidth as bw
from tests.conftest import ROOT, read, run_inprocess, run_train

SMALL_COLLECTIVES = [
    "task=collectives",
    "logger=none",
    "collectives.min_bytes=1001",
    "collectives.max_bytes=20000",
    "collectives.factor=4",
    "collectives.warmup_iters=1",
    "collectives.iters=3",
    "collectives.check_iters=2",
]


def ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = read(proc.out_dir)
    assert rec["status"] == "ok", rec.get("error")
    return rec


# -------------------------------------------------------------------------------------- collectives
@pytest.mark.slow
def test_collectives_table_all_ops_both_modes(tmp_path):
    proc = run_train(
        [*SMALL_COLLECTIVES, "world_size=2", "collectives.inplace=both", "verbose=true"], tmp_path
    )
    rec = ok(proc)
    r = rec["result"]
    assert (
        r["world_size"] == 2
        and r["backend"] == "gloo"
        and r["modes"] == ["out_of_place", "in_place"]
    )
    assert {row["op"] for row in r["rows"]} == set(bw.OPS)
    assert len(r["rows"]) == 4 * 3 * 2  # 4 ops x 3 sizes x 2 modes, one flat row each
    for row, per_rank in zip(r["rows"], r["time_per_rank_us"], strict=True):
        assert row["bytes"] % (8 if row["op"] in bw.SPLIT_OPS else 4) == 0
        assert row["wrong"] == 0 and row["time_us"] > 0 and row["time_max_us"] >= row["time_us"]
        assert len(per_rank) == 2 and max(per_rank) == row["time_max_us"]
        assert row["time_us"] == pytest.approx(sum(per_rank) / 2)
        assert row["algbw_GBps"] == pytest.approx(row["bytes"] / (row["time_us"] * 1e-6) / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * bw.bus_factor(row["op"], 2))
    assert sorted({row["bytes"] for row in r["rows"] if row["op"] == "all_gather"}) == [
        1000,
        4000,
        16016,
    ]
    assert r["wrong_total"] == 0 and rec["result"]["headline"]["#wrong"] == 0
    out = proc.stdout
    for col in (
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "out-of-place",
        "in-place",
        "slowest rank",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth",
    ):
        assert col in out
    assert "all_gather: sizes rounded down to a multiple of 8 B" in out
    assert "torch has no out-of-place form" in out
    # a data row as nccl-tests prints it: size, count, type, redop, root, then
    # time/algbw/busbw/#wrong per mode
    row = next(
        line.split()
        for line in out.splitlines()
        if line.split()[:5] == ["4000", "500", "float", "sum", "-1"]
    )
    assert row[8] == "0" and row[12] == "0"


@pytest.mark.slow
def test_collectives_wrong_result_fails_the_run(tmp_path, capfd):
    rec, code = run_inprocess(
        [
            *SMALL_COLLECTIVES,
            "world_size=2",
            "collectives.ops=[all_reduce,broadcast]",
            "collectives.inplace=both",
            "++collectives.corrupt_rank=1",
        ],
        tmp_path,
    )
    assert code != 0
    err = capfd.readouterr().err
    assert "CorrectnessError" in err and "wrong elements in the correctness check" in err
    assert rec["status"] == "failed" and "wrong elements" in rec["error"]
    # the runner keeps CorrectnessError.result: the counts are in the record (a dropped result fails
    # here)
    assert (
        rec["result"] and rec["result"]["wrong_total"] == 2 * 3 * 2
    )  # 2 ops x 3 sizes x 2 modes, 1 wrong on rank 1


# ---------------------------------------------------------------------------------------- grad_sync
@pytest.mark.slow
def test_grad_sync_vgg11_comparison(tmp_path, capfd):
    """In this process (run_job, 2 spawned gloo ranks): the check is the task's numbers and
    summary, not the entry point (the collectives and pair_groups runs start `python train.py`);
    the parent's start-up (python, torch, Hydra) is saved, the ranks' full-size VGG11 is not."""
    rec, code = run_inprocess(
        [
            "task=grad_sync",
            "model=vgg11",
            "world_size=2",
            "logger=none",
            "grad_sync.warmup_iters=0",
            "grad_sync.iters=1",
        ],
        tmp_path,
        timeout=400,
    )
    out = capfd.readouterr().out
    assert code == 0 and rec["status"] == "ok", rec and rec.get("error")
    r = rec["result"]
    assert (
        r["param_tensors"] == 22
        and r["params"] == 132_863_336
        and r["total_bytes"] == 132_863_336 * 4
    )
    assert len(r["per_param"]) == 22 and all(p["time_s"] > 0 for p in r["per_param"])
    classifier = next(g for g in r["groups"] if g["group"] == "classifier")
    assert classifier["bytes"] == 123_642_856 * 4 and classifier["tensors"] == 6
    assert classifier["per_param_s"] == pytest.approx(
        sum(p["time_s"] for p in r["per_param"] if p["group"] == "classifier")
    )
    m = r["methods"]
    assert (
        m["per_param"]["calls"] == 22 and m["flat"]["calls"] == 1 and m["microbench"]["calls"] == 1
    )
    for name in ("per_param", "flat", "bucketed", "coalesced", "microbench"):
        assert m[name]["time_s"] > 0, name
    for name in ("per_param", "flat", "bucketed", "coalesced"):
        assert m[name]["wrong"] == 0, name
    assert sum(m["bucketed"]["bucket_bytes"]) == r["total_bytes"] and m["bucketed"]["calls"] >= 2
    assert m["microbench"]["bytes"] == r["total_bytes"]
    assert "allreduce_coalesced" in m["coalesced"]["how"]
    assert "classifier" in out and "471.7 MiB" in out
    for word in ("per_param", "flat", "bucketed", "coalesced", "microbench", "why:"):
        assert word in out
    # the explanation quotes this run's own numbers
    why = " ".join(r["explanation"])
    assert (
        f"{m['per_param']['time_s'] * 1e3:.3g} ms" in why
        and f"{r['latency']['time_s'] * 1e3:.3g} ms" in why
    )
    assert set(r["headline"]) >= {"per_param ms", "flat ms", "bucketed ms", "microbench ms"}


# -------------------------------------------------------------------------------------- pair_groups
@pytest.mark.slow
def test_pair_groups_sweep(pair_groups_sweep):
    proc = pair_groups_sweep  # shared with test_diagnosis_runs' curve test
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [read(proc.out_dir / str(i)) for i in range(2)]
    for pairs, rec in zip((1, 2), recs):
        r = rec["result"]
        assert rec["status"] == "ok" and r["pairs"] == pairs and r["world_size"] == 2 * pairs
        assert rec["env"]["world_size"] == 2 * pairs and len(r["per_rank"]) == 2 * pairs
        assert r["rank0_s"] == r["per_rank"][0]["wall_s"] and r["slowest_s"] == max(
            p["wall_s"] for p in r["per_rank"]
        )
        assert r["iters"] == 64 and r["shape"] == [10, 10] and not r["async_op"]
        assert r["headline"]["ranks"] == 2 * pairs and r["headline"]["rank 0 s"] > 0
    table = (proc.out_dir / "sweep_table.md").read_text()
    assert (
        "pairs=1" in table and "pairs=2" in table and "rank 0 s" in table and "slowest s" in table
    )
    assert "Time to run target() (rank 0)" in proc.stdout


# --------------------------------------------------------------------- real gloo ranks, no train.py
def _gather_nothing_class():
    from tasks.collectives import Case

    class GatherNothing(Case):
        """An all_gather that moves no data."""

        def __call__(self):
            pass

    return GatherNothing


def _two_rank_worker(rank: int, store: str, out: str):
    import os
    import socket
    from pathlib import Path

    import dataclasses

    import torch.distributed as dist
    from omegaconf import OmegaConf

    import base.schema as schema
    from tasks import collectives, grad_sync, pair_groups
    from base.context import RankContext
    from base.errors import ConfigError
    from models import build_model

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    cfg = OmegaConf.structured(schema.Config)  # the knobs' defaults
    s = collectives.settings(cfg)
    found = {}
    cpu = torch.device("cpu")
    for op in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        case = collectives.Case(op, "out_of_place", 4096, s, rank, 2, cpu)
        found[f"{op} right"] = collectives.run_check(case, s, 2, cpu)
    # deliberately wrong collectives: the wrong reduce op, or data that never moved
    for op in ("all_reduce", "reduce_scatter"):
        case = collectives.Case(op, "in_place", 4096, s, rank, 2, cpu)
        case.redop = dist.ReduceOp.MAX
        found[f"{op} max-for-sum"] = collectives.run_check(case, s, 1, cpu)
    case = _gather_nothing_class()("all_gather", "out_of_place", 4096, s, rank, 2, cpu)
    found["all_gather no-op"] = collectives.run_check(case, s, 1, cpu)

    # grad_sync's buckets vs the ones DDP rebuilds after its first step
    mcfg = OmegaConf.create(
        {
            "model": OmegaConf.load(ROOT / "conf" / "model" / "vgg11_tiny.yaml"),
            "scale": {"image_size": 32},
        }
    )
    shapes, ready, _ = grad_sync.model_gradients(mcfg)
    for mb in (0.01, 0.05, None):  # None: DDP's default, the first bucket capped at 1 MiB
        ddp = torch.nn.parallel.DistributedDataParallel(
            build_model(mcfg.model, 32), bucket_cap_mb=mb
        )
        for _ in range(3):  # DDP rebuilds its buckets in the second step's forward
            ddp(torch.randn(2, 3, 32, 32)).sum().backward()
        data = ddp._get_ddp_logging_data()
        mine = grad_sync.Bucketed(grad_sync.Grads(shapes, rank, 2, cpu), mb, cpu, ready)
        found[f"ddp {mb}"] = [data["rebuilt_bucket_sizes"], ", ".join(map(str, mine.bucket_bytes))]
    # pair_groups' variants: async_op=true and one thread per rank
    os.environ["OMP_NUM_THREADS"] = (
        "2"  # not what the knob asks, so the knob must be what sets them
    )
    torch.set_num_threads(2)
    pcfg = OmegaConf.create(
        {
            "pairs": 1,
            "pair_groups": {
                "warmup_iters": 8,
                "iters": 32,
                "shape": [10, 10],
                "async_op": True,
                "threads": 1,
            },
        }
    )
    from device import layer_for

    ctx = RankContext(
        pcfg, rank, 2, rank, layer_for(cpu), "gloo", Path(store).parent, socket.gethostname()
    )
    res = pair_groups.run(ctx)
    # an op the backend refuses (gloo's avg on int32) becomes a plain ConfigError on the first call
    avg_int = dataclasses.replace(s, reduce_op=schema.ReduceOp.avg, dtype=schema.DType.int32)
    bad = collectives.Case("all_reduce", "in_place", 4096, avg_int, rank, 2, cpu)
    try:
        collectives._warm_up(bad, 2, "gloo", cpu)
        found["unsupported"] = None
    except ConfigError as e:
        found["unsupported"] = str(e)
    if rank == 0:
        found["pair_groups"] = res.to_dict()
        with open(out, "w") as f:
            json.dump(found, f)
    dist.destroy_process_group()
    # as a product rank: DDP keeps the group's gloo threads past destroy_process_group, and one
    # freeing a Work's tensors while the interpreter finalizes aborts this finished rank (SIGABRT;
    # launchers.rank.leave_without_teardown)
    from launchers.rank import leave_without_teardown

    leave_without_teardown()


@pytest.mark.slow
def test_check_catches_wrong_collectives_buckets_match_ddp_pair_variants(tmp_path):
    import torch.multiprocessing as mp

    out = tmp_path / "found.json"
    ranks = mp.spawn(
        _two_rank_worker, args=(str(tmp_path / "store"), str(out)), nprocs=2, join=False
    )
    deadline = time.monotonic() + 180
    while not ranks.join(timeout=1):  # raises if a rank failed
        if time.monotonic() > deadline:
            for p in ranks.processes:
                p.kill()
            pytest.fail("the 2-rank worker did not finish in 180 s")
    found = json.loads(out.read_text())
    for op in bw.OPS:
        assert found[f"{op} right"] == 0
    assert found["all_reduce max-for-sum"] == 1024  # every element of rank 0's buffer
    assert found["reduce_scatter max-for-sum"] == 512
    assert found["all_gather no-op"] == 1024  # both chunks still zero
    for mb in (0.01, 0.05, None):  # None: DDP's default, the first bucket capped at 1 MiB
        ddp_sizes, mine = found[f"ddp {mb}"]
        assert mine == ddp_sizes
    assert found["unsupported"].startswith(
        "backend gloo cannot run all_reduce (in-place, reduce_op=avg) on cpu torch.int32 tensors"
    )
    p = found["pair_groups"]
    assert p["async_op"] is True and p["torch_threads"] == 1 and p["omp_num_threads"] == "1"
    assert (
        [r["torch_threads"] for r in p["per_rank"]] == [1, 1]
        and p["rank0_s"] > 0
        and p["iters"] == 32
    )
    assert all(
        len(r["block_us_per_op"]) == 8 for r in p["per_rank"]
    )  # 8 timed blocks of 4 all_reduces
    assert (
        p["per_op_us"]["n"] == 8
        and p["per_op_us"]["ci_lo"] <= p["per_op_us"]["median"] <= p["per_op_us"]["ci_hi"]
    )


# ---------------------------------------------------------------------------------------------- GPU
gpus = torch.cuda.device_count()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(gpus == 0, reason="needs CUDA")
@pytest.mark.parametrize("backend,device", [("nccl", "cuda"), ("gloo", "cuda")])
def test_collectives_on_gpu(tmp_path, backend, device):
    world = min(2, gpus) if backend == "nccl" else 2
    rec = ok(
        run_train(
            [
                *SMALL_COLLECTIVES,
                f"world_size={world}",
                f"backend={backend}",
                f"collectives.device={device}",
                "collectives.inplace=both",
                # gloo ranks on CUDA tensors share the GPUs (placement refuses 2 ranks on 1 GPU
                # otherwise)
                *(["device=cuda"] if backend == "gloo" else []),
            ],
            tmp_path,
        )
    )
    r = rec["result"]
    assert r["device"].startswith("cuda") and r["backend"] == backend and r["wrong_total"] == 0
    assert r["timing"] == "CUDA events on the current stream"


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(gpus == 0, reason="needs CUDA")
def test_grad_sync_on_gpu(tmp_path):
    world = min(2, gpus)
    rec = ok(
        run_train(
            [
                "task=grad_sync",
                "model=vgg11_tiny",
                f"world_size={world}",
                "backend=nccl",
                "logger=none",
                "grad_sync.iters=2",
            ],
            tmp_path,
        )
    )
    assert rec["result"]["device"].startswith("cuda")
    assert all(m.get("wrong") in (0, None) for m in rec["result"]["methods"].values())


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(gpus < 2, reason="needs 2 GPUs (one per rank with nccl)")
def test_pair_groups_nccl(tmp_path):
    rec = ok(
        run_train(
            ["task=pair_groups", "pairs=1", "backend=nccl", "logger=none", "pair_groups.iters=64"],
            tmp_path,
        )
    )
    assert rec["result"]["backend"] == "nccl" and rec["result"]["device"].startswith("cuda")
