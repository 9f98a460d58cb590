"""bucket= against what DistributedDataParallel really builds (torch/nn/parallel/distributed.py):
the default (bucket=null) is stock DDP, whose first bucket is capped at 1 MiB; an explicit bucket=25
caps every bucket, the first too. A one-rank gloo group in this process: DDP rebuilds its buckets
after the first step at any world size."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from omegaconf import OmegaConf

from tasks.train.ddp import DDPSync, bucket_caps

MIB = 1 << 20


def built(bucket):
    """The record's ddp section after three steps (sampled, as the probe steps are)."""
    cfg = OmegaConf.create(
        {
            "optim": {"name": "none"},
            "cuda_graphs": False,
            "bucket": bucket,
            "ddp": {
                "static_graph": False,
                "broadcast_buffers": True,
                "gradient_as_bucket_view": False,
                "find_unused_parameters": False,
            },
        }
    )
    torch.manual_seed(
        0
    )  # a small output layer, ready first in backward, after 36 MB of hidden layers
    model = nn.Sequential(
        nn.Linear(100, 3000), nn.Linear(3000, 3000), nn.Linear(3000, 100), nn.Linear(100, 10)
    )
    sync = DDPSync(cfg, model, torch.device("cpu"))
    sync.enable_runtime_stats()
    for _ in range(3):
        sync.model(torch.randn(2, 100)).sum().backward()
    return sync.describe().to_dict()


def test_the_default_bucket_is_stock_ddp_and_25_is_not(one_rank_group):
    stock, explicit = built(None), built(25)
    assert stock["bucket_cap_mb"] == "default" and explicit["bucket_cap_mb"] == 25.0
    assert stock["bucket_caps"]["first_bytes"] == MIB and stock["bucket_caps"]["bytes"] == 25 * MIB
    assert explicit["bucket_caps"]["first_bytes"] == explicit["bucket_caps"]["bytes"] == 25 * MIB
    assert "the first capped at 1 MiB" in stock["bucket_caps"]["rule"]
    assert "the first too" in explicit["bucket_caps"]["rule"]
    # the layout after DDP's rebuild, in all-reduce order: stock DDP closes its first bucket past 1
    # MiB
    assert stock["buckets"]["rebuilt"] and explicit["buckets"]["rebuilt"]
    assert stock["buckets"]["sizes_bytes"][0] < 2 * MIB < explicit["buckets"]["sizes_bytes"][0]
    assert stock["buckets"]["count"] == 3 and explicit["buckets"]["count"] == 2
    assert sum(stock["buckets"]["sizes_bytes"]) == sum(explicit["buckets"]["sizes_bytes"])


def test_bucket_caps_follow_torchs_own_rule():
    assert bucket_caps(None) == (dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * MIB)
    assert bucket_caps(25) == (25 * MIB, 25 * MIB) and bucket_caps(0.5) == (MIB // 2, MIB // 2)
