"""The diagnosis as report tables (tables.table.Table): findings per run, checked estimates (the
rules' estimate and the what-if model's beside what the same sweep measured), comm efficiency and
stragglers. results/report.py writes them beside the measurement tables; diagnosis/ computes what
they show (a reader of records, as this module is)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from base.record_types import DiagnosisBlock
from comm.efficiency import not_measurable
from tables.table import Table, config_labels


def _labelled(entries: list, task: str | None = "train") -> list[tuple]:
    labels = config_labels(entries) if entries else []
    return [
        (e, label) for e, label in zip(entries, labels) if e.ok and (task is None or e.task == task)
    ]


def findings_table(entries: list, diagnoses: dict[int, dict]) -> Table:
    """Every named finding of every run, ranked within the run (noise first)."""
    rows = []
    for e, label in _labelled(entries, None):
        found = diagnoses.get(id(e))
        findings = (DiagnosisBlock.from_dict(found).findings or []) if found else []
        for i, f in enumerate(findings):
            s = f.saving
            fraction = s.fraction if s is not None else None
            rows.append(
                {
                    "configuration": label,
                    "#": 0 if f.first else i + (0 if findings[0].first else 1),
                    "finding": f.title,
                    "estimated saving": fraction,
                    "saving of": s.of if fraction is not None else None,
                    "source": f.matches.split(":")[0],
                    "next command": f.command,
                    "rule": f.rule,
                }
            )
    return Table(
        ["configuration", "#", "finding", "estimated saving", "source", "next command", "rule"],
        rows,
        title="Diagnosis: findings per run (ranked; 0 = the noise floor, said first)",
        notes=[
            "Each finding's evidence (numbers with their intervals) is in the run's record "
            "(result.diagnosis) and in `python -m diagnosis <run dir>`. Estimated saving: fraction "
            "of the "
            "step time."
        ]
        if rows
        else [],
        csv_only=["rule"],
    )


def checked_table(checked: list[dict]) -> Table:
    """Each estimate a finding made for a configuration the same sweep also ran: the rule of thumb's
    (before) and the what-if model's (after, with its 95% interval), each with its error against
    what was measured."""
    rows = [
        {
            "run": c["run"],
            "finding": c["finding"],
            "recommends": c["recommends"],
            "ran as": c["ran_as"],
            "rules estimate": c.get("rule_estimated"),
            "rules error (points)": _points(c.get("rule_error")),
            "model estimate": c.get("model_estimated"),
            "model lo": c.get("model_lo"),
            "model hi": c.get("model_hi"),
            "model error (points)": _points(c.get("model_error")),
            "measured saving": c["measured"],
            "measured lo": c["measured_lo"],
            "measured hi": c["measured_hi"],
            "measured inside model interval": c.get("measured_in_model_interval"),
            "verdict": c["verdict"],
        }
        for c in checked
    ]
    return Table(
        [
            "run",
            "finding",
            "recommends",
            "ran as",
            "rules estimate",
            "rules error (points)",
            "model estimate",
            "model lo",
            "model hi",
            "model error (points)",
            "measured saving",
            "measured lo",
            "measured hi",
            "measured inside model interval",
            "verdict",
        ],
        rows,
        title="Checked estimates: a recommended configuration the same sweep also ran, estimated "
        "before (the "
        "rules of thumb) and after (the what-if model)",
        notes=[
            "measured saving = 1 - time per sample of the recommended run / this run's (step-time "
            "medians); lo/hi: 95% batch-medians interval over the runs' steps (stats.ratio_ci); "
            "verdict: "
            "the recommended run against this one. rules: the rule of thumb the diagnosis used "
            "before the "
            "what-if model (python -m diagnosis ... prices it beside the model); model: "
            "whatif.api.saving "
            "with its 95% interval. Every estimate is listed, the bad ones too."
        ]
        + _summary(checked)
        if rows
        else [],
    )


def _points(x: float | None) -> float | None:
    return None if x is None else 100 * x


def _summary(checked: list[dict]) -> list[str]:
    """Mean absolute error of each, over the rows that have both."""
    both = [
        c for c in checked if c.get("rule_error") is not None and c.get("model_error") is not None
    ]
    if not both:
        return []
    mae = lambda k: sum(abs(c[k]) for c in both) / len(both)  # noqa: E731 - a local helper
    inside = [
        c["measured_in_model_interval"]
        for c in both
        if c.get("measured_in_model_interval") is not None
    ]
    return [
        f"Over the {len(both)} estimates made both ways: mean absolute error "
        f"{100 * mae('rule_error'):.1f} points "
        f"(rules) and {100 * mae('model_error'):.1f} points (model); the measured saving lies "
        "inside the model's "
        f"interval in {sum(inside)} of {len(inside)}."
    ]


def efficiency_table(entries: list) -> Table:
    rows = []
    for e, label in _labelled(entries):
        r = e.train
        vs = r.comm.vs_microbench if r is not None and r.comm is not None else None
        skipped = r.microbench.skipped if r is not None and r.microbench is not None else None
        if vs is None and not skipped:
            continue
        unread = not_measurable(vs)
        rows.append(
            {
                "configuration": label,
                "sync ms": 1e3 * vs.sync_s if vs else None,
                "at microbench speed ms": 1e3 * vs.achievable_s if vs else None,
                "comm efficiency": vs.efficiency if vs and not unread else None,
                "eff. lo": vs.efficiency_ci_lo if vs and not unread else None,
                "eff. hi": vs.efficiency_ci_hi if vs and not unread else None,
                "sync busbw GB/s": vs.sync_busbw_GBps if vs else None,
                "microbench busbw GB/s": vs.reference_busbw_GBps if vs else None,
                "calls": vs.calls if vs else None,
                "note": unread or skipped or "",
            }
        )
    return Table(
        [
            "configuration",
            "sync ms",
            "at microbench speed ms",
            "comm efficiency",
            "eff. lo",
            "eff. hi",
            "sync busbw GB/s",
            "microbench busbw GB/s",
            "calls",
            "note",
        ],
        rows,
        title="Gradient sync against the on-rank microbenchmark of the same calls",
        notes=[
            "After the window each rank all-reduces every size the sync sent (DDP: its buckets), "
            "alone, on "
            "the same process group; efficiency = that time / the sync's time. DDP's sync time "
            "spans the "
            "first to the last bucket, gaps for backward included: a lower bound there."
        ]
        if rows
        else [],
    )


def straggler_table(entries: list) -> Table:
    rows = []
    for e, label in _labelled(entries):
        s = e.train.straggler if e.train is not None else None
        if s is None or not s.to_dict():
            continue
        rows.append(
            {
                "configuration": label,
                "straggler rank": s.rank,
                "host": s.host,
                "extra work ms": 1e3 * s.by_s,
                "share of step": s.share_of_step,
                "mostly": s.mostly,
                "significant": s.significant,
            }
        )
    return Table(
        [
            "configuration",
            "straggler rank",
            "host",
            "extra work ms",
            "share of step",
            "mostly",
            "significant",
        ],
        rows,
        title="Stragglers: the rank the others wait for",
        notes=[
            "work before the collective = data wait + H2D + forward + backward compute, per rank; "
            "extra = "
            "the slowest rank's median minus the other ranks' median; significant when its "
            "interval clears "
            "every other rank's."
        ]
        if rows
        else [],
    )


def by_sweep(entries: list) -> dict[str, list]:
    """Entries grouped by the sweep (or run) directory they came from: estimates are checked within
    one sweep."""
    groups: dict[str, list] = defaultdict(list)
    for e in entries:
        groups[str(Path(e.output_dir).parent) if e.output_dir else "?"].append(e)
    return groups
