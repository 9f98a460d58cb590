import time

import pytest
import torch

from comm.env import parse_transports
from stats import describe
from tasks.train.timing import PhaseTimer


def test_stats_median_and_p90():
    """The step statistics the record keeps (tasks/train/timing.stats, never called, is gone:
    stats.describe is the one summary; its p90 interpolates, as numpy's does)."""
    s = describe([float(i) for i in range(1, 11)])
    assert s["median"] == 5.5 and s["p90"] == 9.1 and s["min"] == 1.0 and s["max"] == 10.0


def test_phase_timer_on_cpu_sums_repeated_phases():
    """A phase entered twice in a step is the sum of both; checked against our own clock around each
    sleep, not the sleep's nominal length (a loaded machine oversleeps)."""
    t = PhaseTimer(torch.device("cpu"))
    t.start_step()
    slept = {"forward": 0.0, "optimizer": 0.0}
    for name, s in (("forward", 0.01), ("forward", 0.01), ("optimizer", 0.02)):
        with t.phase(name):
            t0 = time.perf_counter()
            time.sleep(s)
            slept[name] += time.perf_counter() - t0
    (d,) = t.durations()
    assert slept["forward"] <= d["forward"] <= slept["forward"] + 0.005
    assert slept["optimizer"] <= d["optimizer"] <= slept["optimizer"] + 0.005
    assert d["step"] == pytest.approx(d["forward"] + d["optimizer"], rel=1e-6)


def test_phase_timer_off_records_nothing():
    t = PhaseTimer(torch.device("cpu"), enabled=False)
    t.start_step()
    with t.phase("forward"):
        pass
    assert t.durations() == []


def test_nccl_transport_lines_from_the_study():
    lines = [
        "ip-1:123:456 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        "ip-1:123:456 [0] NCCL INFO Channel 01 : 0[0] -> 1[1] via SHM/direct/direct",
        "ip-2:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "node:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [send] via NET/IB/0",
        "NCCL INFO NET/IB : Using [0]mlx5_1:1/IB",
    ]
    assert parse_transports(lines) == {"SHM/direct/direct": 2, "P2P/CUMEM/read": 1, "NET/IB": 1}
