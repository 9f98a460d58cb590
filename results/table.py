"""Tables made from run records.

The end-of-sweep table (results.callbacks) and the report (results.report) both build their tables here,
so a number printed after a sweep and the same number in a report come from one place.
A table holds raw values; Markdown gets rounded numbers, CSV gets the values as measured.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from omegaconf import OmegaConf

DEFAULT_BUCKET_MB = OmegaConf.load(Path(__file__).resolve().parent.parent / "conf" / "config.yaml").bucket  # baseline
MISSING = "–"

# Overrides that say how a job was run, not what was measured: never used to tell configurations apart.
_NOISE_PREFIXES = ("hydra.", "logger")


# ---------------------------------------------------------------------------------------------- records


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else value * factor


# task=train columns, in the order the DDP-knobs issue lists them, each with the structured field it
# falls back to when result["headline"] lacks the label. The training task can build its headline with
# train_headline() so both always agree.
TRAIN_COLUMNS: list[tuple[str, Callable[[dict], Any]]] = [
    ("steps/s", lambda r: _get(r, "throughput", "steps_per_s")),
    ("samples/s", lambda r: _get(r, "throughput", "samples_per_s")),
    ("speed-up", lambda r: None),  # filled against the baseline row
    ("step median ms", lambda r: _scaled(_get(r, "step_time_s", "median"), 1e3)),
    ("exposed comm ms", lambda r: _scaled(_get(r, "comm", "exposed_s"), 1e3)),
    ("MB/step", lambda r: _scaled(_get(r, "comm", "bytes_per_step"), 1e-6)),
    ("grad rel err", lambda r: _get(r, "accuracy", "grad_rel_error")),
]
TRAIN_LABELS = [label for label, _ in TRAIN_COLUMNS]

PHASES = ["data", "h2d", "forward", "backward", "sync", "optimizer"]


def train_headline(result: dict) -> dict[str, Any]:
    """The headline of a task=train result, from its structured fields (the labels the sweep table uses)."""
    return {label: get(result) for label, get in TRAIN_COLUMNS if label != "speed-up"}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Entry:
    """One job of a sweep (or one run in a report): what a table row is made from."""

    num: int | None
    overrides: list[str]
    status: str  # "ok" | "failed"
    error: str | None = None
    record: dict | None = None
    output_dir: str | None = None
    slurm_job_id: str | None = None
    log: str | None = None
    inferred: dict[str, Any] = field(default_factory=dict)  # task / world_size of a job that left no record,
                                                             # taken from the other jobs of its sweep

    @classmethod
    def from_record(cls, record: dict, path: str | Path | None = None) -> "Entry":
        """path: where the record was read from (runs get copied, e.g. committed under results/runs/); without it,
        where it was written."""
        job = record.get("job") or {}
        output_dir = str(Path(path).parent) if path else job.get("output_dir")
        return cls(
            num=job.get("num"),
            overrides=list(record.get("overrides") or []),
            status=record.get("status") or "failed",
            error=record.get("error"),
            record=record,
            output_dir=output_dir,
            slurm_job_id=job.get("slurm_job_id"),
            log=job.get("log"),
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def result(self) -> dict:
        return (self.record or {}).get("result") or {}

    @property
    def config(self) -> dict:
        return (self.record or {}).get("config") or {}

    @property
    def task(self) -> str | None:
        if self.record is not None:
            return self.record.get("task") or self.config.get("task")
        return override_items(self.overrides).get("task") or self.inferred.get("task")

    def value(self, label: str) -> Any:
        """A table figure. The train columns come from the structured fields when the record has them (full
        precision: a headline may be rounded for printing), else from result["headline"], like every other column."""
        headline = self.result.get("headline") or {}
        if self.task == "train":
            for train_label, get in TRAIN_COLUMNS:
                if train_label == label:
                    value = get(self.result)
                    return value if value is not None else headline.get(label)
        return headline.get(label)

    def knob(self, name: str) -> Any:
        """optim / bucket / world_size of this run: as measured (result), else as configured, else as typed."""
        result, config = self.result, self.config
        if name == "optim":
            value = result.get("optim")
            if value is None:
                value = config.get("optim")
                value = value.get("name") if isinstance(value, dict) else value
        elif name == "bucket":
            value = result.get("bucket_mb", config.get("bucket"))
        elif name == "world_size":
            value = result.get("world_size") or _get(self.record, "env", "world_size") or config.get("world_size")
        else:
            value = result.get(name, config.get(name))
        if value is None:
            value = override_items(self.overrides).get(name)
        if value is None:
            value = self.inferred.get(name)
        return value


# -------------------------------------------------------------------------------------------- overrides


def override_items(overrides: Iterable[str]) -> dict[str, str | None]:
    """{key: value} of Hydra override strings ("+a.b=1", "~c" -> c: None)."""
    items: dict[str, str | None] = {}
    for text in overrides:
        key, sep, value = text.partition("=")
        items[key.lstrip("+~")] = value if sep else None
    return items


def _is_noise(key: str) -> bool:
    return key.startswith(_NOISE_PREFIXES)


def varying_keys(entries: list[Entry]) -> list[str]:
    """Override keys whose value differs between entries (first-seen order)."""
    parsed = [override_items(e.overrides) for e in entries]
    keys: list[str] = []
    for items in parsed:
        keys.extend(k for k in items if k not in keys and not _is_noise(k))
    return [k for k in keys if len({items.get(k, "<unset>") for items in parsed}) > 1]


def constant_overrides(entries: list[Entry]) -> list[str]:
    """Overrides every entry shares (the table states them once)."""
    if not entries:
        return []
    varying = set(varying_keys(entries))
    keys = [o.partition("=")[0].lstrip("+~") for o in entries[0].overrides]
    return [o for o, k in zip(entries[0].overrides, keys) if k not in varying and not _is_noise(k)]


def config_labels(entries: list[Entry]) -> list[str]:
    """A short name per entry: its varying overrides (all of them for a lone entry); unique within the table."""
    keys = varying_keys(entries)
    labels = []
    for e in entries:
        items = override_items(e.overrides)
        if len(entries) == 1:
            parts = [o for o in e.overrides if not _is_noise(o.lstrip("+~"))]
        else:
            parts = [f"{k}={items[k]}" if items.get(k) is not None else f"~{k}" for k in keys if k in items]
        labels.append(" ".join(parts) or "default")
    seen: dict[str, int] = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    out = []
    for label, e in zip(labels, entries):
        if seen[label] > 1:
            where = Path(e.output_dir).parent.name + "/" + Path(e.output_dir).name if e.output_dir else f"#{e.num}"
            label = f"{label} ({where})"
        out.append(label)
    return out


# ------------------------------------------------------------------------------------------ the tables


@dataclass
class Table:
    columns: list[str]
    rows: list[dict[str, Any]]
    title: str = ""
    notes: list[str] = field(default_factory=list)
    csv_only: list[str] = field(default_factory=list)  # columns written to CSV, left out of Markdown
    marked: tuple[int, str, str] | None = None  # (row, column, suffix): e.g. " (baseline)" after a label, Markdown only

    def markdown(self, heading: str = "") -> str:
        shown = [c for c in self.columns if c not in self.csv_only]
        cells = [[_md_cell(fmt(row.get(c), c)) for c in shown] for row in self.rows]
        if self.marked is not None and self.marked[1] in shown:
            i, j = self.marked[0], shown.index(self.marked[1])
            cells[i][j] += self.marked[2]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(shown)]
        numeric = [all(_finite(row.get(c)) or row.get(c) is None for row in self.rows) and c not in ("job",)
                   for c in shown]

        def line(values):
            return "| " + " | ".join(v.rjust(w) if num else v.ljust(w)
                                     for v, w, num in zip(values, widths, numeric)) + " |"

        out = []
        if heading and self.title:
            out += [f"{heading} {self.title}", ""]
        out.append(line(shown))
        out.append("|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2))
                                  for w, num in zip(widths, numeric)) + "|")
        out += [line(r) for r in cells]
        if self.notes:
            out.append("")
            out += [f"{n}  " if i < len(self.notes) - 1 else n for i, n in enumerate(self.notes)]
        return "\n".join(out) + "\n"

    def write_csv(self, path: str | Path) -> Path:
        path = Path(path)
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(self.columns)
            for row in self.rows:
                writer.writerow(["" if row.get(c) is None else row.get(c) for c in self.columns])
        return path


_COUNTS = {"collectives/step", "buckets", "world size", "slowest rank", "size B", "count", "job"}


def fmt(value: Any, label: str = "") -> str:
    """Rounded for reading; CSV keeps the raw value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if label.startswith("speed-up") and _finite(value):
        return f"{value:.2f}x"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and label in _COUNTS and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        a = abs(value)
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{value:.0f}"
        if a >= 100:
            return f"{value:.1f}"
        if a >= 10:
            return f"{value:.2f}"
        if a >= 1:
            return f"{value:.3f}"
        if a >= 1e-3:
            return f"{value:.4f}"
        return f"{value:.2e}"
    return str(value)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def short_error(entry: Entry, limit: int = 160) -> str:
    """The line of an error that names it, plus where the full log is."""
    text = (entry.error or "").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines:
        text = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    where = []
    if entry.slurm_job_id:
        where.append(f"slurm job {entry.slurm_job_id}")
    if entry.log:
        where.append(f"log {entry.log}")
    if where:
        text = f"{text} [{', '.join(where)}]" if text else ", ".join(where)
    return text or "failed"


def _is_default_baseline(e: Entry) -> bool:
    bucket = e.knob("bucket")
    try:
        bucket = float(bucket)
    except (TypeError, ValueError):
        return False
    return str(e.knob("optim")) == "none" and bucket == DEFAULT_BUCKET_MB


def choose_baseline(entries: list[Entry]) -> tuple[int | None, str]:
    """Index of the row speed-ups are measured against, and why that one.

    The job with optim=none and the default bucket (25 MB) if there is one, else the first job; only
    task=train rows that finished with a throughput count.
    """
    candidates = [i for i, e in enumerate(entries)
                  if e.ok and e.task == "train" and _finite(e.value("steps/s"))]
    if len(candidates) < 2:  # nothing to compare
        return None, ""
    for i in candidates:
        if _is_default_baseline(entries[i]):
            return i, f"optim=none with the default bucket ({DEFAULT_BUCKET_MB} MB)"
    first = candidates[0]
    return first, f"first finished job: no finished job with optim=none and bucket={DEFAULT_BUCKET_MB}"


def speed_up_basis(baseline: Entry, entry: Entry) -> str:
    """samples/s when both rows have it (fair when batch or world size differ), else steps/s."""
    if _finite(baseline.value("samples/s")) and _finite(entry.value("samples/s")):
        return "samples/s"
    return "steps/s"


def build_table(entries: list[Entry], *, first: str = "job", title: str = "") -> Table:
    """One row per entry: job (or configuration), overrides, status, headline figures (+ train columns, speed-up)."""
    labels = config_labels(entries)
    has_train = any(e.task == "train" for e in entries)
    columns: list[str] = list(TRAIN_LABELS) if has_train else []
    for e in entries:
        for label in (e.result.get("headline") or {}):
            if label not in columns:
                columns.append(label)

    base_i, why = choose_baseline(entries) if has_train else (None, "")
    base = entries[base_i] if base_i is not None else None

    rows = []
    for i, (e, label) in enumerate(zip(entries, labels)):
        row: dict[str, Any] = {}
        if first == "job":
            row["job"] = e.num if e.num is not None else MISSING
            row["overrides"] = label
        else:
            row["configuration"] = label
        row["status"] = e.status
        for c in columns:
            row[c] = e.value(c) if e.ok else None
        if e.ok and base is not None and e.task == "train":
            basis = speed_up_basis(base, e)
            mine, theirs = e.value(basis), base.value(basis)
            if _finite(mine) and _finite(theirs) and theirs > 0:
                row["speed-up"] = mine / theirs
        row["baseline"] = i == base_i
        row["error"] = None if e.ok else short_error(e)
        row["run dir"] = e.output_dir
        rows.append(row)

    lead = ["job", "overrides"] if first == "job" else ["configuration"]
    failed = any(not e.ok for e in entries)
    all_columns = lead + ["status"] + columns + (["error"] if failed else []) + ["baseline", "run dir"]
    notes = []
    if base is not None:
        name = (f"job {base.num} ({labels[base_i]})" if first == "job" and base.num is not None
                else f"`{labels[base_i]}`")
        basis = speed_up_basis(base, base)
        notes.append(f"Baseline for speed-up: {name}, {why}; speed-up = {basis} ÷ baseline {basis}.")
    same = constant_overrides(entries)
    if len(entries) > 1 and same:
        notes.append("Same in every row: " + " ".join(same) + ".")
    n_failed = sum(not e.ok for e in entries)
    if n_failed:
        notes.append(f"{n_failed} of {len(entries)} failed; their rows keep the error.")
    return Table(all_columns, rows, title=title, notes=notes, csv_only=["baseline", "run dir"],
                 marked=(base_i, lead[0], " (baseline)") if base is not None else None)


def _finished(entries: list[Entry], keep: Callable[[Entry], bool]) -> tuple[list[Entry], list[str]]:
    """Finished entries that `keep` selects, labelled as in the full table (failed rows included)."""
    labels = config_labels(entries)
    pairs = [(e, label) for e, label in zip(entries, labels) if e.ok and keep(e)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def phase_table(entries: list[Entry], title: str = "Step-time breakdown (median ms per phase)") -> Table:
    """Per-phase medians of task=train runs; phases never timed are left out."""
    train, labels = _finished(entries, lambda e: e.task == "train")
    present = [p for p in PHASES if any(_get(e.result, "phases", p, "median") is not None for e in train)]
    extra = [p for e in train for p in (e.result.get("phases") or {}) if p not in PHASES]
    present += list(dict.fromkeys(extra))
    rows = []
    for e, label in zip(train, labels):
        row: dict[str, Any] = {"configuration": label,
                               "step median ms": _scaled(_get(e.result, "step_time_s", "median"), 1e3)}
        total = 0.0
        for p in present:
            row[f"{p} ms"] = _scaled(_get(e.result, "phases", p, "median"), 1e3)
            total += row[f"{p} ms"] or 0.0
        row["sum of phases ms"] = total if present else None
        rows.append(row)
    columns = ["configuration", "step median ms"] + [f"{p} ms" for p in present] + ["sum of phases ms"]
    notes = ["Medians over the measured steps on rank 0; a phase median is taken per phase, so the sum of "
             "medians need not equal the step median."] if rows else []
    return Table(columns, rows, title=title, notes=notes)


def comm_table(entries: list[Entry], title: str = "Gradient communication per step") -> Table:
    """Bytes, collectives, buckets and how much communication the step exposed (task=train, comm measured)."""
    train, labels = _finished(entries, lambda e: e.task == "train" and bool(e.result.get("comm")))
    rows = []
    for e, label in zip(train, labels):
        c = e.result["comm"]
        rows.append({
            "configuration": label,
            "MB/step": _scaled(c.get("bytes_per_step"), 1e-6),
            "collectives/step": c.get("collectives_per_step"),
            "buckets": _get(c, "buckets", "count"),
            "comm ms": _scaled(c.get("time_s"), 1e3),
            "overlap ms": _scaled(c.get("overlap_s"), 1e3),
            "exposed ms": _scaled(c.get("exposed_s"), 1e3),
            "backward compute ms": _scaled(c.get("backward_compute_s"), 1e3),
            "algbw GB/s": c.get("algbw_GBps"),
            "busbw GB/s": c.get("busbw_GBps"),
            "method": c.get("method"),
            "slowest rank": e.result.get("slowest_rank"),
        })
    columns = ["configuration", "MB/step", "collectives/step", "buckets", "comm ms", "overlap ms", "exposed ms",
               "backward compute ms", "algbw GB/s", "busbw GB/s", "slowest rank", "method"]
    columns = [c for c in columns if c == "configuration" or any(r.get(c) is not None for r in rows)]
    methods = list(dict.fromkeys(r["method"] for r in rows if r.get("method")))
    notes = [f"Measured with {m}." for m in methods]
    return Table(columns, rows, title=title, notes=notes, csv_only=["method"])


_ROW_ORDER = ["op", "mode", "bytes", "count", "dtype", "time_us", "algbw_GBps", "busbw_GBps"]
_ROW_LABELS = {"bytes": "size B", "time_us": "time us", "algbw_GBps": "algbw GB/s", "busbw_GBps": "busbw GB/s"}


def rows_table(entries: list[Entry], title: str = "Collectives (nccl-tests style)") -> Table:
    """result["rows"] of task=collectives (op, bytes, busbw_GBps, ...), one line per op and size."""
    runs, labels = _finished(entries, lambda e: isinstance(e.result.get("rows"), list))
    columns: list[str] = []
    rows = []
    for e, label in zip(runs, labels):
        for r in e.result["rows"]:
            for k in r:
                if k not in columns:
                    columns.append(k)
            rows.append({"configuration": label, **{_ROW_LABELS.get(k, k): v for k, v in r.items()}})
    columns = [c for c in _ROW_ORDER if c in columns] + [c for c in columns if c not in _ROW_ORDER]
    columns = [_ROW_LABELS.get(c, c) for c in columns]
    if len(runs) > 1:
        columns = ["configuration"] + columns
    return Table(columns, rows, title=title)


def scaling_table(entries: list[Entry], title: str = "Scaling against world size") -> Table:
    """Throughput per world size for each configuration, against ideal linear scaling from its smallest size."""
    train = [e for e in entries if e.ok and e.task == "train" and _finite(e.value("samples/s"))]
    keys = [k for k in varying_keys(train) if k not in ("world_size", "scale")]
    lines: dict[str, list[Entry]] = {}
    for e in train:
        items = override_items(e.overrides)
        lines.setdefault(" ".join(f"{k}={items.get(k)}" for k in keys if k in items) or "default", []).append(e)
    rows = []
    for label, line in lines.items():
        sized = sorted(((float(e.knob("world_size")), e) for e in line if e.knob("world_size") is not None),
                       key=lambda p: p[0])
        if not sized:
            continue
        n0, e0 = sized[0]
        for n, e in sized:
            rate = e.value("samples/s")
            ideal = e0.value("samples/s") * n / n0
            rows.append({"configuration": label, "world size": int(n), "sync": e.result.get("sync"), "samples/s": rate,
                         "samples/s per rank": rate / n, f"speed-up vs {int(n0)} ranks": rate / e0.value("samples/s"),
                         "scaling efficiency": rate / ideal if ideal else None,
                         "exposed comm ms": _scaled(_get(e.result, "comm", "exposed_s"), 1e3)})
    columns = ["configuration", "world size", "sync", "samples/s", "samples/s per rank"]
    columns += list(dict.fromkeys(k for r in rows for k in r if k.startswith("speed-up vs")))
    columns += ["scaling efficiency", "exposed comm ms"]
    return Table(columns, rows, title=title,
                 notes=["scaling efficiency = samples/s ÷ (samples/s at the smallest world size × n ÷ that size)."])
