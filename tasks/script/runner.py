"""Run the user's script inside this rank as `python script.py args` under torchrun would: as
__main__, its own folder first on sys.path, sys.argv = [script, *args], the working directory left
as the user started train.py in, torchrun's environment already set by whoever started the rank.

The script must import its own packages even where they are named like this project's (`models/`,
`data/`): while it runs, every module of this project is out of sys.modules and the project's folder
off sys.path (Isolation), as they would be under plain torchrun; the instrumentation's few calls
into the project run inside Isolation.ours(), which puts them back for that call only. Everything is
restored when the script ends, whichever way it ends."""

from __future__ import annotations

import argparse
import gc
import os
import runpy
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import tasks
from tasks.script.attach import Attach, Stop

PROJECT_ROOT = Path(tasks.__file__).resolve().parent.parent


class ScriptError(RuntimeError):
    """What went wrong with the script as a whole (not inside it): its first line is the record's
    error, and no traceback of ours follows it."""

    one_line = True


def own_traceback(e: BaseException, path: Path) -> str:
    """The script's traceback from its own first frame on (runpy's and this module's frames left
    out): printed once, as plain python would."""
    import traceback

    tb = e.__traceback__
    while tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve() != path:
        tb = tb.tb_next
    return "".join(
        traceback.format_exception(type(e), e, tb if tb is not None else e.__traceback__)
    )


def project_names(root: Path = PROJECT_ROOT) -> frozenset[str]:
    """The top-level modules this project provides: its packages and its .py files."""
    names = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.stem for p in root.glob("*.py")}
    return frozenset(names)


class Isolation:
    """sys.modules and sys.path as the script would see them alone; ours() gives the project's back
    for a moment."""

    def __init__(
        self, script_dir: Path, names: frozenset[str] | None = None, root: Path = PROJECT_ROOT
    ):
        self.names = names if names is not None else project_names(root)
        self.script_dir, self.root = script_dir, root
        self.saved: dict = {}
        self.path: list[str] = []
        self.lock = threading.RLock()

    def _ours(self, name: str) -> bool:
        return name.partition(".")[0] in self.names

    def _take(self) -> dict:
        return {n: sys.modules.pop(n) for n in [n for n in list(sys.modules) if self._ours(n)]}

    def _project_path(self, entry: str) -> bool:
        try:
            return Path(entry or os.getcwd()).resolve() == self.root
        except OSError:
            return False

    def __enter__(self) -> "Isolation":
        self.saved, self.path = self._take(), sys.path[:]
        sys.path[:] = [str(self.script_dir)] + [
            p
            for p in self.path
            if p and not self._project_path(p) and Path(p).resolve() != self.script_dir
        ]
        return self

    def __exit__(self, *exc) -> None:
        self._take()  # the script's own modules of those names go
        sys.modules.update(self.saved)
        sys.path[:] = self.path

    @contextmanager
    def ours(self):
        if not self.path:  # not entered yet (warmup_steps=0 opens the window at install)
            yield
            return
        with self.lock:
            theirs, path = self._take(), sys.path[:]
            sys.modules.update(self.saved)
            sys.path[:] = self.path
            try:
                yield
            finally:
                self.saved.update(self._take())
                sys.modules.update(theirs)
                sys.path[:] = path


class _NoStep(BaseException):
    pass


def run_script(ctx, path: Path, args: list[str]) -> tuple[Attach, str]:
    """Run the script to its end (or script.max_steps) under the instrumentation; returns it and how
    the script ended: "finished", "exited 0" (sys.exit(0)) or "stopped at script.max_steps". Raises
    the script's own exception as it is, ScriptError for a non-zero exit, missing arguments, or no
    training within script.first_step_timeout_s."""
    cfg = ctx.cfg
    isolation = Isolation(path.parent)
    attach = Attach(cfg, ctx.device, ctx.rank, ours=isolation.ours, progress=ctx.progress)
    parse_errors: list[str] = []
    real_error = argparse.ArgumentParser.error

    def error(
        parser, message
    ):  # the script's argparse saying what is missing, kept for our one line
        parse_errors.append(message)
        return real_error(parser, message)

    timeout = float(cfg.script.first_step_timeout_s)
    said: list[str] = []

    def no_training():
        if attach.steps_done == 0 or not attach.ddps:
            what = (
                "constructed no DistributedDataParallel"
                if attach.steps_done and not attach.ddps
                else f"saw {attach.steps_done} optimizer steps in {timeout:g} s"
                + ("" if attach.ddps else " and no DistributedDataParallel")
            )
            said.append(
                f"{what}: is this a training script? (script.first_step_timeout_s={timeout:g} for "
                "one "
                "that starts slowly)"
            )
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def raise_no_step(signum, frame):
        if running:  # not once the script is over (the watchdog may fire as it ends)
            raise _NoStep()

    env_before = os.environ.get("TORCHELASTIC_USE_AGENT_STORE")
    # the rank side's store already listens on MASTER_ADDR:MASTER_PORT (base/store.rank_store on
    # Slurm): the script's init_process_group dials it instead of serving a second one there
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = str(True)
    argv = sys.argv[:]
    real_usr1 = signal.signal(signal.SIGUSR1, raise_no_step)
    watchdog = threading.Timer(timeout, no_training)
    watchdog.daemon = True
    argparse.ArgumentParser.error = error
    attach.install()
    ended, running = "finished", [True]
    try:
        sys.argv = [str(path), *args]
        with isolation:
            watchdog.start()
            # the rank side's start-up (Hydra, the config, the store, this project's imports)
            # leaves hundreds of thousands of objects pending for the collector: collected now, so
            # that no full collection they set off (0.1-0.4 s on the 2-core VM) lands in the
            # script's window; the script's own allocations set off its collections as alone
            gc.collect()
            runpy.run_path(str(path), run_name="__main__")
    except Stop:
        ended = f"stopped at script.max_steps={cfg.script.max_steps}"
    except _NoStep:
        raise ScriptError(said[0]) from None
    except (
        Exception
    ) as e:  # the script's own error, as it is, with its own frames only for the record
        try:
            e.own_traceback = own_traceback(e, path)
        except (
            AttributeError
        ):  # an exception type that takes no attributes: the whole traceback then
            pass
        raise
    except SystemExit as e:
        code = e.code
        if code not in (None, 0):
            if parse_errors and attach.steps_done == 0:
                raise ScriptError(
                    f"the script refused its arguments ({parse_errors[-1]}; exit code {code}): "
                    "give "
                    f"them as 'script.args=[--name,value,...]' (now {list(args)})"
                ) from None
            raise ScriptError(
                f"the script exited with code {code} after {attach.steps_done} optimizer steps"
            ) from None
        ended = "exited 0"
    finally:
        running.clear()
        watchdog.cancel()
        attach.uninstall()
        argparse.ArgumentParser.error = real_error
        signal.signal(signal.SIGUSR1, real_usr1)
        sys.argv = argv
        if env_before is None:
            os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        else:
            os.environ["TORCHELASTIC_USE_AGENT_STORE"] = env_before
    if said:
        raise ScriptError(said[0])
    if attach.steps_done == 0 or not attach.ddps:
        raise ScriptError(
            f"the script {ended} after {attach.steps_done} optimizer steps"
            + ("" if attach.ddps else " and no DistributedDataParallel")
            + ": is this a DDP training script?"
        )
    return attach, ended
