"""Runs of the train task: 2 gloo ranks started by the elastic launcher, tiny models; the record
says what ran. Most run in this process (run_job on a composed config); the entry point itself
(`python train.py`: the recorded command line, exit codes, Hydra's own errors, the harness-cost
command) runs as a real subprocess."""

import pytest

from base.record import SCHEMA_VERSION
from data.make_raw_folder import make_raw_folder
from tests.conftest import TINY, read, run_inprocess, run_train

pytestmark = pytest.mark.slow
PARAMS_VGG11_TINY = 22


def ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ok_record(read(proc.out_dir))


def ok_record(rec, code=0):
    assert code == 0 and rec["status"] == "ok", rec and rec.get("error")
    assert rec["schema_version"] == SCHEMA_VERSION
    return rec


def ok_inprocess(overrides, tmp_path, **kw):
    return ok_record(*run_inprocess(overrides, tmp_path, **kw))


def test_default_strategy_ddp_record(tmp_path):
    proc = run_train(TINY, tmp_path)
    rec = ok(proc)
    r = rec["result"]
    assert "phase" in proc.stdout and "throughput" in proc.stdout
    assert r["world_size"] == 2 and r["backend"] == "gloo" and len(r["per_rank"]) == 2
    assert set(r["phases"]) >= {"data", "h2d", "forward", "backward", "sync", "optimizer"}
    assert r["throughput"]["samples_per_s"] == pytest.approx(r["throughput"]["steps_per_s"] * 4)
    assert len(r["series"]["step_time_s"]) == r["steps"] == 10
    # serial correlation recorded for every run (issue 22): the blocks' and each series' lag-1 and
    # effective size
    assert {"lag1", "n_eff"} <= set(r["throughput"]) and {"lag1", "n_eff"} <= set(r["step_time_s"])
    # 10 blocks: the step median has its interval, the long-run rate (stalls included) none until 60
    # (issue 39)
    assert (
        "60 blocks" in r["throughput"]["method"]
        and "batch medians" in r["step_time_s"]["ci_method"]
    )
    c = r["comm"]
    assert c["buckets"]["count"] >= 1 and c["bytes_per_step"] == sum(c["buckets"]["sizes_bytes"])
    assert (
        c["time_s"] > 0
        and c["exposed_s"] >= 0
        and c["busbw_GBps"] == pytest.approx(c["algbw_GBps"])
    )
    assert rec["env"]["world_size"] == 2 and rec["env"]["torch"] and rec["env"]["hostnames"]
    assert rec["overrides"] == TINY and rec["command"].startswith("python train.py")
    assert r["h2d"]["copies"] is False  # CPU: no copy, and the record says so
    b = r["time_budget"]
    assert 0 <= b["launcher_cpu_s"] <= b["launcher_wall_s"] * 4 and b["launcher_cpu_share"] < 1
    # issue 25: the console answers in <= 25 lines besides the progress bar, the record path last;
    # the job log keeps the full detail (the launcher's CPU, threads, per rank, every finding) that
    # verbose=true prints
    shown = proc.stdout.splitlines() + [
        line for line in proc.stderr.splitlines() if "\r" not in line and "it/s]" not in line
    ]
    assert len(shown) <= 25, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == f"run record: {proc.out_dir / 'run_record.json'}"
    assert "launcher:" not in proc.stdout and "serial correlation" not in proc.stdout
    log = (proc.out_dir / "train.log").read_text()
    assert "launcher:" in log and "serial correlation" in log and "run record:" in log
    assert r["diagnosis"]["findings"] is not None and "error" not in r["diagnosis"], r["diagnosis"]


@pytest.mark.parametrize("sync,collectives", [("per_param", PARAMS_VGG11_TINY), ("flat", 1)])
def test_explicit_strategies_count_their_collectives(tmp_path, sync, collectives):
    r = ok_inprocess([*TINY, f"sync={sync}"], tmp_path)["result"]
    assert r["comm"]["collectives_per_step"] == collectives
    assert r["comm"]["exposed_s"] == r["comm"]["time_s"] == r["phases"]["sync"]["median"]


def test_local_single_rank_has_no_comm(tmp_path):
    r = ok_inprocess([*TINY, "sync=local", "world_size=1"], tmp_path)["result"]
    assert r["world_size"] == 1 and r["comm"] is None


def test_raw_folder_data(tmp_path):
    root = make_raw_folder(tmp_path / "raw", classes=4, files_per_class=8, size=64)
    r = ok_inprocess([*TINY, "data=raw_folder", f"data.root={root}", "data.workers=0"], tmp_path)[
        "result"
    ]
    assert r["steps"] == 10


def test_config_error_exits_2_with_message_and_no_traceback(tmp_path):
    proc = run_train([*TINY, "batch_size=0"], tmp_path)
    assert proc.returncode == 2
    assert "batch_size=0: must be >= 1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        not proc.out_dir.exists()
    )  # refused before any rank: no record, no directory (issue 19.10)


def test_unknown_model_lists_choices(tmp_path):
    proc = run_train(["model=resnet9000", "logger=none"], tmp_path)
    assert (
        proc.returncode == 2
        and "model=resnet9000 is not an option of model; choose one of:" in proc.stderr
    )
    assert "vgg11" in proc.stderr and "Traceback" not in proc.stderr


def test_vit_l_32_real_size_runs(tmp_path):
    """306 M parameters: 1.2 GB of gradients all-reduced by 2 gloo ranks (small images keep the
    compute short; one step, no probe steps: the bytes are what DDP's buckets hold). Neither
    SGD's momentum buffer nor DDP's separate gradient copy changes those bytes: without them
    (solver.momentum=0, ddp.gradient_as_bucket_view=true) each rank allocates and writes 2 x 1.2 GB
    less."""
    r = ok_inprocess(
        [
            "model=vit_l_32",
            "scale=smoke",
            "logger=none",
            "warmup_steps=0",
            "steps=1",
            "probe_steps=0",
            "solver.momentum=0",
            "ddp.gradient_as_bucket_view=true",
        ],
        tmp_path,
        timeout=600,
    )["result"]
    # at 64x64 the position embedding has 2*2+1 tokens instead of 7*7+1: 45*1024 fewer parameters
    # than at 224
    assert r["comm"]["bytes_per_step"] == (306_535_400 - 45 * 1024) * 4


def test_harness_cost_command_prints_the_ratio():
    import subprocess
    import sys

    from tests.conftest import ROOT

    # one rank per variant: the command's work (two train.py jobs, their ratio) is the same for any
    # world size
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tasks.train.harness_cost",
            "--pairs",
            "1",
            "model=vgg11_tiny",
            "scale=smoke",
            "world_size=1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        "timing on :" in out.stdout
        and "timing off:" in out.stdout
        and "ratio on/off:" in out.stdout
    )


def test_train_reference_runs_as_its_own_task(tmp_path):
    """The hand-written loop harness_cost --reference sets beside task=train: same checks, same
    record shape."""
    rec = ok_inprocess([*TINY, "task=train_reference", "measure.policy=fixed"], tmp_path)
    r = rec["result"]
    assert r["steps"] == 10 and r["world_size"] == 2 and r["throughput"]["n_blocks"] == 10
    assert (
        r["throughput"]["ci_lo"] is None and "60 blocks" in r["throughput"]["method"]
    )  # 10 blocks (issue 39)
    assert len(r["threads"]) == 2 and all(c > 0 for c in r["cpu_s_per_step"])
    # the same precision path as task=train (torch's TF32 defaults unless asked otherwise), recorded
    assert r["precision"] == "fp32" and r["precision_flags"]["cudnn_allow_tf32"] is True
