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
    """What _fork_tests uses of a pytest session: its items, each run by the hook, and the plugin
    manager the fork registers its tally with."""

    def __init__(self, bodies):
        self.plugins = []
        self.ran = []
        self.config = SimpleNamespace(
            pluginmanager=SimpleNamespace(register=lambda p, name: self.plugins.append(p)),
            hook=SimpleNamespace(pytest_runtest_protocol=self._protocol),
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


def test_a_module_judged_again_replaces_its_earlier_runs():
    runs = [
        {"command": "python -m tests.mutation --module a.py --fast"},
        {"command": "python -m tests.mutation --module a.py --module b.py"},
        {"command": "x", "modules": ["b.py"], "resume": True},  # a resumed run adds
        {"command": "x", "modules": ["a.py"], "resume": False},
    ]
    assert mutation.superseded(runs) == runs[1:]
    assert mutation.superseded([*runs, {"command": "x", "modules": ["b.py"]}]) == runs[3:] + [
        {"command": "x", "modules": ["b.py"]}
    ]
