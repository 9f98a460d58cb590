"""All strategies average gradients identically: two real gloo ranks with different data end every
strategy with the same parameters (and the same as each other). One launch runs every strategy in
turn."""

import uuid

import pytest
import torch
from omegaconf import OmegaConf
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from tests.conftest import CONF
from tests.sync_worker import every_strategy


def launch(strategies):
    """{strategy: {rank: parameters}}"""
    cfg = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
    )
    model_cfg = OmegaConf.to_container(OmegaConf.load(CONF / "model" / "vgg11_tiny.yaml"))
    per_rank = elastic_launch(cfg, every_strategy)(strategies, model_cfg)
    return {s: {rank: params[s] for rank, params in per_rank.items()} for s in strategies}


@pytest.mark.slow
def test_ddp_per_param_flat_agree():
    out = launch(["ddp", "per_param", "flat", "local"])
    for s in ("ddp", "per_param", "flat"):
        assert torch.equal(out[s][0], out[s][1]), f"{s}: ranks disagree after the step"
        torch.testing.assert_close(out[s][0], out["ddp"][0], rtol=1e-5, atol=1e-6)
    # without communication the ranks drift apart: the test can tell averaging from no averaging
    assert not torch.allclose(out["local"][0], out["local"][1])
