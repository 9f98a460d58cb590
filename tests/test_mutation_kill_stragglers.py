"""tasks/train/stragglers.py (issue 36: a module the mutation run covers), where the targeted tests
leave a change unseen: the run-queue wait read from schedstat files (second field, nanoseconds,
summed over the threads; a file that cannot be read is skipped; none read: no figure)."""

from __future__ import annotations

import glob

import pytest

from tasks.train.stragglers import _runqueue_s


def test_runqueue_wait_is_the_second_field_summed(tmp_path):
    (tmp_path / "a.schedstat").write_text("7 2000000000 3\n")
    (tmp_path / "b.schedstat").write_text("5 1000000000 9\n")
    (tmp_path / "c.schedstat").write_text("garbage\n")  # a thread that ended: skipped
    assert _runqueue_s(str(tmp_path / "*.schedstat")) == 3.0
    (tmp_path / "d.schedstat").write_text("1 500000000 1\n")
    assert _runqueue_s(str(tmp_path / "*.schedstat")) == 3.5


def test_runqueue_wait_without_a_readable_file_is_none(tmp_path):
    assert _runqueue_s(str(tmp_path / "*.schedstat")) is None
    (tmp_path / "a.schedstat").write_text("garbage\n")
    assert _runqueue_s(str(tmp_path / "*.schedstat")) is None
    (tmp_path / "b.schedstat").write_text("0 0 0\n")
    assert _runqueue_s(str(tmp_path / "*.schedstat")) == 0.0


@pytest.mark.skipif(not glob.glob("/proc/self/task/*/schedstat"), reason="no schedstat here")
def test_runqueue_wait_of_this_process_by_default():
    assert isinstance(_runqueue_s(), float)


def test_straggler_table_keeps_each_ranks_own_figures():
    """The per-rank rows carry each rank's optimizer, outside-the-phases and run-queue seconds as
    its record gave them (the table prints them side by side)."""
    from tasks.train.stragglers import find_straggler

    def work(ready, optimizer, outside, runqueue):
        return {
            "ready_s": {"median": ready, "ci_lo": ready * 0.9, "ci_hi": ready * 1.1},
            **{"data_s": 0.01, "h2d_s": 0.002, "compute_s": ready - 0.02},
            **{"optimizer_s": optimizer, "outside_s": outside, "runqueue_s": runqueue},
            **{"torch_threads": 4, "cpu_s": 1.5, "involuntary_switches": 7},
        }

    s = find_straggler(
        [
            {"rank": 0, "host": "a", "work": work(0.10, 0.005, 0.003, 0.25)},
            {"rank": 1, "host": "b", "work": work(0.15, 0.008, 0.004, 0.5)},
        ],
        0.2,
    )
    got = [(r.rank, r.optimizer_s, r.outside_s, r.runqueue_s) for r in s.per_rank]
    assert got == [(0, 0.005, 0.003, 0.25), (1, 0.008, 0.004, 0.5)]
