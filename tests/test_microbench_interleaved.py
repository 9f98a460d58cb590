"""The on-rank microbenchmark times its sizes interleaved, call by call: a load that rises or falls
during the pass must land on every size alike, or the fitted bandwidth takes the drift for the
bytes (test_autotune failed so beside a busy neighbour: a 4-byte call timed at 3.55 ms against
0.71 ms for 71 KB, a fit with no bandwidth, and no what-if model for the run)."""

import pytest
import torch
from omegaconf import OmegaConf

import comm.measure
import tasks.train.probes as probes


class _Sync:
    communicates = True
    params = [torch.zeros(200)]

    @staticmethod
    def buckets():
        return [400, 800]


def _run(monkeypatch, iters: int):
    """comm_microbench on a fake 2-rank group whose every call takes 1 ms longer than the one
    before (a steady drift); {bytes: median seconds}."""
    clock = {"n": 0}

    def drifting(fn, n, device):  # the warm-up pass too: one call each
        clock["n"] += 1
        return clock["n"] * 1e-3

    monkeypatch.setattr(comm.measure, "time_window", drifting)
    monkeypatch.setattr(probes.dist, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(probes, "_agreed", lambda obj: obj)
    cfg = OmegaConf.create(
        {
            "sync": "ddp",
            "optim": {"name": "none"},
            "warmup_steps": 1,
            "probe_steps": 0,
            "diagnose": {"microbench": True, "microbench_iters": iters, "microbench_budget": 0.1},
        }
    )
    out = probes.comm_microbench(cfg, _Sync(), torch.device("cpu"), [], None, 1.0, 10)
    rows = [*out["sizes"], out["latency"]]
    assert [r["bytes"] for r in rows] == [400, 800, 4]
    assert [r["time_s"]["n"] for r in rows] == [iters] * 3
    return {r["bytes"]: r["time_s"]["median"] for r in rows}, clock["n"]


def test_the_sizes_are_timed_interleaved_so_a_drift_lands_on_each_alike(monkeypatch):
    medians, calls = _run(monkeypatch, iters=9)
    assert calls == 3 + 3 * 9  # one warm-up call a size, then 9 timed calls each
    # interleaved: size j's i-th call is call 3 + 3 i + j + 1 (after the warm-up's 3), so the
    # medians (i = 4) are 16, 17 and 18 ms; one size after another they would be 8, 17 and 26 ms
    assert medians == pytest.approx({400: 0.016, 800: 0.017, 4: 0.018})
    assert max(medians.values()) - min(medians.values()) < 3e-3
