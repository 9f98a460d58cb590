"""launcher=slurm across two real Slurm nodes on one machine, and Slurm's GPU binding with fake
GPUs.

The nodes are `launchers/slurm_cluster/start.sh --nodes 2 --fake-gpus 1`: two slurmd, each in its
own network and UTS namespace (node1 10.77.0.11, node2 10.77.0.12 on a bridge only this machine
has), sharing the controller, munge and the filesystem. What breaks across nodes shows here:
MASTER_ADDR resolution, the rendezvous port, hostnames in the record, the sweep dir on storage both
nodes write, --kill-on-bad-exit across nodes. Skipped, saying why, without root or such a cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from base.record import is_peer_failure
from tests.conftest import ROOT, TINY, run_train
from tests.slurm_cluster import (
    final_sacct,
    job_processes,
    needs_cluster,
    never_leave_behind,
    start_endless_sweep,
    table_rows,
    wait_until_measuring,
)

TWO_NODES = [
    "launcher=slurm",
    "launcher.nodes=2",
    "launcher.tasks_per_node=1",
    "launcher.cpus_per_task=1",
    "launcher.timeout_min=10",
]
pytestmark = [pytest.mark.slurm]


@pytest.mark.slow
@needs_cluster(nodes=2)
def test_two_node_sweep_runs_gloo_across_the_nodes_and_the_table_comes_back(tmp_path):
    """2 jobs x (2 nodes x 1 task): every job's ranks rendezvous across the nodes (MASTER_ADDR =
    node1 by name), its record names both hosts, and the sweep table is made on the submitting host
    from records the nodes wrote."""
    proc = run_train([*TWO_NODES, *TINY, "bucket=25,100"], tmp_path, multirun=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = proc.out_dir
    for num in (0, 1):
        record = json.loads((sweep / str(num) / "run_record.json").read_text())
        assert record["status"] == "ok", record.get("error")
        assert record["env"]["hostnames"] == ["node1", "node2"], record["env"]
        assert record["env"]["world_size"] == 2 and record["env"]["backend"] == "gloo"
        assert sorted(r["rank"] for r in record["result"]["per_rank"]) == [0, 1]
        job_id = record["job"]["slurm_job_id"]
        assert final_sacct(job_id)["nodes"] == "node[1-2]"
        rank1_log = Path(record["job"]["log"]).parent / f"{job_id}_1_log.out"
        assert rank1_log.is_file()  # written on node2, read here: one shared filesystem
    rows = table_rows(sweep)
    assert set(rows) == {"0", "1"} and all("ok" in cells for cells in rows.values())
    assert (
        "bucket=25" in proc.stdout and "bucket=100" in proc.stdout
    )  # the table printed on the submitting host


@pytest.mark.slow
@needs_cluster(nodes=2)
def test_rank_killed_on_one_node_ends_the_job_on_both_and_leaves_one_record(tmp_path):
    """SIGKILL to rank 1 on node2 in the middle of the measured loop: within seconds no process of
    the job is left on either node (gloo tells rank 0 on node1; srun --kill-on-bad-exit ends the
    step), and the job has exactly one record naming rank 1, and at most one W&B run."""
    sweep = tmp_path / "sweep"
    proc = start_endless_sweep(TWO_NODES, sweep)
    job_id = None
    try:
        job_id = wait_until_measuring(proc, sweep)
        tasks = {pid: env for pid, env in job_processes(job_id).items() if _is_task(pid)}
        where = {(env["SLURM_PROCID"], env["SLURMD_NODENAME"]) for env in tasks.values()}
        assert where == {("0", "node1"), ("1", "node2")}, where
        [victim] = [pid for pid, env in tasks.items() if env["SLURM_PROCID"] == "1"]
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        while job_processes(job_id) and time.monotonic() - killed < 60:
            time.sleep(0.2)
        ended = time.monotonic() - killed
        out, _ = proc.communicate(timeout=180)
    finally:
        never_leave_behind(proc, job_id)
    # rank 0 finalises before it exits (record, then its offline W&B run): ~3 s after the kill
    # without W&B, ~13 s with it on a busy 2-core machine; a job left to its collective timeout or
    # time limit would take minutes
    assert ended < 30, (
        f"processes of job {job_id} still alive {ended:.0f} s after rank 1 was killed: "
        f"{job_processes(job_id)}"
    )
    assert proc.returncode != 0, out[-3000:]
    assert [p.relative_to(sweep) for p in sweep.rglob("run_record.json")] == [
        Path("0/run_record.json")
    ]
    record = json.loads((sweep / "0" / "run_record.json").read_text())
    assert record["status"] == "failed" and record["job"]["slurm_job_id"] == job_id
    assert "rank 1" in record["error"] and not is_peer_failure(record["error"]), record["error"]
    assert len(list((sweep / "0" / "wandb").glob("offline-run-*"))) <= 1
    row = " ".join(table_rows(sweep)["0"])
    assert "failed" in row and job_id in row
    print(f"rank 1 killed on node2: no process of the job left after {ended:.1f} s")


@pytest.mark.slow
@needs_cluster(nodes=2)
def test_a_hang_across_two_nodes_is_declared_collected_and_ended(tmp_path):
    """Rank 1 on node2 asleep in its loader: rank 0's watch (launchers.hang.store_watch) declares
    the job hung after hang.after_s, both ranks' dumps come through the store into the run dir (rank
    1's written on node2), the record is `hung` naming rank 1, the sweep says so, and no process of
    the job is left on either node."""
    from diagnosis.hang_benchmark import COMMON

    proc = run_train(
        # hang.after_s=4, not the benchmark's 8: the run waits it out (tests/test_hang_runs.py)
        [*TWO_NODES, *COMMON, "hang.after_s=4", "fault.hang=data_sleep", "fault.hang_rank=1"],
        tmp_path,
        multirun=True,
        timeout=400,
    )
    run = proc.out_dir / "0"
    record = json.loads((run / "run_record.json").read_text())
    assert record["status"] == "hung", record["error"]
    assert record["error"].startswith("hung: rank 1 never entered all_reduce"), record["error"]
    assert "data/I/O wait" in record["error"]
    hosts = {json.loads((run / "hang" / f"facts_{r}.json").read_text())["host"] for r in (0, 1)}
    assert hosts == {"node1", "node2"}
    assert (run / "hang" / "rank_1").is_file() and (run / "hang" / "stacks_1.txt").is_file()
    job_id = record["job"]["slurm_job_id"]
    assert not job_processes(job_id)
    assert f"(Slurm {job_id}) hung: hung: rank 1" in proc.stderr, proc.stderr[-2000:]


def _is_task(pid: int) -> bool:
    """The process submitit runs each task in (the rank itself), not a helper it started."""
    try:
        return b"submitit.core._submit" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.slow  # two Slurm jobs (srun, a 2-task sbatch): the fast tier's slowest (issue 36)
@needs_cluster(nodes=1, gpus=True)
def test_job_given_gpus_that_cuda_cannot_see_is_refused(tmp_path):
    """A job that asks for a GPU gets Slurm's binding (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS,
    SLURM_GPUS_ON_NODE from the node's gres, here fake device files) and the tool then refuses to
    run its ranks on CPU: one line, exit code 2, from `srun` as from launcher=slurm (whose record
    says so)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    probe = subprocess.run(
        [
            "srun",
            "-N1",
            "-n1",
            "--gpus-per-node=1",
            "-t",
            "5",
            "sh",
            "-c",
            "printenv CUDA_VISIBLE_DEVICES SLURM_STEP_GPUS SLURM_GPUS_ON_NODE; "
            f"{sys.executable} train.py {' '.join(TINY)} hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env={**env, "WANDB_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.stdout.split()[:3] == ["0", "0", "1"], probe.stdout
    assert probe.returncode == 2, probe.stdout[-2000:] + probe.stderr[-2000:]
    [line] = [ln for ln in probe.stderr.splitlines() if ln.startswith("error:")]
    assert "Slurm gave this job GPU(s) 0" in line and "CUDA sees none" in line, line
    assert "Traceback" not in probe.stderr

    # two tasks (ranks) on the node's one fake GPU: both refuse, rank 0 alone writes the record (the
    # sweep table's row) and no W&B run is opened for a refused job (issue 19.10)
    proc = run_train(
        [
            "launcher=slurm",
            "launcher.gpus_per_node=1",
            "launcher.tasks_per_node=2",
            "launcher.cpus_per_task=1",
            "launcher.timeout_min=5",
            "model=vgg11_tiny",
            "scale=smoke",
            "logger=wandb",
            "logger.mode=offline",
        ],
        tmp_path,
        multirun=True,
        timeout=300,
        env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )
    assert proc.returncode != 0
    record = json.loads((proc.out_dir / "0" / "run_record.json").read_text())
    assert record["status"] == "failed" and record["result"] is None and record["env"] == {}
    assert not list((proc.out_dir / "0").glob("wandb/offline-run-*"))
    # "GPU(s) 0": SLURM_STEP_GPUS in the job, Slurm's binding of what launcher.gpus_per_node asked
    # for
    assert record["error"].startswith("ConfigError: Slurm gave this job GPU(s) 0"), record["error"]
