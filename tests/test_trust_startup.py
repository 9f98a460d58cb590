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


@pytest.mark.subprocess
def test_a_runs_own_statistics_import_no_scipy_stats_and_give_its_values():
    """Rank 0's throughput interval (stats.within.t_quantile), its steady-state trend (stats.drift)
    and the diagnosis's hiccup lattice test (diagnosis.rules._beyond_noise: a stall every 3rd step)
    run without importing scipy.stats (~0.5 quiet CPU s, in every run's rank 0 and parent: issue
    36), and give what scipy.stats gives, bit for bit."""
    import numpy as np
    from scipy import stats as st

    from diagnosis.rules import _average_ranks
    from stats.drift import DRIFT_BATCHES, batches, trend
    from stats.within import t_quantile

    series = [0.01 + (0.005 if i % 3 == 0 else 0.0) + 1e-4 * (i % 7) for i in range(60)]
    code = (
        "import sys; from stats.within import t_quantile; from stats.drift import trend; "
        "from diagnosis.rules import _beyond_noise; "
        f"s = {series!r}; t_quantile(0.975, 4); trend([x * (1 + i / 100) for i, x in "
        "enumerate(s)]); found = _beyond_noise(s, list(range(0, 60, 3)), set(), "
        "[[0.01 + 1e-4 * (i % 5) for i in range(60)]]); "
        "print(found is not None and found[0][:3], 'scipy.stats' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[0,", "3,", "6]", "False"], out.stdout
    for p, df in [(0.975, 1), (0.975, 4), (0.95, 2.5), (0.995, 59), (0.6, 1000)]:
        assert t_quantile(p, df) == float(st.t.ppf(p, df))
    rng = np.random.default_rng(0)
    for x in (rng.integers(0, 5, 40).astype(float), rng.normal(size=33), np.ones(5)):
        got = _average_ranks(x)
        assert got.dtype == np.float64 and np.array_equal(got, st.rankdata(x))
    rising = [1.0 + 0.01 * i + 0.02 * (i % 2) for i in range(60)]
    change, p = trend(rising)
    logs = np.log(rising)
    means = [logs[b].mean() for b in batches(len(rising), DRIFT_BATCHES)]
    assert change > 0 and 0 < p < 0.05
    assert p == pytest.approx(float(st.linregress(np.arange(DRIFT_BATCHES), means).pvalue))
