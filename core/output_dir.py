"""Where a run writes: a directory of its own, checked before any rank starts.

Hydra's default `outputs/<date>/<HH-MM-SS>` is shared by every run started in the same second (hydra#1607), and the
later run overwrites the earlier one's record. `${unique_dir:...}` (conf/config.yaml's hydra.run.dir and
hydra.sweep.dir) claims the directory with an atomic mkdir and takes `<HH-MM-SS>_1`, `_2`, ... when another run got
there first. A directory the user names (hydra.run.dir=...) is used as given.

`OutputDirCheck` (a Hydra callback, conf/config.yaml) makes sure the run or sweep directory can be written before
Hydra creates it and before any rank starts: one line and exit code 2 otherwise, instead of Hydra's traceback or a
record lost at the end of the run."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

_claimed: dict[str, str] = {}  # base -> the directory this process claimed (Hydra resolves the key several times)


def unique_dir(base: str) -> str:
    """base, or base_1, base_2, ...: the first one this process creates itself."""
    if base in _claimed:
        return _claimed[base]
    path, n = Path(base), 0
    while True:
        candidate = path if n == 0 else path.with_name(f"{path.name}_{n}")
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            candidate.mkdir()
        except FileExistsError:
            n += 1
            continue
        except OSError:
            return base  # not writable: OutputDirCheck says so in one line
        _claimed[base] = str(candidate)
        return str(candidate)


def unwritable(directory: str | Path) -> str | None:
    """Why nothing can be written in directory (created if missing), or None when it can."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write_check."):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


class OutputDirCheck(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "hydra.sweep.dir")

    @staticmethod
    def _check(config: DictConfig, key: str) -> None:
        directory = str(OmegaConf.select(config, key))
        why = unwritable(directory)
        if why is not None:
            print(f"error: cannot write to the output directory {directory} ({why}); choose a writable one, "
                  f"e.g. {key}={'multirun/my_sweep' if 'sweep' in key else 'outputs/my_run'}", file=sys.stderr,
                  flush=True)
            raise SystemExit(2)  # a SystemExit: Hydra turns a callback's exceptions into warnings
