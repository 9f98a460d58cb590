"""`repeats=R` in a sweep: every configuration runs R times as separate jobs, in rounds, in a random
order per round.

Hydra's BasicSweeper builds the job list with itertools.product over the overrides in order, so
putting `repeat=range(R)` first gives rounds A B C, A B C, ... rather than A A A, B B B: drift on
the machine then hits every configuration alike, and the table can pair them by round. Inside each
round the order is shuffled (seeded: `hydra.sweeper.seed`), so a position effect follows no
configuration either; job numbers keep the declared order, and the order that ran goes to
`sweep_order.json`. Only a launcher that runs jobs one after another here (the local one) shuffles;
launcher=slurm runs them side by side as one array. `repeats=auto` runs a pilot in
`<sweep dir>/pilot/`, plans R runs of n steps from it (stats.power.plan) and runs the planned
rounds, judged alone, or, where the budget left no round and the plan is the pilot's own design,
judges the pilot's rounds: docs/methods.md "Repeats planned to a precision".
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# Hydra's own sweeper and launcher have no public import path; this plugin extends them, as Hydra's
# plugins do
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from base.errors import ConfigError
from tables.sweep_order import (
    ORDER_FILE,
    PILOT_DIR,
    PILOT_ROUNDS,
    PLAN_FILE,
    repeat_arguments,
    round_order,
)


def pilot_is_the_plan(p: dict, pilot_steps: int) -> bool:
    """The budget left no round after the pilot and the plan falls back to the fewest rounds that
    give an interval at the pilot's own steps: the pilot already ran that design, interleaved, so
    its rounds are judged rather than run again past the budget. Only the pilot's elapsed time chose
    this, not the values the table judges (docs/methods.md)."""
    return (
        p["reached"] == "budget"
        and p["runs"] <= PILOT_ROUNDS
        and p["steps"] == pilot_steps
        and "affords fewer than" in p["reason"]
    )


class RepeatingSweeper(BasicSweeper):
    """BasicSweeper with `repeats`, and rounds in a seeded random order
    (conf/hydra/sweeper/repeating.yaml)."""

    def __init__(
        self, max_batch_size=None, params=None, seed: int = 0, shuffle: bool = True
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.seed, self.shuffle = seed, shuffle
        self._composed: set[tuple[str, ...]] = set()  # the jobs _check_jobs composed

    def validate_batch_is_legal(self, batch) -> None:
        """Compose each job's config once before it runs: _check_jobs composed the whole sweep's
        before any job, and BasicSweeper.sweep's check of each batch composed the same jobs again
        (~0.3 CPU s a job, issue 36); a job not composed yet is composed here."""
        left = [job for job in batch if tuple(job) not in self._composed]
        if left:
            super().validate_batch_is_legal(left)
            self._composed.update(tuple(job) for job in left)

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
        if repeats == "auto":
            return self._auto(arguments)
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
                    "note": "job numbers in the order they ran: each round's configurations "
                    "shuffled with this seed "
                    "(hydra.sweeper.seed); job numbers keep the declared order",
                },
                indent=1,
            )
        )
        return self._run(jobs, order)

    def _run(self, jobs: list[list[str]], order: list[int], extra: tuple = ()) -> list:
        returns = []
        for num in order:
            results = self.launcher.launch([jobs[num] + list(extra)], initial_job_idx=num)
            for r in results:
                _ = r.return_value  # a failed job raises here, as in BasicSweeper
            returns.append(results)
        self.batch_index = 1
        return returns

    def _jobs(self, repeats: int, arguments: list[str], extra: list[str]) -> list[list[str]]:
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(
            repeat_arguments(repeats, super()._parse_config()) + arguments + extra
        )
        return [list(j) for batch in self.split_arguments(overrides, None) for j in batch]

    def _stage(self, jobs: list[list[str]], order: list[int], name: str) -> None:
        """Tell the sweep table's callback which jobs come next (its progress lines and its
        rows)."""
        for callback in getattr(self.hydra_context.callbacks, "callbacks", []):
            if hasattr(callback, "stage"):
                callback.stage(jobs, order, name)

    def _refuse(self, message: str, code: int = ConfigError.exit_code) -> None:
        from job.output_dir import discard

        print(f"error: {message}", file=sys.stderr, flush=True)
        if code == ConfigError.exit_code:
            discard(OmegaConf.select(self.config, "hydra.sweep.dir"))
        raise SystemExit(code)

    def _check_auto(self, configs: int) -> None:
        """What repeats=auto needs, said before the sweep's first line: one line, exit 2, no
        folder."""
        if not isinstance(self.launcher, BasicLauncher):
            self._refuse(
                "repeats=auto runs a pilot, then the rounds it plans, one job after another: it "
                "needs "
                "the local launcher (launcher=local); give repeats=R otherwise."
            )
        if configs < 2 or OmegaConf.select(self.config, "task") != "train":
            self._refuse(
                "repeats=auto plans the runs that compare task=train configurations: it needs two "
                "configurations or more (e.g. optim=none,bf16); give repeats=R otherwise."
            )

    def _auto(self, arguments: list[str]):
        """repeats=auto: the pilot, the plan fixed from it, then the planned rounds (the module's
        docstring)."""
        from results.plan import pilot_from
        from stats.power import plan
        from tables.sweep import sweep_entries

        started = time.monotonic()
        target = float(OmegaConf.select(self.config, "compare.target"))
        budget_s = float(OmegaConf.select(self.config, "compare.budget_s"))
        fixed = ["measure.policy=fixed"]  # a plan of n steps per run means n steps, not a minimum
        pilot_jobs = self._jobs(PILOT_ROUNDS, arguments, fixed)
        configs = len(pilot_jobs) // PILOT_ROUNDS
        sweep_dir = Path(self.config.hydra.sweep.dir)
        pilot_dir = sweep_dir / PILOT_DIR
        pilot_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        pilot_config = self.config.copy()
        pilot_config.hydra.sweep.dir = str(pilot_dir)
        OmegaConf.save(pilot_config, pilot_dir / "multirun.yaml")
        seed = int(self.seed)
        order = round_order(len(pilot_jobs), PILOT_ROUNDS, seed)
        (pilot_dir / ORDER_FILE).write_text(
            json.dumps({"seed": seed, "repeats": PILOT_ROUNDS, "run_order": order}, indent=1)
        )
        print(
            f"[sweep] repeats=auto: pilot, {PILOT_ROUNDS} interleaved rounds of {configs} "
            f"configurations -> {pilot_dir}",
            flush=True,
        )
        self._stage(pilot_jobs, order, "pilot")
        returns = self._run(
            pilot_jobs, order, (f"hydra.sweep.subdir={PILOT_DIR}/${{hydra.job.num}}",)
        )
        try:
            pilot, labels = pilot_from(sweep_entries(pilot_dir))
        except ValueError as e:
            self._refuse(f"repeats=auto: the pilot in {pilot_dir} gives no plan: {e}", code=1)
        pilot_s = time.monotonic() - started
        rows = len(labels) - 1
        noise = float(OmegaConf.select(self.config, "compare.noise"))
        left = max(0.0, budget_s - pilot_s)
        p = plan(pilot, rows, target, left, noise=noise, goal="half_width")
        judged = "planned"
        if "affords fewer than" in p["reason"]:
            if pilot_is_the_plan(p, pilot.steps):
                judged = PILOT_DIR
                p["reason"] = (
                    f"compare.budget_s={budget_s:g} leaves {left:.0f} s after the pilot, fewer "
                    f"than {p['runs']} rounds: the plan would be the pilot's own design "
                    f"({p['runs']} x {p['steps']} steps), so the pilot's rounds are judged and "
                    "nothing more runs (what decided it was the pilot's time, not its values)"
                )
            else:
                p["reason"] = (
                    f"compare.budget_s={budget_s:g} leaves {left:.0f} s after the pilot, fewer "
                    f"than {p['runs']} rounds: the sweep runs the fewest that give an interval "
                    f"({p['runs']} x {p['steps']} steps), past the budget"
                )
        else:
            p["reason"] = p["reason"].replace(
                f"compare.budget_s={left:g}",
                f"compare.budget_s={budget_s:g} ({left:.0f} s after the pilot)",
            )
        record = {
            "goal": "half-width of every row's 95% speed-up interval",
            "target": target,
            "budget_s": budget_s,
            "pilot_dir": PILOT_DIR,
            "pilot_s": round(pilot_s, 1),
            "pilot": {
                "rounds": PILOT_ROUNDS,
                "configurations": configs,
                "steps": pilot.steps,
                "startup_s": pilot.startup_s,
                "step_s": pilot.step_s,
            },
            **{k: p.get(k) for k in ("reached", "reason", "runs", "steps", "seconds")},
            "half_width": p.get("half_width"),
            "detectable": p.get("detectable"),
            "rows": rows,
            "components": p["components"],
            "judged": judged,
        }
        if judged == PILOT_DIR:  # nothing more runs: the sweep ends with its pilot
            record["sweep_s"] = round(time.monotonic() - started, 1)
        (sweep_dir / PLAN_FILE).write_text(json.dumps(record, indent=1))
        if judged == PILOT_DIR:
            print(
                f"[sweep] repeats=auto: pilot took {pilot_s / 60:.1f} min; {p['reason']}",
                flush=True,
            )
            return returns
        print(
            f"[sweep] repeats=auto: pilot took {pilot_s / 60:.1f} min; plan: {p['runs']} rounds x "
            f"{p['steps']} steps (about {p['seconds'] / 60:.0f} min): {p['reason']}",
            flush=True,
        )
        jobs = self._jobs(p["runs"], arguments, fixed + [f"steps={p['steps']}"])
        order = round_order(len(jobs), p["runs"], seed + 1)
        (sweep_dir / ORDER_FILE).write_text(
            json.dumps(
                {
                    "seed": seed + 1,
                    "repeats": p["runs"],
                    "run_order": order,
                    "note": "repeats=auto: the planned rounds (plan.json); the pilot's order is in "
                    f"{PILOT_DIR}/{ORDER_FILE}",
                },
                indent=1,
            )
        )
        self._stage(jobs, order, "planned")
        returns += self._run(jobs, order)
        record["sweep_s"] = round(time.monotonic() - started, 1)
        (sweep_dir / PLAN_FILE).write_text(json.dumps(record, indent=1))
        return returns

    def _check_jobs(self, arguments: list[str]) -> None:
        """Compose every job's config before the sweep dir is made or a line is printed
        (BasicSweeper checks each batch after saving multirun.yaml): a misspelt value prints its
        one-line error alone and leaves no folder. Then the sweep table's callback prints the
        sweep's first line."""
        from job.output_dir import discard

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(self._parse_config() + arguments)
        try:
            jobs = [list(j) for batch in self.split_arguments(overrides, None) for j in batch]
            self.validate_batch_is_legal(jobs)
        except BaseException:
            discard(OmegaConf.select(self.config, "hydra.sweep.dir"))
            raise
        if OmegaConf.select(self.config, "repeats") == "auto":
            self._check_auto(len(jobs) // PILOT_ROUNDS)
        for callback in getattr(self.hydra_context.callbacks, "callbacks", []):
            if hasattr(callback, "announce"):
                callback.announce()
