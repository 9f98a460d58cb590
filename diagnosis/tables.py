"""The diagnosis as report tables (results.table.Table): findings per run, checked estimates, comm efficiency and
stragglers. results/report.py writes them beside the measurement tables."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from comm.efficiency import not_measurable
from results.table import Table, config_labels


def _labelled(entries: list, task: str | None = "train") -> list[tuple]:
    labels = config_labels(entries) if entries else []
    return [(e, label) for e, label in zip(entries, labels) if e.ok and (task is None or e.task == task)]


def findings_table(entries: list, diagnoses: dict[int, dict]) -> Table:
    """Every named finding of every run, ranked within the run (noise first)."""
    rows = []
    for e, label in _labelled(entries, None):
        d = diagnoses.get(id(e)) or {}
        for i, f in enumerate(d.get("findings") or []):
            s = f.get("saving") or {}
            rows.append({"configuration": label, "#": 0 if f.get("first") else i + (0 if d["findings"][0].get("first")
                                                                                    else 1),
                         "finding": f["title"], "estimated saving": s.get("fraction"),
                         "saving of": s.get("of") if s.get("fraction") is not None else None,
                         "seed": f["seed"].split(":")[0], "next command": f["command"], "rule": f["rule"]})
    return Table(["configuration", "#", "finding", "estimated saving", "seed", "next command", "rule"], rows,
                 title="Diagnosis: findings per run (ranked; 0 = the noise floor, said first)",
                 notes=["Each finding's evidence (numbers with their intervals) is in the run's record "
                        "(result.diagnosis) and in `python -m diagnosis <run dir>`. Estimated saving: fraction of the "
                        "step time."] if rows else [], csv_only=["rule"])


def checked_table(checked: list[dict]) -> Table:
    rows = [{"run": c["run"], "finding": c["finding"], "recommends": c["recommends"], "ran as": c["ran_as"],
             "estimated saving": c["estimated"], "measured saving": c["measured"], "measured lo": c["measured_lo"],
             "measured hi": c["measured_hi"], "error (points)": 100 * c["error"], "verdict": c["verdict"],
             "estimate inside measured CI": c["within_measured_ci"]} for c in checked]
    return Table(["run", "finding", "recommends", "ran as", "estimated saving", "measured saving", "measured lo",
                  "measured hi", "error (points)", "verdict", "estimate inside measured CI"], rows,
                 title="Checked estimates: a recommended configuration the same sweep also ran",
                 notes=["measured saving = 1 - time per sample of the recommended run / this run's (step-time "
                        "medians); lo/hi: 95% batch-medians interval over the runs' steps (stats.ratio_ci); verdict: "
                        "the recommended run against this one. Every estimate is listed, the bad ones too."]
                 if rows else [])


def efficiency_table(entries: list) -> Table:
    rows = []
    for e, label in _labelled(entries):
        vs = (e.result.get("comm") or {}).get("vs_microbench")
        micro = e.result.get("microbench") or {}
        if not vs and not micro.get("skipped"):
            continue
        unread = not_measurable(vs)
        rows.append({"configuration": label,
                     "sync ms": 1e3 * vs["sync_s"] if vs else None,
                     "at microbench speed ms": 1e3 * vs["achievable_s"] if vs else None,
                     "comm efficiency": vs["efficiency"] if vs and not unread else None,
                     "eff. lo": vs.get("efficiency_ci_lo") if vs and not unread else None,
                     "eff. hi": vs.get("efficiency_ci_hi") if vs and not unread else None,
                     "sync busbw GB/s": vs["sync_busbw_GBps"] if vs else None,
                     "microbench busbw GB/s": vs["reference_busbw_GBps"] if vs else None,
                     "calls": vs["calls"] if vs else None,
                     "note": unread or micro.get("skipped") or ""})
    return Table(["configuration", "sync ms", "at microbench speed ms", "comm efficiency", "eff. lo", "eff. hi",
                  "sync busbw GB/s", "microbench busbw GB/s", "calls", "note"], rows,
                 title="Gradient sync against the on-rank microbenchmark of the same calls",
                 notes=["After the window each rank all-reduces every size the sync sent (DDP: its buckets), alone, on "
                        "the same process group; efficiency = that time / the sync's time. DDP's sync time spans the "
                        "first to the last bucket, gaps for backward included: a lower bound there."] if rows else [])


def straggler_table(entries: list) -> Table:
    rows = []
    for e, label in _labelled(entries):
        s = e.result.get("straggler")
        if not s:
            continue
        rows.append({"configuration": label, "straggler rank": s["rank"], "host": s.get("host"),
                     "extra work ms": 1e3 * s["by_s"], "share of step": s.get("share_of_step"),
                     "mostly": s.get("mostly"), "significant": s.get("significant")})
    return Table(["configuration", "straggler rank", "host", "extra work ms", "share of step", "mostly", "significant"],
                 rows, title="Stragglers: the rank the others wait for",
                 notes=["work before the collective = data wait + H2D + forward + backward compute, per rank; extra = "
                        "the slowest rank's median minus the other ranks' median; significant when its interval clears "
                        "every other rank's."] if rows else [])


def by_sweep(entries: list) -> dict[str, list]:
    """Entries grouped by the sweep (or run) directory they came from: estimates are checked within one sweep."""
    groups: dict[str, list] = defaultdict(list)
    for e in entries:
        groups[str(Path(e.output_dir).parent) if e.output_dir else "?"].append(e)
    return groups
