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


@pytest.mark.subprocess
def test_help_the_config_and_a_refused_override_do_not_import_torch(tmp_path):
    """`python train.py --help`, `--cfg job` and a refused value answer without torch (about 1.5 s
    of a quiet core, most of the start-up): job.config imports device/ in every Hydra app (the
    plugin scan too), and device/ imports torch only where a rank or a GPU count needs it. They
    run in one process (train.py as __main__, its exit included) for one start-up; each keeps its
    exit code. launcher=slurm without -m is refused before the task's module (tasks.train imports
    torch) is imported, and so is a missing data.root (data.check, before task=train's module;
    issue 36)."""
    code = (
        "import contextlib, io, runpy, sys; codes = []\n"
        "for argv in (['--help'], ['--cfg', 'job'], ['bucket=abc'], "
        f"['launcher=slurm', 'logger=none', 'hydra.run.dir={tmp_path}'], "
        f"['data=raw_folder', 'data.root={tmp_path / 'nowhere'}', 'logger=none', "
        f"'hydra.run.dir={tmp_path}']):\n"
        "    sys.argv = ['train.py', *argv]\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):\n"
        "        try:\n"
        "            runpy.run_path('train.py', run_name='__main__')\n"
        "        except SystemExit as e:\n"
        "            codes.append(e.code)\n"
        "print(codes, 'torch' in sys.modules, 'does not exist' in err.getvalue())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[0, 0, 2, 2, 2] False True"
