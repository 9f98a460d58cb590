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
