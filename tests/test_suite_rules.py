"""Rules the test suite keeps about itself (issue 30), read from the tests' source:
- no assert sits under an `if` that can skip it silently: an `if` whose branch asserts has an `else`
  that asserts too;
- a test with no assert at all (no `assert`, pytest.raises/warns/fail) says in its name that it only
  checks that
  something is "accepted" or "runs";
- a test that starts project processes is marked `subprocess` (or slow): the mutation run leaves
  those out
  (docs/testing.md), and tests/conftest.py fails one that starts ranks or `python train.py`
  unmarked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CHECKS = (
    "raises",
    "warns",
)  # pytest.raises / pytest.warns assert; pytest.fail / skip under an `if` are guards


def _test_functions():
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                yield path.name, node, tree


def _asserts(nodes, checks=CHECKS) -> bool:
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Assert):
                return True
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in checks
            ):
                return True
    return False


def skippable_asserts(fn: ast.FunctionDef) -> list[str]:
    """`if` statements in fn whose body asserts and whose else does not."""
    return [
        f"line {n.lineno}: if {ast.unparse(n.test)}"
        for n in ast.walk(fn)
        if isinstance(n, ast.If) and _asserts(n.body) and not _asserts(n.orelse)
    ]


def checks_nothing(fn: ast.FunctionDef, tree: ast.Module) -> bool:
    """No assert in the test nor in the module's helpers it calls (one level: helpers named in the
    test's body)."""
    helpers = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and not n.name.startswith("test_")
    }
    called = {
        n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    return not _asserts(
        [fn, *(helpers[name] for name in called & helpers.keys())], (*CHECKS, "fail")
    )


def test_no_assert_can_be_skipped_by_an_if():
    found = [
        f"{name}::{fn.name} {where}"
        for name, fn, _ in _test_functions()
        for where in skippable_asserts(fn)
    ]
    assert not found, (
        "asserts an `if` can skip (assert the condition, or give the else its own assert):\n"
        + "\n".join(found)
    )


def test_a_test_without_an_assert_says_accepted_or_runs():
    found = [
        f"{name}::{fn.name}"
        for name, fn, tree in _test_functions()
        if checks_nothing(fn, tree) and not any(w in fn.name for w in ("accepted", "runs", "run_"))
    ]
    assert not found, (
        "tests that assert nothing (add an assert, or name them ..._accepted / ..._runs):\n"
        + "\n".join(found)
    )


def test_the_rules_catch_what_they_name():
    """The two readers above, on code that breaks each rule and on code that keeps it."""
    bad = ast.parse(
        "def test_x(rec):\n    if rec['result']:\n        assert rec['result']['n'] == 2\n"
    ).body[0]
    good = ast.parse(
        "def test_x(rec):\n    if rec['a']:\n        assert 1\n    else:\n        assert 2\n"
    ).body[0]
    assert skippable_asserts(bad) == ["line 2: if rec['result']"] and skippable_asserts(good) == []
    tree = ast.parse(
        "def helper():\n    assert 1\n\ndef test_y():\n    helper()\n\ndef test_z():\n    "
        "print(1)\n"
    )
    assert not checks_nothing(tree.body[1], tree) and checks_nothing(tree.body[2], tree)


@pytest.mark.parametrize("mark", ["subprocess", "slow"])
def test_a_marked_test_may_start_processes(request, mark):
    """tests/conftest.py's guard lets a test that carries either marker start project processes."""
    from tests.conftest import _starts_processes

    request.node.add_marker(mark)
    assert _starts_processes() is None


def test_an_unmarked_test_that_starts_processes_fails():
    from tests.conftest import _starts_processes

    with pytest.raises(pytest.fail.Exception, match="mark it @pytest.mark.subprocess"):
        _starts_processes()


def test_every_test_listed_to_run_alone_exists():
    """tests/conftest.py's ALONE names tests by node id prefix: a renamed test would silently run
    beside another worker's again."""
    from tests.conftest import ALONE

    names = {(f"tests/{file}", node.name) for file, node, _ in _test_functions()}
    for prefix in ALONE:
        file, _, name = prefix.partition("::")
        assert any(f == file and n.startswith(name) for f, n in names), prefix


def test_pytest_n_hands_out_the_alone_tests_first_then_the_longest():
    """conftest.schedule, the order `pytest -n 2` hands its units out in: units with only alone
    tests, then a group holding alone tests (its alone tests first), then the longest by the last
    measured seconds, then the groups with the most tests, then collection order; a group's tests
    stay together."""
    from tests.conftest import known_seconds, schedule

    entries = [
        ("a", None, False),
        ("g1", "g", False),
        ("alone", None, True),
        ("g2", "g", True),
        ("short", None, False),
        ("h1", "h", False),
        ("h2", "h", False),
        ("long", None, False),
    ]
    order = schedule(entries, {"long": 100.0, "short": 5.0})
    assert order == ["alone", "g2", "g1", "long", "short", "h1", "h2", "a"]
    assert schedule(entries, {}, items=list("ABCDEFGH")) == list("CDBFGAEH")
    known = known_seconds()  # the table python -m tests.durations wrote
    assert len(known) == 20 and all(k.startswith("tests/test_") and "::" in k for k in known)
    assert all(s > 0 for s in known.values())
