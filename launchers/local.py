"""world_size ranks on this machine through torch.distributed.launcher.api.elastic_launch, the launcher behind
torchrun: a c10d rendezvous on a free local port, one spawned process per rank, and when any rank fails the agent
stops the others at once (max_restarts=0), so a failure ends the job within seconds instead of hanging it.

The ranks and this process share a private launch directory (a temp dir, not the output dir, so an output location
that stopped being writable loses nothing): rank 0 hands its Outcome over through one pickle there, whether it
succeeded, failed or was interrupted, so the record made here keeps what was measured; every rank beats there
(core.heartbeat), so a rank that stops answering is named and killed instead of being waited for.

A signal to this process (Ctrl-C, `timeout`, `kill`) reaches the agent, which stops the ranks; it comes out of here as
core.interrupt.Interrupted carrying rank 0's Outcome.

With `link=` set, this process first builds the run's emulated network (launchers/link.py) and holds it while the
ranks run: each rank enters its node's namespace first thing (rank_entry), rendezvous at node 0's address instead of
loopback; the record's env.link says which link the ranks had (loopback otherwise)."""
from __future__ import annotations

import gc
import logging
import os
import pickle
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from core.heartbeat import Watch, silent_limit
from core.interrupt import Interrupted, note, restored_handlers
from launchers import link

OUTCOME_FILE = "rank0_outcome.pkl"
SHUTDOWN_S = 5  # how long the agent waits for the other ranks to exit after a failure before it kills them
TIMEOUT_SIGNS = ("timed out", "timeout")


class RankFailed(RuntimeError):
    def __init__(self, rank: int, message: str, traceback: str | None, outcome=None):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.message, self.traceback, self.outcome = rank, message, traceback, outcome


@record
def rank_entry(plain: dict, job: dict):
    if (job.get("link") or {}).get("join"):   # behind an emulated link: into this rank's node before any socket
        from launchers.link import join

        join(job["link"])
    from core.rank import RankError, run_rank

    try:
        outcome = run_rank(plain, job)
    except RankError as e:
        _hand_in(e.outcome, job)
        if e.outcome.signal:
            _exit_now()
        raise
    except Interrupted:
        _exit_now()
    if outcome is not None:
        _hand_in(outcome, job)


def _exit_now() -> None:
    """An interrupted rank, once rank 0 handed in: exit at once. The interpreter's own exit can wait for ever on a
    collective left in flight (the garbage collector frees it and waits for a peer that is gone), and a
    BaseException would print a traceback; the launcher reports the interruption itself."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _hand_in(outcome, job: dict) -> None:
    path = Path(job["launch_dir"]) / OUTCOME_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(outcome))
    tmp.replace(path)


def _take(launch_dir: Path):
    path = launch_dir / OUTCOME_FILE
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - none handed in (rank 0 killed): nothing to keep
        return None


def _quiet_torch() -> None:
    """We report the failing rank ourselves, once. torch's elastic loggers each carry their own level, so setting the
    parent's is not enough."""
    prefixes = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")
    for name in [*prefixes, *logging.root.manager.loggerDict]:
        if name.startswith(prefixes):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def launch_local(plain: dict, job: dict):
    """Rank 0's Outcome. Raises RankFailed naming the rank that failed (or stopped answering) with rank 0's Outcome
    if it has one, or Interrupted when this process got SIGINT/SIGTERM."""
    _quiet_torch()
    launch_dir = Path(tempfile.mkdtemp(prefix="ddp-comm-launch-"))
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=int(plain["world_size"]),
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        shutdown_timeout=SHUTDOWN_S,
    )
    threads = torchrun_threads(int(plain["world_size"]))
    watch = Watch(launch_dir, silent_limit(plain["timeout_s"]))
    spec = link.spec_of(plain)
    network = link.Network(spec, int(plain["world_size"])) if spec is not None else None
    try:
        if network is not None:
            network.build()   # LinkError (a ConfigError): nothing started yet
        link_info = network.rank_info() if network is not None else {"emulated": False, "facts": link.LOOPBACK}
        try:
            with restored_handlers(), watch:
                elastic_launch(config, rank_entry)(plain, {**job, "launch_dir": str(launch_dir), "link": link_info})
            error = None
        except SignalException as e:
            note(e.sigval)
            error = Interrupted(e.sigval)
        except Interrupted as e:  # before the agent took over the signals
            error = Interrupted(e.signum)
        except ChildFailedError as e:
            error = _failed(e, watch)
        gc.collect()  # the dead agent's rendezvous keep-alive timer is stopped by a finalizer: run it in this thread
        outcome = _take(launch_dir)
        if outcome is not None and outcome.env:
            outcome.env.setdefault("link", link_info["facts"])
    finally:
        if network is not None:
            network.close()   # this process's hold on the namespaces; the kernel frees them with the last rank
        threads()
        shutil.rmtree(launch_dir, ignore_errors=True)
    if error is None:
        return outcome
    error.outcome = outcome
    raise error


def _failed(e: ChildFailedError, watch: Watch) -> RankFailed:
    """Who is to blame: a rank the heartbeat watch found stuck; else the first rank that failed, unless that failure
    was a timeout waiting for another rank, which the heartbeats then name; rank 0 in its own words."""
    if watch.stuck is not None:
        return RankFailed(watch.stuck.rank, watch.stuck.message, None)
    rank, failure = e.get_first_failure()
    outcome = _take(watch.directory)
    if rank == 0 and outcome is not None and outcome.error and not outcome.signal:
        message, traceback = outcome.error.removeprefix("rank 0 failed: "), outcome.traceback
    else:
        message, traceback = _failure_text(failure)
    if any(sign in message.lower() for sign in TIMEOUT_SIGNS):
        laggard = watch.laggard(rank)
        if laggard is not None:
            return RankFailed(laggard.rank, f"{laggard.message}; rank {rank} timed out waiting for it ({message})",
                              traceback)
    return RankFailed(rank, message, traceback)


def torchrun_threads(nproc: int):
    """torchrun's rule (torch/distributed/run.py): with several ranks per node and OMP_NUM_THREADS unset, each rank gets
    OMP_NUM_THREADS=1. Without it every rank starts one OpenMP thread per core; on 2 cores shared by 2 ranks (and
    anyone else) the spinning threads made a tiny model's step 40-140x slower (0.6-0.9 vs 37-86 steps/s, interleaved
    runs, load average ~15). Returns the undo."""
    if "OMP_NUM_THREADS" in os.environ or nproc <= 1:
        return lambda: None
    os.environ["OMP_NUM_THREADS"] = "1"  # the spawned ranks inherit it
    return lambda: os.environ.pop("OMP_NUM_THREADS", None)


def _failure_text(failure) -> tuple[str, str | None]:
    msg = failure.message
    if isinstance(msg, dict):
        return str(msg.get("message", msg)), (msg.get("extraInfo") or {}).get("py_callstack")
    if failure.exitcode is not None and failure.exitcode < 0:
        return f"killed by signal {-failure.exitcode} (out of memory?)", None
    return str(msg or f"exit code {failure.exitcode}"), None
