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
def test_two_node_sweep_is_one_array_its_gloo_crosses_the_nodes_and_a_failed_job_is_a_failed_row(
    tmp_path,
):
    """The README's example at tiny scale, 2 jobs x (2 nodes x 1 task) in one job array: every
    job's ranks rendezvous across the nodes (MASTER_ADDR = node1 by name); job 0's record names
    both hosts, rank 1 of job 1 raises at step 1 (fault injection) and job 1's row says so, naming
    its Slurm job and the failing rank's log (written on node2, read here: one shared filesystem);
    the table is made and printed on the submitting host, which exits non-zero after it. One sweep
    for what test_slurm's one-node array and this file's all-ok two-node sweep each ran (issue 36:
    one run per launcher and fault class)."""
    proc = run_train(
        [*TWO_NODES, *TINY, "fault.rank=null,1", "fault.step=1"],
        tmp_path,
        multirun=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    sweep = proc.out_dir
    ok, failed = (json.loads((sweep / n / "run_record.json").read_text()) for n in ("0", "1"))
    assert ok["status"] == "ok", ok.get("error")
    assert ok["env"]["hostnames"] == ["node1", "node2"], ok["env"]
    assert ok["env"]["world_size"] == 2 and ok["env"]["backend"] == "gloo"
    assert ok["config"]["world_size"] == 2
    assert sorted(r["rank"] for r in ok["result"]["per_rank"]) == [0, 1]
    assert [r["job"]["slurm_job_id"].split("_")[1] for r in (ok, failed)] == ["0", "1"]
    assert len({r["job"]["slurm_job_id"].split("_")[0] for r in (ok, failed)}) == 1, (
        "one multirun is one job array"
    )
    job_id, log = ok["job"]["slurm_job_id"], Path(ok["job"]["log"])
    assert log.is_file() and log.parent.parent == sweep / ".submitit"
    assert (log.parent / f"{job_id}_1_log.out").is_file()  # rank 1's own log, written on node2
    line = final_sacct(job_id)
    assert line["state"] == "COMPLETED" and line["nodes"] == "node[1-2]", line
    assert line["cpus"] == "2", line  # 2 nodes x 1 task x 1 CPU

    assert failed["status"] == "failed"
    assert "fault injected on rank 1" in failed["error"], failed["error"]
    job_id, log = failed["job"]["slurm_job_id"], Path(failed["job"]["log"])
    assert log.name == f"{job_id}_1_log.out" and "fault injected on rank 1" in log.read_text()
    rows = table_rows(sweep)
    assert set(rows) == {"0", "1"} and "ok" in rows["0"] and "failed" in rows["1"]
    row = " ".join(rows["1"])
    assert job_id in row and str(log) in row
    assert (
        "1 of 2 jobs failed" in out and "fault.rank=1" in proc.stdout
    )  # the table, printed on the submitting host


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
