"""What only a sweep can say: each run's top finding, and the estimates checked against the sweep's
own rows.

A checked estimate: a finding in run A recommends overrides (e.g. optim=bf16); when the sweep also
ran A's configuration with exactly those overrides changed (run B), the saving it estimated is set
beside the saving B measured, with B's interval, and the estimate's error is stated whatever it is.
Measured saving = 1 - (B's time per sample / A's), from the step-time medians, interval from
stats.ratio_ci over the two runs' per-step series."""

from __future__ import annotations

import math
from typing import Any

from base.record import Record
from base.record_types import Finding, Folded, PairGroupsResult, Saving, TrainResult
from diagnosis.run import VERSION, diagnose
from diagnosis.view import as_block, as_record, named_findings
from stats import fmt_ci, fmt_ratio, ratio_ci, time_saved, verdict
from stats.fmt import ms

IGNORED = ("hydra", "logger", "tags", "diagnose", "launcher", "scale.name")


def _stored(record: Record) -> dict | None:
    """The diagnosis the record holds (result.diagnosis, made when it was written), as its JSON
    object."""
    d = record.result.diagnosis if record.result is not None else None
    return d.to_dict() if d is not None else None


def _diagnosis(record: Record, nccl_tests: dict | None) -> dict | None:
    """The run's diagnosis: the stored one when it is of this version, else computed again."""
    stored = _stored(record)
    if (
        stored
        and stored.get("version") == VERSION
        and not stored.get("error")
        and nccl_tests is None
    ):
        return stored
    try:
        d = diagnose(record, nccl_tests=nccl_tests, hta=False)
    except Exception as e:  # noqa: BLE001 - one unreadable record is one line, not a lost sweep diagnosis
        return {"version": VERSION, "error": f"{type(e).__name__}: {e}"}
    if stored and stored.get("hta"):
        d["hta"] = stored["hta"]
    return d


def diagnose_sweep(
    entries: list,
    nccl_tests: dict | None = None,
    diagnoses: dict | None = None,
    model: bool = True,
) -> dict:
    """diagnoses: each run's diagnosis by output dir, computed before (results.seed_check recomputes
    the verdicts under many seeds, not the diagnoses). model=False: the checked estimates without
    the what-if model's saving (None), for a caller that reads only their verdicts, which come from
    the measured runs alone: the model is most of a sweep diagnosis's time (results.seed_check)."""
    from tables.table import config_labels

    labels = config_labels(entries) if entries else []
    runs = []
    for e, label in zip(entries, labels):
        if not e.ok or not e.record:
            continue
        record = as_record(e.record)
        stored = _stored(record)
        known = diagnoses.get(e.output_dir) if diagnoses is not None else None
        runs.append(
            {
                "entry": e,
                "record": record,
                "label": label,
                "num": e.num,
                "output_dir": e.output_dir,
                "diagnosis": known if known is not None else _diagnosis(record, nccl_tests),
                # what an older version of the rules said when the run was made: the checked
                # estimates' "before"
                "before": stored
                if stored is not None and stored.get("version", VERSION) < VERSION
                else None,
            }
        )
    return {
        "runs": [
            {k: v for k, v in r.items() if k not in ("entry", "record", "before")} for r in runs
        ],
        "checked": checked_estimates(runs, model=model),
        "scaling": scaling_summary(runs),
        "pair_groups": pair_groups_summary(runs),
    }


# -------------------------------------------------------------------------------- checked estimates
def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _same(x: Any, y: Any) -> bool:
    if {str(x).lower(), str(y).lower()} <= {
        "none",
        "null",
    }:  # a key's null, as a record or a command writes it
        return True
    try:
        return math.isclose(float(x), float(y))
    except (TypeError, ValueError):
        return str(x).lower() == str(y).lower()


def matches(a_config: dict, b_config: dict, recommends: dict) -> bool:
    """B is A with exactly the recommended overrides applied (group choices compare by their
    `name`)."""
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


def measured_saving(a: Record, b: Record) -> dict:
    """1 - B's time per sample / A's: step-time medians, interval from the per-step series
    (ratio_ci)."""
    ra, rb = _train(a), _train(b)
    samples = lambda r: (r.global_batch or 1) * (r.accumulate or 1)  # noqa: E731 - local
    adjust = samples(rb) / samples(ra)
    sa = (ra.series.step_time_s if ra.series is not None else None) or []
    sb = (rb.series.step_time_s if rb.series is not None else None) or []
    if sa and sb:
        r, lo, hi = ratio_ci(sa, sb)
        method = (
            "stats.ratio_ci over the two runs' per-step series (batch medians, Welch t on "
            "the log scale)"
        )
    else:
        r, lo, hi = ra.step_time_s.median / rb.step_time_s.median, None, None
        method = "ratio of step medians (no per-step series: no interval)"
    r, lo, hi = r * adjust, lo * adjust if lo else None, hi * adjust if hi else None
    return {
        "saving": time_saved(r),
        "ci_lo": time_saved(lo),
        "ci_hi": time_saved(hi),
        "speed_up": r,
        "verdict": verdict(r, lo, hi),
        "method": method,
    }


def estimates(f: Finding | Folded) -> list[dict]:
    """What a finding (or one it folded) estimated, per change: {recommends, rule: fraction/lo/hi or
    None, model: fraction/lo/hi or None}. The rule of thumb priced its own recommended change; the
    what-if model priced every fix in `predictions` (its best is the finding's recommends)."""
    s = f.saving
    out: dict[str, dict] = {}

    def slot(change: dict) -> dict:
        key = " ".join(f"{k}={v}" for k, v in change.items())
        return out.setdefault(key, {"recommends": dict(change), "rule": None, "model": None})

    if s is not None and s.source == "measured" and s.predicted is not None:
        # measured in the job (diagnose.verify): what was predicted before it is the estimate to
        # check
        p = s.predicted
        slot(f.recommends)["model" if p.get("source") == "model" else "rule"] = {
            k: p.get(k) for k in ("fraction", "lo", "hi")
        }
        for q in f.predictions:
            slot(q["change"])["model"] = {k: q.get(k) for k in ("fraction", "lo", "hi")}
        if s.rule and s.rule.get("fraction") is not None and s.rule.get("recommends"):
            slot(s.rule["recommends"])["rule"] = {
                k: s.rule.get(k) for k in ("fraction", "lo", "hi")
            }
        return list(out.values())
    if s is not None and s.source == "model":
        rule = s.rule
        if rule and rule.get("fraction") is not None and rule.get("recommends"):
            slot(rule["recommends"])["rule"] = {k: rule.get(k) for k in ("fraction", "lo", "hi")}
        for p in f.predictions:
            slot(p["change"])["model"] = {k: p.get(k) for k in ("fraction", "lo", "hi")}
        if not f.predictions and f.recommends:
            slot(f.recommends)["model"] = _interval(s)
    elif s is not None and s.fraction is not None and f.recommends:
        slot(f.recommends)["rule"] = _interval(s)
    elif s is not None and s.rule and s.rule.get("fraction") is not None and f.recommends:
        # a rule's best case, printed as a bound (diagnosis.run.bound_rules): its figure is still
        # what it said
        slot(f.recommends)["rule"] = {k: s.rule.get(k) for k in ("fraction", "lo", "hi")}
    return list(out.values())


def _interval(s: Saving) -> dict:
    return {"fraction": s.fraction, "lo": s.lo, "hi": s.hi}


def checked_estimates(runs: list[dict], model: bool = True) -> list[dict]:
    """Every estimate a run's findings (named, or folded into another) made for a change the sweep
    also ran: the rule of thumb's and the what-if model's, each with its error against the saving
    measured there. A run whose record holds a diagnosis of an older version adds that version's
    estimates as the rules' (what the rules said when the run was made), and the model prices the
    same change. model=False: no model saving (diagnose_sweep says why)."""
    rows = []
    for a in runs:
        named = named_findings(a["diagnosis"])
        found: list[Finding | Folded] = [*named, *(g for f in named for g in f.folded)]
        ests: dict[str, dict] = {}
        for f in found:
            for est in estimates(f):
                ests.setdefault(_key(est["recommends"]), {**est, "finding": f.rule})
        before = as_block(a["before"])
        for f in (before.findings if before is not None else None) or []:
            if f.first or not f.recommends or f.saving is None or f.saving.fraction is None:
                continue
            est = ests.setdefault(
                _key(f.recommends),
                {"recommends": dict(f.recommends), "rule": None, "model": None, "finding": f.rule},
            )
            est["rule"] = est["rule"] or _interval(f.saving)
        for est in ests.values():
            for b in runs:
                if b is a or not matches(a["entry"].config, b["entry"].config, est["recommends"]):
                    continue
                if model and est["model"] is None:
                    est["model"] = _model(a["record"], est["recommends"])
                m = measured_saving(a["record"], b["record"])
                rows.append(_row(a, b, {"rule": est["finding"]}, est, m))
    return rows


def _key(change: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in change.items())


def _train(record: Record) -> TrainResult:
    """A task=train record's result; an empty one for any other task (its figures all None)."""
    return record.result if isinstance(record.result, TrainResult) else TrainResult()


def _model(record: Record, change: dict) -> dict | None:
    """The what-if model's saving of `change` on this run, or None where it does not cover the
    change or the record."""
    from diagnosis.run import model_saving

    p = model_saving(record, change)
    return None if p is None else {k: p[k] for k in ("fraction", "lo", "hi")}


def _row(a: dict, b: dict, f: dict, est: dict, m: dict) -> dict:
    rule, model = est["rule"] or {}, est["model"] or {}
    inside = lambda e: (  # noqa: E731 - a local helper
        e.get("lo") is not None and e.get("hi") is not None and e["lo"] <= m["saving"] <= e["hi"]
    )
    main = model if model.get("fraction") is not None else rule
    within = m["ci_lo"] is not None and m["ci_lo"] <= main["fraction"] <= m["ci_hi"]
    return {
        "run": a["label"],
        "job": a["num"],
        "finding": f["rule"],
        "recommends": " ".join(f"{k}={v}" for k, v in est["recommends"].items()),
        "ran_as": b["label"],
        "ran_as_job": b["num"],
        "rule_estimated": rule.get("fraction"),
        "rule_error": rule["fraction"] - m["saving"] if rule.get("fraction") is not None else None,
        "model_estimated": model.get("fraction"),
        "model_lo": model.get("lo"),
        "model_hi": model.get("hi"),
        "model_error": model["fraction"] - m["saving"]
        if model.get("fraction") is not None
        else None,
        "measured_in_model_interval": inside(model) if model else None,
        "estimated": main["fraction"],
        "estimated_lo": main.get("lo"),
        "estimated_hi": main.get("hi"),
        "measured": m["saving"],
        "measured_lo": m["ci_lo"],
        "measured_hi": m["ci_hi"],
        "verdict": m["verdict"],
        "error": main["fraction"] - m["saving"],
        "within_measured_ci": within,
        "measured_in_estimated_range": inside(main),
        "method": m["method"],
    }


# ------------------------------------------------------------------------------- across world sizes
def scaling_summary(runs: list[dict]) -> list[dict] | None:
    train = [
        r
        for r in runs
        if r["entry"].task == "train"
        and _train(r["record"]).throughput is not None
        and _train(r["record"]).throughput.samples_per_s
    ]
    sizes = {_train(r["record"]).world_size for r in train}
    if len(sizes) < 2:
        return None
    train.sort(key=lambda r: (_train(r["record"]).world_size, _train(r["record"]).sync != "local"))
    base = _train(train[0]["record"])
    n0, rate0 = base.world_size, base.throughput.samples_per_s
    rows = []
    for r in train:
        res = _train(r["record"])
        top = next(iter(named_findings(r["diagnosis"])), None)
        n, rate = res.world_size, res.throughput.samples_per_s
        rows.append(
            {
                "world_size": n,
                "sync": res.sync,
                "samples_per_s": rate,
                "samples_per_s_ci": [res.throughput.samples_ci_lo, res.throughput.samples_ci_hi],
                "efficiency": rate / (rate0 * n / n0),
                "exposed_comm_s": res.comm.exposed_s if res.comm is not None else None,
                "top_finding": top.title if top else None,
                "label": r["label"],
            }
        )
    return rows


def pair_groups_summary(runs: list[dict]) -> list[dict] | None:
    """One row per pairs value; growth = time per all_reduce against the smallest pairs value, with
    a CI from the two runs' timed blocks (stats.ratio_ci) where both have them, and its verdict."""
    pairs = [
        r["record"].result
        for r in runs
        if r["entry"].task == "pair_groups"
        and isinstance(r["record"].result, PairGroupsResult)
        and r["record"].result.has("per_op_us_rank0")
    ]
    rows = sorted(
        (
            {
                "pairs": p.pairs,
                "us_per_op": p.per_op_us_rank0,
                "blocks": p.per_rank[0].block_us_per_op if p.per_rank else None,
                "per_op": p.per_op_us.to_dict() if p.per_op_us is not None else None,
                "ranks_per_cpu": p.ranks_per_cpu,
                "cpu_busy": p.cpu_busy_fraction,
                "involuntary_per_op": p.involuntary_switches / (p.world_size * p.iters),
            }
            for p in pairs
        ),
        key=lambda x: x["pairs"],
    )
    if len(rows) < 2:
        return None
    first = rows[0]
    for x in rows:
        x["growth"] = x["us_per_op"] / first["us_per_op"]
        x["growth_ci"], x["growth_verdict"] = None, None
        if x is not first and first["blocks"] and x["blocks"]:
            ratio, lo, hi = ratio_ci(
                x["blocks"], first["blocks"], independent=True
            )  # time ratio: > 1 = slower
            x["growth"], x["growth_ci"] = ratio, [lo, hi]
            x["growth_verdict"] = {"faster": "slower", "slower": "faster"}.get(
                verdict(ratio, lo, hi), "no change"
            )
    return rows


# ----------------------------------------------------------------------------------------- printing
def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _verdict(v: str) -> str:
    return v if v not in ("faster", "slower") else f"the recommended run is {v}"


def format_sweep(d: dict) -> str:
    lines = [
        f"sweep diagnosis ({len(d['runs'])} finished runs; each run's full diagnosis is in its "
        "record):"
    ]
    for r in d["runs"]:
        diag = as_block(r["diagnosis"])
        if diag is not None and diag.error:
            lines.append(f"- job {r['num']} `{r['label']}`: diagnosis unavailable ({diag.error})")
            continue
        found = named_findings(diag)
        noisy = any(f.first for f in (diag.findings if diag is not None else None) or [])
        head = f"- job {r['num']} `{r['label']}`: " + (
            f"{len(found)} finding(s)" if found else "no findings"
        )
        if noisy:
            head += f" (noise floor {_pct(diag.noise.floor if diag.noise is not None else None)})"
        if found:
            top = found[0]
            head += (
                f"; top: {top.title}; saving {_pct(top.saving.fraction if top.saving else None)}; "
                f"next: `{top.command}`"
            )
        lines.append(head)
    if d["checked"]:
        lines += [
            "",
            "checked estimates (a recommended configuration this sweep also ran; rules: the rule "
            "of thumb, "
            "model: the what-if model with its 95% interval):",
            "| run | finding | recommends | ran as | rules | model | measured [95% CI] | error "
            "rules / model "
            "| verdict |",
            "|---|---|---|---|---:|---:|---:|---:|---|",
        ]
        for c in d["checked"]:
            ci = (
                f" [{_pct(c['measured_lo'])}, {_pct(c['measured_hi'])}]"
                if c["measured_lo"] is not None
                else " (no interval)"
            )
            model = (
                _pct(c["model_estimated"])
                + (
                    f" [{_pct(c['model_lo'])}, {_pct(c['model_hi'])}]"
                    if c.get("model_lo") is not None
                    else ""
                )
                if c.get("model_estimated") is not None
                else "–"
            )
            err = lambda x: "–" if x is None else f"{100 * x:+.1f}"  # noqa: E731 - a local helper
            lines.append(
                f"| {c['run']} | {c['finding']} | {c['recommends']} | {c['ran_as']} "
                f"| {_pct(c.get('rule_estimated'))} | {model} | {_pct(c['measured'])}{ci} "
                f"| {err(c.get('rule_error'))} / {err(c.get('model_error'))} points | "
                f"{_verdict(c['verdict'])}"
                + ("" if c["within_measured_ci"] else "; estimate outside the measured interval")
                + " |"
            )
    if d["scaling"]:
        lines += ["", "scaling (efficiency against the smallest world size x n):"]
        for s in d["scaling"]:
            exposed = f"{ms(s['exposed_comm_s'])} ms" if s["exposed_comm_s"] is not None else "–"
            lines.append(
                f"- {s['world_size']} rank(s), sync={s['sync']}: {s['samples_per_s']:.4g} "
                "samples/s, "
                f"{_pct(s['efficiency'])} of ideal, exposed comm {exposed}"
                + (f"; top finding: {s['top_finding']}" if s["top_finding"] else "")
            )
    if d["pair_groups"]:
        p = d["pair_groups"]
        lines += ["", "pair groups (one curve across pairs):"]
        for x in p:
            d = x.get("per_op")
            us = (
                f"{fmt_ci(d['median'], d['ci_lo'], d['ci_hi'])} us per all_reduce (median of rank "
                "0's blocks)"
                if d
                else f"{x['us_per_op']:.1f} us per all_reduce"
            )
            lines.append(
                f"- pairs={x['pairs']}: {us}, "
                f"{x['ranks_per_cpu']:.2g} ranks per CPU, CPU busy {_pct(x['cpu_busy'])}, "
                f"{x['involuntary_per_op']:.2f} involuntary switches per op per rank"
            )
        last = p[-1]
        if last.get("growth_ci"):
            lo, hi = last["growth_ci"]
            grows = (
                f"is {fmt_ratio(last['growth'], lo, hi, 'no significant difference')}"
                if last["growth_verdict"] == "no change"
                else f"is {fmt_ratio(last['growth'], lo, hi, 'faster')} ({last['growth_verdict']}; "
                "95% CI, "
                "stats.ratio_ci over the runs' blocks)"
            )
        else:
            grows = (
                f"grows {last['us_per_op'] / p[0]['us_per_op']:.2f}x (no interval: records "
                "without timed blocks)"
            )
        lines.append(
            f"- time per all_reduce from pairs={p[0]['pairs']} to pairs={last['pairs']} {grows}, "
            "while ranks "
            f"per CPU grow {last['ranks_per_cpu'] / p[0]['ranks_per_cpu']:.2g}x"
        )
    return "\n".join(lines)
