"""VGG11 at 224x224 on random images, a plain DDP loop as users write it: the attach cost's heavy
case (python -m tasks.script.cost). torchvision's VGG11, SGD with momentum, a DataLoader over a
synthetic dataset."""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--batch-size", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    n = args.steps * args.batch_size * dist.get_world_size()
    data = TensorDataset(torch.randn(n, 3, 224, 224), torch.randint(0, 1000, (n,)))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
    model = DDP(torchvision.models.vgg11())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
