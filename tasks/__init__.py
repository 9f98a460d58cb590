"""The tasks train.py can run (`task=`), one module or package each, all with the same small
protocol:

    check(cfg, submitting, host) -> None   every bad-input error of the task, raised as ConfigError
    before any
                                           rank starts (submitting=True: on a Slurm login node, for
                                           the compute nodes, so this machine's GPUs and memory do
                                           not count); host: what this machine offers
                                           (device.host.Host, injected by tests)
    run(ctx) -> TaskResult | None          inside every rank; rank 0 returns the task's `result` for
    the record,
                                           built as its own type (base/record_types.py)
    summarize(record) -> str               the text printed after the run, from the record alone

and, where a task has them (job/config.py and the launchers ask through getattr, never by the task's
name):

    brief(record) -> list[str]             the few lines a default run (verbose=false) prints
    instead of summarize's derive(cfg, unresolved) -> None        after the config resolved, before
    the checks: what the task sets from
                                           other keys, and what only the unresolved config tells
    largest_collective(cfg) -> (bytes, what) | None   the biggest all-reduce a run sends (the link's
    timeout check) INJECTS_FAULTS = True                  fault.rank/fault.step reach its steps
    RANKS_KNOB = ("pairs", 2)              the knob that sets the ranks, and ranks per unit (default
    world_size, 1) CPU_BY_DEFAULT = True                  device=auto means CPU unless backend=nccl
    (the gloo thread's experiment) MEASURES_STEPS = True                  an interrupted run says
    how many of its steps it measured DIAGNOSED = False                      the diagnosis rules do
    not read this task: no diagnosis on the console OWN_PROCESS_GROUP = True               the
    task's code starts the process group itself (the user's script):
                                           the rank side starts none and issues no collective

The registry below maps each of the schema's task names (base/schema.py: Task, what `task=` accepts)
to its module: config checks, the rank runner and the tests all read it."""

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

# what maintainers run to measure the tool itself (the harness cost): accepted by task=, not listed
# in --help
MAINTAINER_TASKS = frozenset({TaskName.train_reference})


def get(name: str) -> Task | ModuleType:
    return importlib.import_module(TASKS[name])
