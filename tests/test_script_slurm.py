"""task=script under launcher=slurm on the 2-node test cluster: the user's script, unchanged, one
rank per node. One run; the record it writes is read by the diagnosis and by python -m whatif.
Skipped, saying why, without root or such a cluster (tests/slurm_cluster.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_train
from tests.slurm_cluster import needs_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.subprocess]


@needs_cluster(nodes=2)
def test_eval_checkpoint_script_on_two_nodes_is_diagnosed_and_modelled(tmp_path):
    """Rank 0 on node1 evaluates every 3 steps; rank 1 on node2 waits for it in DDP's all-reduce.
    The ranks start as torchrun would start them across two hosts (MASTER_ADDR is node1), the
    script's own init_process_group meets them, and the hiccup is named with its rank, node and
    period."""
    proc = run_train(
        [
            "task=script",
            "script.path=examples/eval_checkpoint.py",
            "script.args=[--every,3,--steps,24]",
            "launcher=slurm",
            "launcher.nodes=2",
            "launcher.tasks_per_node=1",
            "launcher.cpus_per_task=1",
            "launcher.timeout_min=10",
            "logger=none",
        ],
        tmp_path,
        multirun=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = proc.out_dir / "0"
    record = json.loads((run / "run_record.json").read_text())
    assert record["status"] == "ok" and record["task"] == "script", record.get("error")
    assert record["env"]["hostnames"] == ["node1", "node2"] and record["env"]["world_size"] == 2
    res = record["result"]
    assert res["script"]["ended"] == "exited 0" and res["script"]["steps_taken"] == 24
    assert [r["host"] for r in sorted(res["per_rank"], key=lambda r: r["rank"])] == [
        "node1",
        "node2",
    ]
    assert res["grad_ready"]["numel"] and res["comm"]["bytes_per_step"] > 0
    [hiccup] = [f for f in res["diagnosis"]["findings"] if f["rule"] == "hiccup"]
    assert hiccup["title"].startswith("Rank 0 on node1") and "every 3 steps" in hiccup["title"]
    assert "ok" in (proc.out_dir / "sweep_table.md").read_text()

    says = {"diagnosis": "Rank 0 on node1", "whatif": "model=the script eval_checkpoint.py"}
    for module, line in says.items():
        read = subprocess.run(
            [sys.executable, "-m", module, str(run)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert read.returncode == 0, f"python -m {module}: {read.stderr[-2000:]}"
        assert line in read.stdout, read.stdout[-2000:]
