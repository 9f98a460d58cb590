"""A hung job: declared before the collective timeout fires, its evidence collected from every live
rank, then ended.

A rank that never arrives at a collective leaves its peers waiting until timeout_s, and then the
error names the rank that waited. Here the job is declared hung when no rank made progress (a
finished step or collective) for `hang.after_s`, never later than 0.8 x timeout_s; every live rank
writes its evidence into <run dir>/hang/ (the Flight Recorder dump, every thread's stack, its
facts), diagnosis.hang names the cause, and the job ends with the record `hung`. Rank side:
`collecting`, one `with` around a rank's work (every task runs inside it), turns the Flight
Recorder on before the process group exists and starts the thread that beats progress and writes
the evidence when asked (faulthandler: a thread can write the stacks while the main thread is
blocked in a C++ wait). Under torchrun and Slurm no process of ours outlives the ranks, so they
watch each other through the rendezvous store (store_watch). The files and the timings:
docs/failures.md.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import pickle
import signal
import socket
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from base.record import is_peer_failure

BEAT_S = 0.5
REQUEST = "hang.request"
STACK_CPU_S = (
    1.0  # the main thread's CPU share is measured over this long before the stacks are written
)
COLLECT_S = 15.0  # how long the launcher waits for the live ranks' dumps
AFTER_CAP = (
    0.8  # never later than this share of timeout_s: the collective timeout must not fire first
)
DUMP_DIR = "hang"
MAX_DEPTH = 200  # frames of the main thread's stack in its fingerprint
MAX_STACKS = 4096  # fingerprints remembered per rank (then forgotten, and learnt again)


def progress_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"hang.rank{rank}.json"


def steps_done(progress: dict) -> int:
    return int(progress.get("warmup_steps_done") or 0) + int(
        progress.get("measured_steps_done") or 0
    )


def _collectives_done() -> int:
    """Finished collectives over every process group (the Flight Recorder's pg_status; no entries
    copied)."""
    try:
        import torch

        status = (
            pickle.loads(torch._C._distributed_c10d._dump_fr_trace(False, False, False)).get(
                "pg_status"
            )
            or {}
        )
    except Exception:  # noqa: BLE001 - no recorder (off, or no process group yet): steps only
        return 0
    return sum(max(0, int(s.get("last_completed_collective", -1))) for s in status.values())


def pending(failed: bool = False) -> list[str]:
    """This rank's collectives issued and not completed (past each group's last completed one in the
    Flight Recorder), described as the hang diagnosis names them: `all_reduce #17 (default group,
    71.5 KB, from tasks/train/loop.py:74)`. failed: the rank is ending because a collective failed
    when a peer left; gloo marks that collective completed, so it is the newest entry. Read once, at
    a rank's end (its stacks are symbolised then: ~50 ms)."""
    try:
        import torch

        from diagnosis.hang import describe

        fr = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, True, False))
    except Exception:  # noqa: BLE001 - no recorder: nothing to say
        return []
    done = {
        str(pg): int(st.get("last_completed_collective", -1))
        for pg, st in (fr.get("pg_status") or {}).items()
    }
    out = []
    for e in fr.get("entries") or []:
        pg = e.get("pg_id", e.get("process_group", ("",))[0])
        if not e.get("is_p2p") and int(e.get("collective_seq_id", 0)) > done.get(str(pg), -1):
            out.append(describe(e))
    entries = [e for e in fr.get("entries") or [] if not e.get("is_p2p")]
    if not out and failed and entries:
        out.append(describe(max(entries, key=lambda e: e.get("record_id", 0))))
    return out


def _peer_left(e: BaseException | None) -> bool:
    """Whether this error, or one it interrupted (SIGTERM from the launcher while the collective's
    own error was being handled), is a collective's failure because a peer left."""
    seen = 0
    while e is not None and seen < 10:
        if is_peer_failure(str(e)):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def dead_rank(directory: str | Path, world: int, rank: int) -> str:
    """What the local launcher adds to `rank k failed: killed by signal N (...)`: the dead rank's
    last step and the collective each other rank was left in (their last beats, written as they
    ended), with the hang diagnosis's class, e.g. `; its last step: 6 (rank 0 finished 6; rank 1's
    last beat said 3); rank 0 waits in barrier #18 (default group, no tensor, from
    tasks/train/window.py:86), which rank 1 never joined — a dead rank`. The ranks step together
    (every step's gradients are reduced by all), so the steps the others finished are the dead
    rank's last one; its own beat is up to BEAT_S old. The agent sees the death within a fraction of
    a second and ends the job: no hang to wait for, so the status stays `failed`, and this line is
    the diagnosis."""
    beats = {}
    for r in range(world):
        with contextlib.suppress(OSError, ValueError):
            beats[r] = json.loads(progress_path(directory, r).read_text())
    mine, others = beats.get(rank), {r: b for r, b in beats.items() if r != rank and b.get("final")}
    parts = []
    if others:
        r0 = min(others)
        said = f"; rank {rank}'s last beat said {mine.get('steps', 0)}" if mine else ""
        parts.append(
            f"its last step: {others[r0].get('steps', 0)} (rank {r0} finished as many{said})"
        )
    elif mine:
        parts.append(f"its last beat: {mine.get('steps', 0)} steps done")
    for r, b in sorted(others.items()):
        waits = b.get("pending") or []
        parts.append(
            f"rank {r} waits in {waits[0]}, which rank {rank} never joined"
            if waits
            else f"rank {r} was in no collective"
        )
    return "".join(f"; {p}" for p in parts) + " — a dead rank"


def main_stack_key() -> int | None:
    """A fingerprint of the main thread's Python stack (every frame's file and line), sent with each
    beat: a rank that is slow but working (importing, building, a slow step on a loaded machine)
    shows stacks not seen before, while a stuck one shows the same one (asleep in a wait) or the few
    of a loop (busy). CPU time could not tell a slow rank from a spinning one."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    key = []
    while frame is not None and len(key) < MAX_DEPTH:
        key.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return hash(tuple(key)) if key else None


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _thread_cpu_s(tid: int) -> float:
    try:
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _thread_state(tid: int) -> str:
    try:
        return Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def dump(out_dir: Path, rank: int, progress: dict, job_id: str | None) -> None:
    """This rank's evidence into out_dir (see the module docstring)."""
    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    main = threading.main_thread()
    cpu0, t0 = _thread_cpu_s(main.native_id), time.monotonic()
    states = []
    while (
        time.monotonic() - t0 < STACK_CPU_S
    ):  # runnable ('R') or asleep: a machine loaded by others slows a
        states.append(_thread_state(main.native_id))  # busy thread's CPU share, not its state
        time.sleep(STACK_CPU_S / 20)
    share = (_thread_cpu_s(main.native_id) - cpu0) / max(time.monotonic() - t0, 1e-3)
    running = states.count("R") / max(len(states), 1)
    try:
        _write(out_dir / f"rank_{rank}", torch._C._distributed_c10d._dump_fr_trace())
    except Exception as e:  # noqa: BLE001 - no recorder: the stacks still say where the rank is
        (out_dir / f"recorder_error_{rank}.txt").write_text(f"{type(e).__name__}: {e}\n")
    with open(out_dir / f"stacks_{rank}.txt", "w") as f:
        faulthandler.dump_traceback(f, all_threads=True)
    info = {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "job": job_id,
        "main_thread": f"0x{main.ident:016x}",
        "steps_done": steps_done(progress),
        "progress": dict(progress),
        "main_thread_cpu_share": round(share, 3),
        "main_thread_running": round(running, 3),
        "time": time.time(),
        "torch": torch.__version__,
    }
    _write(out_dir / f"facts_{rank}.json", json.dumps(info, indent=1).encode())


@contextlib.contextmanager
def collecting(
    launch_dir: str | None,
    output_dir: str | Path,
    rank: int,
    progress: dict,
    hang: dict | None,
    job_id: str | None = None,
    on_hung=None,
    timeout_s: float = 120.0,
    job_num: int | None = None,
):
    """The rank side (module docstring). No launch directory (torchrun, Slurm): the ranks watch
    themselves through the rendezvous store (store_watch); on_hung(Hung) is rank 0's way to write
    the record there."""
    hang = hang or {}
    buffer = int(hang.get("fr_buffer") or 0)
    if buffer > 0:
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(buffer))
    if not hang.get("enabled", True):
        yield
        return
    if (
        not launch_dir
    ):  # torchrun, Slurm: no process of ours outlives the ranks; they watch themselves
        with store_watch(output_dir, rank, progress, hang, job_id, on_hung, timeout_s, job_num):
            yield
        return
    stop = threading.Event()
    request, mine = Path(launch_dir) / REQUEST, progress_path(launch_dir, rank)

    def loop() -> None:
        dumped = False
        while not stop.wait(BEAT_S):
            try:
                _write(
                    mine,
                    json.dumps(
                        {
                            "pid": os.getpid(),
                            "time": time.time(),
                            "steps": steps_done(progress),
                            "collectives": _collectives_done(),
                            "stack": main_stack_key(),
                        }
                    ).encode(),
                )
                if not dumped and request.exists():
                    dumped = True
                    dump(Path(request.read_text().strip()), rank, progress, job_id)
            except OSError:
                pass  # the launcher removed its directory: the job is over

    thread = threading.Thread(target=loop, name=f"hang-collector-rank{rank}", daemon=True)
    thread.start()
    failed = False
    try:
        yield
    except BaseException as e:
        failed = _peer_left(e)
        raise
    finally:
        stop.set()
        thread.join(timeout=2 * BEAT_S)
        with contextlib.suppress(
            Exception
        ):  # the last beat: where this rank's collectives stood at its end
            _write(
                mine,
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "time": time.time(),
                        "steps": steps_done(progress),
                        "collectives": _collectives_done(),
                        "pending": pending(failed),
                        "final": True,
                    }
                ).encode(),
            )


# ------------------------------------------------------------ torchrun, Slurm: the ranks' own watch

STORE_PREFIX = "ddp_comm/hang"
# a rank whose beat has not changed for this long (rank 0's clock) is not answering: dead or stopped
STALE_S = 3.0
END_WAIT_S = 5.0  # how long rank 0 waits for the other ranks to leave before it leaves
DECLARED = (
    threading.Event()
)  # set in a rank once a hang was declared: its main thread must not end the job itself


def declared() -> bool:
    return DECLARED.is_set()


def park() -> None:
    """For a rank's main thread that came out of a collective after its job was declared hung (a
    peer left): wait for the watch thread, which ends the process once the record is written; a
    record of this thread's own (a 'failed' or 'interrupted' one) would replace the `hung` one. The
    launcher's SIGTERM, sent when a peer leaves, is absorbed here for the same reason."""
    while True:
        try:
            time.sleep(3600)
        except BaseException:  # noqa: BLE001 - an Interrupted from SIGTERM: the watch thread ends us
            continue


def _store(timeout_s: float):
    """A client of its own on the rendezvous store (MASTER_ADDR/MASTER_PORT: torchrun's agent store,
    or rank 0's under Slurm): the main thread's client may be blocked in a wait of its own."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


def _job_key(job_num) -> str:
    """One job's keys, alike on every rank (their output dirs may differ: Hydra's ${now:...} on
    each), apart from another job's (a torchrun process may run a sweep's jobs one after the other
    on one store)."""
    run = (
        os.environ.get("TORCHELASTIC_RUN_ID")
        or os.environ.get("SLURM_JOB_ID")
        or os.environ.get("MASTER_PORT")
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"{STORE_PREFIX}/{run}/{attempt}/{job_num}"


def _leave(code: int = 1) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


@contextlib.contextmanager
def store_watch(output_dir, rank, progress, hang, job_id, on_hung, timeout_s, job_num=None):
    """Every rank beats into the rendezvous store (its steps and finished collectives); rank 0 runs
    the same detection as the local launcher's HangWatch (Quiet) on every rank's beats. A hang: rank
    0 asks for the dumps, every live rank sends its own through the store (the ranks may be on other
    hosts than the run dir), rank 0 writes them into <run dir>/hang/, diagnoses them, writes the
    `hung` record (on_hung) and then tells the others to leave; each rank ends its own process
    (os._exit: its main thread is blocked in a collective or its loader), rank 0 last. torchrun or
    srun then sees ranks exit with code 1 and ends the job."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2 or not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
        yield
        return
    stop = threading.Event()
    key = _job_key(job_num)

    def loop() -> None:
        import torch.distributed as dist

        store, n, requested = None, 0, False
        quiet = Quiet(hang, timeout_s)
        seen: dict[
            int, tuple[int, float]
        ] = {}  # rank -> (its beat number, when it changed: rank 0's clock)
        while not stop.wait(BEAT_S):
            try:
                if store is None:
                    store = dist.PrefixStore(key, _store(min(30.0, float(timeout_s))))
                n += 1
                beat = {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "n": n,
                    "steps": steps_done(progress),
                    "collectives": _collectives_done(),
                    "stack": main_stack_key(),
                }
                store.set(f"p/{rank}", json.dumps(beat))
                if rank != 0:
                    if not requested and store.check(["request"]):
                        requested = True
                        DECLARED.set()
                        store.set(f"d/{rank}", pickle.dumps(_dump_files(rank, progress, job_id)))
                    if requested and store.check(["end"]):
                        store.set(f"left/{rank}", "1")
                        _leave()
                    continue
                beats, now = {}, time.time()
                for r in range(world):
                    if store.check([f"p/{r}"]):
                        beats[r] = json.loads(store.get(f"p/{r}"))
                        if seen.get(r, (None,))[0] != beats[r]["n"]:
                            seen[r] = (beats[r]["n"], now)
                found = quiet.update(beats, now)
                if found is not None:
                    _declare_in_store(
                        store, world, seen, output_dir, progress, job_id, on_hung, *found
                    )
            except Exception:  # noqa: BLE001 - the store is gone (the job ends) or not up yet: try again
                if requested:
                    _leave()  # rank 0 left after writing the record: so does this rank
                store = None

    thread = threading.Thread(target=loop, name=f"hang-watch-rank{rank}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()


def _dump_files(rank: int, progress: dict, job_id) -> dict[str, bytes]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ddp-comm-hang-") as tmp:
        dump(Path(tmp), rank, progress, job_id)
        return {f.name: f.read_bytes() for f in Path(tmp).iterdir() if f.is_file()}


def _declare_in_store(store, world, seen, output_dir, progress, job_id, on_hung, quiet_s, limit):
    """Rank 0's side of a hang under torchrun or Slurm (store_watch); never returns."""
    from diagnosis.hang import diagnose_dir

    DECLARED.set()
    out = Path(output_dir) / DUMP_DIR
    out.mkdir(parents=True, exist_ok=True)
    store.set("request", str(out))
    dump(out, 0, progress, job_id)
    deadline = time.time() + COLLECT_S
    others = set(range(1, world))

    expected = {r for r in others if time.time() - seen.get(r, (None, 0.0))[1] < STALE_S}
    while time.time() < deadline and not store.check([f"d/{r}" for r in expected] or ["request"]):
        time.sleep(0.2)
    got = {0}
    for r in sorted(others):
        if store.check([f"d/{r}"]):
            got.add(r)
            for name, data in pickle.loads(store.get(f"d/{r}")).items():
                _write(out / Path(name).name, data)
    verdict = diagnose_dir(
        out, dead=others - got - expected
    )  # silent before the request: dead or stopped
    text = verdict.text()
    (out / "diagnosis.txt").write_text(text + "\n")
    hung = Hung(
        f"{verdict.headline} (no progress for {quiet_s:.0f} s, hang.after_s={limit:.0f}; dumps: "
        f"{out})",
        str(out),
        limit,
        text,
    )
    try:
        if on_hung is not None:
            on_hung(hung)
    finally:
        store.set("end", "1")
        end = time.time() + END_WAIT_S
        while time.time() < end and not store.check([f"left/{r}" for r in got - {0}] or ["end"]):
            time.sleep(0.1)
        time.sleep(0.2)  # the others' os._exit after their ack
        _leave()


# ------------------------------------------------------------------------------ the launcher's side


def after_s(
    hang: dict, timeout_s: float, median_step_s: float | None, stepping: bool = True
) -> float:
    """No progress for this long is a hang: hang.after_s if set, else max(min_s, step_factor x
    median step); never more than AFTER_CAP x timeout_s. Before the first step (stepping=False:
    building the model and DDP, the loader's first batch, on a machine that may be loaded) never
    less than min_s either."""
    cap = AFTER_CAP * float(timeout_s)
    base = float(hang.get("min_s", 30))
    if hang.get("after_s") is not None:
        return min(float(hang["after_s"]) if stepping else max(float(hang["after_s"]), base), cap)
    if median_step_s:
        base = max(base, float(hang.get("step_factor", 20)) * median_step_s)
    return min(base, cap)


def hang_settings(plain: dict) -> dict:
    """hang.* as the watch applies it, whoever watches (the local launcher, or the ranks under
    torchrun/Slurm): task=script's start-up is the user's code, bounded by its own timeout, so
    before the first step the watch waits at least that long."""
    hang = dict(plain.get("hang") or {})
    if plain.get("task") == "script":
        first = float((plain.get("script") or {}).get("first_step_timeout_s") or 0)
        hang["min_s"] = max(float(hang.get("min_s", 30)), first)
    return hang


class Quiet:
    """When no rank made progress for after_s: update() with the ranks' latest beats ({rank:
    {"steps", "collectives", "stack", ...}}) returns (seconds quiet, the limit) once it is so, else
    None. Progress: a finished step or collective, or a main-thread stack the rank had not shown
    before (main_stack_key): slow is not stuck. A wait shows one stack and a loop its few, so a
    stuck rank stops showing new ones within a few beats."""

    def __init__(self, hang: dict, timeout_s: float):
        self.hang, self.timeout_s = hang, timeout_s
        self.state, self.changed = None, None
        self.step_marks: list[tuple[float, int]] = []
        self.stacks: dict[int, set[int]] = {}

    def _new_stack(self, beats: dict[int, dict]) -> bool:
        new = False
        for r, b in beats.items():
            key = b.get("stack")
            seen = self.stacks.setdefault(r, set())
            if key is None or key in seen:
                continue
            if len(seen) >= MAX_STACKS:
                seen.clear()
            seen.add(key)
            new = True
        return new

    def update(self, beats: dict[int, dict], now: float) -> tuple[float, float] | None:
        if not beats:
            return None
        state = tuple(sorted((r, b.get("steps"), b.get("collectives")) for r, b in beats.items()))
        if self._new_stack(beats) or state != self.state:
            self.state, self.changed = state, now
            s0 = beats.get(0, {}).get("steps")
            if s0 and (not self.step_marks or self.step_marks[-1][1] != s0):
                self.step_marks.append((now, s0))
            return None
        limit = after_s(
            self.hang,
            self.timeout_s,
            _median_step(self.step_marks),
            stepping=bool(self.step_marks),
        )
        return (now - self.changed, limit) if now - self.changed >= limit else None


@dataclass
class Hung:
    message: str  # the one line: diagnosis.hang's headline
    dump_dir: str
    after_s: float
    text: str  # the whole verdict


class HangWatch:
    """A thread of the launcher: reads the ranks' progress files, declares the hang, collects,
    diagnoses and kills the ranks (SIGKILL: the elastic agent then ends the job); `hung` says what
    it found."""

    def __init__(
        self,
        launch_dir: str | Path,
        output_dir: str | Path,
        hang: dict,
        timeout_s: float,
        world: int,
    ):
        self.launch_dir, self.output_dir = Path(launch_dir), Path(output_dir)
        self.hang, self.timeout_s, self.world = hang or {}, float(timeout_s), world
        self.hung: Hung | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hang-watch", daemon=True)

    def __enter__(self) -> "HangWatch":
        if self.hang.get("enabled", True):
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=COLLECT_S + 5)

    def _read(self) -> dict[int, dict]:
        out = {}
        for r in range(self.world):
            try:
                out[r] = json.loads(progress_path(self.launch_dir, r).read_text())
            except (OSError, ValueError):
                continue
        return out

    def _run(self) -> None:
        quiet = Quiet(self.hang, self.timeout_s)
        while not self._stop.wait(BEAT_S):
            beats = self._read()
            found = quiet.update(beats, time.time())
            if found is not None:
                self._declare(beats, *found)
                return

    def _declare(self, beats: dict[int, dict], quiet_s: float, limit: float) -> None:
        from diagnosis.hang import diagnose_dir

        out = self.output_dir / DUMP_DIR
        out.mkdir(parents=True, exist_ok=True)
        _write(self.launch_dir / REQUEST, str(out).encode())
        pids = {r: int(b["pid"]) for r, b in beats.items() if b.get("pid")}
        alive = {r for r, pid in pids.items() if _alive(pid)}
        deadline = time.time() + COLLECT_S
        while time.time() < deadline and not all((out / f"facts_{r}.json").exists() for r in alive):
            time.sleep(0.2)
            alive = {r for r in alive if _alive(pids[r])}
        dead = set(range(self.world)) - alive
        verdict = diagnose_dir(out, dead=dead)
        text = verdict.text()
        (out / "diagnosis.txt").write_text(text + "\n")
        self.hung = Hung(
            f"{verdict.headline} (no progress for {quiet_s:.0f} s, hang.after_s={limit:.0f}; "
            f"dumps: {out})",
            str(out),
            limit,
            text,
        )
        for pid in pids.values():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _median_step(marks: list[tuple[float, int]]) -> float | None:
    per = [(t1 - t0) / (s1 - s0) for (t0, s0), (t1, s1) in zip(marks, marks[1:]) if s1 > s0]
    return statistics.median(per) if per else None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
