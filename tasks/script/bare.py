"""The attach cost's baseline (python -m tasks.script.cost): a script as plain torchrun runs it,
with one global optimizer-step post hook reading the host clock, so that its step times are read as
task=script reads them (one optimizer step's end to the next). Run as a file under torchrun
(`torchrun --nproc_per_node=2 tasks/script/bare.py SCRIPT ARGS...`), so no module of this project is
imported beside the script: its own folder comes first on sys.path, as under torchrun. Each rank
writes its step ends to $DDP_COMM_BARE_OUT.rank<r>.json, and with its CPU seconds and its main
thread's run-queue wait to .rank<r>.steps.json."""

import json
import os
import resource
import runpy
import sys
import time


def main() -> None:
    script, args = sys.argv[1], sys.argv[2:]
    from torch.optim.optimizer import register_optimizer_step_post_hook

    ends: list[float] = []
    marks: list[
        tuple
    ] = []  # (host clock, the process's CPU seconds, the main thread's run-queue wait)

    def mark(*_):
        ends.append(time.perf_counter())
        ru = resource.getrusage(resource.RUSAGE_SELF)
        marks.append((ends[-1], ru.ru_utime + ru.ru_stime, _runqueue_s()))

    register_optimizer_step_post_hook(mark)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        stem = f"{os.environ['DDP_COMM_BARE_OUT']}.rank{os.environ['RANK']}"
        with open(f"{stem}.json", "w") as f:
            json.dump(ends, f)
        with open(f"{stem}.steps.json", "w") as f:
            json.dump(marks, f)


def _runqueue_s() -> float | None:
    """Seconds the main thread waited for a core so far (/proc/self/schedstat's second field, as the
    tool reads it: tasks/train/stragglers.py)."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


if __name__ == "__main__":
    main()
