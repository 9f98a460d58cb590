"""Numbers a rule reads from a record, each with its interval.

The record's own intervals come first (stats.describe fields: ci_lo / ci_hi / ci_level on result.step_time_s and
result.phases, result.steady_state). Records written before those fields existed still hold the per-step series, so the
interval is computed here from the series with the same function; a figure with neither (a probe median, a DDP
reducer timer) is used as it is and every place it is printed says "no interval".
"""
from __future__ import annotations

import shlex
import statistics
from typing import Any

from results.entries import EXPOSED_MIN_N, _get, exposed_samples
from stats import describe, rel_halfwidth, steady_state
from stats.compare import NOISE

# keys a sweep sets on each of its jobs (repeats=3 runs repeat=0..2): a single run of a next command takes neither
# (repeats>1 without -m is refused)
SWEEP_ONLY = ("repeat", "repeats")
NOISY_HALFWIDTH = 0.05      # step median known to worse than +-5%: the machine (or the window) is noisy
OUTLIER_SHARE = 0.10        # more than 1 step in 10 beyond Tukey's fences
CONTENDED_BUSY = 0.90      # the host's cores at least 90% busy over the window
CONTENDED_OWN = 0.75       # ... at least 75% of them by the ranks themselves
CONTENDED_SWITCHES = 100   # ... and each rank preempted at least 100 times a second (every 10 ms or more often)
OTHER_LOAD = 0.20           # other processes used more than a fifth of the host's CPUs during the window


get = _get  # one reader of nested record fields (results/entries.py)


def sample(summary: dict | None, series: list | None) -> dict | None:
    """median, ci_lo, ci_hi, ci_level, n, source: the record's interval, else one computed from the series."""
    if summary and summary.get("ci_lo") is not None and summary.get("ci_hi") is not None:
        return {**summary, "source": "record"}
    values = [v for v in series or [] if v is not None]
    if values:
        return {**describe(values), "source": "computed from the record's per-step series"}
    if summary and summary.get("median") is not None:
        return {"median": summary["median"], "ci_lo": None, "ci_hi": None, "ci_level": None, "n": None,
                "source": "median only"}
    return None


def point(value: float | None, source: str) -> dict | None:
    """A single figure (a probe median, a reducer timer): no interval, and the reason travels with it."""
    if value is None:
        return None
    return {"median": value, "ci_lo": None, "ci_hi": None, "ci_level": None, "n": None, "source": source}


def interval_note(s: dict | None) -> str:
    if not s:
        return "not in the record"
    if s.get("ci_lo") is None:
        return f"no interval: {s.get('source', 'one figure')}"
    level, n = s.get("ci_level"), s.get("n")
    note = f"{level:.0%} interval" if level is not None else "interval"
    if n:
        note += f" over {n} steps"
    if s.get("source") and s["source"] != "record":
        note += f", {s['source']}"
    return note


def lower(s: dict | None) -> float | None:
    """The value a threshold is tested against: the interval's lower end where there is one, else the figure."""
    if not s:
        return None
    return s["ci_lo"] if s.get("ci_lo") is not None else s["median"]


class RunView:
    """One record, as the rules read it."""

    def __init__(self, record: dict, reference: dict | None = None):
        self.record = record
        self.result = record.get("result") or {}
        self.config = record.get("config") or {}
        self.env = record.get("env") or {}
        self.task = record.get("task") or self.config.get("task")
        self.world_size = int(self.result.get("world_size") or self.env.get("world_size") or 1)
        self.series = self.result.get("series") or {}
        self.step = sample(self.result.get("step_time_s"), self.series.get("step_time_s"))
        self.reference = reference      # comm.vs_microbench, or the same from an nccl-tests file

    # ------------------------------------------------------------------------------------------ figures
    def phase(self, name: str) -> dict | None:
        return sample(get(self.result, "phases", name), get(self.series, "phases", name))

    def share(self, names: tuple[str, ...]) -> dict | None:
        """The phases' share of the step, per step where the series exist (an interval of the median share), else
        the ratio of medians (no interval)."""
        phases = get(self.series, "phases") or {}
        steps = self.series.get("step_time_s") or []
        if steps and all(phases.get(n) and len(phases[n]) == len(steps) for n in names):
            shares = [sum(phases[n][i] for n in names) / t for i, t in enumerate(steps) if t]
            if shares:
                return {**describe(shares), "source": "per-step share, computed from the record's series"}
        medians = [get(self.result, "phases", n, "median") for n in names]
        if self.step and all(m is not None for m in medians) and self.step["median"]:
            return point(sum(medians) / self.step["median"], "ratio of medians")
        return None

    def exposed(self) -> dict | None:
        """The exposed communication per step: with the record's 95% interval where its samples give one, else a
        single figure that says how many samples it rests on (DDP's: probe_steps untimed steps, one by default)."""
        c = self.result.get("comm") or {}
        if c.get("exposed_s") is None:
            return None
        n = exposed_samples(self.result, self.config)
        if c.get("exposed_ci_lo") is not None and c.get("exposed_ci_hi") is not None:
            return {"median": c["exposed_s"], "ci_lo": c["exposed_ci_lo"], "ci_hi": c["exposed_ci_hi"],
                    "ci_level": 0.95, "n": n, "source": "record"}
        what = "DDP's reducer timers" if self.result.get("sync") == "ddp" else "the sync phase"
        many = f"{n} probe step{'s' if n != 1 else ''}" if n is not None and n < EXPOSED_MIN_N else "its samples"
        return {**point(c["exposed_s"], f"{what}, {many}"), "n": n}

    def fraction_of_step(self, s: dict | None) -> dict | None:
        """A figure (median and interval, in seconds) as a share of the step median."""
        if not s:
            return None
        return {**s, **{k: self.fraction(s.get(k)) for k in ("median", "ci_lo", "ci_hi")}}

    def fraction(self, seconds: float | None) -> float | None:
        step = self.step["median"] if self.step else None
        return seconds / step if seconds is not None and step else None

    # ------------------------------------------------------------------------------------------ noise
    def noise(self) -> dict:
        """How far apart two numbers of this run must be to count: the step median's relative half-width, a window
        that was still drifting, too many outliers. The floor never goes below stats' 2% noise."""
        s = self.step
        out: dict[str, Any] = {"floor": NOISE, "reasons": [], "noisy": False}
        if not s:
            out["reasons"].append("no step times in the record: noise not assessed")
            return out
        out.update(n=s.get("n"), ci_level=s.get("ci_level"), median_s=s["median"])
        if s.get("ci_lo") is not None and s["median"]:
            half = rel_halfwidth(s["median"], s["ci_lo"], s["ci_hi"])
            out["rel_halfwidth"] = half
            out["floor"] = max(out["floor"], half)
            if half > NOISY_HALFWIDTH:
                out["noisy"] = True
                out["reasons"].append(f"step median known only to +-{100 * half:.1f}% ({interval_note(s)})")
            if (s.get("ci_level") or 0) < 0.95 and s.get("n"):
                out["noisy"] = True
                out["reasons"].append(f"{s['n']} measured steps cannot give a 95% interval for the median "
                                      f"(the widest, min to max, covers {100 * s['ci_level']:.0f}%)")
        steady = self.result.get("steady_state")    # result.steady is its verdict alone (True/False/None)
        if not isinstance(steady, dict):
            steady = steady_state(self.series["step_time_s"]) if len(self.series.get("step_time_s") or []) else None
        out["steady"] = steady
        if steady and steady.get("steady") is False:
            out["noisy"] = True
            drift = abs(steady.get("drift") or 0.0)
            out["floor"] = max(out["floor"], drift)
            out["reasons"].append(f"the window was not steady: {steady.get('reason')}")
        other = self.other_load()
        if other is not None and other > OTHER_LOAD:
            out["noisy"] = True
            out["reasons"].append(f"other processes kept {100 * other:.0f}% of the host's CPUs busy during the "
                                  "window (host counters minus the ranks' own CPU time)")
        high = (s.get("outliers_high") or 0) + (s.get("outliers_low") or 0)
        if s.get("n") and high / s["n"] > OUTLIER_SHARE:
            out["noisy"] = True
            out["reasons"].append(f"{high} of {s['n']} steps are outliers (beyond 1.5 IQR)")
        return out

    def works(self) -> list[dict]:
        return [r["work"] for r in self.result.get("per_rank") or [] if r.get("work")]

    def _one_host(self) -> tuple[list[dict], int, float] | None:
        """(the ranks' window counters, cores, the ranks' own CPU share of cores x window) on one host, or None."""
        works, cores = self.works(), self.env.get("cpu_count")
        if not works or not cores or len(self.env.get("hostnames") or []) != 1 or works[0].get("host_busy") is None:
            return None
        wall = max(w["wall_s"] for w in works)
        return works, cores, sum(w["cpu_s"] for w in works) / (cores * wall) if wall else 0.0

    def other_load(self) -> float | None:
        """Share of the host's CPUs that processes other than the ranks used over the window (one host only)."""
        host = self._one_host()
        return None if host is None else max(0.0, host[0][0]["host_busy"] - host[2])

    def contention(self) -> dict | None:
        """The ranks on one CPU host fighting over its cores, from the window's counters: the cores are full
        (host_busy >= CONTENDED_BUSY), the ranks themselves fill them (>= CONTENDED_OWN of cores x wall), and the
        scheduler preempts each rank at least CONTENDED_SWITCHES times a second (another of its threads, or a peer's,
        wanted the core). None when a figure is missing or any of the three is not met."""
        host = self._one_host()
        if host is None or len(host[0]) < 2 or not host[2] or self.result.get("device") != "cpu":
            return None
        works, cores, own = host
        switches = statistics.median(w["involuntary_switches"] / w["wall_s"] for w in works if w["wall_s"])
        out = {"cores": cores, "host_busy": works[0]["host_busy"], "own": own, "switches_per_s": switches}
        contended = (out["host_busy"] >= CONTENDED_BUSY and own >= CONTENDED_OWN
                     and switches >= CONTENDED_SWITCHES)
        return out if contended else None

    # ------------------------------------------------------------------------------------------ commands
    def command(self, changes: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> str:
        """This run's command with `changes` applied (None removes a key); env: variables to prefix."""
        items: dict[str, str] = {}
        for o in self.record.get("overrides") or []:
            key = o.partition("=")[0].lstrip("+~")
            if not key.startswith("hydra.") and key not in SWEEP_ONLY:
                items[key] = o
        for key, value in (changes or {}).items():     # in place where the run set the key, else appended
            if value is None:
                items.pop(key, None)
            else:
                items[key] = f"{key}={str(value).lower() if isinstance(value, bool) else value}"
        prefix = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        # an experiment preset may sweep (hydra.sweeper.params) and is refused without -m; every key it sweeps is
        # pinned in the job's own overrides, so -m runs this one configuration
        multirun = ["-m"] if "experiment" in items else []
        cmd = " ".join(["python", "train.py", *multirun, *(shlex.quote(o) for o in items.values())])
        return f"{prefix} {cmd}" if prefix else cmd
