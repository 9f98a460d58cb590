"""The run record: one JSON per run, the only thing tables, plots, the report and W&B read.

There is one way to make a record (the `Record` constructors below), one way to write it
(`Record.write`, atomic, called only from job.finalise) and one way to read it (`Record.read`). The
schema is the code: `Record` here and the blocks and per-task results in base/record_types.py;
docs/record.md is generated from them. A record read and written again is the same JSON
(base/typed.py). Readers read this schema version only, with no fallbacks for old ones: an older
record is refused with the command that brings it up to date once (`python -m base.upgrade <dir>`,
which also says what each version changed)."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

from base.record_types import (
    Env,
    JobInfo,
    RecordError,
    TaskResult,
    TrainResult,
    result_from_dict,
    result_type,
)
from base.typed import Block

__all__ = [
    "Record",
    "RecordError",
    "read_record",
    "find_records",
    "record_path",
    "now",
    "is_peer_failure",
]

SCHEMA_VERSION = 3
RECORD_NAME = "run_record.json"
JOB_KEYS = ("name", "num", "output_dir", "sweep_dir", "sweep_id", "slurm_job_id", "log")
# set by the sweep table's callback before any job: the job.sweep_id of its records
SWEEP_ID_ENV = "DDP_COMM_SWEEP_ID"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Record(Block):
    status: str = field(metadata={"doc": '"ok" | "failed" | "interrupted" | "hung"'})
    task: str | None = field(
        default=None, metadata={"doc": '"train" | "collectives" | "grad_sync" | "pair_groups"'}
    )
    command: str | None = field(
        default=None,
        metadata={
            "doc": "`python train.py <overrides>`, shell-quoted, as typed: `${oc.env:...}` stays "
            "text"
        },
    )
    overrides: list[str] = field(
        default_factory=list, metadata={"doc": "this job's command-line overrides, as typed"}
    )
    job: JobInfo = field(default_factory=JobInfo)
    config: dict[str, Any] | None = field(
        default=None,
        metadata={
            "doc": "the resolved config every rank ran with; keys whose value came from the "
            "environment keep the text "
            "typed (base/provenance.py)"
        },
    )
    env: Env = field(default_factory=Env)
    started: str | None = field(default=None, metadata={"doc": "ISO-8601 UTC"})
    finished: str | None = field(default=None, metadata={"doc": "ISO-8601 UTC"})
    # Typed by task (base.record_types.RESULT_TYPES); annotated Any so the generic reader leaves it
    # to from_dict below.
    result: Any = field(
        default=None,
        metadata={
            "doc": "the task's result (TaskResult: one of the sections below); null when the run "
            "failed before "
            "producing any; a failed run keeps what was measured"
        },
    )
    error: str | None = field(
        default=None, metadata={"doc": "the failure's message, naming the rank it came from"}
    )
    traceback: str | None = field(
        default=None, metadata={"doc": "the failing rank's traceback, when there is one"}
    )
    peer_error: str | None = field(
        default=None,
        metadata={
            "doc": "a first error that only said a peer rank died, replaced by the root cause "
            "(amend_failure)"
        },
    )
    schema_version: int = field(
        default=SCHEMA_VERSION, metadata={"doc": "readers refuse versions they do not know"}
    )

    # --------------------------------------------------------------------------------- constructors

    @classmethod
    def _base(cls, status: str, config: dict | None, job: dict, **fields) -> "Record":
        config = dict(config or {})
        config.pop("hydra", None)
        overrides = list(job.get("overrides") or [])
        task = config.get("task")
        env, result = fields.pop("env", None), fields.pop("result", None)
        return cls(
            status=status,
            task=task,
            command=job.get("command") or shlex.join(["python", "train.py", *overrides]),
            overrides=overrides,
            job=typed_block(JobInfo, {k: job.get(k) for k in JOB_KEYS}, "job"),
            config=config,
            env=typed_block(Env, env, "env") or Env.from_dict({}),
            result=typed_block(result_type(task), result, "result"),
            finished=now(),
            **fields,
        )

    @classmethod
    def ok(
        cls, config: dict, job: dict, *, env: dict | Env, started: str, result: dict | TaskResult
    ) -> "Record":
        return cls._base("ok", config, job, env=env, started=started, result=result)

    @classmethod
    def failed(
        cls,
        config: dict | None,
        job: dict,
        error: str,
        *,
        traceback: str | None = None,
        env: dict | Env | None = None,
        started: str | None = None,
        result: dict | TaskResult | None = None,
        status: str = "failed",
    ) -> "Record":
        """A run that ended without a full result. `result` keeps what was measured (e.g. a failed
        correctness check's figures, or the steps measured before an interrupt)."""
        return cls._base(
            status,
            config,
            job,
            env=env,
            started=started,
            result=result,
            error=error,
            traceback=traceback,
        )

    def setting(self, dotted: str, default: Any = None) -> Any:
        """A value of this run's resolved config by dotted path (see `setting`)."""
        return setting(self.config, dotted, default)

    def amend_failure(self, error: str, log: str | None = None) -> bool:
        """Replace an error that only says a peer died with the failing rank's own (the root cause
        found later, e.g. by the Slurm submitter from the other tasks' results). True when the
        record changed."""
        if (
            self.status == "ok"
            or (self.error and not is_peer_failure(self.error))
            or is_peer_failure(error)
        ):
            return False
        self.peer_error, self.error = self.error, error
        if log:
            self.job.log = log
        return True

    # ------------------------------------------------------------------------------------ I/O

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; schema_version first for a record built here, and always there."""
        d = super().to_dict()
        if self._keys is not None and "schema_version" in d:
            return d
        d.pop("schema_version", None)
        return {"schema_version": self.schema_version, **d}

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> "Record":
        """The typed record of a JSON object; RecordError (one line naming the field) for a wrong
        type."""
        record = super().from_dict(d, where or "record")
        record.result = result_from_dict(record.task, record.result)
        return record

    @classmethod
    def read(cls, path: str | Path) -> "Record":
        """The record at path (a file or a run directory); RecordError naming file and field if
        unreadable."""
        path = record_path(path)
        try:
            with open(path) as f:
                d = json.load(f)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}: not a run record ({e})") from None
        version = d.get("schema_version") if isinstance(d, dict) else None
        if isinstance(version, int) and 0 < version < SCHEMA_VERSION:
            raise RecordError(
                f"{path}: run record schema_version {version}, this tool reads {SCHEMA_VERSION}: "
                f"`python -m base.upgrade {shlex.quote(str(path.parent))}` brings it up to date "
                "(once)"
            )
        if version != SCHEMA_VERSION:
            raise RecordError(
                f"{path}: run record schema_version {version!r}, this tool reads {SCHEMA_VERSION}. "
                "Re-run the job with this version of the tool, or read it with the version that "
                "wrote it."
            )
        try:
            return cls.from_dict(d)
        except RecordError as e:
            raise RecordError(f"{path}: {e}") from None

    def write(self, directory: str | Path) -> Path:
        """Atomic: a temp file beside the target, fsync, rename; readable by the group like any file
        the user makes (the umask decides), so teammates on shared storage can read it. A crash
        leaves the old file or none."""
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


def setting(config: dict | None, dotted: str, default: Any = None) -> Any:
    """A value of a config by dotted path ("model.name"): a record's resolved config (a dict) or a
    live DictConfig;
    `default` where any level is missing or null. The config stays what Hydra resolved; this is its
    one reader."""
    node: Any = config
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or node.get(key) is None:
            return default
        node = node[key]
    return node


def scaled(value: Any, factor: float) -> float | None:
    return None if value is None else value * factor


def _sub(block: Any, *path: str) -> Any:
    for key in path:
        if block is None:
            return None
        block = getattr(block, key)
    return block


# task=train's headline: the sweep table's columns, in the order the DDP-knobs issue lists them,
# each read from the structured field it falls back to when result.headline lacks the label. The
# training task builds its headline with train_headline(), so both always agree.
TRAIN_COLUMNS: list[tuple[str, Callable[[TrainResult], Any]]] = [
    ("steps/s", lambda r: _sub(r.throughput, "steps_per_s")),
    ("samples/s", lambda r: _sub(r.throughput, "samples_per_s")),
    ("speed-up", lambda r: None),  # filled against the baseline row
    ("step median ms", lambda r: scaled(_sub(r.step_time_s, "median"), 1e3)),
    ("exposed comm ms", lambda r: scaled(_sub(r.comm, "exposed_s"), 1e3)),
    ("MB/step", lambda r: scaled(_sub(r.comm, "bytes_per_step"), 1e-6)),
    ("grad rel err", lambda r: _sub(r.accuracy, "grad_rel_error")),
]


def train_headline(result: TrainResult | dict) -> dict[str, Any]:
    """The headline of a task=train result, from its structured fields (the labels the sweep table
    uses)."""
    if isinstance(result, dict):
        result = typed_block(TrainResult, result, "result")
    return {label: get(result) for label, get in TRAIN_COLUMNS if label != "speed-up"}


PEER_FAILURE_SIGNS = (
    "closed by peer",
    "reset by peer",
    "broken pipe",
    "remote worker",
    "remote process exited",
    "watchdog caught collective operation timeout",
)


def is_peer_failure(error: str | None) -> bool:
    """Errors a rank reports when another rank died first (gloo/NCCL see the connection close)."""
    return bool(error) and any(sign in error.lower() for sign in PEER_FAILURE_SIGNS)


def record_path(path: str | Path) -> Path:
    path = Path(path)
    return path / RECORD_NAME if path.is_dir() else path


def read_record(path: str | Path) -> dict[str, Any]:
    """The record at path as the JSON dict it is on disk, checked against the types (for readers not
    yet on Record)."""
    return Record.read(path).to_dict()


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


def typed_block(cls: type[Block], value: Any, where: str) -> Any:
    """A block of a record from the dict a writer made (a task's result, the diagnosis):
    JSON-normalised (numpy scalars become numbers) and checked against cls. A writer's slip is
    warned about and the block kept as written (the values that do not match their fields under
    `unchecked`, the rest typed), never lost, and the record read back; tests keep the writers
    matching their types. A block a writer built goes the same way, through its JSON (its numpy
    scalars, and any dict it holds where a block belongs), so what the record keeps is what it reads
    back. None passes through."""
    if value is None:
        return value
    value = json.loads(
        json.dumps(value.to_dict() if isinstance(value, Block) else value, default=_jsonable)
    )
    try:
        return cls.from_dict(value, where)
    except RecordError as e:
        warnings.warn(f"run record: {e}; kept as written under {where}.unchecked", stacklevel=2)
        return cls.from_dict(value, where, lenient=True)


def _jsonable(obj: Any):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


SCHEMA_BEGIN = (
    "<!-- schema: generated from base/record.py and base/record_types.py by `python -m base.record "
    "--write docs/record.md`; do not edit by hand -->"
)
SCHEMA_END = "<!-- end of the generated schema -->"


def schema_doc() -> str:
    """The record's schema as Markdown (docs/record.md holds it between SCHEMA_BEGIN and
    SCHEMA_END)."""
    from base.record_types import schema_markdown

    return f"{SCHEMA_BEGIN}\n\n{schema_markdown(Record)}\n{SCHEMA_END}"


def _write_schema(path: Path) -> None:
    text = path.read_text()
    head, _, rest = text.partition(SCHEMA_BEGIN)
    _, _, tail = rest.partition(SCHEMA_END)
    path.write_text(head + schema_doc() + tail)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"] and len(sys.argv) == 3:
        _write_schema(Path(sys.argv[2]))
    else:
        print(schema_doc())
