"""A sweep directory as rows: every job's run record, or what is known of a job that left none, and
the jobs the sweep's own overrides say it has (the sweep table's callback, the report and W&B read
sweeps through these)."""

from __future__ import annotations

import itertools
import shlex
from collections import Counter
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from base.provenance import command as shell_command, typed_overrides
from base.record import Record, RecordError, find_records
from tables.sweep_order import PILOT_DIR, judged_dir, repeat_arguments
from tables.table import Entry, Table

TABLE_MD = "sweep_table.md"
TABLE_CSV = "sweep_table.csv"


def expected_jobs(config: DictConfig) -> list[list[str]] | None:
    """The overrides of every job the basic sweeper will launch, in job-number order; None if
    unknown."""
    try:
        target = str(OmegaConf.select(config, "hydra.sweeper._target_") or "")
        if not target.endswith(("BasicSweeper", "RepeatingSweeper")):
            return None
        params = OmegaConf.select(config, "hydra.sweeper.params")
        params = OmegaConf.to_container(params, resolve=False) if params is not None else {}
        arguments = [f"{k}={v}" for k, v in params.items()]
        if target.endswith(
            "RepeatingSweeper"
        ):  # the repeat loop outermost, as the repeating sweeper makes it
            arguments = repeat_arguments(OmegaConf.select(config, "repeats", default=1), arguments)
        arguments += typed_overrides(OmegaConf.select(config, "hydra.overrides.task") or [])
        return product_of(arguments)
    except Exception:  # noqa: BLE001 - glob() sweeps need Hydra's config loader; progress shows "?" for the total
        return None


def product_of(arguments: list[str]) -> list[list[str]]:
    """The jobs of a sweep, in job-number order: the product of the overrides' values, the first
    override outermost and a key given twice taking its first place and its last value, as Hydra's
    basic sweeper splits them (through Hydra's public override parser)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    choices: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides(arguments):
        key = o.get_key_element()
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                raise ValueError(f"{key}: not a list of values")
            choices[key] = [f"{key}={value}" for value in o.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={o.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*choices.values())]


def sweep_command(config: DictConfig) -> str:
    """The command line that started the sweep, as typed (Hydra's overrides unresolved),
    shell-quoted."""
    script = f"{OmegaConf.select(config, 'hydra.job.name') or 'train'}.py"
    hydra_overrides = [
        o
        for o in typed_overrides(OmegaConf.select(config, "hydra.overrides.hydra") or [])
        if not o.startswith("hydra.mode=")
    ]
    task = typed_overrides(OmegaConf.select(config, "hydra.overrides.task") or [])
    return shell_command(task + hydra_overrides, script=script, multirun=True)


def _job_dirs(sweep_dir: Path) -> dict[int, list[str]]:
    """Job directories Hydra created ({num: overrides}); a job writes .hydra/overrides.yaml before
    it starts."""
    found = {}
    for path in sweep_dir.glob("*/.hydra/overrides.yaml"):
        name = path.parent.parent.name
        if name.isdigit():
            try:
                found[int(name)] = typed_overrides(OmegaConf.load(path))
            except Exception:  # noqa: BLE001 - an unreadable overrides file: the job is still a row
                found[int(name)] = []
    return found


def sweep_entries(
    sweep_dir: str | Path,
    expected: list[list[str]] | None = None,
    returns: dict[int, dict] | None = None,
    sweep_id: str | None = None,
) -> list[Entry]:
    """One entry per job: its run record if it wrote one, else a failed entry saying what is known.
    sweep_id: leave out records another sweep wrote (those that carry another sweep's id)."""
    sweep_dir = judged_dir(Path(sweep_dir))  # repeats=auto judged on its pilot: the pilot's dir
    returns = returns or {}
    by_num: dict[int, Entry] = {}
    unnumbered: list[Entry] = []
    foreign: set[int | None] = set()  # job dirs holding another sweep's record
    for path in find_records(sweep_dir):
        if path.relative_to(sweep_dir).parts[0] == PILOT_DIR:
            continue  # repeats=auto's pilot chose the design: the planned runs are judged alone
        dir_num = int(path.parent.name) if path.parent.name.isdigit() else None
        try:
            record = Record.read(path)
            if sweep_id and record.job.sweep_id not in (None, sweep_id):
                foreign.add(dir_num)
                continue
            entry = Entry.from_record(record, path)
        except (RecordError, OSError, ValueError) as e:
            entry = Entry(
                num=dir_num,
                overrides=[],
                status="failed",
                error=f"unreadable run record {path}: {e}",
                output_dir=str(path.parent),
            )
        if entry.num is None:
            entry.num = dir_num
        if entry.num is None or entry.num in by_num:
            unnumbered.append(entry)
        else:
            by_num[entry.num] = entry

    dirs = _job_dirs(sweep_dir)
    nums = (set(dirs) - foreign) | set(returns) | set(range(len(expected or [])))
    for num in sorted(nums - set(by_num)):
        ret = returns.get(num, {})
        overrides = (
            ret.get("overrides")
            or dirs.get(num)
            or (expected[num] if expected and num < len(expected) else [])
        )
        error = ret.get("error")
        if not error:
            if num in returns:
                error = "the job ended without writing a run record"
            elif num in dirs:
                error = "no run record: the job crashed or was killed before writing it"
                if (sweep_dir / ".submitit").is_dir():
                    error += f" (launcher logs: {sweep_dir / '.submitit'})"
            else:
                error = "the job never started (no job directory)"
        job_dir = sweep_dir / str(num)
        by_num[num] = Entry(
            num=num,
            overrides=list(overrides),
            status="failed",
            error=error,
            output_dir=str(job_dir) if job_dir.is_dir() else ret.get("output_dir"),
        )
    entries = [by_num[n] for n in sorted(by_num)] + unnumbered
    _infer_missing(entries)
    return entries


def _infer_missing(entries: list[Entry]) -> None:
    """A job without a record takes task and world size from its sweep's other jobs when they all
    agree."""
    with_record = [e for e in entries if e.record is not None]
    for name in ("task", "world_size"):
        values = {e.task if name == "task" else e.knob(name) for e in with_record}
        if len(values) == 1 and None not in values:
            for e in entries:
                if e.record is None:
                    e.inferred.setdefault(name, next(iter(values)))


def write_sweep_table(sweep_dir: Path, table: Table, command: str) -> tuple[Path, Path]:
    md = sweep_dir / TABLE_MD
    md.write_text(f"# {table.title}\n\n```\n{command}\n```\n\n{table.markdown()}")
    csv = table.write_csv(sweep_dir / TABLE_CSV)
    return md, csv


def device_names(e: Entry) -> list[str]:
    devices = e.record.env.devices if e.record is not None else None
    names = [
        d if isinstance(d, str) else str(d.get("name", d) if isinstance(d, dict) else d)
        for d in devices or []
    ]
    if not names:
        names = [
            str(
                getattr(e.result, "device_name", None) or getattr(e.result, "device", None) or "cpu"
            )
        ]
    return names


def host_names(e: Entry) -> list[str]:
    return sorted(set(e.record.env.hostnames or [])) if e.record is not None else []


def machine_key(e: Entry, by: str = "hosts") -> tuple:
    devices = tuple(sorted(set(device_names(e))))
    return devices if by == "devices" else (tuple(host_names(e)), devices)


def describe_machine(entries: list[Entry]) -> list[str]:
    with_env = [e for e in entries if e.record is not None and e.record.env.to_dict()]
    if not with_env:
        return ["- machine unknown: none of these jobs wrote a run record"]
    hosts = sorted({h for e in with_env for h in host_names(e)})
    devices = Counter()
    for e in with_env:
        for name, n in Counter(device_names(e)).items():
            devices[name] = max(devices[name], n)
    env = with_env[0].record.env
    sizes = sorted(
        {e.knob("world_size") for e in with_env if e.knob("world_size") is not None}, key=float
    )
    lines = [
        f"- hosts: {', '.join(hosts) or 'unknown'}",
        "- devices: " + ", ".join(f"{n} x {name}" for name, n in devices.items()),
        f"- CPU cores per host: {env.cpu_count if env.has('cpu_count') else 'unknown'}",
        f"- backend: {', '.join(sorted({str(e.record.env.backend) for e in with_env}))}; "
        f"world size: {', '.join(str(s) for s in sizes)}",
        f"- torch {env.torch}, CUDA {env.cuda or '–'}, NCCL {env.nccl or '–'}",
    ]
    variables = {
        k: v
        for k, v in (env.vars if env.vars is not None else {}).items()
        if not k.startswith("MASTER_")
    }
    if variables:
        lines.append("- environment: " + " ".join(f"{k}={v}" for k, v in sorted(variables.items())))
    return lines


def multirun_config(sweep_dir: str | Path) -> DictConfig | None:
    """<sweep_dir>/multirun.yaml (Hydra writes it before launching any job), or None: not a sweep
    dir, or unreadable."""
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return None
    try:
        return OmegaConf.load(path)
    except Exception:  # noqa: BLE001 - an unreadable multirun.yaml: no sweep to read
        return None


def commands(entries: list[Entry]) -> list[str]:
    """The exact command(s) that produced these runs: the sweep's (multirun.yaml) or the run's
    own."""
    out: list[str] = []
    for e in entries:
        cmd = None
        for sweep in [
            Path(e.output_dir).parent if e.output_dir else None,
            e.record.job.sweep_dir if e.record is not None else None,
        ]:
            conf = multirun_config(sweep) if sweep else None
            if conf is not None:
                cmd = sweep_command(conf)
                break
        if cmd is None and e.record is not None and e.record.command:
            cmd = e.record.command
        if cmd is None:
            cmd = " ".join(["python", "train.py"] + [shlex.quote(o) for o in e.overrides])
        if cmd not in out:
            out.append(cmd)
    return out


def load_entries(paths: list[str | Path]) -> list[Entry]:
    """Every run under the given dirs; a sweep dir also yields failed rows for jobs that left no
    record."""
    entries: list[Entry] = []
    seen: set[str] = set()
    for path in map(Path, paths):
        if not path.exists():
            raise SystemExit(
                f"results.report: {path} does not exist; pass run or sweep directories "
                "(the ones holding run_record.json or multirun.yaml)."
            )
        if path.is_dir() and (path / "multirun.yaml").is_file():
            found = sweep_entries(path)
        else:
            found = []
            for rec in find_records(path):
                try:
                    found.append(Entry.from_record(Record.read(rec), rec))
                except (RecordError, OSError, ValueError) as e:
                    found.append(
                        Entry(
                            num=None,
                            overrides=[],
                            status="failed",
                            error=f"unreadable {rec}: {e}",
                            output_dir=str(rec.parent),
                        )
                    )
        for e in found:
            key = str(Path(e.output_dir).resolve()) if e.output_dir else f"{path}#{e.num}"
            if key not in seen:
                seen.add(key)
                entries.append(e)
    return entries
