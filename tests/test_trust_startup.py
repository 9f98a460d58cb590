"""Time to an answer: what a job imports before it measures. timm, torchvision and wandb cost
seconds each and are only needed for some models or loggers, so neither the process the user starts
nor a rank of a VGG run imports them."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAVY = ("timm", "torchvision", "wandb", "matplotlib")


@pytest.mark.subprocess
def test_a_vgg_job_imports_no_optional_heavy_module():
    code = (
        "import sys; import train, job.run, launchers.rank, job.finalise, launchers.local, "
        "tasks.train.loop, "
        "tasks.train.ddp, results.callbacks, tables.aggregate; "
        "from models import build_model; from tests.conftest import compose; "
        "build_model(compose(['model=vgg11_tiny']).model, 32); "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
