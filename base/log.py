"""What the tool says goes through `logging`, so Hydra's job log (<output dir>/train.log) holds what
the console showed, and lines from a rank carry its rank there.

The console looks as it did with print(): the message alone, warnings and errors on stderr, the rest
on stdout (`Console`, used by conf/hydra/job_logging/ddp_comm.yaml). The job log adds time, rank,
logger and level. Outside Hydra (tests, `python -m ...`) nobody configures logging; the tool's own
logger then prints through `Fallback`."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

from base.errors import ConfigWarning

ROOT = "ddp_comm"
FILE_FORMAT = "[%(asctime)s]%(rank)s[%(name)s][%(levelname)s] - %(message)s"
# `extra=` of a line meant for one place only: the full text of a run for the job log, its brief
# form for the console
FILE_ONLY = {"to": "file"}
CONSOLE_ONLY = {"to": "console"}


class Console(logging.Handler):
    """The message alone; WARNING and up to stderr, the rest to stdout. The streams are looked up
    for each line, so whoever swapped sys.stdout/sys.stderr (pytest, a caller) gets the output."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "to", None) == "file":
            return
        try:
            stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
            text = self.format(record)
            if (
                record.name == "py.warnings"
            ):  # warnings.formatwarning's text ends with its own newline
                text = text.rstrip("\n")
            stream.write(text + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own convention
            self.handleError(record)


def _prints(handler: logging.Handler) -> bool:
    if isinstance(handler, Console):
        return True
    stream = getattr(handler, "stream", None)
    return not isinstance(handler, logging.FileHandler) and stream in (
        sys.stdout,
        sys.stderr,
        sys.__stdout__,
        sys.__stderr__,
    )


class Fallback(Console):
    """On the tool's logger: prints only while no handler of the root logger prints to the console
    (no Hydra job)."""

    def emit(self, record: logging.LogRecord) -> None:
        if not any(_prints(h) for h in logging.getLogger().handlers):
            super().emit(record)


class FileFormat(logging.Formatter):
    """Time, rank (from the environment a rank runs in), logger, level, message."""

    def __init__(self, fmt: str = FILE_FORMAT, **kwargs):
        super().__init__(fmt, **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        rank = os.environ.get("RANK")
        record.rank = f"[rank {rank}]" if rank is not None else ""
        return super().format(record)


_formatwarning = warnings.formatwarning


def _one_line(message, category, filename, lineno, line=None) -> str:
    """A ConfigWarning is one line for the user (`warning: ...`), not Python's file:line and source;
    the rest as Python prints them. Installed for the whole process: warnings.warn and
    logging.captureWarnings both format here."""
    if isinstance(category, type) and issubclass(category, ConfigWarning):
        return f"warning: {message}\n"
    return _formatwarning(message, category, filename, lineno, line)


warnings.formatwarning = _one_line


class JobLog(logging.FileHandler):
    """The job log file. A disk that fills (or goes read-only) during the run costs the log, not a
    traceback per line: the first failed write prints one warning and the file is given up; the
    console keeps every line."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "to", None) != "console":
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            return super().handleError(record)
        if self.stream is not None:
            stream, self.stream = self.stream, None
            try:
                stream.close()
            except OSError:
                pass
            sys.stderr.write(
                f"warning: cannot write the job log {self.baseFilename} "
                f"({error.strerror or error}); "
                f"the console has every line\n"
            )
        self.emit = lambda record: None  # given up: no more attempts, no more warnings

    def flush(self) -> None:
        try:
            super().flush()
        except OSError:
            self.stream = None


def get(name: str) -> logging.Logger:
    """The logger of a tool module (name: its __name__)."""
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, Fallback) for h in root.handlers):
        root.addHandler(Fallback())
        root.setLevel(logging.INFO)
    return logging.getLogger(f"{ROOT}.{name}")


def for_rank(job: dict) -> bool:
    """In a rank the local launcher spawned (no Hydra there): warnings on the console as before, and
    everything in the job's log file, which the parent has open too (appends from several processes
    interleave line by line). False when Hydra configured this process already (torchrun, a Slurm
    task: its job log is there)."""
    root = logging.getLogger()
    if root.handlers:
        return False
    root.setLevel(logging.INFO)
    console = Console()
    console.setLevel(
        logging.WARNING
    )  # a rank's INFO lines (started, ended) are for the job log only
    root.addHandler(console)
    logging.captureWarnings(True)  # warnings.warn lines reach the job log too, printed as before
    try:
        handler = JobLog(Path(job["output_dir"]) / f"{job.get('name') or 'train'}.log")
    except OSError:
        return True
    handler.setFormatter(FileFormat())
    root.addHandler(handler)
    return True
