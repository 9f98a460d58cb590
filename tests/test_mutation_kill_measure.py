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
