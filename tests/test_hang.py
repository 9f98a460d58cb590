"""Issue 40, the fast tier: the hang rules (diagnosis/hang.py) on committed Flight Recorder dumps,
written by real 2-rank gloo runs of this project (tests/fixtures/hang/<case>: fault.hang=<case>) and
by a plain PyTorch job with no code of this project (tests/fixtures/hang/torch_skip, from
tests/hang_torch_job.py); the bad input; the threshold."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from diagnosis.__main__ import main as diagnosis_main
from diagnosis.hang import diagnose_dir, is_dump_dir
from launchers.hang import after_s

FIX = Path(__file__).parent / "fixtures" / "hang"

# case -> (the injected rank, its class, words the headline says)
CASES = {
    "data_sleep": (
        1,
        "data/I/O wait",
        ["rank 1 never entered all_reduce", "tasks/train/faults.py"],
    ),
    "skip_allreduce": (
        1,
        "different code path",
        ["rank 1 never entered all_reduce", "faults.py", "— different code path"],
    ),
    "extra_barrier": (0, "different code path", ["rank 0 issued barrier", "faults.py"]),
    "kill": (1, "dead rank", ["rank 1 never entered", "— dead rank"]),
    "size_mismatch": (
        1,
        "mismatch",
        ["differs on rank 1", "0 Float where the others have 4 Float"],
    ),
    "pg_order": (
        1,
        "mismatch",
        ["rank 1 never entered all_reduce", "process groups entered in a different order"],
    ),
    "busy": (1, "busy compute", ["rank 1 is in", "faults.py", "— busy compute"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_committed_hang_names_the_rank_its_class_and_the_line(case):
    rank, cls, words = CASES[case]
    v = diagnose_dir(FIX / case)
    assert list(v.culprits) == [rank], v.text()
    assert v.culprits[rank]["class"] == cls, v.text()
    assert v.headline.startswith("hung: "), v.text()
    for w in words:
        assert w in v.headline, v.text()
    assert v.collective["pg"] and v.collective["seq"] > 0 and v.collective["op"]


def test_the_dead_rank_has_no_dump_and_that_is_said_in_one_line():
    v = diagnose_dir(FIX / "kill")
    assert v.problems == [
        "no dump for rank 1 of 2 (dead, or its dump was not collected): treated as a rank that "
        "never arrived"
    ]
    assert v.collective["issued_by"] == [0]


def test_torchs_own_dumps_of_a_plain_pytorch_job_are_read():
    """Dumps written by torch (no code of this project in the job): rank 1 skipped the loss
    all_reduce of step 3. gloo paired its next gradient all_reduce with rank 0's loss all_reduce
    (same size, same sequence number); the call sites in the dumps still tell them apart."""
    v = diagnose_dir(FIX / "torch_skip")
    assert v.problems == []
    assert list(v.culprits) == [1] and v.culprits[1]["class"] == "different code path"
    assert v.collective["op"] == "all_reduce" and v.collective["call_site"].endswith(
        "hang_torch_job.py:36"
    )
    assert "hang_torch_job.py:34 instead of all_reduce from" in v.headline


def test_python_m_diagnosis_reads_a_dump_directory(capsys):
    assert is_dump_dir(FIX / "torch_skip") and not is_dump_dir(FIX)
    assert diagnosis_main([str(FIX / "torch_skip")]) == 0
    out = capsys.readouterr().out
    assert "hung: rank 1 never entered all_reduce #8" in out


def _copy(src: Path, dst: Path, ranks=(0, 1), rename=None) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        for f in [*src.glob(f"rank_{r}"), *src.glob(f"*_{r}.*")]:
            shutil.copy(f, dst / f.name)


def test_dumps_of_two_jobs_are_said_and_still_diagnosed(tmp_path):
    _copy(FIX / "data_sleep", tmp_path, ranks=(0,))
    _copy(FIX / "busy", tmp_path, ranks=(1,))
    v = diagnose_dir(tmp_path)
    assert len(v.problems) == 1 and v.problems[0].startswith("dumps of different jobs mixed in ")
    assert "2 job ids" in v.problems[0] and v.headline


def test_a_dump_of_another_version_is_said_and_still_diagnosed(tmp_path):
    _copy(FIX / "torch_skip", tmp_path)
    d = pickle.loads((tmp_path / "rank_1").read_bytes())
    d["version"] = "9.9"
    (tmp_path / "rank_1").write_bytes(pickle.dumps(d))
    v = diagnose_dir(tmp_path)
    assert len(v.problems) == 1 and v.problems[0].startswith(
        "Flight Recorder dump version 9.9 (ranks 1)"
    )
    assert list(v.culprits) == [1]


def test_a_missing_ranks_dump_is_said_and_what_is_there_diagnosed(tmp_path):
    _copy(FIX / "data_sleep", tmp_path, ranks=(0,))
    v = diagnose_dir(tmp_path)
    assert v.problems[0].startswith("no dump for rank 1 of 2")
    assert v.culprits[1]["class"] == "dead rank"


def test_a_pickle_that_is_not_a_dump_is_not_read(tmp_path):
    (tmp_path / "rank_0").write_bytes(pickle.dumps(Path("/")))  # a global: never unpickled
    assert not is_dump_dir(tmp_path)
    assert diagnose_dir(tmp_path).headline.startswith("no Flight Recorder dump in ")


def test_hang_after_s_floor_step_factor_and_cap():
    hang = {"after_s": None, "min_s": 30, "step_factor": 20}
    assert after_s(hang, 120, None) == 30  # no step yet: the floor
    assert after_s(hang, 120, 0.5) == 30  # 20 x 0.5 s under the floor
    assert after_s(hang, 120, 3.0) == 60  # 20 x 3 s
    assert after_s(hang, 60, 3.0) == 48  # never past 0.8 x timeout_s
    assert after_s({**hang, "after_s": 8}, 60, 0.1) == 8
    assert (
        after_s({**hang, "after_s": 8}, 60, None, stepping=False) == 30
    )  # setting up: never under min_s


def test_no_progress_for_after_s_is_a_hang_and_progress_resets_the_clock():
    """launchers.hang.Quiet, the one detection rule of the local launcher's watch and of the ranks'
    own (torchrun, Slurm): unchanged beats for hang.after_s declare the hang; a finished step or
    collective restarts the clock."""
    from launchers.hang import Quiet

    q = Quiet({"after_s": 8, "min_s": 30}, timeout_s=60)
    beats = {0: {"steps": 1, "collectives": 3}, 1: {"steps": 1, "collectives": 3}}
    assert q.update(beats, 100.0) is None
    beats = {0: {"steps": 2, "collectives": 5}, 1: {"steps": 2, "collectives": 5}}
    assert q.update(beats, 101.0) is None  # a step: the clock starts again
    assert q.update(beats, 108.9) is None
    assert q.update(beats, 109.0) == (8.0, 8.0)
    q.update({0: {"steps": 2, "collectives": 6}, 1: beats[1]}, 109.5)  # one collective more
    assert q.update({0: {"steps": 2, "collectives": 6}, 1: beats[1]}, 117.0) is None


def test_a_rank_showing_new_stacks_is_slow_not_stuck_and_a_loop_or_a_wait_is_stuck():
    """Quiet's third progress signal: a main-thread stack a rank had not shown before (a rank
    importing or building before its first step, on a loaded machine) restarts the clock; the same
    stack (asleep in a wait) or a loop's few stacks (busy) do not, so the hang is declared after_s
    after the last new one."""
    from launchers.hang import Quiet

    q = Quiet({"after_s": 8, "min_s": 8}, timeout_s=60)
    still = {"steps": 0, "collectives": 1, "stack": 7}
    for k in range(40):  # 20 s of new stacks on rank 1, nothing else moving: slow, not stuck
        assert q.update({0: still, 1: {"steps": 0, "collectives": 1, "stack": 100 + k}}, k) is None
    for k in range(40, 80):  # then a loop of two stacks (busy) while rank 0 waits
        found = q.update({0: still, 1: {"steps": 0, "collectives": 1, "stack": 100 + k % 2}}, k)
        if found:
            break
    assert found == (8.0, 8.0) and k == 47  # 8 s after the last new stack (39)


def test_the_main_threads_stack_key_moves_with_its_line_and_stays_on_one():
    from launchers.hang import main_stack_key

    first = main_stack_key()
    second = main_stack_key()
    assert first != second  # another line
    assert len({main_stack_key() for _ in range(3)}) == 1  # one line, one stack


def test_a_rank_killed_is_named_with_its_last_step_and_the_collective_the_others_wait_in(tmp_path):
    """launchers.hang.dead_rank, from the beats the ranks left in the launch directory: the dead
    rank's last periodic beat, and the survivor's last one, written as it ended, with the collective
    it was left in."""
    import json

    from launchers.hang import dead_rank, progress_path

    progress_path(tmp_path, 1).write_text(json.dumps({"pid": 1, "steps": 3, "collectives": 9}))
    waits = "barrier #18 (default group, no tensor, from tasks/train/window.py:86)"
    progress_path(tmp_path, 0).write_text(
        json.dumps({"pid": 2, "steps": 6, "collectives": 17, "pending": [waits], "final": True})
    )
    assert dead_rank(tmp_path, 2, 1) == (
        f"; its last step: 6 (rank 0 finished as many; rank 1's last beat said 3); rank 0 waits in "
        f"{waits}, which rank 1 never joined — a dead rank"
    )
    progress_path(tmp_path, 0).write_text(json.dumps({"steps": 6, "pending": [], "final": True}))
    assert dead_rank(tmp_path, 2, 1).endswith("; rank 0 was in no collective — a dead rank")


def test_a_peer_that_left_is_seen_under_the_signal_that_interrupted_its_error():
    """The launcher's SIGTERM often lands while the rank handles gloo's 'Connection closed by peer':
    the error the rank ends with is then the interruption, the peer's departure its context."""
    from base.interrupt import Interrupted
    from launchers.hang import _peer_left

    try:
        try:
            raise RuntimeError(
                "[gloo/transport/tcp/pair.cc:561] Connection closed by peer [1.2.3.4]:5"
            )
        except RuntimeError:
            raise Interrupted(15)  # noqa: B904 - as a signal handler raises it, context and all
    except Interrupted as e:
        assert _peer_left(e)
    assert not _peer_left(Interrupted(15)) and not _peer_left(ValueError("x"))


def test_the_recorders_cost_table_says_shown_only_when_the_intervals_end_clears_1_percent():
    """diagnosis.hang_benchmark.cost_micro_table: the paired per-round differences' interval, times
    the collectives per step, over the fastest step, plus the beat; and the break-even step per
    collective."""
    from diagnosis.hang_benchmark import cost_micro_table

    off = [10e-6] * 20
    res = {
        "machine": "m",
        "rounds": 20,
        "calls": 2000,
        "blocks": 9,
        "depth": 18,
        "batch": 20,
        "clock": "thread",
        "per_call_s": {"off": off, "on": [x + 2e-6 for x in off]},
        "per_call_process_s": {"off": off, "on": [x + 2e-6 for x in off]},
        "collectives_per_step": 3.4,
        "collectives_from": "x",
        "step_s": 7.61e-3,
        "beat_s": 250e-6,
    }
    text = cost_micro_table(res)
    assert "Recording adds **2.00 us** per collective" in text
    assert "on / off = **0.9986** [0.9986, 0.9986], >= 0.99x shown." in text  # 0.089% + 0.05%
    assert "at least 0.21 ms per collective" in text  # 2 us / (1.0101% - 0.05%)
    res["per_call_s"]["on"] = [x + 25e-6 for x in off]  # 25 us x 3.4 / 7.61 ms = 1.1%
    assert ">= 0.99x not shown." in cost_micro_table(res)
