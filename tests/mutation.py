"""The mutation run (docs/testing.md): `nice -n 15 python -m tests.mutation` runs mutmut over the
modules that compute what a user reads ([tool.mutmut] in pyproject.toml) with the fast, process-free
tests, then writes each judged module's entry in results/mutation/ (committed: the run's header,
counts by outcome, every mutant not killed) and results/mutation.md from those entries alone: per
module, mutants killed / survived / judged equivalent, and each survivor left standing.

A mutant judged equivalent (no test can tell it from the code) is listed in
tests/mutation_equivalent.toml with the mutated line and the reason; the entry counts only while
mutmut still makes that very line, so it goes stale, and the mutant counts as a survivor again, when
the code under it changes. A later run re-tests only the functions whose code changed since mutmut
last ran them, so `--since main` is cheap. The options (--since, --module, --report, --children,
--resume, --fast): docs/testing.md "Mutation testing".

`--fast` judges the same mutants (mutmut's own generator, its copy under mutants/, its trampolines
and result files) without mutmut's runner, whose per-mutant pytest start and test-to-function
stats cost minutes per module on the 2-core machine: one pytest session per module collects the
module's named tests once, and each mutant runs, in a fork of that session, those of them that call
its function (mutmut's own record of which test calls which function, taken on the clean run).
Killed only when a test that ran failed (or a time limit stopped it); survived otherwise, none run
included. The tests it runs per module are named in the report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "results" / "mutation.md"
EQUIVALENT = ROOT / "tests" / "mutation_equivalent.toml"
# the committed results the report is made from, one file per module (entry_path): each run's
# header (date, commit, command, machine, load, wall time, tests), the counts by outcome and every
# mutant not killed; mutants/, mutmut's working copy, is ignored and lost with the machine
RESULTS = ROOT / "results" / "mutation"
GOAL = 0.90  # issue 30: >= 90% of the non-equivalent mutants killed across the listed modules
KILLED = (
    "killed",
    "timeout",
    "caught by type check",
)  # a test (or the time limit on an endless loop) caught it


NARROWED = """import sys
from mutmut import configuration
from mutmut.__main__ import cli
if sys.argv[1]:
    configuration.config().only_mutate = sys.argv[1].split(",")
sys.argv = ["mutmut", *sys.argv[2:]]
sys.exit(cli())
"""


GENERATE = """import os, sys
from mutmut import configuration
from mutmut.__main__ import create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths
configuration.config().only_mutate = sys.argv[1].split(",")
set_mutant_under_test("mutant_generation")
os.makedirs("mutants", exist_ok=True)
copy_src_dir()
copy_also_copy_files()
setup_source_paths()
create_mutants(1)
"""

JUDGE = """import importlib.util, sys
spec = importlib.util.spec_from_file_location("mutation_judge", sys.argv[1])
judge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(judge)
sys.exit(judge.judge_main(sys.argv[2]))
"""

# test_whatif's fast tests of the step model on hand-made timelines and one committed record each
WHATIF_FAST = tuple(
    f"tests/test_whatif.py::{t}"
    for t in (
        "test_one_bucket_at_the_end_does_not_overlap",
        "test_an_early_bucket_hides_behind_backward",
        "test_buckets_queue_on_one_stream_in_order",
        "test_contention_slows_compute_while_an_all_reduce_runs",
        "test_a_serial_hook_blocks_compute_until_its_bucket_is_done",
        "test_pre_hook_work_runs_on_the_compute_thread",
        "test_copies_into_buckets_delay_the_ready_times",
        "test_the_model_reproduces_a_committed_run_and_its_knobs_move_the_step_the_right_way",
        "test_ranks_sharing_a_cpu_host_slow_each_ranks_compute",
        "test_a_one_rank_run_needs_a_link_to_predict_ddp",
    )
)

# --fast: the tests each module's mutants run, where they are not the module's own kill file
# (tests/test_mutation_kill_<stem>.py): the targeted tests that check its numbers by hand.
FAST_TESTS = {
    "diagnosis/accounting.py": ["tests/test_mutation_reach.py"],
    "stats/summary.py": [
        "tests/test_stats.py",
        "tests/test_printed_numbers.py",
        "tests/test_mutation_kill_summary.py",
    ],
    "stats/within.py": [
        "tests/test_mutation_reach.py",
        "tests/test_stats.py",
        "tests/test_mutation_kill_within.py",
    ],
    "comm/bandwidth.py": [
        "tests/test_comm_bandwidth.py",
        "tests/test_printed_numbers.py",
        "tests/test_mutation_kill_bandwidth.py",
    ],
    "comm/efficiency.py": [
        "tests/test_printed_numbers.py",
        "tests/test_diagnosis_io.py",
        "tests/test_diagnosis.py",
        "tests/test_mutation_kill_efficiency.py",
    ],
    "tasks/train/stragglers.py": [
        "tests/test_printed_numbers.py",
        "tests/test_saving_bounds.py",
        "tests/test_diagnosis.py",
        "tests/test_mutation_kill_stragglers.py",
    ],
    # step.py has ~2000 mutants: its kill file and test_whatif's hand-made simulations and
    # one-record predictions, under 1 s together (not the whole file: its committed-record and
    # command tests cost seconds per surviving mutant); profile.py's the same predictions
    "whatif/step.py": ["tests/test_mutation_kill_step.py", *WHATIF_FAST],
    "whatif/profile.py": ["tests/test_mutation_kill_profile.py", *WHATIF_FAST],
    # result.py's assemble is checked on hand-made ranks in test_printed_numbers (samples/s with
    # accumulate, the slowest rank, the straggler), its printed summary in its kill file
    "tasks/train/result.py": [
        "tests/test_mutation_kill_result.py",
        "tests/test_printed_numbers.py",
    ],
    # stats/calibrate.py's own kill file: the default name would also be whatif/calibrate.py's
    "stats/calibrate.py": ["tests/test_mutation_kill_stats_calibrate.py"],
    "whatif/calibrate.py": ["tests/test_mutation_kill_whatif_calibrate.py"],
    # whatif's sources, api, report and validate: kill files named with their package, as
    # calibrate.py's (the default names would also be diagnosis/sources.py's, any other api.py's)
    "whatif/sources.py": ["tests/test_mutation_kill_whatif_sources.py"],
    "whatif/api.py": ["tests/test_mutation_kill_whatif_api.py"],
    "whatif/report.py": ["tests/test_mutation_kill_whatif_report.py"],
    "whatif/validate.py": ["tests/test_mutation_kill_whatif_validate.py"],
    "tables/table.py": [
        "tests/test_mutation_kill_table.py",
        "tests/test_results_table.py",
        "tests/test_trust_table.py",
    ],
    "diagnosis/rules.py": [
        "tests/test_mutation_kill_rules.py",
        "tests/test_saving_bounds.py",
        "tests/test_hiccup_period.py",
        "tests/test_hiccup_noise.py",  # the hiccup rule's rank test (_beyond_noise, _whole_lattice)
        "tests/test_diagnosis.py",
    ],
    "tables/aggregate.py": [
        "tests/test_trust_table.py",
        "tests/test_results_table.py",
        "tests/test_mutation_kill_aggregate.py",
    ],
}

# what the covered modules import inside functions, slow to import (scipy.stats: seconds): the judge
# imports them before it forks, as mutmut's fork server does by collecting the tests
PRELOAD = ("scipy.stats", "scipy.optimize", "numpy", "torch", "torch.distributed", "omegaconf")

# mutmut's exit codes (mutmut.stats.status_by_exit_code), as --fast writes them into its results
EXIT_SURVIVED, EXIT_KILLED, EXIT_INTERNAL, EXIT_TIMEOUT = 0, 1, 3, 36


def narrowed(modules: list[str]) -> list[str]:
    """The only_mutate a partial run gives mutmut's generator: the modules asked for and every
    module with results under mutants/. mutmut copies a module it is not told to mutate over its
    mutated copy (losing the mutants the report diffs), and takes a plain copy newer than the source
    for a mutated one; so a copy without mutants of a module named here is removed first, and
    generated again (its results are kept where the function's code is unchanged)."""
    keep = sorted(
        set(modules) | {m for m in covered() if (ROOT / "mutants" / f"{m}.meta").exists()}
    )
    for m in keep:
        copy = ROOT / "mutants" / m
        if copy.exists() and "__mutmut_" not in copy.read_text():
            copy.unlink()
    return keep


def fast_tests(module: str) -> list[str]:
    """The tests --fast runs for a module's mutants: FAST_TESTS, else its kill file."""
    if module in FAST_TESTS:
        return FAST_TESTS[module]
    stem = Path(module).stem
    return [f"tests/test_mutation_kill_{stem}.py"]


def has_fast_tests(module: str) -> bool:
    return all((ROOT / t.split("::")[0]).exists() for t in fast_tests(module))


def outcome(exit_code: int, tally: dict | None, timed_out: bool) -> int:
    """One mutant's verdict from its fork, as mutmut's exit code: exit_code is the fork's
    (os.waitstatus_to_exitcode: -N for signal N), tally what it reported ({"ran": tests whose call
    phase ran, "failed": reports that failed, setup and teardown included}). Killed only when a
    test failed (or the CPU-time limit's SIGXCPU, or the wall-clock limit, stopped it: an endless
    loop, mutmut's timeout); an error in the fork's own loop is mutmut's 3, killed as mutmut counts
    it; survived otherwise: every test passing, or none run (where mutmut says "no tests" and leaves
    the mutant out of the score, --fast counts it against the score)."""
    if timed_out:
        return EXIT_TIMEOUT
    if exit_code < 0:
        return exit_code  # a signal: -24 (SIGXCPU) is mutmut's timeout, others its segfault
    if exit_code != 0 or tally is None:
        return EXIT_INTERNAL
    if tally["failed"]:
        return EXIT_KILLED
    return EXIT_SURVIVED


def _fork_tests(
    session, name: str, cpu_limit_s: int, wall_limit_s: float, items=None
) -> tuple[int, float, dict | None]:
    """Run `items` (default: every test the session collected) in a fork with `name` as the active
    mutant; stops at the first failure (mutmut's -x). Returns (verdict as mutmut's exit code,
    seconds, the fork's tally). Under mutmut's "stats" name the tally also has, per test, the
    mutated functions it called ("hits": mutmut's own record of trampoline hits) and its seconds."""
    import resource
    import select
    import signal

    items = session.items if items is None else items
    start = time.monotonic()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork: never returns
        code = 0
        try:
            os.close(rfd)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s + 1))
            # a failure's report, which goes to /dev/null, in Python's own format: pytest's
            # long one parses the whole source file of each frame, and a frame in mutmut's copy of
            # the module (every mutant inline: whatif/step.py's is 150,000 lines) takes 10-50 s
            # to parse on the shared machine, per kill; the verdict is the same
            session.config.option.tbstyle = "native"
            from mutmut.mutation.trampoline import set_mutant_under_test

            set_mutant_under_test(name)
            before = set(sys.modules)
            tally: dict = {"ran": 0, "failed": 0, "hits": {}, "seconds": {}}

            class Tally:
                def pytest_runtest_logreport(self, report):
                    tally["ran"] += report.when == "call"
                    tally["failed"] += bool(report.failed)

            session.config.pluginmanager.register(Tally(), "mutation-tally")
            for i, item in enumerate(items):
                nextitem = items[i + 1] if i + 1 < len(items) else None
                t0 = time.perf_counter()
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                tally["seconds"][item.nodeid] = time.perf_counter() - t0
                if name == "stats":
                    from mutmut.state import state

                    tally["hits"][item.nodeid] = sorted(state()._stats)
                    state()._stats.clear()
                if tally["failed"]:
                    break
            tally["imported"] = sorted(set(sys.modules) - before)
            os.write(wfd, json.dumps(tally).encode())
        except BaseException:  # the fork's own loop broke: mutmut's internal error
            code = EXIT_INTERNAL
        os._exit(code)
    os.close(wfd)
    out, timed_out = b"", False
    deadline = start + wall_limit_s
    while True:
        ready, _, _ = select.select([rfd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        chunk = os.read(rfd, 1 << 20)
        if not chunk:
            break
        out += chunk
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    tally = json.loads(out) if out else None
    verdict = outcome(os.waitstatus_to_exitcode(status), tally, timed_out)
    return verdict, time.monotonic() - start, tally


def judge_main(spec_path: str) -> int:
    """The --fast judge of one module, run by main in mutmut's copy (cwd mutants/): collects the
    named tests once; runs them with no mutant under mutmut's "stats" name, which must pass and
    records which test calls which mutated function; checks they fail under mutmut's forced
    failure (so they reach the trampolines); then, per mutant, forks and runs the named tests that
    call its function (none: survived), and writes each verdict into mutmut's
    results file (<module>.meta) as it comes."""
    import pytest
    from mutmut.utils.format_utils import mangled_name_from_mutant_name

    spec = json.loads(Path(spec_path).read_text())
    meta_path = Path(spec["module"] + ".meta")

    class Judge:
        status = 2

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtestloop(self, session):
            if session.testsfailed or not session.items:
                print(f"error: collecting {spec['tests']} failed or found no test", flush=True)
                return True
            # imported once here, not again in every fork: slow imports the code does inside
            # functions, and the mutated module itself (a test may import it inside the test; a
            # mutated copy, every mutant inline, takes a second or more to compile)
            for lazy in (*PRELOAD, spec["module"].removesuffix(".py").replace("/", ".")):
                importlib.import_module(lazy)
            base, base_s, stats = _fork_tests(session, "stats", 1200, 2400)
            if base != EXIT_SURVIVED:
                print(
                    f"error: {spec['tests']} do not pass with no mutant (exit {base})", flush=True
                )
                return True
            for lazy in stats["imported"]:  # what the tests imported as they ran: here, once
                try:
                    importlib.import_module(lazy)
                except Exception:  # a name a module put in sys.modules itself: not importable
                    pass
            gc.freeze()  # forks' collectors skip the inherited heap (no copy-on-write)
            forced, _, _ = _fork_tests(session, "fail", 600, 1200)
            if forced not in (EXIT_KILLED, EXIT_INTERNAL):
                print(
                    f"error: {spec['tests']} reach no mutated function (exit {forced})", flush=True
                )
                return True
            n = len(spec["names"])
            print(f"{n} mutants, {len(session.items)} tests, clean run {base_s:.1f} s", flush=True)
            for i, name in enumerate(spec["names"], 1):
                function = mangled_name_from_mutant_name(name)
                items = sorted(  # fastest first: a kill comes sooner, the verdict is the same
                    (it for it in session.items if function in stats["hits"][it.nodeid]),
                    key=lambda it: stats["seconds"][it.nodeid],
                )
                estimate = sum(stats["seconds"][it.nodeid] for it in items)
                cpu_limit = int(10 * estimate + 10)  # mutmut's: (estimate + 1) * 2 * multiplier
                if items:
                    verdict, seconds, tally = _fork_tests(
                        session, name, cpu_limit, 4 * cpu_limit + 30, items
                    )
                else:
                    verdict, seconds, tally = EXIT_SURVIVED, 0.0, None  # no named test calls it
                meta = json.loads(meta_path.read_text())
                meta["exit_code_by_key"][name] = verdict
                meta["durations_by_key"][name] = seconds
                meta_path.write_text(json.dumps(meta, indent=4))
                print(
                    f"[{i}/{n}] {name}: exit {verdict} ({len(items)} tests, {seconds:.2f} s; "
                    f"{sum((tally or {}).get('seconds', {}).values()):.2f} s in tests)",
                    flush=True,
                )
            self.status = 0
            return True

    judge = Judge()
    pytest.main(
        [
            "--rootdir=.",
            *["-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=", "-q", "-s"],
            # no traceback: a failure's verdict is all a mutant needs, and pytest's long one parses
            # the mutated module's source (mutants/ holds every mutant's copy, thousands of lines)
            # in every fork: seconds of CPU per kill, most of a killed mutant's time
            "--tb=no",
            *["-m", spec["marks"], *spec["tests"]],
        ],
        plugins=[judge],
    )
    return judge.status


def fast(modules: list[str], names: list[str] | None, tests: dict[str, list[str]]) -> int:
    """--fast over these modules: mutmut's generator makes their mutants (only theirs), then one
    judge per module (judge_main) runs its named tests against each mutant. names: the mutants to
    judge (a resumed run's), or None for every mutant of the modules. Returns the first non-zero
    exit of the steps, else 0."""
    from mutmut.mutation.data import SourceFileMutationData

    gen = subprocess.run([sys.executable, "-c", GENERATE, ",".join(narrowed(modules))], cwd=ROOT)
    if gen.returncode:
        return gen.returncode
    selection = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"][
        "pytest_add_cli_args_test_selection"
    ]
    marks = selection[selection.index("-m") + 1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for m in modules:
        data = SourceFileMutationData(path=Path(m))
        data.load()
        todo = sorted(
            n
            for n in data.exit_code_by_key
            if names is None or n in names or module_glob(m) in names
        )
        if not todo:
            continue
        spec = ROOT / "mutants" / "fast.json"
        spec.write_text(json.dumps({"module": m, "tests": tests[m], "names": todo, "marks": marks}))
        print(f"--fast {m}: {len(todo)} mutants against {' '.join(tests[m])}", flush=True)
        proc = subprocess.run(
            [sys.executable, "-c", JUDGE, str(Path(__file__).resolve()), str(spec)],
            cwd=ROOT / "mutants",
            env=env,
        )
        if proc.returncode:
            return proc.returncode
    return 0


def covered() -> list[str]:
    """The covered modules, as files: [tool.mutmut] only_mutate in pyproject.toml (globs) expanded
    over the tree. The one list of them, so a module that moves is renamed in pyproject.toml
    only."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    files = {
        str(p.relative_to(ROOT)) for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()
    }
    return sorted(files)


def module_glob(path: str) -> str:
    """mutmut's name pattern for every mutant of one file: stats/within.py -> stats.within.*"""
    return path.removesuffix(".py").replace("/", ".") + ".*"


def changed_since(ref: str) -> list[str]:
    """The covered modules a change touched: files that differ between the merge base of `ref` and
    HEAD and the work tree (committed or not), or are new and untracked."""

    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"error: git {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout.split()

    base = git("merge-base", ref, "HEAD")[0]
    touched = set(git("diff", "--name-only", base)) | set(
        git("ls-files", "--others", "--exclude-standard")
    )
    return [f for f in covered() if f in touched]


def unfinished(modules: list[str]) -> list[str]:
    """What a resumed run (re)tests in these modules: the mutants without a result (a stopped run's
    rest) and the survivors (a test written since may kill them); every mutant of a module that has
    no results yet."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code

    names = []
    for m in modules:
        if not (ROOT / "mutants" / f"{m}.meta").exists():
            names.append(module_glob(m))
            continue
        data = SourceFileMutationData(path=Path(m))
        data.load()
        names += [
            n
            for n, code in data.exit_code_by_key.items()
            if code is None or status_by_exit_code[code] == "survived"
        ]
    return sorted(names)


def equivalents() -> dict[str, dict]:
    if not EQUIVALENT.exists():
        return {}
    return {e["mutant"]: e for e in tomllib.loads(EQUIVALENT.read_text()).get("equivalent", [])}


def mutated_line(diff: str) -> str:
    """The first added line of a mutant's diff, stripped: what an equivalence entry pins."""
    return next(
        (
            ln[1:].strip()
            for ln in diff.splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        ),
        "",
    )


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    lines = diff.splitlines()[2:]
    return (
        [ln[1:].strip() for ln in lines if ln.startswith("-")],
        [ln[1:].strip() for ln in lines if ln.startswith("+")],
    )


def is_text(diff: str) -> bool:
    """A mutant that only rewrites a sentence (a string with a space in it, e.g. a `method`
    description): mutmut's string mutations wrap a literal in XX or change its case. It changes
    words a user reads, not a number, so it is counted apart from the score (a key such as "ci_lo"
    has no space, and its mutants count)."""
    old, new = changed_lines(diff)
    if len(old) != 1 or len(new) != 1:
        return False
    a, b = old[0], new[0]
    for q in ('"', "'"):
        for lit in set(a.split(q)[1::2]):
            if " " in lit and any(
                b == a.replace(f"{q}{lit}{q}", f"{q}{m}{q}", 1)
                for m in (f"XX{lit}XX", lit.lower(), lit.upper())
            ):
                return True
    return False


def entry_path(module: str) -> Path:
    """A module's committed results: results/mutation/<dotted module>.json (tables/aggregate.py ->
    tables.aggregate.json). One file per module, so a run of one module rewrites its file only,
    and two branches that ran different modules merge without a conflict."""
    return RESULTS / (module.removesuffix(".py").replace("/", ".") + ".json")


def outcomes(module: str) -> tuple[Counter, list[dict]]:
    """One module's results under mutants/ (read with mutmut's own readers; run from the
    repository root): (counts by outcome: mutants, killed, and every other outcome as mutmut names
    it, a surviving text mutant as "text"; every mutant not killed: name, outcome, and its diff's
    removed and added lines, what the report shows and an equivalence entry pins)."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    data = SourceFileMutationData(path=Path(module))
    data.load()
    counts: Counter = Counter()
    kept = []
    for name, code in sorted(data.exit_code_by_key.items()):
        status = status_by_exit_code[code]
        counts["mutants"] += 1
        if status in KILLED:
            counts["killed"] += 1
            continue
        old, new = [], []
        if status == "survived":
            diff = get_diff_for_mutant(name, path=Path(module))
            old, new = changed_lines(diff)
            if is_text(diff):
                status = "text"
        counts[status] += 1
        kept.append({"name": name, "outcome": status, "old": old, "new": new})
    return counts, kept


def updated(entry: dict | None, module: str, run: dict, counts: Counter, kept: list) -> dict:
    """A module's entry after a run that judged it: its counts and mutants replaced; its runs
    replaced by this one, or, for a --resume run (it re-judged only some mutants), this one added
    to the earlier runs whose results the entry still holds."""
    runs = (entry or {}).get("runs", []) if run.get("resume") else []
    return {
        "module": module,
        "runs": [*runs, run],
        "counts": dict(sorted(counts.items())),
        "mutants": kept,
    }


def replaces(entry: dict | None, counts: Counter, run: dict) -> bool:
    """Whether a run's results for a module replace its committed entry: not when it judged none
    (a failed run that did not reach the module), nor when it was stopped (non-zero exit) having
    judged fewer mutants than the entry holds (mutants/ lost, a partial rerun would drop results
    already committed)."""
    judged = counts["mutants"] - counts["not checked"]
    if judged == 0:
        return False
    if entry is None or run.get("returncode", 0) == 0:
        return True
    c = entry["counts"]
    return judged >= c.get("mutants", 0) - c.get("not checked", 0)


def record(modules: list[str], run: dict) -> list[str]:
    """Write each module's entry from mutants/ after a run (a module with no result there, e.g.
    one a failed run did not reach, keeps its entry). Returns the modules written."""
    written = []
    RESULTS.mkdir(parents=True, exist_ok=True)
    for m in modules:
        counts, kept = outcomes(m)
        path = entry_path(m)
        entry = json.loads(path.read_text()) if path.exists() else None
        if not replaces(entry, counts, run):
            print(
                f"{m}: this run judged {counts['mutants'] - counts['not checked']} mutant(s), "
                "a stopped run fewer than its committed entry holds: the entry is kept (go on "
                f"with --resume --module {m})"
            )
            continue
        path.write_text(json.dumps(updated(entry, m, run, counts, kept), indent=1) + "\n")
        written.append(m)
    return written


def entries() -> dict[str, dict]:
    """Every module's committed entry (results/mutation/*.json), by module path."""
    found = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    return {e["module"]: e for e in found}


def run_key(run: dict) -> tuple:
    """The report's order of runs: by date, then start time (a run since the committed results
    began) or place in the first report (a run before: "seq")."""
    return run["date"], run.get("started", ""), run.get("seq", 0)


def collect(
    found: dict[str, dict],
) -> tuple[dict[str, Counter], list, list, list]:
    """(counts per module, survivors left standing [(module, mutant, old lines, new lines)],
    equivalents [(module, mutant, reason)], surviving text mutants [(module, mutant)]) from the
    committed entries. A survivor is equivalent while tests/mutation_equivalent.toml has an entry
    for it whose line is the mutated line its run recorded, so an entry added since the run counts
    without running again."""
    judged = equivalents()
    counts: dict[str, Counter] = {}
    standing, equivalent, text = [], [], []
    for module in sorted(found):
        e = found[module]
        c = Counter(e["counts"])
        c["equivalent"] = 0
        for mutant in sorted(e["mutants"], key=lambda x: x["name"]):
            name = mutant["name"]
            if mutant["outcome"] == "text":
                text.append((module, name))
            if mutant["outcome"] != "survived":
                continue
            j = judged.get(name)
            if j and mutant["new"] and j.get("line", "").strip() == mutant["new"][0]:
                c["survived"] -= 1
                c["equivalent"] += 1
                equivalent.append((module, name, j["reason"]))
            else:
                standing.append((module, name, mutant["old"], mutant["new"]))
        counts[module] = c
    return counts, standing, equivalent, text


def score(c: Counter) -> float | None:
    judged = c["killed"] + c["survived"]
    return c["killed"] / judged if judged else None


def report(found: dict[str, dict]) -> str:
    """results/mutation.md, from the committed entries alone (and the covered modules' list)."""
    counts, standing, equivalent, text = collect(found)
    runs = sorted(
        {json.dumps(r, sort_keys=True): r for e in found.values() for r in e["runs"]}.values(),
        key=run_key,
    )
    total = sum((c for c in counts.values() if c["mutants"] > c["not checked"]), Counter())
    lines = [
        "# Mutation testing: do the tests fail when a printed number is wrong?",
        "",
        'Regenerate with the runs\' commands below (docs/testing.md, "Mutation testing"), each '
        "of which rewrites the entries of the modules it judged in results/mutation/ (one file per "
        "module), and this report from those entries alone (`python -m tests.mutation --report`): "
        "mutmut mutates the modules that compute what a user reads (pyproject.toml, "
        "`[tool.mutmut]`); each mutant runs the fast tests that call the mutated function: with "
        "mutmut's runner over its whole selection, or, with `--fast`, in a fork of one pytest "
        "session over the tests each run names for the module (a mutant none of them calls counts "
        "as survived). Killed includes mutants stopped by the time limit (an endless loop). "
        "Score = killed / (killed + survived); equivalent mutants (no test can tell them from the "
        "code; tests/mutation_equivalent.toml gives each one's reason), surviving mutants that "
        "only rewrite a sentence (text: a description such as a `method`, not a number) and, "
        "with mutmut's runner, mutants no fast test reaches are left out of it and counted apart; "
        "not run: mutants a stopped run did not reach (no result either way).",
        "",
    ]
    for run in runs:  # a full run, or one per --module / --since run whose results the table holds
        lines += [
            f"- run: {run['date']}, commit {run['commit']}, mutmut {run['mutmut']}, "
            f"`{run['command']}`",
            f"- machine: {run['machine']}; load average before {run['load_before']}, after "
            f"{run['load_after']}",
            f"- wall time: {run['wall_s'] / 60:.1f} min (exit code {run['returncode']})",
            *(
                [
                    "- --fast, the tests each module's mutants ran: "
                    + "; ".join(
                        f"`{m}`: {', '.join(t.removeprefix('tests/') for t in ts)}"
                        for m, ts in run["fast_tests"].items()
                    )
                ]
                if run.get("fast_tests")
                else []
            ),
            *(f"- {note}" for note in run.get("notes", [])),
        ]
    lines += [""] if runs else []
    lines += [
        "| module | mutants | killed | survived | equivalent | text | no tests | not run | other | "
        "score |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, c: Counter) -> str:
        other = (
            c["mutants"]
            - c["killed"]
            - c["survived"]
            - c["equivalent"]
            - c["text"]
            - c["no tests"]
            - c["not checked"]
        )
        s = score(c)
        return (
            f"| {name} | {c['mutants']} | {c['killed']} | {c['survived']} | {c['equivalent']} | "
            f"{c['text']} | "
            f"{c['no tests']} | {c['not checked']} | "
            f"{other} | {'–' if s is None else f'{s:.1%}'} |"
        )

    ran = {m for m in counts if counts[m]["mutants"] > counts[m]["not checked"]}
    lines += [row(f"`{m}`", counts[m]) for m in sorted(ran)]
    lines.append(row("**all**", total))
    waiting = [m for m in covered() if m not in ran]
    untested = [m for m in waiting if not has_fast_tests(m)]
    if waiting:
        lines += [
            "",
            "Covered but not run yet (no entry under results/mutation/):",
            *(
                [
                    "- no targeted tests yet, so --fast has nothing to run their mutants against "
                    "(a module's kill file, tests/test_mutation_kill_<stem>.py, or FAST_TESTS in "
                    "tests/mutation.py): " + ", ".join(f"`{m}`" for m in untested) + "."
                ]
                if untested
                else []
            ),
            *(
                [
                    "- targeted tests exist, not run yet (`python -m tests.mutation --fast "
                    "--module <path>`): "
                    + ", ".join(f"`{m}`" for m in waiting if m not in untested)
                    + "."
                ]
                if len(untested) < len(waiting)
                else []
            ),
        ]
    s = score(total)
    lines += [
        "",
        f"Goal: >= {GOAL:.0%} of the non-equivalent mutants killed: "
        + ("no mutant judged" if s is None else f"{s:.1%}, {'met' if s >= GOAL else 'NOT MET'}")
        + (
            f" over the modules run; not yet shown for the {len(waiting)} covered modules not run, "
            "nor for "
            f"{total['not checked']} mutant(s) a stopped run did not reach"
            if waiting or total["not checked"]
            else ""
        )
        + ".",
        "",
    ]
    short = [m for m in sorted(ran) if score(counts[m]) is not None and score(counts[m]) < GOAL]
    lines += [  # the goal holds in each module, not over their sum
        f"In each module: met in {len(ran) - len(short)} of the {len(ran)} modules run"
        + (
            "; NOT MET in "
            + ", ".join(f"`{m}` ({score(counts[m]):.1%})" for m in short)
            + " (their survivors are listed below)"
            if short
            else ""
        )
        + ".",
        "",
    ]
    lines += [
        "## Survivors left standing",
        "",
        "Each is a change no fast test notices: a missing test (write one that checks the number "
        "by another "
        "route), or an equivalent mutant (add it to tests/mutation_equivalent.toml with the "
        "reason).",
        "",
    ]
    for _module, name, old, new in standing:
        lines.append(f"- `{name}`: `{' '.join(old)[:200]}` -> `{' '.join(new)[:200]}`")
    lines += ["", "## Judged equivalent", ""]
    lines += [f"- `{name}`: {reason}" for _, name, reason in equivalent] or ["(none)"]
    lines += ["", "## Text: surviving mutants that only rewrite a sentence", ""]
    lines += [f"- `{name}`" for _, name in text] or ["(none)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.mutation", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--report",
        action="store_true",
        help="only write the report from the committed results (results/mutation/), no run",
    )
    ap.add_argument(
        "--children", type=int, default=2, help="parallel mutant workers (default 2: the 2 cores)"
    )
    ap.add_argument(
        "--since",
        metavar="REF",
        help="only the covered modules changed since REF's merge base (e.g. main): the check "
        "before a "
        "submission",
    )
    ap.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="PATH",
        help="only this covered module (a path as in only_mutate's expansion; repeatable)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="go on with a stopped run: only the mutants (of the named modules, or of all) without "
        "a result "
        "yet, and the survivors, which a test written since may kill; the others keep their result "
        "(without "
        "it, naming a module re-tests all of its mutants)",
    )
    ap.add_argument(
        "--note",
        action="append",
        default=[],
        help="a line the report keeps under the run (e.g. a rerun of the survivors after new "
        "tests)",
    )
    ap.add_argument(
        "--fast",
        action="store_true",
        help="judge the mutants in forks of one pytest session per module over its named tests "
        "(FAST_TESTS, else tests/test_mutation_kill_<stem>.py), not with mutmut's runner",
    )
    ap.add_argument(
        "--tests",
        action="append",
        default=[],
        metavar="PATH",
        help="with --fast: the tests every named module's mutants run (repeatable; a file or node "
        "id), in place of its default",
    )
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    names: list[str] = []
    modules: list[str] = []
    if args.since or args.module:
        unknown = [m for m in args.module if m not in covered()]
        if unknown:
            print(
                f"error: not a covered module: {', '.join(unknown)}; covered (pyproject.toml "
                "[tool.mutmut] "
                f"only_mutate): {', '.join(covered())}",
                file=sys.stderr,
            )
            return 2
        modules = sorted(set(args.module) | set(changed_since(args.since) if args.since else ()))
        if not modules:
            print(f"no covered module changed since {args.since}: nothing to mutate")
            return 0
        names = [module_glob(m) for m in modules]
    if args.resume:
        modules = modules or covered()
        names = unfinished(modules)
        if not names:
            print("every mutant of these modules has a result and none survived: nothing to resume")
            return 0
        print(f"resuming {len(names)} mutant(s) without a result or surviving")
        print(f"mutating {len(modules)} module(s): {', '.join(modules)}")
    if (
        args.fast and not modules
    ):  # every covered module with targeted tests; the report names the rest
        modules = [m for m in covered() if has_fast_tests(m)]
    tests = {m: args.tests or fast_tests(m) for m in modules} if args.fast else {}
    missing = sorted(
        {t for ts in tests.values() for t in ts if not (ROOT / t.split("::")[0]).exists()}
    )
    if missing:
        print(
            f"error: --fast has no tests {', '.join(missing)}: write them (a module's kill file), "
            "name others with --tests, or add the module to FAST_TESTS in tests/mutation.py",
            file=sys.stderr,
        )
        return 2
    if not args.report:
        import importlib.metadata

        nice = os.nice(0)
        command = (
            f"{f'nice -n {nice} ' if nice else ''}python -m tests.mutation"
            f"{'' if args.children == 2 else f' --children {args.children}'}"
            + (f" --since {args.since}" if args.since else "")
            + "".join(f" --module {m}" for m in args.module)
            + (" --resume" if args.resume else "")
            + (" --fast" if args.fast else "")
            + "".join(f" --tests {t}" for t in args.tests)
        )
        command += (
            ""
            if args.fast
            else f" (mutmut run --max-children {args.children}"
            + (
                f" <{len(names)} mutants>)"
                if args.resume
                else f"{''.join(' ' + n for n in names)})"
            )
        )
        load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        started = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S UTC")
        start = time.monotonic()
        # mutmut itself, its only_mutate narrowed to the modules asked for (a partial run generates
        # only their mutants: generating every covered module's takes many minutes on its own)
        if args.fast:
            returncode = fast(modules, names if args.resume else None, tests)
        else:
            returncode = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    NARROWED,
                    ",".join(narrowed(modules)) if names else "",
                    "run",
                    "--max-children",
                    str(args.children),
                    *names,  # named, mutmut (re)tests them even with a result
                ]
            ).returncode
        run = {
            "date": dt.date.today().isoformat(),
            "started": started,
            "commit": commit or "?",
            "mutmut": importlib.metadata.version("mutmut"),
            "command": command,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}",
            "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "wall_s": time.monotonic() - start,
            "returncode": returncode,
        }
        if args.fast:
            run["fast_tests"] = tests
        run["modules"], run["resume"] = modules or covered(), args.resume
        run["notes"] = args.note
        # each module judged gets its entry (results/mutation/), the others keep theirs
        written = record(run["modules"], run)
        print(f"wrote {len(written)} module(s) under {RESULTS.relative_to(ROOT)}")
    elif args.note:  # a note on the latest run, in every entry that holds it
        found = entries()
        latest = max((r for e in found.values() for r in e["runs"]), key=run_key)
        for e in found.values():
            if latest in e["runs"]:
                noted = {**latest, "notes": latest.get("notes", []) + args.note}
                e["runs"][e["runs"].index(latest)] = noted
                entry_path(e["module"]).write_text(json.dumps(e, indent=1) + "\n")
    REPORT.write_text(report(entries()))
    print(f"wrote {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
