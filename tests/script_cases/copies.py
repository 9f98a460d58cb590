"""A DataLoader loop that copies each batch to its device itself, as a GPU script does (tests/test_script.py runs
it under device=fake): `.to(device, non_blocking=True, copy=True)` is a host-to-device copy on a GPU, and on a CPU
rank a copy the fake device counts as one."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

dist.init_process_group("gloo")
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
data = TensorDataset(torch.randn(8 * 2 * args.steps, 64), torch.randint(0, 10, (8 * 2 * args.steps,)))
loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data), pin_memory=device.type == "cuda")
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    x, y = x.to(device, non_blocking=True, copy=True), y.to(device, non_blocking=True, copy=True)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
dist.destroy_process_group()
