"""Inside one rank, whoever started it: set the comm environment, start the process group, run the
task. Rank 0 hands its outcome (the task's result, the environment, or the error) back to job.run,
which turns it into the run record: no rank writes a record itself.

While it runs, a rank turns SIGINT/SIGTERM into base.interrupt.Interrupted (so rank 0 can still hand
in how far it got) and, under the local launcher, beats (launchers.heartbeat) so that a rank that
stops answering is named."""

from __future__ import annotations

import atexit
import functools
import gc
import logging
import os
import re
import socket
import sys
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

import tasks
from comm import env as comm_env
from base.context import RankContext
from launchers.hang import collecting, declared, hang_settings, park
from launchers.heartbeat import beating
from base.interrupt import Interrupted, signals_raise
from base.log import for_rank, get
from device import open_device
from device.placement import settle
from base.record import now

log = get(__name__)


@dataclass
class Outcome:
    """What rank 0 hands in. error is set when the rank failed; result then holds whatever was
    measured. progress: how far the task got (RankContext.progress); signal: the signal's name when
    one interrupted it."""

    started: str
    env: dict = field(default_factory=dict)
    result: dict | None = None
    error: str | None = None
    traceback: str | None = None
    progress: dict = field(default_factory=dict)
    signal: str | None = None


class RankError(RuntimeError):
    """Raised by rank 0 after its outcome was captured, so the job still fails with this rank
    named."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.error)
        self.outcome = outcome


def run_rank(plain: dict, job: dict, hand_in=None, on_hung=None) -> Outcome | None:
    """Entry point of every rank. RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT come from the
    environment (elastic launcher, torchrun, or submitit's TorchDistributedEnvironment on Slurm).
    Returns rank 0's Outcome (None on the other ranks); a failing or interrupted rank 0 raises
    RankError carrying it. hand_in: called on rank 0 with its Outcome as soon as the environment is
    known, so a record made without rank 0's last word (rank 0 killed while another rank's failure
    stops the job) still has it. on_hung: called on rank 0 with (launchers.hang.Hung, its Outcome)
    where the ranks watch themselves for a hang (torchrun, Slurm), to write the
    `hung` record before the watch ends the process."""
    own_log = for_rank(job)
    cfg = OmegaConf.create(plain)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    output_dir = Path(job["output_dir"])
    if own_log:
        log.info(
            f"rank {rank} of {world_size} started: pid {os.getpid()} on {socket.gethostname()}"
        )
    outcome = Outcome(started=now())
    launch_dir = job.get("launch_dir")
    with (
        signals_raise(),
        beating(launch_dir, rank, outcome.progress),
        collecting(
            launch_dir,
            job["output_dir"],
            rank,
            outcome.progress,
            hang_settings(plain),
            Path(launch_dir).name if launch_dir else job.get("slurm_job_id"),
            on_hung=(lambda hung: on_hung(hung, outcome)) if on_hung and rank == 0 else None,
            timeout_s=float(plain.get("timeout_s") or 120),
            job_num=job.get("num"),
        ),
    ):
        try:
            comm_env.apply(cfg, output_dir)
            timeout = timedelta(seconds=float(cfg.timeout_s))
            # device and backend: decided alike by every rank, or the same error on all of them
            # (device/placement.py)
            task = tasks.get(cfg.task)
            placement, store = settle(
                cfg,
                rank,
                world_size,
                local_rank,
                local_world,
                timeout,
                cpu_by_default=getattr(task, "CPU_BY_DEFAULT", False),
            )
            dev = open_device(placement)
            backend = placement.backend
            if not getattr(
                task, "OWN_PROCESS_GROUP", False
            ):  # task=script: the user's script starts its own
                dist.init_process_group(
                    backend,
                    store=store,
                    rank=rank,
                    world_size=world_size,
                    timeout=timeout,
                    **({"device_id": dev.torch_device} if backend == "nccl" else {}),
                )
            ctx = RankContext(
                cfg=cfg,
                rank=rank,
                world_size=world_size,
                local_rank=local_rank,
                device=dev,
                backend=backend,
                output_dir=output_dir,
                hostname=socket.gethostname(),
                store=dist.PrefixStore("ddp_comm/rank_side", store),
                progress=outcome.progress,
            )
            outcome.env = environment(ctx)
            if rank == 0:
                outcome.env["link"] = _link(job)
                if hand_in is not None:
                    hand_in(outcome)
                ctx.choose = functools.partial(top_fix_of, plain, job, outcome)
            result = task.run(ctx)
            if rank == 0:
                transports = comm_env.transports_from_logs(output_dir)
                if transports is not None:
                    result.nccl_transports = transports
                outcome.result = result
        except BaseException as e:
            if (
                declared()
            ):  # a peer left after the hang's record was written: the watch ends this process
                park()
            if rank == 0 and isinstance(e, Interrupted):
                outcome.signal, outcome.error = e.name, f"rank 0 interrupted by {e.name}"
            elif rank == 0:
                outcome.error = f"rank {rank} failed: {first_line(e)}"
                # a task's one-line error has none; task=script's gives the script's own frames only
                outcome.traceback = (
                    None
                    if getattr(e, "one_line", False)
                    else getattr(e, "own_traceback", None) or traceback.format_exc()
                )
            if own_log:
                log.info(
                    f"rank {rank} ended: {outcome.error or f'{type(e).__name__}: {e}'} "
                    f"{outcome.progress}"
                )
            if rank == 0:
                outcome.result = getattr(
                    e, "result", None
                )  # e.g. a failed correctness check keeps its figures
                raise RankError(outcome) from e
            raise
        finally:
            gc.unfreeze()  # what a task froze before its window (train.window.settle_collector)
            if dist.is_initialized():
                # a collection first: what reference cycles still hold of the group goes here, on
                # this thread (a DDP's hold is from C++ and stays: its gloo threads live on to exit,
                # see leave_without_teardown)
                gc.collect()
                dist.destroy_process_group()
    if own_log:
        log.info(f"rank {rank} finished {outcome.progress}")
    return outcome if rank == 0 else None


_exit_code: int | None = (
    None  # None until a rank finished in this process; then the code it leaves with at exit
)


def top_fix_of(
    plain: dict, job: dict, outcome: Outcome, result, switchable
) -> tuple[dict, str] | None:
    """(change, rule) of the first finding of rank 0's own diagnosis of `result` whose fix
    `switchable` accepts, before the record exists: what the in-job check (diagnose.verify,
    tasks/train/verify.py) measures."""
    from base.record import Record
    from diagnosis.run import top_fix

    record = Record.ok(plain, job, env=outcome.env, started=outcome.started, result=result)
    return top_fix(record, switchable)


def leave_without_teardown() -> None:
    """For a rank whose work is over and handed in: when its interpreter exits, end it with os._exit
    before the interpreter tears down what is left (atexit runs before CPython marks the interpreter
    as finalizing).

    Why: gloo's worker threads outlive destroy_process_group, and one that drops its last reference
    to a finished work object during Py_FinalizeEx is ended by CPython inside a destructor, which
    aborts the rank (SIGABRT) after every rank handed in; torch's elastic agent reads that as a
    failed rank. Registered only once the rank finished (a failing rank keeps its exit code); once
    per process. The code it ends with: what the process's one exit point gave (`exiting`:
    train.py), 1 for an exception nobody caught, else 0.
    """
    global _exit_code
    if _exit_code is None:
        _exit_code = 0
        atexit.register(_leave)


def exiting(code: int) -> int:
    """The code this process ends with, from its one exit point (train.py), kept for a finished
    rank's exit."""
    global _exit_code
    if _exit_code is not None:
        _exit_code = code
    return code


def _leave() -> None:
    code = (
        1 if hasattr(sys, "last_value") else _exit_code
    )  # Python sets it for an exception nobody caught
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def first_line(e: BaseException) -> str:
    """`Type: message` of an error; see worker_error."""
    text = f"{type(e).__name__}: {e}"
    return worker_error(text) or text


def worker_error(text: str) -> str | None:
    """A DataLoader worker's error re-raised in its rank ("RuntimeError: Caught X in DataLoader
    worker process N.", then the worker's traceback) as the worker's own last line, which names the
    path and the OS error, first; None for any other error text."""
    head, _, rest = text.partition("\n")
    m = re.match(r"\w+: Caught \w+ (in DataLoader worker process \d+)\.?$", head.strip())
    lines = [ln.strip() for ln in rest.splitlines() if ln.strip()]
    return f"{lines[-1]} ({m.group(1)})" if m and lines else None


def _link(job: dict) -> dict:
    """The link the ranks talk over (record env.link): the local launcher says (an emulated link it
    built, or loopback); a rank started otherwise (torchrun, Slurm) reads its own interface's
    shaping."""
    info = job.get("link")
    if info:
        return info["facts"]
    from launchers.link import observe

    return observe()


def environment(ctx: RankContext) -> dict:
    """What a reader needs to compare numbers across machines; gathered from every rank (before any
    timing)."""
    mine = {
        "host": ctx.hostname,
        "device": ctx.device.name(),
        "cpu_count": os.cpu_count(),
    }
    if dist.is_initialized():
        everyone = [None] * ctx.world_size
        dist.all_gather_object(everyone, mine)
    # no group of ours (task=script): through the store, never a collective on the script's groups
    else:
        from base.store import gather_objects

        everyone = gather_objects(ctx.store, "environment", ctx.rank, ctx.world_size, mine)
    nccl = None
    if torch.cuda.is_available() and dist.is_nccl_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "hostnames": sorted({r["host"] for r in everyone}),
        "cpu_count": everyone[0]["cpu_count"],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "python": sys.version.split()[0],
        "devices": [r["device"] for r in everyone],
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "backend": ctx.backend,
        "world_size": ctx.world_size,
        "vars": comm_env.recorded_vars(),
    }
