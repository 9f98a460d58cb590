"""The attach cost's measurement (python -m tasks.script.cost): its statistics on known numbers, the
baseline launcher's marks, and the tool's hooks timing themselves in a task=script record."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tasks.script import cost
from tests.conftest import ROOT, run_train


def _side(
    step_s: float, n: int, tool_s: float | None = None, sub: float = 0.0, call: float = 0.0
) -> dict:
    return {
        "step_s": [step_s] * n,
        "cpu_s_per_step": step_s / 2,
        "gc_s_per_step": step_s / 100,
        "queue_share": 0.1,
        "threads": {"intra_op": 1, "inter_op": 2, "OMP_NUM_THREADS": "1"},
        "tool_s": None if tool_s is None else [tool_s] * n,
        "substituted_hook_s": None if tool_s is None else [sub] * n,
        "substituted_collective_s": None if tool_s is None else [call] * n,
    }


def test_paired_ratio_and_micro_route_on_known_runs():
    # rounds drift by +-10% together; the tool costs 1% in every round: the paired interval is
    # tight around 0.99 although the rounds differ by far more than the goal's 2%
    alone = [_side(0.020 * f, 100) for f in (1.0, 1.1, 0.9, 1.05)]
    tool = [_side(0.020 * f / 0.99, 100, 100e-6, 50e-6, 30e-6) for f in (1.0, 1.1, 0.9, 1.05)]
    r = cost.row("plain_ddp", {"alone": alone, "tool": tool}, 4)
    assert math.isclose(r["end_to_end"]["ratio"], 0.99, rel_tol=1e-9)
    assert r["end_to_end"]["ci_lo"] <= 0.99 <= r["end_to_end"]["ci_hi"]
    assert r["end_to_end"]["ci_hi"] - r["end_to_end"]["ci_lo"] < 1e-6
    assert r["goal_shown_end_to_end"] and r["threads_equal"]
    # the CPU route: half of each step is CPU on both sides, so the same 0.99, as tight
    assert math.isclose(r["cpu_route"]["ratio"], 0.99, rel_tol=1e-9) and r["goal_shown_cpu"]
    assert r["cpu_route"]["ci_hi"] - r["cpu_route"]["ci_lo"] < 1e-6
    assert r["tool_gc_ms_per_step"][0] == pytest.approx(0.2 / 0.99)
    # micro: 100 us of hooks on a 20.2-22.2 ms step, and 150 us with the substituted hook
    assert 0.994 < r["micro"]["ratio"] < 0.996
    assert 0.991 < r["micro_with_substituted_hook"]["ratio"] < r["micro"]["ratio"]
    assert r["goal_shown_micro"]
    # of the substituted 50 us, 30 are the process group's allreduce call (the built-in's own):
    # the substitution's own part is the other 20 us, 120 us a step with the hooks
    own = r["micro_with_substitution_own"]["ratio"]
    assert r["micro_with_substituted_hook"]["ratio"] < own < r["micro"]["ratio"]
    assert 1 - 120e-6 / 0.0182 < own < 1 - 120e-6 / 0.0222 and r["goal_shown_micro_own"]
    assert r["substituted_collective_us_per_step"] == pytest.approx([30.0] * 4)
    # a 5% cost is not shown as >= 0.98, and a side with other thread counts is flagged
    tool[1]["threads"] = {"intra_op": 2, "inter_op": 2, "OMP_NUM_THREADS": "1"}
    slow = [_side(0.020 * f / 0.95, 100, 1e-3) for f in (1.0, 1.1, 0.9, 1.05)]
    slow[1]["threads"] = tool[1]["threads"]
    r = cost.row("plain_ddp", {"alone": alone, "tool": slow}, 4)
    assert not r["goal_shown_end_to_end"] and not r["threads_equal"]
    assert not r["goal_shown_cpu"] and r["cpu_route"]["ratio"] == pytest.approx(0.95)
    text = cost.markdown(
        {
            "command": "python -m tasks.script.cost",
            "rounds": 4,
            "goal": 0.98,
            "rows": [r],
            "machine": {
                "host": "h",
                "cpus": 2,
                "platform": "p",
                "loadavg_1min": {"start": 1, "end": 1, "median": 1, "max": 1},
            },
            "wall_s": 60,
        }
    )
    assert "DIFFER" in text and "| plain_ddp |" in text
    assert "| 0.950 [" in text and "| 0.2, 0.22, 0.18, 0.21; 0.21, 0.23, 0.19, 0.22 |" in text


def test_refuses_unknown_cases_and_a_single_round(capsys):
    assert cost.main(["--cases", "nope"]) == 2
    assert cost.main(["--rounds", "1"]) == 2
    assert "unknown case(s) nope" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_baseline_launcher_marks_every_step_of_the_script_alone(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DDP_COMM_BARE_OUT": str(tmp_path / "b")}
    cmd = [sys.executable, "tasks/script/bare.py", "--nproc", "2", "examples/plain_ddp.py"]
    proc = subprocess.run(
        [*cmd, "--epochs", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for rank in (0, 1):
        marks = json.loads((tmp_path / f"b.rank{rank}.steps.json").read_text())
        assert len(marks) == 32  # 512 samples / batch 8 / 2 ranks
        assert all(b[0] > a[0] and b[1] >= a[1] for a, b in zip(marks, marks[1:]))
        # the collector's seconds so far, as task=script's series.gc_s reads them
        assert all(len(m) == 4 for m in marks)
        assert all(0 <= a[3] <= b[3] for a, b in zip(marks, marks[1:]))
        threads = json.loads((tmp_path / f"b.rank{rank}.threads.json").read_text())
        assert threads == {"intra_op": 1, "inter_op": threads["inter_op"], "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_script_record_holds_the_tools_own_time_per_step(tmp_path):
    proc = run_train(
        ["task=script", "logger=none", "script.path=examples/plain_ddp.py", "steps=10"],
        tmp_path,
    )
    record = json.loads((proc.out_dir / "run_record.json").read_text())
    for r in record["result"]["per_rank"]:
        own, sub = r["series"]["tool_s"], r["series"]["substituted_hook_s"]
        call = r["series"]["substituted_collective_s"]
        steps, collected = r["series"]["step_time_s"], r["series"]["gc_s"]
        assert len(own) == len(sub) == len(steps) == len(collected) == 10
        assert all(0 <= g < s for g, s in zip(collected, steps))
        # the hooks ran (several reads a step) and cost less than the step they are inside
        assert all(0 < o < s for o, s in zip(own, steps))
        # no hook asked for: allreduce_hook stands in for DDP's built-in all-reduce, timed apart
        assert all(x > 0 for x in sub)
        # of which its process group's allreduce call (the built-in's own), timed inside it
        assert len(call) == 10 and all(0 < c < x for c, x in zip(call, sub))
    log = (proc.out_dir / "train.log").read_text()
    assert "attach: the tool's hooks took " in log
    assert "of it the built-in's own allreduce call)" in log


def test_the_committed_tables_regenerate_from_their_json(tmp_path, capsys):
    for where in (ROOT / "results/script_cost", ROOT / "results/script_cost/vgg11_224"):
        (tmp_path / "cost.json").write_text((where / "cost.json").read_text())
        assert cost.main(["--table", str(tmp_path)]) == 0
        assert (tmp_path / "cost.md").read_text() == (where / "cost.md").read_text()
    assert cost.main(["--table", str(tmp_path / "none")]) == 2
    assert "cost.json does not exist" in capsys.readouterr().err
