"""Collective-measurement primitives shared by the comm tasks (tasks/collectives.py, grad_sync.py,
pair_groups.py) and by the train task's probes: bandwidth arithmetic (nccl-tests' algbw/busbw),
exactly-checkable inputs, and the timing rules every measured collective follows."""

from __future__ import annotations

from base.record_types import TaskResult


class CorrectnessError(RuntimeError):
    """A collective returned wrong elements. Raised on rank 0 only, after every rank's figures were
    gathered (the other ranks return normally, so none exits before rank 0 has handed in its
    result); it carries the task's result (`.result`) so the run record keeps the measurements and
    the #wrong counts."""

    def __init__(self, message: str, result: TaskResult | None = None):
        super().__init__(message)
        self.result = result
