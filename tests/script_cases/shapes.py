"""Script shapes for tests/test_script.py, each as a user writes it (the tool changes no line of it):
  --mode sync_flag   accumulation by DDP's require_backward_grad_sync, a model compiled with torch.compile, two
                     optimizers of which one steps every other step
  --mode raises      raises ValueError after 3 steps
  --mode idle        starts its process group and never trains"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

missing = [k for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID") if k not in os.environ]
assert not missing, f"torchrun's environment lacks {missing}"
dist.init_process_group("gloo")
if args.mode == "idle":
    time.sleep(60)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
head, body = list(model.parameters())[2:], list(model.parameters())[:2]
opt_body, opt_head = torch.optim.SGD(body, lr=0.01), torch.optim.Adam(head, lr=1e-3)
step_fn = torch.compile(model, backend="eager") if args.mode == "sync_flag" else model
for step in range(args.steps):
    for micro in range(2):
        model.require_backward_grad_sync = micro == 1
        x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
        nn.functional.cross_entropy(step_fn(x), y).backward()
    opt_body.step()
    if step % 2 == 0:
        opt_head.step()
    opt_body.zero_grad()
    opt_head.zero_grad()
    if args.mode == "raises" and step == 3:
        raise ValueError("the user's own bug at step 3")
dist.destroy_process_group()
