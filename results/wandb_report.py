"""A W&B Report of a sweep, the paper-style comparison, built from the sweep dir (docs/wandb.md).

    python -m results.wandb_report <sweep dir>          # (re)write <sweep dir>/wandb_report.json
    python -m results.wandb_report <sweep dir> --push   # save it in W&B (after `wandb sync`)

The spec is the report's own view-spec JSON, written without network; its run sets filter on the
sweep's W&B group, and the metric names below are those results.wandb_log's runs log.
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

from base.record import setting
from base.record_types import DiagnosisBlock
from results.wandb_log import SIDECAR, artifact_name, group_for, logger_settings
from results.wandb_log import one_line, say, warn

SPEC_NAME = "wandb_report.json"
STEP = "Step"  # W&B's own _step: the job runs log one history row per measured step
STEP_TIME = "step/time_ms"
SAMPLES_PER_S = "throughput/samples_per_s"
PHASE = "phase_ms/{}"  # one per phase of the record's series
SUMMARY_JOB_TYPE = "sweep_summary"  # the run that logs the table, and each plot as plots/<name>
SWEEP_TABLE = "sweep_table"
PLOT = "plots/{}"
PLOT_PREFIX = "sweep_"  # results.callbacks' plots in the sweep dir: sweep_<name>.png
TITLE_MAX = 128  # W&B's limit on a report title


# ------------------------------------------------------------------------------------- the spec
def _convert(value):
    """Report -> its spec (JSON text), or spec -> Report. wandb_workspaces 0.4.13 (pinned) has no
    public conversion, only the private Report._to_model() / Report._from_model()."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2 import internal

    if isinstance(value, wr.Report):
        return value._to_model().model_dump_json(by_alias=True, exclude_none=True, indent=1)
    return wr.Report._from_model(internal.ReportViewspec.model_validate_json(value))


def read_spec(path: str | Path):
    """The report of a spec file, or of the wandb_report.json in a directory."""
    path = Path(path)
    return _convert((path / SPEC_NAME if path.is_dir() else path).read_text())


def write_spec(report, path: str | Path) -> Path:
    """Atomically: a sweep stopped while it writes leaves the old spec or the new, not half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(_convert(report))
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------------- the study
@dataclass
class Study:
    """One sweep (or committed study) as the report shows it."""

    dir: Path
    group: str  # the W&B group its runs carry
    entries: list  # tables.table.Entry, one per job
    table: Any  # tables.table.Table: the sweep table
    command: str
    diagnosis: dict | None = None  # diagnosis.diagnose_sweep
    images: dict[str, Path] = field(default_factory=dict)  # plot name -> PNG (plots/<name>)
    runs: dict[int, str] = field(default_factory=dict)  # job num -> its W&B run id
    summary_run: str | None = None  # the sweep_summary run's id
    job_runs: bool = True  # False: the jobs have no W&B runs (a study run with logger=none)


def _sidecar(directory: str | Path | None) -> dict:
    """What W&B logging left in a job or sweep dir: mode, id, group, project, entity."""
    try:
        return json.loads((Path(directory) / SIDECAR).read_text()) if directory else {}
    except (OSError, ValueError):
        return {}


def _study(sweep_dir: Path, group: str | None, entries: list, **fields: Any) -> Study:
    """A Study with the W&B run ids the job and sweep sidecars name."""
    summary = _sidecar(sweep_dir)
    ids = {e.num: _sidecar(e.output_dir).get("id") for e in entries if e.num is not None}
    return Study(
        dir=sweep_dir,
        group=group or summary.get("group") or group_for(sweep_dir),
        entries=entries,
        runs={int(n): str(i) for n, i in ids.items() if i},
        summary_run=summary.get("id"),
        **fields,
    )


def load(sweep_dir: str | Path, group: str | None = None) -> Study:
    """A sweep as its dir holds it: records, table, diagnosis, plots, command, W&B run ids."""
    from tables.sweep import commands, multirun_config, sweep_command, sweep_entries
    from tables.table import build_table

    sweep_dir = Path(sweep_dir)
    entries = sweep_entries(sweep_dir)
    conf = multirun_config(sweep_dir)
    command = sweep_command(conf) if conf is not None else "\n".join(commands(entries))
    diagnosis = None
    try:
        from diagnosis import diagnose_sweep

        diagnosis = diagnose_sweep(entries)
    except Exception as e:  # noqa: BLE001 - a diagnosis never costs the report
        warn(f"the report goes without the diagnosis ({type(e).__name__}: {e})")
    images = {p.stem[len(PLOT_PREFIX) :]: p for p in sorted(sweep_dir.glob(f"{PLOT_PREFIX}*.png"))}
    table = build_table(entries, first="job", title=f"Sweep {sweep_dir}")
    fields = dict(table=table, command=command, diagnosis=diagnosis, images=images)
    return _study(sweep_dir, group, entries, **fields)


def question(study: Study) -> str:
    """What the sweep asks: its experiment preset, else the keys it varies, else its task."""
    from tables.entries import varying_keys
    from tables.sweep import multirun_config
    from omegaconf import OmegaConf

    from results.wandb_log import experiment_preset, swept_keys

    conf = multirun_config(study.dir)
    typed = (OmegaConf.select(conf, "hydra.overrides.task") if conf is not None else None) or []
    preset = experiment_preset([str(o) for o in typed])
    tasks = sorted({e.task for e in study.entries if e.task})
    train, task = tasks == ["train"], f"task={'/'.join(tasks) or '?'}"
    if preset:
        asks = "what each configuration costs per step" if train else "the results"
        return f"experiment={preset}: {asks}"
    keys = [k for k in swept_keys(study.dir) if k != "repeats"] or varying_keys(study.entries)
    if keys:
        named = keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]
        does = "does" if len(keys) == 1 else "do"
        return f"How {does} {named} change " + ("throughput, and why?" if train else f"{task}?")
    return f"{task}: {len(study.entries)} run(s)"


# ------------------------------------------------------------------------------------- the report
def _runset(name: str, group: str, job_type=None, exclude=None, run_id=None):
    """Runs of one W&B group (optionally one job type, all but one, or one run). No entity or
    project: a run set naming them asks the W&B API as it is serialised; push() fills them in."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    if "'" in group:  # wandb_workspaces quotes a filter's value with ' and cannot parse it back
        raise ValueError(
            f"the W&B group {group!r} holds a ' which a report's run set filter cannot hold; "
            "set logger.group to a name without it"
        )
    filters = [expr.Metric("Group") == group]
    filters += [expr.Metric("JobType") == job_type] if job_type else []
    filters += [expr.Metric("JobType") != exclude] if exclude else []
    filters += [expr.Metric("ID") == run_id] if run_id else []
    return wr.Runset(entity="", project="", name=name, filters=filters)


def _media(title: str, name: str, w: int, h: int):
    """A panel of the plot the sweep_summary run logged as plots/<name>."""
    import wandb_workspaces.reports.v2 as wr

    return wr.MediaBrowser(title=title, media_keys=[PLOT.format(name)], layout=wr.Layout(w=w, h=h))


def _next_commands(diagnosis: dict | None) -> list[str]:
    """The top finding's `next:` command of every run, once each, in the runs' order."""
    out: list[str] = []
    for run in (diagnosis or {}).get("runs") or []:
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
    """Links to the runs and artifacts behind the numbers, relative to the project (push() makes
    them full URLs)."""
    import wandb_workspaces.reports.v2 as wr

    items: list = []
    if study.summary_run:
        run = wr.Link("sweep summary run", url=f"runs/{study.summary_run}")
        items.append([run, ": the table and plots"])
    sweep = artifact_name("sweep", study.group)
    about = " (sweep_table): the table as CSV and Markdown, plots, multirun.yaml"
    items.append([wr.Link(sweep, url=f"artifacts/sweep_table/{sweep}/latest"), about])
    for e in study.entries if study.job_runs else []:
        if e.num is None:
            continue
        label = " ".join(e.overrides) or "(no overrides)"
        row: list = [f"job {e.num} `{label}`{'' if e.ok else ' (failed)'}: "]
        if e.num in study.runs:
            row += [wr.Link("run", url=f"runs/{study.runs[e.num]}"), ", "]
        record = artifact_name("record", study.group, f"job{e.num}")
        row.append(wr.Link("run record", url=f"artifacts/run_record/{record}/latest"))
        if setting(e.config, "profile.enabled"):
            trace = artifact_name("trace", study.group, f"job{e.num}")
            url = f"artifacts/profiler_trace/{trace}/latest"
            row += [", ", wr.Link("profiler traces", url=url)]
        items.append(row)
    return items


def study_blocks(study: Study) -> list:
    """The report's sections for one sweep (H2 headings), each from the sweep's files and runs."""
    import wandb_workspaces.reports.v2 as wr
    from tables.sweep import describe_machine
    from tables.table import phase_table

    group, entries, images = study.group, study.entries, dict(study.images)
    failed = sum(not e.ok for e in entries)
    where = f"{study.dir.parent.name}/{study.dir.name}" if study.dir.parent.name else study.dir.name
    machine = [ln[2:] if ln.startswith("- ") else ln for ln in describe_machine(entries)]
    summary = _runset("sweep summary", group, job_type=SUMMARY_JOB_TYPE, run_id=study.summary_run)
    table = wr.WeavePanelSummaryTable(table_name=SWEEP_TABLE, layout=wr.Layout(w=24, h=12))
    blocks = [
        wr.P(
            f"{len(entries)} job(s){f', {failed} failed' if failed else ''}, sweep dir {where}, "
            f"W&B group: {group}. Every run set below filters on that group."
        ),
        wr.H2("Machine and command"),
        wr.UnorderedList(items=machine),
        wr.CodeBlock(code=study.command, language=None),
        wr.H2("The sweep table: 95% CIs and verdicts"),
        wr.P(
            f"The table of the sweep_summary run ({SWEEP_TABLE}): every column of the printed "
            "table, the figures with intervals also as text with their 95% CI."
        ),
        wr.PanelGrid(runsets=[summary], panels=[table]),
        wr.P(
            "The same table as the sweep printed it, with its notes (baseline, interval method, "
            "verdict rule):"
        ),
        wr.MarkdownBlock(text=study.table.markdown()),
    ]
    train = [e for e in entries if e.ok and e.task == "train"]
    if images.pop("throughput", None):
        title = "throughput per configuration (95% CI)"
        blocks += [
            wr.H2("Throughput with 95% CIs"),
            wr.P(
                "W&B's bar charts cannot draw intervals, so this is the sweep's own plot "
                f"(sweep_throughput.png, logged by the sweep_summary run as "
                f"{PLOT.format('throughput')}): each configuration's throughput with its 95% CI as "
                "error bars, the baseline in orange, the speed-up [CI] and verdict written on each "
                "bar."
            ),
            wr.PanelGrid(runsets=[summary], panels=[_media(title, "throughput", 24, 10)]),
        ]
    if train:
        phases = wr.MarkdownBlock(text=phase_table(entries).markdown())
        blocks += [wr.H2("Where the step time goes"), phases]
        if images.pop("phases", None):
            blocks += [
                wr.P(
                    f"Stacked per-phase medians per configuration ({PLOT.format('phases')}), "
                    "DDP's exposed communication as its own segment, the measured step median as a "
                    "marker."
                ),
                wr.PanelGrid(
                    runsets=[summary], panels=[_media("step-time breakdown", "phases", 24, 10)]
                ),
            ]
    if train and study.job_runs:
        blocks += [
            wr.H2("Every run, step by step"),
            wr.P(
                "Rank 0's time of every measured step (warm-up excluded) of every run of the "
                "group, and each phase's; a drift or a spike shows here before it shows in a "
                "median."
            ),
            _step_plots(study, train),
        ]
    if images:
        more = [_media(name, name, 12, 9) for name in images]
        blocks += [wr.H2("More plots"), wr.PanelGrid(runsets=[summary], panels=more)]
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
    return blocks + [wr.H2("Evidence"), wr.UnorderedList(items=_evidence(study))]


def _step_plots(study: Study, train: list):
    """Line plots over the measured steps of every job's run: step time, samples/s, each phase."""
    import wandb_workspaces.reports.v2 as wr

    series = [e.train.series for e in train if e.train is not None and e.train.series is not None]
    names = dict.fromkeys(p for s in series if s.phases is not None for p in s.phases.to_dict())
    task = study.entries[0].task if len({e.task for e in study.entries}) == 1 else None
    jobs = _runset("jobs", study.group, job_type=task, exclude=None if task else SUMMARY_JOB_TYPE)
    plots = [("step time per measured step (ms)", STEP_TIME, "ms", 12, 8)]
    plots += [("samples/s per measured step", SAMPLES_PER_S, None, 12, 8)]
    plots += [(f"{p} per measured step (ms)", PHASE.format(p), "ms", 8, 6) for p in names]
    panels = [
        wr.LinePlot(title=title, x=STEP, y=[y], title_y=unit, layout=wr.Layout(w=w, h=h))
        for title, y, unit, w, h in plots
    ]
    return wr.PanelGrid(runsets=[jobs], panels=panels)


def build(study: Study, *, project: str, entity: str = "") -> Any:
    """The report of one sweep, spec-ready: no W&B call."""
    import wandb_workspaces.reports.v2 as wr

    title = f"{question(study)} [{study.group}]"
    title = title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1] + "…"
    description = f"Sweep {study.dir.name}: `{study.command}`"[:1000]
    blocks = study_blocks(study)
    return wr.Report(
        project=project, entity=entity, title=title, description=description, blocks=blocks
    )


# ------------------------------------------------------------------------------------- pushing
def _absolute_links(report, prefix: str) -> bool:
    """Relative links (runs/<id>, artifacts/...) -> <prefix>/<path>; True if any changed."""
    links = [
        item
        for block in report.blocks
        for attr in ("text", "items")
        for item in _flat(getattr(block, attr, None))
        if isinstance(getattr(item, "url", None), str) and hasattr(item, "text")
    ]
    relative = [link for link in links if not link.url.startswith(("http://", "https://"))]
    for link in relative:
        link.url = f"{prefix.rstrip('/')}/{link.url.lstrip('/')}"
    return bool(relative)


def _flat(items: Any) -> list:
    return [i for item in items for i in _flat(item)] if isinstance(items, list) else [items]


def _from_environment(name: str | None) -> str | None:
    """A project/entity an offline spec keeps as typed (`${oc.env:NAME}`): its value now."""
    from base.provenance import env_name

    var = env_name(name) if name else None
    return os.environ.get(var) if var else name


def push(path: str | Path, entity: str | None = None, project: str | None = None) -> str:
    """Save a spec (file, or the dir holding it) as a W&B report with its entity, project and full
    links; returns its URL. The spec keeps the report's id, so pushing again updates that report."""
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
    report.entity, report.project = entity, project
    for runset in (rs for block in report.blocks for rs in getattr(block, "runsets", None) or []):
        runset.entity, runset.project = entity, project
    report.save()
    if _absolute_links(report, report.url.rsplit("/reports/", 1)[0]):
        report.save()  # the same report (it has its id now), its links complete
    write_spec(report, path)
    return report.url


def _push_online(spec: Path, timeout_s: float, until: float | None = None) -> str | None:
    """push() in a daemon thread, given up at `until` (default: timeout_s from now) with a warning:
    the report API takes no timeout, unlike wandb.init/run.finish. The URL or None; never raises."""
    import wandb

    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["url"] = push(spec)
        except Exception as e:  # noqa: BLE001 - a report never costs the sweep
            out["error"] = one_line(e)
        finally:
            wandb.teardown()

    thread = threading.Thread(target=work, name="wandb-report", daemon=True)
    thread.start()
    thread.join(max((until or time.monotonic() + timeout_s) - time.monotonic(), 0.0))
    if thread.is_alive():
        warn(
            "saving the W&B report gave up: the sweep's report, like every W&B upload, ends within "
            f"logger.finish_timeout_s={timeout_s:g} s"
        )
    elif "error" in out:
        warn(f"saving the W&B report failed ({out['error']})")
    else:
        say(f"report: {out['url']}")
    return out.get("url")


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
    """After the sweep summary run (results.callbacks): write the report's spec and, when the
    sweep's runs went online, push it within logger.finish_timeout_s. Never raises. Returns the
    spec written, if any."""
    from results.wandb_log import chosen_mode

    try:
        settings = logger_settings(logger_cfg)
        off = settings.get("name") in ("none", None) or not settings.get("report", True)
        if off or chosen_mode(settings)[0] == "disabled":
            return []
        sweep_dir = Path(sweep_dir)
        summary = _sidecar(sweep_dir)  # the sweep_summary run: online or offline, its group
        group = summary.get("group") or settings.get("group")
        fields = dict(table=table, command=command, diagnosis=diagnosis, images=dict(images or {}))
        study = _study(sweep_dir, group, entries, **fields)
        spec, timeout_s = sweep_dir / SPEC_NAME, float(settings["finish_timeout_s"])
        deadline = time.monotonic() + timeout_s
        project = str(summary.get("project") or settings.get("project") or "")
        entity = str(summary.get("entity") or settings.get("entity") or "")
        write_spec(build(study, project=project, entity=entity), spec)  # local: no network
        push_cmd = f"python -m results.wandb_report {sweep_dir} --push"
        if summary.get("mode") != "online":
            say(f"report spec: {spec}; push it after `wandb sync` with: {push_cmd}")
        elif not _push_online(spec, timeout_s, deadline):
            say(f"report spec kept: {spec}; push it later with: {push_cmd}")
        return [spec]
    except Exception as e:  # noqa: BLE001 - the report never costs the sweep
        warn(f"W&B report skipped ({type(e).__name__}: {e}); the sweep table is intact")
        return []


# ------------------------------------------------------------------------------------- studies
def studies_report(dirs: list[str | Path], out: Path, *, title: str, argv: list[str]) -> Path:
    """One report of several studies (`python -m results.report --wandb-report`), a section each.
    Their jobs ran without W&B, so each study's table, plots and evidence are logged by a
    sweep_summary run of its own group (from a copy under <out>/wandb_studies/)."""
    import wandb_workspaces.reports.v2 as wr

    from tables.sweep import write_sweep_table
    from results.plots import standard_plots
    from results.wandb_log import log_sweep

    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    settings = logger_settings(None)
    blocks: list = [
        wr.P(
            f"One section per study; regenerate with `python -m results.report {' '.join(argv)}`. "
            "Each study's numbers come from its own run records; numbers from different studies "
            "are not compared in one table."
        )
    ]
    mode = None
    for directory in map(Path, dirs):
        study = load(directory, group=f"{directory.name} {stamp}") if directory.is_dir() else None
        if study is None or not study.entries:
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
        logger = {**settings, "group": study.group}
        shown = dict(images=study.images, command=study.command, diagnosis=study.diagnosis)
        log_sweep(study.table, study.entries, stage, logger, **shown)
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
    if mode != "online" or not _push_online(spec, float(settings["finish_timeout_s"])):
        say(
            f"report spec: {spec}; upload the studies' runs with `wandb sync "
            f"{out}/wandb_studies/*/wandb/offline-run-*`, then push it with: "
            f"python -m results.wandb_report {out} --push"
        )
    return spec


# ------------------------------------------------------------------------------------- command line
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
    parser.add_argument("--entity", help="W&B entity (default: the spec's, else your login's)")
    parser.add_argument("--project", help="W&B project (default: the spec's, from logger.project)")
    args = parser.parse_args(argv)
    path, name = Path(args.path), "results.wandb_report"
    if not path.exists():
        where = f"a sweep dir (holding multirun.yaml or {SPEC_NAME})"
        raise SystemExit(f"{name}: {path} does not exist; pass {where}.")
    spec = path if path.is_file() else path / SPEC_NAME
    if not spec.is_file() or not args.push:
        if path.is_file():
            raise SystemExit(f"{name}: {path} is a file; pass its sweep dir to rebuild the spec")
        study = load(path)
        if not study.entries:
            raise SystemExit(f"{name}: no run records under {path}.")
        sidecar = _sidecar(path)
        project = args.project or sidecar.get("project") or logger_settings(None)["project"]
        report = build(study, project=project, entity=args.entity or sidecar.get("entity") or "")
        if spec.is_file():  # pushed before: keep the report's id and place, so a push updates it
            try:
                old = read_spec(spec)
                report.id, report.entity = old.id, args.entity or old.entity or report.entity
            except Exception as e:  # noqa: BLE001 - an unreadable spec is replaced
                warn(f"{spec} was unreadable ({type(e).__name__}); a new report spec replaces it")
        write_spec(report, spec)
        print(f"report spec: {spec}")
    if args.push:
        try:
            url = push(spec, entity=args.entity, project=args.project)
        except Exception as e:  # noqa: BLE001 - one line, not a traceback
            raise SystemExit(f"{name}: pushing {spec} failed: {type(e).__name__}: {e}") from None
        print(f"report: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
