"""The diagnosis benchmark's user-style script (python -m diagnosis.benchmark, its script_* cases): a plain DDP loop
over a DataLoader, as users write it, run unchanged under task=script. Its arguments put one cause of known size
into it, the way such causes live in users' loops:

  --delay-rank K --delay-s S --delay-at data             rank K's collate_fn sleeps S per batch (a slow loader)
                                        backward         a gradient hook on rank K sleeps S (slow work in backward)
                                        after_optimizer  rank K sleeps S after optimizer.step() (logging, say)
  --hiccup-every N --hiccup-s S                          rank 0 sleeps S after every N-th step (its evaluation)

With none of them it is the healthy case. It is a file the benchmark runs, never imported by the project."""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.utils.data.dataloader import default_collate

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--delay-rank", type=int, default=None)
parser.add_argument("--delay-s", type=float, default=0.1)
parser.add_argument("--delay-at", choices=("data", "backward", "after_optimizer"), default="data")
parser.add_argument("--hiccup-every", type=int, default=0)
parser.add_argument("--hiccup-s", type=float, default=0.3)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
slow = args.delay_rank == rank


def collate(batch):
    if slow and args.delay_at == "data":
        time.sleep(args.delay_s)
    return default_collate(batch)


torch.manual_seed(0)
n = args.batch_size * dist.get_world_size() * args.steps
data = TensorDataset(torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,)))
loader = DataLoader(
    data, batch_size=args.batch_size, sampler=DistributedSampler(data), collate_fn=collate
)
net = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(32 * 8 * 8, 64),
    nn.ReLU(),
    nn.Linear(64, 10),
)
if slow and args.delay_at == "backward":
    # the first layer's gradient is computed last: the sleep is inside backward, before DDP's last bucket
    net[0].weight.register_hook(lambda grad: time.sleep(args.delay_s))
model = DDP(net)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for step, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
    if slow and args.delay_at == "after_optimizer":
        time.sleep(args.delay_s)
    if args.hiccup_every and rank == 0 and (step + 1) % args.hiccup_every == 0:
        time.sleep(args.hiccup_s)
dist.destroy_process_group()
