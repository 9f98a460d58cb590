"""world_size ranks on this machine through torch.distributed.launcher.api.elastic_launch, the
launcher behind torchrun: when any rank fails the agent stops the others at once (max_restarts=0),
so a failure ends the job within seconds instead of hanging it.

Nothing of a local run listens beyond loopback: torch's c10d rendezvous would start two stores on
every interface, so the agent gets a rendezvous of one node whose only store listens on `host`
(127.0.0.1; base/store.py). The ranks and this process share a private launch directory (a temp
dir, not the output dir): rank 0 hands its Outcome over through one pickle there whatever happened,
every rank beats there (launchers.heartbeat), and everything else a launch writes (torch elastic's
logs and error files, the ranks' TMPDIR) stays inside it and is removed at the end (a killed
launch's, by the next launch). A signal to this process reaches the agent, which stops the ranks;
it comes out as base.interrupt.Interrupted carrying rank 0's Outcome. With `link=` set, this process
builds and holds the run's emulated network (launchers/link.py) while the ranks run, and the busy
neighbours of fault.busy_cores (launchers/busy.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import multiprocessing.spawn
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

from torch.distributed import PrefixStore
from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    rendezvous_handler_registry,
)
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from launchers.hang import HangWatch, dead_rank, hang_settings
from launchers.heartbeat import Watch, silent_limit
from base.interrupt import Interrupted, note, restored_handlers
from base.store import LOOPBACK, interface_of, is_loopback, serve
from launchers import busy, link

# the one address a plain local run listens on (its rendezvous store; gloo/NCCL's sockets)
LOCAL_HOST = LOOPBACK
RENDEZVOUS = "ddp-comm-one-node"
LAUNCH_PREFIX = "ddp-comm-launch-"
OUTCOME_FILE = "rank0_outcome.pkl"
SHUTDOWN_S = (
    5  # how long the agent waits for the other ranks to exit after a failure before it kills them
)
TIMEOUT_SIGNS = ("timed out", "timeout")
NO_ERROR_FILE = (
    "To enable traceback see"  # torch elastic's message for a rank that left no error file
)


class RankFailed(RuntimeError):
    def __init__(self, rank: int, message: str, traceback: str | None, outcome=None):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.message, self.traceback, self.outcome = rank, message, traceback, outcome


class Hang(RankFailed):
    """The job was declared hung (launchers/hang.py): its record's status is `hung`, its error the
    verdict's line."""

    status = "hung"

    def __init__(self, hung):
        RuntimeError.__init__(self, hung.message)
        self.rank, self.message, self.traceback, self.outcome, self.hung = (
            None,
            hung.message,
            None,
            None,
            hung,
        )


class CannotStart(RankFailed):
    """No rank can start: named before any is spawned."""

    def __init__(self, message: str):
        RuntimeError.__init__(self, f"the ranks cannot start: {message}")
        self.rank, self.message, self.traceback, self.outcome = None, message, None, None


class OneNode(RendezvousHandler):
    """The rendezvous of a local launch: one node, one agent, one store, listening on the launch's
    host only (the c10d backend would start two stores on every interface). The ranks dial it
    through MASTER_ADDR/MASTER_PORT."""

    def __init__(self, params: RendezvousParameters):
        self.host = params.endpoint
        self.run_id = params.run_id
        self.timeout = timedelta(seconds=int(params.get("timeout", 900)))
        self._store = None

    def get_backend(self) -> str:
        return RENDEZVOUS

    @property
    def use_agent_store(self) -> bool:
        return True

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            self._store = serve(self.host, 0, timeout=self.timeout)
        return RendezvousInfo(
            PrefixStore(self.run_id, self._store),
            0,
            1,
            RendezvousStoreInfo(self.host, self._store.port),
        )

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def num_nodes_waiting(self) -> int:
        return 0

    def get_run_id(self) -> str:
        return self.run_id

    def shutdown(self) -> bool:
        self._store = None  # its server stops listening when the last reference goes
        return True


rendezvous_handler_registry.register(RENDEZVOUS, OneNode)


@record
def rank_entry(plain: dict, job: dict):
    if (job.get("link") or {}).get(
        "join"
    ):  # behind an emulated link: into this rank's node before any socket
        from launchers.link import join

        join(job["link"])
    from launchers.rank import RankError, leave_without_teardown, run_rank

    try:
        outcome = run_rank(plain, job, hand_in=lambda o: _hand_in(o, job))
    except RankError as e:
        _hand_in(e.outcome, job)
        if e.outcome.signal:
            _exit_now()
        raise
    except Interrupted:
        _exit_now()
    if outcome is not None:
        _hand_in(outcome, job)
    # done and handed in: native teardown at exit must not turn it into a failed rank
    leave_without_teardown()


def _exit_now() -> None:
    """An interrupted rank, once rank 0 handed in: exit at once. The interpreter's own exit can wait
    for ever on a collective left in flight (the garbage collector frees it and waits for a peer
    that is gone), and a BaseException would print a traceback; the launcher reports the
    interruption itself."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _hand_in(outcome, job: dict) -> None:
    path = Path(job["launch_dir"]) / OUTCOME_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(outcome))
    tmp.replace(path)


def _take(launch_dir: Path):
    path = launch_dir / OUTCOME_FILE
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - none handed in (rank 0 killed): nothing to keep
        return None


def _quiet_torch() -> None:
    """We report the failing rank ourselves, once. torch's elastic loggers each carry their own
    level, so setting the parent's is not enough."""
    prefixes = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")
    for name in [*prefixes, *logging.root.manager.loggerDict]:
        if name.startswith(prefixes):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _shutdown_timeout(seconds: int) -> dict:
    """LaunchConfig's shutdown_timeout, where this torch has it: torch 2.11 (a GPU image's) has no
    such field and refused the whole launch; there the agent waits its own 30 s before it kills the
    other ranks."""
    names = {f.name for f in dataclasses.fields(LaunchConfig)}
    return {"shutdown_timeout": seconds} if "shutdown_timeout" in names else {}


def launch_local(plain: dict, job: dict, host: str = LOCAL_HOST):
    """Rank 0's Outcome. Raises RankFailed naming the rank that failed (or stopped answering) with
    rank 0's Outcome if it has one, CannotStart when no rank could be spawned, or Interrupted when
    this process got SIGINT/SIGTERM. host: the one address the launch listens on (its rendezvous
    store), which the ranks dial."""
    _quiet_torch()
    check_interpreter()
    remove_stale_launch_dirs()
    launch_dir = Path(tempfile.mkdtemp(prefix=f"{LAUNCH_PREFIX}{os.getpid()}-"))
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=int(plain["world_size"]),
        run_id=str(uuid.uuid4()),
        rdzv_backend=RENDEZVOUS,
        rdzv_endpoint=host,
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(
            log_dir=str(launch_dir / "elastic")
        ),  # error files: not a torchelastic_* temp dir
        **_shutdown_timeout(SHUTDOWN_S),
    )
    spec = link.spec_of(plain)
    network = link.Network(spec, int(plain["world_size"])) if spec is not None else None
    # behind an emulated link the ranks serve their own store on node 0's NIC and gloo uses the NIC
    # (link.join)
    undo = [
        torchrun_threads(int(plain["world_size"])),
        sockets_on(host) if network is None else (lambda: None),
        ranks_temp_dir(launch_dir),
    ]
    watch = Watch(launch_dir, silent_limit(plain["timeout_s"]))
    hang = HangWatch(
        launch_dir,
        job["output_dir"],
        hang_settings(plain),
        plain["timeout_s"],
        int(plain["world_size"]),
    )
    try:
        if network is not None:
            network.build()  # LinkError (a ConfigError): nothing started yet
        link_info = (
            network.rank_info()
            if network is not None
            else {"emulated": False, "facts": link.LOOPBACK}
        )
        try:
            with (
                restored_handlers(),
                watch,
                hang,
                temp_files_in(launch_dir),
                busy.neighbours(int(plain["fault"].get("busy_cores") or 0)),
            ):
                elastic_launch(config, rank_entry)(
                    plain, {**job, "launch_dir": str(launch_dir), "link": link_info}
                )
            error = None
        except SignalException as e:
            note(e.sigval)
            error = Interrupted(e.sigval)
        except Interrupted as e:  # before the agent took over the signals
            error = Interrupted(e.signum)
        except ChildFailedError as e:
            error = (
                _failed(e, watch, int(plain["world_size"]))
                if hang.hung is None
                else Hang(hang.hung)
            )
        # the dead agent's rendezvous keep-alive timer is stopped by a finalizer: run it in this
        # thread
        gc.collect()
        outcome = _take(launch_dir)
        if outcome is not None and outcome.env:
            outcome.env.setdefault("link", link_info["facts"])
    finally:
        if network is not None:
            # this process's hold on the namespaces; the kernel frees them with the last rank
            network.close()
        for step in undo:
            step()
        shutil.rmtree(launch_dir, ignore_errors=True)
    if error is None:
        return outcome
    error.outcome = outcome
    raise error


def _failed(e: ChildFailedError, watch: Watch, world: int) -> RankFailed:
    """Who is to blame: a rank the heartbeat watch found stuck; else the first rank that failed,
    unless that failure was a timeout waiting for another rank, which the heartbeats then name; rank
    0 in its own words."""
    if watch.stuck is not None:
        return RankFailed(watch.stuck.rank, watch.stuck.message, None)
    rank, failure = e.get_first_failure()
    outcome = _take(watch.directory)
    own = (
        outcome.error.removeprefix("rank 0 failed: ")
        if outcome is not None and outcome.error and not outcome.signal
        else None
    )
    message, traceback = (own, outcome.traceback) if rank == 0 and own else _failure_text(failure)
    if failure.exitcode is not None and failure.exitcode < 0 and not (rank == 0 and own):
        message += dead_rank(
            watch.directory, world, rank
        )  # a rank killed: where it left the others
    if (
        own and own.split(": ", 1)[-1] in message
    ):  # the same error on every rank (a user's script, task=script):
        message = own  # rank 0's own words
        rank, traceback = 0, outcome.traceback
    if any(sign in message.lower() for sign in TIMEOUT_SIGNS):
        laggard = watch.laggard(rank)
        if laggard is not None:
            return RankFailed(
                laggard.rank,
                f"{laggard.message}; rank {rank} timed out waiting for it ({message})",
                traceback,
            )
    return RankFailed(rank, message, traceback)


@contextlib.contextmanager
def temp_files_in(directory: Path):
    """torch.multiprocessing makes one error pickle per rank in the temp dir
    (pytorch-errorfile-*.pickle, never removed): made here, they go with the launch directory."""
    before = tempfile.tempdir
    tempfile.tempdir = str(directory)
    try:
        yield
    finally:
        tempfile.tempdir = before


UNIX_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path, NUL excluded)
MP_SOCKET_TAIL = len("/pymp-12345678/listener-12345678")  # multiprocessing's sockets under a TMPDIR


def ranks_temp_dir(launch_dir: Path):
    """The ranks' TMPDIR is inside the launch directory: what they leave there (multiprocessing's
    pymp-* dirs of a rank killed with its DataLoader workers, or of one ended with os._exit) goes
    with it. Not where that would make multiprocessing's Unix sockets there longer than a socket
    path may be (a deep TMPDIR). Returns the undo."""
    before = os.environ.get("TMPDIR")
    inside = launch_dir / "tmp"
    if len(os.fsencode(inside)) + MP_SOCKET_TAIL > UNIX_PATH_MAX:
        return lambda: None
    inside.mkdir()
    os.environ["TMPDIR"] = str(inside)  # the spawned ranks inherit it

    def undo():
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before

    return undo


def remove_stale_launch_dirs(root: str | None = None) -> list[Path]:
    """Launch directories of this user's launches whose process is gone (killed with SIGKILL:
    nothing cleaned up)."""
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(f"{LAUNCH_PREFIX}*-*"):
        pid = path.name[len(LAUNCH_PREFIX) :].split("-", 1)[0]
        try:
            if (
                not pid.isdigit()
                or path.is_symlink()
                or path.lstat().st_uid != os.getuid()
                or _alive(int(pid))
            ):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_interpreter() -> None:
    """The ranks are spawned with multiprocessing's interpreter: one that cannot execute (or dies at
    once) would only show as "exit code 255" per rank, so it is run once first (~30 ms) and named
    when it fails."""
    exe = os.fsdecode(multiprocessing.spawn.get_executable())
    try:
        proc = subprocess.run([exe, "-c", "pass"], capture_output=True, text=True, timeout=120)
    except OSError as e:
        raise CannotStart(
            f"{exe}: {e.strerror or e} (the Python interpreter that runs the ranks). Start "
            "train.py "
            "with an interpreter that runs here."
        ) from None
    except subprocess.TimeoutExpired:
        return  # a slow machine is not a broken interpreter
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise CannotStart(
            f"{exe} -c pass fails: {why} (exit code {proc.returncode}; the Python interpreter that "
            "runs "
            "the ranks). Start train.py with an interpreter that runs here."
        )


def sockets_on(host: str):
    """With the launch on loopback, gloo's and NCCL's own sockets listen on the loopback interface
    too (they pick the interface the host name resolves to otherwise, which may face the network),
    unless the user chose one (gloo.SOCKET_IFNAME / nccl.SOCKET_IFNAME are applied in the rank, over
    this). Returns the undo."""
    name = interface_of(host) if is_loopback(host) else None
    added = [
        var
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
        if name and var not in os.environ
    ]
    for var in added:
        os.environ[var] = name  # the spawned ranks inherit it

    def undo():
        for var in added:
            os.environ.pop(var, None)

    return undo


def torchrun_threads(nproc: int):
    """torchrun's rule (torch/distributed/run.py): with several ranks per node and OMP_NUM_THREADS
    unset, each rank gets OMP_NUM_THREADS=1. Without it every rank starts one OpenMP thread per
    core; on 2 cores shared by 2 ranks (and anyone else) the spinning threads made a tiny model's
    step 40-140x slower (0.6-0.9 vs 37-86 steps/s, interleaved runs, load average ~15). Returns the
    undo."""
    if "OMP_NUM_THREADS" in os.environ or nproc <= 1:
        return lambda: None
    os.environ["OMP_NUM_THREADS"] = "1"  # the spawned ranks inherit it
    return lambda: os.environ.pop("OMP_NUM_THREADS", None)


def _failure_text(failure) -> tuple[str, str | None]:
    from launchers.rank import worker_error

    msg = failure.message
    if isinstance(msg, dict):
        text = str(msg.get("message", msg))
        return worker_error(text) or text, (msg.get("extraInfo") or {}).get("py_callstack")
    if failure.exitcode is not None and failure.exitcode < 0:
        return f"killed by signal {-failure.exitcode} ({_signal_cause(-failure.exitcode)})", None
    if not msg or NO_ERROR_FILE in str(
        msg
    ):  # no error file: it died before torch's @record could write one
        exe = os.fsdecode(multiprocessing.spawn.get_executable())
        return (
            f"exited with code {failure.exitcode} during start-up, before it could report an error "
            "(its own "
            f"output, if any, is above; {exe} runs the ranks)"
        ), None
    return str(msg), None


def _signal_cause(signum: int) -> str:
    """What a rank's death by this signal most likely means: SIGKILL is the kernel's OOM killer (or
    a kill -9), SIGABRT a native abort (a C++ std::terminate, e.g. "terminate called without an
    active exception" from a thread destroyed while joinable; its stderr above says which), SIGSEGV
    a native crash."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return "unknown signal"
    why = {
        "SIGKILL": "out of memory, or kill -9",
        "SIGABRT": "a native abort: its stderr above says why",
        "SIGSEGV": "a native crash",
    }.get(name)
    return f"{name}: {why}" if why else name
