"""The fault matrix: what a user's bad day leaves behind (docs/failures.md). Each case states what
the user gets: the exit code, the first line, the record's status, and no leftovers (no process of
the run, nothing of the tool in its temp dir), for bad input, faults in runs, W&B, security and
sweeps.

Real runs: 2 gloo ranks, the tiny model, started in their own session (like a shell job), each with
a private TMPDIR that must be empty of the tool's files afterwards. Faults are sent once rank 0
shows the measured window on its progress bar, so the cases do not depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY, train_main

LONG = [
    *TINY,
    "steps=100000",
    "timeout_s=60",
]  # runs until the fault; timeout_s well above every limit below


class Run:
    """`python train.py` in its own session; stderr (rank 0's progress bar) read while it runs."""

    def __init__(
        self,
        args: list[str],
        tmp_path: Path,
        multirun: bool = False,
        timeout_cmd: bool = False,
        env: dict | None = None,
        merge: bool = False,
        tmp: Path | None = None,
    ):
        """merge: stdout into stderr, to see the order of lines across both. tmp: the run's TMPDIR
        (default: a new one of its own)."""
        self.out_dir = tmp_path / ("sweep" if multirun else "run")
        self.err_path, self.out_path = tmp_path / "stderr.txt", tmp_path / "stdout.txt"
        cmd = [
            sys.executable,
            "train.py",
            *(["-m"] if multirun else []),
            *args,
            f"hydra.{'sweep' if multirun else 'run'}.dir={self.out_dir}",
        ]
        if (
            timeout_cmd
        ):  # the signal comes from timeout(1), which forwards it to the command and its group
            cmd = ["timeout", "--preserve-status", "-s", "TERM", "900", *cmd]
        err = self.err_path.open("w")
        # the run's TMPDIR, where what the tool leaves is checked (leftovers()): short, as a user's
        # /tmp is (the ranks' temp dir goes inside the launch dir when Unix socket paths there stay
        # short enough)
        self.own_tmp = tmp is None
        self.tmp = Path(tempfile.mkdtemp(prefix="fault-", dir="/tmp")) if tmp is None else tmp
        env = {**(env or {**os.environ, "WANDB_MODE": "disabled"}), "TMPDIR": str(self.tmp)}
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=err if merge else self.out_path.open("w"),
            stderr=err,
            start_new_session=True,
            env=env,
        )

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_for_measured_step(
        self, n: int = 1, warmup: int = 2, limit: float = 240, since: int = 0
    ) -> None:
        """Until rank 0's bar shows n measured steps done (the bar counts warm-up steps too), in
        stderr past `since`."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            done = [
                int(m) for m in re.findall(r"measured:[^|]*\|[^|]*\| *(\d+)/", self.stderr[since:])
            ]
            if done and max(done) >= warmup + n:
                return
            if self.proc.poll() is not None:
                pytest.fail(
                    f"train.py ended (rc {self.proc.returncode}) before "
                    f"measuring:\n{self.stderr[-3000:]}"
                )
            time.sleep(0.2)
        self.kill()
        pytest.fail(f"no measured step within {limit} s:\n{self.stderr[-3000:]}")

    def wait_for_text(self, text: str, limit: float) -> float:
        """When `text` appeared in stderr (time.monotonic)."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if text in self.stderr:
                return time.monotonic()
            if self.proc.poll() is not None:
                pytest.fail(f"train.py ended without printing {text!r}:\n{self.stderr[-3000:]}")
            time.sleep(0.1)
        pytest.fail(f"no {text!r} within {limit} s:\n{self.stderr[-3000:]}")

    def rank_ended(self, rank: int) -> float:
        """When a rank logged its end in the job log (wall clock)."""
        from datetime import datetime

        for line in (self.out_dir / "train.log").read_text().splitlines():
            if line.startswith("[") and f"[rank {rank}]" in line and f"rank {rank} ended:" in line:
                return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        raise AssertionError(f"rank {rank} logged no end")

    def rank_pid(self, rank: int) -> int:
        """The pid of a local rank: the elastic agent spawns them in rank order, as children of
        train.py."""
        parent = self.proc.pid
        if Path(f"/proc/{parent}/cmdline").read_bytes().startswith(b"timeout"):
            parent = self._children(parent)[0]

        def started(pid: int) -> int:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])

        ranks = sorted(
            (
                pid
                for pid in self._children(parent)
                if b"--multiprocessing-fork" in Path(f"/proc/{pid}/cmdline").read_bytes()
            ),
            key=started,
        )
        return ranks[rank]

    @staticmethod
    def _children(pid: int) -> list[int]:
        return [
            int(p)
            for t in Path(f"/proc/{pid}/task").iterdir()
            for p in (t / "children").read_text().split()
        ]

    def wait(self, limit: float) -> tuple[int, float]:
        """(exit code, seconds from now until the exit)."""
        t = time.monotonic()
        try:
            rc = self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"train.py still running {limit} s after the fault:\n{self.stderr[-3000:]}")
        took = time.monotonic() - t
        print(
            f"[fault] exit {rc} {took:.1f} s after the fault"
        )  # shown with -s: the README's figures
        return rc, took

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def session(self) -> list[int]:
        """The processes of the run's session still alive (train.py, its ranks, their workers)."""
        return session_pids(self.proc.pid)

    def first_error_line(self) -> str:
        return next((ln for ln in self.stderr.splitlines() if ln.startswith("error: ")), "")

    def leftovers(self, limit: float = 15, allow: tuple[str, ...] = ()) -> None:
        """No process of the run outlives it (beyond `limit` s) and its TMPDIR holds nothing of the
        tool or of torch's launcher (ddp-comm-launch-*, torchelastic_*, pytorch-errorfile-*);
        torch's compile caches may stay."""
        end = time.monotonic() + limit
        while self.session() and time.monotonic() < end:
            time.sleep(0.2)
        assert not self.session(), f"processes left: {self.session()}"
        left = [
            p.name for p in self.tmp.iterdir() if not p.name.startswith(("torchinductor_", *allow))
        ]
        assert not left, f"left in TMPDIR: {left}"

    def record(self, sub: str = "") -> dict:
        return json.loads((self.out_dir / sub / "run_record.json").read_text())


@pytest.fixture
def runs():
    started: list[Run] = []
    yield started
    for run in started:  # never leave a rank behind, whatever failed
        if run.proc.poll() is None:
            run.kill()
        if run.own_tmp:
            shutil.rmtree(run.tmp, ignore_errors=True)


def session_pids(sid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def start(runs, *args, **kwargs) -> Run:
    run = Run(*args, **kwargs)
    runs.append(run)
    return run


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "SignalException" not in text, text[-3000:]


# ------------------------------------------------------------------------------------ raising ranks


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_that_raises_is_named_and_ends_the_job_at_once(tmp_path, runs, rank, silent_host):
    """Rank 1's case also logs to a W&B host that accepts connections and never answers (14.13): the
    error line comes before any W&B line, and W&B adds at most its init timeout (it used to add
    ~40-55 s). The one run of this fault class: test_train_runs' in-process copy of it (exit 1, the
    error line, under 60 s, a failed record naming the fault) was merged here, where each of its
    checks is made tighter."""
    args = [*TINY, f"fault.rank={rank}", "fault.step=3", "timeout_s=60"]
    env = None
    if rank == 1:
        args[args.index("logger=none")] = "logger=wandb"
        args.append("logger.init_timeout_s=5")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
        env.update(WANDB_BASE_URL=silent_host, WANDB_API_KEY="k" * 40, HOME=str(tmp_path))
    run = start(runs, args, tmp_path, env=env, merge=True)
    error = f"error: rank {rank} failed: RuntimeError: fault injected on rank {rank} at step 3"
    error_seen = run.wait_for_text(error, limit=240)
    rc, _ = run.wait(limit=120)
    took = time.time() - run.rank_ended(
        rank
    )  # from the fault, as the failing rank logged it, to the exit
    print(f"[fault] rank {rank} raised: exit {took:.1f} s after the fault")
    assert rc == 1 and took < (15 if rank == 0 else 15 + 16), took
    rec = run.record()
    assert rec["status"] == "failed" and rec["error"].startswith(
        f"rank {rank} failed: RuntimeError: fault injected"
    )
    assert "fault injected" in rec["traceback"]
    run.leftovers(allow=("wandb",) if rank == 1 else ())
    if rank == 1:
        output = run.stderr
        assert output.index(error) < output.index("[wandb]"), output[-3000:]
        assert "online start failed" in output  # wandb.init found no answer: offline
        assert (
            time.monotonic() - error_seen < 5 + 10
        )  # W&B's init timeout + its local offline write
    else:  # logger=none: no W&B line at all
        assert "[wandb]" not in run.stderr


# --------------------------------------------------------------------------------- signals to ranks


@pytest.mark.slow
def test_kill_9_on_a_rank_names_it_within_seconds(tmp_path, runs):
    run = start(runs, LONG, tmp_path)
    run.wait_for_measured_step()
    os.kill(run.rank_pid(1), signal.SIGKILL)
    rc, took = run.wait(limit=60)
    assert rc == 1 and took < 15, (took, run.stderr[-2000:])
    rec = run.record()
    assert rec["status"] == "failed" and rec["error"].startswith(
        "rank 1 failed: killed by signal 9"
    )
    assert rec["env"]["world_size"] == 2  # rank 0's outcome (env) survived the failure
    assert run.first_error_line().startswith("error: rank 1 failed: killed by signal 9")
    # the failed rank's error pickle and torch elastic's log dir went with the launch dir
    run.leftovers()


@pytest.mark.slow
def test_a_stopped_rank_is_named_and_the_job_ends_long_before_timeout_s(tmp_path, runs):
    """SIGSTOP on rank 1: the old code blamed rank 0 ("Timed out") after timeout_s + ~30 s."""
    run = start(runs, [*TINY, "steps=100000", "timeout_s=60"], tmp_path)
    run.wait_for_measured_step()
    os.kill(run.rank_pid(1), signal.SIGSTOP)
    rc, took = run.wait(limit=90)
    assert rc == 1 and took < 25, (
        took,
        run.stderr[-2000:],
    )  # heartbeat silence limit: min(10 s, timeout_s / 2)
    rec = run.record()
    assert rec["status"] == "failed"
    assert rec["error"].startswith("rank 1 failed: stopped responding: no heartbeat"), rec["error"]
    assert "stopped (SIGSTOP?)" in rec["error"]
    assert "rank 1 failed: stopped responding" in run.stderr
    run.leftovers()


# --------------------------------------------------------------------------------------- interrupts


def interrupted(run: Run, signame: str, rc: int, took: float, sub: str = "") -> dict:
    assert rc == 128 + signal.Signals[signame], (rc, run.stderr[-3000:])
    assert took < 20, took
    rec = run.record(sub)
    assert rec["status"] == "interrupted" and rec["result"]["signal"] == signame
    assert rec["result"]["progress"]["warmup_steps_done"] == 2
    assert rec["result"]["progress"]["measured_steps_done"] >= 1  # the steps measured so far
    assert rec["error"].startswith(f"interrupted by {signame} after ")
    no_traceback(run.stderr)
    run.leftovers()
    return rec


@pytest.mark.slow
def test_sigterm_from_timeout_leaves_an_interrupted_record_and_one_line(tmp_path, runs):
    run = start(runs, LONG, tmp_path, timeout_cmd=True)
    run.wait_for_measured_step()
    os.kill(
        run.proc.pid, signal.SIGTERM
    )  # what timeout(1) does when its time is up: it forwards SIGTERM
    rc, took = run.wait(limit=60)
    interrupted(run, "SIGTERM", rc, took)
    lines = [ln for ln in run.stderr.splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and lines[0].endswith(
        f"interrupted run record: {run.out_dir / 'run_record.json'}"
    )


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_leaves_an_interrupted_record(tmp_path, runs):
    run = start(runs, LONG, tmp_path)
    run.wait_for_measured_step()
    os.killpg(
        run.proc.pid, signal.SIGINT
    )  # what Ctrl-C in a terminal does: every process of the job gets it
    rc, took = run.wait(limit=60)
    interrupted(run, "SIGINT", rc, took)
    assert (
        "interrupted by SIGINT" in (run.out_dir / "train.log").read_text()
    )  # the job log holds the console line


@pytest.mark.slow
def test_ctrl_c_during_a_sweep_stops_it_and_writes_the_rows_it_has(tmp_path, runs):
    """Job 0 finishes, job 1 is interrupted, job 2 never starts; the table has rows 0 and 1."""
    run = start(runs, [*TINY, "steps=3,100000,3", "timeout_s=60"], tmp_path, multirun=True)
    deadline = time.monotonic() + 300
    while not (run.out_dir / "0" / "run_record.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    run.wait_for_measured_step(since=len(run.stderr))
    os.killpg(run.proc.pid, signal.SIGINT)
    rc, took = run.wait(limit=90)
    interrupted(run, "SIGINT", rc, took, sub="1")
    assert run.record("0")["status"] == "ok"
    assert not (run.out_dir / "2").exists()  # the sweep stopped
    table = (run.out_dir / "sweep_table.md").read_text()
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "steps=" in ln]
    assert len(rows) == 2 and "| ok" in rows[0] and "| interrupted" in rows[1], table
    assert "[sweep] interrupted by SIGINT: stopped after 2 job(s)" in run.stderr


# --------------------------------------------------------------------------------- where records go


def test_a_record_is_readable_by_the_group_as_the_umask_says(tmp_path):
    """Issue 13: records were created 0600 (mkstemp), so teammates on shared storage could not read
    them."""
    from base.record import Record

    old = os.umask(0o002)
    try:
        path = Record.failed({"task": "train"}, {"output_dir": str(tmp_path)}, "x").write(tmp_path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o664


def test_a_record_its_directory_will_not_take_goes_elsewhere_and_says_where(
    tmp_path, monkeypatch, capsys
):
    from job import finalise as fin
    from base.record import Record

    monkeypatch.setattr(
        fin, "fallback_dirs", lambda: [tmp_path / "file" / "no", tmp_path / "elsewhere"]
    )
    (tmp_path / "file").write_text("a file where a directory should be")
    record = Record.failed(
        {"task": "train", "logger": {"name": "none"}}, {"output_dir": "x"}, "rank 1 failed: boom"
    )
    path = fin.finalise(record, tmp_path / "file" / "run")
    assert (
        path.parent.parent == tmp_path / "elsewhere"
        and json.loads(path.read_text())["error"] == record.error
    )
    err = capsys.readouterr().err
    assert (
        f"cannot write the run record to {tmp_path / 'file' / 'run'}" in err
        and f"saved it to {path}" in err
    )


def test_a_directory_another_run_claimed_is_not_shared(tmp_path):
    from job.output_dir import claim

    base = tmp_path / "12-00-00"
    assert [claim(base), claim(base), claim(base)] == [
        base,
        tmp_path / "12-00-00_1",
        tmp_path / "12-00-00_2",
    ]
    assert claim("/proc/x") is None


@pytest.mark.slow
def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path):
    """Issue 13/14.4 (hydra#1607): another run already has this second's directory (made here for
    every second of the next few minutes); a run and a sweep with the default paths take `<time>_1`
    instead of writing into it. The run is a one-rank tiny run; bad input makes the sweep quick (a
    refused job of a sweep still writes its failed record, its row; a refused single run leaves
    nothing, issue 19.10)."""
    from datetime import datetime, timedelta

    now = datetime.now()
    taken = [now + timedelta(seconds=s) for s in range(-5, 300)]
    for kind in ("outputs", "multirun"):
        for t in taken:
            (tmp_path / kind / t.strftime("%Y-%m-%d") / t.strftime("%H-%M-%S")).mkdir(
                parents=True, exist_ok=True
            )
    cmd = [sys.executable, str(ROOT / "train.py"), "logger=none"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    quick = [*TINY, "world_size=1", "sync=local", "probe_steps=0", "diagnose.microbench=false"]
    procs = [
        subprocess.Popen(
            c, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for c in ([*cmd, *quick], [*cmd[:2], "-m", *cmd[2:], "bucket=-1"])
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 1], outs
    (run,) = [p.parent for p in tmp_path.glob("outputs/*/*/run_record.json")]
    (sweep,) = [p.parent.parent for p in tmp_path.glob("multirun/*/*/0/run_record.json")]
    assert run.name.endswith("_1") and sweep.name.endswith("_1"), (run, sweep)
    assert (
        sweep / "sweep_table.md"
    ).is_file() and f"this one writes to {sweep.relative_to(tmp_path)}" in outs[1][0]
    assert f"run record: {run}/run_record.json" in outs[0][0]


def test_an_unwritable_output_dir_is_one_line_and_exit_2_before_anything_runs(tmp_path):
    """Through train.py's main() in this process (train_main): refused before any job runs, where a
    `python train.py` start cost ~1 CPU s a case (issue 36)."""
    for multirun in (False, True):
        proc = train_main(TINY, tmp_path, multirun, out=Path("/proc/x"))
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "error: cannot write to the output directory /proc/x"
        ), lines
        assert "warm-up" not in proc.stderr


@pytest.mark.slow
def test_nan_data_and_an_output_dir_gone_mid_run_still_give_summary_warning_and_record(
    tmp_path, runs
):
    """14.12: a raw folder of NaNs ran to `status: ok` with `loss nan` and no word. 14.5: an output
    dir that cannot be written at the end lost the record after the whole run. Both in one run (CI
    time)."""
    import numpy as np

    from data.make_raw_folder import make_raw_folder

    root = make_raw_folder(tmp_path / "nan", classes=2, files_per_class=4, size=64)
    np.full(3 * 64 * 64, np.nan, dtype=np.float32).tofile(
        root / ".base.bin"
    )  # every sample is a hard link to it
    (tmp_path / "tmp").mkdir()
    run = start(
        runs,
        [
            *TINY,
            "data=raw_folder",
            f"data.root={root}",
            "data.workers=0",
            "steps=10",
            "verbose=true",
        ],
        tmp_path,
        tmp=tmp_path / "tmp",
    )
    run.wait_for_text(
        "warm-up", limit=240
    )  # the ranks run: nothing but the record is written there from now on
    run.out_dir.rename(tmp_path / "moved")
    run.out_dir.write_text("a file where the output directory was")
    rc, _ = run.wait(limit=240)
    assert rc == 0, run.stderr[-3000:]
    assert "throughput" in run.stdout and "loss nan" in run.stdout  # the summary, printed anyway
    assert "warning: the training loss is nan (not finite)" in run.stderr
    (saved,) = (tmp_path / "tmp" / "ddp-comm-records").glob("*/run_record.json")
    assert f"saved it to {saved} instead" in run.stderr
    rec = json.loads(saved.read_text())
    assert rec["status"] == "ok" and rec["result"]["warnings"][0].startswith(
        "the training loss is nan"
    )


# -------------------------------------------------------------------------------- blame, from beats


def test_a_timeout_is_blamed_on_the_rank_that_went_silent_or_fell_behind(tmp_path):
    from launchers.heartbeat import Watch, beat_path

    def beat(rank, age, **progress):
        beat_path(tmp_path, rank).write_text(
            json.dumps({"pid": 1, "time": time.time() - age, **progress})
        )

    watch = Watch(tmp_path, silent_s=10)
    beat(0, 0, done=True, warmup_steps_done=2, measured_steps_done=3)
    beat(1, 0, done=True, warmup_steps_done=2, measured_steps_done=3)
    beat(2, 0, done=True, warmup_steps_done=2, measured_steps_done=1)
    assert watch.laggard(0).rank == 2 and "after measured step 1" in watch.laggard(0).message
    beat(3, 30, warmup_steps_done=2, measured_steps_done=3)
    assert watch.laggard(0).rank == 3 and "silent for 30 s" in watch.laggard(0).message
    beat(2, 0, done=True, warmup_steps_done=2, measured_steps_done=3)
    beat(3, 0, done=True, warmup_steps_done=2, measured_steps_done=3)
    assert watch.laggard(0) is None  # nobody to blame but the rank that timed out


@pytest.mark.subprocess
def test_the_watch_blames_one_silent_rank_among_beating_ones_and_never_a_stopped_job(tmp_path):
    """Ctrl-Z (SIGTSTP to the whole job) then `fg` must not get a rank killed; a lone silent rank
    must."""
    from launchers.heartbeat import Watch, beat_path

    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:

        def beat(rank, age):
            beat_path(tmp_path, rank).write_text(
                json.dumps({"pid": sleepers[rank].pid, "time": time.time() - age})
            )

        beat(0, 30)
        beat(1, 30)
        with Watch(tmp_path, silent_s=3) as watch:
            time.sleep(2)
        assert (
            watch.stuck is None and sleepers[0].poll() is None
        )  # everyone silent: the job was stopped
        beat(0, 0)
        with Watch(tmp_path, silent_s=3) as watch:
            for _ in range(20):
                beat(0, 0)
                if watch.stuck is not None:
                    break
                time.sleep(0.25)
        assert (
            watch.stuck is not None
            and watch.stuck.rank == 1
            and "no heartbeat for 3" in watch.stuck.message
        )
        assert sleepers[1].wait(timeout=5) == -signal.SIGKILL and sleepers[0].poll() is None
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


# ============================================================================== issue 20: the probe
# ---------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["bucket=abc"],
            "bucket=abc: must be a number (got str 'abc'), e.g. bucket=25 or bucket=2.5.",
        ),
        (
            ["measure.max_steps=3", "steps=10"],
            "measure.max_steps=3 < steps=10: measure.policy=fixed measures exactly",
        ),
    ],
)
def test_bad_input_the_probe_found_is_one_line_naming_the_fix(overrides, words):
    from tests.bad_input import refused

    assert words in refused(["model=vgg11_tiny", "scale=smoke", *overrides])


def test_a_fixed_window_longer_than_the_scale_default_cap_is_accepted():
    """The scale's max_steps is a cap for adaptive windows: a fixed window of more steps is what
    steps= asks for."""
    from tests.bad_input import accepted

    assert accepted(["model=vgg11_tiny", "scale=smoke", "steps=100000"])["steps"] == 100000


def as_another_user(fn):
    """("ok", repr(result)) or ("raised", "Type: message") of fn() run without root's right to read
    anything: in a forked child that became `nobody` when this is root, else here."""

    def outcome():
        try:
            return ["ok", repr(fn())]
        except BaseException as e:
            return ["raised", f"{type(e).__name__}: {e}"]

    if os.getuid() != 0:
        return outcome()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(w, json.dumps(outcome()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_an_unreadable_raw_file_is_named_before_any_rank(tmp_path):
    """Issue 20.8: it failed mid-warm-up inside a DataLoader worker, the path and "Permission
    denied" lines below the first. The data check opens every file, as the user the ranks run as."""
    import tempfile

    from data.make_raw_folder import make_raw_folder
    from data.folder import scan

    top = Path(
        tempfile.mkdtemp(prefix="sec20-raw-")
    )  # under /tmp, not pytest's 0700 dir: `nobody` must get in
    try:
        top.chmod(0o755)
        root = make_raw_folder(top / "raw", classes=2, files_per_class=2, size=8, copy=True)
        victim = root / "class_0001" / "000001.raw"
        victim.chmod(0)
        status, text = as_another_user(lambda: len(scan(root, 8)))
    finally:
        import shutil

        shutil.rmtree(top, ignore_errors=True)
    assert status == "raised" and text.startswith(
        f"ConfigError: {victim} cannot be read (Permission denied)"
    ), text
    assert "chmod a+r" in text


def test_a_raw_file_that_goes_missing_mid_run_is_named_in_the_first_line(tmp_path):
    """The same failure after the check (the file removed or made unreadable during the run): the
    first line of the rank's error is the worker's own, with the path, not "Caught RuntimeError in
    DataLoader worker process 0."."""
    from torch.utils.data import DataLoader

    from launchers.rank import first_line
    from data.make_raw_folder import make_raw_folder
    from data.raw_folder import RawFolder

    root = make_raw_folder(tmp_path / "raw", classes=1, files_per_class=2, size=8, copy=True)
    data = RawFolder(root, 8)
    gone = data.samples[0][0]
    gone.unlink()
    with pytest.raises(Exception) as e:
        next(iter(DataLoader(data, batch_size=1, num_workers=1)))
    line = first_line(e.value)
    assert line.startswith(f"OSError: cannot read {gone}: unable to open file"), line
    assert line.endswith("(in DataLoader worker process 0)") and "\n" not in line
    # a rank other than 0 reports through torch elastic's error file: the same first line
    from types import SimpleNamespace

    from launchers.local import _failure_text

    failure = SimpleNamespace(
        message={"message": f"{type(e.value).__name__}: {e.value}", "extraInfo": {}}, exitcode=1
    )
    assert _failure_text(failure)[0] == line


# ------------------------------------------------------------------------------- ranks not starting


@pytest.mark.parametrize("kind", ["not executable", "dies at start"])
@pytest.mark.subprocess
def test_ranks_that_cannot_start_are_named_in_the_first_line(tmp_path, kind, capfd):
    """Issue 20.7: the only message was torch's "To enable traceback see:
    https://pytorch.org/docs/...", the record had no cause. The interpreter the ranks are spawned
    with is run once before any rank."""
    import multiprocessing

    from tests.conftest import run_inprocess

    exe = tmp_path / "python"
    if kind == "not executable":
        exe.write_text("not a program\n")
        cause = f"{exe}: Permission denied"
    else:
        exe.write_text(
            "#!/bin/sh\necho 'python: error while loading shared libraries: libpython3.so' "
            ">&2\nexit 127\n"
        )
        exe.chmod(0o755)
        cause = "python: error while loading shared libraries: libpython3.so (exit code 127"
    multiprocessing.set_executable(str(exe))
    try:
        rec, code = run_inprocess(TINY, tmp_path, env={"TMPDIR": str(tmp_path)})
    finally:
        multiprocessing.set_executable(sys.executable)
    assert code == 1 and rec["status"] == "failed"
    assert rec["error"].startswith("the ranks cannot start: ") and cause in rec["error"], rec[
        "error"
    ]
    first = next(ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("error: "))
    assert first == f"error: {rec['error']}"
    assert not list(tmp_path.glob("ddp-comm-launch-*"))  # refused before anything was made


def test_a_rank_that_dies_in_start_up_is_reported_with_its_exit_code():
    """A rank that died before torch's @record could write its error file (torch then says only "To
    enable traceback see ...")."""
    from types import SimpleNamespace

    from launchers.local import _failure_text

    failure = SimpleNamespace(
        message="To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        exitcode=1,
    )
    message, traceback = _failure_text(failure)
    assert message.startswith(
        "exited with code 1 during start-up, before it could report an error"
    ), message
    assert "pytorch.org" not in message and traceback is None


def test_a_rank_killed_by_a_signal_is_reported_with_the_signal_and_its_likely_cause():
    """SIGKILL is the OOM killer's (or kill -9); a SIGABRT is a native abort, not memory (it used to
    read "killed by signal 6 (out of memory?)")."""
    from types import SimpleNamespace

    from launchers.local import _failure_text

    def message(exitcode):
        return _failure_text(SimpleNamespace(message="", exitcode=exitcode))[0]

    assert message(-9) == "killed by signal 9 (SIGKILL: out of memory, or kill -9)"
    assert message(-6) == "killed by signal 6 (SIGABRT: a native abort: its stderr above says why)"
    assert "memory" not in message(-6) and message(-11).endswith("(SIGSEGV: a native crash)")


# --------------------------------------------------------------------------------------- full disks


def _tmpfs(path: Path, size: str):
    if os.getuid() != 0:
        pytest.skip("needs root: mounts a tiny tmpfs to fill (a full disk at start)")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled to the last byte (root only; skipped with the reason elsewhere)."""
    disk = tmp_path / "full"
    _tmpfs(disk, "64k")
    try:
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_disk_full_at_start_is_one_line_and_exit_2(tmp_path, full_disk, monkeypatch):
    """Issue 20.5: Hydra's _save_config raised OSError [Errno 28] with a traceback and exit 1, and
    no record anywhere; the directory check had passed, as an empty file fits on a full disk.
    Through train.py's main() in this process (train_main, issue 36); tempfile's cached temp dir
    is dropped so that this TMPDIR is the one a record gone elsewhere would land in."""
    monkeypatch.setattr(tempfile, "tempdir", None)
    for multirun in (False, True):
        proc = train_main(
            TINY,
            tmp_path,
            multirun,
            env={"TMPDIR": str(tmp_path)},
            out=full_disk / ("sweep" if multirun else "run"),
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
        assert (
            lines[0].startswith("error: cannot write to the output directory ")
            and "(No space left on device)" in lines[0]
        ), lines
        assert not list(tmp_path.glob("ddp-comm-*")), "nothing ran, so no record went elsewhere"


@pytest.mark.subprocess
def test_hydra_failing_to_write_its_own_files_is_one_line_and_exit_2(tmp_path):
    """The disk fills (or goes read-only) between the directory check and Hydra's config.yaml:
    Hydra's OSError is one line naming the file and the fix, not a traceback."""
    hook = (
        "import sys, errno, runpy; sys.argv = ['train.py', *sys.argv[1:]]; sys.path.insert(0, "
        f"{str(ROOT)!r})\n"
        "import hydra.core.utils as u\n"
        "def full(cfg, filename, output_dir):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device', str(output_dir / filename))\n"
        "u._save_config = full\n"
        "runpy.run_path('train.py', run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", hook, *TINY, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(
        f"error: cannot write {tmp_path / 'run' / '.hydra' / 'config.yaml'} (No space left on "
        "device): free space there or choose another output directory"
    ), lines


# ---------------------------------------------------------------------------------------- leftovers


@pytest.mark.subprocess
def test_launch_dirs_of_killed_launches_are_removed_by_the_next(tmp_path):
    """Issue 20.11: a launch killed with SIGKILL cannot clean up; the next launch removes its
    directory (by the dead pid in its name), and leaves alone a live launch's and anything else."""
    from launchers.local import LAUNCH_PREFIX, remove_stale_launch_dirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{LAUNCH_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{LAUNCH_PREFIX}{os.getpid()}-def"
    other = tmp_path / f"{LAUNCH_PREFIX}x-ghi"
    for d in (stale, live, other):
        (d / "elastic").mkdir(parents=True)
    assert remove_stale_launch_dirs(str(tmp_path)) == [stale]
    assert not stale.exists() and live.exists() and other.exists()


@pytest.mark.slow
def test_a_killed_parent_leaves_nothing_once_the_next_run_started(tmp_path, runs):
    """SIGKILL on train.py itself: its ranks go too, and its launch directory is removed by the next
    run."""
    run = start(runs, LONG, tmp_path)
    run.wait_for_measured_step()
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait()
    end = time.monotonic() + 60
    while run.session() and time.monotonic() < end:
        time.sleep(0.2)
    assert not run.session(), "the ranks outlived their parent"
    assert list(run.tmp.glob("ddp-comm-launch-*")), (
        "a SIGKILLed launch cannot clean up after itself"
    )
    (tmp_path / "again").mkdir()
    # the next run's launch removes the stale dir before any rank starts: one rank is enough
    again = start(runs, [*TINY, "steps=6", "world_size=1"], tmp_path / "again", tmp=run.tmp)
    assert again.wait(limit=240)[0] == 0, again.stderr[-3000:]
    run.leftovers()


@pytest.mark.slow
def test_a_killed_ranks_dataloader_workers_go_with_it(tmp_path, runs):
    """Issue 20.11: after kill -9 on rank 1 with data.workers>0, its DataLoader worker lived on ~4 s
    (torch's own check of its parent runs every 5 s)."""
    run = start(runs, [*LONG, "data.workers=1"], tmp_path)
    run.wait_for_measured_step()
    rank = run.rank_pid(1)
    workers = Run._children(rank)
    assert workers, "data.workers=1 starts a worker process"
    os.kill(rank, signal.SIGKILL)
    killed = time.monotonic()
    while any(Path(f"/proc/{w}").exists() and w in session_pids(run.proc.pid) for w in workers):
        assert time.monotonic() - killed < 2.5, "the worker outlived its rank"
        time.sleep(0.05)
    rc, _ = run.wait(limit=60)
    assert rc == 1 and run.record()["error"].startswith("rank 1 failed: killed by signal 9")
    run.leftovers()


# ---------------------------------------------------------------------------------------------- W&B


@pytest.mark.slow
def test_wandb_costs_at_most_its_init_timeout_even_at_exit(tmp_path, silent_host):
    """Issue 20.10: with a host that accepts and never answers, an "offline" run's process still
    spent ~11 s at exit: wandb 0.31's OpenTelemetry exit hook POSTs its metrics there (10 s
    timeout), after the online try gave up. Measured from outside the process, from the moment W&B
    starts to the exit."""
    timeout = 5
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from job.finalise import finalise\n"
        "from base.record import Record\n"
        "from tests.records import train_record\n"
        "rec = Record.from_dict(train_record(overrides=['bucket=25'], steps_per_s=2.0, "
        "output_dir=sys.argv[1]))\n"
        f"rec.config['logger'] = {{'_target_': 'results.wandb_log.log_run', 'name': 'wandb', "
        f"'init_timeout_s': {timeout}}}\n"
        "print('W&B starts', flush=True)\n"
        "finalise(rec, sys.argv[1], quiet=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        WANDB_BASE_URL=silent_host, WANDB_API_KEY="k" * 40, HOME=str(tmp_path), TMPDIR=str(tmp_path)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "run")],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith("W&B starts"):
            began = time.monotonic()
            break
    output += proc.stdout.readlines()
    proc.wait(timeout=120)
    took = time.monotonic() - began
    text = "".join(output)
    print(f"[fault] W&B to exit {took:.1f} s (init timeout {timeout} s)")
    assert proc.returncode == 0 and "online start failed" in text and "offline" in text, text[
        -3000:
    ]
    assert took < timeout + 8, (
        took,
        text[-3000:],
    )  # + W&B's local offline write and the interpreter's exit


# ----------------------------------------------------------------------------------------- security


def listening(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP socket in LISTEN state that one of `pids` holds
    (/proc/net/tcp{,6})."""
    import ipaddress
    import socket as sk

    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            raw = b"".join(
                raw[i : i + 4][::-1] for i in range(0, len(raw), 4)
            )  # each 32-bit word in host order
            address = (
                str(ipaddress.ip_address(raw)) if width == 8 else sk.inet_ntop(sk.AF_INET6, raw)
            )
            found.append((address, int(hex_port, 16), inodes[fields[9]]))
    return found


def on_loopback(address: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(address)
    ip = ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip
    return ip.is_loopback


@pytest.mark.slow
def test_a_local_run_listens_on_loopback_only(tmp_path, runs):
    """Issue 20.1: during a local run the launcher's TCPStore and a second store listened on
    *:<port>, every interface, unauthenticated, for the whole run. Every listening socket of the
    run's processes, sampled from start to exit, is on a loopback address."""
    run = start(runs, [*TINY, "steps=6"], tmp_path)
    seen: set[tuple[str, int, int]] = set()
    while run.proc.poll() is None:
        seen |= set(listening(set(run.session())))
        time.sleep(0.1)
    assert run.proc.returncode == 0, run.stderr[-3000:]
    assert any(pid == run.proc.pid for _, _, pid in seen), (
        f"the rendezvous store was never seen: {seen}"
    )
    exposed = sorted(s for s in seen if not on_loopback(s[0]))
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert (
        run.record()["env"]["vars"].get("GLOO_SOCKET_IFNAME") == "lo"
    )  # gloo's own sockets: on loopback too
    run.leftovers()


def test_a_store_the_ranks_make_themselves_listens_on_master_addr_only(monkeypatch):
    """Slurm tasks (no agent) make their store in rank 0: env:// listened on every interface; now on
    the address MASTER_ADDR names."""
    import socket as sk
    from datetime import timedelta

    from omegaconf import OmegaConf

    from device.placement import settle

    with sk.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for var in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", str(port))
    cfg = OmegaConf.create({"device": "cpu", "backend": "gloo", "task": "train"})
    placement, store = settle(
        cfg, rank=0, world_size=1, local_rank=0, local_world=1, timeout=timedelta(seconds=30)
    )
    mine = [s for s in listening({os.getpid()}) if s[1] == port]
    assert placement.backend == "gloo" and mine and all(on_loopback(a) for a, _, _ in mine), mine
    del store


def test_a_multi_node_store_listens_where_master_addr_points():
    from base.store import EVERY_INTERFACE, listen_address

    assert listen_address("127.0.0.1", spans_hosts=False) == "127.0.0.1"
    assert (
        listen_address("localhost", spans_hosts=True) == EVERY_INTERFACE
    )  # loopback name on a multi-host job:
    # nothing better to bind (the job's hosts must reach it), and a warning says so


SECRETS = {"SEC20_PROJECT": "prj-7f3a9c01d2e4", "SEC20_TAG": "tag-5b8e2d4c6a10"}


@pytest.mark.slow
@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_values_from_the_environment_are_written_nowhere(tmp_path, runs, multirun):
    """Issue 20.2: logger.project='${oc.env:WANDB_API_KEY}' put the key into 8 files (record command
    and overrides, train.log's next: lines, wandb_run.json, W&B's .wandb file and debug.log). A run,
    and a one-job sweep (its table, command line and W&B summary run), with W&B offline: every file
    under the run's home, output and temp dirs, and its console, is searched for the values; the
    record keeps the typed text, and its command is shell-quoted (20.3: the `$(...)` in a tag must
    not run when the command is pasted into a shell)."""
    home = tmp_path / "home"
    home.mkdir()
    from tests.conftest import wandb_free_env

    env = {k: v for k, v in {**os.environ, **wandb_free_env(home)}.items() if v is not None}
    env.update(SECRETS, WANDB_MODE="offline")
    typed = [
        "logger=wandb",
        "logger.project=${oc.env:SEC20_PROJECT}",
        "tags=[${oc.env:SEC20_TAG},'$(touch pwned)']",
    ]
    run = start(runs, [*TINY, "steps=6", *typed], tmp_path, multirun=multirun, env=env)
    rc, _ = run.wait(limit=300)
    assert rc == 0, run.stderr[-3000:]
    job = run.out_dir / "0" if multirun else run.out_dir
    assert list((job / "wandb").glob("offline-run-*/*.wandb")), "W&B logged offline"
    files = [p for root in (tmp_path, run.tmp) for p in root.rglob("*") if p.is_file()]
    assert len(files) > 10  # the record, train.log, Hydra's files, W&B's offline run and logs
    for path in files:
        data = path.read_bytes()
        for name, value in SECRETS.items():
            assert value.encode() not in data, f"{name}'s value in {path}"
    for value in SECRETS.values():
        assert value not in run.stdout + run.stderr
    rec = json.loads((job / "run_record.json").read_text())
    # a sweep's job gets its overrides from Hydra's sweeper, which escapes `${` and `:`
    # (`$\{oc.env\:...\}`): the same value to Hydra, and text either way
    assert [o.replace("\\", "") for o in rec["overrides"][-2:]] == typed[1:], rec["overrides"]
    assert shlex.split(rec["command"])[2:] == rec["overrides"]
    assert rec["config"]["logger"]["project"] == "${oc.env:SEC20_PROJECT}"
    assert rec["config"]["tags"] == ["${oc.env:SEC20_TAG}", "$(touch pwned)"]
    assert (
        'wandb sync --project "$SEC20_PROJECT"' in run.stdout
    )  # the upload gets it from the environment
    subprocess.run(
        ["bash", "-c", f"set -- {rec['command']}"], cwd=tmp_path, check=True
    )  # pasted into a shell
    assert not (tmp_path / "pwned").exists()


def test_keys_from_the_environment_are_found_through_references_and_shown_as_typed(monkeypatch):
    """What the record keeps as typed: a key with `${oc.env:...}`, and any key referring to one
    (here two steps away), and the NCCL_/GLOO_ variable the ranks exported from such a key; every
    other key resolved."""
    from omegaconf import OmegaConf

    from base.provenance import as_typed, as_typed_vars, from_environment

    monkeypatch.setenv("SEC20_HCA", "mlx5_secret")
    cfg = OmegaConf.create(
        {
            "a": "${oc.env:SEC20_HCA}",
            "b": "${a}",
            "c": {"d": "x-${b}"},
            "e": "${f}",
            "f": 3,
            "nccl": {"IB_HCA": "${c.d}", "ALGO": None},
            "tags": ["t", "${oc.env:SEC20_HCA,none}"],
        }
    )
    typed = from_environment(cfg)
    assert typed == {
        "a": "${oc.env:SEC20_HCA}",
        "b": "${a}",
        "c.d": "x-${b}",
        "nccl.IB_HCA": "${c.d}",
        "tags.1": "${oc.env:SEC20_HCA,none}",
    }
    shown = as_typed(OmegaConf.to_container(cfg, resolve=True), typed)
    assert (
        "mlx5_secret" not in json.dumps(shown)
        and shown["e"] == 3
        and shown["tags"] == ["t", typed["tags.1"]]
    )
    assert as_typed_vars({"NCCL_IB_HCA": "x-mlx5_secret", "OMP_NUM_THREADS": "1"}, typed) == {
        "NCCL_IB_HCA": "${c.d}",
        "OMP_NUM_THREADS": "1",
    }


@pytest.mark.subprocess
def test_the_recorded_command_is_shell_quoted_as_typed(tmp_path):
    """Issue 20.3: nccl.DEBUG="$(touch x)" was stored bare in the record's command; pasted into a
    shell, it ran."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from job.config import register_resolvers
    from job.run import job_info
    from base.record import Record
    from tests.conftest import CONF

    register_resolvers()
    typed = ['nccl.DEBUG="$(touch pwned)"', "logger=none", "tags=[a b]"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=typed, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)
    HydraConfig.instance().set_config(cfg)
    job = job_info()
    for command in (job["command"], Record.failed({}, {"overrides": typed}, "x").command):
        assert shlex.split(command) == ["python", "train.py", *typed], command
        subprocess.run(["bash", "-c", f"set -- {command}"], cwd=tmp_path, check=True)
    assert not (tmp_path / "pwned").exists()


def test_the_fallback_record_dir_is_private(tmp_path, monkeypatch, capsys):
    """Issue 20.6: $TMPDIR/ddp-comm-records has a predictable name; another user could plant it as a
    symlink to a directory of theirs and collect the records. A planted link or another user's
    directory is not used; one made here is 0700."""
    from job import finalise as fin
    from base.record import Record

    thief = tmp_path / "thief"
    thief.mkdir()
    planted, foreign, fresh = (
        tmp_path / "planted",
        tmp_path / "foreign",
        tmp_path / "fresh" / "records",
    )
    planted.symlink_to(thief)
    foreign.mkdir()
    if os.getuid() == 0:
        os.chown(foreign, 65534, 65534)
    monkeypatch.setattr(fin, "fallback_dirs", lambda: [planted, foreign, fresh])
    (tmp_path / "gone").write_text("a file where the output directory should be")
    record = Record.failed(
        {"task": "train", "logger": {"name": "none"}}, {"output_dir": "x"}, "rank 1 failed: boom"
    )
    path = fin.finalise(record, tmp_path / "gone" / "run")
    assert not any(thief.iterdir()), "the record went through the planted link"
    used = (
        fresh if os.getuid() == 0 else foreign
    )  # without root the "foreign" dir is this user's own
    assert (
        path is not None and path.parent.parent == used and used.stat().st_mode & 0o777 == 0o700
    ), path
    err = capsys.readouterr().err
    assert f"not saving the run record in {planted}: a symbolic link" in err
    if os.getuid() == 0:  # root made "foreign" another user's: refused, and said
        assert not any(foreign.iterdir()) and f"{foreign}: owned by another user (uid 65534)" in err
    else:  # without root it is this user's own: the record is there, nothing refused
        assert any(foreign.iterdir()) and "owned by another user" not in err


# ------------------------------------------------------------------------------------------- sweeps


SWEEP_APP = """
import sys
sys.path.insert(0, {repo!r})
import hydra
from hydra.core.hydra_config import HydraConfig
from tests.records import train_record, write_record

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    hc = HydraConfig.get()
    rec = train_record(overrides=list(hc.overrides.task), bucket=cfg.bucket, steps_per_s=2.0,
                       num=hc.job.num, sweep_dir=hc.sweep.dir, output_dir=hc.runtime.output_dir)
    if cfg.bucket == 13:
        rec.update(status="failed", error="RuntimeError: an old failure")
    write_record(hc.runtime.output_dir, rec)

main()
"""

SWEEP_CONFIG = """
bucket: 25
logger:
  name: none
hydra:
  callbacks:
    output_dir:
      _target_: job.output_dir.OutputDir
    sweep_table:
      _target_: results.callbacks.SweepTable
      plots: false
      wandb: false
"""


@pytest.mark.subprocess
def test_a_reused_sweep_dir_is_moved_aside_and_the_table_has_this_sweeps_jobs_only(tmp_path):
    """Issue 20.4: a 2-job sweep that succeeded, run into a dir holding an older 4-job sweep,
    printed 4 rows, compared stale rows with the new baseline, exited 1 for an old failure, and
    overwrote old records 0 and 1 unsaid."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(SWEEP_CONFIG)
    (tmp_path / "app.py").write_text(SWEEP_APP.format(repo=str(ROOT)))
    sweep = tmp_path / "mine"

    def sweep_of(buckets: str):
        return subprocess.run(
            [sys.executable, "app.py", "-m", f"bucket={buckets}", f"hydra.sweep.dir={sweep}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env=os.environ,
        )

    old = sweep_of("13,25,50,100")
    assert old.returncode == 1 and len(list(sweep.glob("*/run_record.json"))) == 4, old.stderr[
        -2000:
    ]
    new = sweep_of("25,200")
    assert new.returncode == 0, new.stderr[-3000:]
    assert f"[sweep] {sweep} held an earlier sweep: moved it to {sweep}.1" in new.stdout
    rows = [
        ln
        for ln in (sweep / "sweep_table.md").read_text().splitlines()
        if ln.startswith("| ") and "bucket=" in ln
    ]
    assert len(rows) == 2 and "bucket=200" in rows[1], rows
    assert sorted(p.parent.name for p in (tmp_path / "mine.1").glob("*/run_record.json")) == [
        "0",
        "1",
        "2",
        "3",
    ]


def test_a_record_another_sweep_wrote_into_the_dir_makes_no_row(tmp_path):
    from results.callbacks import sweep_entries
    from tests.records import train_record, write_sweep

    records = [train_record(overrides=[f"bucket={b}"], steps_per_s=2.0) for b in (25, 100, 200)]
    for record, sweep_id in zip(records, ("this", "this", "another")):
        record["job"]["sweep_id"] = sweep_id
    write_sweep(tmp_path, records)
    assert [e.num for e in sweep_entries(tmp_path, sweep_id="this")] == [0, 1]
    assert (
        len(sweep_entries(tmp_path)) == 3
    )  # a reader that does not know the sweep (report) reads them all


@pytest.mark.parametrize(
    "arguments",
    [
        ["optim=bf16,powersgd", "bucket=25,100,2000", "model=vgg11_tiny"],
        ["repeat=range(0,3)", "bucket=25,100", "bucket=7,8", "seed=1"],
        ["experiment=scaling", "world_size=1,2", "+x=choice(a,b)"],
    ],
)
def test_the_sweeps_jobs_are_hydras_own(arguments):
    """The job list (numbering) comes from Hydra's public override parser, in the order Hydra's
    basic sweeper makes."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # the reference only
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from results.callbacks import product_of

    parsed = OverridesParser.create().parse_overrides(arguments)
    assert product_of(arguments) == [
        list(j) for b in BasicSweeper.split_arguments(parsed, None) for j in b
    ]


def test_an_interrupted_job_is_interrupted_in_the_table():
    """Issue 20.9: its record said `interrupted`, the table said `failed`."""
    from tables.table import Entry, build_table
    from tests.records import train_record

    ok = train_record(overrides=["bucket=25"], steps_per_s=2.0, num=0)
    stopped = train_record(
        overrides=["bucket=100"],
        steps_per_s=2.0,
        num=1,
        status="interrupted",
        error="interrupted by SIGINT after 3 of 100000 measured steps",
    )
    table = build_table([Entry.from_record(r) for r in (ok, stopped)])
    assert [r["status"] for r in table.rows] == ["ok", "interrupted"]
