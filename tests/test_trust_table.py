"""Numbers a user can trust, without running anything: the sweep table's intervals, verdicts and
their formatting, repeats merged into one row, the noise sentinel, the interleaved job order, the
new config checks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.bad_input import refused

from base.errors import ConfigError
from tables.sweep_order import repeat_arguments
from tables.aggregate import compare
from tables.table import Entry, build_table
from stats import block_throughput
from tests.conftest import compose
from tests.records import train_record


def _record(
    overrides, step_s, num, *, steps=12, jitter=0.01, seed=0, forward=None, alternate=False
):
    """A train record whose blocks (one step each) have the given median wall per step, +-jitter
    (random, or alternating - and + so the mean is exact), and whose summary figures are computed
    from those blocks the way the task computes them."""
    rng = np.random.default_rng(seed)
    walls = list(
        step_s
        * (
            1
            + (
                np.resize([-jitter, jitter], steps)
                if alternate
                else rng.uniform(-jitter, jitter, steps)
            )
        )
    )
    rec = train_record(overrides=overrides, steps_per_s=1 / step_s, num=num, steps=steps)
    tp = rec["result"]["throughput"]
    b = block_throughput(walls, [1] * steps)
    per = tp["samples_per_s"] / tp["steps_per_s"]
    tp.update(
        wall_s=sum(walls),
        steps_per_s=b["steps_per_s"],
        samples_per_s=b["steps_per_s"] * per,
        ci_lo=b["ci_lo"],
        ci_hi=b["ci_hi"],
        samples_ci_lo=b["ci_lo"] and b["ci_lo"] * per,
        samples_ci_hi=b["ci_hi"] and b["ci_hi"] * per,
        blocks={"walls_s": walls, "steps": [1] * steps},
    )
    rec["result"]["series"]["step_time_s"] = walls
    rec["result"]["series"]["phases"]["data"] = list(
        0.006 * (1 + rng.uniform(-0.01, 0.01, steps))
    )  # the same in
    if forward is not None:  # every row
        rec["result"]["series"]["phases"]["forward"] = list(
            forward * (1 + rng.uniform(-0.01, 0.01, steps))
        )
    return rec


def _entries(records):
    return [Entry.from_record(r) for r in records]


def _repeats(configs, runs=3, jitter=0.01, spread=(1.0, 1.01, 0.99), forward=None, steps=12):
    """records of `runs` rounds of every (overrides, step_s) in configs, one step per block, round r
    scaled by spread[r]; forward: {label: forward seconds} for the sentinel."""
    records = []
    for r in range(runs):
        for over, step in configs:
            fwd = (
                0.025 if forward is None else forward.get(over[0])
            )  # the same forward time: a quiet machine
            scale = (
                spread[r % len(spread)]
                if isinstance(spread[0], float)
                else spread[len(records) % len(configs)][r]
            )
            records.append(
                _record(
                    [f"repeat={r}", *over, f"repeats={runs}"],
                    step * scale,
                    len(records),
                    seed=len(records),
                    jitter=jitter,
                    forward=fwd,
                    steps=steps,
                )
            )
    return records


def test_single_runs_show_their_own_figures_and_no_verdict():
    """One run per side cannot see the spread between runs: 58% of simulated single-run verdicts on
    identical configurations with 4% run offsets were false (issue 22), so none is printed."""
    base = _record(["bucket=25"], 0.100, 0)
    fast = _record(["bucket=100"], 0.080, 1, seed=1)
    table = build_table(_entries([base, fast]))
    row = table.rows[1]
    tp = fast["result"]["throughput"]
    assert (row["steps/s"], row["steps/s lo"], row["steps/s hi"]) == (
        pytest.approx(tp["steps_per_s"]),
        tp["ci_lo"],
        tp["ci_hi"],
    )
    assert row["speed-up"] == pytest.approx(
        tp["samples_per_s"] / base["result"]["throughput"]["samples_per_s"]
    )
    assert row["verdict"] == "no verdict" and row["speed-up lo"] is None
    assert table.text(row, "speed-up") == "1.25 (1 run: no CI)"
    assert any("one run behind `bucket=100`" in w and "repeats=3" in w for w in table.warnings)
    assert "| 0 (baseline)" in table.markdown() and table.text(table.rows[0], "speed-up") == "1"


def test_repeats_give_a_verdict_with_the_interval_and_its_digits():
    table = build_table(
        _entries(_repeats([(["bucket=25"], 0.100), (["bucket=100"], 0.080)], jitter=0.002))
    )
    row = table.rows[1]
    assert (
        row["verdict"] == "faster"
        and row["speed-up lo"] < 1.25 < row["speed-up hi"]
        and row["speed-up lo"] > 1.2
    )
    text = table.text(row, "speed-up")
    assert text.startswith("1.2") and "x [" in text and text in table.markdown()
    assert (
        "95% CI" in table.notes[0]
        and "1 ± 0.02" in table.notes[0]
        and "Schuirmann" in table.notes[0]
    )
    assert any("Holm" in n for n in table.notes)


def test_a_difference_inside_the_noise_floor_is_equivalent_or_inconclusive_never_a_bare_ratio():
    tight = _repeats(
        [(["bucket=25"], 0.100), (["bucket=100"], 0.099)], jitter=0.002, spread=(1.0, 1.001, 0.999)
    )
    table = build_table(_entries(tight))
    row = table.rows[1]
    assert (
        row["speed-up lo"] > 1 and row["verdict"] == "equivalent"
    )  # significant, but inside +-2%: equivalent
    assert table.text(row, "verdict") == "equivalent within ±2%" and table.text(
        row, "speed-up"
    ).endswith("equiv.)")
    assert build_table(_entries(tight), noise=0.001).rows[1]["verdict"] == "faster"
    wide = _repeats(
        [(["bucket=25"], 0.100), (["bucket=200"], 0.095)],
        spread=((1.0, 1.0, 1.0), (1.0, 1.2, 0.85)),
    )  # spread: one tuple of round scales per configuration
    row = build_table(_entries(wide)).rows[1]
    assert row["verdict"] == "no significant difference" and "runs each would" in build_table(
        _entries(wide)
    ).text(row, "verdict")
    assert f"{row['speed-up']:.2f}x" not in build_table(_entries(wide)).markdown()


def test_runs_without_timed_blocks_use_their_rates():
    records = _repeats([(["bucket=25"], 0.5), (["bucket=100"], 0.34)])
    for r in records:
        del r["result"]["throughput"][
            "blocks"
        ]  # a hand-made record without timed blocks: its rate, no interval
    table = build_table(_entries(records))
    assert table.rows[1]["verdict"] == "faster" and table.rows[1]["steps/s lo"] is not None
    one = build_table(_entries([records[0], records[1]]))
    assert one.rows[1]["steps/s lo"] is None and one.rows[1]["verdict"] == "no verdict"


def test_repeats_of_a_configuration_are_one_row_whose_interval_holds_the_run_to_run_spread():
    records = _repeats([(["bucket=25"], 0.100), (["bucket=100"], 0.050)], spread=(1.0, 1.08, 0.95))
    table = build_table(_entries(records))
    assert [r["job"] for r in table.rows] == ["0,2,4", "1,3,5"] and [
        r["runs"] for r in table.rows
    ] == [3, 3]
    assert [r["overrides"] for r in table.rows] == ["bucket=25", "bucket=100"]
    base = table.rows[0]
    rates = [r["result"]["throughput"]["steps_per_s"] for r in records[::2]]
    assert base["steps/s"] == pytest.approx(
        np.exp(np.mean(np.log(rates)))
    )  # the geometric mean over runs
    single = records[0]["result"]["throughput"]
    assert (
        single["ci_lo"] is None
    )  # 12 blocks: a lone run's long-run rate has no interval (issue 39)
    assert (base["steps/s hi"] - base["steps/s lo"]) / base[
        "steps/s"
    ] > 3 * 0.02  # 3x the runs' own +-1% jitter
    assert base["steps/s lo"] < min(rates) and base["steps/s hi"] > max(rates)
    row = table.rows[1]  # paired by round: the 13% between rounds cancels
    assert (
        row["verdict"] == "faster"
        and row["speed-up lo"] < 2 < row["speed-up hi"]
        and row["speed-up lo"] > 1.9
    )
    md = table.markdown()
    assert (
        "| runs |" in md
        and "0,2,4 (baseline)" in md
        and "Kalibera & Jones" in md
        and "paired t" in md
    )


def test_noise_sentinel_warns_and_raises_the_floor_so_no_verdict_contradicts_it():
    fwd = {"bucket=25": 0.030, "bucket=100": 0.045, "bucket=50": 0.030}
    records = _repeats(
        [(["bucket=25"], 0.100), (["bucket=100"], 0.130), (["bucket=50"], 0.100)],
        jitter=0.002,
        spread=(1.0, 1.002, 0.998),
        forward=fwd,
    )
    table = build_table(_entries(records))
    warning = table.warnings[0]
    assert warning.startswith(
        "forward time, which the compared knobs do not change, differs between rows"
    )
    assert "`bucket=100` slowest" in warning and "instead of compare.noise" in warning
    floor = float(warning.split("judged against ±")[1].split("%")[0]) / 100
    slow = table.rows[1]
    assert slow["speedup"]["floor"] == pytest.approx(floor, abs=0.01) and floor > 0.2
    assert (
        slow["verdict"] != "slower" or slow["speed-up hi"] < 1 - floor
    )  # a verdict only beyond the machine's spread
    quiet = build_table(
        _entries(
            _repeats(
                [(["bucket=25"], 0.1), (["bucket=100"], 0.1)],
                forward={"bucket=25": 0.03, "bucket=100": 0.03},
            )
        )
    )
    assert not any("forward time" in w for w in quiet.warnings) and any(
        "agrees across rows" in n for n in quiet.notes
    )


def test_noise_sentinel_stays_out_of_comparisons_that_change_the_forward_pass():
    a = _record(["model=vgg11_tiny"], 0.100, 0, forward=0.030)
    b = _record(["model=vit_tiny"], 0.130, 1, seed=1, forward=0.060)
    b["config"]["model"] = {"name": "vit_tiny"}
    a["config"]["model"] = {"name": "vgg11_tiny"}
    cmp = compare(_entries([a, b]))
    assert cmp.sentinel is None and "model.name" in cmp.sentinel_note


def test_unsteady_runs_are_flagged_in_the_table_and_in_the_verdicts_resting_on_them():
    records = _repeats([(["bucket=25"], 0.1), (["bucket=100"], 0.05)], jitter=0.002, steps=20)
    drifting = records[3]  # round 1 of bucket=100: its window slows by 30% from start to end
    walls = list(np.array(drifting["result"]["series"]["step_time_s"]) * np.linspace(1.0, 1.3, 20))
    drifting["result"]["series"]["step_time_s"] = walls
    table = build_table(_entries(records))
    assert table.rows[1]["steady"] == "no (1/3)" and table.rows[0]["steady"] == "yes"
    assert any("not at steady state" in w and "Benjamini-Hochberg" in w for w in table.warnings)
    assert "rests on an unsteady run" in table.text(table.rows[1], "verdict")


def test_repeats_are_the_outermost_loop_so_configurations_interleave():
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    arguments = repeat_arguments(3, ["variant=a,b"]) + ["bucket=25,100"]
    jobs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), None)[
        0
    ]
    assert [j[0] for j in jobs] == ["repeat=0"] * 4 + ["repeat=1"] * 4 + ["repeat=2"] * 4
    assert [tuple(j[1:]) for j in jobs[:4]] == [
        tuple(j[1:]) for j in jobs[4:8]
    ]  # A B C D, A B C D, ...
    assert repeat_arguments(1, ["x=1,2"]) == [
        "x=1,2"
    ]  # one repeat: jobs exactly as without the knob
    with pytest.raises(ConfigError, match="repeats=0"):
        repeat_arguments(0, [])
    with pytest.raises(ConfigError, match="set by the sweeper"):
        repeat_arguments(2, ["repeat=1"])


def test_each_round_runs_in_a_seeded_random_order():
    from tables.sweep_order import round_order

    order = round_order(12, 3, seed=0)
    assert [sorted(order[i : i + 4]) for i in (0, 4, 8)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
    ]
    assert order == round_order(12, 3, seed=0) != round_order(12, 3, seed=1)
    assert any(
        order[i : i + 4] != sorted(order[i : i + 4]) for i in (0, 4, 8)
    )  # some round is not in declared order


BAD = [
    (["repeats=0"], "repeats=0: must be >= 1"),
    (["measure.rel_ci=0"], "measure.rel_ci=0.0: must be > 0"),
    (["measure.rel_ci=1.5"], "must lie in (0, 1)"),
    (
        ["measure.policy=adaptive", "steps=10", "measure.max_steps=5"],
        "measure.max_steps=5 < steps=10: with measure.policy=adaptive",
    ),
    (
        ["measure.policy=adaptive", "measure.max_steps=null", "measure.max_s=null"],
        "could measure forever",
    ),
    (
        ["measure.policy=sometimes"],
        "measure.policy='sometimes' is not known; choose one of: fixed, adaptive",
    ),
    (["measure.block_steps=0"], "measure.block_steps=0"),
    (["compare.noise=-0.1"], "compare.noise=-0.1"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_measure_and_repeat_input_is_refused_before_any_rank(overrides, message):
    assert message in refused(["model=vgg11_tiny", "scale=smoke", *overrides])


def test_repeats_without_a_sweep_is_refused(tmp_path, capsys):
    from job.run import run_job

    result = run_job(
        compose(["model=vgg11_tiny", "scale=smoke", "logger=none", "repeats=3"]),
        {"output_dir": str(tmp_path / "run"), "overrides": ["repeats=3"], "multirun": False},
    )
    assert result.exit_code == 2
    assert (
        "add -m" in capsys.readouterr().err and not (tmp_path / "run").exists()
    )  # one line, nothing on disk


def test_scaling_table_one_row_per_configuration_against_the_one_rank_baseline():
    """The committed VGG11 study's shape: one rank without DDP (3 repeats), and two configurations
    at 2 ranks."""
    from tables.table import scaling_table

    records = []
    for repeat in range(3):
        for over, ws, step in (
            (["sync=local", "world_size=1"], 1, 0.100),
            (["sync=ddp"], 2, 0.200),
            (["sync=per_param"], 2, 0.100),
        ):
            r = _record(
                [f"repeat={repeat}", *over], step * (1 + 0.01 * repeat), len(records), seed=repeat
            )
            r["result"]["world_size"] = ws
            r["config"]["world_size"] = ws
            r["result"]["sync"] = over[0].split("=")[1]
            records.append(r)
    t = scaling_table(_entries(records))
    assert [(r["configuration"], r["world size"], r["runs"]) for r in t.rows] == [
        ("sync=local", 1, 3),
        ("sync=ddp", 2, 3),
        ("sync=per_param", 2, 3),
    ]
    ddp, pp = t.rows[1], t.rows[2]
    # samples/s per step doubles with the world size (train_record's batch x world size): ddp = same
    # rate per rank
    assert ddp["scaling efficiency"] == pytest.approx(ddp["speed-up"] / 2)
    assert ddp["scaling efficiency lo"] < ddp["scaling efficiency"] < ddp["scaling efficiency hi"]
    assert pp["speed-up"] == pytest.approx(2 * ddp["speed-up"], rel=0.05)
    assert t.rows[0]["verdict"] == "baseline" and "sync=local" in " ".join(t.notes)
    assert t.warnings == []  # 3 runs each: no single-run warning
    one = scaling_table(_entries([r for r in records if "repeat=0" in r["overrides"]]))
    assert one.rows[1]["verdict"] == "no verdict" and "one run per world size" in one.warnings[0]


def test_a_single_runs_step_interval_never_reaches_below_zero():
    """10 steps give 2 batch medians and a t(1) interval; on the headline sweep's baseline (a loaded
    machine) it read 130 [-80, 340] ms. A step time is positive: the interval is then the log-scale
    one, mapped back."""
    from tables.aggregate import Config, _step

    series = [0.112, 0.174, 0.118, 0.156, 0.217, 0.143, 0.123, 0.150, 0.123, 0.083]
    rec = train_record(overrides=["bucket=25"], steps_per_s=7.0, steps=10)
    rec["result"]["step_time_s"]["median"] = float(np.median(series))
    rec["result"]["series"] = {"step_time_s": series}
    step = _step(Config("bucket=25", [Entry.from_record(rec)]))
    assert 0 < step["ci_lo"] < step["median"] < step["ci_hi"], step
    assert "log step times" in step["method"]
