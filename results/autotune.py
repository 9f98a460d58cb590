"""Autotune's three stages, read from run records: which candidates the search found, which one the
re-measurement selects, and whether fresh runs confirm it against the default config.

The search's best value is its luckiest sample, and picking the best re-measured candidate repeats
that bias (the winner's curse), so selection only ranks candidates and the verdict comes from fresh
confirmation runs alone (docs/methods.md, docs/experiments.md). The what-if model prunes the trials
it rules out with confidence before they run. The sweeper that launches the stages is
hydra_plugins/ddp_comm_autotune; this module never measures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import stats
from tables.aggregate import run_log, run_round
from results.callbacks import SweepTable
from tables.entries import Entry, override_items
from stats.family import Row, family_verdicts
from stats.runs import compare_runs
from stats.verdict import FASTER, SLOWER

STAGE_KEY = "autotune.stage"
MODEL = "model"
SELECT = "select"
CONFIRM = "confirm"
RESULT_JSON = "autotune.json"
RESULT_MD = "autotune.md"
OPTUNA_RESULTS = (
    "optimization_results.yaml"  # hydra-optuna-sweeper's file; rewritten with the confirmed winner
)
OBJECTIVE = "samples/s"


def parse_value(text: str | None) -> Any:
    """An override's value as Hydra reads it ("True" and "true" alike, "25" an int), so candidates
    compare by value."""
    if text is None:
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(f"k={text}").value()
    except Exception:  # noqa: BLE001 - a value Hydra's grammar refuses is compared as typed
        return text


def hydra_value(value: Any) -> str:
    """A value written back as an override Hydra parses to the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


@dataclass
class Candidate:
    """One point of the search space: the searched keys and their values."""

    keys: list[str]
    values: tuple
    search: list[float] = field(
        default_factory=list
    )  # the objective of each search run of this point

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={hydra_value(v)}" for k, v in zip(self.keys, self.values)]

    @property
    def label(self) -> str:
        return " ".join(self.overrides)


def point_of(entry: Entry, keys: list[str], defaults: dict[str, Any]) -> tuple:
    items = override_items(entry.overrides)
    return tuple(parse_value(items[k]) if k in items else defaults.get(k) for k in keys)


def top_candidates(
    search: Iterable[Entry], keys: list[str], defaults: dict[str, Any], top_k: int
) -> list[Candidate]:
    """The top_k distinct search points other than the default, best median search objective
    first."""
    points: dict[tuple, Candidate] = {}
    for e in search:
        value = e.value(OBJECTIVE) if e.ok else None
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        values = point_of(e, keys, defaults)
        points.setdefault(values, Candidate(keys, values)).search.append(float(value))
    default = tuple(defaults.get(k) for k in keys)
    ranked = sorted(
        (c for v, c in points.items() if v != default), key=lambda c: -_median(c.search)
    )
    return ranked[:top_k]


def default_candidate(
    keys: list[str], defaults: dict[str, Any], search: Iterable[Entry] = ()
) -> Candidate:
    values = tuple(defaults.get(k) for k in keys)
    c = Candidate(keys, values)
    for e in search:
        if (
            e.ok
            and point_of(e, keys, defaults) == values
            and isinstance(e.value(OBJECTIVE), (int, float))
        ):
            c.search.append(float(e.value(OBJECTIVE)))
    return c


def stage_plan(
    candidates: list[Candidate], fixed: list[str], repeats: int, stage: str, seed: int = 0
) -> list[list[str]]:
    """Job overrides of a re-measurement stage: every candidate once per round (`repeat=r`, so the
    analysis can pair them by round), `repeats` rounds, each round's order shuffled with `seed`
    (tables.sweep_order.round_order)."""
    from tables.sweep_order import round_order

    jobs = [
        [*fixed, f"{STAGE_KEY}={stage}", f"repeat={r}", *c.overrides]
        for r in range(repeats)
        for c in candidates
    ]
    return [jobs[i] for i in round_order(len(jobs), repeats, seed)]


def _runs_of(entries: list[Entry], c: Candidate) -> tuple[list[float], list]:
    """(log samples/s, round) of each finished run of candidate c; the stage's jobs set every
    searched key."""
    runs = [e for e in entries if e.ok and point_of(e, c.keys, {}) == c.values]
    logs = [(run_log(e, True), run_round(e)) for e in runs]
    logs = [(v, r) for v, r in logs if v is not None]
    return [v for v, _ in logs], [r for _, r in logs]


def _rows(
    entries: list[Entry], candidates: list[Candidate], noise: float, level: float, method: str
) -> list[dict]:
    """Each candidate's samples/s (geometric mean over runs, t interval) and its comparison with the
    default (candidates[0]), judged as one family by `method`."""
    runs = [_runs_of(entries, c) for c in candidates]
    rows: list[dict[str, Any]] = []
    for c, (logs, _) in zip(candidates, runs):
        row: dict[str, Any] = {
            "configuration": c.label,
            "params": dict(zip(c.keys, c.values)),
            "overrides": c.overrides,
            "runs": len(logs),
            "search samples/s": c.search,
            "default": c is candidates[0],
        }
        if logs:
            agg = stats.run_level(logs, level)
            row.update(
                {
                    "samples/s": agg["value"],
                    "ci": [agg["ci_lo"], agg["ci_hi"]],
                    "run samples/s": agg["run_values"],
                }
            )
        rows.append(row)
    measured = [i for i, (logs, _) in enumerate(runs) if logs]
    if 0 in measured and len(measured) > 1:
        table = [
            Row(candidates[i].label, runs[i][0], runs[i][1] if None not in runs[i][1] else None)
            for i in measured
        ]
        for i, v in zip(measured, family_verdicts(table, 0, noise, level, method)):
            if v is not None:
                rows[i].update(_comparison(v))
    return rows


def _comparison(v: dict) -> dict:
    return {
        "speed-up": v["ratio"],
        "speed-up CI": [v["ci_lo"], v["ci_hi"]],
        "verdict": v["verdict"],
        "vs default": stats.fmt_ratio(v["ratio"], v["ci_lo"], v["ci_hi"], v["verdict"]),
        "method": v["method"],
        "family": v.get("family"),
        "notes": v.get("notes") or [],
    }


def select(
    entries: list[Entry], candidates: list[Candidate], *, noise: float, level: float = 0.95
) -> dict[str, Any]:
    """The selection stage: rows as in _rows (Benjamini-Hochberg over the candidates), and the
    chosen candidate: the highest samples/s among those called faster than the default, or None."""
    rows = _rows(entries, candidates, noise, level, "fdr_bh")
    faster = [r for r in rows if r.get("verdict") == FASTER]
    chosen = max(faster, key=lambda r: r["samples/s"])["configuration"] if faster else None
    return {"rows": rows, "chosen": chosen}


def conclude(
    entries: list[Entry],
    candidates: list[Candidate],
    *,
    noise: float,
    level: float = 0.95,
    search_trials: int = 0,
    confirm: list[Entry] | None = None,
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The answer: the selection stage over `entries` (their autotune.stage=select runs), then, when
    it chose a candidate, the confirmation on fresh runs (`confirm`, autotune.stage=confirm): its
    verdict alone decides."""
    picked = [e for e in entries if override_items(e.overrides).get(STAGE_KEY, SELECT) != CONFIRM]
    fresh = (
        confirm
        if confirm is not None
        else [e for e in entries if override_items(e.overrides).get(STAGE_KEY) == CONFIRM]
    )
    sel = select(picked, candidates, noise=noise, level=level)
    rows = sel["rows"]
    base = rows[0]
    out: dict[str, Any] = {
        "keys": candidates[0].keys,
        "rows": rows,
        "noise": noise,
        "level": level,
        "search_trials": search_trials,
        "repeats": max((r["runs"] for r in rows), default=0),
        "chosen": sel["chosen"],
        "confirmation": None,
        "winner": None,
        "recommended": None,
        "model": model,
    }
    measured = [r for r in rows if "samples/s" in r]
    if not measured or "samples/s" not in base:
        out["conclusion"] = (
            "no verdict: the default config has no finished re-measured run"
            if measured
            else "no verdict: no re-measured run finished"
        )
        return out
    default = f"the default ({base['configuration']})"
    out["recommended"] = base["configuration"]
    if sel["chosen"] is None:
        best = max(
            (r for r in measured if not r["default"] and "vs default" in r),
            key=lambda r: r["samples/s"],
            default=None,
        )
        out["conclusion"] = f"no candidate was faster than {default} when re-measured: keep it" + (
            f" (best candidate {best['configuration']}: {best['vs default']})" if best else ""
        )
        return out
    chosen = next(c for c in candidates if c.label == sel["chosen"])
    out["winner"] = chosen.label
    b_logs, b_rounds = _runs_of(fresh, candidates[0])
    c_logs, c_rounds = _runs_of(fresh, chosen)
    if not b_logs or not c_logs:
        out["conclusion"] = (
            f"selected {chosen.label}, but its confirmation on fresh runs did not finish: keep "
            f"{default}"
        )
        return out
    s = compare_runs(
        b_logs,
        c_logs,
        b_rounds if None not in b_rounds else None,
        c_rounds if None not in c_rounds else None,
        level=level,
        noise=noise,
    )
    conf = {
        "configuration": chosen.label,
        "runs": [len(b_logs), len(c_logs)],
        "speed-up": s.ratio,
        "speed-up CI": [s.ci_lo, s.ci_hi],
        "verdict": s.verdict,
        "vs default": stats.fmt_ratio(s.ratio, s.ci_lo, s.ci_hi, s.verdict),
        "method": s.method,
        "samples/s": stats.run_level(c_logs, level)["value"],
        "repeats_needed": s.repeats_needed,
    }
    out["confirmation"] = conf
    if s.verdict == FASTER:
        out["recommended"] = chosen.label
        out["conclusion"] = (
            f"winner {chosen.label}: samples/s {conf['vs default']} vs {default}, confirmed on "
            "fresh "
            f"runs; use it with: {' '.join(chosen.overrides)}"
        )
    else:
        out["conclusion"] = (
            f"selected {chosen.label}, but fresh runs did not confirm it: {conf['vs default']} vs "
            f"{default} ({stats.verdict_text(s.verdict, noise, s.repeats_needed)}): keep the "
            "default"
        )
    return out


class Pruner:
    """The what-if model's view of the search: from the default config's own run, which trials it
    rules out."""

    def __init__(
        self, entry: Entry | None, keys: list[str], defaults: dict[str, Any], noise: float
    ):
        self.keys, self.defaults, self.noise = keys, defaults, noise
        self.entry = entry
        self.skipped: list[dict[str, Any]] = []
        self.kept: list[
            dict[str, Any]
        ] = []  # the trials that ran, with the model's prediction where it made one
        self.measured = 0
        self.profile, self.why = None, None
        if entry is None or not entry.ok or entry.record is None:
            self.why = "the default config's model run did not finish"
            return
        from diagnosis.run import (
            model_profile,
        )  # the diagnosis's rule for when the model can price a change

        self.profile, self.why = model_profile(entry.record)
        throughput = entry.train.throughput if entry.train is not None else None
        self.samples_per_s = throughput.samples_per_s if throughput is not None else None

    def change(self, overrides: list[str]) -> dict[str, Any]:
        """The searched keys a trial sets away from the default, as the model's knobs."""
        items = override_items(overrides)
        out = {}
        for k in self.keys:
            if k in items and parse_value(items[k]) != self.defaults.get(k):
                out[k] = hydra_value(parse_value(items[k]))
        return out

    def rules_out(self, overrides: list[str]) -> dict[str, Any] | None:
        """The prediction that rules this trial out, or None (measure it)."""
        if self.profile is None:
            self.measured += 1
            return None
        from whatif.api import predict, ruled_out
        from whatif.step import KNOB_ALIASES

        change = self.change(overrides)
        p = None
        if change and all(k in KNOB_ALIASES for k in change):
            try:
                p = predict(self.profile, change, samples=400)
            except Exception:  # noqa: BLE001 - a value the model refuses: measure it
                p = None
        row = {"overrides": list(overrides), "change": change}
        if p is not None:
            rate = self.samples_per_s or p.samples_per_s / (p.speedup or 1.0)
            row.update(
                {
                    "speed-up": p.speedup,
                    "speed-up CI": [p.speedup_lo, p.speedup_hi],
                    "objective": rate * p.speedup_hi if p.speedup_hi is not None else None,
                    "dominant": p.dominant,
                }
            )
        if p is None or not ruled_out(p, self.noise):
            self.measured += 1
            self.kept.append(row)
            return None
        self.skipped.append(row)
        return row

    def summary(self) -> dict[str, Any]:
        return {
            "job": self.entry.num if self.entry is not None else None,
            "measured": self.measured,
            "skipped": len(self.skipped),
            "pruned": self.skipped,
            "ran": self.kept,
            "noise": self.noise,
            "unavailable": self.why,
            "rule": "skipped when the model's typical speed-up over the default has its whole 95% "
            "interval below "
            "1 - compare.noise (whatif.api.prune, predicted from the default config's run); the "
            "search "
            "is told the upper end of that interval x the default's samples/s",
        }


def nothing_to_select(
    default: Candidate,
    search_trials: int,
    noise: float,
    model: dict[str, Any] | None = None,
    level: float = 0.95,
) -> dict[str, Any]:
    """The answer when no search trial other than the default finished (or the model ruled every one
    out)."""
    skipped = (model or {}).get("skipped") or 0
    why = (
        f"the what-if model ruled out {skipped} of the {search_trials} search trials and no other "
        "finished"
        if skipped
        else "no search trial other than the default config finished"
    )
    return {
        "keys": default.keys,
        "rows": [],
        "noise": noise,
        "level": level,
        "search_trials": search_trials,
        "repeats": 0,
        "chosen": None,
        "confirmation": None,
        "winner": None,
        "recommended": default.label,
        "model": model,
        "conclusion": f"{why}: nothing to select, keep the default ({default.label})",
    }


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if s else float("nan")


def markdown(result: dict[str, Any]) -> str:
    model = result.get("model") or {}
    pruned = ""
    if model.get("skipped") is not None:
        pruned = (
            f" The what-if model, from the default config's run (job {model.get('job')}), ruled "
            "out "
            f"{model['skipped']} of them before they ran (their whole predicted 95% interval below "
            "the default "
            f"by more than {result['noise']:.0%}); {model['measured']} ran."
            if model.get("unavailable") is None
            else f" No trial was skipped: {model['unavailable']}."
        )
    lines = [
        f"Autotune: {result['search_trials']} search trials (one run each); the default and the "
        "top candidates "
        f"re-measured {result['repeats']}x in rounds to select one (the search's best is the "
        "luckiest sample); "
        f"the selected candidate confirmed against the default on fresh runs.{pruned}",
        "",
        f"| configuration | search samples/s | selection samples/s ({result['level']:.0%} CI) | "
        "runs "
        "| vs default (selection) |",
        "|---|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        search = ", ".join(f"{v:.4g}" for v in r["search samples/s"]) or "–"
        measured = stats.fmt_ci(r["samples/s"], *r["ci"]) if "samples/s" in r else "–"
        vs = "baseline" if r["default"] else r.get("vs default", "–")
        if r.get("verdict") in (FASTER, SLOWER):
            vs += f", {r['verdict']}"
        lines.append(
            f"| {r['configuration']}{' (default)' if r['default'] else ''} | {search} | {measured} "
            f"| {r['runs']} | {vs} |"
        )
    method = next((r for r in result["rows"] if r.get("method")), None)
    if method:
        lines += [
            "",
            f"Selection: speed-up = samples/s ÷ the default's; CI: {method['method']}; verdicts as "
            "in the "
            f"sweep table (faster only when the whole CI lies above 1 + {result['noise']:.0%}), "
            f"{method.get('family') or 'Benjamini-Hochberg'}.",
        ]
    conf = result.get("confirmation")
    if conf:
        lines += [
            "",
            f"Confirmation on fresh runs ({conf['runs'][0]} of the default, {conf['runs'][1]} of "
            f"{conf['configuration']}): {conf['vs default']}, {conf['verdict']} "
            f"({conf['method']}).",
        ]
    for p in model.get("pruned") or []:
        lo, hi = p["speed-up CI"]
        change = " ".join(f"{k}={v}" for k, v in p["change"].items())
        lines.append(
            f"- skipped {change}: predicted {p['speed-up']:.2f}x [{lo:.2f}, {hi:.2f}] of the "
            "default's "
            f"samples/s ({p['dominant']} dominates)"
        )
    lines += ["", f"**{result['conclusion']}**"]
    return "\n".join(lines) + "\n"


def write(sweep_dir: Path, result: dict[str, Any]) -> None:
    """autotune.json / .md, and Optuna's optimization_results.yaml rewritten to name the confirmed
    winner."""
    from omegaconf import OmegaConf

    (sweep_dir / RESULT_JSON).write_text(json.dumps(result, indent=2, default=str))
    (sweep_dir / RESULT_MD).write_text(markdown(result))
    optuna = sweep_dir / OPTUNA_RESULTS
    search = OmegaConf.to_container(OmegaConf.load(optuna)) if optuna.is_file() else {}
    best = (
        next((r for r in result["rows"] if r["configuration"] == result["recommended"]), None) or {}
    )
    confirmed = {
        "name": "optuna+confirm",
        "best_params": best.get("params"),
        "best_value": best.get("samples/s"),
        "best_value_ci": best.get("ci"),
        "vs_default": best.get("vs default", "baseline" if best else None),
        "conclusion": result["conclusion"],
        "search_best_params": search.get("best_params"),
        "search_best_value": search.get("best_value"),
        "note": "best_*: the recommended config (the default unless the selected candidate was "
        "confirmed "
        "faster on fresh runs), its samples/s in the selection stage (geometric mean over runs) "
        "and "
        "CI; search_best_*: the luckiest search run",
    }
    OmegaConf.save(OmegaConf.create(confirmed), optuna)


class AutotuneTable(SweepTable):
    """The end-of-sweep table as in any multirun, then the autotune conclusion as the last lines,
    also when a failed job makes the table exit non-zero (conf/experiment/autotune.yaml swaps it in
    as the sweep_table callback)."""

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        from omegaconf import OmegaConf

        try:
            super().on_multirun_end(config, **kwargs)
        finally:
            path = Path(str(OmegaConf.select(config, "hydra.sweep.dir"))) / RESULT_JSON
            if path.is_file():
                print(
                    f"\n[autotune] {json.loads(path.read_text())['conclusion']}\n[autotune] "
                    "details: "
                    f"{path.with_name(RESULT_MD)}",
                    flush=True,
                )
