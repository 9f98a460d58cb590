"""The what-if table (in the sweep table's style: values with 95% intervals, digits the interval
supports, a verdict on every speed-up) and the timeline plot of one predicted step."""

from __future__ import annotations

from pathlib import Path

from tables.table import Table
from stats import fmt_ci, fmt_ratio, verdict
from whatif.api import Sweep
from whatif.quantity import interval
from whatif.step import NOT_MODELLED, Prediction

COLUMNS = [
    "configuration",
    "step ms",
    "step lo",
    "step hi",
    "samples/s",
    "samples/s lo",
    "samples/s hi",
    "speed-up",
    "speed-up lo",
    "speed-up hi",
    "verdict",
    "dominant",
    "compute ms",
    "exposed comm ms",
    "compression ms",
    "buckets",
]
VS_FIRST = "vs row 1"


def table(sweep: Sweep, noise: float = 0.02) -> Table:
    rows = []
    for p in sweep.rows:
        v = verdict(p.speedup, p.speedup_lo, p.speedup_hi, noise) if p.speedup is not None else None
        rows.append(
            {
                "configuration": p.label,
                "step ms": p.step_s * 1e3,
                "step lo": p.lo * 1e3,
                "step hi": p.hi * 1e3,
                "samples/s": p.samples_per_s,
                "samples/s lo": p.sps_lo,
                "samples/s hi": p.sps_hi,
                "speed-up": p.speedup,
                "speed-up lo": p.speedup_lo,
                "speed-up hi": p.speedup_hi,
                "verdict": v,
                "dominant": p.dominant,
                "compute ms": p.parts["compute_s"] * 1e3,
                "exposed comm ms": p.parts["exposed_comm_s"] * 1e3,
                "compression ms": p.parts["compression_s"] * 1e3,
                "buckets": len(p.buckets) if p.buckets else None,
            }
        )
    first = sweep.rows[0] if len(sweep.rows) > 1 else None
    for p, row in zip(
        sweep.rows, rows
    ):  # the swept rows against each other: each over the first, paired draws
        if first is not None:
            lo, hi = interval(p.sps_model / first.sps_model)
            ratio = p.samples_per_s / first.samples_per_s
            row.update(
                {
                    VS_FIRST: ratio,
                    f"{VS_FIRST} lo": lo,
                    f"{VS_FIRST} hi": hi,
                    f"{VS_FIRST} verdict": verdict(ratio, lo, hi, noise),
                }
            )
    display = {
        **{c: _same_decimals(rows, c) for c in ("compute ms", "exposed comm ms", "compression ms")},
        VS_FIRST: lambda r: (
            fmt_ratio(
                r[VS_FIRST], r[f"{VS_FIRST} lo"], r[f"{VS_FIRST} hi"], r[f"{VS_FIRST} verdict"]
            )
            if r.get(VS_FIRST) is not None and r is not rows[0]
            else "(the reference)"
        ),
        "step ms": lambda r: fmt_ci(r["step ms"], r["step lo"], r["step hi"]),
        "samples/s": lambda r: fmt_ci(r["samples/s"], r["samples/s lo"], r["samples/s hi"]),
        "speed-up": lambda r: (
            fmt_ratio(r["speed-up"], r["speed-up lo"], r["speed-up hi"], r["verdict"])
            if r["speed-up"] is not None
            else "-"
        ),
    }
    notes = [
        "step ms, samples/s: the model at the inputs' point values [95% prediction interval: Monte "
        "Carlo over the "
        "inputs' intervals, plus a new run's own scatter of its step median]",
        "speed-up: predicted samples/s over the prediction for the run's own configuration [95% "
        "interval of the "
        "typical speed-up: the inputs' uncertainty over paired draws, without single runs' "
        "scatter]; faster/slower "
        f"only when the interval excludes 1 and the change exceeds {noise:.0%}",
        "dominant: the largest of compute (data, forward, backward alone, DDP's copies, "
        "optimizer), exposed comm "
        "(the rest of the step: all-reduce not hidden behind backward, and compute slowed by it) "
        "and compression "
        "(bf16/fp16 casts, PowerSGD's matrix work)",
        f"not modelled: {'; '.join(NOT_MODELLED)}",
    ]
    columns = list(COLUMNS)
    if first is not None:
        at = columns.index("verdict") + 1
        columns[at:at] = [VS_FIRST, f"{VS_FIRST} lo", f"{VS_FIRST} hi", f"{VS_FIRST} verdict"]
        notes.insert(
            2,
            f"{VS_FIRST}: each row's predicted samples/s over the first row's "
            f"({first.label.strip('()')}), the swept values against each other [95% interval over "
            "paired "
            "draws]; the same verdict rule",
        )
    return Table(
        columns=columns,
        rows=rows,
        title="What-if: predicted step",
        notes=notes,
        display=display,
        csv_only=[
            "step lo",
            "step hi",
            "samples/s lo",
            "samples/s hi",
            "speed-up lo",
            "speed-up hi",
            "verdict",
            f"{VS_FIRST} lo",
            f"{VS_FIRST} hi",
            f"{VS_FIRST} verdict",
        ],
    )


def _same_decimals(rows: list[dict], column: str):
    """One precision for a column: the decimals stats.fmt.rounded gives its largest value, for every
    row."""
    values = [abs(r[column]) for r in rows if r.get(column) is not None]
    top = max(values, default=0.0)
    decimals = 0 if top >= 1000 else 1 if top >= 100 else 2 if top >= 10 else 3 if top >= 1 else 4
    return lambda r: "-" if r.get(column) is None else f"{r[column]:.{decimals}f}"


def warnings(sweep: Sweep) -> list[str]:
    """What qualifies every row of the table, each on its own line above it: a contention factor at
    its bound or not calibrated (from the profile's calibration text), a model that misses the
    measured run."""
    out = [
        f"warning: the contention calibration: {c.strip()}; every row below rests on it"
        for c in sweep.profile.contention.how.split("; ")[1:]
        if _qualifies(c)
    ]
    prof, own = sweep.profile, sweep.own
    if prof.step is not None and not own.lo <= prof.step.value <= own.hi:
        out.append(
            "warning: the model's step for the run's own configuration misses the measured step "
            "(outside "
            "its interval, above): read every row with that error"
        )
    return out


def _qualifies(clause: str) -> bool:
    return "stopped at its bound" in clause or "could not be calibrated" in clause


def header(sweep: Sweep) -> list[str]:
    prof, own = sweep.profile, sweep.own
    r = prof.record.result
    lines = [
        f"what-if from {prof.path or 'the record'}",
        f"  the run: model={prof.model} sync={prof.sync} optim={prof.optim} bucket="
        f"{'default' if prof.bucket_cap is None else f'{prof.bucket_cap:g}'} "
        f"world_size={prof.world_size} "
        f"accumulate={prof.accumulate} backend={prof.backend} "
        f"device={r.device_name or prof.device} "
        f"batch/rank={prof.batch_per_rank}",
    ]
    if prof.step is not None:
        err = (own.step_s - prof.step.value) / prof.step.value
        inside = own.lo <= prof.step.value <= own.hi
        lines.append(
            f"  measured step {prof.step.text(1e3, 'ms')}; the model for the same configuration "
            f"{fmt_ci(own.step_s * 1e3, own.lo * 1e3, own.hi * 1e3, 'ms')} ({err:+.1%}, "
            f"{'inside' if inside else 'OUTSIDE'} its interval)"
        )
    link = sweep.link or prof.link
    if link is not None:
        lines.append(f"  link: {link.describe()}")
        for n in link.notes:
            if n:
                lines.append(f"    {n}")
    lines.append(
        f"  backward alone: {prof.backward.text(1e3, 'ms')} ({prof.backward.source}); "
        f"ready times: {prof.params.how}"
    )
    how = "; ".join(c for c in prof.contention.how.split("; ") if not _qualifies(c))
    lines.append(
        f"  contention: {how}"
        + (" (see the warning above the table)" if how != prof.contention.how else "")
    )
    notes = [n for n in prof.notes if not n.startswith("CPU contention")]
    if notes:
        lines.append("  assumptions (this record):")
        lines += [f"    - {n}" for n in notes]
    return lines


def row_notes(sweep: Sweep) -> list[str]:
    out = []
    seen = set()
    for p in sweep.rows:
        for n in p.notes:
            if n not in seen:
                seen.add(n)
                out.append(n)
    return out


def plot_timeline(predictions: list[Prediction], path: str | Path, title: str = "") -> Path | None:
    """One panel per prediction: compute on one lane, each bucket's all-reduces on the lane below,
    in one colour per bucket, so the overlap (or its absence) shows."""
    preds = [p for p in predictions if p.timeline]
    if not preds:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(preds), 1, figsize=(11, 1.9 * len(preds) + 0.6), squeeze=False)
    colors = {
        "forward": "#2ca02c",
        "backward": "#9467bd",
        "optimizer": "#ffbf00",
        "data + h2d": "#8c8c8c",
        "DDP copy back": "#17becf",
        "comm hook": "#d62728",
        "no_sync micro-step": "#bcbd22",
        "forward + backward": "#9467bd",
        "micro-step": "#bcbd22",
        "copy in": "#17becf",
        "copy out": "#17becf",
    }
    lane = [
        "#1f77b4",
        "#ff7f0e",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
    ]  # buckets: none of compute's colours
    end = max(p.timeline["step_s"] for p in preds)
    for ax, p in zip(axes[:, 0], preds):
        tl = p.timeline
        for a, b, lab in tl["compute"]:
            ax.barh(
                1,
                (b - a) * 1e3,
                left=a * 1e3,
                height=0.6,
                color=colors.get(lab, "#7f7f7f"),
                edgecolor="white",
                linewidth=0.3,
            )
        for a, b, _label, k in tl["comm"]:
            ax.barh(
                0,
                (b - a) * 1e3,
                left=a * 1e3,
                height=0.6,
                color=lane[k % len(lane)],
                edgecolor="white",
                linewidth=0.3,
            )
            if (b - a) > 0.04 * end:
                ax.text((a + b) / 2 * 1e3, 0, f"b{k}", ha="center", va="center", fontsize=7)
        ax.set_yticks([0, 1], ["all-reduce", "compute"])
        ax.set_xlim(0, end * 1e3 * 1.02)
        label = p.label if len(p.label) <= 100 else p.label[:97] + "..."
        ax.set_title(
            f"{label}: {p.step_s * 1e3:.4g} ms [{p.lo * 1e3:.4g}, {p.hi * 1e3:.4g}]",
            fontsize=8,
            loc="left",
        )
    axes[-1, 0].set_xlabel(
        "ms from the step's start (one predicted step, inputs at their point values)"
    )
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=c)
        for c in ("#2ca02c", "#9467bd", "#d62728", "#17becf", "#ffbf00")
    ]
    fig.legend(
        handles,
        ["forward", "backward", "comm hook on compute", "DDP copy back", "optimizer"],
        loc="lower center",
        fontsize=7,
        ncol=5,
        frameon=False,
    )
    if title:
        fig.suptitle(title, fontsize=9, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
