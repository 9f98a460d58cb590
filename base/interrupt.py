"""SIGINT and SIGTERM as one exception, so an interrupted run still ends through job.finalise with a
record.

SIGTERM is what `timeout`, `kill`, container stops and Slurm's time limit send; SIGINT is Ctrl-C,
which the terminal sends to the whole foreground process group, so the ranks get it as well as the
process the user started. Both raise
`Interrupted`, a BaseException like KeyboardInterrupt, so no `except Exception` in between swallows
it.

Only the first signal raises. Later ones (the elastic agent forwards the signal to ranks that
already got it; an impatient second Ctrl-C) are noted and ignored, so the cleanup the first one
started (rank 0 handing in what it measured, the record being written) is not cut short. Every stage
that could wait has its own bound instead: the agent's shutdown timeout, W&B's deadline."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_first: int | None = (
    None  # the first signal this process got; a sweep does not start another job after it
)


class Interrupted(BaseException):
    """outcome: rank 0's Outcome (what it measured before it stopped), when the ranks got that
    far."""

    def __init__(self, signum: int, outcome=None):
        self.signum = int(signum)
        self.outcome = outcome
        super().__init__(self.name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 130 for SIGINT, 143 for
        SIGTERM."""
        return 128 + self.signum


def note(signum: int) -> None:
    global _first
    if _first is None:
        _first = int(signum)


def received() -> int | None:
    """The first SIGINT/SIGTERM this process got, if any."""
    return _first


def _raise_first(signum, frame) -> None:
    if _first is None:
        note(signum)
        raise Interrupted(signum)


def _note(signum, frame) -> None:
    note(signum)


def _ours_to_take(handler) -> bool:
    """Python's defaults and our own. Another handler was put there on purpose: submitit's Slurm
    tasks ignore SIGTERM (preemption sends it first; the submitting host records a job Slurm ended),
    and a caller's own stays in charge."""
    return handler in (signal.SIG_DFL, signal.default_int_handler, _raise_first, _note, None)


@contextmanager
def signals_raise():
    """Within this block the first SIGINT or SIGTERM raises Interrupted (main thread only, where
    Python runs signal handlers); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        if _ours_to_take(previous[s]):
            signal.signal(s, _raise_first)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def restored_handlers():
    """Put back this process's SIGINT/SIGTERM handlers after a block that installs its own (torch's
    elastic agent leaves its handler in place after the launch)."""
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for s, handler in previous.items():
                signal.signal(s, handler)


def note_signals() -> None:
    """From here on, SIGINT/SIGTERM outside a signals_raise() block are noted, not raised: between
    the jobs of a sweep, which then stops at the next job boundary, with its table
    (results.callbacks.SweepTable)."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            if _ours_to_take(signal.getsignal(s)):
                signal.signal(s, _note)
