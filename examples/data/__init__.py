"""The example scripts' own data package: named like the tool's `data`, it must be the one they import."""
import torch


def batches(n: int, batch_size: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        yield torch.randn(batch_size, 3, 32, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)
