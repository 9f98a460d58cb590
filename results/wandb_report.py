"""A W&B Report of a sweep: the paper-style comparison, built from the sweep dir without a click.

    python -m results.wandb_report <sweep dir>            # (re)write <sweep dir>/wandb_report.json, the report's spec
    python -m results.wandb_report <sweep dir> --push     # push it to W&B (after `wandb sync`): prints its URL

The report states the sweep's question, the machine and the exact command; holds the sweep table (CIs, verdicts) as
a table panel of the sweep_summary run, the throughput and per-phase plots, step time per measured step of every
run of the group, the diagnosis with its next commands as text, and links to the evidence artifacts. Its run sets
filter on the sweep's W&B group, so it shows this sweep's runs and no others.

At the end of a sweep with logger=wandb and logger.report=true (results.callbacks), the spec is written next to the
sweep table; when the sweep's W&B runs went online it is also pushed at once and its URL printed. A spec names no
entity and no run set project (serialising a run set that names them asks the W&B API); pushing fills them in, and
turns the links (relative paths such as `runs/<id>`) into full URLs. After a push the spec holds the report's id, so
pushing again updates that report instead of making a second one.

Reads only the sweep dir and the files W&B logging leaves there (results.wandb_log: the `wandb_run.json` sidecars,
group_for, artifact_name, log_sweep); the metric names below are the ones wandb_log's runs log, which
tests/test_wandb_report.py checks on real offline runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from base.log import get
from base.record import setting
from base.record_types import DiagnosisBlock

log = get(__name__)

SPEC_NAME = "wandb_report.json"
# What the runs log (results/wandb_log.py). Each job's run: one history row per measured step (run.log(step=i)).
STEP = "Step"  # W&B's own _step
STEP_TIME = "step/time_ms"
SAMPLES_PER_S = "throughput/samples_per_s"
PHASE = "phase_ms/{}"  # one per phase of the record's series
# The sweep summary run (job_type sweep_summary): the table and each plot under plots/<name>.
SUMMARY_JOB_TYPE = "sweep_summary"
SWEEP_TABLE = "sweep_table"
PLOT = "plots/{}"
PLOT_PREFIX = "sweep_"  # results.callbacks' plots in the sweep dir: sweep_<name>.png
TITLE_MAX = 128  # W&B's limit on a report title


def _say(msg: str) -> None:
    log.info(f"[wandb] {msg}")


def _warn(msg: str) -> None:
    log.warning(f"[wandb] WARNING: {msg}")


# ----------------------------------------------------------------------------------------- the spec
def _convert(value):
    """Report -> its spec (JSON text), or spec -> Report. The one use of wandb_workspaces' private conversion:
    0.4.13 (pinned in requirements.txt) has no public to_model()/from_model(), only Report._to_model() and
    Report._from_model(); the spec is the model's own JSON, read back with the model's model_validate_json."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2 import internal

    if isinstance(value, wr.Report):
        return value._to_model().model_dump_json(by_alias=True, exclude_none=True, indent=1)
    return wr.Report._from_model(internal.ReportViewspec.model_validate_json(value))


def read_spec(path: str | Path):
    """The report (a wandb_workspaces Report) of a spec file, or of the wandb_report.json in a directory."""
    path = Path(path)
    return _convert((path / SPEC_NAME if path.is_dir() else path).read_text())


def write_spec(report, path: str | Path) -> Path:
    """Atomically: a sweep that is stopped while it writes leaves the old spec or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(_convert(report))
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------------------- what a report is made of
@dataclass
class Study:
    """One sweep (or committed study) as the report shows it."""

    dir: Path
    group: str  # the W&B group its runs carry
    entries: list  # tables.table.Entry, one per job
    table: Any  # tables.table.Table: the sweep table
    command: str
    diagnosis: dict | None = None  # diagnosis.diagnose_sweep
    images: dict[str, Path] = field(
        default_factory=dict
    )  # plot name -> PNG, logged as plots/<name>
    runs: dict[int, str] = field(
        default_factory=dict
    )  # job num -> its W&B run id (the job's sidecar)
    summary_run: str | None = None  # the sweep_summary run's id
    job_runs: bool = (
        True  # False: the jobs have no W&B runs (a committed study run with logger=none)
    )


def _sidecar(directory: str | Path | None) -> dict:
    """What W&B logging left in a job or sweep dir (results.wandb_log.SIDECAR): mode, id, group, project, entity."""
    from results.wandb_log import SIDECAR

    if not directory:
        return {}
    try:
        return json.loads((Path(directory) / SIDECAR).read_text())
    except (OSError, ValueError):
        return {}


def load(sweep_dir: str | Path, group: str | None = None) -> Study:
    """A sweep as its dir holds it: records (results.callbacks.sweep_entries), the sweep table, the diagnosis, the
    plots the sweep saved, the command from multirun.yaml, and the W&B run ids from the sidecars."""
    from tables.sweep import multirun_config, sweep_command, sweep_entries
    from tables.table import build_table
    from results.wandb_log import group_for

    sweep_dir = Path(sweep_dir)
    entries = sweep_entries(sweep_dir)
    conf = multirun_config(sweep_dir)
    if conf is not None:
        command = sweep_command(conf)
    else:
        from tables.sweep import commands

        command = "\n".join(commands(entries))
    diagnosis = None
    try:
        from diagnosis import diagnose_sweep

        diagnosis = diagnose_sweep(entries)
    except Exception as e:  # noqa: BLE001 - a diagnosis never costs the report
        _warn(f"the report goes without the diagnosis ({type(e).__name__}: {e})")
    images = {p.stem[len(PLOT_PREFIX) :]: p for p in sorted(sweep_dir.glob(f"{PLOT_PREFIX}*.png"))}
    summary = _sidecar(sweep_dir)
    return Study(
        dir=sweep_dir,
        group=group or summary.get("group") or group_for(sweep_dir),
        entries=entries,
        table=build_table(entries, first="job", title=f"Sweep {sweep_dir}"),
        command=command,
        diagnosis=diagnosis,
        images=images,
        runs=run_ids(entries),
        summary_run=summary.get("id"),
    )


def run_ids(entries: list) -> dict[int, str]:
    out = {}
    for e in entries:
        run = _sidecar(e.output_dir).get("id")
        if run and e.num is not None:
            out[int(e.num)] = str(run)
    return out


def question(study: Study) -> str:
    """What the sweep asks: its experiment preset, else the keys it varies, else its task."""
    from omegaconf import OmegaConf

    from tables.entries import varying_keys
    from tables.sweep import multirun_config
    from results.wandb_log import experiment_preset, swept_keys

    conf = multirun_config(study.dir)
    task_overrides = (
        [str(o) for o in OmegaConf.select(conf, "hydra.overrides.task") or []]
        if conf is not None
        else []
    )
    preset = experiment_preset(task_overrides)
    tasks = sorted({e.task for e in study.entries if e.task})
    train = tasks == ["train"]
    if preset:
        return f"experiment={preset}: " + (
            "what each configuration costs per step" if train else "the results"
        )
    keys = [k for k in swept_keys(study.dir) if k != "repeats"] or varying_keys(study.entries)
    if keys:
        named = keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]
        return f"How {'does' if len(keys) == 1 else 'do'} {named} change " + (
            "throughput, and why?" if train else f"task={'/'.join(tasks) or '?'}?"
        )
    return f"task={'/'.join(tasks) or '?'}: {len(study.entries)} run(s)"


# ----------------------------------------------------------------------------------------- building the report
def _runset(
    name: str,
    group: str,
    job_type: str | None = None,
    exclude: str | None = None,
    run_id: str | None = None,
):
    """Runs of one W&B group (optionally one job type, or all but one, or one run). No entity or project: a run set
    that names them asks the W&B API as it is serialised; push() fills them in."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    if (
        "'" in group
    ):  # wandb_workspaces writes a filter as a quoted string expression and cannot parse it back
        raise ValueError(
            f"the W&B group {group!r} holds a ' which a report's run set filter cannot hold; "
            "set logger.group to a name without it"
        )
    filters = [expr.Metric("Group") == group]
    if job_type:
        filters.append(expr.Metric("JobType") == job_type)
    if exclude:
        filters.append(expr.Metric("JobType") != exclude)
    if run_id:
        filters.append(expr.Metric("ID") == run_id)
    return wr.Runset(entity="", project="", name=name, filters=filters)


def _text_list(lines: list[str]):
    import wandb_workspaces.reports.v2 as wr

    return wr.UnorderedList(items=[ln[2:] if ln.startswith("- ") else ln for ln in lines])


def _next_commands(diagnosis: dict | None) -> list[str]:
    """The top finding's `next:` command of every run, once each, in the runs' order."""
    out: list[str] = []
    for run in diagnosis["runs"] if diagnosis is not None and diagnosis.get("runs") else []:
        block = (
            DiagnosisBlock.from_dict(run["diagnosis"], "diagnosis")
            if run.get("diagnosis")
            else None
        )
        findings = [f for f in (block.findings or [] if block else []) if not f.first]
        if findings and findings[0].command and findings[0].command not in out:
            out.append(findings[0].command)
    return out


def _evidence(study: Study) -> list:
    """Links to the W&B runs and artifacts behind the numbers (relative to the project: push() completes them)."""
    import wandb_workspaces.reports.v2 as wr
    from results.wandb_log import artifact_name

    items: list = []
    if study.summary_run:
        items.append(
            [wr.Link("sweep summary run", url=f"runs/{study.summary_run}"), ": the table and plots"]
        )
    sweep_art = artifact_name("sweep", study.group)
    items.append(
        [
            wr.Link(sweep_art, url=f"artifacts/sweep_table/{sweep_art}/latest"),
            " (sweep_table): the table as CSV and Markdown, plots, multirun.yaml",
        ]
    )
    if not study.job_runs:
        return items
    for e in study.entries:
        if e.num is None:
            continue
        which = f"job{e.num}"
        label = " ".join(e.overrides) or "(no overrides)"
        row: list = [f"job {e.num} `{label}`{'' if e.ok else ' (failed)'}: "]
        if e.num in study.runs:
            row += [wr.Link("run", url=f"runs/{study.runs[e.num]}"), ", "]
        record = artifact_name("record", study.group, which)
        row.append(wr.Link("run record", url=f"artifacts/run_record/{record}/latest"))
        if setting(e.config, "profile.enabled"):
            trace = artifact_name("trace", study.group, which)
            row += [
                ", ",
                wr.Link("profiler traces", url=f"artifacts/profiler_trace/{trace}/latest"),
            ]
        items.append(row)
    return items


def study_blocks(study: Study) -> list:
    """The report's sections for one sweep (H2 headings), each from the sweep's own files and runs."""
    import wandb_workspaces.reports.v2 as wr
    from tables.sweep import describe_machine
    from tables.table import phase_table

    group, blocks = study.group, []
    failed = sum(not e.ok for e in study.entries)
    where = f"{study.dir.parent.name}/{study.dir.name}" if study.dir.parent.name else study.dir.name
    blocks.append(
        wr.P(
            f"{len(study.entries)} job(s){f', {failed} failed' if failed else ''}, sweep dir {where}, "
            f"W&B group: {group}. Every run set below filters on that group."
        )
    )

    blocks += [
        wr.H2("Machine and command"),
        _text_list(describe_machine(study.entries)),
        wr.CodeBlock(code=study.command, language=None),
    ]

    summary = _runset("sweep summary", group, job_type=SUMMARY_JOB_TYPE, run_id=study.summary_run)
    blocks += [
        wr.H2("The sweep table: 95% CIs and verdicts"),
        wr.P(
            f"The table of the sweep_summary run ({SWEEP_TABLE}): every column of the printed table, the "
            "figures with intervals also as text with their 95% CI."
        ),
        wr.PanelGrid(
            runsets=[summary],
            panels=[
                wr.WeavePanelSummaryTable(table_name=SWEEP_TABLE, layout=wr.Layout(w=24, h=12))
            ],
        ),
        wr.P(
            "The same table as the sweep printed it, with its notes (baseline, interval method, verdict "
            "rule):"
        ),
        wr.MarkdownBlock(text=study.table.markdown()),
    ]

    images = dict(study.images)
    train = [e for e in study.entries if e.ok and e.task == "train"]
    if "throughput" in images:
        images.pop("throughput")
        blocks += [
            wr.H2("Throughput with 95% CIs"),
            wr.P(
                "W&B's bar charts cannot draw intervals, so this is the sweep's own plot "
                f"(sweep_throughput.png, logged by the sweep_summary run as {PLOT.format('throughput')}): "
                "each configuration's throughput with its 95% CI as error bars, the baseline in orange, the "
                "speed-up [CI] and verdict written on each bar."
            ),
            wr.PanelGrid(
                runsets=[summary],
                panels=[
                    wr.MediaBrowser(
                        title="throughput per configuration (95% CI)",
                        media_keys=[PLOT.format("throughput")],
                        layout=wr.Layout(w=24, h=10),
                    )
                ],
            ),
        ]
    if train:
        phases = phase_table(study.entries)
        blocks += [wr.H2("Where the step time goes"), wr.MarkdownBlock(text=phases.markdown())]
        if "phases" in images:
            images.pop("phases")
            blocks += [
                wr.P(
                    f"Stacked per-phase medians per configuration ({PLOT.format('phases')}), DDP's exposed "
                    "communication as its own segment, the measured step median as a marker."
                ),
                wr.PanelGrid(
                    runsets=[summary],
                    panels=[
                        wr.MediaBrowser(
                            title="step-time breakdown",
                            media_keys=[PLOT.format("phases")],
                            layout=wr.Layout(w=24, h=10),
                        )
                    ],
                ),
            ]
    if train and study.job_runs:
        series = [
            e.train.series for e in train if e.train is not None and e.train.series is not None
        ]
        names = list(
            dict.fromkeys(p for s in series if s.phases is not None for p in s.phases.to_dict())
        )
        task = study.entries[0].task if len({e.task for e in study.entries}) == 1 else None
        jobs = _runset("jobs", group, job_type=task, exclude=None if task else SUMMARY_JOB_TYPE)
        panels = [
            wr.LinePlot(
                title="step time per measured step (ms)",
                x=STEP,
                y=[STEP_TIME],
                title_y="ms",
                layout=wr.Layout(w=12, h=8),
            ),
            wr.LinePlot(
                title="samples/s per measured step",
                x=STEP,
                y=[SAMPLES_PER_S],
                layout=wr.Layout(w=12, h=8),
            ),
        ]
        panels += [
            wr.LinePlot(
                title=f"{p} per measured step (ms)",
                x=STEP,
                y=[PHASE.format(p)],
                title_y="ms",
                layout=wr.Layout(w=8, h=6),
            )
            for p in names
        ]
        blocks += [
            wr.H2("Every run, step by step"),
            wr.P(
                "Rank 0's time of every measured step (warm-up excluded) of every run of the group, and each "
                "phase's; a drift or a spike shows here before it shows in a median."
            ),
            wr.PanelGrid(runsets=[jobs], panels=panels),
        ]
    if images:
        blocks += [
            wr.H2("More plots"),
            wr.PanelGrid(
                runsets=[summary],
                panels=[
                    wr.MediaBrowser(
                        title=name, media_keys=[PLOT.format(name)], layout=wr.Layout(w=12, h=9)
                    )
                    for name in images
                ],
            ),
        ]

    if study.diagnosis is not None:
        from diagnosis import format_sweep

        blocks += [wr.H2("Diagnosis"), wr.MarkdownBlock(text=format_sweep(study.diagnosis))]
        commands = _next_commands(study.diagnosis)
        if commands:
            blocks += [
                wr.P(
                    "next: the command each run's top finding recommends, to measure what it saves:"
                ),
                wr.CodeBlock(code="\n".join(commands), language=None),
            ]

    blocks += [wr.H2("Evidence"), wr.UnorderedList(items=_evidence(study))]
    return blocks


def build(study: Study, *, project: str, entity: str = "") -> Any:
    """The report of one sweep (a wandb_workspaces Report), spec-ready: no W&B call."""
    import wandb_workspaces.reports.v2 as wr

    ask = question(study)
    title = f"{ask} [{study.group}]"
    if len(title) > TITLE_MAX:
        title = title[: TITLE_MAX - 1] + "…"
    return wr.Report(
        project=project,
        entity=entity,
        title=title,
        description=f"Sweep {study.dir.name}: `{study.command}`"[:1000],
        blocks=study_blocks(study),
    )


# ----------------------------------------------------------------------------------------- pushing
def _place(report, entity: str, project: str) -> None:
    """Name the entity and project everywhere the spec left them out: the report and each run set."""
    report.entity, report.project = entity, project
    for block in report.blocks:
        for runset in getattr(block, "runsets", None) or []:
            runset.entity, runset.project = entity, project


def _absolute_links(report, prefix: str) -> bool:
    """Relative links (runs/<id>, artifacts/<type>/<name>/latest) -> <prefix>/<path>; True if any changed."""
    changed = False

    def fix(item):
        nonlocal changed
        if isinstance(item, list):
            return [fix(i) for i in item]
        url = getattr(item, "url", None)
        if (
            isinstance(url, str)
            and hasattr(item, "text")
            and not url.startswith(("http://", "https://"))
        ):
            item.url = f"{prefix.rstrip('/')}/{url.lstrip('/')}"
            changed = True
        return item

    for block in report.blocks:
        for attr in ("text", "items"):
            if isinstance(getattr(block, attr, None), list):
                setattr(block, attr, fix(getattr(block, attr)))
    return changed


def _from_environment(name: str | None) -> str | None:
    """A spec of an offline sweep names a project/entity that came from the environment as typed
    (`${oc.env:NAME}`, docs/failures.md): its value now, else the name as written."""
    from base.provenance import env_name

    var = env_name(name) if name else None
    return os.environ.get(var) if var else name


def push(path: str | Path, entity: str | None = None, project: str | None = None) -> str:
    """Save a spec (file, or the dir holding wandb_report.json) as a W&B report; returns its URL. Public W&B API only
    (Report.save, Report.url, wandb.Api().default_entity). Upload the runs first (`wandb sync`), or its panels are
    empty until then. The spec is rewritten with the report's id, so pushing it again updates the same report."""
    path = Path(path)
    path = path / SPEC_NAME if path.is_dir() else path
    report = read_spec(path)
    project = project or _from_environment(report.project) or os.environ.get("WANDB_PROJECT")
    if not project:
        raise ValueError(f"{path} names no W&B project; pass --project")
    entity = entity or _from_environment(report.entity) or os.environ.get("WANDB_ENTITY")
    if not entity:
        import wandb

        entity = wandb.Api().default_entity
        if not entity:
            raise ValueError("W&B names no default entity for this login; pass --entity")
    _place(report, entity, project)
    report.save()
    if _absolute_links(report, report.url.rsplit("/reports/", 1)[0]):
        report.save()  # the same report (it has its id now), its links complete
    write_spec(report, path)
    return report.url


# ----------------------------------------------------------------------------------------- at the end of a sweep
def _bounded(work, until: float, what: str, timeout_s: float) -> Any:
    """Run work() in a daemon thread; give up on it at time.monotonic() `until`, the end of logger.finish_timeout_s
    (one warning line). Never raises. (W&B's report API takes no timeout of its own, unlike wandb.init/run.finish.)"""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = work()
        except Exception as e:  # noqa: BLE001 - a report never costs the sweep
            out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    thread = threading.Thread(target=run, name="wandb-report", daemon=True)
    thread.start()
    thread.join(max(until - time.monotonic(), 0.0))
    if thread.is_alive():
        _warn(
            f"{what} gave up: the sweep's report, like every W&B upload, ends within "
            f"logger.finish_timeout_s={timeout_s:g} s"
        )
        return None
    if "error" in out:
        _warn(f"{what} failed ({out['error']})")
    return out.get("value")


def at_sweep_end(
    sweep_dir: str | Path,
    logger_cfg: Any,
    *,
    entries: list,
    table: Any,
    command: str,
    diagnosis: dict | None = None,
    images: dict[str, Path] | None = None,
) -> list[Path]:
    """After the sweep summary run (results.callbacks): write the report's spec next to the sweep table and, when the
    sweep's runs went online, push it and print its URL. Bounded by logger.finish_timeout_s; never raises. Returns the
    spec written (for the sweep's list of files), if any."""
    try:
        from results.wandb_log import chosen_mode, group_for, logger_settings

        settings = logger_settings(logger_cfg)
        if (
            settings.get("name") in ("none", None)
            or not settings.get("report", True)
            or chosen_mode(settings)[0] == "disabled"
        ):
            return []
        sweep_dir = Path(sweep_dir)
        summary = _sidecar(
            sweep_dir
        )  # the sweep_summary run: how it went (online/offline), its group
        study = Study(
            dir=sweep_dir,
            group=summary.get("group") or settings.get("group") or group_for(sweep_dir),
            entries=entries,
            table=table,
            command=command,
            diagnosis=diagnosis,
            images=dict(images or {}),
            runs=run_ids(entries),
            summary_run=summary.get("id"),
        )
        spec = sweep_dir / SPEC_NAME
        timeout_s = float(settings["finish_timeout_s"])
        deadline = time.monotonic() + timeout_s
        project = str(summary.get("project") or settings.get("project") or "")
        entity = str(summary.get("entity") or settings.get("entity") or "")
        if (
            _bounded(
                lambda: write_spec(build(study, project=project, entity=entity), spec),
                deadline,
                "writing the W&B report spec",
                timeout_s,
            )
            is None
        ):
            return []
        push_cmd = f"python -m results.wandb_report {sweep_dir} --push"
        if summary.get("mode") != "online":
            _say(f"report spec: {spec}; push it after `wandb sync` with: {push_cmd}")
            return [spec]
        url = _bounded(
            lambda: _push_and_teardown(spec), deadline, "saving the W&B report", timeout_s
        )
        if url:
            _say(f"report: {url}")
        else:
            _say(f"report spec kept: {spec}; push it later with: {push_cmd}")
        return [spec]
    except Exception as e:  # noqa: BLE001 - the report never costs the sweep
        _warn(f"W&B report skipped ({type(e).__name__}: {e}); the sweep table is intact")
        return []


def _push_and_teardown(spec: Path) -> str:
    try:
        return push(spec)
    finally:
        import wandb

        wandb.teardown()


# ----------------------------------------------------------------------------------------- committed studies
def studies_report(dirs: list[str | Path], out: Path, *, title: str, argv: list[str]) -> Path:
    """One report of several studies (`python -m results.report --wandb-report`): a section per study dir. Their jobs
    ran without W&B (the committed studies use logger=none), so each study's table, plots and evidence are logged by
    a sweep_summary run of its own group (results.wandb_log.log_sweep, from a copy under <out>/wandb_studies/), and
    the report's panels read that run. Online: saved and its URL printed; offline: the spec and the push command."""
    import wandb_workspaces.reports.v2 as wr

    from tables.sweep import write_sweep_table
    from results.plots import standard_plots
    from results.wandb_log import log_sweep, logger_settings

    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    settings = logger_settings(None)
    blocks: list = [
        wr.P(
            f"One section per study; regenerate with `python -m results.report {' '.join(argv)}`. Each "
            "study's numbers come from its own run records; numbers from different studies are not "
            "compared in one table."
        )
    ]
    mode = None
    for directory in map(Path, dirs):
        if not directory.is_dir():
            continue
        study = load(directory, group=f"{directory.name} {stamp}")
        if not study.entries:
            continue
        study.job_runs, study.runs = False, {}
        stage = out / "wandb_studies" / directory.name
        stage.mkdir(parents=True, exist_ok=True)
        write_sweep_table(stage, study.table, study.command)
        study.images = standard_plots(
            study.entries, stage, prefix=PLOT_PREFIX, title=directory.name
        )
        if (directory / "multirun.yaml").is_file():
            shutil.copy(directory / "multirun.yaml", stage / "multirun.yaml")
        log_sweep(
            study.table,
            study.entries,
            stage,
            {**settings, "group": study.group},
            images=study.images,
            command=study.command,
            diagnosis=study.diagnosis,
        )
        summary = _sidecar(stage)
        study.summary_run, mode = summary.get("id"), summary.get("mode") or mode
        blocks += [wr.H1(f"{directory.name}: {question(study)}"), *study_blocks(study)]
    report = wr.Report(
        project=str(settings.get("project")),
        entity=str(settings.get("entity") or ""),
        title=title[:TITLE_MAX],
        description="The committed studies, from their run records.",
        blocks=blocks,
    )
    spec = write_spec(report, out / SPEC_NAME)
    if mode == "online":
        timeout_s = float(settings["finish_timeout_s"])
        url = _bounded(
            lambda: _push_and_teardown(spec),
            time.monotonic() + timeout_s,
            "saving the W&B report",
            timeout_s,
        )
        if url:
            _say(f"report: {url}")
            return spec
    _say(
        f"report spec: {spec}; upload the studies' runs with `wandb sync {out}/wandb_studies/*/wandb/offline-run-*`, "
        f"then push it with: python -m results.wandb_report {out} --push"
    )
    return spec


# ----------------------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m results.wandb_report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("path", help=f"a sweep dir (or a {SPEC_NAME})")
    parser.add_argument(
        "--push",
        action="store_true",
        help="save the report in W&B (after `wandb sync` of the sweep's runs) and print its URL",
    )
    parser.add_argument(
        "--entity", help="W&B entity (default: the spec's, else your login's default entity)"
    )
    parser.add_argument("--project", help="W&B project (default: the spec's, from logger.project)")
    args = parser.parse_args(argv)
    path = Path(args.path)
    if not path.exists():
        raise SystemExit(
            f"results.wandb_report: {path} does not exist; pass a sweep dir (holding multirun.yaml or "
            f"{SPEC_NAME})."
        )
    spec = path if path.is_file() else path / SPEC_NAME
    if not spec.is_file() or not args.push:
        if path.is_file():
            raise SystemExit(
                f"results.wandb_report: {path} is a file; pass its sweep dir to rebuild the spec"
            )
        from results.wandb_log import logger_settings

        study = load(path)
        settings = logger_settings(None)
        if not study.entries:
            raise SystemExit(f"results.wandb_report: no run records under {path}.")
        report = build(
            study,
            project=args.project or _sidecar(path).get("project") or settings["project"],
            entity=args.entity or _sidecar(path).get("entity") or "",
        )
        if (
            spec.is_file()
        ):  # pushed before: keep the report's id and place, so a push updates that report
            try:
                old = read_spec(spec)
                report.id, report.entity = old.id, args.entity or old.entity or report.entity
            except Exception as e:  # noqa: BLE001 - an unreadable spec is replaced
                _warn(f"{spec} was unreadable ({type(e).__name__}); a new report spec replaces it")
        write_spec(report, spec)
        print(f"report spec: {spec}")
    if args.push:
        try:
            url = push(spec, entity=args.entity, project=args.project)
        except Exception as e:  # noqa: BLE001 - one line, not a traceback
            raise SystemExit(
                f"results.wandb_report: pushing {spec} failed: {type(e).__name__}: {e}"
            ) from None
        print(f"report: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
