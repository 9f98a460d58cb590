"""The order of a sweep's jobs with `repeats=R`: the repeating sweeper
(hydra_plugins/repeat_sweeper) runs them in it, the sweep table (results/callbacks.py) counts
progress and the autotune stages (results/autotune.py) plan with it. The sweeper writes the order it
ran to ORDER_FILE in the sweep dir before the first job."""

from __future__ import annotations

import json
import random
from pathlib import Path

from base.errors import ConfigError

ORDER_FILE = "sweep_order.json"
PILOT_ROUNDS = 3  # repeats=auto: the pilot's interleaved rounds (hydra_plugins/repeat_sweeper)
# repeats=auto: the pilot's own sweep dir inside the sweep's; its runs are no rows of it unless
# plan.json says the pilot was judged (judged_dir)
PILOT_DIR = "pilot"
# repeats=auto: what the pilot planned, and whether the target or the budget decided
PLAN_FILE = "plan.json"


def repeat_arguments(repeats, arguments: list[str]) -> list[str]:
    """The sweep's overrides (hydra.sweeper.params first, then the command line's) with the repeat
    loop outermost."""
    check_repeats(repeats, arguments)
    if (
        repeats == "auto"
    ):  # the pilot's rounds; the planned rounds follow (hydra_plugins/repeat_sweeper)
        repeats = PILOT_ROUNDS
    return ([f"repeat=range(0,{repeats})"] if repeats > 1 else []) + list(arguments)


def round_order(jobs: int, repeats: int, seed: int) -> list[int]:
    """Job numbers in the order they run: round by round (jobs / repeats configurations each),
    shuffled inside each round by one seeded generator."""
    per_round = jobs // repeats
    rng = random.Random(seed)
    order: list[int] = []
    for r in range(repeats):
        nums = list(range(r * per_round, (r + 1) * per_round))
        rng.shuffle(nums)
        order += nums
    return order + list(range(per_round * repeats, jobs))


def run_order(sweep_dir: str | Path) -> list[int] | None:
    """Job numbers in the order they run, as the sweeper wrote them before the first job (None: the
    declared order)."""
    try:
        return [int(n) for n in json.loads((Path(sweep_dir) / ORDER_FILE).read_text())["run_order"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def judged_dir(sweep_dir: Path) -> Path:
    """The folder whose runs are a sweep's rows: the sweep's own, or its pilot's where repeats=auto
    judged the pilot's rounds (plan.json's `judged`: the budget left no round after it)."""
    try:
        judged = json.loads((sweep_dir / PLAN_FILE).read_text()).get("judged")
    except (OSError, ValueError, AttributeError):
        return sweep_dir
    return sweep_dir / PILOT_DIR if judged == PILOT_DIR else sweep_dir


def position(num: int, order: list[int] | None) -> int:
    """How many jobs of the sweep ran before job `num` (its number when the order is not
    shuffled)."""
    return order.index(num) if order and num in order else num


def check_repeats(repeats, arguments: list[str]) -> None:
    """`repeats` of a sweep (the repeating sweeper runs each configuration that many times) and the
    sweep's overrides."""
    if repeats != "auto" and (
        isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1
    ):
        raise ConfigError(
            f"repeats={repeats!r}: must be a whole number of runs per configuration >= 1, "
            f"e.g. repeats=3, or repeats=auto (planned to compare.target)."
        )
    keys = {a.partition("=")[0].lstrip("+~") for a in arguments}
    if "repeat" in keys:
        raise ConfigError(
            "repeat= is set by the sweeper, one value per repeat; ask for repeats=R instead."
        )
    if "repeats" in keys and any(
        a.lstrip("+~").startswith("repeats=") and "," in a for a in arguments
    ):
        raise ConfigError("repeats cannot be swept; give one value, e.g. repeats=3.")
