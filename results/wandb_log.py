"""Weights & Biases logging of run records and sweep tables, on W&B's public API (docs/wandb.md).

Best effort by contract: rank 0 logs once the record is on disk, and a W&B problem is one warning
line, never an exception into the job, a prompt or an unbounded wait (logger.init_timeout_s,
logger.finish_timeout_s). Without credentials, or when an online wandb.init fails, the run is
logged offline for `wandb sync`. A project or entity typed as `${oc.env:...}` stays out of an
offline run's files: the sync line names the variable instead.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from base.log import get
from base.provenance import env_name
from base.record import RECORD_NAME, Record
from base.record_types import CollectivesResult, TrainResult
from base.schema import CONF_DIR, WandbMode
from comm.link import short_label as link_label, tags as link_tags
from tables.sweep import multirun_config

SIDECAR = "wandb_run.json"  # what was logged where; the report reads it
ROUTING = ("project", "entity")  # what an online run needs to land where it belongs
SWEEP_EVIDENCE = (".csv", ".md", ".json", ".yaml", ".png")  # the sweep dir's files it logs
# A partial logger node (hand-made, or an older record's) is completed from the YAML itself.
_YAML = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "logger" / "wandb.yaml"))
FALLBACK = {k: v for k, v in _YAML.items() if k not in ("defaults", "_target_")}
log = get(__name__)
_online_failed: str | None = None  # why online failed in this process: the next runs go offline


def say(msg: str) -> None:
    log.info(f"[wandb] {msg}")


def warn(msg: str) -> None:
    log.warning(f"[wandb] WARNING: {msg}")


def one_line(e: Exception) -> str:
    """An exception as one line: W&B's messages run on with advice over several."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _plain(obj: Any) -> Any:
    if isinstance(obj, (DictConfig, ListConfig)):
        return OmegaConf.to_container(obj, resolve=True)
    return obj


def _select(conf: Any, key: str) -> Any:
    return OmegaConf.select(conf, key) if conf is not None else None


def logger_settings(cfg: Any = None, record: Record | None = None) -> dict[str, Any]:
    """logger.* from cfg (the config or its logger node), else the record's, over FALLBACK."""
    plain = _plain(cfg)
    node = plain.get("logger", plain) if isinstance(plain, dict) else {}
    if not node and record is not None:
        node = record.setting("logger", {})
    node = {k: v for k, v in dict(node or {}).items() if v is not None or k in ("entity", "group")}
    return {**FALLBACK, "tags": list(FALLBACK["tags"]), **node}


def shown_settings(settings: dict, typed: dict) -> tuple[dict, dict]:
    """(settings W&B may see, {project/entity: typed text} withheld from an offline run).
    `typed`: the logger node as recorded, a key from the environment as its `${oc.env:...}` text
    (base/provenance.py)."""
    shown, withheld = dict(settings), {}
    for key, value in typed.items():
        if key in settings and value != settings[key] and "${" in str(value):
            (withheld if key in ROUTING else shown)[key] = value
    return shown, withheld


# ------------------------------------------------------------------------------------- the mode
def _wandb():
    """wandb, quiet and without its error telemetry's exit hook (docs/failures.md); the user's own
    WANDB_SILENT / WANDB_ERROR_REPORTING win."""
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    import wandb

    return wandb


def chosen_mode(settings: dict) -> tuple[str | None, str]:
    """(mode, why) where the user chose offline or disabled (logger.mode, else WANDB_MODE), else
    (None, "")."""
    requested = str(settings.get("mode") or "auto").lower()
    if requested not in WandbMode.__members__:
        return "offline", f"unknown logger.mode={requested!r} (one of {', '.join(WandbMode)})"
    if requested in ("offline", "disabled"):
        return requested, f"logger.mode={requested}"
    env = (os.environ.get("WANDB_MODE") or "").lower()
    if env in ("offline", "dryrun", "disabled"):
        return ("disabled" if env == "disabled" else "offline"), f"WANDB_MODE={env}"
    return None, ""


def resolve_mode(settings: dict) -> tuple[str, str]:
    """(mode, why) this run starts in, without a prompt or the network: "online" says only that
    credentials exist; whether the host takes the run is wandb.init's to find out."""
    mode, why = chosen_mode(settings)
    if mode is not None:
        return mode, why
    if _online_failed:
        return "offline", _online_failed
    fix = "`wandb login` or WANDB_API_KEY fixes it"
    try:
        if _wandb().login(prompt=False, verify=False):
            return "online", "logged in"
    except Exception as e:  # noqa: BLE001 - a malformed key or settings: offline, said
        return "offline", f"W&B refused the credentials ({one_line(e)}; {fix})"
    return "offline", f"not logged in to W&B (no API key; {fix})"


# ------------------------------------------------------------------------------------- naming
def group_for(path: str | Path, overrides: list[str] | None = None, task: str | None = None) -> str:
    """One W&B group per sweep (or single run), named for what it studies, then when: the
    experiment preset, else the swept keys, else (a single run) the task; then Hydra's date and
    time (`optim,bucket 2025-01-31_12-00-00`). A sweep's jobs and summary share it."""
    p = Path(path).resolve()
    stamp = f"{p.parent.name}_{p.name}" if p.parent.name else p.name
    sweep = multirun_config(p)
    typed = [*(overrides or []), *(str(o) for o in _select(sweep, "hydra.overrides.task") or [])]
    label = experiment_preset(typed) or ",".join(swept_keys(p))
    label = label or ("" if sweep is not None else task or "")
    return f"{label[: 127 - len(stamp)]} {stamp}" if label else stamp[-128:]  # W&B's limit


def experiment_preset(overrides: list[str]) -> str | None:
    """The preset a command line chose (it is @package _global_: the config keeps no key for it)."""
    chosen = (o.partition("=")[2] for o in overrides if o.lstrip("+").startswith("experiment="))
    return next(chosen, None)


def _record_group(record: Record, settings: dict) -> str:
    job = record.job
    if settings.get("group"):
        return str(settings["group"])
    if job.sweep_dir:
        return group_for(job.sweep_dir)
    return group_for(job.output_dir or ".", record.overrides, record.task)


def swept_keys(sweep_dir: str | Path | None) -> list[str]:
    """Keys the sweep varies (<sweep_dir>/multirun.yaml): its sweeper's params (an optimising
    sweeper's search space too) and the command line's sweeps."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    conf = multirun_config(sweep_dir) if sweep_dir else None
    typed = [f"{k}={v}" for k, v in (_select(conf, "hydra.sweeper.params") or {}).items()]
    typed += [str(o) for o in _select(conf, "hydra.overrides.task") or []]
    try:
        parsed = OverridesParser.create().parse_overrides(typed)
    except Exception:  # noqa: BLE001 - a sweeper's params Hydra cannot parse: no swept keys
        return []
    return [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]


def run_name(overrides: list[str], task: str | None, sweep_dir: str | Path | None = None) -> str:
    """The job's overrides, those its sweep varies first: runs in a group read apart at a glance."""
    parts = [o for o in overrides if not o.lstrip("+~").startswith(("logger", "hydra."))]
    swept = swept_keys(sweep_dir)
    parts.sort(key=lambda o: o.partition("=")[0].lstrip("+~") not in swept)
    name = " ".join(parts) or (task or "run")
    return name if len(name) <= 128 else name[:127] + "…"


def run_tags(cfg: Any, record: Record, settings: dict) -> list[str]:
    """logger.tags, the config's top-level `tags` (experiment presets set either), the emulated
    link's (`emulated-link`, `link:<rate>`) and `experiment:<name>`."""
    config = _plain(cfg)
    if not isinstance(config, dict) or "logger" not in config:
        config = record.config or {}
    tags: list[str] = []
    for source in (settings.get("tags"), config.get("tags")):
        source = [source] if isinstance(source, str) else source
        tags += [str(t) for t in source] if isinstance(source, (list, tuple)) else []
    tags += link_tags(record.env.link)
    experiment = experiment_preset(list(record.overrides))  # the config keeps no key for it
    tags += [f"experiment:{experiment}"] if experiment else []
    return list(dict.fromkeys(t[:64] for t in tags if t))


# ------------------------------------------------------------------------------------- runs
def _init(mode: str, s: dict, withheld: dict, dir: Path, init: dict):
    wandb = _wandb()
    limits = {"init_timeout": s["init_timeout_s"], "finish_timeout": s["finish_timeout_s"]}
    quiet = dict(
        silent=True, disable_git=True, save_code=False, console="off", x_disable_stats=True
    )
    ws = wandb.Settings(**quiet, **{k: float(v) for k, v in limits.items()})
    route = {k: None if mode == "offline" and k in withheld else s.get(k) for k in ROUTING}
    where = dict(mode=mode, dir=str(dir), settings=ws, reinit="create_new")
    return wandb.init(**where, **route, **init)


def _sync(withheld: dict, target: Any) -> str:
    """`wandb sync` of target; a project/entity withheld from an offline run's files is named by
    its environment variable, for the shell to supply at upload time."""
    names = {k: env_name(text) for k, text in withheld.items()}
    options = [f'--{k} "${n}"' if n else f"--{k} <{k}>" for k, n in names.items()]
    return " ".join(["wandb sync", *options, str(target)])


def _start(settings: dict, withheld: dict, dir: Path, init: dict) -> tuple[Any, str]:
    """(run, mode): online when it can be, else offline; no run when disabled, or when W&B cannot
    even write offline (the record is kept either way)."""
    global _online_failed
    mode, why = resolve_mode(settings)
    if mode == "disabled":
        if why.startswith("WANDB_MODE"):
            say(f"disabled ({why})")
        return None, mode
    dir.mkdir(parents=True, exist_ok=True)
    run = None
    if mode == "online":
        earlier = set(dir.glob("wandb/run-*"))
        try:
            run = _init("online", settings, withheld, dir, init)
        except Exception as e:  # noqa: BLE001 - a failed online start: offline, for the process
            for debris in set(dir.glob("wandb/run-*")) - earlier:  # `wandb sync` would upload it
                shutil.rmtree(debris, ignore_errors=True)
            mode, why = "offline", f"online start failed ({one_line(e)}); check the network and "
            why += "WANDB_BASE_URL, `wandb login`, or set WANDB_MODE=offline"
            _online_failed = why
    if run is None:
        try:
            run = _init("offline", settings, withheld, dir, init)
        except Exception as e:  # noqa: BLE001 - not even offline: no run, the record is kept
            warn(f"wandb.init(mode=offline) failed: {one_line(e)}")
            return None, mode
    if mode == "online":
        say(f"online: {run.url}")
    else:
        say(f"offline ({why}); upload later with: {_sync(withheld, Path(run.dir).parent)}")
    return run, mode


@contextmanager
def _logging(settings: dict, withheld: dict, dir: Path, intact: str, failed=False, **init):
    """(run, mode) for the block (run None: nothing to log); an error in the block is one warning
    and marks the run failed; then the sidecar, and the run finished and W&B torn down in any
    case."""
    run, mode = _start(settings, withheld, Path(dir), init)
    if run is None:
        yield None, mode
        return
    error = False
    try:
        try:
            yield run, mode
        except Exception as e:  # noqa: BLE001 - W&B never fails a run: its files are on disk
            error = True
            warn(f"logging to W&B failed part-way ({one_line(e)}); {intact}")
        online, run_dir = mode == "online", Path(run.dir).parent  # run.dir: <run dir>/files
        # an offline run's files hold no value from the environment; an online URL names them anyway
        info = {"mode": mode, "id": run.id, **{k: settings.get(k) for k in ROUTING}}
        info.update({} if online else withheld)
        info.update({k: init.get(k) for k in ("group", "name", "job_type")})
        info.update(run_dir=str(run_dir), url=run.url if online else None)
        info["sync"] = None if online else _sync(withheld, run_dir)
        (Path(dir) / SIDECAR).write_text(json.dumps(info, indent=2))
    finally:
        try:
            run.finish(exit_code=1 if failed or error else 0)
        except Exception as e:  # noqa: BLE001 - W&B never fails a run
            warn(f"finishing the W&B run failed: {one_line(e)}")
        finally:
            try:
                _wandb().teardown()
            except Exception as e:  # noqa: BLE001 - W&B never fails a run
                warn(f"W&B teardown failed: {one_line(e)}")


def _clean(value: Any) -> Any:
    """NaN and inf as None: W&B's JSON has no such numbers."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _cell(value: Any) -> Any:
    """A sweep table cell: numbers as they are, anything else as text."""
    return _clean(value) if value is None or isinstance(value, (int, float)) else str(value)


def _history(run, result: TrainResult) -> None:
    """One row per measured step (rank 0): step time, each phase, throughput."""
    series, tp = result.series, result.throughput
    times = (series.step_time_s if series is not None else None) or []
    phases = series.phases.to_dict() if series is not None and series.phases is not None else {}
    per_step = result.global_batch  # samples per step, as the record's throughput counts them
    if tp is not None and tp.samples_per_s and tp.steps_per_s:
        per_step = tp.samples_per_s / tp.steps_per_s
    for i, t in enumerate(times):
        if t is None:
            continue
        row: dict[str, Any] = {"step/time_ms": t * 1e3}
        if t > 0:
            row["throughput/steps_per_s"] = 1.0 / t
            if per_step:
                row["throughput/samples_per_s"] = per_step / t
        for name, values in phases.items():
            if values and i < len(values) and values[i] is not None:
                row[f"phase_ms/{name}"] = values[i] * 1e3
        run.log(row, step=i)


# ------------------------------------------------------------------------------------- artifacts
# The evidence behind the numbers, as artifacts a report links (offline: staged for `wandb sync`):
# record-<group>-job<num>, trace-<group>-job<num>, sweep-<group>.
def artifact_name(*parts: Any) -> str:
    """W&B artifact names allow letters, digits, '-', '_' and '.'."""
    name = "-".join(str(p) for p in parts if p not in (None, ""))
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:128] or "evidence"


def log_evidence(run, name: str, kind: str, files: list[Path], desc: str, meta: dict) -> None:
    """One artifact of `files` (their names kept); none when no file exists."""
    import wandb

    files = [f for f in files if f.is_file()]
    if files:
        meta = {k: _clean(v) for k, v in meta.items()}
        art = wandb.Artifact(artifact_name(name), type=kind, description=desc, metadata=meta)
        for f in files:
            art.add_file(str(f), name=f.name)
        run.log_artifact(art)


def _log_result(run, record: Record, out_dir: Path, group: str) -> None:
    """Per-step history, the collectives' rows, headline and status as summary, the evidence."""
    import wandb

    from diagnosis import wandb_summary

    result = record.result
    train = result if isinstance(result, TrainResult) else None
    if train is not None:
        _history(run, train)
    if isinstance(result, CollectivesResult) and result.rows:
        rows = [r.to_dict() for r in result.rows]
        cols = list(dict.fromkeys(k for r in rows for k in r))
        data = [[_clean(r.get(c)) for c in cols] for r in rows]
        run.log({"rows": wandb.Table(cols, data, allow_mixed_types=True)})
    headline = (result.headline if result is not None else None) or {}
    tp = train.throughput if train is not None else None
    budget = train.time_budget if train is not None else None
    summary = {k: _clean(v) for k, v in headline.items()}
    summary["steps/s CI lo"] = _clean(tp.ci_lo if tp else None)
    summary["steps/s CI hi"] = _clean(tp.ci_hi if tp else None)
    summary["steady"] = train.steady if train is not None else None
    summary["window share"] = _clean(budget.window_share if budget else None)
    summary.update(
        status=record.status,
        task=record.task,
        world_size=getattr(result, "world_size", None) or record.env.world_size,
        device=getattr(result, "device_name", None),
        run_record=str(out_dir / RECORD_NAME),
        link=link_label(record.env.link) or "none",
    )
    if record.status != "ok":
        summary["error"] = str(record.error or "")[:2000]
    summary.update(wandb_summary(result.diagnosis if result is not None else None))
    run.summary.update(summary)

    job = f"job{record.job.num}" if record.job.num is not None else None
    meta = {"status": record.status, "task": record.task, "command": record.command, **headline}
    desc = f"run record: {record.command or ''}"
    files = [out_dir / RECORD_NAME]
    log_evidence(run, artifact_name("record", group, job), "run_record", files, desc, meta)
    if record.setting("profile.enabled"):
        files = sorted(out_dir.glob("trace.rank*.json"))
        desc = "torch.profiler Chrome traces, one per rank (open in Perfetto or chrome://tracing)"
        meta = {"profile": record.setting("profile")}
        log_evidence(run, artifact_name("trace", group, job), "profiler_trace", files, desc, meta)


def log_run(record: Record | dict, cfg: Any = None) -> None:
    """Log one finished (or failed) run record (a Record, or the JSON the logger's `_target_` gets)
    as a W&B run. Never raises."""
    try:
        record = Record.from_dict(record) if isinstance(record, dict) else record
        typed = logger_settings(record=record)
        settings, withheld = shown_settings(logger_settings(cfg, record), typed)
        if settings.get("name") in ("none", None):
            return
        out_dir = Path(record.job.output_dir or ".")
        config = dict(record.config or {})
        config.setdefault("overrides", record.overrides)
        config.setdefault("env", record.env.to_dict())
        group = _record_group(record, settings)
        init = dict(
            group=group,
            job_type=record.task or "train",
            name=run_name(list(record.overrides), record.task, record.job.sweep_dir),
            config=config,
            tags=run_tags(cfg, record, settings),
        )
        failed, intact = record.status != "ok", "the run record is intact"
        with _logging(settings, withheld, out_dir, intact, failed, **init) as (run, _):
            if run is not None:
                _log_result(run, record, out_dir, group)
    except Exception as e:  # noqa: BLE001 - W&B never fails a run: the record is on disk
        warn(f"W&B logging skipped ({one_line(e)}); the run record is intact")


def log_sweep(
    table,
    entries: list,
    sweep_dir: str | Path,
    logger_cfg: Any,
    *,
    images: dict | None = None,
    command: str = "",
    tags: list | None = None,
    diagnosis: dict | None = None,
    typed_logger: dict | None = None,
) -> None:
    """The sweep table (+ plots) as a W&B run of job_type sweep_summary, in the jobs' group. Never
    raises. typed_logger: the logger node as recorded (base/provenance.py); default: logger_cfg."""
    sweep_dir = Path(sweep_dir)
    try:
        resolved = logger_settings(logger_cfg)
        typed = resolved if typed_logger is None else logger_settings(typed_logger)
        settings, withheld = shown_settings(resolved, typed)
        if settings.get("name") in ("none", None):
            return
        group = settings.get("group") or group_for(sweep_dir)  # the jobs' group (_record_group)
        jobs = {"jobs": len(entries), "failed_jobs": sum(not e.ok for e in entries)}
        tags = [*(settings.get("tags") or []), *(tags or [])]
        init = dict(
            group=group,
            job_type="sweep_summary",
            name=f"sweep summary {group}",
            config=dict(command=command, sweep_dir=str(sweep_dir.resolve()), jobs=len(entries)),
            tags=list(dict.fromkeys(str(t)[:64] for t in tags)),
        )
        intact = "sweep_table.md/csv are intact"
        with _logging(settings, withheld, sweep_dir, intact, **init) as (run, mode):
            if run is None:
                return
            if mode == "offline":
                runs = f"{sweep_dir}/wandb/offline-run-* {sweep_dir}/*/wandb/offline-run-*"
                say(f"upload the whole sweep later with: {_sync(withheld, runs)}")
            _log_table(run, table, images or {}, diagnosis)
            notes, warnings = " ".join(table.notes), " ".join(table.warnings)
            run.summary.update({**jobs, "notes": notes, "warnings": warnings})
            autotune = sweep_dir / "autotune.json"
            if autotune.is_file():
                run.summary["autotune"] = json.loads(autotune.read_text()).get("conclusion")
            files = sorted(f for f in sweep_dir.iterdir() if f.suffix in SWEEP_EVIDENCE)
            files = [f for f in files if f.name != SIDECAR]
            desc = f"sweep table, plots and sweep files: {command}"
            name = artifact_name("sweep", group)
            log_evidence(run, name, "sweep_table", files, desc, {**jobs, "command": command})
            if diagnosis:
                from diagnosis import format_sweep

                run.summary["diagnosis"] = format_sweep(diagnosis)
    except Exception as e:  # noqa: BLE001 - W&B never fails a sweep: the table is on disk
        warn(f"W&B sweep summary skipped ({one_line(e)}); sweep_table.md/csv are intact")


CHECKED = ["run", "finding", "recommends", "ran_as", "estimated", "measured"]
CHECKED += ["measured_lo", "measured_hi", "error", "verdict"]  # diagnosis.diagnose_sweep's


def _log_table(run, table, images: dict, diagnosis: dict | None) -> None:
    """The table (figures with intervals also as the text the Markdown shows), its plots, a bar
    chart of throughput, and the estimates the diagnosis checked against measured savings."""
    import wandb

    columns, shown = list(table.columns), list(table.display)
    rows = [
        [_cell(r.get(c)) for c in columns] + [table.text(r, c) for c in shown] for r in table.rows
    ]
    header = columns + [f"{c} (95% CI)" for c in shown]
    logged: dict[str, Any] = {"sweep_table": wandb.Table(header, rows, allow_mixed_types=True)}
    logged.update({f"plots/{name}": wandb.Image(str(path)) for name, path in images.items()})
    value = next((c for c in ("samples/s", "steps/s") if c in columns), None)
    if value is not None:
        label = "overrides" if "overrides" in columns else columns[0]
        numbers = [r for r in table.rows if isinstance(r.get(value), (int, float))]
        bars = [[str(r.get(label)), _cell(r.get(value))] for r in numbers]
        chart = wandb.plot.bar(
            wandb.Table([label, value], bars), label, value, title=f"{value} per job"
        )
        logged["throughput_bar"] = chart
    if diagnosis and diagnosis.get("checked"):
        checked = [[_cell(c.get(k)) for k in CHECKED] for c in diagnosis["checked"]]
        logged["diagnosis/checked_estimates"] = wandb.Table(
            CHECKED, checked, allow_mixed_types=True
        )
    run.log(logged)
