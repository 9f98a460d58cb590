"""Numbers a rule reads from a record, each with its interval: RunView, one record as the rules see
it.

The record's own intervals come first (stats.describe fields: ci_lo / ci_hi / ci_level on
result.step_time_s and result.phases, result.steady_state). Where the record has none but holds the
per-step series (a hand-made record) they are computed here from it the writer's way (batch medians:
none under 10 steps, whose noise is then said to be unknown); a figure with no interval (a probe
median, a DDP reducer timer, a window under 10 steps) is used as it is and every place it is printed
says "no interval".

"The step" a finding's share is of is the time per step the throughput implies
(diagnosis.accounting): the wall clock of the timed blocks, each block's slowest rank, per step;
what every rank spends, waits included. Rank 0's phase table covers only its own part of it; the
accounting names the rest."""

from __future__ import annotations

import shlex
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from base.record import Record, setting, typed_block
from base.record_types import (
    AccountingWait,
    DiagnosisBlock,
    Finding,
    PhaseSeries,
    RankWork,
    Series,
    SteadyState,
    Summary,
    TaskResult,
    TrainResult,
)
from diagnosis.accounting import account
from tables.entries import EXPOSED_MIN_N, exposed_samples
from stats import describe, rel_halfwidth, steady_state
from stats.compare import NOISE
from stats.within import RATE_MIN_BLOCKS

# keys a sweep sets on each of its jobs (repeats=3 runs repeat=0..2): a single run of a next command
# takes neither (repeats>1 without -m is refused)
SWEEP_ONLY = ("repeat", "repeats")
NOISY_HALFWIDTH = 0.05  # step median known to worse than +-5%: the machine (or the window) is noisy
OUTLIER_SHARE = 0.10  # more than 1 step in 10 beyond Tukey's fences
CONTENDED_BUSY = 0.90  # the host's cores at least 90% busy over the window
CONTENDED_OWN = 0.75  # ... at least 75% of them by the ranks themselves
CONTENDED_SWITCHES = (
    100  # ... and each rank preempted at least 100 times a second (every 10 ms or more often)
)
OTHER_LOAD = 0.20  # other processes used more than a fifth of the host's CPUs during the window


def as_record(record: Record | dict) -> Record:
    """The typed record (base.record.Record); a JSON dict (a test's, a caller's) is read through
    Record.from_dict."""
    return record if isinstance(record, Record) else Record.from_dict(record)


def as_block(diag: DiagnosisBlock | dict | None) -> DiagnosisBlock | None:
    """A diagnosis as its record type: the one a record holds (result.diagnosis), or diagnose()'s
    JSON object."""
    return typed_block(DiagnosisBlock, diag, "diagnosis")


def named_findings(diag: DiagnosisBlock | dict | None) -> list[Finding]:
    """A diagnosis's findings, the noise's left out."""
    d = as_block(diag)
    return [f for f in (d.findings if d is not None else None) or [] if not f.first]


@dataclass(frozen=True)
class Sample:
    """A figure a rule reads (seconds, or a share of the step) with its interval where it has one,
    and where it came from: every place that prints it says so (interval_note)."""

    median: float
    ci_lo: float | None = None
    ci_hi: float | None = None
    ci_level: float | None = None
    n: int | None = None
    source: str = ""
    outliers: int = 0  # steps beyond Tukey's fences, either side (a step timer's)
    wait_s: float = 0.0  # exposed communication: rank 0's wait for a late peer, taken out of it

    @classmethod
    def of(cls, d: dict, source: str) -> "Sample":
        """From a stats.describe (or a record's Summary) dict."""
        return cls(
            d["median"],
            d.get("ci_lo"),
            d.get("ci_hi"),
            d.get("ci_level"),
            d.get("n"),
            source,
            (d.get("outliers_high") or 0) + (d.get("outliers_low") or 0),
        )


@dataclass
class Noise:
    """How far apart two numbers of one run must be to count (RunView.noise), and why."""

    floor: float = NOISE  # never below stats' 2% noise
    threshold: float = NOISE  # below it nothing is called a difference (compare.noise's default)
    measured: float = 0.0  # the part of the floor the run's own noise sets
    noisy: bool = False
    reasons: list[str] = field(default_factory=list)
    n: int | None = None
    ci_level: float | None = None
    median_s: float | None = None
    rel_halfwidth: float | None = None
    of: str | None = None  # the figure rel_halfwidth is of
    steady: SteadyState | None = None

    def to_dict(self) -> dict:
        """As the diagnosis prints it (result.diagnosis.noise)."""
        return {
            k: getattr(self, k)
            for k in (
                "floor",
                "measured",
                "threshold",
                "noisy",
                "reasons",
                "n",
                "ci_level",
                "rel_halfwidth",
                "of",
            )
        }


@dataclass(frozen=True)
class Contention:
    """One CPU host's cores full of the ranks' own work (RunView.contention)."""

    cores: int
    host_busy: float  # every process, over the window
    own: float  # the ranks' CPU time / cores x wall
    switches_per_s: float  # involuntary context switches per second per rank (median)


def sample(summary: Summary | None, series: list | None) -> Sample | None:
    """The record's interval, else one computed from the series. The series is a run's consecutive
    steps (serially correlated): its interval is the batch-medians one, as the writer's, so a window
    too short for one (under 10 steps) gets none here either, not one that takes the steps as
    independent."""
    if summary is not None and summary.ci_lo is not None and summary.ci_hi is not None:
        return Sample.of(summary.to_dict(), "record")
    values = [v for v in series or [] if v is not None]
    if values:
        d = describe(values, serial_series=True)
        return Sample.of(
            d,
            "computed from the record's per-step series"
            if d["ci_lo"] is not None
            else f"{len(values)} steps: too few for an interval that allows for their serial "
            "correlation "
            "(needs 10)",
        )
    if summary is not None and summary.median is not None:
        return Sample(summary.median, source="median only")
    return None


def point(value: float | None, source: str) -> Sample | None:
    """A single figure (a probe median, a reducer timer): no interval, and the reason travels with
    it."""
    if value is None:
        return None
    return Sample(value, source=source)


def ms_text(seconds: float) -> str:
    v = 1e3 * seconds
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def interval_note(s: Sample | None) -> str:
    if s is None:
        return "not in the record"
    if s.ci_lo is None:
        return f"no interval: {s.source}"
    note = f"{s.ci_level:.0%} interval" if s.ci_level is not None else "interval"
    if s.n:
        note += f" over {s.n} steps"
    if s.source and s.source != "record":
        note += f", {s.source}"
    return note


def lower(s: Sample | None) -> float | None:
    """The value a threshold is tested against: the interval's lower end where there is one, else
    the figure."""
    if s is None:
        return None
    return s.ci_lo if s.ci_lo is not None else s.median


class RunView:
    """One record, as the rules read it."""

    def __init__(self, record: Record | dict, reference: dict | None = None):
        self.record = as_record(record)
        result = self.record.result
        self.result: TaskResult = result if result is not None else TaskResult()
        self.config = self.record.config if self.record.config is not None else {}
        self.env = self.record.env
        self.task = self.record.task or setting(self.config, "task")
        self.task = (
            "train" if self.task == "script" else self.task
        )  # the user's script: task=train's figures
        # every task's result has world_size and device; a task this tool does not know has neither
        self.world_size = int(getattr(self.result, "world_size", None) or self.env.world_size or 1)
        self.train = (
            self.result if isinstance(self.result, TrainResult) else TrainResult()
        )  # task=train's figures
        self.series = self.train.series if self.train.series is not None else Series()
        self.series_phases = self.series.phases if self.series.phases is not None else PhaseSeries()
        self.step = sample(self.train.step_time_s, self.series.step_time_s)  # rank 0's timer
        self.reference = reference  # comm.vs_microbench, or the same from an nccl-tests file
        self.acc = account(self.train) if self.task == "train" else None
        # the step every share is of: the throughput's where the record has it, else rank 0's step
        # median
        self.step_s = self.acc.step_s if self.acc else (self.step.median if self.step else None)
        layer = self.train.device_layer.kind if self.train.device_layer is not None else None
        # a GPU, or device=fake (the GPU code paths on CPU): where host-to-device copies and streams
        # exist
        self.device = getattr(self.result, "device", None)
        self.gpu_like = self.device == "cuda" or layer == "fake"

    def step_sample(self) -> Sample | None:
        """The step (throughput's) with its 95% interval."""
        if not self.acc:
            return self.step
        a = self.acc
        source = (
            "record"
            if a.step_lo_s is not None
            else f"throughput, no interval (under {RATE_MIN_BLOCKS} blocks)"
        )
        return Sample(
            a.step_s,
            a.step_lo_s,
            a.step_hi_s,
            0.95 if a.step_lo_s is not None else None,
            self.train.steps,
            source,
        )

    def timed_share(self) -> float:
        """The part of the step rank 0's timed phases cover (1 when the record cannot say): shares
        of rank 0's step timer are scaled by it, so they are shares of the step."""
        a = self.acc
        if not a or not a.complete or not a.rank0.step_mean_s or not a.step_s:
            return 1.0
        return min(1.0, a.rank0.step_mean_s / a.step_s)

    def wait(self) -> AccountingWait | None:
        """Rank 0's wait per step for a late peer (diagnosis.accounting), None when there is none to
        speak of."""
        w = self.acc.wait if self.acc else None
        return w if w is not None and w.rank is not None and w.total_s else None

    # -------------------------------------------------------------------------------------- figures
    def phase(self, name: str) -> Sample | None:
        phases = self.train.phases
        return sample(
            getattr(phases, name) if phases is not None else None, getattr(self.series_phases, name)
        )

    def share(self, names: tuple[str, ...]) -> Sample | None:
        """The phases' share of the step, per step where the series exist (an interval of the median
        share), else the ratio of medians (no interval)."""
        phases = {n: getattr(self.series_phases, n) for n in names}
        steps = self.series.step_time_s or []
        scale = self.timed_share()
        if steps and all(phases[n] and len(phases[n]) == len(steps) for n in names):
            shares = [
                scale * sum(phases[n][i] for n in names) / t for i, t in enumerate(steps) if t
            ]
            if shares:
                d = describe(shares)  # a share's interval stays a share: inside [0, 1]
                d.update(
                    {
                        k: min(1.0, max(0.0, d[k]))
                        for k in ("ci_lo", "ci_hi")
                        if d.get(k) is not None
                    }
                )
                return Sample.of(
                    d,
                    "per-step share, computed from the record's series"
                    + (
                        f", x {scale:.3g} (rank 0's timed phases' part of the step)"
                        if scale < 0.98
                        else ""
                    ),
                )
        summaries = [
            getattr(self.train.phases, n) if self.train.phases is not None else None for n in names
        ]
        medians = [s.median if s is not None else None for s in summaries]
        if self.step and all(m is not None for m in medians) and self.step.median:
            return point(scale * sum(medians) / self.step.median, "ratio of medians")
        return None

    def exposed(self, transfer: bool = True) -> Sample | None:
        """The exposed communication per step: with the record's 95% interval where its samples give
        one, else a single figure that says how many samples it rests on (DDP's: probe_steps untimed
        steps, one by default). transfer: less rank 0's wait for a late peer (diagnosis.accounting),
        which is the straggler's time, not the communication's; never more than the step."""
        c = self.train.comm
        if c is None or c.exposed_s is None:
            return None
        n = exposed_samples(self.train, self.config)
        w = self.wait() if transfer else None
        less = min(w.total_s, c.exposed_s) if w else 0.0
        cap = self.step_s or float("inf")
        fix = lambda x: None if x is None else min(cap, max(0.0, x - less))  # noqa: E731 - a local helper
        after = f", less {ms_text(less)} ms of waiting for rank {w.rank}" if less else ""
        if (
            c.exposed_s - less > cap
        ):  # the timers' figure differs from the one printed: say so, and by how much
            after += f", capped at the step (DDP's timers say {ms_text(c.exposed_s)} ms)"
        bound = self._window_bound(less)
        if bound is not None:  # the probe steps say more than the window's backward phase holds
            return bound
        if c.exposed_ci_lo is not None and c.exposed_ci_hi is not None:
            return Sample(
                fix(c.exposed_s),
                fix(c.exposed_ci_lo),
                fix(c.exposed_ci_hi),
                0.95,
                n,
                "record" + after,
                wait_s=less,
            )
        what = "DDP's reducer timers" if self.train.sync == "ddp" else "the sync phase"
        many = (
            f"{n} probe step{'s' if n != 1 else ''}"
            if n is not None and n < EXPOSED_MIN_N
            else "its samples"
        )
        return Sample(fix(c.exposed_s), n=n, source=f"{what}, {many}{after}", wait_s=less)

    def _window_bound(self, less: float) -> Sample | None:
        """DDP's exposed time comes from the untimed probe steps after the window; its all-reduce
        wait happens inside loss.backward(), so in the window it is at most rank 0's backward phase
        less the backward compute (the probe's reducer timer), plus the part of the step rank 0's
        timer does not cover. Where even that bound's upper end is under the probe's figure, the
        probe steps ran in other conditions than the window (a neighbour's burst): the healthy
        base/4 run of results/diagnosis_benchmark (2026-12-07) read 5.8 ms in its probe steps
        against a window whose whole backward phase was 4.4 ms [3.7, 5.1] with 2.45 ms of compute,
        and its microbenchmark, also after the window, ran 3x slower than its siblings'; the rule
        then called 74% of a healthy step exposed communication. A contradicted probe gives no
        lower end: the figure is the window's bound, its interval [0, the bound's upper end].

        The window's figure is the step accounting's "transfer in the window" (diagnosis.accounting,
        from the phases' means), here from the backward phase's median and its interval.
        None where the probe agrees with the window, or the record cannot say (not DDP, no
        backward interval, the probe's compute itself over the window's backward phase), where the
        probe has no interval (too few steps: the rules already ask for probe_steps=6), and
        behind an emulated link: a token bucket's burst serves back-to-back window steps and the
        probe steps differently (tasks/train/probes.py), so there a gap between the two is the
        link's, not a disturbance (the 2026-11-25 20 Mbit/s runs: probe 25.7 ms against a window
        bound of about 21)."""
        c = self.train.comm
        bc = c.backward_compute_s
        bwd = self.phase("backward")
        link = self.env.link
        if (
            self.train.sync != "ddp"
            or c.exposed_ci_lo is None  # one probe step: the rules already ask for more
            or bc is None
            or bwd is None
            or bwd.ci_hi is None
            or bc > bwd.median
            or (link is not None and link.emulated)
        ):
            return None
        a = self.acc
        untimed = (
            max(0.0, a.step_s - a.rank0.step_mean_s)
            if a and a.complete and a.step_s and a.rank0.step_mean_s
            else 0.0
        )
        hi = bwd.ci_hi - bc + untimed
        if c.exposed_s - less <= hi:
            return None
        cap = self.step_s or float("inf")
        return Sample(
            min(cap, bwd.median - bc + untimed),
            0.0,
            min(cap, hi),
            bwd.ci_level,
            bwd.n,
            f"at most the window's backward phase less its compute ({ms_text(bwd.median)} - "
            f"{ms_text(bc)} ms, + {ms_text(untimed)} ms the step timer does not cover): the probe "
            f"steps' {ms_text(c.exposed_s - less)} ms is more than the window holds, so they did "
            "not run as the window did",
            wait_s=less,
        )

    def fraction_of_step(self, s: Sample | None) -> Sample | None:
        """A figure (median and interval, in seconds) as a share of the step median."""
        if s is None:
            return None
        return replace(
            s,
            median=self.fraction(s.median),
            ci_lo=self.fraction(s.ci_lo),
            ci_hi=self.fraction(s.ci_hi),
        )

    def fraction(self, seconds: float | None) -> float | None:
        """seconds as a share of the step (the throughput's)."""
        return seconds / self.step_s if seconds is not None and self.step_s else None

    # ---------------------------------------------------------------------------------------- noise
    def noise(self) -> Noise:
        """How far apart two numbers of this run must be to count: the step's relative half-width
        (the throughput's interval where the record has one, else rank 0's step median's), a window
        that was still drifting, too many outliers. The floor never goes below stats' 2% noise
        (compare.noise's default: the threshold below which nothing is called a difference);
        `measured` is the part of it the run's own noise sets."""
        timer = self.step
        s = self.step_sample()
        if s is None or s.ci_lo is None:
            s = timer
        out = Noise()
        if s is None:
            out.reasons.append("no step times in the record: noise not assessed")
            return out
        out.n, out.ci_level, out.median_s = s.n, s.ci_level, s.median
        if timer is not None and timer.ci_level is not None and timer.ci_level < 0.95 and timer.n:
            out.noisy = True
            out.reasons.append(
                f"{timer.n} measured steps cannot give a 95% interval for the median "
                f"(the widest, min to max, covers {100 * timer.ci_level:.0f}%)"
            )
        elif s.ci_lo is None and s.n:  # neither the throughput nor the step timer has an interval
            out.noisy = True
            out.reasons.append(
                f"the noise is unknown: {s.n} measured steps are too few for a 95% interval "
                "that allows for their serial correlation (10 or more: steps=30)"
            )
        if s.ci_lo is not None and s.median:
            half = rel_halfwidth(s.median, s.ci_lo, s.ci_hi)
            part = ""
            if s is timer and self.timed_share() < 1.0:
                # rank 0's timer covers only part of the step (a wait for a late peer lies outside
                # it): its half-width in seconds is that share of the step the findings are shares
                # of. Unscaled, a timer of 8 ms [0, 16] set a floor of 96% over a 113 ms step and
                # hid a straggler of 90% (CI, 2026-11-28)
                part = (
                    f" of the step (rank 0's timed {1e3 * s.median:.3g} ms, +-{100 * half:.0f}% "
                    "of it)"
                )
                half *= self.timed_share()
            out.rel_halfwidth = half
            out.of = "throughput" if s is not timer else "rank 0's step median"
            out.floor = max(out.floor, half)
            out.measured = half
            if half > NOISY_HALFWIDTH:
                out.noisy = True
                out.reasons.append(
                    f"step median known only to +-{100 * half:.1f}%{part} ({interval_note(s)})"
                )
        # result.steady is its verdict alone (True/False/None)
        steady = self.train.steady_state
        if steady is None and len(self.series.step_time_s or []):
            steady = SteadyState.from_dict(steady_state(self.series.step_time_s), "steady")
        out.steady = steady
        if steady is not None and steady.steady is False:
            out.noisy = True
            drift = abs(steady.drift or 0.0)
            out.floor = max(out.floor, drift)
            out.measured = max(out.measured, drift)
            out.reasons.append(f"the window was not steady: {steady.reason}")
        other = self.other_load()
        if other is not None and other > OTHER_LOAD:
            out.noisy = True
            out.reasons.append(
                f"other processes kept {100 * other:.0f}% of the host's CPUs busy during the "
                "window (host counters minus the ranks' own CPU time)"
            )
        if timer is not None and timer.n and timer.outliers / timer.n > OUTLIER_SHARE:
            out.noisy = True
            out.reasons.append(f"{timer.outliers} of {timer.n} steps are outliers (beyond 1.5 IQR)")
        return out

    def works(self) -> list[RankWork]:
        return [
            r.work for r in self.train.per_rank or [] if r.work is not None and r.work.to_dict()
        ]

    def _one_host(self) -> tuple[list[RankWork], int, float] | None:
        """(the ranks' window counters, cores, the ranks' own CPU share of cores x window) on one
        host, or None."""
        works, cores = self.works(), self.env.cpu_count
        if (
            not works
            or not cores
            or len(self.env.hostnames or []) != 1
            or works[0].host_busy is None
        ):
            return None
        wall = max(w.wall_s for w in works)
        return works, cores, sum(w.cpu_s for w in works) / (cores * wall) if wall else 0.0

    def other_load(self) -> float | None:
        """Share of the host's CPUs that processes other than the ranks used over the window (one
        host only)."""
        host = self._one_host()
        return None if host is None else max(0.0, host[0][0].host_busy - host[2])

    def contention(self) -> Contention | None:
        """The ranks on one CPU host fighting over its cores, from the window's counters: the cores
        are full (host_busy >= CONTENDED_BUSY), the ranks themselves fill them (>= CONTENDED_OWN of
        cores x wall), and the scheduler preempts each rank at least CONTENDED_SWITCHES times a
        second (another of its threads, or a peer's, wanted the core). None when a figure is missing
        or any of the three is not met."""
        host = self._one_host()
        if host is None or len(host[0]) < 2 or not host[2] or self.device != "cpu":
            return None
        works, cores, own = host
        switches = statistics.median(w.involuntary_switches / w.wall_s for w in works if w.wall_s)
        out = Contention(cores, works[0].host_busy, own, switches)
        contended = (
            out.host_busy >= CONTENDED_BUSY
            and own >= CONTENDED_OWN
            and switches >= CONTENDED_SWITCHES
        )
        return out if contended else None

    # ------------------------------------------------------------------------------------- commands
    def command(
        self, changes: dict[str, Any] | None = None, env: dict[str, str] | None = None
    ) -> str:
        """This run's command with `changes` applied (None removes a key); env: variables to
        prefix."""
        items: dict[str, str] = {}
        for o in self.record.overrides:
            key = o.partition("=")[0].lstrip("+~")
            if not key.startswith("hydra.") and key not in SWEEP_ONLY:
                items[key] = o
        for key, value in (
            changes or {}
        ).items():  # in place where the run set the key, else appended
            if value is None:
                items.pop(key, None)
            else:
                items[key] = f"{key}={str(value).lower() if isinstance(value, bool) else value}"
        prefix = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        # an experiment preset may sweep (hydra.sweeper.params) and is refused without -m; every key
        # it sweeps is pinned in the job's own overrides, so -m runs this one configuration
        multirun = ["-m"] if "experiment" in items else []
        cmd = " ".join(["python", "train.py", *multirun, *(shlex.quote(o) for o in items.values())])
        return f"{prefix} {cmd}" if prefix else cmd


def quiet_next(record: Record | dict, floor: float | None) -> tuple[str, str, int]:
    """(command, what it does, runs like this one it takes) where nothing was found and nothing
    hides: a floor over twice the 2% threshold shrinks with steps (about as 1/sqrt(steps)), so a
    longer run; at the threshold, the candidates compared with repeats (README step 4). The tool
    cannot lengthen a user's script, so a script's longer run says how many optimizer steps it
    must take, and raises script.max_steps where the run set one below that."""
    view = RunView(record)
    r = view.record.result
    steps = getattr(r, "steps", None) or 10
    if floor and floor > 0.04:
        want = min(10_000, int(steps * (floor / 0.02) ** 2) + 1)
        changes: dict[str, Any] = {"steps": want}
        what = "narrows the noise floor toward 2%"
        script = getattr(r, "script", None) or {}
        if view.record.task == "script":
            need = (getattr(r, "warmup_steps", None) or 0) + want
            if script.get("max_steps") is not None and script["max_steps"] < need:
                changes["script.max_steps"] = need
            taken = script.get("steps_taken")
            if taken is not None and taken < need:
                what += (
                    f"; the script must take {need} optimizer steps (it took {taken}): "
                    "lengthen it in script.args"
                )
        return view.command(changes), what, 1
    cmd = view.command({"optim": "none,bf16,powersgd", "repeats": 3})
    return (
        cmd.replace("python train.py ", "python train.py -m ", 1),
        ("compares the candidates with repeats (README step 4)"),
        9,
    )
