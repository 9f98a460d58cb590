"""world_size ranks on this machine through torch.distributed.launcher.api.elastic_launch, the launcher behind
torchrun: a c10d rendezvous on a free local port, one spawned process per rank, and when any rank fails the agent
stops the others at once (max_restarts=0), so a failure ends the job within seconds instead of hanging it.

Rank 0 hands its Outcome to this process through one pickle in the job directory (removed once read), whether it
succeeded or failed, so the record made here keeps what was measured even when a rank failed."""
from __future__ import annotations

import logging
import os
import pickle
import uuid
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

OUTCOME_FILE = ".rank0_outcome.pkl"


class RankFailed(RuntimeError):
    def __init__(self, rank: int, message: str, traceback: str | None, outcome=None):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.message, self.traceback, self.outcome = rank, message, traceback, outcome


@record
def rank_entry(plain: dict, job: dict):
    from core.rank import RankError, run_rank

    try:
        outcome = run_rank(plain, job)
    except RankError as e:
        _hand_in(e.outcome, job)
        raise
    if outcome is not None:
        _hand_in(outcome, job)


def _hand_in(outcome, job: dict) -> None:
    path = Path(job["output_dir"]) / OUTCOME_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(outcome))


def _take(job: dict):
    path = Path(job["output_dir"]) / OUTCOME_FILE
    if not path.exists():
        return None
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - a rank killed mid-write leaves a torn file: nothing to keep
        return None
    finally:
        path.unlink(missing_ok=True)


def launch_local(plain: dict, job: dict):
    """Rank 0's Outcome; raises RankFailed naming the first rank that failed (with rank 0's Outcome if it has one)."""
    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # we report the failing rank ourselves, once
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
    )
    threads = torchrun_threads(int(plain["world_size"]))
    try:
        elastic_launch(config, rank_entry)(plain, job)
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        outcome = _take(job)
        if rank == 0 and outcome is not None and outcome.error:  # rank 0's own words, not its RankError wrapper
            raise RankFailed(0, outcome.error.removeprefix("rank 0 failed: "), outcome.traceback, outcome) from None
        raise RankFailed(rank, *_failure_text(failure), outcome=outcome) from None
    finally:
        threads()
    return _take(job)


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
