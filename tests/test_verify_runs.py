"""diagnose.verify on real ranks (issue 38): a per_param run measures sync=ddp inside the job and
prints the measurement; the h2d fix (a new feeder) and a DDP knob (a new wrapper around the same
module) switch as well."""

from __future__ import annotations

import pytest

from base.schema import Diagnose
from tests.conftest import TINY_AT_DEFAULTS as TINY, read, run_inprocess, run_train

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def _check(tmp_path, *args, steps: int = 60) -> tuple[str, dict]:
    """(what the job printed, its result), the run composed and launched in this process
    (conftest.run_inprocess: the same job function, local launcher and spawned ranks as `python
    train.py`): what is checked is the in-job measurement, not the entry point, and these tests run
    alone under -n 2, so the parent's torch and Hydra start-up is not paid again (issue 36)."""
    import contextlib
    import io

    printed = io.StringIO()  # the summary: the tool's console handler writes to sys.stdout
    with contextlib.redirect_stdout(printed):
        rec, code = run_inprocess([*TINY, f"steps={steps}", *args], tmp_path, timeout=480)
    assert code == 0, rec and rec.get("error")
    return printed.getvalue(), rec["result"]


def _check_train_py(tmp_path, *args, steps: int = 60) -> tuple[str, dict]:
    """_check through `python train.py`: the emulated link is built and held by the launching
    process, a fresh one per run."""
    proc = run_train([*TINY, f"steps={steps}", *args], tmp_path, timeout=480)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, read(proc.out_dir)["result"]


def test_per_param_measures_ddp_in_the_job(tmp_path):
    printed, result = _check(tmp_path, "sync=per_param")
    v = result["verify"]
    assert v["change"] == {"sync": "ddp"} and v["rule"] == "per_param", v
    assert v["skipped"] is None and v["rounds"] >= 3 and len(v["fix_walls_s"]) == v["rounds"]
    assert v["ci_lo"] <= v["saving"] <= v["ci_hi"]
    # the fix's cost kept to its budget, or, while its interval was wider than
    # diagnose.verify_width, to diagnose.verify_max_s (15 s); give or take one round
    assert v["stopped"] in ("narrow", "budget", "max_s", "max_rounds"), v
    max_s = Diagnose().verify_max_s  # the default, as this run has it
    assert v["cost_s"] - v["decide_s"] <= max(v["budget_s"], max_s) + 2 * max(
        v["base_walls_s"] + v["fix_walls_s"]
    )
    # stopped narrow exactly when the interval was narrow from 6 rounds on (stats.narrow_enough)
    narrow = v["rounds"] >= 6 and v["ci_hi"] - v["ci_lo"] <= Diagnose().verify_width + 1e-9
    assert (v["stopped"] == "narrow") == narrow, v
    named = {f["rule"]: f for f in result["diagnosis"]["findings"]}
    # named unless a busy machine's noise hides it; where named, with the saving this job measured
    shown = named.get("per_param")
    assert shown is None or shown["saving"]["source"] == "measured", shown
    assert shown is None or "measured in this job" in printed


def test_h2d_fix_switches_its_feeder(tmp_path):
    _, result = _check(
        tmp_path,
        "device=fake",
        "h2d=blocking",
        "fault.delay_s=0.1",
        "fault.delay_at=h2d",
        "steps=20",
    )
    v = result["verify"]
    assert v["change"] == {"h2d": "side_stream"} and v["skipped"] is None
    assert v["saving"] > 0.2  # the 100 ms wait of every blocking copy is gone


def test_off_and_a_short_window_say_so(tmp_path):
    _, result = _check(tmp_path, "sync=per_param", "diagnose.verify=false")
    assert result.get("verify") is None
    # a 10-step window's 30%, without diagnose.verify_min_s's floor: too short, and it says so
    _, result = _check(tmp_path / "b", "sync=per_param", "diagnose.verify_min_s=0", steps=10)
    assert "holds" in result["verify"]["skipped"] and result["verify"]["rounds"] == 0


@pytest.mark.root
def test_behind_a_shaped_link_the_blocks_after_a_switch_do_not_ride_the_burst(tmp_path):
    """PowerSGD against the plain setting behind 20 Mbit/s: the plain setting's blocks all time
    its steady state. Before the settling steps they ran 6.6-24 ms on the same steps (the block
    after PowerSGD's on the burst its bucket had refilled; results/diagnosis_benchmark_quiet);
    with them, 9 checks on the VM at load 5-10 kept them within 1.15x of each other, and this
    test failed 1 of 4 times at load 10 at a 1.5x bound (cause not kept): the bound is 2x."""
    from tests.test_link import link_problem

    if (why := link_problem()) is not None:
        pytest.skip(why)
    _, result = _check_train_py(
        tmp_path, "link.rate=20mbit", "diagnose.verify_fix={optim:powersgd}"
    )
    v = result["verify"]
    assert v["skipped"] is None and v["settle_steps"] >= 2, v  # the refill: 1.8 ms, a step
    base = v["base_walls_s"]
    assert max(base) < 2 * min(base), base  # before: 3.7x
