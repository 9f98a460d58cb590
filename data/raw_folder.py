"""The VGG11 thread's data set: root/<class>/<file>, each file the raw bytes of a 3xHxW float32
tensor, read with torch.from_file (no decoding), so the data phase is pure file I/O. Its layout and
check (scan) are data/folder.py's, which imports no torch."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.utils.data import Dataset

from data.folder import scan


class RawFolder(Dataset):
    def __init__(self, root: str | os.PathLike, image_size: int):
        self.root = Path(root)
        self.image_size = image_size
        self.numel = 3 * image_size * image_size
        self.samples = scan(self.root, image_size)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        try:
            x = torch.from_file(str(path), shared=False, size=self.numel, dtype=torch.float32)
        except (
            RuntimeError
        ) as e:  # the file changed since the check (removed, unreadable): its path and why, first
            raise OSError(
                f"cannot read {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from e
        return x.view(3, self.image_size, self.image_size), label
