"""Issue 38: a rule of thumb's best case bounds a saving and is never its estimate; a saving that
cannot be estimated within +-10 points says so and gives the command that measures it."""

from __future__ import annotations

import json
from pathlib import Path

from base.record_types import Saving
from diagnosis.finding import saving_text
from diagnosis.run import diagnose

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "fixtures" / "benchmark_2026-11-25" / "base" / "1" / "run_record.json"


def _without_link() -> dict:
    """The per_param record without its on-rank microbenchmark: the model has no link, the rule of
    thumb stays."""
    r = json.loads(RECORD.read_text())
    r["result"].pop("diagnosis", None)
    r["result"].pop("microbench", None)
    if r["result"].get("comm"):
        r["result"]["comm"].pop("vs_microbench", None)
    return r


def _finding(d: dict, rule: str) -> dict:
    return next(f for f in d["findings"] if f["rule"] == rule)


def test_a_rules_best_case_is_a_bound_with_the_command_that_measures_it():
    f = _finding(diagnose(_without_link()), "per_param")
    s = f["saving"]
    assert s["fraction"] is None and s["source"] == "rule" and s["hi"] > 0.4
    text = saving_text(Saving.from_dict(s))
    assert text.startswith(f"at most {100 * s['hi']:.0f}% of the step")
    assert "not estimated within +-10 points" in text
    assert "python train.py -m" in text and "sync=per_param,ddp" in text and "repeats=3" in text
    assert (
        s["rule"]["fraction"] is not None
    )  # the rule's own figure kept for the checked-estimates table


def test_a_modelled_saving_keeps_its_point_and_says_when_its_interval_is_wide():
    r = json.loads(RECORD.read_text())
    r["result"].pop("diagnosis", None)
    s = _finding(diagnose(r), "per_param")["saving"]
    assert s["source"] == "model" and s["fraction"] is not None
    wide = s["hi"] - s["lo"] > 0.2
    assert ("measure it with" in s["how"]) == wide


def test_a_fix_checked_in_the_job_too_noisily_leaves_the_cause_named_on_its_estimate():
    """The slow link's fix (optim=powersgd) measured over 8 one-step rounds at -19% [-133, 39]: the
    link stays the first finding on the model's estimate, with the check printed beside it."""
    from pathlib import Path

    from base.record import Record
    from diagnosis import diagnose

    path = Path(__file__).resolve().parent.parent / (
        "results/diagnosis_benchmark_quiet/link_buckets_stragglers/link/0/run_record.json"
    )
    record = Record.read(path)
    assert record.result.verify.ci_hi - record.result.verify.ci_lo > 0.4
    first = diagnose(record, hta=False)["findings"][0]
    assert first["rule"] == "exposed_comm.slow_link", first["rule"]
    assert first["saving"]["source"] == "model" and first["saving"]["fraction"] > 0.5
    assert "an interval too wide to replace the estimate" in first["saving"]["how"]


def test_a_narrow_interval_is_printed_in_tenths_not_as_one_point_twice():
    """The what-if model's 4.2% [3.9, 4.4] on VGG11 per_param behind 1gbe printed "(95% interval
    4-4%)": ends that round alike take a decimal; others stay whole points."""
    base = {"of": "the time per sample", "how": "the what-if model", "basis": "interval"}
    narrow = saving_text(Saving.from_dict({**base, "fraction": 0.042, "lo": 0.039, "hi": 0.044}))
    wide = saving_text(Saving.from_dict({**base, "fraction": 0.057, "lo": 0.031, "hi": 0.082}))
    assert "(95% interval 3.9-4.4%)" in narrow and "(95% interval 3-8%)" in wide
