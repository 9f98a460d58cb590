"""The attach cost's baseline (python -m tasks.script.cost): a script run alone, its ranks started
by torch's elastic agent as task=script's local launcher starts them (elastic_launch, spawn, one
node), with one global optimizer-step post hook reading the host clock, so that its step times are
read as task=script reads them (one optimizer step's end to the next).

    python tasks/script/bare.py --nproc 2 SCRIPT ARGS...

Why not plain torchrun: torchrun starts each rank in a session of its own (start_new_session), and
with the kernel's autogroup scheduling a session is one group for the CPU's fair share, while
task=script's ranks stay in the session train.py runs in. On a machine others load, the two sides
then get different shares of the cores, which is the scheduler's doing and not the tool's cost
(docs/script.md "Known answers and cost"). Here the agent, its rendezvous (c10d on localhost, as
torchrun --standalone) and the ranks' environment are torchrun's, the start method is the tool's.

Run as a file, so no module of this project is imported beside the script: the script's own folder
comes first on sys.path, as under torchrun. Each rank writes its step ends to
$DDP_COMM_BARE_OUT.rank<r>.json, and with its CPU seconds, its main thread's run-queue wait and its
seconds in the garbage collector (gc.callbacks, as task=script reads them) to .rank<r>.steps.json,
and its thread counts to .rank<r>.threads.json. A rank leaves without the interpreter's teardown,
as task=script's ranks do (launchers.rank.leave_without_teardown)."""

import atexit
import gc
import json
import os
import resource
import runpy
import sys
import time
import uuid


def rank_main(script: str, args: list, stem: str) -> None:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    ends: list[float] = []
    # (host clock, the process's CPU seconds, the main thread's run-queue wait, seconds in the
    # garbage collector so far)
    marks: list[tuple] = []
    collector = [0.0, 0.0]  # seconds in the collector so far, the running collection's start

    def mark(*_):
        ends.append(time.perf_counter())
        ru = resource.getrusage(resource.RUSAGE_SELF)
        marks.append((ends[-1], ru.ru_utime + ru.ru_stime, _runqueue_s(), collector[0]))

    def collecting(phase, info):  # as task=script's Attach reads it (tasks/script/attach.py)
        if phase == "start":
            collector[1] = time.perf_counter()
        else:
            collector[0] += time.perf_counter() - collector[1]

    register_optimizer_step_post_hook(mark)
    gc.callbacks.append(collecting)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            code = e.code if isinstance(e.code, int) else 1
    finally:
        stem = f"{stem}.rank{os.environ['RANK']}"
        with open(f"{stem}.json", "w") as f:
            json.dump(ends, f)
        with open(f"{stem}.steps.json", "w") as f:
            json.dump(marks, f)
        with open(f"{stem}.threads.json", "w") as f:
            json.dump(
                {
                    "intra_op": torch.get_num_threads(),
                    "inter_op": torch.get_num_interop_threads(),
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                },
                f,
            )
    if code:
        raise SystemExit(code)
    atexit.register(_leave)


def _leave() -> None:
    """os._exit once the agent has the rank's return value (atexit runs before the interpreter's
    teardown, where a gloo thread's last reference to a work object can abort the rank)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def _runqueue_s() -> float | None:
    """Seconds the main thread waited for a core so far (/proc/self/schedstat's second field, as the
    tool reads it: tasks/train/stragglers.py)."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def main() -> int:
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if len(sys.argv) < 4 or sys.argv[1] != "--nproc":
        print("usage: python tasks/script/bare.py --nproc N SCRIPT ARGS...", file=sys.stderr)
        return 2
    nproc, script, args = int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    if nproc > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's rule, and the tool's
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
    )
    elastic_launch(config, rank_main)(script, args, os.environ["DDP_COMM_BARE_OUT"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
