"""The sweep aggregation's figures (tables/aggregate.py) checked by another route: closed forms on
hand-made records (a geometric mean written out, a t interval from scipy's quantile, a plain median
over a list), and the statistics' own functions (stats/, mutation-tested on their own) fed the
inputs this module should hand them. Written for the mutants the module's other tests let through
(results/mutation.md); each test names the figure it pins."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from stats import batch_median, batch_rate, plan_repeats
from tables import aggregate as agg
from tables.aggregate import Config
from tables.table import Entry
from tests.records import train_record


def _rec(overrides, steps_per_s=10.0, *, steps=12, **kw):
    return train_record(overrides=list(overrides), steps_per_s=steps_per_s, steps=steps, **kw)


def _entry(overrides=("bucket=25",), steps_per_s=10.0, *, edit=None, **kw) -> Entry:
    """An Entry of a hand-made train record; edit(record dict) changes it before it is typed."""
    rec = _rec(overrides, steps_per_s, **kw)
    if edit is not None:
        edit(rec)
    return Entry.from_record(rec)


def _bare() -> Entry:
    """A job that left no record (no result, no config)."""
    return Entry(num=0, overrides=["bucket=25"], status="failed")


def _set(path, value):
    def edit(rec):
        node = rec
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value

    return edit


def _t95(df):
    return float(st.t.ppf(0.975, df))


# ---------------------------------------------------------------------------------- bucket and keys


def test_bucket_of_reads_ddps_default_only_for_ddp_sync():
    def unset(sync):
        def edit(r):
            r["result"].update(bucket_mb=None, sync=sync)
            r["config"]["bucket"] = None

        return edit

    none_sync = Config("a", [_entry(["optim=none"], edit=unset(None))])
    assert agg._bucket_of(none_sync) == "default"  # no sync knob: DDP's
    other = Config("b", [_entry(["optim=none"], edit=unset("local_sgd"))])
    assert agg._bucket_of(other) is None  # not DDP: no bucket, and no default
    ddp = Config("c", [_entry(edit=lambda r: r["result"].update(bucket_mb="default"))])
    assert agg._bucket_of(ddp) == "default"
    assert agg._bucket_of(Config("d", [_entry(bucket=100)])) == 100.0


def test_flat_keys_end_with_a_dot_and_empty_dicts_stay_values():
    assert agg._flat({"a": {"b": 1}, "c": 2}) == {"a.b.": 1, "c.": 2}
    assert agg._flat({"a": {}}) == {"a.": {}}  # an empty section is a value, not nothing
    assert agg._flat({}) == {"": {}}
    assert agg._flat(3) == {"": 3}


def test_compared_keys_are_the_differing_dotted_settings():
    a = _entry(edit=_set(["config", "measure"], {"rel_ci": 0.02, "steps": 5}))
    b = _entry(edit=_set(["config", "measure"], {"rel_ci": 0.05, "steps": 5}))
    c = _entry(edit=_set(["config", "measure"], {}))
    keys = agg.compared_keys([Config("a", [a]), Config("b", [b])])
    assert keys == ["measure.rel_ci"]
    # an empty section against a full one differs as a whole and in each key
    assert "measure" in agg.compared_keys([Config("a", [a]), Config("c", [c])])
    assert agg.compared_keys([Config("a", [a]), Config("f", [_bare()])]) == []  # failed: not read


# ------------------------------------------------------------------------------------- run samples


def test_run_samples_read_the_records_fields():
    e = _entry(steps_per_s=4.0, batch_per_rank=3, world_size=2)
    assert agg.step_median(e) == pytest.approx(0.25)
    assert agg.phase_median(e, "forward") == pytest.approx(0.25 * 0.25)
    assert agg.phase_median(e, "nonexistent") is None
    assert agg.exposed_s(e) == pytest.approx(0.004)
    assert agg.samples_per_step(e) == pytest.approx(6.0)  # 3 per rank x 2 ranks
    assert agg._rate(e, False) == pytest.approx(4.0) and agg._rate(e, True) == pytest.approx(24.0)
    bare = _bare()
    for f in (agg.step_median, agg.exposed_s, agg.samples_per_step, agg._step_series):
        assert f(bare) is None
    assert agg.phase_median(bare, "forward") is None
    assert agg._rate(bare, False) is None and agg._rate(bare, True) is None
    no_series = _entry(edit=_set(["result", "series"], None))
    assert agg._step_series(no_series) is None
    # a phase this version does not declare (a newer record's): read from the undeclared keys
    gc = _entry(edit=_set(["result", "phases", "gc"], {"median": 0.004, "p90": 0.005}))
    assert agg.phase_median(gc, "gc") == pytest.approx(0.004)
    odd = _entry(edit=_set(["result", "phases", "gc"], 0.004))
    assert agg.phase_median(odd, "gc") is None and agg.phase_median(gc, "other") is None
    assert agg.phase_median(_entry(edit=_set(["result", "phases"], None)), "gc") is None
    zero_steps = _entry(edit=lambda r: r["result"]["throughput"].update(steps_per_s=0.0))
    assert agg.samples_per_step(zero_steps) is None
    no_samples = _entry(edit=lambda r: r["result"]["throughput"].update(samples_per_s=None))
    assert agg.samples_per_step(no_samples) is None


def test_run_blocks_and_log_rate_written_out():
    walls = [0.1, 0.2, 0.3, 0.4]
    e = _entry(
        steps_per_s=4.0,
        batch_per_rank=3,
        edit=lambda r: r["result"]["throughput"].update(
            blocks={"walls_s": walls, "steps": [1, 2, 3, 4]}
        ),
    )
    assert agg.run_blocks(e, False) == (walls, [1.0, 2.0, 3.0, 4.0])
    assert agg.run_blocks(e, True) == (walls, pytest.approx([6.0, 12.0, 18.0, 24.0]))
    assert agg.run_log(e, False) == pytest.approx(math.log(10 / 1.0))
    assert agg.run_log(e, True) == pytest.approx(math.log(60 / 1.0))
    no_blocks = _entry(
        steps_per_s=4.0, edit=lambda r: r["result"]["throughput"].update(blocks=None)
    )
    assert agg.run_blocks(no_blocks, False) is None
    assert agg.run_log(no_blocks, False) == pytest.approx(math.log(4.0))
    assert agg.run_log(no_blocks, True) == pytest.approx(math.log(32.0))  # 4 per rank x 2
    empty = _entry(
        edit=lambda r: r["result"]["throughput"].update(blocks={"walls_s": [], "steps": []})
    )
    assert agg.run_blocks(empty, False) is None
    zero_wall = _entry(
        steps_per_s=5.0,
        edit=lambda r: r["result"]["throughput"].update(
            blocks={"walls_s": [0.0, 0.1], "steps": [1, 1]}
        ),
    )
    assert agg.run_log(zero_wall, False) == pytest.approx(math.log(5.0))  # the rate, not the blocks
    stopped = _entry(
        edit=lambda r: r["result"]["throughput"].update(steps_per_s=0.0, blocks=None),
    )
    assert agg.run_log(stopped, False) is None
    assert agg.run_blocks(_bare(), False) is None
    # per_sample without samples: no blocks to scale
    no_samples = _entry(edit=lambda r: r["result"]["throughput"].update(samples_per_s=None))
    assert agg.run_blocks(no_samples, True) is None
    assert agg.run_blocks(no_samples, False) is not None


def test_run_round_is_the_sweep_and_repeat():
    e = _entry(["repeat=2", "bucket=25"], sweep_dir="/s/one")
    assert agg.run_round(e) == ("/s/one", 2)
    no_sweep = _entry(["repeat=1"], output_dir="/s/two/3")
    assert agg.run_round(no_sweep) == ("/s/two", 1)
    assert agg.run_round(_entry(["bucket=25"])) is None
    assert agg.run_round(_entry(["repeat=x"])) is None


def test_run_drift_tests_the_step_series_else_the_blocks_time_per_step():
    from stats import steady_state

    rising = [0.1 * (1 + 0.05 * i) for i in range(20)]
    e = _entry(edit=_set(["result", "series", "step_time_s"], rising))
    assert agg.run_drift(e) == steady_state(rising)
    walls = [0.2 * (1 + 0.05 * i) for i in range(20)]
    blocks = _entry(
        edit=lambda r: (
            r["result"].update(series=None),
            r["result"]["throughput"].update(blocks={"walls_s": walls, "steps": [2] * 20}),
        )
    )
    assert agg.run_drift(blocks) == steady_state([w / 2 for w in walls])
    nothing = _entry(
        edit=lambda r: (
            r["result"].update(series=None),
            r["result"]["throughput"].update(blocks=None),
        )
    )
    assert agg.run_drift(nothing) is None


def test_phase_log_median_prefers_the_series_then_the_summary():
    e = _entry(edit=_set(["result", "series", "phases", "forward"], [0.1, 0.3, 0.2, 0.9]))
    assert agg._phase_log_median(e, "forward") == pytest.approx(math.log(0.25))
    no_series = _entry(steps_per_s=4.0, edit=_set(["result", "series"], None))
    assert agg._phase_log_median(no_series, "forward") == pytest.approx(math.log(0.25 * 0.25))
    no_phase = _entry(steps_per_s=4.0, edit=_set(["result", "series", "phases", "data"], None))
    assert agg._phase_log_median(no_phase, "data") == pytest.approx(math.log(0.25 * 0.05))
    assert agg._phase_log_median(no_series, "nonexistent") is None
    assert agg._phase_log_median(e, "nonexistent") is None  # a series without that phase
    zero = _entry(
        edit=lambda r: (
            r["result"].update(series=None),
            r["result"]["phases"]["forward"].update(median=0.0),
        )
    )
    assert agg._phase_log_median(zero, "forward") is None  # log(0): no log median
    assert agg._phase_log_median(_bare(), "forward") is None


def test_rel_ci_is_the_first_positive_setting_else_the_default():
    def runs(*values):
        return [_entry(edit=_set(["config", "measure"], {"rel_ci": v})) for v in values]

    assert agg._rel_ci(runs(0.05)) == 0.05
    assert agg._rel_ci(runs(0.5)) == 0.5
    assert agg._rel_ci(runs(0, 0.03)) == 0.03
    assert agg._rel_ci(runs(0)) == agg.REL_CI == 0.02
    assert agg._rel_ci([_entry()]) == 0.02


# ------------------------------------------------------------------------------------ row figures


def test_two_runs_step_is_the_geometric_mean_with_a_t1_interval():
    a, b = _entry(steps_per_s=10.0), _entry(steps_per_s=5.0)  # 0.1 s and 0.2 s
    step = agg._step(Config("x", [a, b]))
    logs = np.log([0.1, 0.2])
    half = _t95(1) * logs.std(ddof=1) / math.sqrt(2)
    assert step["median"] == pytest.approx(math.sqrt(0.1 * 0.2))  # not the plain median 0.15
    assert step["ci_lo"] == pytest.approx(math.exp(logs.mean() - half))
    assert step["ci_hi"] == pytest.approx(math.exp(logs.mean() + half))
    assert step["n_runs"] == 2 and "t" in step["method"]


def test_a_zero_step_median_gives_the_plain_median_and_no_interval():
    a = _entry(edit=_set(["result", "step_time_s", "median"], 0.0))
    b = _entry(steps_per_s=5.0)
    assert agg._step(Config("x", [a, b])) == {
        "median": pytest.approx(0.1),
        "ci_lo": None,
        "ci_hi": None,
        "n_runs": 2,
    }


def test_one_run_step_interval_is_its_batch_medians():
    series = [0.1 + 0.001 * ((7 * i) % 5) for i in range(30)]
    e = _entry(
        edit=lambda r: (
            r["result"]["series"].update(step_time_s=series),
            r["result"]["step_time_s"].update(median=float(np.median(series))),
        )
    )
    step = agg._step(Config("x", [e]))
    b = batch_median(series)
    assert b["ci_lo"] > 0
    assert step == {
        "median": pytest.approx(float(np.median(series))),
        "ci_lo": b["ci_lo"],
        "ci_hi": b["ci_hi"],
        "n_runs": 1,
        "method": b["method"],
    }
    no_series = _entry(edit=_set(["result", "series"], None))
    assert agg._step(Config("y", [no_series])) == {
        "median": pytest.approx(0.1),
        "ci_lo": None,
        "ci_hi": None,
        "n_runs": 1,
    }
    assert agg._step(Config("z", [_bare()])) is None


def test_one_run_step_interval_below_zero_is_the_log_one_mapped_back():
    series = [0.112, 0.174, 0.118, 0.156, 0.217, 0.143, 0.123, 0.150, 0.123, 0.083]
    e = _entry(
        edit=lambda r: (
            r["result"]["series"].update(step_time_s=series),
            r["result"]["step_time_s"].update(median=float(np.median(series))),
        )
    )
    step = agg._step(Config("x", [e]))
    assert batch_median(series)["ci_lo"] <= 0
    lg = batch_median(np.log(series))
    assert step["ci_lo"] == pytest.approx(math.exp(lg["ci_lo"]))
    assert step["ci_hi"] == pytest.approx(math.exp(lg["ci_hi"]))
    assert step["n_runs"] == 1
    # a zero step in the series: no log scale, the linear interval stays
    zeros = [0.0, *series[1:]]
    z = _entry(
        edit=lambda r: (
            r["result"]["series"].update(step_time_s=zeros),
            r["result"]["step_time_s"].update(median=float(np.median(zeros))),
        )
    )
    assert agg._step(Config("z", [z]))["ci_lo"] == batch_median(zeros)["ci_lo"]


def test_one_run_throughput_is_its_rate_with_the_batch_means_interval():
    walls = [0.1 * (1 + 0.02 * ((5 * i) % 7)) for i in range(60)]
    steps = [2] * 60
    e = _entry(
        batch_per_rank=3,
        edit=lambda r: r["result"]["throughput"].update(
            blocks={"walls_s": walls, "steps": steps},
            steps_per_s=120 / sum(walls),
            samples_per_s=6 * 120 / sum(walls),
        ),
    )
    tp = agg._throughput(Config("x", [e]))
    b = batch_rate(walls, steps)
    bs = batch_rate(walls, [6 * s for s in steps])
    assert tp["n_runs"] == 1 and tp["rounds"] == [None]
    assert tp["steps_per_s"] == pytest.approx(120 / sum(walls))
    assert (tp["steps_per_s_lo"], tp["steps_per_s_hi"]) == (b["ci_lo"], b["ci_hi"])
    assert tp["samples_per_s"] == pytest.approx(720 / sum(walls))
    assert (tp["samples_per_s_lo"], tp["samples_per_s_hi"]) == (
        pytest.approx(bs["ci_lo"]),
        pytest.approx(bs["ci_hi"]),
    )
    assert tp["samples_per_s_lo"] == pytest.approx(6 * b["ci_lo"])
    assert tp["serial"] == {"lag1": bs["lag1"], "n_eff": bs["n_eff"]}
    assert (
        tp["method"]
        == bs["method"] + " (one run: the noise inside it, not the spread between runs)"
    )
    assert tp["steps_per_s_logs"] == [pytest.approx(math.log(120 / sum(walls)))]
    assert tp["samples_per_s_logs"] == [pytest.approx(math.log(720 / sum(walls)))]
    assert "plan" not in tp


def test_one_run_without_blocks_has_no_interval_and_says_why():
    e = _entry(steps_per_s=4.0, edit=lambda r: r["result"]["throughput"].update(blocks=None))
    tp = agg._throughput(Config("x", [e]))
    assert (
        tp["steps_per_s"] == 4.0 and tp["steps_per_s_lo"] is None and tp["steps_per_s_hi"] is None
    )
    assert tp["serial"] is None
    assert tp["method"].startswith("no interval: a record without timed blocks (one run")


def test_a_run_without_a_step_rate_log_still_gives_the_samples_figures():
    e = _entry(
        edit=lambda r: r["result"]["throughput"].update(
            steps_per_s=0.0, samples_per_s=5.0, blocks=None
        )
    )
    tp = agg._throughput(Config("x", [e]))
    assert "steps_per_s" not in tp and tp["samples_per_s"] == 5.0
    assert tp["samples_per_s_logs"] == [pytest.approx(math.log(5.0))]


def test_repeats_throughput_is_the_geometric_mean_and_the_plan_gets_the_within_errors():
    rates = [10.0, 12.0]
    walls = [[0.1 * (1 + 0.03 * ((3 * i + k) % 5)) for i in range(12)] for k in range(2)]

    def edit(k):
        def f(r):
            r["config"]["measure"] = {"rel_ci": 0.05}
            r["result"]["throughput"].update(blocks={"walls_s": walls[k], "steps": [1] * 12})

        return f

    runs = [_entry(["repeat=%d" % k], rates[k], edit=edit(k), sweep_dir="/s") for k in range(2)]
    tp = agg._throughput(Config("x", runs))
    logs = [math.log(12 / sum(w)) for w in walls]
    half = _t95(1) * np.std(logs, ddof=1) / math.sqrt(2)
    assert tp["n_runs"] == 2 and tp["rounds"] == [("/s", 0), ("/s", 1)]
    assert tp["steps_per_s"] == pytest.approx(math.exp(np.mean(logs)))
    assert tp["steps_per_s_lo"] == pytest.approx(math.exp(np.mean(logs) - half))
    assert tp["steps_per_s_hi"] == pytest.approx(math.exp(np.mean(logs) + half))
    assert tp["steps_per_s_logs"] == pytest.approx(logs)
    assert tp["samples_per_s_logs"] == pytest.approx([v + math.log(8) for v in logs])
    within = [batch_rate(w, [1] * 12)["log_se"] for w in walls]
    plan = plan_repeats(logs, within, rel_ci=0.05)
    assert tp["plan"] == pytest.approx(plan) and tp["plan"]["within_sd"] is not None
    assert tp["plan"]["target"] == 0.05


# ------------------------------------------------------------------------------------- comparison


def test_per_sample_only_when_every_row_has_samples():
    a, b = Config("a", [_entry()]), Config("b", [_entry()])
    assert agg._per_sample([a, b]) is True
    c = Config("c", [_entry(edit=lambda r: r["result"]["throughput"].update(samples_per_s=None))])
    assert agg._per_sample([a, c]) is False


def test_rows_runs_need_a_step_rate_only():
    e = _entry(edit=lambda r: r["result"]["throughput"].update(samples_per_s=None))
    assert agg._rows_runs(Config("a", [e])) == [e]
    nan = _entry(edit=lambda r: r["result"]["throughput"].update(steps_per_s=float("nan")))
    assert agg._rows_runs(Config("b", [nan])) == []
    assert agg._throughput(Config("c", [e, nan]))["n_runs"] == 1  # the run without a rate: not one


def test_row_hands_the_family_the_chosen_logs_rounds_and_flags():
    runs = [_entry(["repeat=0"], sweep_dir="/s"), _entry(["repeat=1"], sweep_dir="/s")]
    c = Config(
        "lbl", runs, throughput={"samples_per_s_logs": [1.0, 2.0], "steps_per_s_logs": [3.0, 4.0]}
    )
    r = agg._row(c, True, {id(runs[1])})
    assert (r.label, r.logs, r.rounds, r.unsteady) == (
        "lbl",
        [1.0, 2.0],
        [("/s", 0), ("/s", 1)],
        [False, True],
    )
    assert agg._row(c, False, set()).logs == [3.0, 4.0]
    mixed = Config("m", [runs[0], _entry(["bucket=25"])], throughput=c.throughput)
    assert agg._row(mixed, False, set()).rounds is None


def _pair(per_sample_ok=True):
    """Two configurations, two rounds each; b runs twice the steps/s of a with half its batch, so
    samples/s are equal and steps/s differ 2x."""
    recs = []
    for r in range(2):
        for bucket, rate, batch in (("25", 10.0, 4), ("50", 20.0, 2)):
            recs.append(
                _rec(
                    [f"repeat={r}", f"bucket={bucket}"],
                    rate * (1 + 0.01 * r),
                    batch_per_rank=batch,
                    sweep_dir="/s",
                )
            )
        if not per_sample_ok:  # the second configuration's runs lose their samples/s
            recs[-1]["result"]["throughput"]["samples_per_s"] = None
    return [Entry.from_record(x) for x in recs]


def test_speedups_are_the_printed_rates_ratio_on_the_chosen_basis():
    cmp = agg.compare(_pair())
    assert cmp.per_sample is True and cmp.base == 0
    sp = cmp.configs[1].speedup
    a, b = cmp.configs[0].throughput, cmp.configs[1].throughput
    assert sp["basis"] == "samples/s"
    assert (
        sp["ratio"] == pytest.approx(b["samples_per_s"] / a["samples_per_s"]) == pytest.approx(1.0)
    )
    steps = agg.compare(_pair(per_sample_ok=False))
    assert steps.per_sample is False
    sp = steps.configs[1].speedup
    assert sp["basis"] == "steps/s" and sp["ratio"] == pytest.approx(2.0)


def test_the_noise_is_the_records_compare_noise():
    entries = _pair()
    for e in entries:
        e.record.config["compare"] = {"noise": 0.07}
    assert agg.compare(entries).noise == 0.07
    assert agg.compare(_pair(), noise=0.01).noise == 0.01


def test_the_baseline_needs_a_train_row_with_a_throughput():
    no_tp = Config("a", [_entry(bucket=None, edit=lambda r: r["result"].update(bucket_mb=None))])
    one = Config(
        "b", [_entry(bucket=None, edit=lambda r: r["result"].update(bucket_mb=None))], throughput={}
    )
    one.throughput = {"steps_per_s": 1.0}
    two = Config("c", [_entry(bucket=50)], throughput={"steps_per_s": 1.0})
    assert agg.choose_baseline([no_tp, one, two])[0] == 1
    assert agg.choose_baseline([no_tp, two]) == (None, "")
    b25 = Config("d", [_entry(bucket=25)], throughput={"steps_per_s": 1.0})
    i, why = agg.choose_baseline([two, b25])
    assert i == 1 and "bucket=25" in why
    i, why = agg.choose_baseline([two, Config("e", [_entry(bucket=75)], throughput={"x": 1})])
    assert i == 0 and why.startswith("first finished job")


def test_unsteady_lists_the_tested_runs_and_skips_runs_without_a_series():
    rising = [0.1 * (1 + 0.05 * i) for i in range(30)]
    drifting = _entry(edit=_set(["result", "series", "step_time_s"], rising))
    nothing = _entry(
        edit=lambda r: (
            r["result"].update(series=None),
            r["result"]["throughput"].update(blocks=None),
        )
    )
    found, flagged = agg._unsteady([Config("a", [drifting]), Config("b", [nothing])])
    assert found["tested_runs"] == [id(drifting)]
    assert flagged == {id(drifting)}


def test_group_repeats_merges_only_the_repeat_override():
    a0 = _entry(["repeat=0", "bucket=25"])
    a1 = _entry(["repeat=1", "bucket=25"])
    b0 = _entry(["repeat=0", "bucket=50"])
    groups = agg.group_repeats([a0, b0, a1])
    assert [g for _, g in groups] == [[a0, a1], [b0]]
    x, y = Entry(num=0, overrides=[], status="failed"), Entry(num=1, overrides=[], status="failed")
    assert [g for _, g in agg.group_repeats([x, y])] == [[x], [y]]


def test_config_median_and_first():
    ok = [_entry(steps_per_s=v) for v in (10.0, 4.0, 5.0)]
    c = Config("a", [_bare(), *ok])
    assert c.first is ok[0] and c.ok == ok and c.nums == [0, None, None, None]
    assert c.median(agg.step_median) == pytest.approx(0.2)
    assert Config("b", [_bare()]).median(agg.step_median) is None
    assert Config("b", [_bare()]).first.status == "failed"


# ---------------------------------------------------------------------------------------- scaling


def test_scaling_efficiency_is_the_speedup_times_n0_over_n():
    recs = []
    for r in range(3):
        recs.append(
            _rec(
                [f"repeat={r}", "world_size=1"], 10.0 * (1 + 0.01 * r), world_size=1, sweep_dir="/s"
            )
        )
        recs.append(
            _rec(
                [f"repeat={r}", "world_size=2"], 8.0 * (1 + 0.01 * r), world_size=2, sweep_dir="/s"
            )
        )
    rows = agg.scaling_rows([Entry.from_record(x) for x in recs])
    base, two = rows
    assert base["baseline"] and base["speed-up"] == 1.0 and base["scaling efficiency"] == 1.0
    assert base["world size"] == 1 and two["world size"] == 2 and two["runs"] == 3
    # samples/s: 4 per rank, so 8 x 8 against 10 x 4 = 1.6x, efficiency 0.8
    assert two["speed-up"] == pytest.approx(1.6)
    assert two["scaling efficiency"] == pytest.approx(0.8)
    assert two["scaling efficiency lo"] == pytest.approx(two["speed-up lo"] / 2)
    assert two["scaling efficiency hi"] == pytest.approx(two["speed-up hi"] / 2)
    assert two["samples/s"] == pytest.approx(64.0 * math.exp(np.mean(np.log([1, 1.01, 1.02]))))
    assert two["exposed comm ms"] == pytest.approx(4.0)
    assert two["sync"] == "ddp" and two["verdict"] == two["speedup"]["verdict"]


def test_the_plans_within_errors_come_from_the_step_blocks_even_without_samples():
    walls = [[0.1 * (1 + 0.03 * ((3 * i + k) % 5)) for i in range(12)] for k in range(2)]

    def edit(k):
        def f(r):
            r["result"]["throughput"].update(
                samples_per_s=None, blocks={"walls_s": walls[k], "steps": [1] * 12}
            )

        return f

    runs = [_entry([f"repeat={k}"], 10.0, edit=edit(k), sweep_dir="/s") for k in range(2)]
    tp = agg._throughput(Config("x", runs))
    assert "samples_per_s" not in tp
    want = np.sqrt(np.mean([batch_rate(w, [1] * 12)["log_se"] ** 2 for w in walls]))
    assert tp["plan"]["within_sd"] == pytest.approx(want)


def test_a_single_runs_speedup_is_the_ratio_of_the_printed_rates_not_of_the_block_logs():
    """One run a side: the row prints the record's rate while its log comes from the blocks; the
    speed-up is the printed figures' ratio (the record's rates here differ from their blocks')."""

    def run(overrides, rate):
        return _entry(
            overrides,
            edit=lambda r: r["result"]["throughput"].update(
                steps_per_s=rate,
                samples_per_s=8 * rate,
                blocks={"walls_s": [0.1] * 6, "steps": [1] * 6},
            ),
        )

    cmp = agg.compare([run(["bucket=25"], 10.0), run(["bucket=50"], 13.0)])
    assert cmp.configs[1].speedup["ratio"] == pytest.approx(1.3)  # the blocks say 1.0


def test_speedups_use_the_noise_the_floor_and_one_basis_on_both_sides():
    cmp = agg.compare(_pair())
    pairs = [(cmp.configs[0], cmp.configs[1])]
    same = agg._speedups(pairs, 0.02, True, set())[0]
    assert same["ci_lo"] < 1.0 < same["ci_hi"] and same["ci_hi"] < 1.05  # samples/s: equal
    steps = agg._speedups(pairs, 0.02, False, set())[0]
    assert steps["ci_lo"] > 1.9 and steps["verdict"] == "faster"  # steps/s: 2x
    assert agg._speedups(pairs, 1.5, False, set())[0]["verdict"] == "equivalent"  # within +-150%
    floored = agg._speedups(pairs, 0.02, False, set(), floor=1.5)[0]
    assert floored["verdict"] != "faster"  # the sentinel's floor raises the bar past 2x


def test_repeats_without_blocks_plan_without_within_errors():
    runs = [
        _entry(
            [f"repeat={k}"], 10.0 + k, edit=lambda r: r["result"]["throughput"].update(blocks=None)
        )
        for k in range(2)
    ]
    tp = agg._throughput(Config("x", runs))
    assert tp["plan"]["within_sd"] is None and tp["plan"]["runs_sd"] is not None


def test_the_log_scale_step_interval_keeps_its_method():
    series = [0.112, 0.174, 0.118, 0.156, 0.217, 0.143, 0.123, 0.150, 0.123, 0.083]
    e = _entry(edit=_set(["result", "series", "step_time_s"], series))
    step = agg._step(Config("x", [e]))
    assert step["method"].startswith(batch_median(np.log(series))["method"])
    assert "log step times" in step["method"]  # the log interval's, not the linear one's
    assert "median" in step and set(step) == {"median", "ci_lo", "ci_hi", "n_runs", "method"}
