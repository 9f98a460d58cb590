"""Shared helpers: run train.py for real (subprocess, Hydra, elastic launcher, gloo ranks) and read its record."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
TINY = ["model=vgg11_tiny", "scale=smoke", "logger=none"]


def run_train(args: list[str], tmp_path: Path, multirun: bool = False, timeout: float = 240, env: dict | None = None):
    """Run `python train.py args` in a fresh process; outputs go under tmp_path."""
    out = tmp_path / ("sweep" if multirun else "run")
    cmd = [sys.executable, "train.py", *(["-m"] if multirun else []), *args,
           f"hydra.{'sweep' if multirun else 'run'}.dir={out}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "WANDB_MODE": "disabled", **(env or {})})
    proc.out_dir = out
    return proc


def read(out_dir: Path) -> dict:
    return json.loads((Path(out_dir) / "run_record.json").read_text())


def compose(overrides: list[str] | None = None):
    from hydra import compose as hydra_compose, initialize_config_dir

    from core.config import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides or [], return_hydra_config=False)


@pytest.fixture
def silent_host():
    """http://127.0.0.1:<port> that accepts connections and never answers (a hung W&B server or proxy)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    listener.settimeout(0.2)
    held, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


@pytest.fixture
def tiny():
    return list(TINY)


@pytest.fixture(autouse=True)
def _cpu_unless_marked_gpu(request, monkeypatch):
    """Tests not marked gpu run on CPU whatever the machine has: they, the ranks they start and their train.py
    subprocesses see no GPU (device/placement.py reads CUDA_VISIBLE_DEVICES="" as none, even after CUDA started)."""
    if "gpu" not in request.keywords:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
