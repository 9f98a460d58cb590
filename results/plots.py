"""PNG plots of run records (matplotlib, Agg: no display needed).

Each function takes table entries, draws only finished runs, and returns the file it wrote, or None
when the entries hold nothing to draw (e.g. no bucket variation for the bucket plot).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tables.aggregate import NO_INTERVAL, Config, compare, exposed_s, phase_median
from base.record import setting
from base.record_types import CollectiveRow, CollectivesResult, PairGroupsResult
from tables.entries import PHASES, Entry, finite, config_labels, override_items, varying_keys
from stats import fmt_ratio

_PHASE_COLORS = {
    "data": "#8c8c8c",
    "h2d": "#d62728",
    "forward": "#2ca02c",
    "backward": "#9467bd",
    "exposed comm": "#e377c2",
    "sync": "#1f77b4",
    "optimizer": "#ffbf00",
}


def _train(entries: list[Entry]) -> list[Config]:
    """task=train configurations (repeats merged) with a throughput, with their CIs and
    speed-ups."""
    return [c for c in compare(entries).configs if c.task == "train" and c.throughput]


def _metric(configs: list[Config]) -> tuple[str, str]:
    """samples/s when every configuration has it (fair across batch sizes and world sizes), else
    steps/s."""
    key = (
        "samples_per_s"
        if all(finite(c.throughput.get("samples_per_s")) for c in configs)
        else "steps_per_s"
    )
    return key, key.replace("_per_s", "/s")


def _err(c: Config, key: str) -> tuple[float, float]:
    """Error bar lengths (below, above) of the throughput's 95% CI; 0 where there is no interval."""
    v, lo, hi = c.throughput[key], c.throughput.get(key + "_lo"), c.throughput.get(key + "_hi")
    return (v - lo, hi - v) if lo is not None and hi is not None else (0.0, 0.0)


def _save(fig, path: Path) -> Path:
    """bbox_inches="tight": the legends placed outside the axes and the long tick labels are kept,
    never cut."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def _subject(configs: list[Config]) -> str:
    """What ran, for a title: the model and the ranks, e.g. "vgg11, 2 gloo ranks"."""
    first = configs[0].first
    model = setting(first.config, "model.name")
    sizes = sorted({getattr(c.first.result, "world_size", None) for c in configs} - {None})
    backend = getattr(first.result, "backend", None) or ""
    ranks = (
        (
            f"{sizes[0]} {backend} rank{'s' if sizes[0] != 1 else ''}"
            if len(sizes) == 1
            else f"{'-'.join(map(str, sizes))} {backend} ranks"
        )
        if sizes
        else ""
    )
    return ", ".join(x for x in (model, ranks) if x)


def _by(configs: list[Config]) -> str:
    """The knobs the configurations differ in, for a title ("optim and bucket"); "configuration"
    past three."""
    keys = varying_keys([c.first for c in configs])
    return " and ".join(keys) if 0 < len(keys) <= 3 else "configuration"


def _title(ax, question: str, title: str, context: str) -> None:
    """The title states the question the plot answers; the context (machine, study) goes on a second
    line."""
    ax.set_title(title or (question + (f"\n{context}" if context else "")), fontsize=10)


def throughput(entries: list[Entry], path: Path, title: str = "", context: str = "") -> Path | None:
    """Throughput per configuration with its 95% CI, the baseline highlighted, speed-up and verdict
    on each bar."""
    configs = _train(entries)
    if not configs:
        return None
    key, metric = _metric(configs)
    values = [c.throughput[key] for c in configs]
    errs = [_err(c, key) for c in configs]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(configs)))
    colors = ["#ff7f0e" if c.baseline else "#1f77b4" for c in configs]
    y = list(range(len(configs)))[::-1]
    ax.barh(
        y,
        values,
        color=colors,
        xerr=[[e[0] for e in errs], [e[1] for e in errs]],
        capsize=3,
        error_kw={"elinewidth": 1},
    )
    ax.set_yticks(y, [c.label for c in configs])
    for yi, v, e, c in zip(y, values, errs, configs):
        note = f"{v:.3g}"
        if c.speedup:
            sp = c.speedup
            note += (
                "  (no CI)"
                if sp["verdict"] == NO_INTERVAL
                else f"  ({fmt_ratio(sp['ratio'], sp['ci_lo'], sp['ci_hi'], sp['verdict'])})"
            )
        ax.text(v + e[1], yi, " " + note, va="center", fontsize=8)
    ax.set_xlabel(
        metric
        + " with 95% CI"
        + (
            "\norange: the baseline; in brackets: speed-up against it [95% CI], "
            "~1: no significant difference"
            if any(c.baseline for c in configs)
            else ""
        ),
        fontsize=9,
    )
    ax.set_xlim(0, max(v + e[1] for v, e in zip(values, errs)) * 1.6)
    _title(ax, f"{_subject(configs)}: throughput by {_by(configs)}", title, context)
    return _save(fig, path)


def _phase_ms(c: Config, phase: str) -> float:
    """Median over runs of a phase's median (ms); DDP's exposed communication is its own segment,
    taken out of backward (where the window measured it: backward waits for the all-reduces it did
    not hide)."""
    exposed = c.median(exposed_s) if c.first.train.sync == "ddp" else None
    backward = c.median(lambda e: phase_median(e, "backward")) or 0.0
    shown = min(exposed or 0.0, backward)
    if phase == "exposed comm":
        return shown * 1e3
    value = c.median(lambda e: phase_median(e, phase)) or 0.0
    return (value - shown if phase == "backward" else value) * 1e3


def phase_breakdown(
    entries: list[Entry], path: Path, title: str = "", context: str = ""
) -> Path | None:
    """Stacked per-phase medians per configuration (ms), exposed communication as its own segment,
    with the measured step median as a marker."""
    configs = [
        c
        for c in _train(entries)
        if any(e.train is not None and e.train.phases is not None for e in c.ok)
    ]
    phases = [
        p for p in PHASES if any(phase_median(e, p) is not None for c in configs for e in c.ok)
    ]
    if not configs or not phases:
        return None
    if "backward" in phases and any(_phase_ms(c, "exposed comm") > 0 for c in configs):
        phases.insert(phases.index("backward") + 1, "exposed comm")
    fig, ax = plt.subplots(figsize=(9, 2.2 + 0.45 * len(configs)), layout="constrained")
    y = list(range(len(configs)))[::-1]
    left = [0.0] * len(configs)
    for p in phases:
        widths = [_phase_ms(c, p) for c in configs]
        label = (
            "backward (compute + hidden comm)"
            if p == "backward" and "exposed comm" in phases
            else p
        )
        ax.barh(y, widths, left=left, label=label, color=_PHASE_COLORS.get(p))
        left = [a + b for a, b in zip(left, widths)]
    pts = [
        (c.step["median"] * 1e3, yi) for c, yi in zip(configs, y) if c.step and c.step.get("median")
    ]
    if pts:
        ax.scatter(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="|",
            s=300,
            color="black",
            zorder=3,
            label="step median",
        )
    ax.set_yticks(y, [c.label for c in configs])
    ax.set_xlabel(
        "median time per step (ms), rank 0"
        + ("; exposed comm: DDP's runtime stats" if "exposed comm" in phases else ""),
        fontsize=9,
    )
    fig.legend(
        loc="outside lower center", ncol=4, fontsize=8, frameon=False, markerscale=0.4
    )  # bars keep the width
    _title(ax, f"{_subject(configs)}: where a step's time goes, by {_by(configs)}", title, context)
    return _save(fig, path)


def _series(configs: list[Config], x_key: str) -> dict[str, list[Config]]:
    """Configurations grouped into lines: same overrides apart from the x axis (and world-size-bound
    keys)."""
    skip = {x_key, "world_size", "scale"} if x_key == "world_size" else {x_key}
    keys = [k for k in varying_keys([c.first for c in configs]) if k not in skip]
    lines: dict[str, list[Config]] = defaultdict(list)
    for c in configs:
        items = override_items(c.first.overrides)
        lines[" ".join(f"{k}={items.get(k)}" for k in keys if k in items) or "all"].append(c)
    return lines


def _numeric_knob(c: Config, name: str) -> float | None:
    try:
        v = float(c.first.knob(name))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _points(ax, line: list[Config], x_key: str, key: str, label: str):
    """One series with its 95% CIs as error bars; joined by a line only when it has two points or
    more."""
    pts = sorted(
        ((_numeric_knob(c, x_key), c.throughput[key], _err(c, key)) for c in line),
        key=lambda p: p[0],
    )
    return ax.errorbar(
        [p[0] for p in pts],
        [p[1] for p in pts],
        yerr=[[p[2][0] for p in pts], [p[2][1] for p in pts]],
        marker="o",
        capsize=3,
        linestyle="-" if len(pts) > 1 else "none",
        label=label,
    ), pts


def _finish_line_plot(
    fig,
    ax,
    path: Path,
    question: str,
    title: str = "",
    context: str = "",
    legend_below: bool = False,
) -> Path:
    """Legends outside the data: right of the axes, or below them (legend_below, where a second
    panel is right)."""
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if legend_below:
        ax.legend(
            fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False
        )
    else:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    _title(ax, question, title, context)
    return _save(fig, path)


def bucket_throughput(
    entries: list[Entry], path: Path, title: str = "", context: str = ""
) -> Path | None:
    """Throughput (95% CI bars) against DDP bucket size (log x), one series per other
    configuration."""
    configs = [c for c in _train(entries) if _numeric_knob(c, "bucket") is not None]
    if len({_numeric_knob(c, "bucket") for c in configs}) < 2:
        return None
    key, metric = _metric(configs)
    lines = {
        k: v
        for k, v in _series(configs, "bucket").items()
        if len({_numeric_knob(c, "bucket") for c in v}) > 1
    }
    if not lines:
        return None  # no configuration ran at two bucket sizes: no line to draw
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, line in lines.items():
        _points(ax, line, "bucket", key, name)
    ax.set_xscale("log")
    buckets = sorted({_numeric_knob(c, "bucket") for c in configs})
    ax.set_xticks(buckets, [f"{b:g}" for b in buckets])
    ax.minorticks_off()
    ax.set_xlabel("DDP bucket_cap_mb (MB)")
    ax.set_ylabel(metric + " (95% CI)")
    return _finish_line_plot(
        fig,
        ax,
        path,
        f"{_subject(configs)}: does the DDP bucket size change throughput?",
        title,
        context,
    )


def scaling(entries: list[Entry], path: Path, title: str = "", context: str = "") -> Path | None:
    """Left: samples/s (95% CI bars) against world size, one line per tables.aggregate.scaling_lines
    line (from the one-rank baseline where there is one), with its ideal line and the scaling
    efficiency written at each point. Right: exposed communication per step at each world size
    (median over repeats). The efficiencies are in the legend, not at the points, where lines that
    end close together would print them over each other."""
    from tables.aggregate import scaling_lines

    lines = scaling_lines(_train(entries))
    if not lines:
        return None
    key, metric = _metric([c for _, line in lines for _, c, _ in line])
    sizes = sorted({n for _, line in lines for n, _, _ in line})
    fig, (ax, ax_comm) = plt.subplots(1, 2, figsize=(11, 5), gridspec_kw={"width_ratios": [3, 2]})
    common = (
        len({id(line[0][1]) for _, line in lines}) == 1
    )  # every line starts at one baseline: one ideal line
    for i, (name, line) in enumerate(lines):
        name = name if len(lines) > 1 else "measured"
        drawn, pts = _points(ax, [c for _, c, _ in line], "world_size", key, name)
        n0, v0 = pts[0][0], pts[0][1]
        drawn.set_label(
            f"{name}: " + ", ".join(f"{v / (v0 * n / n0):.0%} at {n:g}" for n, v, _ in pts[1:])
            if len(pts) > 1
            else name
        )
        color = drawn[0].get_color()
        if not common or i == 0:
            ax.plot(
                sizes,
                [v0 * n / n0 for n in sizes],
                linestyle="--",
                color="grey" if common else color,
                alpha=0.6,
                label="ideal (linear from the smallest size)"
                if common or len(lines) == 1
                else f"ideal ({name})",
            )
        comm = [(n, (c.median(exposed_s) or 0.0) * 1e3) for n, c, _ in line]
        ax_comm.plot(
            [p[0] for p in comm], [p[1] for p in comm], marker="s", color=color, label=name
        )
    for a in (ax, ax_comm):
        a.set_xticks(sizes, [f"{s:g}" for s in sizes])
        a.set_xlabel("world size (ranks)")
    ax.set_ylabel(f"{metric} (95% CI)")
    ax_comm.set_ylabel("exposed communication per step (ms)")
    ax_comm.set_ylim(bottom=0)
    ax_comm.grid(alpha=0.3)
    ax_comm.set_title("exposed communication per step (median over runs)", fontsize=10)
    ax.plot([], [], " ", label="(% after a name: its scaling efficiency, against ideal)")
    return _finish_line_plot(
        fig,
        ax,
        path,
        f"{_subject([c for _, line in lines for _, c, _ in line])}: how close to "
        "linear (dashed) does throughput scale?",
        title,
        context,
        legend_below=True,
    )


def pair_groups(
    entries: list[Entry], path: Path, title: str = "", context: str = ""
) -> Path | None:
    """task=pair_groups across pairs: one curve of the time per all_reduce (rank 0 and the slowest
    rank), and the CPU's busy share on a second axis, so the growth and the contention read
    together."""
    runs = sorted(
        (
            e.result
            for e in entries
            if e.ok and isinstance(e.result, PairGroupsResult) and finite(e.result.per_op_us_rank0)
        ),
        key=lambda r: r.pairs,
    )
    if len({r.pairs for r in runs}) < 2:
        return None
    pairs = [r.pairs for r in runs]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    meds = [r.per_op_us for r in runs]
    if all(
        m is not None and m.ci_lo is not None for m in meds
    ):  # median of rank 0's timed blocks, 95% CI bars
        ax.errorbar(
            pairs,
            [m.median for m in meds],
            yerr=[[m.median - m.ci_lo for m in meds], [m.ci_hi - m.median for m in meds]],
            marker="o",
            capsize=3,
            label="rank 0 (median of 8 timed blocks, 95% CI)",
        )
    else:
        ax.plot(pairs, [r.per_op_us_rank0 for r in runs], marker="o", label="rank 0")
    ax.plot(
        pairs,
        [r.slowest_s / r.iters * 1e6 for r in runs],
        marker="o",
        linestyle=":",
        label="slowest rank",
    )
    busy = [(p, r.cpu_busy_fraction) for p, r in zip(pairs, runs) if finite(r.cpu_busy_fraction)]
    if len(busy) > 1:
        ax2 = ax.twinx()
        ax2.plot(
            [b[0] for b in busy],
            [100 * b[1] for b in busy],
            marker="^",
            color="#7f7f7f",
            alpha=0.7,
            label="CPU busy % (right)",
        )
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("ranks' CPU time / (cores x window), %")
        ax.plot(
            [], [], marker="^", color="#7f7f7f", alpha=0.7, label="CPU busy % (right axis)"
        )  # in ax's legend
    ax.set_xticks(pairs, [str(p) for p in pairs])
    ax.set_xlabel("pairs (world size = 2 x pairs)")
    ax.set_ylabel("time per all_reduce (us)")
    return _finish_line_plot(
        fig,
        ax,
        path,
        "gloo pair groups: does an all_reduce get slower as pairs are added?",
        title,
        context,
        legend_below=True,
    )


def busbw(entries: list[Entry], path: Path, title: str = "", context: str = "") -> Path | None:
    """busbw against message size for task=collectives rows, one line per op (and run). The points
    are the busbw of the median timed block, with error bars from that median's distribution-free
    interval (rows that have one); busbw falls as time grows, so the interval's slow end is the
    bar's low end."""
    runs = [
        e
        for e in entries
        if e.ok
        and isinstance(e.result, CollectivesResult)
        and e.result.rows
        and any(finite(r.busbw_GBps) and finite(r.bytes) for r in e.result.rows)
    ]
    if not runs:
        return None
    by_id = {id(e): label for e, label in zip(entries, config_labels(entries))}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    levels, bare = set(), 0
    for e, label in ((e, by_id[id(e)]) for e in runs):
        by_op: dict[str, list] = defaultdict(list)
        modes = {
            r.mode for r in e.result.rows
        }  # e.g. in-place / out-of-place, as nccl-tests reports both
        for r in e.result.rows:
            if finite(r.busbw_GBps) and finite(r.bytes) and r.bytes > 0:
                key = str(r.op or "?") + (f" {r.mode}" if len(modes) > 1 else "")
                by_op[key].append((r.bytes, *_busbw_interval(r)))
                if finite(r.time_ci_lo_us):
                    levels.add(r.time_ci_level)
                else:
                    bare += 1
        for op, pts in by_op.items():
            pts.sort()
            name = op if len(runs) == 1 else f"{op} ({label})"
            ax.errorbar(
                [p[0] for p in pts],
                [p[1] for p in pts],
                yerr=[[p[2] for p in pts], [p[3] for p in pts]],
                marker="o",
                markersize=3,
                capsize=2,
                label=name,
                linestyle="-" if len(pts) > 1 else "none",
            )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: _bytes_label(v)))
    ax.tick_params(axis="x", labelrotation=45)
    level = min((lv for lv in levels if lv), default=None)
    why = (
        "error bars: the median block's distribution-free interval"
        + (f" (level >= {level:.0%})" if level else "")
        if levels
        else ""
    )
    if bare:
        why += (
            "; " if why else ""
        ) + f"{bare} point(s) without bars: their record has no per-block interval"
    ax.set_xlabel("message size (bytes)" + (f"\n{why}" if why else ""), fontsize=9)
    ax.set_ylabel("busbw of the median block (GB/s, 1 GB = 1e9 B)")
    subject = ", ".join(sorted({str(e.result.backend) for e in runs if e.result.backend}))
    return _finish_line_plot(
        fig,
        ax,
        path,
        f"{subject or 'collectives'}: bus bandwidth by message size, per op",
        title,
        context,
    )


def _busbw_interval(row: CollectiveRow) -> tuple[float, float, float]:
    """(busbw at the median block, bar below, bar above); no bars where the row has no median or
    interval. busbw is the mean-based figure scaled by time / time_median (busbw is inversely
    proportional to the time)."""
    bw, mean_t, med = row.busbw_GBps, row.time_us, row.time_median_us
    if not (finite(mean_t) and finite(med) and med > 0):
        return bw, 0.0, 0.0
    at = bw * mean_t / med
    lo_t, hi_t = row.time_ci_lo_us, row.time_ci_hi_us
    if not (finite(lo_t) and finite(hi_t) and lo_t > 0):
        return at, 0.0, 0.0
    return at, max(at - bw * mean_t / hi_t, 0.0), max(bw * mean_t / lo_t - at, 0.0)


def _bytes_label(v: float) -> str:
    for unit, size in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if v >= size:
            return f"{v / size:g}{unit}"
    return f"{v:g}"


def standard_plots(
    entries: list[Entry], out_dir: Path, prefix: str = "", title: str = ""
) -> dict[str, Path]:
    """Every plot the entries hold data for: {name: file}. Each title is the question its plot
    answers; `title` (the machine, the study) is written under it."""
    out_dir = Path(out_dir)
    made = {}
    for name, draw in (
        ("throughput", throughput),
        ("phases", phase_breakdown),
        ("bucket", bucket_throughput),
        ("scaling", scaling),
        ("pair_groups", pair_groups),
        ("busbw", busbw),
    ):
        path = draw(entries, out_dir / f"{prefix}{name}.png", context=title)
        if path is not None:
            made[name] = path
    return made
