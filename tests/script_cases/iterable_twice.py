"""A loop over an iterable DataLoader (an IterableDataset that shards itself by rank, no sampler)
whose model is wrapped twice in DistributedDataParallel, as a script built from two libraries'
wrappers may be; 20 optimizer steps, batch 8 per rank."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        g = torch.Generator().manual_seed(dist.get_rank())
        for _ in range(self.n):
            yield torch.randn(64, generator=g), int(torch.randint(0, 10, (1,), generator=g))


dist.init_process_group("gloo")
loader = DataLoader(Stream(160), batch_size=8)
model = DDP(DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
dist.destroy_process_group()
