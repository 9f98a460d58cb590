"""Each of the three example scripts, unchanged, under every launcher besides the local one
(tests/test_script.py): under torchrun, behind an emulated 1 Gbit/s link (root), and on the 2-node
Slurm test cluster; each run's record is read by the diagnosis and by python -m whatif. Skipped,
saying why, where the machine has no root or no such cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_train
from tests.slurm_cluster import needs_cluster
from tests.test_link import needs_link

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]
EXAMPLES = {  # short runs of each: (script, its arguments)
    "plain_ddp": ("examples/plain_ddp.py", "[--epochs,1]"),
    "accumulate_amp": ("examples/accumulate_amp.py", "[--accumulate,2,--steps,14]"),
    "eval_checkpoint": ("examples/eval_checkpoint.py", "[--every,3,--steps,14]"),
}


def _args(name: str) -> list[str]:
    path, args = EXAMPLES[name]
    return ["task=script", f"script.path={path}", f"script.args={args}", "logger=none"]


def _read_by_diagnosis_and_whatif(run: Path, name: str) -> dict:
    record = json.loads((run / "run_record.json").read_text())
    assert record["status"] == "ok" and record["task"] == "script", record.get("error")
    res = record["result"]
    assert res["script"]["steps_taken"] >= 12 and res["comm"]["bytes_per_step"] > 0
    assert res["diagnosis"] and not res["diagnosis"].get("error")
    for module in ("diagnosis", "whatif"):
        read = subprocess.run(
            [sys.executable, "-m", module, str(run)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert read.returncode == 0, f"python -m {module}: {read.stderr[-2000:]}"
    assert f"model=the script {Path(EXAMPLES[name][0]).name}" in read.stdout, read.stdout[-2000:]
    return record


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_an_example_under_torchrun(name, tmp_path):
    """`torchrun --nproc_per_node=2 train.py task=script ...`: torchrun starts the ranks, each runs
    train.py, whose rank side attaches to the script as the local launcher's does."""
    run = tmp_path / "run"
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [str(torchrun), "--nproc_per_node=2", "train.py", *_args(name), f"hydra.run.dir={run}"],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    record = _read_by_diagnosis_and_whatif(run, name)
    assert record["env"]["world_size"] == 2


@pytest.mark.root
@needs_link
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_an_example_behind_an_emulated_1gbe_link(name, tmp_path):
    proc = run_train([*_args(name), "link=1gbe"], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    record = _read_by_diagnosis_and_whatif(proc.out_dir, name)
    assert record["env"]["link"]["emulated"] is True, record["env"]["link"]


@pytest.mark.slurm
@needs_cluster(nodes=2)
@pytest.mark.parametrize("name", ["plain_ddp", "accumulate_amp"])  # eval: test_script_slurm
def test_an_example_on_two_slurm_nodes(name, tmp_path):
    proc = run_train(
        [
            *_args(name),
            "launcher=slurm",
            "launcher.nodes=2",
            "launcher.tasks_per_node=1",
            "launcher.cpus_per_task=1",
            "launcher.timeout_min=10",
        ],
        tmp_path,
        multirun=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = _read_by_diagnosis_and_whatif(proc.out_dir / "0", name)
    assert record["env"]["hostnames"] == ["node1", "node2"]
