"""Communication measured outside a training step: three tasks of train.py.

  task=collectives   nccl-tests-style microbenchmark (comm/collectives.py)
  task=grad_sync     a model's real gradient shapes: per-parameter vs flat vs bucketed vs coalesced all_reduce
                     (the VGG11 thread's comparison; comm/grad_sync.py)
  task=pair_groups   one process group per consecutive rank pair (the gloo thread's scaling; comm/pair_groups.py)

Each module has run(ctx) -> result | None, summarize(record) -> str and check_config(cfg), the engine's task interface.
"""
from __future__ import annotations

TASK_MODULES = {
    "collectives": "comm.collectives",
    "grad_sync": "comm.grad_sync",
    "pair_groups": "comm.pair_groups",
}


class CorrectnessError(RuntimeError):
    """A collective returned wrong elements. Raised on rank 0 only, after every rank's figures were gathered (the
    other ranks return normally, so none exits before rank 0 has written its record); it carries the task's result
    (`.result`) so the run record keeps the measurements and the #wrong counts."""

    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result
