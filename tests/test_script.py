"""task=script: the user's own script, unchanged, under the local launcher on 2 gloo ranks. One run
per script shape serves many assertions; each bad input is one line (and a failed record where ranks
started)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, run_train

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]
BASE = ["task=script", "logger=none"]


def record(proc) -> dict:
    return json.loads((proc.out_dir / "run_record.json").read_text())


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    """rank 0 evaluates and checkpoints every 5 steps; its own `data` package and a file beside it;
    sys.exit(0)."""
    return run_train(
        [*BASE, "script.path=examples/eval_checkpoint.py", "script.args=[--every,3,--steps,24]"],
        tmp_path_factory.mktemp("eval"),
    )


@pytest.fixture(scope="module")
def amp_run(tmp_path_factory):
    """no_sync accumulation with AMP and a GradScaler, its own `models` package; stopped by
    script.max_steps."""
    return run_train(
        [
            *BASE,
            "script.path=examples/accumulate_amp.py",
            "script.args=[--accumulate,2]",
            "script.max_steps=14",
            "bucket=1",
        ],
        tmp_path_factory.mktemp("amp"),
    )


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """require_backward_grad_sync accumulation, torch.compile, two optimizers stepped on different
    iterations."""
    return run_train(
        [*BASE, "script.path=tests/script_cases/shapes.py", "script.args=[--mode,sync_flag]"],
        tmp_path_factory.mktemp("shapes"),
    )


def test_rank0_eval_checkpoint_and_exit_0(eval_run):
    assert eval_run.returncode == 0, eval_run.stderr[-2000:]
    r = record(eval_run)
    assert r["status"] == "ok" and r["task"] == "script"
    res = r["result"]
    assert res["script"]["ended"] == "exited 0" and res["script"]["steps_taken"] == 24
    assert len(res["series"]["step_time_s"]) == res["steps"] == 10
    assert {p["rank"] for p in res["per_rank"]} == {0, 1}
    assert res["comm"]["collectives_per_step"] >= 1 and res["comm"]["bytes_per_step"] > 0
    assert res["global_batch"] == 16  # 8 per rank, seen in the DDP forward's input
    assert "diagnosis" in res and eval_run.stdout.count("run record:") == 1
    # rank 0's evaluation every 3 steps: named with its rank, period and phase, not lost in a median
    hiccup = [f for f in res["diagnosis"]["findings"] if f["rule"] == "hiccup"]
    assert (
        hiccup and hiccup[0]["title"].startswith("Rank 0") and "every 3 steps" in hiccup[0]["title"]
    )
    assert "outside the timed phases" in hiccup[0]["title"]
    assert len(res["per_rank"][1]["series"]["step_time_s"]) == 10


def test_amp_no_sync_stopped_at_max_steps_with_bucket_applied(amp_run):
    assert amp_run.returncode == 0, amp_run.stderr[-2000:]
    res = record(amp_run)["result"]
    assert (
        res["script"]["ended"] == "stopped at script.max_steps=14"
        and res["script"]["steps_taken"] == 14
    )
    ddp = res["script"]["ddps"][0]
    assert ddp["applied"] == {"bucket_cap_mb": 1.0} and ddp["asked"]["bucket_cap_mb"] is None
    assert res["comm"]["buckets"]["count"] == 2  # the 1.1 MB of gradients in 1 MB buckets
    # 4 per micro-batch x 2 ranks, 2 micro-batches (two backward passes) per optimizer step
    assert res["global_batch"] == 8 and res["accumulate"] == 2 and res["effective_batch"] == 16
    assert (
        "bucket_cap_mb=1.0" in amp_run.stdout.splitlines()[0]
        or "bucket_cap_mb=1.0" in amp_run.stdout
    )


def test_grad_sync_flag_compile_two_optimizers(shapes_run):
    assert shapes_run.returncode == 0, shapes_run.stderr[-2000:]
    res = record(shapes_run)["result"]
    assert res["script"]["steps_taken"] == 20 and res["script"]["ended"] == "finished"
    assert (
        res["comm"]["collectives_per_step"] == 1
    )  # one all-reduce per step: the first micro-batch did not sync
    assert res["effective_batch"] == 32 and res["accumulate"] == 2


@pytest.mark.parametrize(
    "args, says",
    [
        (["script.path=no/such_script.py"], "script.path=no/such_script.py: no such file"),
        (
            ["script.path=examples/plain_ddp.py", "accumulate=4"],
            "accumulate= changes what the script computes",
        ),
        ([], "task=script needs the script"),
    ],
)
def test_refused_before_any_rank(args, says, tmp_path):
    proc = run_train([*BASE, *args], tmp_path)
    assert proc.returncode == 2 and says in proc.stdout + proc.stderr
    assert not (proc.out_dir / "run_record.json").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["script.path=examples/accumulate_amp.py"],
            "the script refused its arguments (the following arguments are required: --accumulate",
        ),
        (
            [
                "script.path=tests/script_cases/shapes.py",
                "script.args=[--mode,idle]",
                "script.first_step_timeout_s=4",
            ],
            "saw 0 optimizer steps in 4 s and no DistributedDataParallel: is this a training "
            "script?",
        ),
        (
            ["script.path=tests/script_cases/shapes.py", "script.args=[--mode,raises]"],
            "ValueError: the user's own bug at step 3",
        ),
    ],
)
def test_bad_script_fails_in_one_line_with_a_record(args, says, tmp_path):
    proc = run_train([*BASE, *args], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and says in out, out[-3000:]
    r = record(proc)
    assert r["status"] == "failed" and says in r["error"]
    if "raises" in " ".join(args):  # the script's own traceback, once, from its own frames
        assert out.count("Traceback (most recent call last)") == 1 and "shapes.py" in r["traceback"]
        assert "runpy" not in r["traceback"]
    else:
        assert "Traceback" not in out


def whatif(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "whatif", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_whatif_reads_a_script_record_from_its_buckets(amp_run, tmp_path):
    """The sizes the script's DDP carried and when each bucket's hook started are the what-if
    model's input; a named model stands in for them; a record without them is refused in one line
    naming --model."""
    r = record(amp_run)
    gr = r["result"]["grad_ready"]
    n = len(gr["names"])
    ddp = r["result"]["script"]["ddps"][0]
    assert n == len(gr["numel"]) == len(gr["shapes"]) and sorted(gr["order"]) == list(range(n))
    assert sum(a * b for a, b in zip(gr["numel"], gr["element_size"])) == ddp["grad_bytes"]
    mode = gr["modes"]["with_sync"]
    assert len(mode["ready_s"]) == len(mode["backward_s"]) == r["result"]["steps"]
    for ready, b in zip(mode["ready_s"], mode["backward_s"]):
        assert len(ready) == n and all(0 <= t <= b for t in ready)
        assert (
            len(set(ready)) == 2
        )  # bucket=1: two buckets, each parameter given its bucket's start
    proc = whatif(amp_run.out_dir, "--sweep", "bucket=1,25", "--out", tmp_path / "w")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "model=the script accumulate_amp.py" in proc.stdout and "accumulate=2" in proc.stdout
    assert "each bucket's comm hook start" in proc.stdout
    rows = json.loads((tmp_path / "w" / "whatif.json").read_text())["rows"]
    assert [len(row["buckets_bytes"]) for row in rows] == [2, 1]

    named = whatif(amp_run.out_dir, "--model", "vgg11_tiny", "--out", tmp_path / "m")
    assert named.returncode == 0 and "model=vgg11_tiny" in named.stdout, named.stderr[-2000:]

    bare = dict(r, result=dict(r["result"], grad_ready=None))
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    refused = whatif(tmp_path / "bare.json")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "--model NAME" in refused.stderr and "Traceback" not in refused.stderr


def test_fake_device_drives_the_cuda_path_and_times_the_batch_copies(tmp_path):
    """device=fake: the script's ops run under the fake's stream rules, the tool's marks are the
    device layer's events, and the script's own .to(device, non_blocking=True) of each loader batch
    is the h2d phase (two copies, x and y, per step); on a CPU rank the same call is no transfer and
    is left in the outside time."""
    from device.cpu import Device

    t = torch.ones(2)
    assert not Device().is_transfer(t, t.to("cpu", copy=True))
    proc = run_train(
        [*BASE, "device=fake", "script.path=tests/script_cases/copies.py"],
        tmp_path,
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = record(proc)["result"]
    layer = res["device_layer"]
    assert layer["kind"] == "fake" and layer["checked_ops"] > 1000
    assert layer["copies"] == 2 * res["steps"]  # only the window's batches are watched
    assert res["h2d"]["copies"] is True and res["phases"]["h2d"]["median"] > 0
    assert all(v > 0 for v in res["series"]["phases"]["h2d"])
    assert res["per_rank"][0]["work"]["h2d_s"] > 0


def test_sweep_over_a_script_prints_the_table_with_verdicts_and_the_wandb_report_spec(tmp_path):
    """The headline sweep's shape, kept short (2 x 2 jobs, stopped at 14 steps): each job's knobs
    applied to the script's own DDP, the table with a verdict per row printed on the submitting
    side, every job and the sweep logged offline to W&B, and the report's spec written with the
    command."""
    # one rank per job: what is checked is the sweep's (each job's knobs on the script's DDP, the
    # table, W&B, the report spec), the same for any world size; the script on 2 ranks is this
    # module's other runs' (issue 36)
    proc = run_train(
        [
            *BASE[:1],
            "script.path=examples/plain_ddp.py",
            "script.max_steps=14",
            "world_size=1",
            "optim=none,bf16",
            "bucket=1,25",
            "logger=wandb",
            "logger.mode=offline",
        ],
        tmp_path,
        multirun=True,
        timeout=900,
        env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = proc.out_dir
    table = (sweep / "sweep_table.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "optim=" in line]
    assert len(rows) == 4 and all("| ok " in r for r in rows), table
    verdicts = ("baseline", "faster", "slower", "equivalent", "no verdict", "not shown")
    assert all(any(v in r for v in verdicts) for r in rows), rows
    assert "verdict" in proc.stdout and "optim=bf16 bucket=25" in proc.stdout
    for n in range(4):
        r = json.loads((sweep / str(n) / "run_record.json").read_text())
        ddp = r["result"]["script"]["ddps"][0]
        assert ddp["applied"]["bucket_cap_mb"] == float(r["config"]["bucket"])
        assert ddp["optim"] == r["config"]["optim"]["name"]
        assert list((sweep / str(n) / "wandb").glob("offline-run-*"))
    spec = json.loads((sweep / "wandb_report.json").read_text())
    assert "task=script script.path=examples/plain_ddp.py" in json.dumps(spec)
