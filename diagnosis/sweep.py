"""What only a sweep can say: each run's top finding, and the estimates checked against the sweep's own rows.

A checked estimate: a finding in run A recommends overrides (e.g. optim=bf16); when the sweep also ran A's
configuration with exactly those overrides changed (run B), the saving it estimated is set beside the saving B
measured, with B's interval, and the estimate's error is stated whatever it is. Measured saving = 1 - (B's time per
sample / A's), from the step-time medians, interval from stats.ratio_ci over the two runs' per-step series.
"""
from __future__ import annotations

import math
from typing import Any

from diagnosis.finding import ms
from stats import fmt_ci, fmt_ratio, ratio_ci, verdict

IGNORED = ("hydra", "logger", "tags", "diagnose", "launcher", "scale.name")


def _diagnosis(entry, nccl_tests: dict | None) -> dict | None:
    from diagnosis import VERSION, diagnose

    stored = entry.result.get("diagnosis")
    if stored and stored.get("version") == VERSION and not stored.get("error") and nccl_tests is None:
        return stored
    try:
        d = diagnose(entry.record, nccl_tests=nccl_tests, hta=False)
    except Exception as e:  # noqa: BLE001 - one unreadable record is one line, not a lost sweep diagnosis
        return {"version": VERSION, "error": f"{type(e).__name__}: {e}"}
    if stored and stored.get("hta"):
        d["hta"] = stored["hta"]
    return d


def diagnose_sweep(entries: list, nccl_tests: dict | None = None) -> dict:
    from results.table import config_labels

    labels = config_labels(entries) if entries else []
    runs = []
    for e, label in zip(entries, labels):
        if not e.ok or not e.record:
            continue
        runs.append({"entry": e, "label": label, "num": e.num, "output_dir": e.output_dir,
                     "diagnosis": _diagnosis(e, nccl_tests)})
    return {"runs": [{k: v for k, v in r.items() if k != "entry"} for r in runs],
            "checked": checked_estimates(runs), "scaling": scaling_summary(runs),
            "pair_groups": pair_groups_summary(runs)}


# ---------------------------------------------------------------------------------------------- checked estimates
def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _same(x: Any, y: Any) -> bool:
    if {str(x).lower(), str(y).lower()} <= {"none", "null"}:   # a key's null, as a record or a command writes it
        return True
    try:
        return math.isclose(float(x), float(y))
    except (TypeError, ValueError):
        return str(x).lower() == str(y).lower()


def matches(a_config: dict, b_config: dict, recommends: dict) -> bool:
    """B is A with exactly the recommended overrides applied (group choices compare by their `name`)."""
    fa, fb = flatten(a_config), flatten(b_config)
    for key, value in recommends.items():
        if key not in fb and f"{key}.name" not in fb:
            return False
        if not _same(fb[key] if key in fb else fb[f"{key}.name"], value):
            return False
    for key in set(fa) | set(fb):
        if key.startswith(IGNORED) or any(key == t or key.startswith(f"{t}.") for t in recommends):
            continue
        if not _same(fa.get(key), fb.get(key)):
            return False
    return True


def measured_saving(a, b) -> dict:
    """1 - B's time per sample / A's: step-time medians, interval from the per-step series (ratio_ci)."""
    ra, rb = a.result, b.result
    samples = lambda r: (r.get("global_batch") or 1) * (r.get("accumulate") or 1)  # noqa: E731 - local
    adjust = samples(rb) / samples(ra)
    sa = (ra.get("series") or {}).get("step_time_s") or []
    sb = (rb.get("series") or {}).get("step_time_s") or []
    if sa and sb:
        r, lo, hi = ratio_ci(sa, sb)
        method = "stats.ratio_ci over the two runs' per-step series (batch medians, Welch t on the log scale)"
    else:
        r, lo, hi = ra["step_time_s"]["median"] / rb["step_time_s"]["median"], None, None
        method = "ratio of step medians (no per-step series: no interval)"
    r, lo, hi = r * adjust, lo * adjust if lo else None, hi * adjust if hi else None
    return {"saving": 1 - 1 / r, "ci_lo": 1 - 1 / lo if lo else None, "ci_hi": 1 - 1 / hi if hi else None,
            "speed_up": r, "verdict": verdict(r, lo, hi), "method": method}


def checked_estimates(runs: list[dict]) -> list[dict]:
    rows = []
    for a in runs:
        for f in (a["diagnosis"] or {}).get("findings") or []:
            saving = f.get("saving") or {}
            if f.get("first") or not f.get("recommends") or saving.get("fraction") is None:
                continue
            for b in runs:
                if b is a or not matches(a["entry"].config, b["entry"].config, f["recommends"]):
                    continue
                m = measured_saving(a["entry"], b["entry"])
                est = saving["fraction"]
                within = m["ci_lo"] is not None and m["ci_lo"] <= est <= m["ci_hi"]
                in_range = saving.get("lo") is not None and saving.get("hi") is not None and \
                    saving["lo"] <= m["saving"] <= saving["hi"]
                rows.append({
                    "run": a["label"], "job": a["num"], "finding": f["rule"],
                    "recommends": " ".join(f"{k}={v}" for k, v in f["recommends"].items()),
                    "ran_as": b["label"], "ran_as_job": b["num"],
                    "estimated": est, "estimated_lo": saving.get("lo"), "estimated_hi": saving.get("hi"),
                    "measured": m["saving"], "measured_lo": m["ci_lo"], "measured_hi": m["ci_hi"],
                    "verdict": m["verdict"], "error": est - m["saving"], "within_measured_ci": within,
                    "measured_in_estimated_range": in_range, "method": m["method"]})
    return rows


# ---------------------------------------------------------------------------------------------- across world sizes
def scaling_summary(runs: list[dict]) -> list[dict] | None:
    train = [r for r in runs if r["entry"].task == "train" and (r["entry"].result.get("throughput") or {}).get(
        "samples_per_s")]
    sizes = {r["entry"].result.get("world_size") for r in train}
    if len(sizes) < 2:
        return None
    train.sort(key=lambda r: (r["entry"].result["world_size"], r["entry"].result.get("sync") != "local"))
    base = train[0]["entry"].result
    n0, rate0 = base["world_size"], base["throughput"]["samples_per_s"]
    rows = []
    for r in train:
        res = r["entry"].result
        top = next((f for f in (r["diagnosis"] or {}).get("findings") or [] if not f.get("first")), None)
        n, rate = res["world_size"], res["throughput"]["samples_per_s"]
        rows.append({"world_size": n, "sync": res.get("sync"), "samples_per_s": rate,
                     "samples_per_s_ci": [res["throughput"].get("samples_ci_lo"),
                                          res["throughput"].get("samples_ci_hi")],
                     "efficiency": rate / (rate0 * n / n0), "exposed_comm_s": (res.get("comm") or {}).get("exposed_s"),
                     "top_finding": top["title"] if top else None, "label": r["label"]})
    return rows


def pair_groups_summary(runs: list[dict]) -> list[dict] | None:
    """One row per pairs value; growth = time per all_reduce against the smallest pairs value, with a CI from the two
    runs' timed blocks (stats.ratio_ci) where both have them, and its verdict."""
    rows = sorted(({"pairs": r["entry"].result["pairs"], "us_per_op": r["entry"].result["per_op_us_rank0"],
                    "blocks": (r["entry"].result.get("per_rank") or [{}])[0].get("block_us_per_op"),
                    "per_op": r["entry"].result.get("per_op_us"),
                    "ranks_per_cpu": r["entry"].result.get("ranks_per_cpu"),
                    "cpu_busy": r["entry"].result.get("cpu_busy_fraction"),
                    "involuntary_per_op": r["entry"].result["involuntary_switches"]
                    / (r["entry"].result["world_size"] * r["entry"].result["iters"])}
                   for r in runs if r["entry"].task == "pair_groups" and "per_op_us_rank0" in r["entry"].result),
                  key=lambda x: x["pairs"])
    if len(rows) < 2:
        return None
    first = rows[0]
    for x in rows:
        x["growth"] = x["us_per_op"] / first["us_per_op"]
        x["growth_ci"], x["growth_verdict"] = None, None
        if x is not first and first["blocks"] and x["blocks"]:
            ratio, lo, hi = ratio_ci(x["blocks"], first["blocks"], independent=True)   # time ratio: > 1 = slower
            x["growth"], x["growth_ci"] = ratio, [lo, hi]
            x["growth_verdict"] = {"faster": "slower", "slower": "faster"}.get(verdict(ratio, lo, hi), "no change")
    return rows


# ---------------------------------------------------------------------------------------------- printing
def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _verdict(v: str) -> str:
    return v if v not in ("faster", "slower") else f"the recommended run is {v}"


def format_sweep(d: dict) -> str:
    lines = [f"sweep diagnosis ({len(d['runs'])} finished runs; each run's full diagnosis is in its record):"]
    for r in d["runs"]:
        diag = r["diagnosis"] or {}
        if diag.get("error"):
            lines.append(f"- job {r['num']} `{r['label']}`: diagnosis unavailable ({diag['error']})")
            continue
        found = [f for f in diag.get("findings") or [] if not f.get("first")]
        noisy = any(f.get("first") for f in diag.get("findings") or [])
        head = f"- job {r['num']} `{r['label']}`: " + (f"{len(found)} finding(s)" if found else "no findings")
        if noisy:
            head += f" (noise floor {_pct((diag.get('noise') or {}).get('floor'))})"
        if found:
            top = found[0]
            s = top.get("saving") or {}
            head += f"; top: {top['title']}; saving {_pct(s.get('fraction'))}; next: `{top['command']}`"
        lines.append(head)
    if d["checked"]:
        lines += ["", "checked estimates (a recommended configuration this sweep also ran):",
                  "| run | finding | recommends | ran as | estimated | measured [95% CI] | error | verdict |",
                  "|---|---|---|---|---:|---:|---:|---|"]
        for c in d["checked"]:
            ci = (f" [{_pct(c['measured_lo'])}, {_pct(c['measured_hi'])}]" if c["measured_lo"] is not None else
                  " (no interval)")
            lines.append(f"| {c['run']} | {c['finding']} | {c['recommends']} | {c['ran_as']} | {_pct(c['estimated'])} "
                         f"| {_pct(c['measured'])}{ci} | {100 * c['error']:+.1f} points | {_verdict(c['verdict'])}"
                         + ("" if c["within_measured_ci"] else "; estimate outside the measured interval") + " |")
    if d["scaling"]:
        lines += ["", "scaling (efficiency against the smallest world size x n):"]
        for s in d["scaling"]:
            exposed = f"{ms(s['exposed_comm_s'])} ms" if s["exposed_comm_s"] is not None else "–"
            lines.append(f"- {s['world_size']} rank(s), sync={s['sync']}: {s['samples_per_s']:.4g} samples/s, "
                         f"{_pct(s['efficiency'])} of ideal, exposed comm {exposed}"
                         + (f"; top finding: {s['top_finding']}" if s["top_finding"] else ""))
    if d["pair_groups"]:
        p = d["pair_groups"]
        lines += ["", "pair groups (one curve across pairs):"]
        for x in p:
            d = x.get("per_op")
            us = (f"{fmt_ci(d['median'], d['ci_lo'], d['ci_hi'])} us per all_reduce (median of rank 0's blocks)" if d
                  else f"{x['us_per_op']:.1f} us per all_reduce")
            lines.append(f"- pairs={x['pairs']}: {us}, "
                         f"{x['ranks_per_cpu']:.2g} ranks per CPU, CPU busy {_pct(x['cpu_busy'])}, "
                         f"{x['involuntary_per_op']:.2f} involuntary switches per op per rank")
        last = p[-1]
        if last.get("growth_ci"):
            lo, hi = last["growth_ci"]
            grows = (f"is {fmt_ratio(last['growth'], lo, hi, 'no significant difference')}"
                     if last["growth_verdict"] == "no change" else
                     f"is {fmt_ratio(last['growth'], lo, hi, 'faster')} ({last['growth_verdict']}; 95% CI, "
                     "stats.ratio_ci over the runs' blocks)")
        else:
            grows = f"grows {last['us_per_op'] / p[0]['us_per_op']:.2f}x (no interval: records without timed blocks)"
        lines.append(f"- time per all_reduce from pairs={p[0]['pairs']} to pairs={last['pairs']} {grows}, while ranks "
                     f"per CPU grow {last['ranks_per_cpu'] / p[0]['ranks_per_cpu']:.2g}x")
    return "\n".join(lines)
