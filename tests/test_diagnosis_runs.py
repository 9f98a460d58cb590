"""The diagnosis on real ranks: the on-rank microbenchmark on a 2-rank gloo group, and real `python train.py` runs
whose records hold the probe, the straggler and the diagnosis, printed at the end of the run and of the sweep."""
from __future__ import annotations

import uuid

import pytest
from omegaconf import OmegaConf
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from diagnosis import VERSION
from tests.conftest import CONF, TINY, read, run_train
from tests.diagnosis_worker import microbench

pytestmark = pytest.mark.slow


def launch(sync: str, diagnose: dict, comm_s: float = 0.01, wall_s: float = 10.0) -> dict:
    cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, run_id=str(uuid.uuid4()), rdzv_backend="c10d",
                       rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1, start_method="spawn")
    model_cfg = OmegaConf.to_container(OmegaConf.load(CONF / "model" / "vgg11_tiny.yaml"))
    return elastic_launch(cfg, microbench)(sync, model_cfg, diagnose, comm_s, wall_s)


AUTO = {"microbench": "auto", "microbench_iters": 3, "microbench_budget": 0.1}


def test_microbench_times_each_bucket_ddp_built():
    out = launch("ddp", AUTO)
    r0, r1 = out[0], out[1]
    assert r0["skipped"] is None and r0["iters"] == 3
    sizes = sorted(s["bytes"] for s in r0["sizes"] for _ in range(s["calls"]))
    assert sizes == sorted(r0["expected_sizes"]) and len(sizes) > 1           # bucket=0.01 MB: several buckets
    assert all(s["time_s"]["n"] == 3 and s["time_s"]["median"] > 0 for s in r0["sizes"])
    assert r1["iters"] == 3                                                     # every rank took rank 0's branch


def test_microbench_per_param_adds_one_call_of_the_total():
    r0 = launch("per_param", AUTO)[0]
    assert sum(s["calls"] for s in r0["sizes"]) == 22                          # vgg11_tiny's parameter tensors
    assert r0["total"]["bytes"] == sum(r0["expected_sizes"])


def test_microbench_auto_skips_over_budget_and_true_forces_it():
    r0 = launch("ddp", AUTO, comm_s=5.0, wall_s=1.0)[0]                        # one pass >> 10% of a 1.2 s run
    assert r0["skipped"].startswith("one pass of the sync's calls takes") and "sizes" not in r0
    forced = launch("ddp", {**AUTO, "microbench": True}, comm_s=5.0, wall_s=1.0)[0]
    assert forced["skipped"] is None and forced["iters"] == 3


def test_microbench_off():
    assert launch("ddp", {**AUTO, "microbench": False})[0] is None


def test_train_run_records_probe_straggler_and_prints_the_diagnosis(tmp_path):
    proc = run_train([*TINY, "diagnose.microbench=true", "verbose=true"], tmp_path)   # the full detail printed
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = read(proc.out_dir)["result"]
    vs = r["comm"]["vs_microbench"]
    assert r["microbench"]["sizes"] and vs["achievable_s"] > 0 and vs["efficiency"] == pytest.approx(
        vs["achievable_s"] / r["comm"]["time_s"])
    s = r["straggler"]
    assert s["rank"] in (0, 1) and len(s["per_rank"]) == 2 and s["mostly"] in ("data", "h2d", "compute")
    assert all(p["work"]["torch_threads"] >= 1 and p["work"]["cpu_s"] > 0 for p in r["per_rank"])
    d = r["diagnosis"]
    assert d["version"] == VERSION and "comparisons" in d and "microbench" in d["comparisons"]
    assert "\ndiagnosis: " in proc.stdout and "comm vs on-rank microbenchmark" in proc.stdout
    assert "straggler: rank" in proc.stdout


def test_per_param_run_top_finding_is_the_per_parameter_all_reduce(tmp_path):
    proc = run_train([*TINY, "sync=per_param", "diagnose.microbench=true", "steps=6"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = read(proc.out_dir)["result"]["diagnosis"]
    named = [f["rule"] for f in d["findings"] if not f["first"]] + [x["rule"] for x in d["inside_noise"]]
    assert "per_param" in named                      # named, or counted inside the noise on a busy machine


def test_scaling_sweep_gives_one_scaling_table_plot_and_diagnosis(tmp_path):
    proc = run_train(["experiment=scaling", *TINY], tmp_path, multirun=True, timeout=480)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = proc.out_dir
    assert read(sweep / "0")["result"]["sync"] == "local" and read(sweep / "1")["result"]["sync"] == "ddp"
    md = (sweep / "sweep_scaling.md").read_text()
    assert md.count("| default") == 2 and "exposed comm ms" in md and "scaling efficiency" in md
    assert (sweep / "sweep_scaling.png").is_file() and (sweep / "sweep_diagnosis.md").is_file()
    assert "sweep diagnosis (2 finished runs" in proc.stdout and "scaling (efficiency" in proc.stdout


def test_pair_groups_sweep_gives_one_curve(tmp_path):
    proc = run_train(["task=pair_groups", "pairs=1,2", "pair_groups.iters=64", "logger=none"], tmp_path,
                     multirun=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.out_dir / "sweep_pair_groups.png").is_file()
    assert "pair groups (one curve across pairs)" in proc.stdout
