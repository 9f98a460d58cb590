"""diagnose.verify (issue 38): what the in-job check may switch, the config of the fix it builds,
and how the diagnosis prints a measured saving in place of its estimate."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from base.record_types import InJobCheck
from diagnosis.finding import saving_text
from diagnosis.run import diagnose, top_fix
from tasks.train.verify import fix_config, not_switchable

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
    assert fix.optim.rank == 1 and fix.ddp.static_graph is True
    assert cfg.optim.name == "none"  # the run's own config is untouched


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


def test_a_check_of_another_fix_changes_nothing():
    r, _, _ = _record_with_check()
    r["result"]["verify"]["change"] = {"optim": "bf16"}
    top = [f for f in diagnose(r)["findings"] if not f.get("first")][0]
    assert top["saving"]["source"] != "measured"


def test_top_fix_skips_fixes_the_job_cannot_switch():
    r = json.loads(RECORD.read_text())
    assert top_fix(r, lambda change: "sync" not in change) in (None, ({"sync": "ddp"}, "per_param"))


def test_a_measured_saving_under_the_noise_floor_is_not_named():
    """The run's noise floor (34% here) hides a measured 4% as it hides an estimated one."""
    r, _, _ = _record_with_check(0.041, 0.029, 0.053)
    d = diagnose(r)
    assert not [f for f in d["findings"] if not f.get("first")]
    assert [h["rule"] for h in d["inside_noise"]] == ["per_param"]
