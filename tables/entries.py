"""What a table row is made from: one job's Entry (its record, or what is known of a job that left
none), the overrides that tell configurations apart, and the labels rows get. tables.table and
tables.aggregate build on it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from stats.fmt import rounded
from base.record import TRAIN_COLUMNS, Record
from base.record_types import TaskResult, TrainResult

MISSING = "–"

# Overrides that say how a job was run, not what was measured: never used to tell configurations
# apart.
NOT_SETTINGS = ("hydra.", "logger")
# Overrides that say which job of a configuration this is (the repeating sweeper sets `repeat`):
# repeats of one configuration.
JOB_KEYS = ("repeat",)

# ------------------------------------------------------------------------------------------ records


TRAIN_LABELS = [label for label, _ in TRAIN_COLUMNS]
EXPOSED = "exposed comm ms"
# the fewest samples whose median has a 95% interval (stats.median_ci): fewer, and a table marks it
EXPOSED_MIN_N = 6


def exposed_samples(result: TrainResult | dict | None, config: dict | None = None) -> int | None:
    """How many samples the exposed communication time rests on (comm.exposed_n): DDP's is the
    median of probe_steps untimed steps, the explicit strategies' of every measured step's sync
    phase. A dict is read as a TrainResult (the diagnosis passes one); `config` is not needed since
    every record says (the committed records made before were migrated once)."""
    if isinstance(result, dict):
        result = TrainResult.from_dict(result, "result")
    comm = result.comm if isinstance(result, TrainResult) else None
    return comm.exposed_n if comm is not None and comm.exposed_s is not None else None


def exposed_mark(value_ms: float | None, n: int | None) -> str | None:
    """A table's exposed-comm cell when its samples give no 95% interval: the value and how many
    samples, e.g. "658 (n=1)"; None when it has one (the cell shows the interval, or the value
    alone)."""
    if value_ms is None or n is None or n >= EXPOSED_MIN_N:
        return None
    return f"{fmt(value_ms)} (n={n})"


_COUNTS = {"collectives/step", "buckets", "world size", "slowest rank", "size B", "count", "job"}


def fmt(value: Any, label: str = "") -> str:
    """Rounded for reading; CSV keeps the raw value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if label.startswith("speed-up") and finite(value):
        return f"{value:.2f}x"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and label in _COUNTS and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return rounded(value)
    return str(value)


PHASES = ["data", "h2d", "forward", "backward", "sync", "optimizer"]


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Entry:
    """One job of a sweep (or one run in a report): what a table row is made from."""

    num: int | None
    overrides: list[str]
    status: str  # "ok" | "failed" | "interrupted"
    error: str | None = None
    record: Record | None = None
    output_dir: str | None = None
    slurm_job_id: str | None = None
    log: str | None = None
    inferred: dict[str, Any] = field(
        default_factory=dict
    )  # task / world_size of a job that left no record,
    # taken from the other jobs of its sweep

    @classmethod
    def from_record(cls, record: Record | dict, path: str | Path | None = None) -> "Entry":
        """record: a Record or its JSON (read as a Record); path: where the record was read from
        (runs get copied, e.g. committed under results/runs/); without it, where it was written."""
        record = Record.from_dict(record) if isinstance(record, dict) else record
        job = record.job
        output_dir = str(Path(path).parent) if path else job.output_dir
        return cls(
            num=job.num,
            overrides=list(record.overrides),
            status=record.status or "failed",
            error=record.error,
            record=record,
            output_dir=output_dir,
            slurm_job_id=job.slurm_job_id,
            log=job.log,
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def result(self) -> TaskResult | None:
        """The task's typed result (base.record_types); None for a job that left no record or failed
        before one."""
        return self.record.result if self.record is not None else None

    @property
    def train(self) -> TrainResult | None:
        """The result when it is a task=train one, else None: what most table columns read."""
        return self.result if isinstance(self.result, TrainResult) else None

    @property
    def config(self) -> dict:
        return (
            self.record.config if self.record is not None and self.record.config is not None else {}
        )

    @property
    def task(self) -> str | None:
        if self.record is not None:
            return self.record.task or self.config.get("task")
        return override_items(self.overrides).get("task") or self.inferred.get("task")

    def value(self, label: str) -> Any:
        """A table figure. The train columns come from the structured fields when the record has
        them (full precision: a headline may be rounded for printing), else from result.headline,
        like every other column."""
        headline = (self.result.headline if self.result is not None else None) or {}
        if self.train is not None:
            for train_label, get in TRAIN_COLUMNS:
                if train_label == label:
                    value = get(self.train)
                    return value if value is not None else headline.get(label)
        return headline.get(label)

    def knob(self, name: str) -> Any:
        """optim / bucket / world_size of this run: as measured (result), else as configured, else
        as typed."""
        result, config = self.result, self.config
        measured = getattr(result, {"bucket": "bucket_mb"}.get(name, name), None)
        if name == "optim":
            value = measured
            if value is None:
                value = config.get("optim")
                value = value.get("name") if isinstance(value, dict) else value
        elif name == "bucket":
            value = (
                measured if result is not None and result.has("bucket_mb") else config.get("bucket")
            )
        elif name == "world_size":
            value = (
                measured
                or (self.record.env.world_size if self.record is not None else None)
                or config.get("world_size")
            )
        else:
            value = measured if result is not None and result.has(name) else config.get(name)
        if value is None:
            value = override_items(self.overrides).get(name)
        if value is None:
            value = self.inferred.get(name)
        return value


# ---------------------------------------------------------------------------------------- overrides


def override_items(overrides: Iterable[str]) -> dict[str, str | None]:
    """{key: value} of Hydra override strings ("+a.b=1", "~c" -> c: None)."""
    items: dict[str, str | None] = {}
    for text in overrides:
        key, sep, value = text.partition("=")
        items[key.lstrip("+~")] = value if sep else None
    return items


def not_a_setting(key: str) -> bool:
    key = key.lstrip("+~").partition("=")[0]
    return key.startswith(NOT_SETTINGS) or key in JOB_KEYS


def varying_keys(entries: list[Entry]) -> list[str]:
    """Override keys whose value differs between entries (first-seen order)."""
    parsed = [override_items(e.overrides) for e in entries]
    keys: list[str] = []
    for items in parsed:
        keys.extend(k for k in items if k not in keys and not not_a_setting(k))
    return [k for k in keys if len({items.get(k, "<unset>") for items in parsed}) > 1]


def constant_overrides(entries: list[Entry]) -> list[str]:
    """Overrides every entry shares (the table states them once)."""
    if not entries:
        return []
    varying = set(varying_keys(entries))
    keys = [o.partition("=")[0].lstrip("+~") for o in entries[0].overrides]
    return [
        o for o, k in zip(entries[0].overrides, keys) if k not in varying and not not_a_setting(k)
    ]


def config_labels(entries: list[Entry]) -> list[str]:
    """A short name per entry: its varying overrides (all of them for a lone entry); unique within
    the table."""
    keys = varying_keys(entries)
    labels = []
    for e in entries:
        items = override_items(e.overrides)
        if len(entries) == 1:
            parts = [o for o in e.overrides if not not_a_setting(o.lstrip("+~"))]
        else:
            parts = [
                f"{k}={items[k]}" if items.get(k) is not None else f"~{k}"
                for k in keys
                if k in items
            ]
        labels.append(" ".join(parts) or "default")
    seen: dict[str, int] = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    out = []
    for label, e in zip(labels, entries):
        if seen[label] > 1:
            where = (
                Path(e.output_dir).parent.name + "/" + Path(e.output_dir).name
                if e.output_dir
                else f"#{e.num}"
            )
            label = f"{label} ({where})"
        out.append(label)
    return out
