"""task=train: the measured data-parallel training step (see loop.py, read top to bottom)."""
from tasks.train.check import check
from tasks.train.loop import run
from tasks.train.result import summarize

__all__ = ["check", "run", "summarize"]
