"""Config checks and resolution, done once in the process the user started, before any rank exists.

Three stages, each refusing bad input with one line that names the problem and the fix (a
ConfigError, exit 2):
  1. Hydra composes conf/ onto base/schema.py: wrong types, unknown choices and misspelt keys fail
     there, and `hydra_error()` turns Hydra's several lines into one that names the nearest real key
     or choice (train.py);
  2. `check_schema()`: keys added with `+`, values removed with `~`, and the schema's bounds;
  3. every check between keys: the launcher's, the link's and the task's own
     (`tasks.get(task).check`), with what this host offers (`Host`) injected so tests can pose as
     any machine. What differs between tasks is asked of the task (tasks/__init__.py), never
     decided here by its name.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import math
import string
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import base.schema as schema  # importing it registers the schema in Hydra's ConfigStore
from base import config_doc
from base.errors import ConfigError
from base.schema import CONF_DIR
from device.host import Host, gpus_for, ranks_per_node
from tables.sweep_order import check_repeats


def register_resolvers() -> None:
    """Every resolver conf/ uses, registered once per process (train.py, a Slurm task, the tests):
    ${gpu_or:A,B}: A where the ranks get GPUs, else B. ${gpu_count:}: their node's GPUs. Both read
    the ranks' machines (gpus_for): a Slurm submission resolves scale=auto for its compute nodes,
    not the login node. ${mul:a,b,...}: the product (world_size = nodes x tasks_per_node);
    ${or:a,b,...}: the first set value (tasks_per_node = one per GPU, else 1):
    conf/launcher/slurm.yaml. ${knob_help:}: --help's knob list, written from base/schema.py."""
    resolvers = {
        "gpu_or": lambda on_gpu, on_cpu, _root_: on_gpu if gpus_for(_root_) > 0 else on_cpu,
        "gpu_count": lambda _root_: gpus_for(
            _root_
        ),  # gpus_for looked up when resolved: tests inject
        "mul": lambda *xs: math.prod(int(x) for x in xs),
        "or": lambda *xs: next((x for x in xs if x), xs[-1]),
        "knob_help": lambda: (
            config_doc.help_lines()
        ),  # --help's knob list (conf/hydra/help/app.yaml)
    }
    for name, resolver in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def plain_help(argv: list[str]) -> str | None:
    """`python train.py --help`'s text, for an argv of just --help or -h, from the same template
    (conf/hydra/help/app.yaml, `override hydra/help: app`) before Hydra composes anything: Hydra's
    app_help fills $APP_CONFIG_GROUPS and $HYDRA_CONFIG_GROUPS whether or not the template names
    them, listing every group's options, each list a fresh deep copy of the config repository:
    ~2.4 of --help's ~3.5 CPU s. Ours names none of Hydra's $ variables. None, and Hydra answers,
    where the text could differ: with overrides or other flags (they may set hydra.help or be
    refused), or a template that names one of Hydra's variables (only Hydra has them).
    tests/test_config.py checks the text against Hydra's own, byte for byte."""
    if argv not in (["--help"], ["-h"]):
        return None
    node = OmegaConf.load(CONF_DIR / "hydra" / "help" / "app.yaml")
    help_cfg = OmegaConf.create({"hydra": {"help": node}}).hydra.help  # ${hydra.help.*} resolve
    try:
        return string.Template(help_cfg.template).substitute({})
    except (KeyError, ValueError):  # $FLAGS_HELP, $CONFIG, ...: Hydra's to fill
        return None


# ----------------------------------------------------------------------------------- Hydra's errors
VALUE_HINTS = {  # keys typed with a unit or a word: what the number means, after the type line
    key: f.metadata["hint"] for key, f, _ in config_doc.knobs() if "hint" in f.metadata
}


def nearest(word: str, candidates) -> str | None:
    found = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return found[0] if found else None


def _value_of(key: str, overrides: list[str]) -> str | None:
    for o in overrides:
        k, eq, v = o.lstrip("+~").partition("=")
        if eq and k == key:
            return v
    return None


def _override(key: str, overrides: list[str]):
    """Hydra's own reading of the override that set `key` (its parsed value keeps the type Hydra
    gave it), or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    mine = [o for o in overrides if o.lstrip("+~").partition("=")[0] == key]
    try:
        return OverridesParser.create().parse_overrides(mine[-1:])[0] if mine else None
    except Exception:  # noqa: BLE001 - Hydra reports syntax errors itself, in its own words
        return None


def _hint(cause, key: str):
    """The schema's type hint of `key` (the failing node): from the dataclass that holds it, else by
    walking the typed root's fields along the key (a list element's hint is its list's)."""
    import typing

    path = key.partition("[")[0].split(".")
    owner = (
        cause.object_type
        if dataclasses.is_dataclass(cause.object_type) and "[" not in key
        else schema.Config
    )
    names = path[-1:] if owner is cause.object_type else path
    hint = None
    for name in names:
        try:
            hint = (
                typing.get_type_hints(owner).get(name) if dataclasses.is_dataclass(owner) else None
            )
        except (NameError, TypeError):
            return None
        owner = hint
    return hint


def _enum_in(hint) -> type | None:
    """The Enum a hint is, or holds (List[Op], Optional[Op])."""
    import enum
    import typing

    for t in (hint, *typing.get_args(hint)):
        if isinstance(t, type) and issubclass(t, enum.Enum):
            return t
    return None


def _invalid_value(cause, key: str, overrides: list[str]) -> ConfigError | None:
    """A value the schema's type refuses, said from the error's own facts (which node, of what type,
    the value as Hydra parsed it), not from its English: a choice it does not know, a word where a
    number goes, a value where a list goes. None: nothing this knows how to say better than
    Hydra."""
    from omegaconf import ListConfig
    from omegaconf import EnumNode, FloatNode, IntegerNode, UnionNode

    base_key, _, index = key.partition("[")
    parsed = _override(base_key, overrides)
    value = parsed.value() if parsed is not None else None
    text = parsed.input_line.partition("=")[2] if parsed is not None else None
    shown = f"{key}={text}" if text is not None else key
    child, parent = cause.child_node, cause.parent_node
    enum_type = (
        child.enum_type
        if isinstance(child, EnumNode)
        else _enum_in(_hint(cause, key))
        if isinstance(parent, ListConfig) and index
        else None
    )
    if enum_type is not None:
        bad = value[int(index.rstrip("]"))] if index and isinstance(value, list) else value
        options = [m.name for m in enum_type]
        guess = nearest(str(bad), options)
        return ConfigError(
            f"{key}={str(bad)!r} is not known; choose one of: {', '.join(options)}."
            + (f" Did you mean {guess}?" if guess else "")
        )
    if value is None:
        return None
    got = f"(got {type(value).__name__} {str(value)!r})"
    if isinstance(child, IntegerNode):
        return ConfigError(f"{shown}: must be a whole number {got}.")
    if isinstance(child, FloatNode):
        return ConfigError(f"{shown}: must be a Float {got}.")
    if isinstance(child, UnionNode):
        if typing_args(_hint(cause, key)) & {int, float}:
            return ConfigError(
                f"{shown}: must be a number {got}, e.g. {key}=25 or {key}=2.5."
                + (f" {VALUE_HINTS[key]}" if key in VALUE_HINTS else "")
            )
    if isinstance(child, ListConfig) and not isinstance(value, list):
        return ConfigError(f"{shown}: must be a list, e.g. {key}=[{text or '...'}].")
    return None


def typing_args(t) -> set:
    """The types a Union/Optional hint admits ({t} for a plain one)."""
    import typing

    return set(typing.get_args(t)) if typing.get_args(t) else {t}


def hydra_error(e: Exception, overrides: list[str]) -> ConfigError | None:
    """One line for what Hydra refused while composing conf/ (None: not bad input), built from the
    error's facts (the missing option and its group's options, the key and its schema node), never
    from Hydra's English: what it cannot say better is Hydra's own first line. For a misspelt key
    Hydra suggests `+key=...`, which would only add a key nothing reads: the nearest real key is
    named instead."""
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
    )
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, MissingConfigException):
        group, _, choice = (e.missing_cfg_file or "").rpartition("/")
        if not (group and e.options):
            return ConfigError(first)
        guess = nearest(choice, e.options)
        hint = f" Did you mean {group}={guess}?" if guess else ""
        if group == "model" and not guess:  # a torchvision or timm model's name typed as the option
            from models import where_name_belongs

            hint = " " + where_name_belongs(choice)
        return ConfigError(
            f"{group}={choice} is not an option of {group}; choose one of: {', '.join(e.options)}."
            + hint
        )
    if isinstance(e, OverrideParseException):
        return ConfigError(f"cannot read the command line: {first}")
    if not isinstance(e, ConfigCompositionException):
        return None
    cause = e.__cause__
    key = str(getattr(cause, "full_key", None) or "")
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:
        parent = getattr(cause, "parent_node", None)
        known = list(parent.keys()) if isinstance(parent, DictConfig) else []
        leaf = key.rpartition(".")[2]
        guess = nearest(leaf, known)
        where = key.rpartition(".")[0]
        if guess:
            fixed = f"{where}.{guess}" if where else guess
            value = _value_of(key, overrides)
            return ConfigError(
                f"{key}: no such key. Did you mean "
                f"{fixed}{'=' + value if value is not None else ''}?"
            )
        return ConfigError(
            f"{key}: no such key; the keys {'of ' + where if where else 'at the top'} are: "
            f"{', '.join(map(str, known))}."
        )
    if isinstance(cause, ValidationError) and key:
        said = _invalid_value(cause, key, overrides)
        if said is not None:
            return said
        value = _value_of(key, overrides)
        msg = str(getattr(cause, "msg", cause)).splitlines()[0]
        return ConfigError(f"{f'{key}={value}' if value is not None else key}: {msg}")
    return ConfigError(first)


DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


def disk_error(e: Exception) -> ConfigError | None:
    """One line for a file Hydra could not write in the output directory (its config.yaml,
    hydra.yaml, ... before the job starts: the directory check passed, then the disk filled or went
    read-only); None for anything else."""
    if not isinstance(e, OSError) or e.errno not in DISK_ERRORS:
        return None
    where = Path(e.filename).parent if e.filename else "the output directory"
    return ConfigError(
        f"cannot write {e.filename or 'the output directory'} ({e.strerror}): free space there or "
        f"choose another output directory (hydra.run.dir=... or, with -m, hydra.sweep.dir=...; "
        f"this one is {where})"
    )


def check_added_keys(overrides: list[str]) -> None:
    """`+key=value` at the top level adds a key the typed root has not got and nothing reads
    (Hydra's own suggestion for a misspelt key): refused before Hydra runs, so a -m sweep stops
    before its first job too. Deeper keys (`+model.x=1`) depend on the option chosen; check_schema
    refuses them in the job."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    known = {f.name for f in dataclasses.fields(schema.Config)} | {"hydra"}
    known |= {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    try:
        parsed = OverridesParser.create().parse_overrides(
            [o for o in overrides if o.startswith("+")]
        )
    except Exception:  # noqa: BLE001 - Hydra reports syntax errors itself, in its own words
        return
    fields = {f.name for f in dataclasses.fields(schema.Config)}
    for o in parsed:
        key = o.key_or_group
        head = key.split(".")[0].split("/")[0]
        if key in fields:  # Hydra: "Could not append to config. An item is already at ..."
            raise ConfigError(
                f"+{key}=...: {key} is in the config already; set it without the +: "
                f"{key}={o.input_line.partition('=')[2] or '...'}"
            )
        if head not in known:
            guess = nearest(head, known - {"hydra"})
            fixed = key.replace(head, guess, 1) if guess else None
            value = o.input_line.partition("=")[2]
            raise ConfigError(
                f"{key}: no such key, and adding it with + would only add a key nothing reads."
                + (f" Did you mean {fixed}={value}?" if fixed else "")
            )


def check_command_line(argv: list[str]) -> None:
    """What a -m sweep refuses as a whole (its repeats), checked before Hydra starts (train.py), so
    that nothing is printed or created first (a single run's repeats is checked in its job, by the
    schema). Imports nothing of Hydra's plugins: Hydra loads those itself. Without -m, a
    comma-separated value would make Hydra refuse an "ambiguous value": it is said here, naming
    -m."""
    if not {"-m", "--multirun"} & set(argv):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        overrides = [a for a in argv if not a.startswith("-")]
        try:
            parsed = OverridesParser.create().parse_overrides(overrides)
        except Exception:  # noqa: BLE001 - Hydra reports syntax errors itself, in its own words
            return
        for o in parsed:
            if o.is_sweep_override():
                raise ConfigError(
                    f"{o.input_line}: a comma-separated list sweeps, so it needs -m (python "
                    "train.py "
                    f"-m ...); for a list value write key=[a,b]."
                )
        return
    for a in argv:
        key, eq, value = a.lstrip("+~").partition("=")
        if key == "repeat" or (key == "repeats" and "," in value):
            check_repeats(1, [a])  # refused: set by the sweeper / cannot be swept
        elif key == "repeats" and eq:
            try:
                repeats = int(value)
            except ValueError:
                repeats = value
            check_repeats(repeats, [])


# ------------------------------------------------------------------------------------ schema checks
def _schema_of(node) -> type | None:
    t = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    return t if t is not None and dataclasses.is_dataclass(t) else None


def check_schema(cfg: DictConfig, path: str = "") -> None:
    """What composing cannot refuse: keys added with `+` to a typed node, values removed with `~`,
    and the bounds the schema declares (`ge`/`gt`). Walks the config alongside the dataclasses it
    was built on."""
    t = _schema_of(cfg)
    if t is None:
        return
    fields = {f.name: f for f in dataclasses.fields(t)}
    for key in cfg.keys():
        if key not in fields and not (path == "" and key == "hydra"):
            guess = nearest(key, fields)
            full = f"{path}{key}"
            raise ConfigError(
                f"{full}: no such key"
                + (
                    f". Did you mean {path}{guess}?"
                    if guess
                    else f"; the keys here are: {', '.join(fields)}."
                )
            )
    for name, f in fields.items():
        full = f"{path}{name}"
        if name not in cfg or OmegaConf.is_missing(cfg, name):
            raise ConfigError(
                f"{full} has no value (was it removed with ~{full}?). Give it one: {full}=..."
            )
        value = cfg[name]
        if isinstance(value, DictConfig):
            check_schema(value, f"{full}.")
            continue
        for bound, ok, words in (
            ("ge", lambda v, n: v >= n, ">="),
            ("gt", lambda v, n: v > n, ">"),
        ):
            n = f.metadata.get(bound)
            also = f.metadata.get("also", ())
            if isinstance(value, str) and also:  # a number or one of these words (repeats=auto)
                if value not in also:
                    raise ConfigError(
                        f"{full}={value!r}: must be a number {words} {n} or {' or '.join(also)}."
                    )
                continue
            if n is not None and value is not None and not ok(value, n):
                raise ConfigError(f"{full}={value!r}: must be {words} {n}.")


def check_run_mode(cfg: DictConfig) -> None:
    """A preset that sweeps (hydra.sweeper.params) run without -m would silently run one row;
    launcher=slurm without -m would run here (launchers.slurm.check_run_mode). Both before the
    task's module is imported (prepare), which may import torch."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from launchers.slurm import check_run_mode as check_launcher_mode

    if not HydraConfig.initialized():
        return
    hc = HydraConfig.get()
    params = OmegaConf.select(hc, "sweeper.params")
    if hc.mode == RunMode.RUN and params:
        preset = hc.runtime.choices.get("experiment")
        rows = " ".join(f"{k}={v}" for k, v in params.items())
        raise ConfigError(
            f"{'experiment=' + preset if preset else 'this config'} is a sweep ({rows}) and needs "
            "-m: "
            f"python train.py -m {' '.join(hc.overrides.task)}"
        )
    check_launcher_mode(cfg)


# ------------------------------------------------------------------------------------------- checks
def validate(cfg: DictConfig, submitting: bool = False, host: Host | None = None) -> None:
    """submitting=True: checked on a Slurm login node for the compute nodes, so this machine's GPUs,
    CPUs and memory do not count (they are checked again on the nodes, in each job)."""
    import tasks
    from launchers.busy import check as check_busy
    from launchers.link import check as check_link
    from launchers.slurm import check_config as check_launcher

    if host is None:
        from launchers import already_a_rank

        host = dataclasses.replace(Host.probe(), ranks_started=already_a_rank())
    task = tasks.get(cfg.task)
    check_launcher(cfg, submitting=submitting)
    check_link(cfg, submitting=submitting, host=host)
    check_busy(cfg, submitting=submitting, host=host)
    if cfg.backend == "nccl" and not submitting:
        if host.gpus == 0:
            raise ConfigError(
                "backend=nccl needs CUDA GPUs and this machine has none. Use backend=gloo (or "
                "auto)."
            )
        ranks = ranks_per_node(cfg)
        if ranks > host.gpus:
            knob, per = getattr(
                task, "RANKS_KNOB", ("world_size", 1)
            )  # pair_groups: pairs, 2 ranks each
            fits = host.gpus // per
            raise ConfigError(
                f"backend=nccl with {knob}={cfg[knob]} runs {ranks} ranks on this machine, one GPU "
                "per "
                f"rank, and it has {host.gpus}. Use {knob}<={fits}, or backend=gloo (or auto: gloo "
                "on "
                "CPU)."
            )
    if cfg.logger.name != "none" and cfg.logger.get("_target_") is None:
        raise ConfigError(
            f"logger={cfg.logger.name} names no logger (logger._target_ is null): drop the "
            "logger._target_ override, or use logger=none for no logging."
        )
    if cfg.fault.rank is not None and not getattr(task, "INJECTS_FAULTS", False):
        raise ConfigError(
            f"fault.rank={cfg.fault.rank}: fault injection is a task=train knob and "
            f"task={cfg.task} "
            "never reaches it. Drop fault.rank, or use task=train."
        )
    task.check(cfg, submitting=submitting, host=host)


def prepare(cfg: DictConfig, submitting: bool = False, host: Host | None = None) -> dict:
    """Check everything, then resolve every interpolation once: the ranks get a plain dict (Hydra's
    runtime config does not exist in child processes), with choices as plain strings."""
    check_run_mode(cfg)
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    if "hydra" in cfg:
        del cfg["hydra"]
    unresolved = cfg.copy()
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # noqa: BLE001 - interpolation errors name the key
        raise ConfigError(f"config does not resolve: {str(e).splitlines()[0]}") from None
    check_schema(cfg)
    import tasks

    if cfg.task in tasks.READS_DATA:  # before the task's module is imported: it imports torch
        from data import check as check_data

        check_data(cfg, submitting=submitting)
    derive = getattr(
        tasks.get(cfg.task), "derive", None
    )  # what the task sets from other keys (tasks/__init__.py)
    if derive is not None:
        derive(cfg, unresolved)
    validate(cfg, submitting, host)
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
