"""The raw folder's layout and its check, without torch: data.check runs them before the task's
module (which imports torch, about 1.5 s of a core) is imported, so a missing or bad data.root is
refused at Hydra's speed (issue 36). data/raw_folder.py reads the samples."""

from __future__ import annotations

import os
from pathlib import Path

from base.errors import ConfigError


def sample_bytes(image_size: int) -> int:
    return 3 * image_size * image_size * 4


def generator_command(root, image_size: int) -> str:
    return (
        f"python -m data.make_raw_folder --root {root} --size {image_size} --classes 10 "
        "--files-per-class 64"
    )


def scan(root: Path, image_size: int) -> list[tuple[Path, int]]:
    """Every (file, class index); checks sizes and that each file opens for reading up front, so a
    bad file is named before any rank starts (not mid-warm-up inside a DataLoader worker)."""
    if not root.is_dir():
        raise ConfigError(
            f"data.root={root} does not exist. Make a raw folder with: "
            f"{generator_command(root, image_size)}"
        )
    classes = sorted(d.name for d in os.scandir(root) if d.is_dir())
    want = sample_bytes(image_size)
    samples = []
    for label, cls in enumerate(classes):
        for entry in sorted(os.scandir(root / cls), key=lambda e: e.name):
            if not entry.is_file():
                continue
            size = entry.stat().st_size
            if size != want:
                raise ConfigError(
                    f"{entry.path} has {size} bytes; a 3x{image_size}x{image_size} float32 sample "
                    f"has {want} bytes. "
                    f"Set data.image_size to the size the folder was made with, or regenerate it: "
                    f"{generator_command(root, image_size)}"
                )
            try:
                os.close(os.open(entry.path, os.O_RDONLY))
            except OSError as e:
                raise ConfigError(
                    f"{entry.path} cannot be read ({e.strerror}): every sample file of data.root "
                    "must be "
                    f"readable by this user. Fix its permissions (chmod a+r), or remove it."
                ) from None
            samples.append((Path(entry.path), label))
    if not samples:
        raise ConfigError(
            f"data.root={root} holds no sample files. Make a raw folder with: "
            f"{generator_command(root, image_size)}"
        )
    return samples


def class_count(root: str | os.PathLike) -> int:
    return sum(1 for d in os.scandir(root) if d.is_dir())
