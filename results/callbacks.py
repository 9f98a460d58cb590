"""End-of-sweep table: a Hydra callback, so it works with every launcher (local, joblib, Slurm).

The table is made from the run records under the sweep dir, merged with the jobs Hydra knows about,
so a job that crashed before writing its record still shows up as a failed row. With launchers that
run jobs elsewhere (Slurm), on_job_start/on_job_end run in the job, not here; the list of jobs then
comes from the sweep's own overrides (on_multirun_start) and the job directories Hydra created.

Only this sweep's jobs make rows: a sweep dir that held an earlier sweep was moved aside before this
one started (job/output_dir.py), and each job's record carries this sweep's id (DDP_COMM_SWEEP_ID,
set here before any job), so a record another sweep wrote into the same dir meanwhile is left out.
What the table, its command line and W&B show of the overrides is what the user typed
(`${oc.env:...}` stays text: base/provenance.py)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from base import interrupt
from base.provenance import as_typed, from_environment, typed_overrides
from tables.sweep import (
    TABLE_CSV,  # noqa: F401 - the callers' names
    TABLE_MD,
    expected_jobs,
    product_of,  # noqa: F401 - the callers' names
    sweep_command,
    sweep_entries,
    write_sweep_table,
)
from tables.sweep_order import PLAN_FILE, position, run_order
from base.record import SWEEP_ID_ENV, Record
from base.record_types import TaskResult
from tables.table import Entry, build_table, fmt
from stats.fmt import fmt_ci

SCALING_MD, SCALING_CSV = "sweep_scaling.md", "sweep_scaling.csv"
DIAGNOSIS_MD = "sweep_diagnosis.md"


class SweepFailed(SystemExit):
    """Raised after the table is saved when a job failed, so `train.py -m` exits non-zero.

    A SystemExit because Hydra turns callback exceptions into warnings
    (hydra/_internal/callbacks.py)."""


class SweepInterrupted(SystemExit):
    """Raised after the table of the rows so far is saved when SIGINT/SIGTERM stopped the sweep: no
    further job starts, and `train.py -m` exits 128 + the signal (Hydra would otherwise re-raise
    before any table is written)."""


def _is_multirun(config: DictConfig) -> bool:
    from hydra.types import RunMode

    return OmegaConf.select(config, "hydra.mode") == RunMode.MULTIRUN


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


class SweepTable(Callback):
    """Prints which job runs and how many remain; at the end, prints and saves the comparison table.

    fail_on_failed_jobs: after the table is saved, exit non-zero when any job failed.
    plots / wandb: also save PNG plots into the sweep dir / log the table as a W&B summary run.
    """

    def __init__(
        self, fail_on_failed_jobs: bool = True, plots: bool = True, wandb: bool = True
    ) -> None:
        self.fail_on_failed_jobs = fail_on_failed_jobs
        self.plots = plots
        self.wandb = wandb
        self.expected: list[list[str]] | None = None
        self.returns: dict[int, dict] = {}
        self.started: float | None = None
        self.sweep_config: DictConfig | None = None  # set in the sweep's own process only
        self.interrupted = False  # a signal stopped the sweep: the table has the jobs that ran
        self.sweep_id: str | None = (
            None  # in every record of this sweep's jobs (job/run.py: job.sweep_id)
        )
        self.progress: dict[
            int, tuple[str, str, str]
        ] = {}  # a job's progress text, printed when it ends
        self.announced = (
            True  # set False by on_multirun_start; announce() prints the sweep's first line once
        )
        self.order: list[int] | None = None  # repeats=auto: the stage's run order (stage())
        self.stage_name = ""
        self.sweep_started: float | None = None

    # progress ------------------------------------------------------------------------------------

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.expected = expected_jobs(config)
        self.started = self.sweep_started = time.monotonic()
        self.sweep_config = config
        self.sweep_id = os.environ[SWEEP_ID_ENV] = (
            uuid.uuid4().hex
        )  # the jobs inherit it, here or on a Slurm node
        interrupt.note_signals()  # a signal between two jobs stops the sweep at the next job start
        self.announced = (
            False  # the "[sweep] N jobs" line waits until every job's config composed (announce)
        )

    def stage(self, jobs: list[list[str]], order: list[int], name: str) -> None:
        """repeats=auto (hydra_plugins/repeat_sweeper): the pilot's jobs, then the planned ones,
        each numbered from 0; the table's rows are the last stage's jobs (the pilot has its own
        sweep dir)."""
        self.expected, self.order, self.stage_name = jobs, order, name
        self.returns, self.progress = {}, {}
        self.started = time.monotonic()

    def announce(self) -> None:
        """The sweep's first line, once its jobs' configs are known to compose (the sweeper calls it
        after checking them; the first job's start, for another sweeper): a refused sweep prints its
        error and nothing before it."""
        if self.announced or self.sweep_config is None:
            return
        self.announced = True
        total = len(self.expected) if self.expected is not None else "?"
        print(
            f"[sweep] {total} jobs -> {OmegaConf.select(self.sweep_config, 'hydra.sweep.dir')}",
            flush=True,
        )

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not _is_multirun(config):
            return
        self.announce()
        self._stop_if_interrupted()
        num = int(OmegaConf.select(config, "hydra.job.num") or 0)
        overrides = (
            " ".join(typed_overrides(OmegaConf.select(config, "hydra.overrides.task") or []))
            or "(no overrides)"
        )
        if self.expected is not None:
            total = len(self.expected)
            order = self.order or run_order(OmegaConf.select(config, "hydra.sweep.dir"))
            at = position(num, order)  # repeats: shuffled rounds
            left = total - at - 1
            progress = (f"{self.stage_name} " if self.stage_name else "") + f"job {at + 1}/{total}"
            progress += f" (#{num})" if at != num else ""
            tail = f"{left} more after this" if left else "last job"
            done = len(self.returns)
            if done and self.started is not None and left >= 0:
                per_job = (time.monotonic() - self.started) / done
                tail += f", ~{_fmt_duration(per_job * (left + 1))} left"
        else:
            progress, tail = f"job {num + 1}/?", "total unknown"
        if OmegaConf.select(config, "verbose"):
            print(f"[sweep] {progress} ({tail}): {overrides}", flush=True)
        else:  # one line per job, when it ends (on_job_end)
            self.progress[num] = (progress, tail, overrides)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        num = OmegaConf.select(config, "hydra.job.num")
        if num is None:
            return
        value = getattr(
            job_return, "_return_value", None
        )  # the public .return_value raises for a failed job
        info: dict[str, Any] = {
            "overrides": list(job_return.overrides or []),
            "output_dir": OmegaConf.select(config, "hydra.runtime.output_dir"),
        }
        if job_return.status == JobStatus.FAILED:
            info["error"] = f"{type(value).__name__}: {value}"
        elif (
            getattr(value, "status", "ok") != "ok"
        ):  # job.run.JobResult of a failed or interrupted job
            info["error"] = str(getattr(value, "error", None) or value.status)
        self.returns[int(num)] = info
        if int(num) in self.progress:
            progress, tail, overrides = self.progress.pop(int(num))
            print(
                f"[sweep] {progress} ({tail}): {overrides} -> "
                f"{_job_line(value, info.get('error'))}",
                flush=True,
            )
        self._stop_if_interrupted()

    def _stop_if_interrupted(self) -> None:
        """After a signal, in the sweep's process: save the table of the jobs that ran (the
        interrupted one is a row with status "interrupted"; jobs never started are not rows) and
        stop the sweep."""
        if interrupt.received() is not None and self.sweep_config is not None:
            self.interrupted = True
            self.on_multirun_end(self.sweep_config)

    # the table -----------------------------------------------------------------------------------

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(OmegaConf.select(config, "hydra.sweep.dir")))
        entries = sweep_entries(
            sweep_dir,
            expected=None if self.interrupted else self.expected,
            returns=self.returns,
            sweep_id=self.sweep_id,
        )
        command = sweep_command(config)
        table = build_table(entries, first="job", title=f"Sweep {sweep_dir}")
        text = (
            table.markdown()
            if OmegaConf.select(config, "verbose")
            else terminal_table(table, entries)
        )
        planned = _plan_note(sweep_dir, self.sweep_started)
        print(f"\n{command}\n\n{text}" + (f"\n{planned}" if planned else ""), flush=True)

        md, csv = write_sweep_table(sweep_dir, table, command)
        if planned:
            md.write_text(md.read_text() + f"\n{planned}\n")
        written = [md, csv]
        written += _scaling_table(entries, sweep_dir, command)
        diagnosis, path = _sweep_diagnosis(entries, sweep_dir)
        written += [path] if path else []
        images: dict[str, Path] = {}
        if self.plots:
            images = _sweep_plots(entries, sweep_dir)
            written += list(images.values())
        if self.wandb:
            from results import wandb_log

            logger_cfg = OmegaConf.select(config, "logger")
            shown = _as_typed(
                config
            )  # keys from the environment as typed: W&B sees the text, not the value
            tags = shown.get("tags")
            tags = (
                list(tags)
                if tags is not None and not isinstance(tags, str)
                else ([tags] if tags else [])
            )
            wandb_log.log_sweep(
                table,
                entries,
                sweep_dir,
                logger_cfg,
                images=images,
                command=command,
                tags=tags,
                diagnosis=diagnosis,
                typed_logger=shown.get("logger"),
            )
            from results import wandb_report

            written += wandb_report.at_sweep_end(
                sweep_dir,
                logger_cfg,
                entries=entries,
                table=table,
                command=command,
                diagnosis=diagnosis,
                images=images,
            )
        print("[sweep] table: " + ", ".join(str(p) for p in written), flush=True)

        signum = interrupt.received()
        if signum is not None:
            import signal

            print(
                f"[sweep] interrupted by {signal.Signals(signum).name}: stopped after "
                f"{len(entries)} job(s); "
                f"their rows are in {md}",
                file=sys.stderr,
                flush=True,
            )
            raise SweepInterrupted(128 + signum)
        failed = [e for e in entries if not e.ok]
        if failed and self.fail_on_failed_jobs:
            jobs = ", ".join(str(e.num) for e in failed)
            raise SweepFailed(
                f"[sweep] {len(failed)} of {len(entries)} jobs failed (job {jobs}); "
                f"see the failed rows in {md}"
            )


def _plan_note(sweep_dir: Path, started: float | None) -> str:
    """repeats=auto: what the pilot planned and what decided it (plan.json), and the sweep's
    minutes."""
    import json

    try:
        p = json.loads((sweep_dir / PLAN_FILE).read_text())
    except (OSError, ValueError):
        return ""
    took = f"{(time.monotonic() - started) / 60:.1f} min" if started is not None else "?"
    seen = (
        f"; every row would have seen a difference over {p['detectable']:.1%} (80% power, "
        f"Holm over {p['rows']})"
        if p.get("detectable") is not None
        else ""
    )
    pilot = f"a pilot of {p['pilot']['rounds']} rounds x {p['pilot']['steps']} steps"
    if p.get("judged") == p["pilot_dir"]:  # the budget left no round after it: its rounds judged
        return (
            f"repeats=auto: {pilot} ({p['pilot_s'] / 60:.1f} min, {p['pilot_dir']}/, judged: "
            f"these rows) for +-{p['target'] * 100:g}% on every row's speed-up within "
            f"compare.budget_s={p['budget_s']:g}: {p['reason']}{seen}. The sweep took {took}."
        )
    return (
        f"repeats=auto: {pilot} ({p['pilot_s'] / 60:.1f} min, {p['pilot_dir']}/, not judged) "
        f"planned {p['runs']} rounds x {p['steps']} steps for +-{p['target'] * 100:g}% on every "
        f"row's speed-up within compare.budget_s={p['budget_s']:g}: "
        + ("target reached: " if p["reached"] == "target" else "")
        + f"{p['reason']}{seen}. The sweep took {took}, pilot included."
    )


def _job_line(value: Any, error: str | None) -> str:
    """A finished job in a few words, from its record: throughput with its interval and the top
    finding."""
    if error:
        return f"FAILED: {error}"[:200]
    try:
        result = Record.read(value.record).result
    except (AttributeError, TypeError, OSError, ValueError):  # RecordError is a ValueError
        return "done (no record to read)"
    if result is None:
        return "done (no result in the record)"
    tp = getattr(result, "throughput", None)
    if tp is not None and tp.samples_per_s is not None:
        text = fmt_ci(tp.samples_per_s, tp.samples_ci_lo, tp.samples_ci_hi, "samples/s")
    else:
        headline = result.headline if result.headline is not None else {}
        text = ", ".join(f"{k} {fmt(v, k)}" for k, v in list(headline.items())[:2]) or "done"
    top = _top_finding(result)
    return text + (f"; top finding: {top if len(top) <= 80 else top[:79] + '~'}" if top else "")


def _top_finding(result: TaskResult) -> str | None:
    found = result.diagnosis.findings if result.diagnosis is not None else None
    findings = [f for f in found or [] if not f.first]
    return findings[0].title if findings else None


TERMINAL_WIDTH = 120
SHORT_VERDICT = {"no significant difference": "not significant"}


def terminal_table(table, entries: list[Entry]) -> str:
    """The end-of-sweep table as the terminal shows it by default: configuration, samples/s [CI],
    speed-up [CI], verdict and top finding, cut to TERMINAL_WIDTH columns. The full table (every
    column, the footnotes) is in sweep_table.md/.csv; verbose=true prints it here too. A sweep
    without samples/s (task=collectives, ...) prints its full table."""
    if "samples/s" not in table.columns:
        return table.markdown()
    by_dir = {str(e.output_dir): e for e in entries if e.output_dir}
    head = ["configuration", "samples/s [95% CI]", "speed-up [95% CI]", "verdict", "top finding"]
    rows = []
    for row in table.rows:
        label = str(
            row.get("overrides") or row.get("configuration") or ""
        )  # the baseline: its verdict says so
        first = by_dir.get(str(row.get("run dir") or "").split(";")[0])
        top = _top_finding(first.result) if first is not None and first.result else None
        rows.append(
            [
                label,
                table.text(row, "samples/s"),
                table.text(row, "speed-up"),
                SHORT_VERDICT.get(
                    row.get("verdict"), str(row.get("verdict") or row.get("status") or "")
                ),
                top or "-",
            ]
        )
    fixed = [
        min(cap, max(len(head[j]), *(len(r[j]) for r in rows)))
        for j, cap in ((1, 20), (2, 22), (3, 16))
    ]
    room = (
        TERMINAL_WIDTH - sum(fixed) - 3 * len(head) - 1
    )  # for the configuration and the top finding
    # the configuration is what tells rows apart: it stays whole while the top finding keeps 12
    # characters (its full text is in the table files); cut at 24 it printed three PowerSGD rows as
    # one "optim=powersgd bucket=~"
    config = min(max(len(head[0]), *(len(r[0]) for r in rows)), room - 12)
    widths = [config, *fixed, room - config]

    def cut(text: str, width: int) -> str:
        return text if len(text) <= width else text[: width - 1] + "~"

    def line(values):
        return "| " + " | ".join(cut(v, w).ljust(w) for v, w in zip(values, widths)) + " |"

    out = [
        line(head),
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        *(line(r) for r in rows),
    ]
    return (
        "\n".join(out)
        + f"\n(every column, the intervals' method and the footnotes: {TABLE_MD}; verbose=true)\n"
    )


def _as_typed(config: DictConfig) -> dict:
    """The sweep's config without hydra, resolved except the keys whose value came from the
    environment."""
    try:
        node = OmegaConf.masked_copy(config, [k for k in config.keys() if k != "hydra"])
        return as_typed(OmegaConf.to_container(node, resolve=True), from_environment(node)) or {}
    except Exception:  # noqa: BLE001 - W&B then gets no tags rather than a value it must not see
        return {}


def _scaling_table(entries: list[Entry], sweep_dir: Path, command: str) -> list[Path]:
    """A sweep over world sizes also gets the scaling table (throughput, efficiency against ideal,
    exposed comm)."""
    from tables.table import scaling_table

    sizes = {e.knob("world_size") for e in entries if e.ok and e.task == "train"}
    if len(sizes) < 2:
        return []
    table = scaling_table(entries)
    print(f"\n{table.markdown(heading='##')}", flush=True)
    md = sweep_dir / SCALING_MD
    md.write_text(f"# {table.title}\n\n```\n{command}\n```\n\n{table.markdown()}")
    return [md, table.write_csv(sweep_dir / SCALING_CSV)]


def _sweep_diagnosis(entries: list[Entry], sweep_dir: Path) -> tuple[dict | None, Path | None]:
    """Every run's top finding and the estimates the sweep itself can check; a diagnosis never costs
    the table."""
    try:
        from diagnosis import diagnose_sweep, format_sweep

        diagnosis = diagnose_sweep(entries)
        text = format_sweep(diagnosis)
    except Exception as e:  # noqa: BLE001 - a diagnosis never costs the table
        print(f"[sweep] diagnosis skipped: {type(e).__name__}: {e}", file=sys.stderr)
        return None, None
    print(f"\n{text}", flush=True)
    path = sweep_dir / DIAGNOSIS_MD
    path.write_text(f"# Diagnosis of {sweep_dir}\n\n{text}\n")
    return diagnosis, path


def _sweep_plots(entries: list[Entry], sweep_dir: Path) -> dict[str, Path]:
    try:
        from results import plots

        return plots.standard_plots(entries, sweep_dir, prefix="sweep_")  # titles: the question
    except Exception as e:  # noqa: BLE001 - a plot never costs the table
        print(f"[sweep] plots skipped: {type(e).__name__}: {e}", file=sys.stderr)
        return {}
