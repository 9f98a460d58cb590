"""Cross-check of the tool's overlap figure with Holistic Trace Analysis (HTA), for
profile.enabled=true runs.

HTA (`pip install HolisticTraceAnalysis`, optional: imported only here) reads the per-rank
torch.profiler traces (trace.rank<N>.json in the run directory) and computes, per rank, the share of
communication-kernel time that computation kernels overlap (get_comm_comp_overlap) and the GPU's
idle / compute / non-compute time (get_temporal_breakdown). The tool's own figure is DDP's reducer:
overlap_s / comm time_s. Both are "share of the communication hidden by compute"; HTA's comes from
GPU kernels, ours from the reducer's timestamps.

HTA works on GPU kernels only: a CPU-only trace (gloo on CPU) has none, and HTA's overlap is 0/0
there. That is reported as such, never as a number."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import re
from pathlib import Path

from base.record import Record
from base.record_types import TrainResult
from diagnosis.view import as_record

INSTALL = "pip install HolisticTraceAnalysis (optional dependency, see requirements-optional.txt)"


def trace_files(run_dir: str | Path) -> dict[int, str]:
    found = {}
    for p in Path(run_dir).glob("trace.rank*.json"):
        m = re.search(r"trace\.rank(\d+)\.json$", p.name)
        if m:
            found[int(m.group(1))] = str(p)
    return dict(sorted(found.items()))


def has_gpu_kernels(path: str) -> bool:
    with open(path) as f:
        events = json.load(f).get("traceEvents") or []
    return any(e.get("cat") == "kernel" for e in events)


def tool_overlap(record: Record) -> float | None:
    c = record.result.comm if isinstance(record.result, TrainResult) else None
    if c is None:
        return None
    return c.overlap_s / c.time_s if c.time_s and c.overlap_s is not None else None


def cross_check(record: Record | dict, run_dir: str | Path | None = None) -> dict:
    record = as_record(record)
    run_dir = Path(run_dir or record.job.output_dir or ".")
    files = trace_files(run_dir)
    out = {
        "traces": len(files),
        "tool_overlap": tool_overlap(record),
        "tool_method": "DDP reducer: overlap with backward compute / comm time (probe steps)",
    }
    if not files:
        return {**out, "status": "no_traces", "note": f"no trace.rank*.json in {run_dir}"}
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return {
            **out,
            "status": "unavailable",
            "note": f"HolisticTraceAnalysis is not installed ({INSTALL})",
        }
    if not any(has_gpu_kernels(p) for p in files.values()):
        return {
            **out,
            "status": "cpu_only",
            "note": "HTA cannot read these traces: they hold CPU operators only (no GPU kernels), "
            "and HTA's "
            "overlap and temporal breakdown are computed from GPU kernels",
        }
    quiet = io.StringIO()
    logging.getLogger("hta").setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            ta = TraceAnalysis(trace_files=files, trace_dir=str(run_dir))
            overlap = ta.get_comm_comp_overlap(visualize=False)
            breakdown = ta.get_temporal_breakdown(visualize=False)
    except Exception as e:  # noqa: BLE001 - HTA's own failure, reported with its words
        return {
            **out,
            "status": "failed",
            "note": f"HTA failed on these traces: {type(e).__name__}: {e}",
        }
    per_rank = []
    for row in overlap.to_dict("records"):
        b = next((x for x in breakdown.to_dict("records") if x["rank"] == row["rank"]), {})
        pct = row.get("comp_comm_overlap_pctg")
        per_rank.append(
            {
                "rank": int(row["rank"]),
                "overlap": pct / 100 if pct is not None and math.isfinite(pct) else None,
                "idle_pct": b.get("idle_time_pctg"),
                "compute_pct": b.get("compute_time_pctg"),
                "non_compute_pct": b.get("non_compute_time_pctg"),
            }
        )
    values = [r["overlap"] for r in per_rank if r["overlap"] is not None]
    out.update(
        status="ok",
        per_rank=per_rank,
        hta_overlap=sum(values) / len(values) if values else None,
        hta_method="HTA get_comm_comp_overlap (communication-kernel time overlapped by compute "
        "kernels), "
        "mean over ranks; get_temporal_breakdown for idle / compute / non-compute",
    )
    if out["hta_overlap"] is not None and out["tool_overlap"] is not None:
        out["disagreement"] = out["hta_overlap"] - out["tool_overlap"]
    if values == []:
        out["note"] = "HTA found no communication kernels in these traces (overlap undefined)"
    return out


def format_hta(h: dict) -> str:
    tool = f"{100 * h['tool_overlap']:.0f}%" if h.get("tool_overlap") is not None else "n/a"
    if h.get("status") != "ok":
        return f"HTA cross-check: {h.get('note')}; the tool's own overlap: {tool}"
    lines = [
        f"HTA cross-check over {h['traces']} rank trace(s): comm hidden by compute, HTA "
        + (f"{100 * h['hta_overlap']:.0f}%" if h.get("hta_overlap") is not None else "n/a")
        + f" vs the tool's {tool}"
        + (f" ({100 * h['disagreement']:+.0f} points)" if h.get("disagreement") is not None else "")
    ]
    for r in h["per_rank"]:
        ov = f"{100 * r['overlap']:.0f}%" if r["overlap"] is not None else "n/a"
        lines.append(
            f"  rank {r['rank']}: overlap {ov}; GPU idle {r['idle_pct']}%, compute "
            f"{r['compute_pct']}%, "
            f"non-compute {r['non_compute_pct']}%"
        )
    if h.get("note"):
        lines.append(f"  {h['note']}")
    return "\n".join(lines)
