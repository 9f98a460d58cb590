"""The mutation run's --fast route (tests/mutation.py) counts a mutant killed only when a test that
ran failed under it, or the time limit stopped it: its verdicts, and the fork that reaches them,
on stand-in tests whose outcome is known beforehand (no mutmut, no project process)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from tests import mutation


def test_outcome_as_mutmut_counts_it():
    from mutmut.stats import status_by_exit_code

    def status(*args):
        return status_by_exit_code[mutation.outcome(*args)]

    assert status(0, {"ran": 3, "failed": 1}, False) == "killed"
    assert status(0, {"ran": 1, "failed": 2}, False) == "killed"  # a setup and its call failed
    assert status(0, {"ran": 3, "failed": 0}, False) == "survived"
    assert status(0, {"ran": 0, "failed": 0}, False) == "survived"  # none ran: never killed
    assert status(0, None, True) == "timeout"  # the wall-clock limit
    assert status(-24, None, False) == "timeout"  # SIGXCPU: the CPU-time limit
    assert status(-11, None, False) == "segfault"  # not counted as killed
    assert status(3, None, False) == "killed"  # the fork's own loop broke: mutmut's internal error
    assert mutation.KILLED == ("killed", "timeout", "caught by type check")


class _Session:
    """What _fork_tests uses of a pytest session: its items, each run by the hook, the plugin
    manager the fork registers its tally with, and the options (the fork sets its traceback
    style)."""

    def __init__(self, bodies):
        self.plugins = []
        self.ran = []
        self.config = SimpleNamespace(
            pluginmanager=SimpleNamespace(register=lambda p, name: self.plugins.append(p)),
            hook=SimpleNamespace(pytest_runtest_protocol=self._protocol),
            option=SimpleNamespace(tbstyle="auto"),
        )
        self.items = [
            SimpleNamespace(config=self.config, body=b, nodeid=f"t{i}")
            for i, b in enumerate(bodies)
        ]

    def _protocol(self, item, nextitem):
        try:
            item.body(os.environ["MUTANT_UNDER_TEST"])
            failed = False
        except AssertionError:
            failed = True
        for p in self.plugins:
            p.pytest_runtest_logreport(SimpleNamespace(when="call", failed=failed))


def _passes(mutant):
    assert mutant != "m.x_f__mutmut_1"


def _hangs(mutant):
    if mutant == "m.x_f__mutmut_2":
        time.sleep(60)


def test_fork_verdicts_on_known_tests():
    session = _Session([_passes, _hangs])
    verdict = {
        name: mutation._fork_tests(session, name, cpu_limit_s=60, wall_limit_s=0.5)[0]
        for name in ("", "m.x_f__mutmut_1", "m.x_f__mutmut_2", "m.x_f__mutmut_3")
    }
    assert verdict == {
        "": mutation.EXIT_SURVIVED,  # no mutant: both tests pass
        "m.x_f__mutmut_1": mutation.EXIT_KILLED,  # the first test fails; the loop is never run
        "m.x_f__mutmut_2": mutation.EXIT_TIMEOUT,  # stopped at the wall-clock limit
        "m.x_f__mutmut_3": mutation.EXIT_SURVIVED,
    }
    assert session.plugins == []  # the tally lives in the fork only
    assert mutation._fork_tests(_Session([]), "m.x_f__mutmut_1", 1, 30)[0] == 0  # none ran


def test_fast_tests_named_per_module():
    assert mutation.fast_tests("stats/fmt.py") == ["tests/test_mutation_kill_fmt.py"]
    assert mutation.fast_tests("diagnosis/accounting.py") == ["tests/test_mutation_reach.py"]


def test_a_run_replaces_its_modules_entry_a_resumed_one_adds_its_header():
    first = {"date": "2026-12-01", "command": "a", "resume": False}
    again = {"date": "2026-12-02", "command": "b", "resume": True}
    fresh = {"date": "2026-12-03", "command": "c", "resume": False}
    kept = [{"name": "m.x_f__mutmut_1", "outcome": "survived", "old": ["a"], "new": ["b"]}]
    counts = mutation.Counter(mutants=3, killed=2, survived=1)
    e = mutation.updated(None, "m.py", first, counts, kept)
    assert e["runs"] == [first] and e["counts"] == {"killed": 2, "mutants": 3, "survived": 1}
    e2 = mutation.updated(e, "m.py", again, mutation.Counter(mutants=3, killed=3), [])
    assert e2["runs"] == [first, again] and e2["mutants"] == []
    assert mutation.updated(e2, "m.py", fresh, mutation.Counter(mutants=1), [])["runs"] == [fresh]


def test_a_stopped_run_that_judged_fewer_keeps_the_committed_entry():
    entry = {"counts": {"mutants": 10, "killed": 4, "survived": 2, "not checked": 4}}  # 6 judged
    five = mutation.Counter(mutants=10, killed=5, **{"not checked": 5})
    six = mutation.Counter(mutants=10, killed=6, **{"not checked": 4})
    assert not mutation.replaces(entry, five, {"returncode": -15})
    assert mutation.replaces(entry, six, {"returncode": -15})
    assert mutation.replaces(entry, five, {"returncode": 0})  # a finished run replaces
    assert not mutation.replaces(None, mutation.Counter(mutants=3, **{"not checked": 3}), {})
    assert mutation.replaces(None, five, {"returncode": -15})


def test_an_equivalence_entry_added_after_the_run_counts_without_a_run():
    name, judged = next(iter(mutation.equivalents().items()))
    line = judged["line"].strip()
    entry = {
        "module": "m.py",
        "runs": [],
        "counts": {"mutants": 4, "killed": 1, "survived": 3},
        "mutants": [
            {"name": name, "outcome": "survived", "old": ["x"], "new": [line]},
            {"name": name + "0", "outcome": "survived", "old": ["x"], "new": [line]},
            {"name": name + "1", "outcome": "survived", "old": ["x"], "new": [line + " "]},
        ],
    }
    moved = {  # the same mutant, its run having recorded another line: the entry has lapsed
        "module": "n.py",
        "runs": [],
        "counts": {"mutants": 1, "survived": 1},
        "mutants": [{"name": name, "outcome": "survived", "old": ["x"], "new": [line + "1"]}],
    }
    counts, standing, equivalent, _ = mutation.collect({"m.py": entry, "n.py": moved})
    assert (counts["m.py"]["survived"], counts["m.py"]["equivalent"]) == (2, 1)
    assert (counts["n.py"]["survived"], counts["n.py"]["equivalent"]) == (1, 0)
    assert [n for _, n, _ in equivalent] == [name]
    assert [(m, n) for m, n, _, _ in standing] == [
        ("m.py", name + "0"),
        ("m.py", name + "1"),
        ("n.py", name),
    ]


def test_the_committed_report_is_rendered_from_the_committed_results_alone():
    """results/mutation.md == what `python -m tests.mutation --report` makes from
    results/mutation/*.json (and pyproject's covered modules, the equivalence list): a fresh clone,
    without mutants/, regenerates it byte for byte. Fails when an entry, an equivalence entry or a
    kill file changed and the report was not regenerated."""
    assert mutation.report(mutation.entries()) == mutation.REPORT.read_text()
