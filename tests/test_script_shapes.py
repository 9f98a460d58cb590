"""Script shapes beside tests/test_script.py's: an iterable DataLoader (an IterableDataset, no
sampler) and a model wrapped twice in DistributedDataParallel."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_train

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def test_iterable_loader_and_a_model_wrapped_twice(tmp_path):
    proc = run_train(
        [
            "task=script",
            "script.path=tests/script_cases/iterable_twice.py",
            "logger=none",
            "warmup_steps=2",
            "steps=10",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    res = json.loads((proc.out_dir / "run_record.json").read_text())["result"]
    assert res["script"]["ended"] == "finished" and res["script"]["steps_taken"] == 20
    # both DDPs seen and instrumented; a step's samples counted once (the outer forward), over
    # both ranks
    assert len(res["script"]["ddps"]) == 2
    assert res["effective_batch"] == 16 and res["accumulate"] == 1
    rank0 = next(r for r in res["per_rank"] if r["rank"] == 0)
    phases = rank0["series"]["phases"]
    assert len(rank0["series"]["step_time_s"]) == 10
    # the iterable loader's wait is timed, and the nested forwards are not counted twice
    assert all(d > 0 for d in phases["data"])
    assert all(f < s for f, s in zip(phases["forward"], rank0["series"]["step_time_s"]))
    assert res["comm"]["bytes_per_step"] > 0
