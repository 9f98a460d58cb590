"""Where a run writes: a directory of its own, checked before any rank starts (a Hydra callback).

Hydra's default `outputs/<date>/<HH-MM-SS>` is shared by runs started in the same second
(hydra#1607), so a time-stamped directory is claimed with an atomic mkdir (`<HH-MM-SS>_1`, ... on a
clash: a finer `${now:...}` would only make a clash rarer). A directory that cannot take a few
kilobytes is one line and exit 2 before Hydra writes there; a named sweep dir holding an earlier
sweep is moved aside to `<dir>.1`, so the table never mixes two sweeps. docs/failures.md.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write


def claim(base: str | Path) -> Path | None:
    """base, or base_1, base_2, ...: the first directory this call creates itself; None when none
    can be made."""
    base, n = Path(base), 0
    while True:
        candidate = base if n == 0 else base.with_name(f"{base.name}_{n}")
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
        except OSError:
            return None


CHECK_BYTES = (
    16 << 10
)  # more than Hydra's own files of a job (config.yaml, hydra.yaml, overrides.yaml) take


def unwritable(directory: str | Path) -> str | None:
    """Why CHECK_BYTES cannot be written in directory (created if missing), or None when they can.
    The bytes are written and synced: creating an empty file succeeds on a full disk."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write_check.") as f:
            f.write(b"\0" * CHECK_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return e.strerror or str(e)
    return None


SWEEP_SIGNS = (
    "multirun.yaml",
    "sweep_table.md",
    "sweep_table.csv",
    "*/run_record.json",
    "*/.hydra",
)


def held_a_sweep(directory: Path) -> bool:
    return any(next(directory.glob(sign), None) is not None for sign in SWEEP_SIGNS)


def set_aside(directory: Path) -> Path:
    """Move directory to <directory>.1 (.2, ... the first free name); returns where it went. Raises
    OSError."""
    n = 1
    while True:
        target = directory.with_name(f"{directory.name}.{n}")
        if not os.path.lexists(target):
            os.rename(
                directory, target
            )  # a directory renamed onto an empty one would replace it: checked above
            return target
        n += 1


def _quoted(path: Path) -> str:
    text = str(path)
    return (
        text
        if re.fullmatch(r"[\w./:+-]+", text)
        else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    )


class OutputDir(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _own_and_writable(config, "run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _own_and_writable(config, "sweep")


def _own_and_writable(config: DictConfig, mode: str) -> None:
    key = f"hydra.{mode}.dir"
    directory = str(OmegaConf.select(config, key))
    if "${now:" in str(OmegaConf.to_container(config.hydra[mode], resolve=False).get("dir")):
        mine = claim(directory)
        if mine is not None and str(mine) != directory:
            with read_write(config.hydra), open_dict(config.hydra):
                config.hydra[mode].dir = str(mine)
                # a sweep's jobs are composed again from the hydra overrides
                # (ConfigLoader.load_sweep_config)
                config.hydra.overrides.hydra.append(f"{key}={_quoted(mine)}")
            if mode == "sweep":  # the sweep table's first line may have named the taken one
                print(
                    f"[sweep] {directory} belongs to a sweep started in the same second: this one "
                    f"writes to {mine}",
                    flush=True,
                )
            directory = str(mine)
    elif mode == "sweep" and Path(directory).is_dir() and held_a_sweep(Path(directory)):
        try:
            moved = set_aside(Path(directory))
        except OSError as e:
            print(
                f"error: {directory} holds an earlier sweep and cannot be moved aside "
                f"({e.strerror or e}); choose "
                f"another directory, e.g. {key}={directory}_2",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(2) from None
        print(
            f"[sweep] {directory} held an earlier sweep: moved it to {moved}, so this sweep's "
            "table has its own "
            f"jobs only",
            flush=True,
        )
    why = unwritable(directory)
    if why is not None:
        example = "multirun/my_sweep" if mode == "sweep" else "outputs/my_run"
        print(
            f"error: cannot write to the output directory {directory} ({why}); choose a writable "
            "one, "
            f"e.g. {key}={example}",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(2)  # a SystemExit: Hydra turns a callback's exceptions into warnings


def discard(directory: str | Path | None, keep_if_other_than: tuple[str, ...] = ()) -> bool:
    """Remove a directory made for a run or sweep that was refused before anything ran, when it
    holds nothing but
    `keep_if_other_than` names (Hydra's .hydra/ and the job log), and the parents it leaves empty up
    to the working directory (outputs/<date> of a first run). Anything else in it (a directory the
    user named and filled) keeps all of it. True when it is gone."""
    if not directory:
        return False
    d = Path(directory)
    try:
        if not {p.name for p in d.iterdir()} <= set(keep_if_other_than):
            return False
        shutil.rmtree(d)
    except OSError:
        return False
    cwd, parent = Path.cwd().resolve(), d.resolve().parent
    while parent != cwd and cwd in parent.parents:
        try:
            parent.rmdir()  # only an empty one
        except OSError:
            break
        parent = parent.parent
    return True
