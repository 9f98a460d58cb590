"""Helpers of the slurm tests: is a usable cluster up (else the reason to skip), and what Slurm and
the sweep say.

The tests marked `slurm` submit to a real cluster as root; CI starts one with
`launchers/slurm_cluster/start.sh --nodes 2 --fake-gpus 1` (two namespaced nodes serve the one-node
tests too). Nothing here imitates Slurm: every answer comes from sinfo, sacct, /proc or the files a
sweep wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

START = "launchers/slurm_cluster/start.sh"


def cluster_problem(nodes: int = 1, gpus: bool = False) -> str | None:
    """Why the slurm tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return f"needs root: submits to the local Slurm cluster that `sudo {START}` starts"
    if shutil.which("sinfo") is None:
        return f"Slurm is not installed; start a local cluster with `sudo {START}`"
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N|%T|%G"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"sinfo failed ({e}); start a local cluster with `sudo {START}`"
    if out.returncode != 0:
        return (
            f"no Slurm controller answers (sinfo: {out.stderr.strip()}); start one with `sudo "
            f"{START}`"
        )
    up = [
        line.split("|")
        for line in out.stdout.splitlines()
        if line.split("|")[1].rstrip("*~#") in ("idle", "mixed", "allocated", "completing")
    ]
    if len(up) < nodes:
        return (
            f"needs {nodes} Slurm node(s) up, found {len(up)} ({out.stdout.split()}); start them "
            "with "
            f"`sudo {START} --nodes {nodes}{' --fake-gpus 1' if gpus else ''}`"
        )
    if gpus and not any(gres.startswith("gpu:") for _, _, gres in up):
        layout = f" --nodes {nodes}" if nodes > 1 else ""
        return (
            f"no Slurm node declares GPUs; start the cluster with `sudo {START}{layout} "
            "--fake-gpus 1`"
        )
    return None


def needs_cluster(nodes: int = 1, gpus: bool = False):
    problem = cluster_problem(nodes, gpus)
    return pytest.mark.skipif(problem is not None, reason=str(problem))


def table_rows(sweep: Path) -> dict[str, list[str]]:
    """job number -> the cells of its row in sweep_table.md."""
    rows = {}
    for line in (sweep / "sweep_table.md").read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        num = cells[0].split()[0] if cells and cells[0] else ""  # "0" or "0 (baseline)"
        if num.isdigit():
            rows[num] = cells
    return rows


def final_sacct(job_id: str, timeout: float = 30) -> dict[str, str]:
    """sacct's JobID|State|NTasks|AllocCPUS|NodeList of the job once it has left RUNNING/COMPLETING
    (the submitter returns as soon as every task wrote its result, a moment before Slurm marks the
    job done)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            [
                "sacct",
                "-n",
                "-P",
                "-X",
                "-o",
                "JobID,State,NTasks,AllocCPUS,NodeList",
                "-j",
                job_id.split("_")[0],
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        lines = {line.split("|")[0]: line.split("|") for line in out.splitlines()}
        line = lines.get(job_id)
        if (
            line
            and line[1] not in ("RUNNING", "COMPLETING", "PENDING")
            or time.monotonic() > deadline
        ):
            return dict(zip(("id", "state", "tasks", "cpus", "nodes"), line or []))
        time.sleep(1)


def job_processes(job_id: str) -> dict[int, dict[str, str]]:
    """{pid: {SLURM_PROCID, SLURMD_NODENAME, ...}} of the live processes of a Slurm job (array
    element "12_3" or job "12"), read from /proc: the namespaced nodes share this machine's process
    table."""
    array, _, index = job_id.partition("_")
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(
                kv.split("=", 1)
                for kv in (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in kv
            )
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        ours = (
            (env.get("SLURM_ARRAY_JOB_ID") == array and env.get("SLURM_ARRAY_TASK_ID") == index)
            if index
            else env.get("SLURM_JOB_ID") == array
        )
        if ours and "SLURM_PROCID" in env:
            found[int(proc.name)] = env
    return found


def start_endless_sweep(layout: list[str], sweep: Path) -> subprocess.Popen:
    """`python train.py -m <layout> ...` of one job of 100000 steps (killed by the test), W&B
    offline."""
    cmd = [
        sys.executable,
        "train.py",
        "-m",
        *layout,
        "model=vgg11_tiny",
        "scale=smoke",
        "logger=wandb",
        "logger.mode=offline",
        "steps=100000",
        f"hydra.sweep.dir={sweep}",
    ]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )


def wait_until_measuring(proc, sweep: Path, limit: float = 420) -> str:
    """The Slurm job id of the sweep's job, once its rank 0 (it prints the progress) is in the
    measured loop."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        logs = list(sweep.glob(".submitit/*/*_0_log.out"))
        if logs and "measured" in logs[0].read_text(errors="replace"):
            return logs[0].name.rsplit("_", 2)[0]
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.5)
    pytest.fail(
        f"the job did not reach its step loop within {limit:.0f} s; squeue: "
        f"{subprocess.run(['squeue'], capture_output=True, text=True).stdout}"
    )


def never_leave_behind(proc, job_id: str | None) -> None:
    """Never leave a 100000-step job running (submitit ignores SIGTERM: KILL it)."""
    if proc.poll() is None:
        proc.kill()
    if job_id is not None:
        subprocess.run(["scancel", "--full", "--signal=KILL", job_id], timeout=30)
        subprocess.run(["scancel", job_id], timeout=30)
