"""A rank whose work is over and handed in must not fail the run in its interpreter's teardown.

What it guards against (a core dump of such a rank): a spawned gloo rank that finished, handed in
and left its group died of SIGABRT ("terminate called without an active exception") because a gloo
worker thread, still alive past destroy_process_group, freed a finished Work's tensors while the
main thread was in Py_FinalizeEx; taking the GIL then ends the thread with pthread_exit, whose
forced unwind through noexcept destructors calls std::terminate. torch's elastic agent reported a
failed rank after every rank handed in. launchers.rank.leave_without_teardown ends a finished rank
at atexit, before the interpreter starts finalizing.

The stand-in for the native abort is an object held by a module and freed in that teardown
(finalize_modules), whose finaliser aborts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch.nn as nn

from tests.conftest import ROOT, run_inprocess

_HELD: list = []  # freed when the interpreter clears this module in its teardown


class AbortsInTeardown:
    """Dies of SIGABRT when freed, as a joinable native thread destroyed in the interpreter's
    teardown does."""

    def __del__(self):
        os.abort()


class TinyAbortingNet(nn.Module):
    """model=custom: a rank that builds it aborts in its interpreter's teardown, after its work (the
    launcher's own process, which may build the model to check it, is left alone)."""

    def __init__(self, num_classes: int, input_shape: list[int]):
        super().__init__()
        import torch.distributed as dist

        if dist.is_initialized():
            _HELD.append(AbortsInTeardown())
        c, h, w = input_shape
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, num_classes))

    def forward(self, x):
        return self.body(x)


ARMED = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import tests.test_rank_exit as t
t._HELD.append(t.AbortsInTeardown())
if sys.argv[1] == "leave":
    from launchers.rank import leave_without_teardown
    leave_without_teardown()
print("work done", flush=True)
"""


@pytest.mark.subprocess
def test_a_finished_process_leaves_before_the_interpreter_teardown_that_would_abort_it():
    def run(how):
        return subprocess.run(
            [sys.executable, "-c", ARMED, how],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )

    armed = run(
        "stay"
    )  # the stand-in does abort in the teardown, so the other case proves something
    assert armed.returncode == -6 and "work done" in armed.stdout, (
        armed.returncode,
        armed.stderr[-2000:],
    )
    left = run("leave")
    assert left.returncode == 0 and left.stdout == "work done\n", (
        left.returncode,
        left.stderr[-2000:],
    )


@pytest.mark.subprocess
def test_a_failure_after_leaving_is_registered_keeps_its_exit_code():
    """leave_without_teardown ends the process with the code it was exiting with: the one the
    process's exit point gave (train.py, through launchers.rank.exiting), or 1 for an exception
    nobody caught; a failure after the hand-in is not turned into a success."""
    code = (
        "import sys; from launchers.rank import exiting, leave_without_teardown; "
        "leave_without_teardown(); "
        "print('handed in', flush=True); sys.exit(exiting(3))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 3 and out.stdout == "handed in\n", (out.returncode, out.stderr[-2000:])
    raised = subprocess.run(
        [sys.executable, "-c", code.replace("sys.exit(exiting(3))", "raise RuntimeError('late')")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert raised.returncode == 1 and "RuntimeError: late" in raised.stderr, (
        raised.returncode,
        raised.stderr[-2000:],
    )


@pytest.mark.slow
def test_a_rank_that_would_abort_in_its_teardown_after_handing_in_is_a_good_run(tmp_path):
    record, code = run_inprocess(
        [
            "model=custom",
            "model._target_=tests.test_rank_exit.TinyAbortingNet",
            "model.input_shape=[3,8,8]",
            "model.num_classes=5",
            "scale=smoke",
            "logger=none",
            "world_size=2",
        ],
        tmp_path,
    )
    assert code == 0 and record["status"] == "ok", record and record.get("error")
    assert record["result"]["world_size"] == 2 and record["result"]["steps"] >= 6


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_torchrun_rank_that_would_abort_in_its_teardown_after_handing_in_is_a_good_run(tmp_path):
    """torchrun's ranks run train.py themselves (job.run._as_a_rank): a rank that finished leaves at
    exit too, so torchrun (or srun) does not report a failed rank after the record said ok (it did:
    exit code -6, rank 1)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "train.py",
            "model=custom",
            "model._target_=tests.test_rank_exit.TinyAbortingNet",
            "model.input_shape=[3,8,8]",
            "model.num_classes=5",
            "scale=smoke",
            "logger=none",
            "world_size=2",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"status": "ok"' in (tmp_path / "run_record.json").read_text()


@pytest.mark.subprocess
def test_a_systemexit_raised_after_a_rank_finished_keeps_its_code():
    """train.py turns a SystemExit raised anywhere (here: Hydra's callback refusing the run dir)
    into its exit code, so a process that already finished a rank's job (a torchrun rank running a
    sweep) exits with it, not 0."""
    code = (
        "import runpy, sys; from launchers.rank import leave_without_teardown; "
        "leave_without_teardown(); "
        "sys.argv = ['train.py', 'hydra.run.dir=/proc/not_here', 'logger=none']; "
        "runpy.run_path('train.py', run_name='__main__')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 2 and "cannot write to the output directory" in out.stderr, (
        out.returncode,
        out.stderr[-2000:],
    )
