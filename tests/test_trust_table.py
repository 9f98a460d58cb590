"""Numbers a user can trust, without running anything: the sweep table's intervals, verdicts and their formatting,
repeats merged into one row, the noise sentinel, the interleaved job order, the new config checks."""
from __future__ import annotations

import numpy as np
import pytest

from tests.bad_input import refused

from core.config import prepare
from core.errors import ConfigError
from core.sweep import repeat_arguments
from results.aggregate import compare
from results.table import Entry, build_table
from stats import block_throughput
from tests.conftest import compose
from tests.records import train_record


def _record(overrides, step_s, num, *, steps=12, jitter=0.01, seed=0, forward=None, alternate=False):
    """A train record whose blocks (one step each) have the given median wall per step, +-jitter (random, or
    alternating - and + so the mean is exact), and whose summary figures are computed from those blocks the way
    the task computes them."""
    rng = np.random.default_rng(seed)
    walls = list(step_s * (1 + (np.resize([-jitter, jitter], steps) if alternate
                                else rng.uniform(-jitter, jitter, steps))))
    rec = train_record(overrides=overrides, steps_per_s=1 / step_s, num=num, steps=steps)
    tp = rec["result"]["throughput"]
    b = block_throughput(walls, [1] * steps)
    per = tp["samples_per_s"] / tp["steps_per_s"]
    tp.update(wall_s=sum(walls), steps_per_s=b["steps_per_s"], samples_per_s=b["steps_per_s"] * per,
              ci_lo=b["ci_lo"], ci_hi=b["ci_hi"], samples_ci_lo=b["ci_lo"] * per, samples_ci_hi=b["ci_hi"] * per,
              blocks={"walls_s": walls, "steps": [1] * steps})
    rec["result"]["series"]["step_time_s"] = walls
    if forward is not None:
        rec["result"]["series"]["phases"]["forward"] = list(forward * (1 + rng.uniform(-0.01, 0.01, steps)))
    return rec


def _entries(records):
    return [Entry.from_record(r) for r in records]


def test_single_runs_use_the_records_own_figures_and_a_significant_row_shows_its_interval():
    base = _record(["bucket=25"], 0.100, 0)
    fast = _record(["bucket=100"], 0.080, 1, seed=1)
    table = build_table(_entries([base, fast]))
    row = table.rows[1]
    tp = fast["result"]["throughput"]
    assert (row["steps/s"], row["steps/s lo"], row["steps/s hi"]) == (tp["steps_per_s"], tp["ci_lo"], tp["ci_hi"])
    assert row["speed-up"] == pytest.approx(tp["samples_per_s"] / base["result"]["throughput"]["samples_per_s"])
    assert row["speed-up lo"] < 1.25 < row["speed-up hi"] and row["speed-up lo"] > 1.2
    assert row["verdict"] == "faster"
    md = table.markdown()
    text = table.text(row, "speed-up")
    assert text.startswith("1.2") and "x [" in text and text in md
    # digits follow the interval: a ~4% wide interval gets 3 decimals (first uncertain digit), not 4 or 6
    assert len(text.split("x")[0].split(".")[1]) == 3
    assert "| 0 (baseline)" in md and table.text(table.rows[0], "speed-up") == "1"
    assert "95% CI" in table.notes[0] and "compare.noise=0.02" in table.notes[0]


def test_a_difference_inside_the_noise_floor_or_the_interval_is_never_a_bare_ratio():
    base = _record(["bucket=25"], 0.100, 0, jitter=0.002)
    same = _record(["bucket=100"], 0.099, 1, seed=1, jitter=0.002)     # 1% faster, significant, below 2% noise
    wide = _record(["bucket=200"], 0.095, 2, jitter=0.4, alternate=True)  # 5% faster, interval includes 1
    table = build_table(_entries([base, same, wide]))
    for row in table.rows[1:]:
        assert row["verdict"] == "no significant difference", row
        text = table.text(row, "speed-up")
        assert text.startswith("~1 (") and text.endswith("n.s.)"), text
        assert f"{row['speed-up']:.2f}x" not in table.markdown()
    assert table.rows[1]["speed-up lo"] > 1  # the interval alone would have said "faster": the floor decided
    strict = build_table(_entries([base, same]), noise=0.001)
    assert strict.rows[1]["verdict"] == "faster"


def test_a_run_without_timed_blocks_has_no_interval_and_says_so():
    base = train_record(overrides=["bucket=25"], steps_per_s=2.0, num=0)
    other = train_record(overrides=["bucket=100"], steps_per_s=3.0, num=1)
    for r in (base, other):
        del r["result"]["throughput"]["blocks"]  # an older record: one wall clock for the whole window
    table = build_table(_entries([base, other]))
    assert table.rows[1]["verdict"] == "no interval" and table.text(table.rows[1], "speed-up") == "no CI"
    assert table.rows[1]["steps/s lo"] is None and table.text(table.rows[1], "steps/s") == "3.000"


def test_repeats_of_a_configuration_are_one_row_whose_interval_holds_the_run_to_run_spread():
    records, num = [], 0
    for repeat, shift in enumerate((1.0, 1.08, 0.95)):  # the runs of one configuration differ by up to 13%
        for bucket, step in ((25, 0.100), (100, 0.050)):
            records.append(_record([f"repeat={repeat}", f"bucket={bucket}", "repeats=3"], step * shift, num,
                                   seed=num))
            num += 1
    table = build_table(_entries(records))
    assert [r["job"] for r in table.rows] == ["0,2,4", "1,3,5"] and [r["runs"] for r in table.rows] == [3, 3]
    assert [r["overrides"] for r in table.rows] == ["bucket=25", "bucket=100"]
    base = table.rows[0]
    rates = sorted(r["result"]["throughput"]["steps_per_s"] for r in records[::2])
    assert base["steps/s"] == pytest.approx(rates[1])  # the median over runs
    single = records[0]["result"]["throughput"]
    assert base["steps/s hi"] - base["steps/s lo"] > 3 * (single["ci_hi"] - single["ci_lo"])
    assert base["steps/s lo"] < rates[0] * 1.02 and base["steps/s hi"] > rates[2] * 0.98
    assert table.rows[1]["verdict"] == "faster" and table.rows[1]["speed-up lo"] < 2 < table.rows[1]["speed-up hi"]
    md = table.markdown()
    assert "| runs |" in md and "0,2,4 (baseline)" in md and "two-level bootstrap" in md


def test_noise_sentinel_warns_above_the_table_when_forward_moved_under_comm_knobs():
    base = _record(["bucket=25"], 0.100, 0, forward=0.030)
    moved = _record(["bucket=100"], 0.130, 1, seed=1, forward=0.045)  # DDP's bucket cannot change forward time
    table = build_table(_entries([base, moved]))
    warning = table.warnings[0]     # the sentinel first; the single-run flag follows it
    assert warning.startswith("forward time varied by 50% between rows whose knobs do not touch it")
    assert "differences below 50% are not attributable" in warning
    assert table.markdown().startswith("> **Warning**: forward time varied by 50%")
    quiet = build_table(_entries([_record(["bucket=25"], 0.1, 0, forward=0.03),
                                  _record(["bucket=100"], 0.1, 1, seed=1, forward=0.03)]))
    assert quiet.warnings == [] and any("agree across rows" in n for n in quiet.notes)


def test_noise_sentinel_stays_out_of_comparisons_that_change_the_forward_pass():
    a = _record(["model=vgg11_tiny"], 0.100, 0, forward=0.030)
    b = _record(["model=vit_tiny"], 0.130, 1, seed=1, forward=0.060)
    b["config"]["model"] = {"name": "vit_tiny"}
    a["config"]["model"] = {"name": "vgg11_tiny"}
    cmp = compare(_entries([a, b]))
    assert cmp.sentinel is None and "model.name" in cmp.sentinel_note


def test_unsteady_runs_are_flagged_in_the_table():
    base = _record(["bucket=25"], 0.1, 0)
    drift = _record(["bucket=100"], 0.1, 1, seed=1)
    drift["result"]["steady"] = False
    table = build_table(_entries([base, drift]))
    assert table.rows[1]["steady"] == "no" and any("not at steady state" in w for w in table.warnings)


def test_repeats_are_the_outermost_loop_so_configurations_interleave():
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    arguments = repeat_arguments(3, ["variant=a,b"]) + ["bucket=25,100"]
    jobs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), None)[0]
    assert [j[0] for j in jobs] == ["repeat=0"] * 4 + ["repeat=1"] * 4 + ["repeat=2"] * 4
    assert [tuple(j[1:]) for j in jobs[:4]] == [tuple(j[1:]) for j in jobs[4:8]]  # A B C D, A B C D, ...
    assert repeat_arguments(1, ["x=1,2"]) == ["x=1,2"]  # one repeat: jobs exactly as without the knob
    with pytest.raises(ConfigError, match="repeats=0"):
        repeat_arguments(0, [])
    with pytest.raises(ConfigError, match="set by the sweeper"):
        repeat_arguments(2, ["repeat=1"])


BAD = [
    (["repeats=0"], "repeats=0: must be >= 1"),
    (["measure.rel_ci=0"], "measure.rel_ci=0.0: must be > 0"),
    (["measure.rel_ci=1.5"], "must lie in (0, 1)"),
    (["measure.policy=adaptive", "steps=10", "measure.max_steps=5"],
     "measure.max_steps=5 < steps=10: with measure.policy=adaptive"),
    (["measure.policy=adaptive", "measure.max_steps=null", "measure.max_s=null"], "could measure forever"),
    (["measure.policy=sometimes"], "measure.policy='sometimes' is not known; choose one of: fixed, adaptive"),
    (["measure.block_steps=0"], "measure.block_steps=0"),
    (["compare.noise=-0.1"], "compare.noise=-0.1"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_measure_and_repeat_input_is_refused_before_any_rank(overrides, message):
    assert message in refused(["model=vgg11_tiny", "scale=smoke", *overrides])


def test_repeats_without_a_sweep_is_refused(tmp_path, capsys):
    from core.job import run_job

    with pytest.raises(SystemExit) as e:
        run_job(compose(["model=vgg11_tiny", "scale=smoke", "logger=none", "repeats=3"]),
                {"output_dir": str(tmp_path / "run"), "overrides": ["repeats=3"], "multirun": False})
    assert e.value.code == 2
    assert "add -m" in capsys.readouterr().err and not (tmp_path / "run").exists()   # one line, nothing on disk


def test_scaling_table_one_row_per_configuration_against_the_one_rank_baseline():
    """The committed VGG11 study's shape: one rank without DDP (3 repeats), and two configurations at 2 ranks."""
    from results.table import scaling_table

    records = []
    for repeat in range(3):
        for over, ws, step in ((["sync=local", "world_size=1"], 1, 0.100), (["sync=ddp"], 2, 0.200),
                               (["sync=per_param"], 2, 0.100)):
            r = _record([f"repeat={repeat}", *over], step * (1 + 0.01 * repeat), len(records), seed=repeat)
            r["result"]["world_size"] = ws
            r["config"]["world_size"] = ws
            r["result"]["sync"] = over[0].split("=")[1]
            records.append(r)
    t = scaling_table(_entries(records))
    assert [(r["configuration"], r["world size"], r["runs"]) for r in t.rows] == [
        ("sync=local", 1, 3), ("sync=ddp", 2, 3), ("sync=per_param", 2, 3)]
    ddp, pp = t.rows[1], t.rows[2]
    # samples/s per step doubles with the world size (train_record's batch x world size): ddp = same rate per rank
    assert ddp["scaling efficiency"] == pytest.approx(ddp["speed-up"] / 2)
    assert ddp["scaling efficiency lo"] < ddp["scaling efficiency"] < ddp["scaling efficiency hi"]
    assert pp["speed-up"] == pytest.approx(2 * ddp["speed-up"], rel=0.05)
    assert t.rows[0]["verdict"] == "baseline" and "sync=local" in " ".join(t.notes)
    assert t.warnings == []                                       # 3 runs each: no single-run warning
    one = scaling_table(_entries([r for r in records if "repeat=0" in r["overrides"]]))
    assert one.rows[1]["verdict"] in ("faster", "slower") and "one run per world size" in one.warnings[0]


def test_a_verdict_from_single_runs_is_flagged_above_the_table():
    base = _record(["bucket=25"], 0.100, 0)
    fast = _record(["bucket=100"], 0.080, 1, seed=1)
    table = build_table(_entries([base, fast]))
    assert table.rows[1]["verdict"] == "faster"
    assert any("one run per configuration behind `bucket=100`" in w for w in table.warnings)
    assert "Confirm with repeats=3" in table.markdown()
