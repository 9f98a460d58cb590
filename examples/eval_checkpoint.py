"""A loop whose rank 0 evaluates and writes a checkpoint every --every steps while the other ranks go on (and wait
for it at the next all-reduce): the straggler a median hides. It reads its labels file relative to its own folder and
ends with sys.exit(0).
python train.py task=script script.path=examples/eval_checkpoint.py 'script.args=[--every,5]'"""
import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from data import batches   # this folder's own data/, not the tool's

HERE = os.path.dirname(os.path.abspath(__file__))


def evaluate(model, n):
    model.eval()
    with torch.no_grad():
        for x, _ in batches(n, 16, seed=1):
            model(x)
    model.train()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-batches", type=int, default=100)
    args = parser.parse_args()
    with open(os.path.join(HERE, "data", "classes.txt")) as f:
        classes = f.read().split()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(), nn.Linear(512, len(classes))))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    out = tempfile.mkdtemp(prefix="ckpt-")
    for step, (x, y) in enumerate(batches(args.steps, 8, seed=rank), start=1):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % args.every == 0:
            evaluate(model.module, args.eval_batches)
            torch.save(model.module.state_dict(), os.path.join(out, "last.pt"))
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
