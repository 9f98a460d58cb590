import sys

import torch

from data import batches, build_loader
from data.fake import FakeImages
from data.make_raw_folder import make_raw_folder
from data.folder import sample_bytes
from data.raw_folder import RawFolder
from job.config import prepare
from tests.conftest import compose


def test_fake_pool_is_generated_once():
    ds = FakeImages(length=100, image_size=8, num_classes=5, pool=4)
    assert ds.images.shape == (4, 3, 8, 8) and len(ds) == 100
    x0, _ = ds[0]
    assert (
        x0.data_ptr() == ds[4][0].data_ptr()
    )  # items index the pool; nothing is generated per item


def test_raw_folder_generator_and_reader(tmp_path):
    root = make_raw_folder(tmp_path / "raw", classes=3, files_per_class=5, size=16)
    files = sorted(root.rglob("*.raw"))
    assert len(files) == 15 and all(f.stat().st_size == sample_bytes(16) for f in files)
    assert sample_bytes(224) == 602_112  # the thread's sample size
    ds = RawFolder(root, 16)
    x, label = ds[7]
    assert x.shape == (3, 16, 16) and x.dtype == torch.float32 and label == 1
    expected = torch.from_numpy(__import__("numpy").fromfile(files[0], dtype="float32")).view(
        3, 16, 16
    )
    assert torch.equal(ds[0][0], expected)


def test_generator_command_line(tmp_path, capsys, monkeypatch):
    """`python -m data.make_raw_folder ...` run as its module's __main__ in this process (runpy:
    the argument parsing and the line it prints), where a fresh interpreter cost ~2.5 CPU s of
    python and torch start-up (issue 36)."""
    import runpy
    import warnings

    args = ["--root", str(tmp_path / "r"), "--classes", "2", "--files-per-class", "3"]
    monkeypatch.setattr(sys, "argv", ["make_raw_folder.py", *args, "--size", "8"])
    with warnings.catch_warnings():  # runpy's note that the module was imported before: it was
        warnings.simplefilter("ignore", RuntimeWarning)
        runpy.run_module("data.make_raw_folder", run_name="__main__", alter_sys=True)
    assert "wrote 6 files of 768 bytes in 2 classes" in capsys.readouterr().out
    assert len(list((tmp_path / "r").rglob("*.raw"))) == 6


def test_loader_shards_per_rank_and_cycles():
    plain = prepare(
        compose(["model=vgg11_tiny", "scale=smoke", "batch_size=3", "data.image_size=32"])
    )
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(plain)
    loaders = [build_loader(cfg, rank, 2, pin_memory=False) for rank in (0, 1)]
    assert all(len(loader.sampler) * 2 == len(loader.dataset) for loader in loaders)
    it = batches(loaders[0])
    for _ in range(len(loaders[0]) * 2 + 1):  # past the end of an epoch: a new one starts
        x, y = next(it)
        assert x.shape == (3, 3, 32, 32)


def test_a_shard_smaller_than_a_batch_is_refused_before_the_ranks_start(tmp_path):
    """Issue 14.1: 1 sample for 2 ranks x batch 2 used to spin at "warm-up 0/N" forever."""
    import pytest

    from base.errors import ConfigError

    root = make_raw_folder(tmp_path / "one", classes=1, files_per_class=1, size=8)
    with pytest.raises(ConfigError, match=r"holds 1 samples: 0 per rank .* at least 4 samples"):
        prepare(
            compose(
                [
                    "model=vgg11_tiny",
                    "scale=smoke",
                    "data=raw_folder",
                    f"data.root={root}",
                    "data.image_size=8",
                    "data.workers=0",
                ]
            )
        )


def test_an_epoch_without_a_full_batch_raises_instead_of_spinning():
    import signal

    import pytest
    from torch.utils.data import DataLoader, DistributedSampler

    def spinning(*_):
        raise TimeoutError("batches() spun over empty epochs")

    ds = FakeImages(length=1, image_size=8, num_classes=2, pool=1)
    loader = DataLoader(
        ds,
        batch_size=2,
        drop_last=True,
        sampler=DistributedSampler(ds, num_replicas=1, rank=0, drop_last=True),
    )
    old = signal.signal(signal.SIGALRM, spinning)
    signal.alarm(10)
    try:
        with pytest.raises(RuntimeError, match="no full batch of 2"):
            next(batches(loader))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
