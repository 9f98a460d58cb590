"""Autotune's two stages, read from run records: which candidates the search found, and which one wins when they
and the default config are measured again.

The search (hydra-optuna-sweeper, one run per trial) maximises a noisy objective, so its best value is the
luckiest sample, biased upward by the very act of picking the maximum. The answer comes from the confirmation
stage instead: the top candidates and the default config each run `repeats` more times, interleaved (A B C A B C,
so drift on the machine hits every configuration alike), and the winner's speed-up over the default is the
two-level bootstrap of stats.compare_repeats over those runs only, with stats.verdict's noise threshold.
The sweeper that launches the stages is hydra_plugins/ddp_comm_autotune; this module never measures.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import stats
from results.callbacks import SweepTable
from results.table import Entry, override_items
from stats.compare import FASTER, SLOWER

STAGE_KEY = "autotune.stage"
CONFIRM = "confirm"
RESULT_JSON = "autotune.json"
RESULT_MD = "autotune.md"
OPTUNA_RESULTS = "optimization_results.yaml"  # hydra-optuna-sweeper's file; rewritten with the confirmed winner
OBJECTIVE = "samples/s"


def parse_value(text: str | None) -> Any:
    """An override's value as Hydra reads it ("True" and "true" alike, "25" an int), so candidates compare by value."""
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
    search: list[float] = field(default_factory=list)  # the objective of each search run of this point

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={hydra_value(v)}" for k, v in zip(self.keys, self.values)]

    @property
    def label(self) -> str:
        return " ".join(self.overrides)


def point_of(entry: Entry, keys: list[str], defaults: dict[str, Any]) -> tuple:
    items = override_items(entry.overrides)
    return tuple(parse_value(items[k]) if k in items else defaults.get(k) for k in keys)


def top_candidates(search: Iterable[Entry], keys: list[str], defaults: dict[str, Any], top_k: int) -> list[Candidate]:
    """The top_k distinct search points other than the default, best median search objective first."""
    points: dict[tuple, Candidate] = {}
    for e in search:
        value = e.value(OBJECTIVE) if e.ok else None
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        values = point_of(e, keys, defaults)
        points.setdefault(values, Candidate(keys, values)).search.append(float(value))
    default = tuple(defaults.get(k) for k in keys)
    ranked = sorted((c for v, c in points.items() if v != default), key=lambda c: -_median(c.search))
    return ranked[:top_k]


def default_candidate(keys: list[str], defaults: dict[str, Any], search: Iterable[Entry] = ()) -> Candidate:
    values = tuple(defaults.get(k) for k in keys)
    c = Candidate(keys, values)
    for e in search:
        if e.ok and point_of(e, keys, defaults) == values and isinstance(e.value(OBJECTIVE), (int, float)):
            c.search.append(float(e.value(OBJECTIVE)))
    return c


def confirm_plan(candidates: list[Candidate], fixed: list[str], repeats: int) -> list[list[str]]:
    """Job overrides of the confirmation stage: every candidate once per round, `repeats` rounds."""
    return [[*fixed, f"{STAGE_KEY}={CONFIRM}", *c.overrides] for _ in range(repeats) for c in candidates]


def per_sample_times(entry: Entry) -> list[float] | None:
    """Seconds per sample of each measured step (rank 0's series): the unit compare_repeats reads as time, so its
    ratio baseline/candidate is the candidate's samples/s speed-up even if batch sizes differ."""
    tp = entry.result.get("throughput") or {}
    sps, steps_per_s = tp.get("samples_per_s"), tp.get("steps_per_s")
    if not entry.ok or not sps or not steps_per_s:
        return None
    per_step = sps / steps_per_s
    series = [t for t in ((entry.result.get("series") or {}).get("step_time_s") or []) if t and t > 0]
    return [t / per_step for t in series] if series else [1.0 / sps]


def conclude(confirm: list[Entry], candidates: list[Candidate], *, noise: float,
             level: float = 0.95, search_trials: int = 0) -> dict[str, Any]:
    """The confirmation stage's answer: each configuration's samples/s with its CI, each speed-up over the default
    (candidates[0]) with CI and verdict, and the winner: the highest median of run medians among them."""
    runs = [_runs_of(confirm, c) for c in candidates]
    rows = []
    for c, mine in zip(candidates, runs):
        row: dict[str, Any] = {"configuration": c.label, "params": dict(zip(c.keys, c.values)),
                               "overrides": c.overrides, "runs": len(mine), "search samples/s": c.search,
                               "default": c is candidates[0]}
        if mine:
            agg = stats.aggregate_repeats(mine, level=level)
            row.update({"samples/s": 1.0 / agg["median"], "ci": [1.0 / agg["ci_hi"], 1.0 / agg["ci_lo"]],
                        "run samples/s": [1.0 / m for m in agg["run_medians"]]})
        if mine and runs[0] and c is not candidates[0]:
            cmp = stats.compare_repeats(runs[0], mine, level=level)
            v = stats.verdict(cmp["ratio"], cmp["ci_lo"], cmp["ci_hi"], noise)
            row.update({"speed-up": cmp["ratio"], "speed-up CI": [cmp["ci_lo"], cmp["ci_hi"]], "verdict": v,
                        "vs default": stats.fmt_ratio(cmp["ratio"], cmp["ci_lo"], cmp["ci_hi"], v),
                        "method": cmp["method"]})
        rows.append(row)
    base = rows[0]
    measured = [r for r in rows if "samples/s" in r]
    out: dict[str, Any] = {"keys": candidates[0].keys, "rows": rows, "noise": noise, "level": level,
                           "search_trials": search_trials, "repeats": max((r["runs"] for r in rows), default=0),
                           "winner": None, "recommended": None}
    if not measured or "samples/s" not in base:
        out["conclusion"] = ("no verdict: the default config has no finished re-measured run" if measured
                             else "no verdict: no re-measured run finished")
        return out
    win = max(measured, key=lambda r: r["samples/s"])
    out["winner"] = win["configuration"]
    out["recommended"] = win["configuration"] if win.get("verdict") == FASTER else base["configuration"]
    default = f"the default ({base['configuration']})"
    if win is base:
        runner_up = max((r for r in measured if r is not base and "vs default" in r), key=lambda r: r["samples/s"],
                        default=None)
        out["conclusion"] = f"{default} re-measured fastest: keep it" + (
            f" (next best {runner_up['configuration']}: {runner_up['vs default']} vs the default)" if runner_up else "")
    elif win.get("verdict") == FASTER:
        out["conclusion"] = (f"winner {win['configuration']}: samples/s {win['vs default']} vs {default}; "
                             f"use it with: {' '.join(win['overrides'])}")
    else:
        out["conclusion"] = (f"best re-measured {win['configuration']}: {win.get('vs default', 'not compared')} vs "
                             f"{default}, not significantly faster: keep the default")
    return out


def _runs_of(confirm: list[Entry], c: Candidate) -> list[list[float]]:
    """Confirmation jobs set every searched key, so no defaults are needed to place them."""
    return [t for e in confirm if point_of(e, c.keys, {}) == c.values for t in [per_sample_times(e)] if t]


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if s else float("nan")


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Autotune: {result['search_trials']} search trials (one run each), then the default and the top "
             f"candidates re-measured {result['repeats']}x, interleaved; the winner is chosen on the re-measured runs "
             "only (the search's best is the luckiest sample).", "",
             f"| configuration | search samples/s | re-measured samples/s ({result['level']:.0%} CI) | runs "
             "| vs default |",
             "|---|---:|---:|---:|---|"]
    for r in result["rows"]:
        search = ", ".join(f"{v:.4g}" for v in r["search samples/s"]) or "–"
        measured = stats.fmt_ci(r["samples/s"], *r["ci"]) if "samples/s" in r else "–"
        vs = "baseline" if r["default"] else r.get("vs default", "–")
        if r.get("verdict") in (FASTER, SLOWER):
            vs += f", {r['verdict']}"
        lines.append(f"| {r['configuration']}{' (default)' if r['default'] else ''} | {search} | {measured} "
                     f"| {r['runs']} | {vs} |")
    method = next((r["method"] for r in result["rows"] if r.get("method")), None)
    if method:
        lines += ["", f"Speed-up = samples/s ÷ the default's; CI: {method}; verdict needs the CI to exclude 1 and a "
                      f"change above {result['noise']:.0%}."]
    lines += ["", f"**{result['conclusion']}**"]
    return "\n".join(lines) + "\n"


def write(sweep_dir: Path, result: dict[str, Any]) -> None:
    """autotune.json / .md, and Optuna's optimization_results.yaml rewritten to name the confirmed winner."""
    from omegaconf import OmegaConf

    (sweep_dir / RESULT_JSON).write_text(json.dumps(result, indent=2, default=str))
    (sweep_dir / RESULT_MD).write_text(markdown(result))
    optuna = sweep_dir / OPTUNA_RESULTS
    search = OmegaConf.to_container(OmegaConf.load(optuna)) if optuna.is_file() else {}
    best = next((r for r in result["rows"] if r["configuration"] == result["recommended"]), None) or {}
    confirmed = {"name": "optuna+confirm", "best_params": best.get("params"), "best_value": best.get("samples/s"),
                 "best_value_ci": best.get("ci"), "vs_default": best.get("vs default", "baseline" if best else None),
                 "conclusion": result["conclusion"],
                 "search_best_params": search.get("best_params"), "search_best_value": search.get("best_value"),
                 "note": "best_*: the recommended config (the default unless a candidate was significantly faster on "
                         "re-measurement), its median of run medians and CI; search_best_*: the luckiest search run"}
    OmegaConf.save(OmegaConf.create(confirmed), optuna)


class AutotuneTable(SweepTable):
    """The end-of-sweep table as in any multirun, then the autotune conclusion as the last lines, also when a failed
    job makes the table exit non-zero (conf/experiment/autotune.yaml swaps it in as the sweep_table callback)."""

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        from omegaconf import OmegaConf

        try:
            super().on_multirun_end(config, **kwargs)
        finally:
            path = Path(str(OmegaConf.select(config, "hydra.sweep.dir"))) / RESULT_JSON
            if path.is_file():
                print(f"\n[autotune] {json.loads(path.read_text())['conclusion']}\n[autotune] details: "
                      f"{path.with_name(RESULT_MD)}", flush=True)
