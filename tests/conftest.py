"""Shared helpers. Two ways to run a job end to end, both reading the run record it wrote:
- run_inprocess: compose conf/ with Hydra's compose API and call job.run.run_job here
  (lightning-hydra-template);
  the local launcher still spawns real gloo ranks, only the parent's start-up (python, torch, hydra)
  is saved;
- run_train: `python train.py` in a fresh process, for what only the entry point does (exit codes,
  Hydra's
  multirun and its callbacks, the command line recorded)."""

from __future__ import annotations

import json
import contextlib
import gc
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
# TINY_AT_DEFAULTS keeps the in-job check's defaults (the check's own tests use it); TINY stops
# the check at its budget (diagnose.verify_max_s=0: as before the check could go on past its
# budget while its interval was wider than diagnose.verify_width). A tiny run's intervals on a
# shared 2-core machine are often wide; going on to 15 s in every run that reaches the check would
# add minutes to the slow tier for no assertion.
TINY_AT_DEFAULTS = ["model=vgg11_tiny", "scale=smoke", "logger=none"]
TINY = [*TINY_AT_DEFAULTS, "diagnose.verify_max_s=0"]

# One intra-op thread per process, as torchrun sets for several ranks per machine (the local
# launcher does not): 2 gloo ranks x 2 OpenMP threads on 2 cores spin against each other, and a tiny
# step then takes seconds, not milliseconds. Set before torch is imported here, so this process and
# every rank it starts inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Bytecode caches (gitignored __pycache__/), whatever PYTHONDONTWRITEBYTECODE says: without them
# every pytest process rewrites the asserts of and compiles each test and project module again
# (collection: 13.4 against 6.0 CPU s, measured loaded, issue 36) and every `python train.py` a
# test starts compiles the project again (~0.7 CPU s a start). Set here, before pytest imports
# the test modules and before any child process is started (they inherit the environment).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def run_train(
    args: list[str],
    tmp_path: Path,
    multirun: bool = False,
    timeout: float = 240,
    env: dict | None = None,
):
    """Run `python train.py args` in a fresh process; outputs go under tmp_path. env: variables to
    set over this process's environment (None: unset it)."""
    _starts_processes()
    out = tmp_path / ("sweep" if multirun else "run")
    cmd = [
        sys.executable,
        "train.py",
        *(["-m"] if multirun else []),
        *args,
        f"hydra.{'sweep' if multirun else 'run'}.dir={out}",
    ]
    environ = {**os.environ, "WANDB_MODE": "disabled", **(env or {})}
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in environ.items() if v is not None},
    )
    proc.out_dir = out
    return proc


def train_main(
    args: list[str],
    tmp_path: Path,
    multirun: bool = False,
    env: dict | None = None,
    out: Path | None = None,
) -> subprocess.CompletedProcess:
    """run_train's command through train.main() in this process, for a command refused before any
    job runs: the same entry point (its checks, Hydra, the launcher's refusal, the exit code main
    returns to sys.exit), without a fresh interpreter's start-up (~1.5-4 CPU s a start, issue 36).
    Returns what run_train returns: returncode, stdout, stderr (what this process printed), out_dir.
    A traceback escapes as the exception itself, so the test fails on it. What only a real process
    shows (the interpreter's exit, imports, signals) stays on run_train. out: the run's (or sweep's)
    dir, tmp_path/run (or sweep) unless given."""
    import io

    import train

    _hydra_shares_its_config_store()
    out = out if out is not None else tmp_path / ("sweep" if multirun else "run")
    cmd = [
        "train.py",
        *(["-m"] if multirun else []),
        *args,
        f"hydra.{'sweep' if multirun else 'run'}.dir={out}",
    ]
    environ, argv = dict(os.environ), sys.argv
    stdout, stderr = io.StringIO(), io.StringIO()
    os.environ.update({"WANDB_MODE": "disabled"})
    for key, value in (env or {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    sys.argv = cmd
    try:
        with (
            contextlib.chdir(ROOT),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            code = train.main()
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
    proc = subprocess.CompletedProcess(
        [sys.executable, *cmd], code, stdout.getvalue(), stderr.getvalue()
    )
    proc.out_dir = out
    return proc


def run_inprocess(
    overrides: list[str],
    tmp_path: Path,
    name: str = "run",
    env: dict | None = None,
    timeout: float = 240,
) -> tuple[dict | None, int]:
    """job.run.run_job on the composed config, as one single (not multirun) job writing under
    tmp_path/name. Returns (the run record, or None if none was written; the exit code train.py
    would have had). What the job printed is in capfd (the summary comes from this process, rank
    output from the ranks). Past `timeout` seconds it raises TimeoutError, and the elastic agent
    stops the ranks on its way out."""
    from job.run import run_job
    from base.record import RECORD_NAME

    _starts_processes()

    out = tmp_path / name
    out.mkdir(
        parents=True, exist_ok=True
    )  # as Hydra makes the job's output dir before calling the task function
    job = {
        "name": "train",
        "num": None,
        "output_dir": str(out),
        "sweep_dir": None,
        "overrides": list(overrides),
        "command": " ".join(["python", "train.py", *overrides]),
        "multirun": False,
    }
    environ = dict(os.environ)
    signals = (
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
    )  # the elastic agent installs its own
    handlers = {s: signal.getsignal(s) for s in (*signals, signal.SIGALRM)}
    os.environ.update(
        {"WANDB_MODE": "disabled", **(env or {})}
    )  # as run_train: the ranks inherit it

    def too_long(*_):
        raise TimeoutError(f"the job ran past {timeout:g} s: {' '.join(overrides)}")

    signal.signal(signal.SIGALRM, too_long)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        code = run_job(
            compose(overrides), job=job
        ).exit_code  # 2 bad input, 1 a rank failed, 128 + a signal
    finally:  # nothing a job does may leak into the next test
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.environ.clear()
        os.environ.update(environ)
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        # the job's agent, its rendezvous store and their threads go here, not in a later test
        gc.collect()
    path = out / RECORD_NAME
    return (json.loads(path.read_text()) if path.exists() else None), code


def close_group() -> None:
    """destroy_process_group for an in-process group, after a collection: a DDP reducer in a
    reference cycle holds the group, and the collector would otherwise end it (and join its gloo
    threads) from inside a later test."""
    import torch.distributed as dist

    gc.collect()
    dist.destroy_process_group()


@pytest.fixture
def one_rank_group(tmp_path):
    """An in-process gloo group of one rank (a file store under the test's tmp_path), closed after
    the test."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    close_group()


_CURRENT: list = []  # the test running now (set by _current_test), for _starts_processes


@pytest.fixture(autouse=True)
def _current_test(request):
    _CURRENT[:] = [request.node]
    yield
    _CURRENT.clear()


@pytest.fixture(autouse=True)
def _root_logger_as_it_was():
    """A test that calls train.main() in-process (the entry point's tests: --help, bad input) has
    Hydra configure this process's root logger, as a CLI process's would be: a StreamHandler on the
    sys.stdout pytest captured for that test, JobLog files under its tmp_path. pytest closes the
    stream after the test, and every later test's log line then printed '--- Logging error ---
    ValueError: I/O operation on closed file' into its captured stderr. What a test added to the
    root logger is removed and closed after it, and the level put back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)


def _starts_processes():
    """A test that starts project processes must say so (marker `subprocess`, or `slow`, `slurm`,
    `root`): the mutation run (docs/testing.md) leaves such tests out, since a child process cannot
    import mutmut's mutants."""
    node = _CURRENT[0] if _CURRENT else None
    if node is not None and not any(
        node.get_closest_marker(m) for m in ("subprocess", "slow", "slurm", "root")
    ):
        pytest.fail(
            f"{node.nodeid} starts project processes: mark it @pytest.mark.subprocess (or slow)",
            pytrace=False,
        )


def wandb_free_env(home: Path) -> dict[str, str | None]:
    """No credentials, no user W&B settings: what a fresh CI machine looks like (None: unset)."""
    return {
        **{var: None for var in os.environ if var.startswith("WANDB_")},
        "WANDB_MODE": None,
        "HOME": str(home),
        "NETRC": str(home / ".netrc"),
        "WANDB_CONFIG_DIR": str(home / "wandb-config"),
        "WANDB_CACHE_DIR": str(home / "wandb-cache"),
        "WANDB_DATA_DIR": str(home / "wandb-data"),
    }


HEADLINE_SWEEP = [
    "optim=bf16,powersgd",
    "bucket=25,100,2000",
    "model=vgg11_tiny",
    "scale=smoke",
    # one rank per job: what its tests check (six ok records, the sweep table and its lines, one
    # W&B run per job in one group, the summary's table, the report on the logged metrics) is the
    # submitting process's and the same for any world size; each job's second rank was its
    # python+torch start-up again. Two-rank DDP with each hook and bucket cap is test_ddp_knobs'.
    "world_size=1",
    "logger=wandb",
    "logger.mode=offline",
    # the in-job check stops at its budget, as in TINY's runs: each PowerSGD job's check of bf16
    # otherwise ran on to diagnose.verify_max_s (15 s, its tiny steps' interval never narrow
    # enough), 45 of the sweep's 235 s (load 8-11); no test of this sweep reads the check, whose
    # default is test_verify_runs' (TINY_AT_DEFAULTS)
    "diagnose.verify_max_s=0",
]


@pytest.fixture(scope="session")
def headline_sweep(request, tmp_path_factory):
    """The design card's own command, `python train.py -m optim=bf16,powersgd bucket=25,100,2000`,
    on the tiny model, one rank a job, with W&B offline and no credentials: run once, read by the
    sweep-table tests (test_sweeps) and the W&B tests (test_wandb, test_wandb_report). proc.out_dir
    is the sweep dir."""

    def run():
        tmp = tmp_path_factory.mktemp("headline")
        (tmp / "home").mkdir()
        return run_train(
            HEADLINE_SWEEP, tmp, multirun=True, timeout=600, env=wandb_free_env(tmp / "home")
        )

    return shared_run(request.config, "headline_sweep", run)


@pytest.fixture(scope="session")
def pair_groups_sweep(request, tmp_path_factory):
    """`python train.py -m task=pair_groups pairs=1,2` (verbose: the table and the sweep diagnosis
    printed in full), run once for the task's records and table (test_comm_tasks) and the sweep's
    curve and diagnosis (test_diagnosis_runs). proc.out_dir is the sweep dir."""
    return shared_run(
        request.config,
        "pair_groups_sweep",
        lambda: run_train(
            ["task=pair_groups", "pairs=1,2", "logger=none", "pair_groups.iters=64"]
            + ["verbose=true"],
            tmp_path_factory.mktemp("pair_groups"),
            multirun=True,
            timeout=300,
        ),
    )


def shared_run(config, name: str, run) -> subprocess.CompletedProcess:
    """A session fixture's run (run(): run_train's result), once per `pytest -n N` run, not once
    per worker: the first worker to need it runs it and leaves what it returned in a file beside
    the workers' locks; another worker reads it there, its out_dir still under the first worker's
    temp dir. No race: a test that reads `name` holds the group lock `name` from its setup
    (pytest_runtest_protocol below). Without xdist: run() itself."""
    where = xdist_file(config, name + ".json")
    if where is None:
        return run()
    if where.exists():
        got = json.loads(where.read_text())
        proc = subprocess.CompletedProcess(got["args"], got["returncode"], got["stdout"])
        proc.stderr, proc.out_dir = got["stderr"], Path(got["out_dir"])
        return proc
    proc = run()
    kept = {k: getattr(proc, k) for k in ("args", "returncode", "stdout", "stderr")}
    where.write_text(json.dumps({**kept, "out_dir": str(proc.out_dir)}))
    return proc


def xdist_file(config, name: str) -> Path | None:
    """A file the workers of this `pytest -n N` run share, in the run's temp dir (pytest-N/, above
    each worker's popen-gwK/ basetemp; pytest's retention of old runs removes it); None without
    xdist."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return Path(config.getoption("basetemp")).parent / f"ddp-comm-{name}"


def read(out_dir: Path) -> dict:
    return json.loads((Path(out_dir) / "run_record.json").read_text())


_COMPOSED: dict[tuple[str, ...], object] = {}  # compose's results by overrides, this process's


def compose(overrides: list[str] | None = None):
    """conf/ composed with Hydra's compose API, as train.py's job gets it (without the hydra node).
    Memoized by the overrides, each caller getting its own deep copy (a test may change its copy):
    a compose is ~0.1-0.2 CPU s of Hydra's defaults tree, YAML and schema merges, and the fast
    tier composed 342 times, 43 of them an override list composed before (issue 36); a copy is
    ~5 ms. Nothing a compose returns depends on the process's state: conf/'s resolvers
    (${gpu_or:}, ${gpu_count:}) resolve when a value is read, under the test's own host mock, and
    a refusal (an exception) is not kept, so it is raised again."""
    import copy

    from job.config import register_resolvers

    register_resolvers()
    _hydra_shares_its_config_store()
    key = tuple(overrides or [])
    if key not in _COMPOSED:
        from hydra import compose as hydra_compose, initialize_config_dir

        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            _COMPOSED[key] = hydra_compose(
                config_name="config", overrides=list(key), return_hydra_config=False
            )
    return copy.deepcopy(_COMPOSED[key])


@pytest.fixture
def silent_host():
    """http://127.0.0.1:<port> that accepts connections and never answers (a hung W&B server or
    proxy)."""
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
    """Tests not marked gpu run on CPU whatever the machine has: they, the ranks they start and
    their train.py subprocesses see no GPU (device/placement.py reads CUDA_VISIBLE_DEVICES="" as
    none, even after CUDA started)."""
    if "gpu" not in request.keywords:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


HTA_MISSING = (
    "needs HolisticTraceAnalysis, an optional install (pip install -r requirements-optional.txt; "
    "it adds "
    "pandas, plotly and jupyterlab, about 80 packages, so the set-up leaves it out)"
)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks set here
def pytest_collection_modifyitems(config, items):
    """Tests that cannot run here are skipped with the reason, which `-ra` (pytest.ini) prints in
    the summary."""
    import importlib.util

    import torch

    skips = {}
    if not torch.cuda.is_available():
        skips["gpu"] = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    if importlib.util.find_spec("hta") is None:
        skips["hta"] = pytest.mark.skip(reason=HTA_MISSING)
    loadgroup = config.getoption("loadgroup", default=False)
    entries = []
    for item in items:
        for mark, skip in skips.items():
            if mark in item.keywords:
                item.add_marker(skip)
        group = xdist_group(item)
        entries.append((item, group, runs_alone(item)))
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            if loadgroup:
                _group_suffix(item, group)
    if loadgroup:  # the order xdist's scheduler hands the units out in (pytest_cmdline_main)
        items[:] = schedule(
            [(item.nodeid.split("@")[0], group, alone) for item, group, alone in entries],
            known_seconds(),
            items,
        )


def schedule(entries: list, known: dict[str, float], items: list | None = None) -> list:
    """The tests in the order `pytest -n N` hands them out (--dist loadgroup, xdist's reorder off
    in pytest_cmdline_main): entries are (node id, xdist group or None, runs alone) in collection
    order; a unit is a group's tests or one ungrouped test, kept together. First the units with a
    test that runs alone, those with only such tests before a group that has others too (its alone
    tests first): while both workers take alone tests they wait only for each other, where an alone
    test reached among the others waited for the other worker's test under way (up to 2 min), one
    core idle. Then the rest longest first, by the last
    measured seconds (`known`: the 20 slowest of docs/testing.md's table), then xdist's own order
    (the groups with the most tests first), then collection order: a 2-minute test started last
    left one core idle for most of it. Returns items (the entries' node ids if None) in that
    order."""
    units: dict[str, dict] = {}
    for i, (nodeid, group, alone) in enumerate(entries):
        unit = units.setdefault(
            f"@{group}" if group else nodeid,
            {"first": i, "alone": False, "shared": False, "s": 0.0, "at": []},
        )
        unit["alone"] |= alone
        unit["shared"] |= not alone
        unit["s"] += known.get(nodeid, 0.0)
        unit["at"].append(i)
    ordered = sorted(
        units.values(),
        key=lambda u: (not u["alone"], u["shared"], -u["s"], -len(u["at"]), u["first"]),
    )
    picked = items if items is not None else [e[0] for e in entries]
    return [picked[i] for u in ordered for i in sorted(u["at"], key=lambda i: not entries[i][2])]


def known_seconds() -> dict[str, float]:
    """{node id: seconds} of the 20 slowest tests as `python -m tests.durations` last measured
    them (its table in docs/testing.md); {} without one."""
    import re

    text = (ROOT / "docs" / "testing.md").read_text()
    table = text[text.find("<!-- durations: begin") : text.find("<!-- durations: end")]
    rows = re.finditer(r"^\| *([0-9.]+) \| \w+ \| `([^`]+)` \|$", table, re.M)
    return {row[2]: float(row[1]) for row in rows}


def _group_suffix(item, group: str) -> None:
    """What xdist's worker does for --dist loadgroup (its scheduler groups node ids by their
    `@group` suffix), done where pytest 9.2 reads it: xdist writes item._nodeid, which pytest 9.2
    no longer reads (pytest-xdist issue 1386; its fix, PR 1388, writes the structured id as here).
    Without it a group is spread over both workers and one waits for the other's group lock."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest before 9.2: xdist's own suffix works
        return
    if "@" not in item.nodeid.rsplit("]", 1)[-1]:
        item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """`pytest -n 2` distributes by xdist_group (--dist loadgroup) unless told otherwise; set here
    rather than in pytest.ini's addopts, so that `pytest` still runs where pytest-xdist is not
    installed."""
    if (
        getattr(config.option, "numprocesses", None)
        and getattr(config.option, "dist", "no") == "no"
    ):
        config.option.dist = "loadgroup"
        # the units go out in the order the workers' collection has them (schedule below), not
        # re-sorted by their number of tests
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's controller, for each worker: a worker parses the command line again and so
    never sees the --dist set above; without loadgroup there, it gives its tests no @group suffix
    and the scheduler spreads every xdist_group over both workers (the root link tests ran on two
    workers at once, sharing the namespaces' rendezvous port; each worker ran the shared sweeps)."""
    node.workerinput["ddp_comm_loadgroup"] = node.config.getvalue("dist") == "loadgroup"


def pytest_configure(config):
    if getattr(config, "workerinput", {}).get("ddp_comm_loadgroup"):
        config.option.loadgroup = True  # read by xdist's worker when it collects (remote.py)


def _hydra_shares_its_config_store() -> None:
    """Every Hydra compose in this process (compose(), train_main, run_inprocess: each calls this
    first) deep-copies its config repository twice ("to avoid mutating it with
    initialize_sources()", hydra's CachingConfigRepository), and with it the schema source's
    ConfigStore: every structured config registered (ours and Hydra's own), ~15-20 ms a copy; a
    compose takes 7% less CPU without it (median of 8 paired rounds, load 8; issue 36). Nothing
    writes to the store through a source: initialize_sources replaces the repository's list of
    sources, and ConfigStore.load hands out a deep copy of the node it returns. So a copied schema
    source shares the one store, as a new one does (StructuredConfigSource.__init__ takes
    ConfigStore.instance()). The composed configs are the same, key for key: 50 options of every
    group when this was written, and test_config's test_sharing_hydras_config_store_... since."""
    import copy
    import importlib

    from hydra.core.plugins import Plugins

    # after Hydra's plugin scan, which imports core_plugins' modules afresh: a class patched
    # before it is not the one Hydra's repository then uses
    Plugins.instance()
    source = importlib.import_module("hydra._internal.core_plugins.structured_config_source")
    if "__deepcopy__" not in vars(source.StructuredConfigSource):
        source.StructuredConfigSource.__deepcopy__ = lambda self, memo: copy.copy(self)


SHARED_RUNS = (
    "headline_sweep",
    "pair_groups_sweep",
)  # session fixtures: one run, read by tests in several files


def xdist_group(item) -> str | None:
    """Under `pytest -n 2` (pytest-xdist), tests of one group run one after another (the group
    locks of pytest_runtest_protocol; and on one worker where --dist loadgroup works): the Slurm
    cluster's two nodes (jobs of two workers would queue behind each other past their timeouts)
    and the tests reading a session fixture's run (shared_run: run once, not once per worker).
    The emulated links (root: named network namespaces and their rendezvous port) are no group:
    every root test runs alone (runs_alone: no other test runs from its setup to its teardown),
    so two never overlap, and either worker may take one (schedule: the alone tests first, on
    both workers). Everything else is parallel-safe: each test writes under its own tmp_path,
    servers and stores listen on port 0, a fault run has its own TMPDIR."""
    if item.get_closest_marker("slurm"):
        return "slurm"
    shared = [f for f in SHARED_RUNS if f in getattr(item, "fixturenames", ())]
    if shared:
        return shared[0]
    # a module-scoped fixture (test_ddp_knobs' and test_device_train's runs, test_script's): the
    # module's tests on one worker, or each worker would make its runs again
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d and d[-1].scope == "module" for d in defs.values()):
        return item.nodeid.split("::")[0].replace("/", ".")
    return None


# Tests that run alone under `pytest -n N` (the lock below): each asserts what measured timing
# decides, a finding, a verdict or a rate, that a second worker's ranks on the same 2 cores would
# disturb. The one list, by node id prefix, with the reason; every `root` test too (the emulated
# links' rates). test_trust_sweep shares the cores: its sleeps (100 / 300 ms a step) outweigh a
# neighbour's load, and it passed 3 times beside a loaded neighbour (2026-12-07, load 5-11: the
# headline sweep, test_ddp_knobs, repeats=auto's sweep and other sessions' runs).
ALONE = {
    "tests/test_diagnosis_runs.py::test_per_param_run_top_finding": "the top finding's share",
    "tests/test_diagnosis_runs.py::test_a_rank_slowed_by_100_ms": "the straggler over the noise",
    "tests/test_diagnosis_runs.py::test_diagnosis_benchmark_command": "the benchmark's top-1",
    "tests/test_verify_runs.py::": "the fix measured in the job against its estimate",
    "tests/test_verify_in_job.py::test_the_check_times_its_blocks_as_the_window_times_separate_"
    "runs": "a fake link's refill during sleeps",
    "tests/test_script.py::test_rank0_eval_checkpoint_and_exit_0": "the hiccup's period (a "
    "neighbour's burst hid one of rank 0's three stalls under -n 2: 'every 6 steps')",
    "tests/test_trust_sweep.py::test_injected_delay_is_significantly_slower": "the slower verdict "
    "over 3 runs (under -n 2 on the quiet machine, 2026-12-07 23:00, its 0.3 s row was 'no "
    "significant difference' beside the other worker's tests: one slowed run widens a 3-run "
    "interval past 0.98)",
}


def runs_alone(item) -> bool:
    return bool(item.get_closest_marker("alone") or item.get_closest_marker("root")) or any(
        item.nodeid.startswith(prefix) for prefix in ALONE
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under `pytest -n N` (pytest-xdist), from a test's setup (session fixtures' runs included)
    to its teardown:
    - the tests of one group (xdist_group above: the Slurm cluster, a shared run) never
      overlap: each holds its group's lock. xdist's own --dist loadgroup would keep a
      group on one worker, but with pytest 9.2 it silently stopped grouping (pytest-xdist issue
      1386: it renames node ids, which pytest no longer reads), and the root link tests ran on
      both workers at once;
    - a test marked `alone` (and every `root` test: emulated links whose shaping is checked
      against the rate) runs while no other test runs: its assertion rests on timing that another
      worker's ranks, on the same 2 cores, would disturb. A readers-writer lock: every other test
      holds it shared, an `alone` test exclusive; the gate, taken first, lets a waiting `alone`
      test in before the next shared holder, so it waits for the tests running now only.
    Locks are flock()s on files in the run's temp dir (xdist_file), taken in one order (group,
    gate, lock), all released at the end of the test. Without xdist: nothing."""
    if xdist_file(item.config, "lock") is None:
        return (yield)
    import fcntl

    exclusive = runs_alone(item)
    group = xdist_group(item)
    with contextlib.ExitStack() as held:
        if group:
            mine = held.enter_context(open(xdist_file(item.config, f"group-{group}"), "a"))
            fcntl.flock(mine, fcntl.LOCK_EX)
        gate = held.enter_context(open(xdist_file(item.config, "gate"), "a"))
        lock = held.enter_context(open(xdist_file(item.config, "lock"), "a"))
        fcntl.flock(gate, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        return (yield)  # closing each file releases its lock


@contextlib.contextmanager
def serving(handler):
    """http://127.0.0.1:<port> answered by `handler` (an http.server.BaseHTTPRequestHandler class)
    on a daemon thread, until the block ends: a stand-in W&B server."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
