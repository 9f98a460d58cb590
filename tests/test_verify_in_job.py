"""diagnose.verify (issue 38): what the in-job check may switch, the config of the fix it builds,
and how the diagnosis prints a measured saving in place of its estimate."""

from __future__ import annotations

import copy
import time
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from base.record_types import InJobCheck
from diagnosis.finding import saving_text
from diagnosis.run import diagnose, top_fix
from tasks.train.verify import (
    MAX_ROUNDS,
    MAX_SETTLE_STEPS,
    MIN_BLOCK_S,
    MIN_ROUNDS,
    SETTLE_STEPS,
    TARGET_ROUNDS,
    WARMUP_STEPS,
    budget_of,
    budget_words,
    fix_config,
    limit_of,
    not_switchable,
    plan_block,
    refill_s,
    refill_steps,
    settle_steps,
    stop_reason,
    warmup_steps,
)

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "fixtures" / "benchmark_2026-11-25" / "base" / "1" / "run_record.json"


def _cfg(**over):
    base = {"sync": "per_param", "cuda_graphs": False, "optim": {"name": "none", "_target_": None}}
    base.update(over)
    return OmegaConf.create(base)


@pytest.mark.parametrize(
    "change, cfg, why",
    [
        ({}, _cfg(), "recommends no override"),
        ({"world_size": 1}, _cfg(), "world_size cannot change"),
        ({"accumulate": 4}, _cfg(sync="ddp"), "accumulate cannot change"),
        ({"sync": "flat"}, _cfg(), "only a DDP wrapper"),
        ({"sync": "ddp"}, _cfg(cuda_graphs=True), "cuda_graphs"),
    ],
)
def test_what_cannot_be_switched_says_why(change, cfg, why):
    assert why in not_switchable(change, cfg)


@pytest.mark.parametrize(
    "change",
    [
        {"sync": "ddp"},
        {"optim": "bf16"},
        {"bucket": 25},
        {"bucket": None},
        {"ddp.static_graph": True},
        {"h2d": "side_stream"},
    ],
)
def test_switchable_fixes(change):
    assert not_switchable(change, _cfg(sync="ddp")) is None


def test_fix_config_composes_the_hook_group_as_hydra_would():
    cfg = _cfg(sync="ddp", bucket=None, ddp={"static_graph": False})
    fix = fix_config(cfg, {"optim": "powersgd", "ddp.static_graph": True})
    assert fix.optim.name == "powersgd" and fix.optim._target_ == "tasks.train.hooks.powersgd"
    assert warmup_steps(fix) == WARMUP_STEPS + fix.optim.start_iter  # its plain all-reduces first
    assert warmup_steps(fix_config(cfg, {"bucket": 25})) == WARMUP_STEPS
    assert fix.optim.rank == 1 and fix.ddp.static_graph is True
    assert cfg.optim.name == "none"  # the run's own config is untouched


def test_fix_config_reads_a_findings_value_as_hydra_would():
    """The bucket finding recommends bucket=null (DDP's default): the check of both quiet
    small_buckets runs failed on float('null') (results/diagnosis_benchmark_quiet)."""
    fix = fix_config(_cfg(sync="ddp", bucket=0.001), {"bucket": "null"})
    assert fix.bucket is None
    assert fix_config(_cfg(sync="ddp", bucket=None), {"bucket": "25"}).bucket == 25
    assert fix_config(_cfg(sync="ddp"), {"h2d": "side_stream"}).h2d == "side_stream"


def _budget_cfg(share=0.3, floor=2.0):
    return OmegaConf.create({"diagnose": {"verify_budget": share, "verify_min_s": floor}})


def test_the_budget_is_the_share_of_the_window_and_at_least_verify_min_s():
    assert budget_of(_budget_cfg(), 100.0) == pytest.approx(30.0)
    assert budget_of(_budget_cfg(), 1.5) == pytest.approx(2.0)  # a tiny window: the floor
    assert budget_of(_budget_cfg(floor=0.0), 1.5) == pytest.approx(0.45)
    assert budget_of(_budget_cfg(), 0.0) == 0.0  # no window: nothing to measure
    assert "verify_min_s=2" in budget_words(_budget_cfg(), 2.0)
    assert "verify_min_s" not in budget_words(_budget_cfg(), 30.0)


def test_a_block_grows_to_min_block_s_only_where_target_rounds_still_fit():
    # 24 ms steps (the 20 Mbit/s link's), 2 s left: blocks of ceil(0.1 / 0.024) = 5 steps
    assert plan_block(1, 0.024, 0.02, 2.0) == 5
    # the same steps with 0.5 s left: 6 rounds of 5 (+1) steps do not fit, the longest that do
    fits = int(0.5 // (TARGET_ROUNDS * 0.044)) - SETTLE_STEPS
    assert plan_block(1, 0.024, 0.02, 0.5) == max(1, fits)
    # steps longer than MIN_BLOCK_S: twice the settle step (SETTLE_SHARE); a window block
    # already longer: the window's block
    assert plan_block(1, 2 * MIN_BLOCK_S, MIN_BLOCK_S, 100.0) == 2 * SETTLE_STEPS
    assert plan_block(10, 0.024, 0.02, 100.0) == 10


def test_blocks_behind_a_link_time_at_least_twice_their_settle_steps_where_rounds_fit():
    """small_buckets (2026-12-07): 65 and 30 ms steps, 2 settle steps: blocks of 1 step paid 2
    untimed steps each. Now 4 timed a block where TARGET_ROUNDS of them fit; 1 where they do not."""
    assert plan_block(1, 0.065, 0.03, 12.0, settle=2) == 4
    assert plan_block(1, 0.065, 0.03, 1.5, settle=2) == 1


def test_the_rounds_stop_on_a_narrow_interval_or_past_the_budget_at_the_limit():
    """diagnose.verify_width / verify_max_s: narrow ends them at once; wide goes on past the
    budget (3 s) while the next round ends within the limit (15 s); never before MIN_ROUNDS."""
    assert stop_reason(6, True, 1.0, 0.3, 3.0, 15.0) == "narrow"
    assert stop_reason(MIN_ROUNDS - 1, False, 20.0, 0.3, 3.0, 15.0) is None
    assert stop_reason(8, False, 2.9, 0.3, 3.0, 15.0) is None  # wide, past the budget: on
    assert stop_reason(8, False, 14.8, 0.3, 3.0, 15.0) == "max_s"
    assert stop_reason(8, False, 2.9, 0.3, 3.0, 3.0) == "budget"  # verify_max_s=0: the budget
    assert stop_reason(MAX_ROUNDS, False, 1.0, 0.01, 3.0, 15.0) == "max_rounds"
    cfg = OmegaConf.create({"diagnose": {"verify_max_s": 15.0}})
    assert limit_of(cfg, 3.0) == 15.0 and limit_of(cfg, 30.0) == 30.0  # a larger budget stands
    assert limit_of(OmegaConf.create({"diagnose": {"verify_max_s": 0.0}}), 3.0) == 3.0


def test_blocks_behind_a_shaped_link_settle_until_its_bucket_refills():
    """After the plain setting's block the bucket is empty; PowerSGD's steady state (little sent)
    has it full: its blocks after a switch ran 1.5x slower until it refilled (burst / rate)."""
    link = {"rate": "20mbit", "burst_bytes": 67050}
    refill = refill_s(OmegaConf.create({"link": link}))
    assert refill == pytest.approx(8 * 67050 / 20e6)  # 27 ms
    assert refill_s(OmegaConf.create({"link": {"rate": None}})) == 0.0
    assert refill_s(OmegaConf.create({"link": {"rate": "1gbit", "burst_bytes": None}})) > 0
    assert settle_steps(0.0, 0.024, 0.01) == SETTLE_STEPS  # no link: the switch's first step
    assert settle_steps(refill, 0.024, 0.01) == SETTLE_STEPS + 3  # 27 ms of 10 ms steps
    assert settle_steps(10.0, 0.024, 0.01) == SETTLE_STEPS + MAX_SETTLE_STEPS
    # the probe after the window settles as long, minus the switch's own step
    assert refill_steps(refill, 0.01) == 3 and refill_steps(0.0, 0.01) == 0
    # a refill under REFILL_SHARE of the step moves no sample by more: none (1gbe's 1 ms against
    # the default VGG11 step of 4.9 s); at 0.2% of it, one
    assert refill_steps(1e-3, 4.9) == 0 and refill_steps(1e-3, 0.5) == 1
    # the settle steps come out of what a longer block may take
    assert plan_block(1, 0.024, 0.02, 1.0, settle=4) < plan_block(1, 0.024, 0.02, 1.0, settle=1)


def _record_with_check(saving=0.501, lo=0.459, hi=0.533):
    r = json.loads(RECORD.read_text())
    r = copy.deepcopy(r)
    r["result"].pop("diagnosis", None)
    change, rule = top_fix(r)
    r["result"]["verify"] = InJobCheck(
        change=change,
        rule=rule,
        saving=saving,
        ci_lo=lo,
        ci_hi=hi,
        rounds=8,
        block_steps=1,
        cost_s=1.2,
    ).to_dict()
    return r, change, rule


def test_a_measured_saving_replaces_the_estimate_and_keeps_it_beside():
    r, change, rule = _record_with_check()
    assert (change, rule) == ({"sync": "ddp"}, "per_param")
    top = [f for f in diagnose(r)["findings"] if not f.get("first")][0]
    s = top["saving"]
    assert s["source"] == "measured" and s["fraction"] == pytest.approx(0.501)
    assert (s["lo"], s["hi"]) == (pytest.approx(0.459), pytest.approx(0.533))
    assert s["predicted"]["fraction"] is not None
    from base.record_types import Saving

    text = saving_text(Saving.from_dict(s))
    assert "measured in this job: 50.1% [45.9, 53.3]" in text
    assert "8 interleaved rounds" in text and "predicted" in text


def test_a_check_past_its_budget_says_what_ended_its_rounds():
    """diagnose.verify_max_s: a check may add 12 s where its budget is 3 s; the text says why."""
    r, _, _ = _record_with_check()
    r["result"]["verify"].update(stopped="max_s", width_target=0.1, cost_s=12.0, budget_s=3.0)
    top = [f for f in diagnose(r)["findings"] if not f.get("first")][0]
    assert (
        "went past the budget while the interval was wider than 10 points" in top["saving"]["how"]
    )
    r["result"]["verify"].update(stopped="narrow")
    top = [f for f in diagnose(r)["findings"] if not f.get("first")][0]
    assert "ended when the interval was at most 10 points wide" in top["saving"]["how"]


def test_a_check_of_another_fix_changes_nothing():
    r, _, _ = _record_with_check()
    r["result"]["verify"]["change"] = {"optim": "bf16"}
    top = [f for f in diagnose(r)["findings"] if not f.get("first")][0]
    assert top["saving"]["source"] != "measured"


def test_top_fix_skips_fixes_the_job_cannot_switch():
    r = json.loads(RECORD.read_text())
    assert top_fix(r, lambda change: "sync" not in change) in (None, ({"sync": "ddp"}, "per_param"))


def test_a_measured_saving_under_the_noise_floor_is_named_where_its_interval_clears_2_percent():
    """The run's noise floor (34% here) hides an estimated 4%, but not one the job measured with
    its fix interleaved: 4.1% [2.9, 5.3] is its own evidence (issue 38's own example), named
    (and the noise, hiding nothing, has no line); the same check at [1.5, 6.7], which reaches
    below the 2% threshold, is not (hidden, as before 2026-12-07, when the floor hid both)."""
    r, _, _ = _record_with_check(0.041, 0.029, 0.053)
    d = diagnose(r)
    assert d["noise"]["floor"] > 0.3 and not d["inside_noise"]
    [named] = d["findings"]
    assert named["rule"] == "per_param"
    assert named["saving"]["how"].startswith("measured in this job: 4.1% [2.9, 5.3]")
    r, _, _ = _record_with_check(0.041, 0.015, 0.067)
    d = diagnose(r)
    assert not [f for f in d["findings"] if not f.get("first")]
    assert [h["rule"] for h in d["inside_noise"]] == ["per_param"]


class _ShapedLink:
    """A token bucket in seconds of link time (rate 1 s per s), as tc's htb shapes the emulated
    link: a step computes `compute` s, then sends `send` s of link time, waiting for what the
    bucket lacks; the bucket refills in real time up to `burst`, also while the ranks wait at a
    barrier outside any timed block."""

    def __init__(self, burst: float):
        self.burst, self.tokens, self.last = burst, burst, time.perf_counter()

    def step(self, compute: float, send: float):
        def one():
            time.sleep(compute)
            now = time.perf_counter()
            self.tokens = min(self.burst, self.tokens + now - self.last)
            if self.tokens < send:
                time.sleep(send - self.tokens)
                self.tokens = 0.0
            else:
                self.tokens -= send
            self.last = time.perf_counter()

        return one


def test_the_check_times_its_blocks_as_the_window_times_separate_runs(one_rank_group, monkeypatch):
    """Behind the 20 Mbit/s link the window's one-step blocks each followed a 7 ms barrier
    during which the link's token bucket refilled, so its timed step was 23.5 ms of 30.6 elapsed;
    the check's blocks ran their steps back to back and timed all 30.4 ms: it measured PowerSGD's
    saving at 60% where the separate runs' windows gave 35%. Here a fake link with that shape:
    the check's saving must be the one two windows report (about 83%), not the back-to-back
    one (60%)."""
    import torch
    import torch.distributed as dist

    from tasks.train import verify
    from tasks.train.window import Window

    pause = 0.024  # the barrier's untimed time behind the link
    real_barrier = dist.barrier

    def slow_barrier(*a, **k):
        real_barrier(*a, **k)
        time.sleep(pause)

    monkeypatch.setattr(dist, "barrier", slow_barrier)
    link = _ShapedLink(burst=0.03)
    base, fix = link.step(0.006, 0.060), link.step(0.006, 0.024)
    cfg = OmegaConf.create(
        {
            "steps": 6,
            "measure": {
                "policy": "fixed",
                "block_steps": 1,
                "rel_ci": 0.05,
                "max_steps": None,
                "max_s": None,
            },
            "h2d": "blocking",
            "optim": {"name": "none"},
            "link": None,
            "diagnose": {"verify_budget": 0.3, "verify_min_s": 3.0},
        }
    )

    def window_step_s(step):  # what a separate run's window reports: walls of one-step blocks
        w = Window(cfg, torch.device("cpu"), timer=None)
        for n in w.blocks():
            for _ in range(n):
                step()
        return sum(w.walls) / w.steps

    separate = 1 - window_step_s(fix) / window_step_s(base)
    assert separate > 0.75  # the fake link rewards the pause, as the shaped one did
    ctx = type("Ctx", (), {"cfg": cfg, "torch_device": torch.device("cpu")})()
    out = InJobCheck(change={"h2d": "side_stream"}, rule="r", budget_s=3.0)
    window = type("W", (), {"block": 1})()
    verify._measure(
        ctx,
        lambda sync, h2d=None: fix if h2d else base,
        object(),
        window,
        out,
        {"h2d": "side_stream"},
        time.perf_counter(),
    )
    assert out.skipped is None and out.rounds >= verify.MIN_ROUNDS, out
    assert abs(out.saving - separate) < 0.08, (out.saving, separate)


def test_the_checks_powersgd_warm_up_leaves_no_first_steps_in_its_timed_blocks(one_rank_group):
    """PyTorch's PowerSGD hook all-reduces uncompressed for start_powerSGD_iter steps (state.iter,
    one a step on the last bucket), then allocates its error-feedback buffer and its warm-start P
    and Q on the first compressed step. The check builds one PowerSGDState for all its blocks
    (DDPSync in _measure) and runs warmup_steps(fix) untimed steps of it first: after them every
    step compresses into the P and Q it has, so no timed block holds a plain or a first step
    (issue 38: the in-job PowerSGD blocks behind 40 Mbit/s were suspected of either)."""
    import torch
    from torch import nn

    from tasks.train.ddp import DDPSync
    from tests.conftest import TINY, compose

    fix = fix_config(compose([*TINY, "sync=ddp"]), {"optim": "powersgd"})
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 4))
    sync = DDPSync(fix, module, torch.device("cpu"))
    state = sync.hook_state

    def step():
        sync.model(torch.randn(8, 64)).sum().backward()
        for p in module.parameters():
            p.grad = None

    def buffers():
        """P and Q (warm start: filled in place each step) and the buckets with error feedback
        (its tensor is made anew by every compressed step, as in any run of the hook)."""
        out = {
            n: {k: t.data_ptr() for k, t in getattr(state, f"{n}_memory_dict").items()}
            for n in ("p", "q")
        }
        return {**out, "error": set(state.error_dict)}

    for _ in range(warmup_steps(fix)):
        step()
    assert state.iter >= state.start_powerSGD_iter + 1  # a compressed step among the warm-up's
    before = buffers()
    assert all(before.values()), before  # error feedback, P and Q allocated in the warm-up
    for _ in range(3):  # the timed steps: each compresses (state.iter past the start) ...
        step()
    assert buffers() == before  # ... into the same P and Q
