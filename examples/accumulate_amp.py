"""Gradient accumulation with no_sync() and AMP with a GradScaler, as users write it: every --accumulate
micro-batches one all-reduce and one optimizer step (the scaler may skip a step whose gradients overflowed).
python train.py task=script script.path=examples/accumulate_amp.py 'script.args=[--accumulate,4]'"""
import argparse
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from models import small_cnn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accumulate", type=int, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=int, default=32, help="image side (8: a sixteenth of the work)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    device = torch.device("cuda", dist.get_rank() % torch.cuda.device_count()) if torch.cuda.is_available() \
        else torch.device("cpu")
    data = TensorDataset(torch.randn(2048, 3, args.size, args.size), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data))
    model = DDP(small_cnn().to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type)
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    step = 0
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        last = (i + 1) % args.accumulate == 0
        with nullcontext() if last else model.no_sync():
            with torch.autocast(device.type, dtype=dtype):
                loss = nn.functional.cross_entropy(model(x), y) / args.accumulate
            scaler.scale(loss).backward()
        if last:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step == args.steps:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
