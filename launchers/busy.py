"""A busy neighbour of known size (`fault.busy_cores=N`): N processes that spin in Python on the
machine that launches the ranks, from before the ranks start until the job ends however it ends.

Why a job knob and not a process the benchmark starts beside a sweep: the diagnosis benchmark's
busy_host case measured its fix (no neighbour) in another sweep, minutes apart, so pairing by round
cancelled no drift and its measured saving's interval was 65 points wide (issue 38). As a knob, one
sweep over fault.busy_cores=1,0 interleaves the busy runs with their fix, round by round.

Only launcher=local: the spinners are children of the launching process, so they reach the ranks
only where the ranks run beside it (a Slurm job's or torchrun's ranks run elsewhere, or are the
launcher themselves). No debris: each spinner asks the kernel for SIGKILL when its parent dies
(prctl PR_SET_PDEATHSIG) and also leaves when its parent changes, so a launcher killed with
SIGKILL leaves no spinner behind; `neighbours` kills and reaps them on every other way out.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from base.errors import ConfigError

# The spinner: pure user-space Python between the parent checks (a getppid every ~10^6 iterations,
# tens of ms), so it competes for a core as a CPU-bound neighbour does.
MARK = "ddp-comm-busy-neighbour"  # in each spinner's argv: tests (and ps) find them by it
SPIN = (
    "import os, sys\n"
    "parent = int(sys.argv[1])\n"
    "try:\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL\n"
    "except (OSError, AttributeError):\n"
    "    pass  # not Linux: the parent check below ends it\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(1000000):\n"
    "        pass\n"
)


def check(cfg, *, submitting: bool = False, host=None) -> None:
    """fault.busy_cores's refusals, before any rank starts (one line, exit 2)."""
    from base.record import setting

    n = int(setting(cfg, "fault.busy_cores", 0) or 0)
    if n == 0:
        return
    launcher = setting(cfg, "launcher.name", "local")
    if launcher != "local" or submitting:
        raise ConfigError(
            f"fault.busy_cores={n} spins on the machine that launches the ranks, and a Slurm job's "
            "ranks run on its nodes: drop fault.busy_cores, or use launcher=local."
        )
    if host is not None and host.ranks_started:
        raise ConfigError(
            f"fault.busy_cores={n} is started by the launcher of the ranks, and this process is a "
            "rank already (torchrun or srun): run `python train.py ...` itself, without torchrun."
        )
    cpus = host.cpus if host is not None and host.cpus else os.cpu_count() or 1
    if n > cpus:
        raise ConfigError(
            f"fault.busy_cores={n} spins more processes than this machine's {cpus} CPU(s): use "
            f"fault.busy_cores<={cpus}."
        )


@contextlib.contextmanager
def neighbours(n: int):
    """n spinning processes for the block (their Popen objects); killed and reaped when it ends,
    on an exception or a signal too."""
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", SPIN, str(os.getpid()), MARK],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
