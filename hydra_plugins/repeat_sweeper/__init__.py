"""`repeats=R` in a sweep: every configuration runs R times as separate jobs, in rounds, in a random order per round.

Hydra's BasicSweeper builds the job list with itertools.product over the overrides in order, hydra.sweeper.params
first (hydra/_internal/core_plugins/basic_sweeper.py, split_arguments), so the first override is the outermost loop.
Putting `repeat=range(R)` before everything gives rounds A B C, A B C, ... rather than A A A, B B B: drift on the
machine (a neighbour's job, thermal state) then hits every configuration alike, and the table can pair the
configurations by round. Inside each round the order is shuffled (seeded: `hydra.sweeper.seed`, default 0), so a
position effect (the job after a heavy one, the first job's cold caches) does not follow a configuration either:
round 1 may run C A B, round 2 B C A. Job numbers keep the declared order (job 0 is the first configuration of round
0, whatever ran first), so rows, labels and the baseline rule do not depend on the shuffle; the order that ran is
written to `sweep_order.json` in the sweep dir, and every record's `started` time shows it too. The shuffle needs a
launcher that runs jobs one after another in this process (the local one); with launcher=slurm the jobs run side by
side as one array in the declared order, each its own array element, so repeats can land on different nodes and the
run-to-run spread the table shows includes that.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Hydra's own sweeper and launcher have no public import path; this plugin extends them, as Hydra's plugins do
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from base.errors import ConfigError
from tables.sweep_order import ORDER_FILE, repeat_arguments, round_order


class RepeatingSweeper(BasicSweeper):
    """BasicSweeper with `repeats`, and rounds in a seeded random order (conf/hydra/sweeper/repeating.yaml)."""

    def __init__(
        self, max_batch_size=None, params=None, seed: int = 0, shuffle: bool = True
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.seed, self.shuffle = seed, shuffle

    def _parse_config(self) -> list[str]:
        repeats = OmegaConf.select(self.config, "repeats", default=1)
        try:
            return repeat_arguments(repeats, super()._parse_config())
        except (
            ConfigError
        ) as e:  # before any job starts: one line, exit 2, and the sweep dir claimed for it removed
            from job.output_dir import discard

            print(f"error: {e}", file=sys.stderr, flush=True)
            discard(OmegaConf.select(self.config, "hydra.sweep.dir"))
            raise SystemExit(ConfigError.exit_code) from None

    def sweep(self, arguments: list[str]):
        self._check_jobs(arguments)
        repeats = OmegaConf.select(self.config, "repeats", default=1)
        if not (
            self.shuffle
            and isinstance(repeats, int)
            and repeats > 1
            and isinstance(self.launcher, BasicLauncher)
        ):
            return super().sweep(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(self._parse_config() + arguments)
        jobs = [list(j) for batch in self.split_arguments(overrides, None) for j in batch]
        self.overrides = [jobs]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        order = round_order(len(jobs), repeats, int(self.seed))
        (sweep_dir / ORDER_FILE).write_text(
            json.dumps(
                {
                    "seed": int(self.seed),
                    "repeats": repeats,
                    "run_order": order,
                    "note": "job numbers in the order they ran: each round's configurations shuffled with this seed "
                    "(hydra.sweeper.seed); job numbers keep the declared order",
                },
                indent=1,
            )
        )
        returns = []
        for num in order:
            results = self.launcher.launch([jobs[num]], initial_job_idx=num)
            for r in results:
                _ = r.return_value  # a failed job raises here, as in BasicSweeper
            returns.append(results)
        self.batch_index = 1
        return returns

    def _check_jobs(self, arguments: list[str]) -> None:
        """Compose every job's config before the sweep dir is made or a line is printed (BasicSweeper checks each
        batch after saving multirun.yaml): a misspelt value prints its one-line error alone and leaves no folder.
        Then the sweep table's callback prints the sweep's first line."""
        from job.output_dir import discard

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(self._parse_config() + arguments)
        try:
            self.validate_batch_is_legal(
                [list(j) for batch in self.split_arguments(overrides, None) for j in batch]
            )
        except BaseException:
            discard(OmegaConf.select(self.config, "hydra.sweep.dir"))
            raise
        for callback in getattr(self.hydra_context.callbacks, "callbacks", []):
            if hasattr(callback, "announce"):
                callback.announce()
