"""task=train: the measured data-parallel training step (see loop.py, read top to bottom)."""

from tasks.train.brief import brief
from tasks.train.check import check, derive, largest_collective
from tasks.train.loop import run
from tasks.train.result import summarize

INJECTS_FAULTS = True  # fault.rank / fault.step raise in its steps
MEASURES_STEPS = True  # an interrupted run says how far its warm-up and window got

__all__ = [
    "INJECTS_FAULTS",
    "MEASURES_STEPS",
    "brief",
    "check",
    "derive",
    "largest_collective",
    "run",
    "summarize",
]
