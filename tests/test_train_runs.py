"""Real runs of train.py: Hydra, the elastic launcher, 2 gloo ranks, tiny models; the record says what ran."""
import time

import pytest

from data.make_raw_folder import make_raw_folder
from tests.conftest import TINY, read, run_train

pytestmark = pytest.mark.slow
PARAMS_VGG11_TINY = 22


def ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = read(proc.out_dir)
    assert rec["status"] == "ok" and rec["schema_version"] == 2
    return rec


def test_default_strategy_ddp_record(tmp_path):
    proc = run_train(TINY, tmp_path)
    rec = ok(proc)
    r = rec["result"]
    assert "phase" in proc.stdout and "throughput" in proc.stdout
    assert r["world_size"] == 2 and r["backend"] == "gloo" and len(r["per_rank"]) == 2
    assert set(r["phases"]) >= {"data", "h2d", "forward", "backward", "sync", "optimizer"}
    assert r["throughput"]["samples_per_s"] == pytest.approx(r["throughput"]["steps_per_s"] * 4)
    assert len(r["series"]["step_time_s"]) == r["steps"] == 3
    c = r["comm"]
    assert c["buckets"]["count"] >= 1 and c["bytes_per_step"] == sum(c["buckets"]["sizes_bytes"])
    assert c["time_s"] > 0 and c["exposed_s"] >= 0 and c["busbw_GBps"] == pytest.approx(c["algbw_GBps"])
    assert rec["env"]["world_size"] == 2 and rec["env"]["torch"] and rec["env"]["hostnames"]
    assert rec["overrides"] == TINY and rec["command"].startswith("python train.py")
    assert r["h2d"]["copies"] is False  # CPU: no copy, and the record says so


@pytest.mark.parametrize("sync,collectives", [("per_param", PARAMS_VGG11_TINY), ("flat", 1)])
def test_explicit_strategies_count_their_collectives(tmp_path, sync, collectives):
    r = ok(run_train([*TINY, f"sync={sync}"], tmp_path))["result"]
    assert r["comm"]["collectives_per_step"] == collectives
    assert r["comm"]["exposed_s"] == r["comm"]["time_s"] == r["phases"]["sync"]["median"]


def test_local_single_rank_has_no_comm(tmp_path):
    r = ok(run_train([*TINY, "sync=local", "world_size=1"], tmp_path))["result"]
    assert r["world_size"] == 1 and r["comm"] is None


def test_raw_folder_data(tmp_path):
    root = make_raw_folder(tmp_path / "raw", classes=4, files_per_class=8, size=64)
    r = ok(run_train([*TINY, "data=raw_folder", f"data.root={root}", "data.workers=0"], tmp_path))["result"]
    assert r["steps"] == 3


def test_a_failing_rank_ends_the_job_quickly_with_its_error(tmp_path):
    t = time.monotonic()
    proc = run_train([*TINY, "fault.rank=1", "fault.step=2", "timeout_s=300"], tmp_path)
    elapsed = time.monotonic() - t
    assert proc.returncode == 1
    assert "rank 1 failed: RuntimeError: fault injected on rank 1 at step 2" in proc.stderr
    assert elapsed < 60, f"took {elapsed:.0f}s: the job waited instead of ending"
    rec = read(proc.out_dir)
    assert rec["status"] == "failed" and "fault injected on rank 1" in rec["error"]


def test_config_error_exits_2_with_message_and_no_traceback(tmp_path):
    proc = run_train([*TINY, "batch_size=0"], tmp_path)
    assert proc.returncode == 2
    assert "batch_size=0: must be >= 1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert read(proc.out_dir)["status"] == "failed"


def test_unknown_model_lists_choices(tmp_path):
    proc = run_train(["model=resnet9000", "logger=none"], tmp_path)
    assert proc.returncode == 2 and "model=resnet9000 is not an option of model; choose one of:" in proc.stderr
    assert "vgg11" in proc.stderr and "Traceback" not in proc.stderr


def test_vit_l_32_real_size_runs(tmp_path):
    """306 M parameters: 1.2 GB of gradients all-reduced by 2 gloo ranks (small images keep the compute short)."""
    r = ok(run_train(["model=vit_l_32", "scale=smoke", "logger=none", "warmup_steps=0", "steps=1", "probe_steps=1"],
                     tmp_path))["result"]
    # at 64x64 the position embedding has 2*2+1 tokens instead of 7*7+1: 45*1024 fewer parameters than at 224
    assert r["comm"]["bytes_per_step"] == (306_535_400 - 45 * 1024) * 4


def test_harness_cost_command_prints_the_ratio():
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = subprocess.run([sys.executable, "-m", "tasks.train.harness_cost", "--pairs", "1", "model=vgg11_tiny",
                          "scale=smoke"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "timing on :" in out.stdout and "timing off:" in out.stdout and "ratio on/off:" in out.stdout
