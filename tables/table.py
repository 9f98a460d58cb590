"""Tables made from run records.

The end-of-sweep table (results.callbacks) and the report (results.report) both build their tables
here, so a number printed after a sweep and the same number in a report come from one place. Repeats
of one configuration are one row (tables.aggregate computes its intervals, speed-up and verdict). A
table holds raw values; Markdown gets rounded numbers (intervals trimmed to the digits they
support), CSV gets the values as measured."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from comm.link import table_note as link_note
from stats import fmt_ci, fmt_ratio, verdict_text
from stats.verdict import NO_VERDICT, NS
from tables.aggregate import (
    NO_INTERVAL,
    Comparison,
    Config,
    exposed_fields,
    step_median,
    compare,
    group_repeats,
    phase_median,
    sentinel_warning,
)
from base.record import scaled
from tables.entries import (
    EXPOSED,
    MISSING,
    PHASES,
    TRAIN_LABELS,
    Entry,
    finite,
    config_labels,
    constant_overrides,
    exposed_mark,
    fmt,
)


# --------------------------------------------------------------------------------------- the tables


@dataclass
class Table:
    columns: list[str]
    rows: list[dict[str, Any]]
    title: str = ""
    notes: list[str] = field(default_factory=list)
    csv_only: list[str] = field(
        default_factory=list
    )  # columns written to CSV, left out of Markdown
    marked: tuple[int, str, str] | None = (
        None  # (row, column, suffix): e.g. " (baseline)" after a label, Markdown only
    )
    display: dict[str, Callable[[dict], str]] = field(
        default_factory=dict
    )  # column -> its Markdown text (intervals)
    warnings: list[str] = field(default_factory=list)  # printed above the table

    def text(self, row: dict, column: str) -> str:
        """A cell as Markdown shows it: a value with its interval where the table has one, else
        rounded."""
        return self.display[column](row) if column in self.display else fmt(row.get(column), column)

    def markdown(self, heading: str = "") -> str:
        shown = [c for c in self.columns if c not in self.csv_only]
        cells = [[_md_cell(self.text(row, c)) for c in shown] for row in self.rows]
        if self.marked is not None and self.marked[1] in shown:
            i, j = self.marked[0], shown.index(self.marked[1])
            cells[i][j] += self.marked[2]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(shown)]
        numeric = [
            all(finite(row.get(c)) or row.get(c) is None for row in self.rows) and c not in ("job",)
            for c in shown
        ]

        def line(values):
            return (
                "| "
                + " | ".join(
                    v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
                )
                + " |"
            )

        out = []
        if heading and self.title:
            out += [f"{heading} {self.title}", ""]
        out += [f"> **Warning**: {w}\n" for w in self.warnings]
        out.append(line(shown))
        out.append(
            "|"
            + "|".join(
                ("-" * (w + 1) + ":") if num else ("-" * (w + 2)) for w, num in zip(widths, numeric)
            )
            + "|"
        )
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


def _interval(value_key: str, lo_key: str, hi_key: str, unit: str = ""):
    """Markdown text of a value with its CI, digits trimmed to what the interval supports
    (stats.fmt_ci)."""

    def text(row: dict) -> str:
        value = row.get(value_key)
        if not finite(value):
            return MISSING
        return (
            fmt_ci(value, row.get(lo_key), row.get(hi_key), unit)
            if row.get(lo_key) is not None
            else fmt(value, value_key)
        )

    return text


def _speedup_text(row: dict) -> str:
    """Never a bare ratio on a row that is not significant: "1.04x" would be read as a 4% win."""
    if row.get("baseline"):
        return "1"
    ratio, v = row.get("speed-up"), row.get("verdict")
    if not finite(ratio):
        return MISSING
    if v == NO_INTERVAL:
        return "no CI"
    return fmt_ratio(ratio, row.get("speed-up lo"), row.get("speed-up hi"), v)


def _verdict_cell(row: dict) -> str:
    """The verdict column: the one verdict code's words (stats.fmt.verdict_text), with what would
    decide an inconclusive row and the caveats its comparison carries (an unsteady run, the family
    adjustment)."""
    v = row.get("verdict")
    if v in (None, "baseline", NO_INTERVAL):
        return MISSING if v is None else v
    sp = row.get("speedup") or {}
    notes = tuple(sp.get("notes") or ())
    if v == NS and sp.get("ci_lo") is not None and sp.get("repeats_needed") is None:
        notes = ("more than 100 runs each would be needed at this spread",) + notes
    return verdict_text(v, sp.get("noise"), sp.get("repeats_needed"), notes)


INTERVAL_COLUMNS = ("steps/s", "samples/s", "speed-up", "step median ms")
EXPOSED_NOTE = (
    "exposed comm: communication backward did not hide, per step (DDP: its reducer timers over "
    "probe_steps "
    "untimed steps after the window; explicit syncs: the sync phase); (n=1): a single sample, no "
    "interval "
    "(probe_steps=6 gives a 95% one), which the diagnosis never acts on alone."
)


def _exposed_text(column: str = EXPOSED):
    def text(row: dict) -> str:
        value = row.get(column)
        if not finite(value):
            return MISSING
        marked = exposed_mark(value, row.get(f"{EXPOSED} n"))
        if marked:
            return marked
        lo, hi = row.get(f"{EXPOSED} lo"), row.get(f"{EXPOSED} hi")
        return fmt_ci(value, lo, hi) if lo is not None and hi is not None else fmt(value, column)

    return text


def _status(c: Config) -> str:
    ok = len(c.ok)
    if ok == len(c.entries):
        return "ok"
    if ok == 0:  # as the records say: a job stopped by Ctrl-C or SIGTERM did not fail
        return "interrupted" if all(e.status == "interrupted" for e in c.entries) else "failed"
    return f"{ok}/{len(c.entries)} ok"


def _steady(c: Config, flagged: set, tested: set) -> str | None:
    """yes / no (k/R): the sweep's drift judgement of the row's runs (stats.unsteady_runs,
    recomputed from the series by this version whatever the records say); None when no run could be
    tested (fewer than 10 steps)."""
    runs = [e for e in c.ok if id(e) in tested]
    if not runs:
        return None
    bad = sum(id(e) in flagged for e in runs)
    if bad:
        return "no" if len(runs) == 1 else f"no ({bad}/{len(runs)})"
    return "yes"


def build_table(
    entries: list[Entry], *, first: str = "job", title: str = "", noise: float | None = None
) -> Table:
    """One row per configuration (its repeats merged): job(s) or configuration, status, headline
    figures; for task=train throughput and step time with 95% CIs, speed-up against the baseline
    with its CI and a verdict."""
    cmp = compare(entries, noise)
    configs = cmp.configs
    has_train = any(c.task == "train" for c in configs)
    repeated = any(len(c.entries) > 1 for c in configs)
    columns: list[str] = []
    if has_train:
        columns = TRAIN_LABELS[:3] + ["verdict"] + TRAIN_LABELS[3:] + ["steady"]
    for e in entries:
        for label in (
            e.result.headline if e.result is not None and e.result.headline is not None else {}
        ):
            if label not in columns:
                columns.append(label)

    rows = []
    for c in configs:
        row: dict[str, Any] = {}
        if first == "job":
            nums = [n if n is not None else MISSING for n in c.nums]
            row["job"] = nums[0] if len(nums) == 1 else ",".join(map(str, nums))
            row["overrides"] = c.label
        else:
            row["configuration"] = c.label
        row["status"] = _status(c)
        row["runs"] = len(c.ok)
        for label in columns:
            row[label] = c.median(lambda e, label=label: e.value(label)) if c.ok else None
            if row[label] is None and c.ok:
                row[label] = c.first.value(label)  # not a number (text headline): the first run's
        if c.task == "train" and c.throughput:
            t = c.throughput
            for label, key in (("steps/s", "steps_per_s"), ("samples/s", "samples_per_s")):
                row[label], row[f"{label} lo"], row[f"{label} hi"] = (
                    t.get(key),
                    t.get(key + "_lo"),
                    t.get(key + "_hi"),
                )
        if c.task == "train":
            row.update(exposed_fields(c))
        if c.task == "train" and c.step:
            row["step median ms"] = c.step["median"] * 1e3
            row["step median ms lo"] = scaled(c.step["ci_lo"], 1e3)
            row["step median ms hi"] = scaled(c.step["ci_hi"], 1e3)
        row["speed-up"] = row["verdict"] = None
        if c.speedup:
            sp = c.speedup
            row["speed-up"], row["speed-up lo"], row["speed-up hi"] = (
                sp["ratio"],
                sp["ci_lo"],
                sp["ci_hi"],
            )
            row["verdict"], row["speedup"] = sp["verdict"], sp
            row["verdict notes"] = "; ".join(sp.get("notes") or []) or None
        elif c.baseline:
            row["speed-up"], row["verdict"] = 1.0, "baseline"
        if has_train:
            row["steady"] = (
                _steady(
                    c,
                    set(cmp.unsteady.get("runs") or []),
                    set(cmp.unsteady.get("tested_runs") or []),
                )
                if c.task == "train"
                else None
            )
        row["baseline"] = c.baseline
        failed = [e for e in c.entries if not e.ok]
        row["error"] = short_error(failed[0]) if failed else None
        row["run dir"] = ";".join(str(e.output_dir) for e in c.entries if e.output_dir) or None
        rows.append(row)

    lead = ["job", "overrides"] if first == "job" else ["configuration"]
    failed = any(not e.ok for e in entries)
    shown = (
        lead + ["status"] + (["runs"] if repeated else []) + columns + (["error"] if failed else [])
    )
    intervals = (
        [f"{c} {end}" for c in (*INTERVAL_COLUMNS, EXPOSED) if c in columns for end in ("lo", "hi")]
        + ([f"{EXPOSED} n"] if EXPOSED in columns else [])
        if has_train
        else []
    )
    notes_col = ["verdict notes"] if has_train else []
    all_columns = shown + intervals + notes_col + ["baseline", "run dir"]
    display = {c: _interval(c, f"{c} lo", f"{c} hi") for c in INTERVAL_COLUMNS if c != "speed-up"}
    display["speed-up"] = _speedup_text
    display["verdict"] = _verdict_cell
    display[EXPOSED] = _exposed_text()
    table = Table(
        all_columns,
        rows,
        title=title,
        notes=_notes(cmp, entries, rows, first),
        csv_only=intervals + notes_col + ["baseline", "run dir"],
        marked=(cmp.base, lead[0], " (baseline)") if cmp.base is not None else None,
        display=display if has_train else {},
        warnings=_warnings(cmp),
    )
    return table


def _warnings(cmp: Comparison) -> list[str]:
    out = [sentinel_warning(cmp.sentinel)] if cmp.sentinel else []
    train = [c for c in cmp.configs if c.task == "train" and c.throughput]
    flagged = set(cmp.unsteady.get("runs") or [])
    unsteady = [c for c in train if any(id(e) in flagged for e in c.ok)]
    if unsteady:
        out.append(
            f"not at steady state: {sum(id(e) in flagged for c in train for e in c.ok)} of "
            f"{cmp.unsteady['tested']} tested runs drifted by more than 2% "
            f"({cmp.unsteady['method']}), in "
            f"{', '.join(f'`{c.label}`' for c in unsteady)}; a verdict resting on them says so. "
            "Their warm-up "
            "was not enough or the machine changed during the window: raise warmup_steps and run "
            "them again."
        )
    single = [c.label for c in cmp.configs if c.speedup and c.speedup["verdict"] == NO_VERDICT]
    if single:
        out.append(
            f"one run behind {', '.join(f'`{u}`' for u in single)} (or its baseline): no verdict. "
            "One run holds "
            "the noise inside it, not the spread between runs (a new process, allocator state, "
            "core placement), "
            "which is often larger: single-run verdicts on identical configurations were false in "
            "58% of "
            "simulated comparisons with 4% run offsets (docs/methods.md). Run repeats=3 or more."
        )
    few = [c.label for c in train if len(c.ok) == 2]
    if few and cmp.base is not None:
        out.append(
            f"two runs behind {', '.join(f'`{u}`' for u in few)}: their intervals are valid but "
            "wide (t on 1 "
            "degree of freedom); repeats=3 or more."
        )
    return out


def _notes(cmp: Comparison, entries: list[Entry], rows: list[dict], first: str) -> list[str]:
    notes = []
    if cmp.base is not None:
        base = cmp.configs[cmp.base]
        name = (
            f"job {rows[cmp.base]['job']} ({base.label})" if first == "job" else f"`{base.label}`"
        )
        basis = next((c.speedup["basis"] for c in cmp.configs if c.speedup), "samples/s")
        floor = cmp.sentinel["floor"] if cmp.sentinel else cmp.noise
        notes.append(
            f"Baseline for speed-up: {name}, {cmp.why}; speed-up = {basis} ÷ baseline {basis}, "
            "with its 95% "
            f"CI. Verdict: faster / slower only when the whole CI lies beyond 1 ± {floor:.3g} "
            "(compare.noise"
            f"{'' if floor == cmp.noise else ', raised to the machine spread'}; criterion.rs's "
            "rule); "
            "equivalent when it lies inside (two one-sided tests, Schuirmann 1987); otherwise no "
            "significant "
            f"difference, shown as ~1 with its range and the runs that would decide it."
        )
    family = next(
        (c.speedup["family"] for c in cmp.configs if c.speedup and c.speedup.get("family")), None
    )
    if family:
        notes.append(
            "Multiplicity: the verdicts control the chance of any false verdict in this table at "
            "5% "
            f"({family}, Holm 1979); each row's interval is its own 95% interval."
        )
    methods = list(
        dict.fromkeys(c.speedup["method"].split(" (")[0] for c in cmp.configs if c.speedup)
    )
    if methods:
        notes.append(
            "Speed-up intervals (95%, log scale, the run is the unit): " + "; ".join(methods) + "."
        )
    if any(len(c.entries) > 1 for c in cmp.configs):
        notes.append(
            "A row merges the repeats of one configuration (runs: how many finished): throughput "
            "and step "
            "median are geometric means over runs with t(R-1) intervals (Kalibera & Jones 2013); "
            "one run: "
            "its own noise only: throughput from 60 timed blocks (3 batch means; a shorter run may "
            "hold none "
            "of the stalls the rate includes), the step median from 10 steps (2-5 batch medians)."
        )
    plans = [
        (c.label, c.throughput["plan"])
        for c in cmp.configs
        if c.throughput and (c.throughput.get("plan") or {}).get("runs_sd") is not None
    ]
    if plans:
        need = max((p["repeats"] or 101) for _, p in plans)
        target = plans[0][1]["target"]
        spread = max(p["runs_sd"] for _, p in plans)
        between = [p["between_sd"] for _, p in plans if p["between_sd"] is not None]
        split = (
            f", of which between runs up to {max(between):.1%}: more steps per run do not narrow "
            "that part, "
            "more runs do"
            if between
            else ""
        )
        notes.append(
            f"Repeats for ±{target:.0%} on throughput (measure.rel_ci; Kalibera & Jones 2013): "
            + (f"{need} runs per configuration" if need <= 100 else "more than 100 runs")
            + f" at the measured spread (SD of a run's log throughput up to {spread:.1%}{split})."
        )
    if cmp.base is not None:
        notes.append(
            "Noise sentinel: "
            + (
                f"{cmp.sentinel['phase']} time, see the warning above."
                if cmp.sentinel
                else cmp.sentinel_note + "."
            )
        )
    if any(r.get(f"{EXPOSED} n") is not None for r in rows):
        notes.append(EXPOSED_NOTE)
    same = constant_overrides(entries)
    if len(cmp.configs) > 1 and same:
        notes.append("Same in every row: " + " ".join(same) + ".")
    n_failed = sum(not e.ok for e in entries)
    if n_failed:
        notes.append(f"{n_failed} of {len(entries)} failed; their rows keep the error.")
    return notes + _link_notes(entries)


def _link_notes(entries: list[Entry]) -> list[str]:
    """What network the rows ran on, when any ran behind an emulated link (comm/link.py)."""
    note = link_note([e.record.env.link for e in entries if e.ok and e.record is not None])
    return [note] if note else []


def _finished(entries: list[Entry], keep: Callable[[Entry], bool]) -> tuple[list[Entry], list[str]]:
    """Finished entries that `keep` selects, labelled as in the full table (failed rows
    included)."""
    labels = config_labels(entries)
    pairs = [(e, label) for e, label in zip(entries, labels) if e.ok and keep(e)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _configurations(entries: list[Entry], keep: Callable[[Entry], bool]) -> list[Config]:
    """Configurations (repeats merged) with a finished run that `keep` selects."""
    return [
        c
        for c in (Config(label, group) for label, group in group_repeats(entries))
        if any(e.ok and keep(e) for e in c.entries)
    ]


def phase_table(
    entries: list[Entry], title: str = "Step-time breakdown (median ms per phase)"
) -> Table:
    """Per-phase medians of task=train runs (median over repeats); phases never timed are left
    out."""
    train = _configurations(entries, lambda e: e.task == "train")
    runs = [e for c in train for e in c.ok]
    present = [p for p in PHASES if any(phase_median(e, p) is not None for e in runs)]
    extra = [
        p
        for e in runs
        if e.train.phases is not None
        for p in e.train.phases.extra
        if p not in PHASES
    ]
    present += list(dict.fromkeys(extra))
    rows = []
    for c in train:
        row: dict[str, Any] = {
            "configuration": c.label,
            "step median ms": scaled(c.median(step_median), 1e3),
        }
        total = 0.0
        for p in present:
            row[f"{p} ms"] = scaled(c.median(lambda e, p=p: phase_median(e, p)), 1e3)
            total += row[f"{p} ms"] or 0.0
        row["sum of phases ms"] = total if present else None
        rows.append(row)
    columns = (
        ["configuration", "step median ms"] + [f"{p} ms" for p in present] + ["sum of phases ms"]
    )
    notes = (
        [
            "Medians over the measured steps on rank 0 (median over repeats); a phase median is "
            "taken per phase, so "
            "the sum of medians need not equal the step median. Intervals per phase are in each "
            "run's summary and "
            "record."
        ]
        if rows
        else []
    )
    return Table(columns, rows, title=title, notes=notes)


_COMM_FIELDS = {
    "MB/step": ("bytes_per_step", 1e-6),
    "collectives/step": ("collectives_per_step", 1),
    "comm ms": ("time_s", 1e3),
    "overlap ms": ("overlap_s", 1e3),
    "exposed ms": ("exposed_s", 1e3),
    "backward compute ms": ("backward_compute_s", 1e3),
    "algbw GB/s": ("algbw_GBps", 1),
    "busbw GB/s": ("busbw_GBps", 1),
}


def comm_table(entries: list[Entry], title: str = "Gradient communication per step") -> Table:
    """Bytes, collectives, buckets and how much communication the step exposed (task=train, comm
    measured; median over repeats)."""
    rows = []
    for c in _configurations(entries, lambda e: e.train is not None and e.train.comm is not None):
        comm = c.first.train.comm
        row = {"configuration": c.label}
        for label, (key, factor) in _COMM_FIELDS.items():
            row[label] = scaled(c.median(lambda e, key=key: getattr(e.train.comm, key)), factor)
        row.update(
            {
                "buckets": comm.buckets.count if comm.buckets is not None else None,
                "method": comm.method,
                "slowest rank": c.first.train.slowest_rank,
            }
        )
        row.update(exposed_fields(c))
        rows.append(row)
    columns = [
        "configuration",
        "MB/step",
        "collectives/step",
        "buckets",
        "comm ms",
        "overlap ms",
        "exposed ms",
        "backward compute ms",
        "algbw GB/s",
        "busbw GB/s",
        "slowest rank",
        "method",
    ]
    columns = [
        c for c in columns if c == "configuration" or any(r.get(c) is not None for r in rows)
    ]
    exposed = [f"{EXPOSED} {end}" for end in ("lo", "hi", "n")] if "exposed ms" in columns else []
    methods = list(dict.fromkeys(r["method"] for r in rows if r.get("method")))
    notes = [f"Measured with {m}." for m in methods] + ([EXPOSED_NOTE] if exposed else [])
    return Table(
        columns + exposed,
        rows,
        title=title,
        notes=notes,
        csv_only=["method", *exposed],
        display={"exposed ms": _exposed_text("exposed ms")},
    )


_ROW_ORDER = ["op", "mode", "bytes", "count", "dtype", "time_us", "algbw_GBps", "busbw_GBps"]
_ROW_LABELS = {
    "bytes": "size B",
    "time_us": "time us",
    "algbw_GBps": "algbw GB/s",
    "busbw_GBps": "busbw GB/s",
}


def rows_table(entries: list[Entry], title: str = "Collectives (nccl-tests style)") -> Table:
    """result["rows"] of task=collectives (op, bytes, busbw_GBps, ...), one line per op and size."""
    runs, labels = _finished(entries, lambda e: isinstance(getattr(e.result, "rows", None), list))
    columns: list[str] = []
    rows = []
    for e, label in zip(runs, labels):
        for r in (row.to_dict() for row in e.result.rows):
            for k in r:
                if k not in columns:
                    columns.append(k)
            rows.append(
                {"configuration": label, **{_ROW_LABELS.get(k, k): v for k, v in r.items()}}
            )
    columns = [c for c in _ROW_ORDER if c in columns] + [c for c in columns if c not in _ROW_ORDER]
    columns = [_ROW_LABELS.get(c, c) for c in columns]
    if len(runs) > 1:
        columns = ["configuration"] + columns
    return Table(columns, rows, title=title)


def scaling_table(entries: list[Entry], title: str = "Scaling against world size") -> Table:
    """One row per configuration and world size (repeats merged), against the line's first point:
    the one-rank baseline where a sweep or study has one (tables.aggregate.scaling_lines)."""
    from tables.aggregate import scaling_rows

    rows = scaling_rows(entries)
    columns = [
        "configuration",
        "world size",
        "sync",
        "runs",
        "samples/s",
        "speed-up",
        "verdict",
        "scaling efficiency",
        "exposed comm ms",
        "samples/s lo",
        "samples/s hi",
        "speed-up lo",
        "speed-up hi",
        "scaling efficiency lo",
        "scaling efficiency hi",
        f"{EXPOSED} n",
        "method",
    ]
    display = {
        "samples/s": _interval("samples/s", "samples/s lo", "samples/s hi"),
        "speed-up": _speedup_text,
        "scaling efficiency": _interval(
            "scaling efficiency", "scaling efficiency lo", "scaling efficiency hi"
        ),
        "verdict": _verdict_cell,
        EXPOSED: _exposed_text(),
    }
    base = next((r for r in rows if r["baseline"]), None)
    notes = [
        "speed-up = samples/s ÷ the line's first row's (the smallest world size; one common "
        "baseline where that "
        "size has one configuration), with its 95% CI as in the sweep table; scaling efficiency = "
        "speed-up × "
        "n0 ÷ n, the same interval scaled: 1 is linear scaling."
    ]
    if any(r.get(f"{EXPOSED} n") is not None for r in rows):
        notes.append(EXPOSED_NOTE)
    if base is not None and base.get("sync") == "local":
        notes.append(
            "The baseline trains without DDP (sync=local): the efficiency counts DDP's own cost at "
            "one rank "
            "as a scaling loss, as the ViT study does."
        )
    single = [
        f"`{r['configuration']}` ({r['world size']} ranks)"
        for r in rows
        if r["verdict"] == NO_VERDICT
    ]
    warnings = (
        [
            f"one run per world size behind {', '.join(single)}: no verdict; an interval from one "
            "run holds the "
            "noise inside it, not the spread between runs, which can be larger. Run repeats=3 or "
            "more."
        ]
        if single
        else []
    )
    family = next(
        (r["speedup"]["family"] for r in rows if r.get("speedup") and r["speedup"].get("family")),
        None,
    )
    if family:
        notes.append(f"Verdicts as in the sweep table, {family}.")
    return Table(
        columns,
        rows,
        title=title,
        notes=notes + _link_notes(entries),
        display=display,
        warnings=warnings,
        csv_only=[
            "samples/s lo",
            "samples/s hi",
            "speed-up lo",
            "speed-up hi",
            "scaling efficiency lo",
            "scaling efficiency hi",
            f"{EXPOSED} n",
            "method",
        ],
    )
