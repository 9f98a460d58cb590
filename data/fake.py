"""In-memory synthetic images. The pool is generated once per rank; items index into it, so the
loader costs no random-number generation per sample and the data phase measures the loader
itself."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class FakeImages(Dataset):
    def __init__(
        self,
        length: int,
        image_size: int,
        num_classes: int,
        pool: int,
        seed: int = 0,
        shape: tuple | None = None,
    ):
        """shape: one sample's (model.input_shape); default an image, 3 x image_size x
        image_size."""
        g = torch.Generator().manual_seed(seed)
        pool = max(1, min(pool, length))
        self.images = torch.randn(pool, *(shape or (3, image_size, image_size)), generator=g)
        self.labels = torch.randint(0, num_classes, (pool,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        j = i % len(self.images)
        return self.images[j], self.labels[j]
