"""Weights & Biases logging of run records (rank 0 only, after the record is on disk), on W&B's public API.

Everything here is best effort: a W&B problem prints a warning and returns; it never raises into the job, never loses
the local record, never prompts and never blocks on the network for long:
  - modes "auto" and "online" are WANDB_MODE when the user set it to offline/dryrun/disabled; else online when W&B finds
    credentials without prompting (wandb.login(prompt=False): WANDB_API_KEY, an identity token, the netrc entry of
    `wandb login`), else offline at once. A wandb.init that fails (a refused or silent host, a rejected key, a timeout:
    logger.init_timeout_s) falls back to offline with one line naming the cause and the fix; later runs in the same
    process (a local sweep's jobs) go offline at once for the same reason. Offline runs print the `wandb sync` line;
  - run.finish stops waiting for uploads after logger.finish_timeout_s (the rest stays on disk for `wandb sync`), so
    one run's W&B time is at most init_timeout_s + finish_timeout_s plus W&B's local work; every run is finished
    (exit code 1 when the job failed, so W&B marks it failed) and the W&B service is torn down, so the rank can exit;
  - W&B's own error telemetry is off unless WANDB_ERROR_REPORTING says otherwise: wandb 0.31 exports it from an exit
    hook (10 s per request) to the host a failed online try named, after the run and outside both timeouts;
  - a logger setting whose value came from the environment (`${oc.env:...}`) reaches W&B as the text typed (group,
    tags; the run's config is the record's), except project and entity, which an online run needs to land where
    it belongs: an offline run leaves them unset and prints `wandb sync --project "$NAME"` instead.
W&B files go under the job's output dir (<dir>/wandb/...), next to the run record. Runs are grouped by what their
sweep studies (group_for), and carry their evidence as artifacts a W&B report can link: the run record and profiler
traces of a run, the sweep table and the sweep dir's files of a sweep summary.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

from comm.link import short_label as link_label, tags as link_tags
from base.log import get
from base.schema import WandbMode
from base.record import RECORD_NAME, Record
from base.record_types import CollectivesResult, TrainResult
from tables.sweep import multirun_config

SIDECAR = "wandb_run.json"  # what was logged where; the sweep summary and the report read it
log = get(__name__)


def _say(msg: str) -> None:
    log.info(f"[wandb] {msg}")


def _warn(msg: str) -> None:
    log.warning(f"[wandb] WARNING: {msg}")


def _cause(e: Exception) -> str:
    """An exception as one line: W&B's messages run on with advice over several."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _plain(obj: Any) -> Any:
    if obj is None:
        return None
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True)
    except Exception:  # noqa: BLE001 - a node that does not resolve: taken as it is
        pass
    return obj


def logger_settings(cfg: Any = None, record: Record | None = None) -> dict[str, Any]:
    """logger.* from cfg (a DictConfig or a plain dict: the whole config or its logger node), else from the record."""
    plain = _plain(cfg)
    node = plain.get("logger", plain) if isinstance(plain, dict) else {}
    if not node and record is not None:
        node = record.setting("logger", {})
    settings = {
        k: list(v) if isinstance(v, list) else v for k, v in FALLBACK.items()
    }  # a copy: tags is a list
    settings.update(
        {k: v for k, v in dict(node or {}).items() if v is not None or k in ("entity", "group")}
    )
    return settings


ROUTING = (
    "project",
    "entity",
)  # what W&B needs to file an online run; everything else is only shown


def shown_settings(
    settings: dict[str, Any], typed: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(settings W&B may see, {project/entity: typed text} of those withheld from an offline run). `typed`: the same
    logger node as recorded (base/provenance.py: keys from the environment keep their `${oc.env:...}` text)."""
    shown, withheld = dict(settings), {}
    for key, value in typed.items():
        if key in settings and value != settings[key] and _interpolation(value):
            if key in ROUTING:
                withheld[key] = value
            else:
                shown[key] = value
    return shown, withheld


def _interpolation(value: Any) -> bool:
    """Text a record keeps instead of a value (`${oc.env:...}`), alone or in a list."""
    if isinstance(value, (list, tuple)):
        return any(_interpolation(v) for v in value)
    return isinstance(value, str) and "${" in value


# What a partial logger node (a hand-made one, or an older record's) lacks is taken from here. The values live in
# conf/logger/wandb.yaml, which Hydra composes into every run's config (base/schema.py holds only their types and
# bounds); this copy serves callers outside a Hydra run (python -m results.wandb_report, results.report
# --wandb-report) and tests/test_wandb.py keeps it equal to the YAML.
FALLBACK = {
    "name": "wandb",
    "mode": "auto",
    "project": "ddp-comm-overhead",
    "entity": None,
    "group": None,
    "tags": [],
    "init_timeout_s": 15,
    "finish_timeout_s": 15,
    "report": True,
}


# ----------------------------------------------------------------------------------------- the mode

_online_failed: str | None = (
    None  # why online failed in this process: later runs go offline at once
)


def _wandb():
    """wandb, quiet (no banners, no prompt) and without its error telemetry's exit hook (module docstring); the
    user's own WANDB_SILENT / WANDB_ERROR_REPORTING win."""
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    import wandb

    return wandb


def chosen_mode(settings: dict[str, Any]) -> tuple[str | None, str]:
    """(mode, why) where the user chose offline or disabled (logger.mode, else WANDB_MODE), else (None, "")."""
    requested = str(settings.get("mode") or "auto").lower()
    if requested not in WandbMode.__members__:
        return "offline", f"unknown logger.mode={requested!r} (one of {', '.join(WandbMode)})"
    if requested in ("offline", "disabled"):
        return requested, f"logger.mode={requested}"
    env_mode = (os.environ.get("WANDB_MODE") or "").lower()
    if env_mode in (
        "offline",
        "dryrun",
        "disabled",
    ):  # the shell's switch: W&B would not verify a login anyway
        return ("disabled" if env_mode == "disabled" else "offline"), f"WANDB_MODE={env_mode}"
    return None, ""


def resolve_mode(settings: dict[str, Any]) -> tuple[str, str]:
    """(mode, why): the W&B mode this run starts in. Never prompts and never touches the network: "online" only says
    that credentials exist; whether the host takes the run is wandb.init's to find out (_Run.start)."""
    mode, why = chosen_mode(settings)
    if mode is not None:
        return mode, why
    if _online_failed:
        return "offline", _online_failed
    try:
        logged_in = _wandb().login(prompt=False, verify=False)
    except Exception as e:  # noqa: BLE001 - a malformed key (AuthenticationError) or settings: offline, said
        return (
            "offline",
            f"W&B refused the credentials ({_cause(e)}; `wandb login` or WANDB_API_KEY fixes it)",
        )
    if not logged_in:
        return (
            "offline",
            "not logged in to W&B (no API key; `wandb login` or WANDB_API_KEY fixes it)",
        )
    return "online", "logged in"


# ----------------------------------------------------------------------------------------- naming


def group_for(path: str | Path, overrides: list[str] | None = None, task: str | None = None) -> str:
    """One W&B group per sweep (or single run), named for what it studies and then when: the experiment preset, else
    the keys the sweep varies, else (a single run) the task; then the dir's last two parts, Hydra's date and time.
    E.g. `autotune 2025-01-31_12-00-00`, `optim,bucket 2025-01-31_12-00-00`, `train 2025-01-31_12-00-00`.
    A sweep's jobs and its summary call this with the sweep dir alone, so they land in one group."""
    p = Path(path).resolve()
    stamp = f"{p.parent.name}_{p.name}" if p.parent.name else p.name
    sweep = multirun_config(p)
    typed = list(overrides or []) + [str(o) for o in _select(sweep, "hydra.overrides.task") or []]
    experiment = experiment_preset(typed)
    label = experiment or ",".join(swept_keys(p)) or ("" if sweep is not None else task or "")
    return (
        f"{label[: 127 - len(stamp)]} {stamp}" if label else stamp[-128:]
    )  # W&B caps group names at 128


def experiment_preset(overrides: list[str]) -> str | None:
    """The experiment preset a command line chose (a preset is @package _global_: the config keeps no key for it)."""
    return next(
        (o.partition("=")[2] for o in overrides if o.lstrip("+").startswith("experiment=")), None
    )


def _select(conf, key: str):
    if conf is None:
        return None
    from omegaconf import OmegaConf

    return OmegaConf.select(conf, key)


def _record_group(record: Record, settings: dict) -> str:
    if settings.get("group"):
        return str(settings["group"])
    job = record.job
    if job.sweep_dir:
        return group_for(job.sweep_dir)
    return group_for(job.output_dir or ".", record.overrides, record.task)


def swept_keys(sweep_dir: str | Path | None) -> list[str]:
    """Keys the sweep varies (from <sweep_dir>/multirun.yaml): its sweeper's params (also an optimising sweeper's
    choice()/interval() search space) and the command line's sweeps."""
    conf = multirun_config(sweep_dir) if sweep_dir else None
    if conf is None:
        return []
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = _select(conf, "hydra.sweeper.params") or {}
        task = [f"{k}={v}" for k, v in params.items()] + [
            str(o) for o in _select(conf, "hydra.overrides.task") or []
        ]
        parsed = OverridesParser.create().parse_overrides(task)
        return [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]
    except Exception:  # noqa: BLE001 - a sweeper's params Hydra cannot parse: no swept keys
        return []


def run_name(overrides: list[str], task: str | None, sweep_dir: str | Path | None = None) -> str:
    """The job's overrides, the ones its sweep varies first (so runs in a group read apart at a glance)."""
    parts = [o for o in overrides if not o.lstrip("+~").startswith(("logger", "hydra."))]
    swept = swept_keys(sweep_dir)
    if swept:
        parts = sorted(parts, key=lambda o: o.partition("=")[0].lstrip("+~") not in swept)
    name = " ".join(parts) or (task or "run")
    return name if len(name) <= 128 else name[:127] + "…"


def run_tags(cfg: Any, record: Record, settings: dict) -> list[str]:
    """logger.tags + the config's top-level `tags` (experiment presets set either) + `emulated-link` and
    `link:<rate>` for a run behind an emulated link + `experiment:<name>`."""
    config = _plain(cfg) if cfg is not None else None
    if not isinstance(config, dict) or "logger" not in config:
        config = record.config if record.config is not None else {}
    tags: list[str] = []
    for source in (settings.get("tags"), config.get("tags")):
        if isinstance(source, (list, tuple)):
            tags += [str(t) for t in source]
        elif isinstance(source, str):
            tags.append(source)
    tags += link_tags(record.env.link)
    experiment = config.get("experiment") or experiment_preset(list(record.overrides))
    if isinstance(experiment, str) and experiment:
        tags.append(f"experiment:{experiment}")
    elif isinstance(experiment, dict) and experiment.get("name"):
        tags.append(f"experiment:{experiment['name']}")
    return list(dict.fromkeys(t[:64] for t in tags if t))


# ----------------------------------------------------------------------------------------- runs


class _Run:
    """One W&B run: started online or offline (module docstring), always finished and torn down."""

    def __init__(
        self, settings: dict, *, dir: Path, withheld: dict | None = None, **init_kwargs: Any
    ) -> None:
        self.settings = settings
        self.withheld = (
            withheld or {}
        )  # project/entity from the environment: for an online run only
        self.dir = Path(dir)
        self.init_kwargs = init_kwargs
        self.run = None
        self.mode = "disabled"
        self.error = False

    def start(self) -> bool:
        global _online_failed
        mode, why = resolve_mode(self.settings)
        if mode == "disabled":
            if why.startswith("WANDB_MODE"):
                _say(f"disabled ({why})")
            return False
        self.dir.mkdir(parents=True, exist_ok=True)
        if mode == "online":
            earlier = set((self.dir / "wandb").glob("run-*"))
            try:
                self.run = self._init("online")
            except Exception as e:  # noqa: BLE001 - any failure of an online start: offline, for this process
                for debris in (
                    set((self.dir / "wandb").glob("run-*")) - earlier
                ):  # the failed try's files: a
                    shutil.rmtree(debris, ignore_errors=True)  # `wandb sync` would upload them
                why = _online_failed = (
                    f"online start failed ({_cause(e)}); check the network and WANDB_BASE_URL, "
                    "`wandb login`, or set WANDB_MODE=offline"
                )
                mode = "offline"
        if self.run is None:
            try:
                self.run = self._init("offline")
            except Exception as e:  # noqa: BLE001 - W&B cannot even write offline: no run, the record is kept
                _warn(f"wandb.init(mode=offline) failed: {_cause(e)}")
                return False
        self.mode = mode
        if mode == "offline":
            _say(f"offline ({why}); upload later with: {self.sync_command()}")
        else:
            _say(f"online: {getattr(self.run, 'url', '')}")
        return True

    def _init(self, mode: str):
        wandb = _wandb()
        ws = wandb.Settings(
            silent=True,
            init_timeout=float(self.settings["init_timeout_s"]),
            finish_timeout=float(self.settings["finish_timeout_s"]),
            disable_git=True,
            save_code=False,
            console="off",
            x_disable_stats=True,
        )
        route = {
            k: self.settings.get(k) if mode == "online" or k not in self.withheld else None
            for k in ROUTING
        }
        return wandb.init(
            mode=mode,
            dir=str(self.dir),
            settings=ws,
            reinit="create_new",
            **route,
            **self.init_kwargs,
        )

    def sync_command(self, target: Any = None) -> str:
        """`wandb sync` for this offline run (or `target`), with the project/entity withheld from its files named by
        their environment variables, so the shell supplies them at upload time."""
        from base.provenance import env_name

        options = []
        for key, text in self.withheld.items():
            name = env_name(text)
            options.append(f'--{key} "${name}"' if name else f"--{key} <{key}>")
        return " ".join(
            ["wandb sync", *options, str(target if target is not None else self.run_dir)]
        )

    @property
    def run_dir(self) -> Path | None:
        return (
            Path(self.run.dir).parent if self.run is not None else None
        )  # run.dir is <run dir>/files

    def finish(self, failed: bool) -> None:
        import wandb

        try:
            if self.run is not None:
                self.run.finish(exit_code=1 if failed or self.error else 0)
        except Exception as e:  # noqa: BLE001 - W&B never fails a run
            _warn(f"finishing the W&B run failed: {type(e).__name__}: {e}")
        finally:
            try:
                wandb.teardown()
            except Exception as e:  # noqa: BLE001 - W&B never fails a run
                _warn(f"W&B teardown failed: {type(e).__name__}: {e}")

    def sidecar(self, out_dir: Path, **extra: Any) -> None:
        if self.run is None:
            return
        # an offline run's files never hold a value from the environment; an online run's URL names its project
        typed = {
            k: self.settings.get(k)
            if self.mode == "online"
            else self.withheld.get(k, self.settings.get(k))
            for k in ROUTING
        }
        info = {
            "mode": self.mode,
            "id": self.run.id,
            **typed,
            "group": self.init_kwargs.get("group"),
            "name": self.init_kwargs.get("name"),
            "job_type": self.init_kwargs.get("job_type"),
            "run_dir": str(self.run_dir),
            "url": getattr(self.run, "url", None) if self.mode == "online" else None,
            "sync": self.sync_command() if self.mode == "offline" else None,
            **extra,
        }
        (out_dir / SIDECAR).write_text(json.dumps(info, indent=2))


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _history(run, result: TrainResult) -> None:
    """Per measured step (rank 0): step time, each phase, throughput."""
    series = result.series
    times = (series.step_time_s if series is not None else None) or []
    phases = series.phases.to_dict() if series is not None and series.phases is not None else {}
    tp = result.throughput
    per_step = None  # samples per step, as the record defines its throughput
    if tp is not None and tp.samples_per_s and tp.steps_per_s:
        per_step = tp.samples_per_s / tp.steps_per_s
    elif result.global_batch:
        per_step = result.global_batch
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


# ----------------------------------------------------------------------------------------- artifacts
# The evidence behind a run's or a sweep's numbers, as W&B artifacts a report can link (offline runs keep them
# staged until `wandb sync`). Names say what and which: record-<group>-job<num>, trace-<group>-job<num>, sweep-<group>.

SWEEP_EVIDENCE = (
    ".csv",
    ".md",
    ".json",
    ".yaml",
    ".png",
)  # the sweep dir's own files: table, plots, autotune, ...


def artifact_name(*parts: Any) -> str:
    """W&B artifact names allow letters, digits, '-', '_' and '.'."""
    name = re.sub(
        r"[^A-Za-z0-9_.-]+", "-", "-".join(str(p) for p in parts if p not in (None, ""))
    ).strip("-.")
    return name[:128] or "evidence"


def log_evidence(
    run,
    name: str,
    kind: str,
    files: list[Path],
    *,
    description: str = "",
    metadata: dict | None = None,
) -> None:
    """One artifact of `files` (their names kept) logged by `run`; nothing when no file exists."""
    files = [f for f in files if f.is_file()]
    if not files:
        return
    import wandb

    art = wandb.Artifact(
        artifact_name(name),
        type=kind,
        description=description,
        metadata={k: _clean(v) for k, v in (metadata or {}).items()},
    )
    for f in files:
        art.add_file(str(f), name=f.name)
    run.log_artifact(art)


def _run_evidence(run, record: Record, out_dir: Path, group: str) -> None:
    """The run record and, with profile.enabled, each rank's Chrome trace (trace.rank<N>.json)."""
    which = f"job{record.job.num}" if record.job.num is not None else None
    headline = record.result.headline if record.result is not None else None
    meta = {
        "status": record.status,
        "task": record.task,
        "command": record.command,
        **(headline or {}),
    }
    log_evidence(
        run,
        artifact_name("record", group, which),
        "run_record",
        [out_dir / RECORD_NAME],
        description=f"run record: {record.command or ''}",
        metadata=meta,
    )
    if record.setting("profile.enabled"):
        log_evidence(
            run,
            artifact_name("trace", group, which),
            "profiler_trace",
            sorted(out_dir.glob("trace.rank*.json")),
            description="torch.profiler Chrome traces, one per rank (open in Perfetto or chrome://tracing)",
            metadata={"profile": record.setting("profile")},
        )


def log_run(record: Record | dict, cfg: Any = None) -> None:
    """Log one finished (or failed) run record (a Record, or its JSON as the logger's `_target_` gets it) as a W&B
    run. Never raises."""
    w = None
    try:
        record = Record.from_dict(record) if isinstance(record, dict) else record
        failed = record.status != "ok"
        settings, withheld = shown_settings(
            logger_settings(cfg, record), logger_settings(record=record)
        )
        if settings.get("name") in ("none", None):
            return
        out_dir = Path(record.job.output_dir or ".")
        config = dict(record.config or {})
        config.setdefault("overrides", record.overrides)
        config.setdefault("env", record.env.to_dict())
        group = _record_group(record, settings)
        w = _Run(
            settings,
            dir=out_dir,
            withheld=withheld,
            group=group,
            job_type=record.task or "train",
            name=run_name(list(record.overrides), record.task, record.job.sweep_dir),
            config=config,
            tags=run_tags(cfg, record, settings),
        )
        if not w.start():
            return
        result = record.result
        train = result if isinstance(result, TrainResult) else None
        try:
            if train is not None:
                _history(w.run, train)
            rows = (
                [r.to_dict() for r in result.rows]
                if isinstance(result, CollectivesResult) and result.rows
                else []
            )
            if rows:
                import wandb

                cols = list(dict.fromkeys(k for r in rows for k in r))
                w.run.log(
                    {
                        "rows": wandb.Table(
                            columns=cols,
                            data=[[_clean(r.get(c)) for c in cols] for r in rows],
                            allow_mixed_types=True,
                        )
                    }
                )
            headline = result.headline if result is not None else None
            summary = {k: _clean(v) for k, v in (headline or {}).items()}
            tp = train.throughput if train is not None else None
            budget = train.time_budget if train is not None else None
            summary.update(
                {
                    "steps/s CI lo": _clean(tp.ci_lo if tp else None),
                    "steps/s CI hi": _clean(tp.ci_hi if tp else None),
                    "steady": train.steady if train is not None else None,
                    "window share": _clean(budget.window_share if budget else None),
                }
            )
            summary.update(
                status=record.status,
                task=record.task,
                world_size=getattr(result, "world_size", None) or record.env.world_size,
                device=getattr(result, "device_name", None),
                run_record=str(out_dir / RECORD_NAME),
                link=link_label(record.env.link) or "none",
            )
            if failed:
                summary["error"] = str(record.error or "")[:2000]
            from diagnosis import wandb_summary

            diagnosis = result.diagnosis if result is not None else None
            summary.update(wandb_summary(diagnosis))
            w.run.summary.update(summary)
            _run_evidence(w.run, record, out_dir, group)
        except Exception as e:  # noqa: BLE001 - W&B never fails a run: the record is on disk
            w.error = True
            _warn(
                f"logging to W&B failed part-way ({type(e).__name__}: {e}); the run record is intact"
            )
        w.sidecar(out_dir)
    except Exception as e:  # noqa: BLE001 - W&B never fails a run: the record is on disk
        _warn(f"W&B logging skipped ({type(e).__name__}: {e}); the run record is intact")
    finally:
        if w is not None and w.run is not None:
            w.finish(failed)


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
    """The sweep table (+ plots) as a W&B run of job_type sweep_summary, in the jobs' group. Never raises.
    typed_logger: the logger node as recorded (keys from the environment as typed); default: logger_cfg."""
    sweep_dir = Path(sweep_dir)
    w = None
    failed = [e for e in entries if not e.ok]
    try:
        resolved = logger_settings(logger_cfg)
        typed = resolved if typed_logger is None else logger_settings(typed_logger)
        settings, withheld = shown_settings(resolved, typed)
        if settings.get("name") in ("none", None):
            return
        group = settings.get("group") or group_for(sweep_dir)  # the jobs' group (_record_group)
        w = _Run(
            settings,
            dir=sweep_dir,
            withheld=withheld,
            group=group,
            job_type="sweep_summary",
            name=f"sweep summary {group}",
            config={
                "command": command,
                "sweep_dir": str(sweep_dir.resolve()),
                "jobs": len(entries),
            },
            tags=list(
                dict.fromkeys(str(t)[:64] for t in [*(settings.get("tags") or []), *(tags or [])])
            ),
        )
        if not w.start():
            return
        import wandb

        try:
            columns = list(table.columns)
            shown = list(
                table.display
            )  # figures with intervals: also as the text the Markdown table shows
            data = [
                [_wandb_cell(row.get(c)) for c in columns] + [table.text(row, c) for c in shown]
                for row in table.rows
            ]
            wtable = wandb.Table(
                columns=columns + [f"{c} (95% CI)" for c in shown],
                data=data,
                allow_mixed_types=True,
            )
            logged: dict[str, Any] = {"sweep_table": wtable}
            for name, path in (images or {}).items():
                logged[f"plots/{name}"] = wandb.Image(str(path))
            value = next((c for c in ("samples/s", "steps/s") if c in columns), None)
            if value is not None:
                label = "overrides" if "overrides" in columns else columns[0]
                bars = wandb.Table(
                    columns=[label, value],
                    data=[
                        [str(r.get(label)), _wandb_cell(r.get(value))]
                        for r in table.rows
                        if isinstance(r.get(value), (int, float))
                    ],
                )
                logged["throughput_bar"] = wandb.plot.bar(
                    bars, label, value, title=f"{value} per job"
                )
            if diagnosis and diagnosis.get(
                "checked"
            ):  # estimated against measured savings, errors included
                cols = [
                    "run",
                    "finding",
                    "recommends",
                    "ran_as",
                    "estimated",
                    "measured",
                    "measured_lo",
                    "measured_hi",
                    "error",
                    "verdict",
                ]
                logged["diagnosis/checked_estimates"] = wandb.Table(
                    columns=cols,
                    data=[[_wandb_cell(c.get(k)) for k in cols] for c in diagnosis["checked"]],
                    allow_mixed_types=True,
                )
            w.run.log(logged)
            w.run.summary.update(
                {
                    "jobs": len(entries),
                    "failed_jobs": len(failed),
                    "notes": " ".join(table.notes),
                    "warnings": " ".join(table.warnings),
                }
            )
            autotune = sweep_dir / "autotune.json"
            if autotune.is_file():
                w.run.summary.update(
                    {"autotune": json.loads(autotune.read_text()).get("conclusion")}
                )
            log_evidence(
                w.run,
                artifact_name("sweep", group),
                "sweep_table",
                sorted(
                    f
                    for f in sweep_dir.iterdir()
                    if f.suffix in SWEEP_EVIDENCE and f.name != SIDECAR
                ),
                description=f"sweep table, plots and sweep files: {command}",
                metadata={"jobs": len(entries), "failed_jobs": len(failed), "command": command},
            )
            if diagnosis:
                from diagnosis import format_sweep

                w.run.summary["diagnosis"] = format_sweep(diagnosis)
        except Exception as e:  # noqa: BLE001 - W&B never fails a sweep: the table is on disk
            w.error = True
            _warn(
                f"logging the sweep table to W&B failed ({type(e).__name__}: {e}); sweep_table.md/csv are intact"
            )
        w.sidecar(sweep_dir)
        if w.mode == "offline":
            _say(
                f"upload the whole sweep later with: "
                f"{w.sync_command(f'{sweep_dir}/wandb/offline-run-* {sweep_dir}/*/wandb/offline-run-*')}"
            )
    except Exception as e:  # noqa: BLE001 - W&B never fails a sweep: the table is on disk
        _warn(f"W&B sweep summary skipped ({type(e).__name__}: {e}); sweep_table.md/csv are intact")
    finally:
        if w is not None and w.run is not None:
            w.finish(False)


def _wandb_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return _clean(value)
    return None if value is None else str(value)
