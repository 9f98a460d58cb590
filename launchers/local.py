"""world_size ranks on this machine through torch.distributed.launcher.api.elastic_launch, the launcher behind
torchrun: a c10d rendezvous on a free local port, one spawned process per rank, and when any rank fails the agent
stops the others at once (max_restarts=0), so a failure ends the job within seconds instead of hanging it."""
from __future__ import annotations

import logging
import uuid

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from torch.distributed.launcher.api import LaunchConfig, elastic_launch


class RankFailed(RuntimeError):
    def __init__(self, rank: int, message: str, traceback: str | None):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.message, self.traceback = rank, message, traceback


@record
def rank_entry(plain: dict, job: dict):
    from engine.runner import run_rank

    return run_rank(plain, job)


def launch_local(plain: dict, job: dict) -> dict | None:
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
    try:
        results = elastic_launch(config, rank_entry)(plain, job)
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        raise RankFailed(rank, *_failure_text(failure)) from None
    return results.get(0)


def _failure_text(failure) -> tuple[str, str | None]:
    msg = failure.message
    if isinstance(msg, dict):
        return str(msg.get("message", msg)), (msg.get("extraInfo") or {}).get("py_callstack")
    if failure.exitcode is not None and failure.exitcode < 0:
        return f"killed by signal {-failure.exitcode} (out of memory?)", None
    return str(msg or f"exit code {failure.exitcode}"), None
