"""What became of submitted jobs, asked through submitit's job API: Slurm's state (sacct, via
`job.state` /
`job.get_info`; squeue where the cluster keeps no accounting) and, for a job that ended without
every task's result (killed, out of memory, time limit, node failure, a rank that raised), which
rank failed and why."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from base.record import is_peer_failure

STATE_POLL_S = 10.0  # how often Slurm is asked about jobs that have not written every result
RESULT_GRACE_S = (
    15.0  # after a job ended, how long its result files may take to appear (shared storage)
)
# Slurm states in which a job may still write results (submitit's Job.done() list, plus the
# transitional ones)
ACTIVE = {
    "READY",
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SUSPENDED",
    "STAGE_OUT",
    "SIGNALING",
    "PREEMPTED",
}
# What a final state means for the user, and what to change.
STATE_HINTS = {
    "CANCELLED": "cancelled (scancel, an administrator, or preemption)",
    "TIMEOUT": "hit its time limit: raise launcher.timeout_min",
    "OUT_OF_MEMORY": "out of memory: raise launcher.mem_gb",
    "NODE_FAIL": "a node failed",
    "FAILED": "a task exited non-zero or was killed by a signal",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "missed its deadline",
    "PREEMPTED": "preempted",
}


def wait(jobs: list) -> None:
    """Until every job has written all its tasks' results or Slurm says it ended. Result files are
    looked at every second (job.done()); Slurm is asked every STATE_POLL_S seconds, so a killed job
    is noticed within that."""
    pending, gone, asked = list(jobs), set(), float("-inf")
    while pending:
        if time.monotonic() - asked >= STATE_POLL_S:
            gone |= _refresh(pending)
            asked = time.monotonic()
        pending = [job for job in pending if not (job.done() or job.job_id in gone)]
        if pending:
            time.sleep(1)
    jobs[0].get_info(mode="force")  # final states, for the failure messages


def _refresh(jobs: list) -> set[str]:
    """One sacct call for all jobs (submitit's shared watcher). Returns the jobs that sacct does not
    know but that squeue shows ended or no longer lists (a cluster without accounting)."""
    jobs[0].get_info(mode="force")
    unknown = [job.job_id for job in jobs if job.state == "UNKNOWN"]
    listed = _squeue(unknown) if unknown else {}
    if listed is None:  # squeue failed too (controller restarting): ask again next time
        return set()
    return {job_id for job_id in unknown if listed.get(job_id, "GONE") not in ACTIVE}


def _squeue(job_ids: list[str]) -> dict[str, str] | None:
    arrays = sorted({j.split("_")[0] for j in job_ids})
    try:
        out = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-j", ",".join(arrays)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        return None
    return dict(line.split("|", 1) for line in out.stdout.splitlines() if "|" in line)


@dataclass
class Ending:
    """How one job ended, as the submitting host can tell."""

    error: str | None  # None: every task returned and rank 0's job succeeded
    log: str  # the log to read: the failing rank's, else rank 0's
    returned: Any = None  # rank 0's Hydra JobReturn, when it returned one
    hostnames: list[str] = field(default_factory=list)


def ending(job) -> Ending:
    """Read the tasks' results (task(i).exception() / .result()); for tasks without one, Slurm's
    state and the end of their log. The error names the task (= rank) whose own failure ended the
    job: a rank that only saw a peer's connection close comes after the rank that caused it."""
    tasks = [job.task(i) for i in range(job.num_tasks)]
    found = _outcomes(tasks)
    deadline = time.monotonic() + RESULT_GRACE_S
    while len(found) < len(tasks) and not _root_cause(found) and time.monotonic() < deadline:
        time.sleep(1)
        found = _outcomes(tasks)
    returned = found.get(0, (None, None))[1]
    errors = sorted(
        ((i, err) for i, (err, _) in found.items() if err),
        key=lambda ie: (is_peer_failure(ie[1]), ie[0]),
    )
    if errors and (not is_peer_failure(errors[0][1]) or len(found) == len(tasks)):
        i, err = errors[0]
        return Ending(
            f"Slurm job {job.job_id} rank {i}: {err}",
            str(tasks[i].paths.stdout),
            returned,
            _hostnames(job),
        )
    if len(found) == len(tasks):
        return Ending(None, str(tasks[0].paths.stdout), returned)
    missing = [i for i in range(len(tasks)) if i not in found]
    which = "any rank" if len(missing) == len(tasks) else f"rank {', '.join(map(str, missing))}"
    tail = _log_tail(tasks[missing[0]].paths.stdout)
    return Ending(
        f"Slurm job {job.job_id} ended without a result from {which} ({_state_words(job)})"
        + (f"; log ends: {tail}" if tail else ""),
        str(tasks[missing[0]].paths.stdout),
        returned,
        _hostnames(job),
    )


def _outcomes(tasks: list) -> dict[int, tuple[str | None, Any]]:
    """{task: (its error or None, what it returned)} for the tasks that wrote their result."""
    found = {}
    for i, task in enumerate(tasks):
        if not task.paths.result_pickle.exists():
            continue
        try:
            exception = task.exception()
            if exception is not None:
                found[i] = (_trace_tail(str(exception)), None)
                continue
            returned = task.result()
        except Exception as e:  # noqa: BLE001 - a truncated result is reported, not fatal
            found[i] = (
                f"unreadable result {task.paths.result_pickle}: {type(e).__name__}: {e}",
                None,
            )
            continue
        value = getattr(returned, "return_value", None)
        status = getattr(value, "status", "ok")  # job.run.JobResult
        found[i] = (
            str(getattr(value, "error", None) or status) if status != "ok" else None,
            returned,
        )
    return found


def _root_cause(found: dict[int, tuple[str | None, Any]]) -> bool:
    return any(err and not is_peer_failure(err) for err, _ in found.values())


def _trace_tail(text: str) -> str:
    """The last line of the traceback in submitit's FailedJobError message (the exception
    itself)."""
    parts = text.split("----------------------")
    trace = parts[1] if len(parts) >= 3 else text
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip()]
    return lines[-1] if lines else "failed"


def _state_words(job) -> str:
    state = job.state.split()[0] if job.state else "UNKNOWN"  # "CANCELLED by 0" -> CANCELLED
    if state == "UNKNOWN":
        return "Slurm has no state for it (no accounting, or it was purged)"
    return f"Slurm state {state}" + (f": {STATE_HINTS[state]}" if state in STATE_HINTS else "")


def _hostnames(job) -> list[str]:
    nodes = job.get_info(mode="cache").get("NodeList") or ""
    if not nodes or nodes == "None assigned":
        return []
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return [nodes]
    return out.stdout.split() or [nodes]


def _log_tail(path, lines: int = 2) -> str:
    """The last lines of a task's log that say something (progress bars left out), for the error
    message."""
    try:
        text = path.read_text(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return ""
    said = [
        ln.strip()[:200]
        for ln in text
        if ln.strip() and not ("it/s]" in ln or "s/it]" in ln or "%|" in ln)
    ]
    return " | ".join(said[-lines:])
