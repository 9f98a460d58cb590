"""The tasks train.py can run (`task=`), one module or package each, all with the same small
protocol:

    check(cfg, submitting, host) -> None   every bad-input error of the task, raised as ConfigError
                                           before any rank starts
    run(ctx) -> TaskResult | None          inside every rank; rank 0 returns the record's `result`
    summarize(record) -> str               the text printed after the run, from the record alone

and optional names that job/config.py and the launchers ask for through getattr, never by the
task's name (brief, derive, largest_collective, INJECTS_FAULTS, ...:
docs/development.md "The task protocol"). The registry below maps each of the schema's task names
(base/schema.py: Task) to its module: config checks, the rank runner and the tests all read it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Protocol

from base.record import Record
from base.record_types import TaskResult
from base.schema import Task as TaskName


class Task(Protocol):
    def check(self, cfg, submitting: bool = False, host=None) -> None: ...

    def run(self, ctx) -> TaskResult | None: ...

    def summarize(self, record: Record) -> str: ...


TASKS = {
    TaskName.train: "tasks.train",
    # a hand-written DDP loop, for the harness cost
    TaskName.train_reference: "tasks.train.reference",
    TaskName.collectives: "tasks.collectives",
    TaskName.grad_sync: "tasks.grad_sync",
    TaskName.pair_groups: "tasks.pair_groups",
    TaskName.script: "tasks.script",  # the user's own training script, unchanged
}

# the tasks whose ranks read data.* (task=train's loop, the hand-written reference loop): job.config
# checks their data set (data.check, torch-free) before importing their modules (they import torch)
READS_DATA = frozenset({TaskName.train, TaskName.train_reference})

# what maintainers run to measure the tool itself (the harness cost): accepted by task=, not listed
# in --help
MAINTAINER_TASKS = frozenset({TaskName.train_reference})


def get(name: str) -> Task | ModuleType:
    return importlib.import_module(TASKS[name])
