"""Heartbeats: how the local launcher tells a stuck rank from one that is only slow, and names it.

A collective that waits for a rank that never arrives fails on the rank that waited (after
timeout_s), and its error names the waiter, not the rank that never came. So every local rank beats:
a daemon thread rewrites <launch_dir>/heartbeat.rank<r>.json every BEAT_S with its pid and its
progress (steps done). A thread of a stopped process (SIGSTOP, a frozen VM, a debugger) stops
beating with it, while a rank that is merely busy keeps beating.

The launcher's Watch reads the beats. A rank silent for silent_s while another rank beats is stopped
or frozen: the Watch names it, kills it (SIGKILL: a stopped process ignores SIGTERM until it is
continued) and the elastic agent ends the job at once. When every rank is silent, or the Watch
itself was not running (Ctrl-Z then `fg`, a suspended machine), nobody is blamed. When a rank fails
with a timeout instead, the Watch names the rank that was silent or furthest behind at that
moment."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BEAT_S = 0.5
# a rank silent this long (or timeout_s / 2, if shorter; never under MIN_SILENT_S) is stuck
SILENT_S = 10.0
MIN_SILENT_S = 3.0
PROC_STATES = {
    "T": "stopped (SIGSTOP?)",
    "t": "stopped by a debugger",
    "D": "in uninterruptible I/O",
    "Z": "a zombie",
    "R": "running",
    "S": "sleeping",
}


def silent_limit(timeout_s: float) -> float:
    return max(MIN_SILENT_S, min(SILENT_S, float(timeout_s) / 2))


def beat_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"heartbeat.rank{rank}.json"


def _write(path: Path, beat: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(beat))
    os.replace(tmp, path)


@contextmanager
def beating(directory: str | Path | None, rank: int, progress: dict):
    """Within this block, beat for `rank` (progress: the dict the task updates as it goes). No
    directory: nobody watches (torchrun, Slurm), so no thread."""
    if not directory:
        yield
        return
    path = beat_path(directory, rank)
    stop = threading.Event()

    def beat(done: bool = False) -> None:
        try:
            _write(path, {"pid": os.getpid(), "time": time.time(), "done": done, **progress})
        except OSError:
            pass  # the launcher removed the directory: the job is over

    def loop() -> None:
        while not stop.wait(BEAT_S):
            beat()

    beat()
    thread = threading.Thread(target=loop, name=f"heartbeat-rank{rank}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2 * BEAT_S)
        beat(done=True)  # finished or failed on its own: not silent


def read_beats(directory: str | Path) -> dict[int, dict]:
    beats = {}
    for path in Path(directory).glob("heartbeat.rank*.json"):
        try:
            beats[int(path.stem.removeprefix("heartbeat.rank"))] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # mid-replace: the next look reads it
    return beats


def proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]  # the field after "(comm)"


def describe_progress(beat: dict) -> str:
    measured, warmup = beat.get("measured_steps_done"), beat.get("warmup_steps_done")
    if measured is not None:
        return f"after measured step {measured}"
    if warmup is not None:
        return f"after warm-up step {warmup}"
    return "before its first step"


@dataclass
class Stuck:
    rank: int
    message: str


class Watch:
    """The launcher's side: a thread that reads the beats while the ranks run (see the module
    docstring)."""

    def __init__(self, directory: str | Path, silent_s: float):
        self.directory = Path(directory)
        self.silent_s = silent_s
        self.stuck: Stuck | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat-watch", daemon=True)

    def __enter__(self) -> "Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * BEAT_S)

    def _run(self) -> None:
        calm_until, last = 0.0, time.time()
        while not self._stop.wait(BEAT_S) and self.stuck is None:
            now = time.time()
            if (
                now - last > 4 * BEAT_S
            ):  # this process was not running either (Ctrl-Z then fg, a suspended
                calm_until = (
                    now + 4 * BEAT_S
                )  # machine, starvation): let the ranks beat again before judging
            last = now
            if now < calm_until:
                continue
            beats = {
                r: b
                for r, b in read_beats(self.directory).items()
                if not b.get("done") and proc_state(int(b.get("pid", 0))) not in (None, "Z")
            }
            silent = {r: now - float(b.get("time", now)) for r, b in beats.items()}
            beating = [r for r, age in silent.items() if age < self.silent_s / 2]
            for rank, age in sorted(silent.items()):
                if age < self.silent_s or (not beating and len(beats) > 1):
                    # beating, or every rank is silent: the whole job was stopped, not one rank
                    continue
                beat = beats[rank]
                state = proc_state(int(beat["pid"]))
                self.stuck = Stuck(
                    rank,
                    f"stopped responding: no heartbeat for {age:.0f} s "
                    f"{describe_progress(beat)} (process {beat['pid']} is "
                    f"{PROC_STATES.get(state, state)}); killed it to end the job",
                )
                try:
                    os.kill(int(beat["pid"]), signal.SIGKILL)
                except OSError:
                    pass
                return

    def laggard(self, failed_rank: int) -> Stuck | None:
        """After `failed_rank` timed out in a collective: the rank it was waiting for, if the beats
        show one (silent for more than two beats, else the furthest behind)."""
        beats = read_beats(self.directory)
        mine = beats.pop(failed_rank, {})
        now = time.time()
        silent = {r: now - float(b.get("time", now)) for r, b in beats.items() if not b.get("done")}
        if silent and max(silent.values()) > 2 * BEAT_S + 1:
            rank = max(silent, key=silent.get)
            return Stuck(
                rank,
                f"never arrived: silent for {silent[rank]:.0f} s {describe_progress(beats[rank])}",
            )
        if not beats:
            return None
        rank = min(beats, key=lambda r: steps_done(beats[r]))
        if steps_done(beats[rank]) < steps_done(mine):
            return Stuck(
                rank,
                f"never arrived: it was {describe_progress(beats[rank])}, rank {failed_rank} "
                f"{describe_progress(mine)}",
            )
        return None


def steps_done(beat: dict) -> int:
    return int(beat.get("warmup_steps_done") or 0) + int(beat.get("measured_steps_done") or 0)
