"""diagnose.verify: the top finding's fix measured inside the job, not only predicted.

A prediction of what a fix saves is a model's (whatif/) or a rule of thumb's, and either can be
tens of points off. Where the fix can be switched between timed blocks of the same job, measuring
it costs a few steps: after the window and its probes, rank 0 diagnoses its own result (ctx.choose,
set by launchers.rank: this package may not import the diagnosis), broadcasts the top finding's
change, and every rank runs rounds of one block of the current setting and one of the fix, the
order alternating (ABBA), on the same ranks and data stream. The saving is 1 - the paired ratio of
the rounds' throughputs (stats.block_ab), so a round's machine state cancels. Each block's first
steps after the switch are untimed (settle_steps): on the committed shaped-link checks the block
after PowerSGD's ran at a quarter of the window's step, on the burst the token bucket had refilled
while PowerSGD sent less; and PowerSGD's blocks after the plain setting's ran 1.5x slower than after
its own, until the emptied bucket refilled (burst / rate). Each block is timed as the window times
its steps (window_walls): in sub-blocks of the window's block size, each bracketed by a device sync
and a barrier, its wall the slowest rank's, the block's wall their sum. The check's ratio is then
what two separate runs' windows report: behind the 20 Mbit/s link the window's one-step blocks left
7.3 ms of untimed barrier per step during which the token bucket refilled (its step 23.5 ms timed
against 30.6 ms elapsed), while the check's seven-step blocks timed them all (30.4 ms a step), so
the check measured PowerSGD's saving at 60% where the separate runs saw 35%. What can be
switched, what cannot, and the budget (diagnose.verify_budget, at least diagnose.verify_min_s;
fewer than MIN_ROUNDS rounds that fit time nothing): docs/diagnosis.md, the in-job check. The rounds
end on the interval (stop_reason): once it is at most diagnose.verify_width wide, or, while wider,
past the budget up to diagnose.verify_max_s: a fixed budget gave small_buckets 6 one-step rounds and
intervals up to 47 points wide.
"""

from __future__ import annotations

import math
import threading
import time

import yaml

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from base.record_types import InJobCheck
from base.schema import CONF_DIR, CommHookConfig, PowerSGD
from comm.link import default_burst, parse_rate
from device import synchronize
from stats import block_ab, narrow_enough, time_saved
from tasks.train.ddp import DDPSync
from tasks.train.window import timed_span

SWITCHABLE = ("sync", "optim", "bucket", "ddp.static_graph", "ddp.gradient_as_bucket_view", "h2d")
MIN_ROUNDS = 3  # a paired t on 2 degrees of freedom: the fewest that give an interval at all
MAX_ROUNDS = 40  # rounds past the budget are run only while the interval is wider than
# diagnose.verify_width: small_buckets' one-step rounds (log ratio SD 0.13-0.37 a round on the quiet
# benchmark of 2026-12-07) need 10-40 of them for +-5 points, where 6 gave intervals 14-47 wide
KEEPALIVE_S = 2.0  # while rank 0 chooses the fix: one broadcast this often (hang.min_s is 30 s)
ASKED = "diagnose.verify_fix"  # the rule of a change the user named: no finding takes it
WARMUP_STEPS = 2  # the fix's first steps (DDP rebuilds its buckets after the first): untimed
SETTLE_STEPS = 1  # every block's first step after a switch: untimed (see the module docstring)
MAX_SETTLE_STEPS = 4  # a shaped link's refill covered by at most this many more
# a refill shorter than this share of a step settles in no step: the first step after a pause gains
# at most the refill's time from the refilled burst (its bytes at the rate), so it moves a sample by
# less than this share of the step. Behind link=1gbe the default VGG11 step is 4.9 s against a 1 ms
# refill (comm.link.default_burst), and the probe paid a whole 4.9 s step for it
REFILL_SHARE = 1e-3
MIN_BLOCK_S = 0.1  # a timed block at least this long where TARGET_ROUNDS of them fit the budget:
# one-step blocks of 7-24 ms behind a shaped link swung 3x with the scheduler and the link's burst
SETTLE_SHARE = 2  # a block times at least this many steps per untimed settle step (2: >= 2/3 timed)
TARGET_ROUNDS = 6  # the rounds a longer block may not cost (from 5, block_ab's crossover analysis)
METHOD = (
    "rounds of one block of each setting, order alternating, each block's first step after the "
    "switch untimed; paired t on the per-round log throughput ratios (stats.block_ab); each block "
    "timed as the window's steps: sub-blocks of measure.block_steps, each after a device sync and "
    "a barrier, its wall the slowest rank's, the block's wall their sum"
)


def budget_of(cfg, window_s: float) -> float:
    """The check's budget in seconds: diagnose.verify_budget of the window, at least
    diagnose.verify_min_s (0 where the window took no time)."""
    if window_s <= 0:
        return 0.0
    share = float(cfg.diagnose.verify_budget) * window_s
    return max(share, float(cfg.diagnose.get("verify_min_s", 0.0) or 0.0))


def limit_of(cfg, budget_s: float) -> float:
    """The most seconds the check's set-up and rounds may take while its interval is wider than
    diagnose.verify_width: diagnose.verify_max_s, or the budget where that is larger."""
    return max(budget_s, float(cfg.diagnose.get("verify_max_s", 0.0) or 0.0))


def stop_reason(
    done: int, narrow: bool, elapsed_s: float, per_round_s: float, budget_s: float, limit_s: float
) -> str | None:
    """Why the rounds end after `done` of them (None: one more). A narrow interval
    (stats.narrow_enough) ends them at once, inside the budget or not; while wider, they go on past
    the budget as long as the next round ends within limit_s (limit_of). From MIN_ROUNDS on only:
    fewer give no interval at all."""
    if narrow:
        return "narrow"
    if done >= MAX_ROUNDS:
        return "max_rounds"
    if done < MIN_ROUNDS:
        return None
    ends = elapsed_s + per_round_s
    if ends > limit_s:
        return "budget" if limit_s <= budget_s else "max_s"
    return None


def budget_words(cfg, budget_s: float) -> str:
    """How the output states the budget: which of the two rules set it."""
    floor = float(cfg.diagnose.get("verify_min_s", 0.0) or 0.0)
    rule = f"diagnose.verify_budget={cfg.diagnose.verify_budget:g} of the window"
    if floor and budget_s <= floor + 1e-9:
        rule = f"diagnose.verify_min_s={floor:g}, more than {rule}"
    return f"the budget ({rule}: {budget_s:.3g} s)"


def warmup_steps(fix) -> int:
    """The fix's untimed first steps: WARMUP_STEPS of its own after PowerSGD's start_iter plain
    all-reduces (before it the hook is not the fix; its first compressed step allocates its
    matrices, which made the plan's one timed step of it 2x its later steps)."""
    start = fix.optim.get("start_iter", 0) if fix.get("optim") is not None else 0
    return WARMUP_STEPS + int(start or 0)


def refill_s(cfg) -> float:
    """Seconds an emulated link's token bucket takes to refill (burst / rate; 0 without one)."""
    link = cfg.get("link")
    rate = link.get("rate") if link is not None else None
    if rate is None:
        return 0.0
    bit_s = parse_rate(rate)
    burst = link.get("burst_bytes") or default_burst(bit_s)
    return 8.0 * float(burst) / bit_s if bit_s > 0 else 0.0


def refill_steps(refill: float, step_s: float) -> int:
    """Steps of step_s that a shaped link's bucket takes to refill (refill_s), at most
    MAX_SETTLE_STEPS; 0 without a link, or where the refill is under REFILL_SHARE of a step. After
    a pause (a switch, the window's end) that many steps run before any is measured: the first ones
    ride the refilled burst."""
    if refill <= 0 or step_s <= 0 or refill < REFILL_SHARE * step_s:
        return 0
    return min(MAX_SETTLE_STEPS, math.ceil(refill / step_s))


def settle_steps(refill: float, base_s: float, fix_s: float) -> int:
    """Untimed steps at the head of every block: one, and behind a shaped link as many more of the
    faster setting's steps as its bucket takes to refill (at most MAX_SETTLE_STEPS more)."""
    return SETTLE_STEPS + refill_steps(refill, min(base_s, fix_s))


def plan_block(
    window_block: int, base_s: float, fix_s: float, avail_s: float, settle: int = SETTLE_STEPS
) -> int:
    """Timed steps per block: the window's, longer where its blocks would be shorter than
    MIN_BLOCK_S or than SETTLE_SHARE x `settle` steps, as long as TARGET_ROUNDS rounds of the
    longer block still fit avail_s (each block also pays its `settle` steps). Why the settle
    share: the untimed steps are paid every block and measure nothing; small_buckets' one-step
    blocks behind its link paid 2 of every 3 steps to them, a third of the rounds' time timed."""
    block = max(1, int(window_block))
    step = max(base_s, fix_s)
    if step <= 0:
        return block
    want = max(math.ceil(MIN_BLOCK_S / step), SETTLE_SHARE * settle)
    fits = int(avail_s // (TARGET_ROUNDS * (base_s + fix_s))) - settle
    return max(block, min(want, fits))


def not_switchable(change: dict | None, cfg) -> str | None:
    """Why `change` cannot be measured inside this job (None: it can)."""
    if not change:
        return "the top finding recommends no override"
    others = [k for k in change if k not in SWITCHABLE]
    if others:
        return (
            f"{', '.join(others)} cannot change inside a running job (the model's prediction stays)"
        )
    if cfg.cuda_graphs:
        return "cuda_graphs=true: the captured step cannot switch settings"
    target = change.get("sync", cfg.sync)
    if target != "ddp" and any(k != "h2d" for k in change):
        return f"sync={target}: only a DDP wrapper is built inside the job"
    return None


def asked_problem(cfg) -> str | None:
    """What is wrong with diagnose.verify_fix, in one line naming the fix (None: nothing)."""
    asked = cfg.diagnose.get("verify_fix")
    if asked is None:
        return None
    shape = "a mapping of what the check can switch, e.g. diagnose.verify_fix={bucket:100}"
    if not OmegaConf.is_dict(asked) or not asked:
        return f"diagnose.verify_fix={asked!r}: give {shape}."
    if not cfg.diagnose.get("verify", False):
        return "diagnose.verify_fix needs diagnose.verify=true (it names what the check measures)."
    change = OmegaConf.to_container(asked, resolve=True)
    why = not_switchable(change, cfg)
    if why is not None:
        return f"diagnose.verify_fix={change}: {why}; give {shape} ({', '.join(SWITCHABLE)})."
    return None


def fix_config(cfg, change: dict):
    """This run's config with `change` applied, as the ranks' DDP and feeder read it. optim=NAME:
    conf/optim/NAME.yaml over its schema, as Hydra would compose it."""
    fix = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key, value in change.items():
        if isinstance(value, str):  # as a Hydra override reads it: "null" is None, "25" is 25
            value = yaml.safe_load(value)
        if key == "optim":
            node = OmegaConf.load(CONF_DIR / "optim" / f"{value}.yaml")
            node.pop("defaults", None)
            schema = PowerSGD if value == "powersgd" else CommHookConfig
            fix.optim = OmegaConf.merge(OmegaConf.structured(schema), node)
        else:
            OmegaConf.update(fix, key, value, force_add=True)
    return fix


def _module(sync) -> torch.nn.Module:
    return sync.model.module if isinstance(sync, DDPSync) else sync.model


def in_job(ctx, make_step, sync, window, result) -> InJobCheck | None:
    """Every rank calls it after the probes; rank 0's result is its diagnosis's input (ctx.choose).
    Returns what the record keeps (the same on every rank; None where diagnose.verify is off)."""
    cfg = ctx.cfg
    if not cfg.diagnose.get("verify", False):
        return None
    t0 = time.perf_counter()
    budget_s = budget_of(cfg, window.window_s)
    # the least the rounds cost: the current setting's own steps (one to plan, MIN_ROUNDS blocks)
    block = max(1, int(window.block)) + SETTLE_STEPS
    least_s = (1 + MIN_ROUNDS * block) * window.window_s / max(1, window.steps)
    choice = [_decide(ctx, result, budget_s, least_s)]
    dist.broadcast_object_list(choice, src=0)
    decided = time.perf_counter()  # the decision is a diagnosis, whatever the window: not budgeted
    change, rule, skipped = choice[0]["change"], choice[0]["rule"], choice[0]["skipped"]
    out = InJobCheck(
        change=change,
        rule=rule,
        budget_s=budget_s,
        method=METHOD,
        skipped=skipped,
        decide_s=decided - t0,
    )
    if skipped is not None:
        out.cost_s = time.perf_counter() - t0
        return out
    try:
        _measure(ctx, make_step, sync, window, out, change, decided)
    except Exception as e:  # noqa: BLE001 - every rank runs the same fix: a failure is the same on each
        out.skipped = f"the check failed ({type(e).__name__}: {e}); the estimate stays"
    out.cost_s = time.perf_counter() - t0
    return out


def _choose(ctx, result, budget_s: float, least_s: float = 0.0) -> dict:
    """Rank 0: the fix to measure, or why none (never raises: the other ranks wait for it).
    least_s: what the rounds cost at the least (the fix's steps counted free); over the budget, the
    fix is not even built: on the default VGG11 run behind link=1gbe, building and warming up
    PowerSGD's wrapper took 54 s of a 30 s budget before the plan found no round fitting."""
    cfg = ctx.cfg
    verdict = _choose_fix(ctx, result, budget_s)
    if verdict["skipped"] is None and least_s > budget_s:
        verdict["skipped"] = (
            f"{budget_words(cfg, budget_s)} holds fewer than the {MIN_ROUNDS} rounds an interval "
            f"needs: the current setting's blocks alone take ~{least_s:.3g} s at the window's "
            "step; a larger diagnose.verify_budget, diagnose.verify_min_s or steps= measures it"
        )
    return verdict


def _choose_fix(ctx, result, budget_s: float) -> dict:
    cfg = ctx.cfg

    def can(change):
        return not_switchable(change, cfg) is None

    asked = cfg.diagnose.get("verify_fix")
    if asked is not None:  # checked before the ranks started (tasks/train/check.py)
        fix = OmegaConf.to_container(asked, resolve=True)
        return {
            "change": fix,
            "rule": ASKED,
            "skipped": None if budget_s > 0 else "the window took no time",
        }
    try:
        chosen = ctx.choose(result, can) if getattr(ctx, "choose", None) is not None else None
        problem = None
    except Exception as e:  # noqa: BLE001 - the other ranks wait for the answer: never raise here
        chosen = None
        problem = f"the diagnosis that chooses the fix failed ({type(e).__name__}: {e})"
    change, rule = chosen if chosen else (None, None)
    skipped = problem or not_switchable(change, cfg)
    if skipped is None and budget_s <= 0:
        skipped = "the window took no time"
    return {"change": change, "rule": rule, "skipped": skipped}


def _decide(ctx, result, budget_s: float, least_s: float = 0.0) -> dict | None:
    """Rank 0 diagnoses its result on a thread while every rank's main thread broadcasts rank 0's
    "done" flag every KEEPALIVE_S: the diagnosis takes seconds (tens on a loaded 2-core host), and a
    job with no finished collective for hang.after_s is declared hung (launchers/hang.py). Then the
    choice itself is broadcast."""
    box: dict = {}
    worker = None
    if ctx.is_main:
        worker = threading.Thread(
            target=lambda: box.update(choice=_choose(ctx, result, budget_s, least_s)), daemon=True
        )
        worker.start()
    done = torch.zeros(1, device=ctx.torch_device)  # nccl: a device tensor
    while True:
        if worker is not None:
            worker.join(KEEPALIVE_S)
            done[0] = float(not worker.is_alive())
        dist.broadcast(done, src=0)  # every rank: a finished collective, the hang watch's progress
        if done.item():
            return box.get("choice")


def _measure(ctx, make_step, sync, window, out: InJobCheck, change: dict, decided: float) -> None:
    """The fix built, warmed up, and timed in rounds against the current setting; into `out`."""
    cfg, budget_s = ctx.cfg, out.budget_s
    fix = fix_config(cfg, change)
    fix_sync = sync
    if any(k != "h2d" for k in change):
        fix_sync = DDPSync(fix, _module(sync), ctx.torch_device)
    h2d = str(change["h2d"]) if "h2d" in change else None
    base_step, fix_step = make_step(sync), make_step(fix_sync, h2d)
    dev = ctx.torch_device
    # warm-up: the fix's first steps, then one of each timed, to plan the rounds that fit
    for _ in range(warmup_steps(fix)):
        fix_step()
    sub = max(1, int(window.block))  # the window's timed block: the check times its steps alike
    base_s = _cost(base_step, dev)
    fix_s = _cost(fix_step, dev)
    spent = time.perf_counter() - decided
    plan = torch.tensor([base_s, fix_s, spent, budget_s], dtype=torch.float64, device=dev)
    dist.all_reduce(plan, op=dist.ReduceOp.MAX)  # every rank plans from the same numbers
    base_s, fix_s, spent, budget_s = plan.tolist()
    avail = max(0.0, budget_s - spent)
    settle = settle_steps(refill_s(cfg), base_s, fix_s)
    # admitted where MIN_ROUNDS rounds of the window's block fit the budget; the block itself is
    # planned for what the check may spend while its interval is wide (limit_of): a longer block
    # wastes fewer steps settling, and a narrow interval ends the rounds early (stop_reason)
    width, limit = float(cfg.diagnose.get("verify_width", 0.0) or 0.0), limit_of(cfg, budget_s)
    least = (max(1, int(window.block)) + settle) * (base_s + fix_s)
    rounds = int(avail // least) if least > 0 else 0
    block = plan_block(window.block, base_s, fix_s, max(avail, limit - spent), settle)
    out.block_steps, out.settle_steps, out.budget_s = block, settle, budget_s
    if rounds < MIN_ROUNDS:
        out.skipped = (
            f"{budget_words(cfg, budget_s)}, {spent:.3g} s spent on set-up, holds {rounds} of "
            f"the {MIN_ROUNDS} rounds an interval needs ({least:.3g} s each): a larger "
            "diagnose.verify_budget, diagnose.verify_min_s or steps= measures it"
        )
        return
    sizes = sub_blocks(block, sub)
    base_w: list[float] = []
    fix_w: list[float] = []
    started, stopped = time.perf_counter(), None
    while stopped is None:
        r = len(base_w)
        walls = torch.zeros(2 * len(sizes) + 2, dtype=torch.float64, device=dev)
        order = ((0, base_step), (1, fix_step)) if r % 2 == 0 else ((1, fix_step), (0, base_step))
        for arm, step in order:
            at = arm * len(sizes)
            walls[at : at + len(sizes)] = torch.tensor(
                window_walls(step, sizes, dev, settle, sub), dtype=torch.float64
            )
        now = time.perf_counter()
        walls[-2], walls[-1] = now - started, now - decided
        # between rounds, outside the timed blocks: each sub-block's slowest rank (as the window's)
        # and the latest clocks, so every rank takes the same decision from the same numbers (a
        # rank that stopped on its own clock would leave the others in the next round's barrier)
        dist.all_reduce(walls, op=dist.ReduceOp.MAX)
        got = walls.cpu().tolist()
        base_w.append(sum(got[: len(sizes)]))  # a block's wall: its sub-blocks', as the window's
        fix_w.append(sum(got[len(sizes) : 2 * len(sizes)]))
        done = r + 1
        s = block_ab(base_w, fix_w, block) if done >= MIN_ROUNDS else None
        per_round = got[-2] / done
        narrow = s is not None and narrow_enough(s, done, width)
        stopped = stop_reason(done, narrow, got[-1], per_round, budget_s, limit)
    out.rounds, out.base_walls_s, out.fix_walls_s, out.stopped = done, base_w, fix_w, stopped
    out.width_target = width
    out.saving = time_saved(s.ratio)
    if s.ci_lo is not None and s.ci_hi is not None:
        out.ci_lo, out.ci_hi = time_saved(s.ci_lo), time_saved(s.ci_hi)


def sub_blocks(block: int, sub: int) -> list[int]:
    """A block of `block` steps as the window would time them: blocks of `sub` steps (the window's
    measure.block_steps), the last one shorter where `sub` does not divide it."""
    sub, block = max(1, int(sub)), int(block)
    return [min(sub, block - i) for i in range(0, block, sub)]


def window_walls(step, sizes: list[int], dev, settle: int = 0, sub: int = 1) -> list[float]:
    """One block, timed as Window.blocks times the window: each sub-block of `sizes` after a device
    sync and a barrier, its wall from there to a device sync after it; nothing else in the timed
    spans. `settle` untimed steps first, in sub-blocks of `sub` bracketed the same way, so a
    shaped link's token bucket enters the timed steps in the state the window's steps find it
    (each window step follows the barrier's untimed pause, during which its bucket refills)."""
    for n in sub_blocks(settle, sub):
        with timed_span(dev, []):
            for _ in range(n):
                step()
    out: list[float] = []
    for n in sizes:
        with timed_span(dev, out):
            for _ in range(n):
                step()
    return out


def _cost(step, dev) -> float:
    """One step with the window's bracket around it (a device sync and a barrier before, a device
    sync after): what a step costs the check's budget, the untimed pause included."""
    t = time.perf_counter()
    synchronize(dev)
    dist.barrier()
    step()
    synchronize(dev)
    return time.perf_counter() - t
