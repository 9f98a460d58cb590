"""Issue 38: the default run (VGG11, no extra arguments but the link and scale=smoke to keep it
short) behind an emulated link names the link with a saving: its one probe step shows the sync
dominating the step, so the probe takes the 5 more steps an interval needs (diagnose.probe_budget)
instead of asking for probe_steps=6. As root (network namespaces); slow: minutes on 2 cores."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import read, run_train
from tests.test_link import link_problem

RUNS = Path(__file__).resolve().parents[1] / "results" / "runs" / "link_default_quiet"

SLOW_LINK = "exposed_comm.slow_link"
# a loaded machine's own finding may rank above the link: it is measured apart (host counters)
LOAD = ("busy_host", "oversubscription.contention")


def _names_the_link(result: dict, stdout: str) -> None:
    assert result["comm"]["exposed_n"] >= 6, result["comm"].get("method")
    assert "more taken because the exposed communication" in result["comm"]["method"]
    named = [f for f in result["diagnosis"]["findings"] if not f.get("first")]
    rules = [f["rule"] for f in named]
    assert SLOW_LINK in rules, rules
    at = rules.index(SLOW_LINK)
    assert all(r in LOAD for r in rules[:at]), rules
    saving = named[at]["saving"]
    assert saving["fraction"] is not None and saving["fraction"] > 0.1, saving
    assert "too few samples" not in stdout


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.root
def test_the_default_run_names_the_link_with_a_saving(tmp_path):
    """Live, behind link.rate=1500mbit; link=1gbe (2 min on the quiet VM) and the slower
    link.rate=400mbit (4.5 min) are the committed records below. The rate is the emulated machine's,
    not the run's: the run keeps every default (VGG11, its probe budget), which is the test's
    point. At 1.5 Gbit/s VGG11's 531 MB a step takes ~2.8 s of link against ~0.8 s of compute, so
    each of the run's ~20 steps is ~1.3 s shorter than at 1gbe. Margins on the loaded VM
    (2026-12-07, load 3.8-5.0): exposed share 63-68% (the probe's extension needs > 15%), the sync
    at 85-87% of the link (slow_link needs >= 50%), saving 31-35% (> 10% asserted); with one core
    hogged by `yes` too, 31.9% [24, 39] and the link still first. At 2 Gbit/s the hogged run's
    saving fell to 11.5% [9, 15]: too near the 10% asserted."""
    if (why := link_problem()) is not None:
        pytest.skip(why)
    proc = run_train(["scale=smoke", "link.rate=1500mbit", "logger=none"], tmp_path, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _names_the_link(read(proc.out_dir)["result"], proc.stdout)


@pytest.mark.parametrize("link", ["1gbe", "400mbit"])
def test_the_committed_default_runs_behind_a_link_name_it_and_so_does_their_rediagnosis(link):
    """The quiet VM's two default runs (results/runs/link_default_quiet/README.md): the record's
    diagnosis, and the diagnosis made again from the record by today's rules."""
    from base.record import Record
    from diagnosis.run import diagnose

    path = RUNS / link / "run_record.json"
    rec = read(path.parent)
    _names_the_link(rec["result"], (path.parent / "train.log").read_text())
    again = dict(rec["result"], diagnosis=diagnose(Record.read(path), hta=False))
    _names_the_link(again, "")
