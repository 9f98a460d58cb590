"""Issue 38: the default run (VGG11, no extra arguments but the link and scale=smoke to keep it
short) behind an emulated link names the link with a saving: its one probe step shows the sync
dominating the step, so the probe takes the 5 more steps an interval needs (diagnose.probe_budget)
instead of asking for probe_steps=6. As root (network namespaces); slow: minutes on 2 cores."""

from __future__ import annotations

import pytest

from tests.conftest import read, run_train
from tests.test_link import link_problem

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.root]

SLOW_LINK = "exposed_comm.slow_link"
# a loaded machine's own finding may rank above the link: it is measured apart (host counters)
LOAD = ("busy_host", "oversubscription.contention")


@pytest.fixture(autouse=True)
def _needs_link():
    if (why := link_problem()) is not None:
        pytest.skip(why)


@pytest.mark.parametrize("link", ["link=1gbe", "link.rate=400mbit"])
def test_the_default_run_names_the_link_with_a_saving(tmp_path, link):
    proc = run_train(["scale=smoke", link, "logger=none"], tmp_path, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read(proc.out_dir)["result"]
    assert result["comm"]["exposed_n"] >= 6, result["comm"].get("method")
    assert "more taken because the exposed communication" in result["comm"]["method"]
    named = [f for f in result["diagnosis"]["findings"] if not f.get("first")]
    rules = [f["rule"] for f in named]
    assert SLOW_LINK in rules, rules
    at = rules.index(SLOW_LINK)
    assert all(r in LOAD for r in rules[:at]), rules
    saving = named[at]["saving"]
    assert saving["fraction"] is not None and saving["fraction"] > 0.1, saving
    assert "too few samples" not in proc.stdout
