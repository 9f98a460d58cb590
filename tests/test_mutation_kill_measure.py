"""comm/measure.py (issue 36: a module the mutation run covers): the per-rank statistics the comm
tasks' tables print (the ranks' average, the slowest rank and its time) and the split of the timed
calls into blocks, checked against figures worked out by hand."""

from __future__ import annotations

import pytest

from comm.measure import TIMED_BLOCKS, block_sizes, rank_stats


def test_rank_stats_are_the_average_the_slowest_and_its_rank():
    s = rank_stats([0.2, 0.5, 0.3, 0.4])
    assert s == {"avg": pytest.approx(0.35), "max": 0.5, "slowest_rank": 1}
    assert rank_stats([1.0]) == {"avg": 1.0, "max": 1.0, "slowest_rank": 0}
    assert rank_stats([0.1, 0.3, 0.3])["slowest_rank"] == 1  # the first of a tie
    assert rank_stats([0.3, 0.1])["slowest_rank"] == 0


def test_timed_calls_split_into_eight_near_equal_blocks():
    assert TIMED_BLOCKS == 8
    assert block_sizes(20) == [3, 3, 3, 3, 2, 2, 2, 2]
    assert block_sizes(16) == [2] * 8
    assert block_sizes(3) == [1, 1, 1]
    assert block_sizes(10, blocks=4) == [3, 3, 2, 2]
    assert sum(block_sizes(1001)) == 1001 and len(block_sizes(1001)) == 8


def test_the_tasks_tensors_device(monkeypatch):
    import torch

    from base.errors import ConfigError
    from comm.measure import resolve_device

    cpu = torch.device("cpu")
    assert resolve_device("auto", "gloo", cpu, 0) == cpu
    assert resolve_device("cpu", "gloo", torch.device("cuda", 1), 1) == cpu
    assert resolve_device("auto", "gloo", torch.device("cuda", 1), 1) == torch.device("cuda", 1)
    assert resolve_device("cuda", "nccl", torch.device("cuda", 2), 2) == torch.device("cuda", 2)
    with pytest.raises(ConfigError, match="device='gpu': choose auto, cpu or cuda."):
        resolve_device("gpu", "gloo", cpu, 0)
    with pytest.raises(ConfigError, match="device=cpu with backend=nccl: NCCL only moves CUDA"):
        resolve_device("cpu", "nccl", cpu, 0)
    # a CPU-placed rank asking for CUDA where no GPU is visible
    monkeypatch.setattr("comm.measure.gpu_count", lambda: 0)
    with pytest.raises(ConfigError, match="device=cuda with backend=gloo needs a GPU"):
        resolve_device("cuda", "gloo", cpu, 0)


class _FakeLayer:
    """A device layer whose clock reads 2.0 then 7.0: the window's 5 s, whatever the host does."""

    def __init__(self):
        self.marks = iter([2.0, 7.0])
        self.strict, self.synced = [], 0

    def mark(self):
        return next(self.marks)

    def window(self, strict):
        import contextlib

        self.strict.append(strict)
        return contextlib.nullcontext()

    def synchronize(self):
        self.synced += 1

    def seconds(self, start, end):
        return end - start


def test_a_timed_window_is_seconds_per_call_after_a_barrier(monkeypatch):
    import torch

    from comm import measure

    layer, calls, barriers, devices, backends = _FakeLayer(), [], [], [], []
    monkeypatch.setattr(measure, "layer_for", lambda device: devices.append(device) or layer)
    monkeypatch.setattr(measure.dist, "barrier", lambda group=None: barriers.append(group))
    monkeypatch.setattr(
        measure.dist, "get_backend", lambda group=None: backends.append(group) or "nccl"
    )
    got = measure.time_window(lambda: calls.append(1), 4, torch.device("cpu"), group="g")
    assert got == 5.0 / 4 and len(calls) == 4 and barriers == ["g"]
    assert devices == [torch.device("cpu")] and backends == ["g"]  # the window's own group
    assert layer.strict == [True] and layer.synced == 1
    layer = _FakeLayer()
    monkeypatch.setattr(measure, "layer_for", lambda device: layer)
    monkeypatch.setattr(measure.dist, "get_backend", lambda group=None: "gloo")
    assert measure.time_window(lambda: None, 2, torch.device("cpu")) == 2.5
    assert layer.strict == [False]


def test_every_ranks_object_in_rank_order(monkeypatch):
    from comm import measure

    def all_gather_object(out, obj):
        assert out == [None, None, None]  # one slot per rank, filled by the collective
        out[:] = [f"{obj}@{r}" for r in range(len(out))]

    monkeypatch.setattr(measure.dist, "get_world_size", lambda: 3)
    monkeypatch.setattr(measure.dist, "all_gather_object", all_gather_object)
    assert measure.gather_all("x") == ["x@0", "x@1", "x@2"]


def test_a_cpu_placed_rank_asking_for_cuda_takes_its_local_gpu(monkeypatch):
    import torch

    from comm import measure

    chosen = []
    monkeypatch.setattr(measure, "gpu_count", lambda: 2)
    monkeypatch.setattr(measure.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(measure.torch.cuda, "set_device", chosen.append)
    got = measure.resolve_device("cuda", "gloo", torch.device("cpu"), 3)
    assert got == torch.device("cuda", 1) and chosen == [torch.device("cuda", 1)]
