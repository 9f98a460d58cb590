"""Where a run writes: a directory of its own, checked before any rank starts (a Hydra callback, conf/config.yaml).

Hydra's default `outputs/<date>/<HH-MM-SS>` is shared by every run started in the same second (hydra#1607), and the
later run overwrites the earlier one's record. A time-stamped directory (one whose setting uses `${now:...}`) is
therefore claimed with an atomic mkdir before Hydra uses it; when another run got there first this run takes
`<HH-MM-SS>_1`, `_2`, ... (and the config says so, so Hydra, the launcher and the records all use it). A directory
the user names without a time stamp (hydra.run.dir=...) is used as given.

The directory must also take a file: one line and exit code 2 otherwise, before Hydra creates anything, instead of
Hydra's traceback or a record lost at the end of the run."""
from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write


def claim(base: str | Path) -> Path | None:
    """base, or base_1, base_2, ...: the first directory this call creates itself; None when none can be made."""
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


def unwritable(directory: str | Path) -> str | None:
    """Why nothing can be written in directory (created if missing), or None when it can."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write_check."):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def _quoted(path: Path) -> str:
    text = str(path)
    return text if re.fullmatch(r"[\w./:+-]+", text) else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


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
                # a sweep's jobs are composed again from the hydra overrides (ConfigLoader.load_sweep_config)
                config.hydra.overrides.hydra.append(f"{key}={_quoted(mine)}")
            if mode == "sweep":  # the sweep table's first line may have named the taken one
                print(f"[sweep] {directory} belongs to a sweep started in the same second: this one writes to {mine}",
                      flush=True)
            directory = str(mine)
    why = unwritable(directory)
    if why is not None:
        example = "multirun/my_sweep" if mode == "sweep" else "outputs/my_run"
        print(f"error: cannot write to the output directory {directory} ({why}); choose a writable one, "
              f"e.g. {key}={example}", file=sys.stderr, flush=True)
        raise SystemExit(2)  # a SystemExit: Hydra turns a callback's exceptions into warnings


def discard(directory: str | Path | None, keep_if_other_than: tuple[str, ...] = ()) -> bool:
    """Remove a directory made for a run or sweep that was refused before anything ran, when it holds nothing but
    `keep_if_other_than` names (Hydra's .hydra/ and the job log), and the parents it leaves empty up to the working
    directory (outputs/<date> of a first run). Anything else in it (a directory the user named and filled) keeps all
    of it. True when it is gone."""
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
            parent.rmdir()          # only an empty one
        except OSError:
            break
        parent = parent.parent
    return True
