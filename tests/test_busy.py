"""fault.busy_cores (launchers/busy.py): the busy neighbour spins while the job runs, is gone when
it ends however it ends (a failed job, a launcher killed with SIGKILL), and bad values are refused
in one line before any rank starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from base.errors import ConfigError
from device.host import Host
from job.config import validate
from launchers import busy
from tests.conftest import ROOT, TINY, compose

GIB = 1 << 30
CPU_HOST = Host(gpus=0, cpus=2, free_bytes=16 * GIB, gpu_free_bytes=None)


def spinners(parent: int | None = None) -> dict[int, float]:
    """The busy neighbours alive now (of `parent`, or anyone's): pid -> CPU seconds so far."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if busy.MARK.encode() in argv and stat[0] != "Z":
            if parent is None or argv[argv.index(busy.MARK.encode()) - 1] == str(parent).encode():
                out[int(proc.name)] = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return out


def seen(pid: int, parent: int, limit: float = 5.0) -> bool:
    """Whether spinner `pid` of `parent` shows in /proc within `limit` s. Popen returns at the
    exec's point of no return, before the kernel has the new argv: /proc/PID/cmdline read then is
    empty (2 of 25 starts with both cores busy, 2026-12-08), and the spinner has no mark yet."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pid in spinners(parent):
            return True
        time.sleep(0.01)
    return False


def gone(pids, limit: float = 5.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if not set(pids) & set(spinners()):
            return True
        time.sleep(0.05)
    return False


# ------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "overrides, host, says",
    [
        (["launcher=slurm"], CPU_HOST, "use launcher=local"),
        (
            [],
            Host(gpus=0, cpus=2, free_bytes=16 * GIB, gpu_free_bytes=None, ranks_started=True),
            "without torchrun",
        ),
        (["fault.busy_cores=3"], CPU_HOST, "use fault.busy_cores<=2"),
    ],
)
def test_bad_busy_cores_are_refused_in_one_line(overrides, host, says):
    with pytest.raises(ConfigError) as e:
        validate(compose(["fault.busy_cores=1", *TINY, *overrides]), host=host)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_no_busy_cores_is_accepted_where_busy_cores_would_be_refused():
    validate(compose([*TINY, "fault.busy_cores=0", "launcher=slurm"]), host=CPU_HOST)
    with pytest.raises(ConfigError):
        validate(compose([*TINY, "fault.busy_cores=1", "launcher=slurm"]), host=CPU_HOST)


# ------------------------------------------------------------------------------- the spinners
@pytest.mark.subprocess
def test_neighbours_spin_for_the_block_and_are_gone_after_it_even_on_an_error():
    with pytest.raises(RuntimeError, match="the job failed"):
        with busy.neighbours(2) as procs:
            pids = [p.pid for p in procs]
            end = time.monotonic() + 20  # on a loaded 2-core host a spinner gets a share of a core
            while (seen := spinners(os.getpid())) and time.monotonic() < end:
                if min(seen.get(p, 0.0) for p in pids) > 0.2:
                    break
                time.sleep(0.1)
            assert set(pids) <= set(seen)
            assert min(seen[p] for p in pids) > 0.2, seen  # they burn CPU, not sleep
            raise RuntimeError("the job failed")
    assert not set(pids) & set(spinners()), "a spinner outlived its block"


@pytest.mark.subprocess
def test_a_launcher_killed_with_sigkill_leaves_no_spinner():
    code = (
        "import sys, time\n"
        "from launchers import busy\n"
        "with busy.neighbours(1) as procs:\n"
        "    print(procs[0].pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    pid = int(launcher.stdout.readline())
    assert seen(pid, launcher.pid)
    launcher.kill()
    launcher.wait()
    assert gone([pid]), "the spinner outlived its launcher's SIGKILL"


# --------------------------------------------------------------------------------- whole jobs
@pytest.mark.slow
@pytest.mark.parametrize("fails", [False, True])
def test_a_job_with_busy_cores_has_its_spinner_while_it_runs_and_none_after(tmp_path, fails):
    args = [*TINY, "fault.busy_cores=1", "timeout_s=120", f"hydra.run.dir={tmp_path / 'run'}"]
    if fails:
        args += ["fault.rank=1", "fault.step=2"]
    job = subprocess.Popen(
        [sys.executable, "train.py", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )
    seen: dict[int, float] = {}
    while job.poll() is None:
        seen.update(spinners(job.pid))
        time.sleep(0.05)
    err = job.stderr.read()
    assert job.returncode == (1 if fails else 0), err[-2000:]
    assert len(seen) == 1, seen  # one spinner, of this job
    assert max(seen.values()) > 0.5, seen  # it spun for the job, not for a moment
    assert gone(seen, limit=0.5), "a spinner outlived its job"
