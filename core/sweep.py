"""`repeats=R` in a sweep: every configuration runs R times as separate jobs, interleaved.

Hydra's BasicSweeper builds the job list with itertools.product over the overrides in order, hydra.sweeper.params
first (hydra/_internal/core_plugins/basic_sweeper.py, split_arguments), so the first override is the outermost loop.
Putting `repeat=range(R)` before everything gives A B C, A B C, ... rather than A A A, B B B: drift on the machine (a
neighbour's job, thermal state) then hits every configuration alike. With launcher=slurm each job is its own array
element, so repeats can land on different nodes, and the run-to-run spread the table shows includes that.
"""
from __future__ import annotations

import sys

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import OmegaConf

from core.config import check_repeats
from core.errors import ConfigError


def repeat_arguments(repeats, arguments: list[str]) -> list[str]:
    """The sweep's overrides (hydra.sweeper.params first, then the command line's) with the repeat loop outermost."""
    check_repeats(repeats, arguments)
    return ([f"repeat=range(0,{repeats})"] if repeats > 1 else []) + list(arguments)


class RepeatingSweeper(BasicSweeper):
    """BasicSweeper with `repeats` (conf/hydra/sweeper/repeating.yaml selects it)."""

    def _parse_config(self) -> list[str]:
        repeats = OmegaConf.select(self.config, "repeats", default=1)
        try:
            return repeat_arguments(repeats, super()._parse_config())
        except ConfigError as e:  # before any job starts: one line, exit 2, and the sweep dir claimed for it removed
            from core.output_dir import discard

            print(f"error: {e}", file=sys.stderr, flush=True)
            discard(OmegaConf.select(self.config, "hydra.sweep.dir"))
            raise SystemExit(ConfigError.exit_code) from None
