"""Write a raw-float data set in the VGG11 thread's format: root/<class>/<n>.raw, each 3xSxS float32
bytes.

    python -m data.make_raw_folder --root data_raw/vgg11 --classes 10 --files-per-class 64 [--size
    224] [--copy]

Like the thread's script, one base file is written and the rest are hard links to it (or copies with
--copy, when the page cache should not serve every read from one file)."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import torch


def make_raw_folder(
    root, classes: int, files_per_class: int, size: int = 224, copy: bool = False, seed: int = 0
) -> Path:
    if classes < 1 or files_per_class < 1 or size < 1:
        raise SystemExit("--classes, --files-per-class and --size must be positive")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    base = root / ".base.bin"  # outside the class folders: not a sample
    g = torch.Generator().manual_seed(seed)
    torch.randn(3, size, size, generator=g).numpy().tofile(base)
    for c in range(classes):
        d = root / f"class_{c:04d}"
        d.mkdir(exist_ok=True)
        for i in range(files_per_class):
            f = d / f"{i:06d}.raw"
            if f.exists():
                f.unlink()
            if copy:
                shutil.copyfile(base, f)
            else:
                os.link(base, f)
    return root


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--root", required=True)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--files-per-class", type=int, default=64)
    p.add_argument(
        "--size", type=int, default=224, help="image side; each file is 3*size*size*4 bytes"
    )
    p.add_argument(
        "--copy", action="store_true", help="copy the base file instead of hard-linking it"
    )
    a = p.parse_args(argv)
    t = time.perf_counter()
    root = make_raw_folder(a.root, a.classes, a.files_per_class, a.size, a.copy)
    n = a.classes * a.files_per_class
    print(
        f"wrote {n} files of {3 * a.size * a.size * 4} bytes in {a.classes} classes under {root} "
        f"({time.perf_counter() - t:.1f} s). Use it with: python train.py data=raw_folder "
        f"data.root={root}"
    )


if __name__ == "__main__":
    main()
