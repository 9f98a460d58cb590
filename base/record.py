"""The run record: one JSON per run, the only thing tables, plots, the report and W&B read.

There is one way to make a record (the `Record` constructors below) and one way to write it (`Record.write`, atomic,
called only from job.finalise). On disk it is a JSON object (schema_version 2):

  schema_version  int; readers refuse versions they do not know
  status          "ok" | "failed" | "interrupted"
  error           the failure's message, naming the rank it came from (failed/interrupted only)
  traceback       the failing rank's traceback, when there is one
  peer_error      a first error that only said a peer rank died, replaced by the root cause (amend_failure)
  task            "train" | "collectives" | "grad_sync" | "pair_groups"
  command         `python train.py <overrides>`, shell-quoted (shlex.join), as typed: `${oc.env:...}` stays text
  overrides       the command-line overrides of this job (Hydra's task overrides), as typed
  job             {name, num, output_dir, sweep_dir, sweep_id, slurm_job_id, log}
  config          the resolved config every rank ran with, except keys whose value came from the environment
                  (`${oc.env:...}`), which keep the text typed (base/provenance.py)
  env             {hostnames, cpu_count, torch, cuda, nccl, python, devices, device_count, backend, world_size,
                   vars{NCCL_*, GLOO_*, OMP_NUM_THREADS, ...}, link{emulated, rate_bit_s, qdisc, check, ...: the network
                   the ranks used, docs/links.md}}; {} when the ranks never got that far
  started, finished  ISO-8601 UTC
  result          task-specific figures (seconds and bytes unless a name says otherwise), always with `headline`;
                  null when the run failed before producing any; see README "The run record"

Version 2 (this version) differs from 1 in who writes it (the process that outlives the ranks) and in the status
"interrupted"; the fields of version 1 keep their meaning, so version-1 records are read as well.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
RECORD_NAME = "run_record.json"
JOB_KEYS = ("name", "num", "output_dir", "sweep_dir", "sweep_id", "slurm_job_id", "log")
SWEEP_ID_ENV = "DDP_COMM_SWEEP_ID"   # set by the sweep table's callback before any job: the job.sweep_id of its records


class RecordError(ValueError):
    pass


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Record:
    status: str
    task: str | None = None
    command: str | None = None
    overrides: list[str] = field(default_factory=list)
    job: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    started: str | None = None
    finished: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    traceback: str | None = None
    peer_error: str | None = None
    schema_version: int = SCHEMA_VERSION

    # ------------------------------------------------------------------------------------ constructors

    @classmethod
    def _base(cls, status: str, config: dict | None, job: dict, **fields) -> "Record":
        config = dict(config or {})
        config.pop("hydra", None)
        overrides = list(job.get("overrides") or [])
        return cls(status=status, task=config.get("task"),
                   command=job.get("command") or shlex.join(["python", "train.py", *overrides]),
                   overrides=overrides, job={k: job.get(k) for k in JOB_KEYS}, config=config,
                   finished=now(), **fields)

    @classmethod
    def ok(cls, config: dict, job: dict, *, env: dict, started: str, result: dict) -> "Record":
        return cls._base("ok", config, job, env=env, started=started, result=result)

    @classmethod
    def failed(cls, config: dict | None, job: dict, error: str, *, traceback: str | None = None,
               env: dict | None = None, started: str | None = None, result: dict | None = None,
               status: str = "failed") -> "Record":
        """A run that ended without a full result. `result` keeps what was measured (e.g. a failed correctness
        check's figures, or the steps measured before an interrupt)."""
        return cls._base(status, config, job, env=env or {}, started=started, result=result, error=error,
                         traceback=traceback)

    def amend_failure(self, error: str, log: str | None = None) -> bool:
        """Replace an error that only says a peer died with the failing rank's own (the root cause found later,
        e.g. by the Slurm submitter from the other tasks' results). True when the record changed."""
        if self.status == "ok" or (self.error and not is_peer_failure(self.error)) or is_peer_failure(error):
            return False
        self.peer_error, self.error = self.error, error
        if log:
            self.job["log"] = log
        return True

    # ------------------------------------------------------------------------------------ I/O

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {"schema_version": d.pop("schema_version"), **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Record":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def write(self, directory: str | Path) -> Path:
        """Atomic: a temp file beside the target, fsync, rename; readable by the group like any file the user
        makes (the umask decides), so teammates on shared storage can read it. A crash leaves the old file or none."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / RECORD_NAME
        fd, tmp = tempfile.mkstemp(prefix=".run_record.", suffix=".tmp", dir=directory)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_dict(), f, indent=2, default=_jsonable)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else value * factor


# task=train's headline: the sweep table's columns, in the order the DDP-knobs issue lists them, each read from the
# structured field it falls back to when result["headline"] lacks the label. The training task builds its headline
# with train_headline(), so both always agree.
TRAIN_COLUMNS: list[tuple[str, Callable[[dict], Any]]] = [
    ("steps/s", lambda r: _get(r, "throughput", "steps_per_s")),
    ("samples/s", lambda r: _get(r, "throughput", "samples_per_s")),
    ("speed-up", lambda r: None),  # filled against the baseline row
    ("step median ms", lambda r: _scaled(_get(r, "step_time_s", "median"), 1e3)),
    ("exposed comm ms", lambda r: _scaled(_get(r, "comm", "exposed_s"), 1e3)),
    ("MB/step", lambda r: _scaled(_get(r, "comm", "bytes_per_step"), 1e-6)),
    ("grad rel err", lambda r: _get(r, "accuracy", "grad_rel_error")),
]
def train_headline(result: dict) -> dict[str, Any]:
    """The headline of a task=train result, from its structured fields (the labels the sweep table uses)."""
    return {label: get(result) for label, get in TRAIN_COLUMNS if label != "speed-up"}


PEER_FAILURE_SIGNS = ("closed by peer", "reset by peer", "broken pipe", "remote worker", "remote process exited",
                      "watchdog caught collective operation timeout")


def is_peer_failure(error: str | None) -> bool:
    """Errors a rank reports when another rank died first (gloo/NCCL see the connection close)."""
    return bool(error) and any(sign in error.lower() for sign in PEER_FAILURE_SIGNS)


def record_path(path: str | Path) -> Path:
    path = Path(path)
    return path / RECORD_NAME if path.is_dir() else path


def read_record(path: str | Path) -> dict[str, Any]:
    """The record at path (a file or a run directory) as the JSON dict it is on disk."""
    path = record_path(path)
    with open(path) as f:
        record = json.load(f)
    version = record.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise RecordError(
            f"{path}: run record schema_version {version!r}, this tool reads {', '.join(map(str, READABLE_VERSIONS))}. "
            "Re-run the job with this version of the tool, or read it with the version that wrote it."
        )
    return record


def find_records(*roots: str | Path) -> list[Path]:
    """Every run record under the given run or sweep directories, in job order."""
    found: list[Path] = []
    for root in roots:
        root = Path(root)
        if root.is_file():
            found.append(root)
            continue
        found.extend(root.rglob(RECORD_NAME))

    def job_key(p: Path):
        name = p.parent.name
        return (str(p.parent.parent), int(name) if name.isdigit() else float("inf"), name)

    return sorted(set(found), key=job_key)


def _jsonable(obj: Any):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)
