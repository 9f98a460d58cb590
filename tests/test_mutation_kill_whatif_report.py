"""whatif/report.py (issue 36: a module the mutation run covers): the what-if table's numbers on
hand-made predictions (milliseconds, the speed-ups' verdicts, each row over the first with its
interval over the paired draws taken by hand with numpy), one precision per part column, the
header's measured-against-model line, the warnings, and the timeline plot's geometry drawn on a
stand-in pyplot that records every call (no figure is rendered: the command's test draws a real
one)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType
from types import SimpleNamespace as NS

import numpy as np
import pytest

from whatif import report as rp
from whatif.quantity import Quantity
from whatif.step import NOT_MODELLED, Prediction


def _pred(label, step_s, lo, hi, sps, sps_lo, sps_hi, speedup=None, s_lo=None, s_hi=None, **kw):
    return Prediction(
        config=None,
        label=label,
        step_s=step_s,
        lo=lo,
        hi=hi,
        samples_per_s=sps,
        sps_lo=sps_lo,
        sps_hi=sps_hi,
        speedup=speedup,
        speedup_lo=s_lo,
        speedup_hi=s_hi,
        dominant=kw.get("dominant", "compute"),
        parts=kw.get("parts", {"compute_s": 0.05, "exposed_comm_s": 0.02, "compression_s": 0.0}),
        buckets=kw.get("buckets", []),
        timeline=kw.get("timeline"),
        notes=kw.get("notes", []),
        sps_model=kw.get("sps_model"),
    )


# the first row's model draws, and each other row's as a multiple of them: the ratio's percentiles
# are read off an evenly spaced grid by hand (numpy's linear interpolation: the 2.5th of 401 points
# from a to b is a + 0.025 (b - a))
BASE = np.full(401, 50.0)


def _sweep(rows):
    return NS(rows=rows)


def _three():
    own = _pred(
        "(the run's own config)",
        0.1,
        0.09,
        0.12,
        640.0,
        600.0,
        700.0,
        1.0,
        0.99,
        1.01,
        parts={"compute_s": 0.0123, "exposed_comm_s": 0.1234, "compression_s": 0.0},
        buckets=[1, 2, 3],
        sps_model=BASE,
    )
    big = _pred(
        "bucket=100",
        0.08,
        0.075,
        0.085,
        800.0,
        780.0,
        820.0,
        1.25,
        1.2,
        1.3,
        dominant="exposed comm",
        parts={"compute_s": 0.002, "exposed_comm_s": 0.5, "compression_s": 0.001},
        sps_model=BASE * np.linspace(1.1, 1.9, 401),
    )
    none = _pred(
        "optim=bf16",
        0.2,
        0.19,
        0.21,
        320.0,
        300.0,
        340.0,
        None,
        None,
        None,
        parts={"compute_s": 0.003, "exposed_comm_s": 0.004, "compression_s": 0.005},
        buckets=None,
        sps_model=BASE * np.linspace(0.3, 0.7, 401),
    )
    return [own, big, none]


# -------------------------------------------------------------------------------------------- table
def test_the_table_rows_are_the_predictions_in_milliseconds_with_their_verdicts():
    """Seconds become ms (x 1000), samples/s pass as they are, a speed-up whose interval clears
    1 + noise is faster and one inside the +-noise band equivalent, a row without a speed-up has
    no verdict, and a row without buckets says so (None, not 0)."""
    t = rp.table(_sweep(_three()), noise=0.05)
    own, big, none = t.rows
    assert own["configuration"] == "(the run's own config)"
    assert (own["step ms"], own["step lo"], own["step hi"]) == pytest.approx((100.0, 90.0, 120.0))
    assert (own["samples/s"], own["samples/s lo"], own["samples/s hi"]) == (640.0, 600.0, 700.0)
    assert (own["speed-up"], own["speed-up lo"], own["speed-up hi"]) == (1.0, 0.99, 1.01)
    assert own["verdict"] == "equivalent" and big["verdict"] == "faster" and none["verdict"] is None
    assert own["compute ms"] == pytest.approx(12.3) and own["exposed comm ms"] == pytest.approx(
        123.4
    )
    assert big["compression ms"] == pytest.approx(1.0) and none["compression ms"] == pytest.approx(
        5.0
    )
    assert own["buckets"] == 3 and big["buckets"] is None and none["buckets"] is None
    assert big["dominant"] == "exposed comm" and own["dominant"] == "compute"
    assert (big["step ms"], big["step lo"], big["step hi"]) == pytest.approx((80.0, 75.0, 85.0))


def test_each_row_over_the_first_takes_its_interval_from_the_paired_draws():
    """'vs row 1': the point is the rows' samples/s ratio (800 / 640 = 1.25); its interval the
    2.5th-97.5th percentiles of the draws' ratio (1.1 + 0.025 x 0.8, 1.9 - 0.025 x 0.8 for a
    ratio spread evenly over [1.1, 1.9]; 0.31, 0.69 over [0.3, 0.7]), judged by the same rule; the
    first row is the reference."""
    t = rp.table(_sweep(_three()), noise=0.05)
    own, big, none = t.rows
    assert big["vs row 1"] == pytest.approx(1.25)
    assert (big["vs row 1 lo"], big["vs row 1 hi"]) == pytest.approx((1.12, 1.88))
    assert big["vs row 1 verdict"] == "faster"
    assert none["vs row 1"] == pytest.approx(0.5)
    assert (none["vs row 1 lo"], none["vs row 1 hi"]) == pytest.approx((0.31, 0.69))
    assert none["vs row 1 verdict"] == "slower"
    assert own["vs row 1"] == 1.0 and (own["vs row 1 lo"], own["vs row 1 hi"]) == (1.0, 1.0)
    assert own["vs row 1 verdict"] == "equivalent"
    assert t.text(own, "vs row 1") == "(the reference)"
    assert t.text(big, "vs row 1") == "1.25x [1.12, 1.88]"
    assert t.text(none, "vs row 1") == "0.50x [0.31, 0.69]"


def test_the_cells_show_values_with_intervals_and_verdict_words():
    t = rp.table(_sweep(_three()), noise=0.05)
    own, big, none = t.rows
    assert t.text(own, "step ms") == "100 [90, 120]"
    assert t.text(big, "step ms") == "80 [75, 85]"
    assert t.text(own, "samples/s") == "640 [600, 700]"
    assert t.text(big, "samples/s") == "800 [780, 820]"
    assert t.text(big, "speed-up") == "1.25x [1.20, 1.30]"
    assert t.text(own, "speed-up") == "~1 (0.990-1.010, equiv.)"
    assert t.text(none, "speed-up") == "-"
    # one precision per column: the largest exposed comm, 500 ms, gives 1 decimal to every row
    assert [t.text(r, "exposed comm ms") for r in t.rows] == ["123.4", "500.0", "4.0"]
    assert [t.text(r, "compute ms") for r in t.rows] == ["12.30", "2.00", "3.00"]
    assert [t.text(r, "compression ms") for r in t.rows] == ["0.000", "1.000", "5.000"]


def test_the_columns_and_notes_of_a_swept_table():
    """Four 'vs row 1' columns right after the verdict (three of them CSV only), and a note on
    them naming the first row without its parentheses, third among the notes."""
    t = rp.table(_sweep(_three()), noise=0.05)
    vs = ["vs row 1", "vs row 1 lo", "vs row 1 hi", "vs row 1 verdict"]
    at = rp.COLUMNS.index("verdict") + 1
    assert t.columns == rp.COLUMNS[:at] + vs + rp.COLUMNS[at:]
    assert set(t.csv_only) == {
        "step lo",
        "step hi",
        "samples/s lo",
        "samples/s hi",
        "speed-up lo",
        "speed-up hi",
        "verdict",
        "vs row 1 lo",
        "vs row 1 hi",
        "vs row 1 verdict",
    }
    assert t.title == "What-if: predicted step"
    assert len(t.notes) == 5
    assert t.notes[2].startswith(
        "vs row 1: each row's predicted samples/s over the first row's (the run's own config),"
    )
    assert t.notes[2].endswith("[95% interval over paired draws]; the same verdict rule")
    assert "the change exceeds 5%" in t.notes[1] and t.notes[1].startswith("speed-up: predicted")
    assert t.notes[0].startswith("step ms, samples/s: the model at the inputs' point values")
    assert t.notes[3].startswith("dominant: the largest of compute")
    assert t.notes[4] == "not modelled: " + "; ".join(NOT_MODELLED)
    shown = t.markdown().splitlines()[0]
    assert "vs row 1 |" in shown and "vs row 1 lo" not in shown and "step lo" not in shown


def test_one_prediction_has_no_row_to_compare_with():
    """A single row: no 'vs row 1' columns or note, the table's columns as listed."""
    own = _three()[0]
    t = rp.table(_sweep([own]), noise=0.05)
    assert t.columns == rp.COLUMNS and "vs row 1" not in t.rows[0]
    assert len(t.notes) == 4 and not any(n.startswith("vs row 1") for n in t.notes)


def test_two_predictions_compare_the_second_with_the_first():
    rows = _three()[:2]
    t = rp.table(_sweep(rows), noise=0.05)
    assert t.rows[1]["vs row 1"] == pytest.approx(1.25) and "vs row 1" in t.columns


def test_the_default_noise_is_two_percent():
    """A 3-5% gain is faster at the default 2% band (not at 5%), for the speed-up and for 'vs row
    1' alike; the note says 2%."""
    own = _pred("(own)", 0.1, 0.09, 0.11, 100.0, 90.0, 110.0, 1.0, 0.995, 1.005, sps_model=BASE)
    gain = _pred(
        "bucket=100",
        0.1,
        0.09,
        0.11,
        104.0,
        94.0,
        114.0,
        1.04,
        1.03,
        1.05,
        sps_model=BASE * np.linspace(1.03 - 0.025 * 0.02 / 0.95, 1.05 + 0.025 * 0.02 / 0.95, 401),
    )
    t = rp.table(_sweep([own, gain]))
    assert t.rows[1]["verdict"] == "faster" and t.rows[1]["vs row 1 verdict"] == "faster"
    assert (t.rows[1]["vs row 1 lo"], t.rows[1]["vs row 1 hi"]) == pytest.approx((1.03, 1.05))
    assert "exceeds 2%" in t.notes[1]
    t5 = rp.table(_sweep([own, gain]), noise=0.05)
    assert t5.rows[1]["verdict"] != "faster" and t5.rows[1]["vs row 1 verdict"] != "faster"


@pytest.mark.parametrize(
    "top, decimals",
    [
        (1000.0, 0),
        (-1000.0, 0),
        (999.9, 1),
        (100.0, 1),
        (99.99, 2),
        (10.0, 2),
        (9.999, 3),
        (1.0, 3),
        (0.9999, 4),
        (0.0, 4),
    ],
)
def test_a_part_column_takes_the_decimals_of_its_largest_magnitude(top, decimals):
    """The precision steps down at 1000, 100, 10 and 1 (as stats.fmt.rounded's), from the largest
    |value| of the column; every row printed to it; a missing value is '-'."""
    rows = [{"c": 0.5}, {"c": top}, {"c": None}, {}]
    show = rp._same_decimals(rows, "c")
    assert show(rows[0]) == f"{0.5:.{decimals}f}" and show(rows[1]) == f"{top:.{decimals}f}"
    assert show(rows[2]) == "-" and show(rows[3]) == "-"
    assert len(show({"c": 1.0}).partition(".")[2]) == decimals


def test_a_column_with_no_values_prints_dashes():
    show = rp._same_decimals([{"c": None}, {}], "c")
    assert show({"c": None}) == "-" and show({}) == "-"
    assert show({"c": 0.5}) == "0.5000"  # no largest value: the smallest numbers' 4 decimals


# ----------------------------------------------------------------------------------------- warnings
def _prof(how="calibrated 1.10; c1 stopped at its bound ; fine; c3 could not be calibrated", **kw):
    base = dict(
        path="runs/x/0",
        model="vgg11",
        sync="ddp",
        optim="none",
        bucket_cap=None,
        world_size=2,
        accumulate=1,
        backend="gloo",
        device="cpu",
        batch_per_rank=32,
        record=NS(result=NS(device_name=None)),
        step=Quantity(0.2, 0.1995, 0.2005),
        link=None,
        backward=Quantity(0.05, 0.0495, 0.0505, "probe"),
        params=NS(how="autograd's order"),
        contention=NS(how=how),
        notes=["CPU contention: 2 ranks", "FLOPs not measured", "another"],
    )
    base.update(kw)
    return NS(**base)


def test_warnings_name_each_contention_clause_at_its_bound_or_uncalibrated():
    """Every clause after the first that stopped at its bound or could not be calibrated is a
    warning (stripped); the first clause (the factor itself) never is; a model inside the measured
    step's interval adds nothing."""
    sw = NS(profile=_prof(), own=NS(step_s=0.2, lo=0.19, hi=0.21))
    assert rp.warnings(sw) == [
        "warning: the contention calibration: c1 stopped at its bound; every row below rests on it",
        "warning: the contention calibration: c3 could not be calibrated; every row below rests "
        "on it",
    ]
    first = _prof(how="c0 stopped at its bound; fine")
    assert rp.warnings(NS(profile=first, own=NS(step_s=0.2, lo=0.19, hi=0.21))) == []


@pytest.mark.parametrize(
    "lo, hi, misses",
    [(0.2, 0.3, False), (0.1, 0.2, False), (0.2001, 0.3, True), (0.1, 0.1999, True)],
)
def test_a_model_that_misses_the_measured_step_is_warned_of(lo, hi, misses):
    """The measured step (0.2 s) outside the model's interval for the run's own configuration (ends
    included as inside) adds the warning; a record without a measured step none."""
    sw = NS(profile=_prof(how="only"), own=NS(step_s=0.25, lo=lo, hi=hi))
    got = rp.warnings(sw)
    assert len(got) == int(misses)
    assert all(
        w.startswith("warning: the model's step for the run's own configuration misses")
        for w in got
    )
    assert rp.warnings(NS(profile=_prof(how="only", step=None), own=sw.own)) == []


# ------------------------------------------------------------------------------------------- header
def test_the_header_states_the_run_and_the_models_error_on_it():
    """(0.22 - 0.2) / 0.2 = +10.0%, outside [0.2195, 0.2205]; the steps in ms to their 1 ms wide
    intervals' one decimal; the contention line without the clauses the warnings carry; the
    assumptions without the CPU-contention note (the contention line says it)."""
    prof = _prof()
    sw = NS(profile=prof, own=NS(step_s=0.22, lo=0.2195, hi=0.2205), link=None)
    lines = rp.header(sw)
    assert lines[0] == "what-if from runs/x/0"
    assert lines[1] == (
        "  the run: model=vgg11 sync=ddp optim=none bucket=default world_size=2 accumulate=1 "
        "backend=gloo device=cpu batch/rank=32"
    )
    assert lines[2] == (
        "  measured step 200.0 [199.5, 200.5] ms; the model for the same configuration "
        "220.0 [219.5, 220.5] ms (+10.0%, OUTSIDE its interval)"
    )
    assert (
        lines[3] == "  backward alone: 50.0 [49.5, 50.5] ms (probe); ready times: autograd's order"
    )
    assert lines[4] == "  contention: calibrated 1.10; fine (see the warning above the table)"
    assert lines[5:] == [
        "  assumptions (this record):",
        "    - FLOPs not measured",
        "    - another",
    ]


@pytest.mark.parametrize(
    "lo, hi, word", [(0.2, 0.25, "inside"), (0.15, 0.2, "inside"), (0.21, 0.25, "OUTSIDE")]
)
def test_the_header_says_whether_the_models_interval_holds_the_measured_step(lo, hi, word):
    sw = NS(profile=_prof(), own=NS(step_s=0.19, lo=lo, hi=hi), link=None)
    assert rp.header(sw)[2].endswith(f"(-5.0%, {word} its interval)")


def test_the_header_of_a_run_with_buckets_a_device_name_a_link_and_no_measured_step():
    """A bucket cap printed as a number (%g), the device's own name over its kind, the sweep's
    link over the record's with its non-empty notes indented, a contention text with nothing to
    warn of as it is, no assumptions line without notes."""
    link = NS(describe=lambda: "10 Gbit/s preset", notes=["from a datasheet", "", "alpha guessed"])
    prof = _prof(
        bucket_cap=2.5,
        record=NS(result=NS(device_name="NVIDIA H100")),
        step=None,
        link=NS(describe=lambda: "the record's", notes=[]),
        contention=NS(how="calibrated 1.2; fine"),
        notes=["CPU contention: only"],
    )
    lines = rp.header(NS(profile=prof, own=NS(step_s=0.2, lo=0.1, hi=0.3), link=link))
    assert "bucket=2.5 " in lines[1] and "device=NVIDIA H100 " in lines[1]
    assert lines[2:5] == ["  link: 10 Gbit/s preset", "    from a datasheet", "    alpha guessed"]
    assert lines[-1] == "  contention: calibrated 1.2; fine"
    assert len(lines) == 7
    own_link = rp.header(
        NS(
            profile=_prof(bucket_cap=100.0, link=prof.link),
            own=NS(step_s=0.2, lo=0.1, hi=0.3),
            link=None,
        )
    )
    assert "bucket=100 " in own_link[1] and own_link[3] == "  link: the record's"
    unnamed = rp.header(NS(profile=_prof(path=""), own=NS(step_s=0.2, lo=0.1, hi=0.3), link=None))
    assert unnamed[0] == "what-if from the record"


def test_row_notes_are_every_rows_notes_once_in_order():
    rows = [NS(notes=["b", "a"]), NS(notes=[]), NS(notes=["a", "c", "b"])]
    assert rp.row_notes(NS(rows=rows)) == ["b", "a", "c"]


# ----------------------------------------------------------------------------------------- timeline
class _Recorder:
    """Stands in for a matplotlib object: every method call is kept as (name, args, kwargs)."""

    def __init__(self, log, name):
        self._log, self._name = log, name

    def __getattr__(self, attr):
        def call(*args, **kwargs):
            self._log.append((self._name, attr, args, kwargs))
            return None

        return call


@pytest.fixture
def plt(monkeypatch):
    log = []
    state = NS(log=log, axes=None, fig=_Recorder(log, "fig"))
    pyplot = ModuleType("matplotlib.pyplot")

    def subplots(n, m, **kw):
        log.append(("plt", "subplots", (n, m), kw))
        axes = np.empty((n, m), dtype=object)
        for i in range(n):
            axes[i, 0] = _Recorder(log, f"ax{i}")
        state.axes = axes
        return state.fig, axes

    pyplot.subplots = subplots
    pyplot.Rectangle = lambda xy, w, h, color: ("patch", xy, w, h, color)
    pyplot.close = lambda fig: log.append(("plt", "close", (fig,), {}))
    mpl = ModuleType("matplotlib")
    mpl.use = lambda backend: log.append(("mpl", "use", (backend,), {}))
    mpl.pyplot = pyplot
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    return state


def _calls(log, who, what):
    return [(a, k) for w, name, a, k in log if w == who and name == what]


def _timeline_preds():
    tl = {
        "step_s": 0.1,
        "compute": [
            (0.0, 0.01, "forward"),
            (0.01, 0.03, "backward"),
            (0.03, 0.035, "comm hook"),
            (0.035, 0.04, "DDP copy back"),
            (0.04, 0.05, "optimizer"),
            (0.05, 0.06, "mystery"),
        ],
        "comm": [
            (0.02, 0.024, "b0", 0),  # exactly 4% of the longest step (0.1 s): no label
            (0.024, 0.03, "b1", 1),
            (0.03, 0.031, "b6", 6),
        ],
    }
    short = {"step_s": 0.05, "compute": [(0.0, 0.05, "forward + backward")], "comm": []}
    a = _pred("x" * 100, 0.1, 0.09, 0.12, 1.0, 1.0, 1.0, timeline=tl)
    b = _pred("y" * 101, 0.05, 0.04, 0.06, 1.0, 1.0, 1.0, timeline=short)
    no = _pred("none", 0.07, 0.06, 0.08, 1.0, 1.0, 1.0, timeline=None)
    return [a, no, b]


def test_no_timeline_draws_nothing(plt):
    assert rp.plot_timeline([_pred("none", 1, 1, 1, 1, 1, 1)], "x.png") is None
    assert plt.log == []


def test_the_timeline_draws_compute_and_each_buckets_all_reduce_in_ms(plt, tmp_path):
    """One panel per prediction with a timeline (2 of 3); compute bars on lane 1, all-reduces on
    lane 0, from and for (b - a) x 1000 ms; bucket k's colour is the (k mod 6)th (bucket 6 takes
    bucket 0's), none of them compute's; a label b<k> only on an all-reduce longer than 4% of the
    longest step; the x axis to 102% of it."""
    out = rp.plot_timeline(_timeline_preds(), str(tmp_path / "t.png"), title="T")
    assert out == tmp_path / "t.png" and isinstance(out, Path)
    log = plt.log
    assert ("mpl", "use", ("Agg",), {}) in log
    [(args, kw)] = _calls(log, "plt", "subplots")
    assert args == (2, 1) and kw["squeeze"] is False
    assert kw["figsize"] == pytest.approx((11, 1.9 * 2 + 0.6))
    bars = _calls(log, "ax0", "barh")
    compute = [(a, k) for a, k in bars if a[0] == 1]
    comm = [(a, k) for a, k in bars if a[0] == 0]
    assert len(compute) == 6 and len(comm) == 3
    assert [a[1] for a, _ in compute] == pytest.approx([10, 20, 5, 5, 10, 10])
    assert [k["left"] for _, k in compute] == pytest.approx([0, 10, 30, 35, 40, 50])
    assert [a[1] for a, _ in comm] == pytest.approx([4, 6, 1])
    assert [k["left"] for _, k in comm] == pytest.approx([20, 24, 30])
    for _, k in bars:
        assert k["height"] == 0.6 and k["edgecolor"] == "white" and k["linewidth"] == 0.3
        assert re.fullmatch("#[0-9a-f]{6}", k["color"])
    lane = [k["color"] for _, k in comm]
    assert lane[0] == lane[2] != lane[1]  # bucket 6 wraps to bucket 0's colour
    colours = [k["color"] for _, k in compute]
    assert len(set(colours[:5])) == 5 and colours[5] == "#7f7f7f"  # an unknown phase: grey
    assert not set(lane) & set(colours[:5])
    [(targs, tkw)] = _calls(log, "ax0", "text")
    assert targs[2] == "b1" and targs[:2] == pytest.approx((27.0, 0))
    assert tkw == {"ha": "center", "va": "center", "fontsize": 7}
    for ax in ("ax0", "ax1"):
        [(xl, _)] = _calls(log, ax, "set_xlim")
        assert xl[0] == 0 and xl[1] == pytest.approx(100 * 1.02)
        assert _calls(log, ax, "set_yticks") == [(([0, 1], ["all-reduce", "compute"]), {})]
    [(t0, k0)] = _calls(log, "ax0", "set_title")
    [(t1, k1)] = _calls(log, "ax1", "set_title")
    assert t0 == ("x" * 100 + ": 100 ms [90, 120]",)  # 100 characters kept whole
    assert t1 == ("y" * 97 + "...: 50 ms [40, 60]",)  # 101: cut to 97 and an ellipsis
    assert k0 == k1 == {"fontsize": 8, "loc": "left"}
    assert _calls(log, "ax0", "set_xlabel") == []
    [(xlab, _)] = _calls(log, "ax1", "set_xlabel")
    assert xlab == ("ms from the step's start (one predicted step, inputs at their point values)",)
    b1 = _calls(log, "ax1", "barh")
    assert len(b1) == 1 and b1[0][1]["color"] == colours[1]  # forward + backward: backward's colour


def test_the_timeline_legend_matches_the_bars_and_the_figure_is_saved(plt, tmp_path):
    """The legend's five patches carry the colours the bars of those phases were drawn in; the
    title goes above the panels only when given; the figure is saved at 110 dpi and closed."""
    out = rp.plot_timeline(_timeline_preds(), tmp_path / "t.png", title="T")
    log = plt.log
    compute = [k["color"] for a, k in _calls(log, "ax0", "barh") if a[0] == 1]
    [(largs, lkw)] = _calls(log, "fig", "legend")
    handles, names = largs
    assert names == ["forward", "backward", "comm hook on compute", "DDP copy back", "optimizer"]
    assert [h[4] for h in handles] == compute[:5]
    assert all(h[1:4] == ((0, 0), 1, 1) for h in handles)  # unit squares: only the colour shows
    assert lkw == {"loc": "lower center", "fontsize": 7, "ncol": 5, "frameon": False}
    assert _calls(log, "fig", "suptitle") == [(("T",), {"fontsize": 9, "x": 0.01, "ha": "left"})]
    assert _calls(log, "fig", "tight_layout") == [((), {"rect": (0, 0.05, 1, 0.95)})]
    assert _calls(log, "fig", "savefig") == [((out,), {"dpi": 110})]
    assert _calls(log, "plt", "close") == [((plt.fig,), {})]
    plt.log.clear()
    rp.plot_timeline(_timeline_preds()[:1], tmp_path / "u.png")
    assert _calls(plt.log, "fig", "suptitle") == []
    [(_, kw)] = _calls(plt.log, "plt", "subplots")
    assert kw["figsize"] == pytest.approx((11, 1.9 + 0.6))


def test_every_phase_and_bucket_has_its_colour(plt, tmp_path):
    """Every phase the model draws has a colour of its own kind, never the grey an unknown phase
    gets: the copies one colour (DDP's copy back's), the micro-steps one, forward + backward
    backward's; buckets 0-5 six colours, bucket 6 bucket 0's again; every colour a lowercase hex."""
    phases = [
        "forward",
        "backward",
        "optimizer",
        "data + h2d",
        "DDP copy back",
        "comm hook",
        "no_sync micro-step",
        "forward + backward",
        "micro-step",
        "copy in",
        "copy out",
        "unknown",
    ]
    tl = {
        "step_s": 1.0,
        "compute": [(i * 0.01, (i + 1) * 0.01, ph) for i, ph in enumerate(phases)],
        "comm": [(k * 0.01, (k + 1) * 0.01, f"b{k}", k) for k in range(7)],
    }
    rp.plot_timeline([_pred("p", 1.0, 1.0, 1.0, 1, 1, 1, timeline=tl)], tmp_path / "c.png")
    bars = _calls(plt.log, "ax0", "barh")
    colour = {ph: k["color"] for ph, (a, k) in zip(phases, (b for b in bars if b[0][0] == 1))}
    lane = [k["color"] for a, k in bars if a[0] == 0]
    assert all(re.fullmatch("#[0-9a-f]{6}", c) for c in [*colour.values(), *lane])
    grey = colour.pop("unknown")
    assert grey not in colour.values()
    assert colour["copy in"] == colour["copy out"] == colour["DDP copy back"]
    assert colour["micro-step"] == colour["no_sync micro-step"]
    assert colour["forward + backward"] == colour["backward"]
    kinds = {colour[p] for p in ("forward", "backward", "optimizer", "data + h2d", "comm hook")}
    assert len(kinds | {colour["copy in"], colour["micro-step"]}) == 7
    assert len(set(lane[:6])) == 6 and lane[6] == lane[0]


def test_the_tables_notes_in_full():
    """The notes under the table, word for word (noise 3%; the first row's label in the 'vs row 1'
    note without its parentheses only: a label ending in X keeps it)."""
    own = _pred("link=X", 0.1, 0.09, 0.11, 100.0, 90.0, 110.0, sps_model=BASE)
    other = _pred("bucket=100", 0.1, 0.09, 0.11, 100.0, 90.0, 110.0, sps_model=BASE)
    t = rp.table(_sweep([own, other]), noise=0.03)
    assert t.notes[:4] == [
        "step ms, samples/s: the model at the inputs' point values [95% prediction interval: "
        "Monte Carlo over the inputs' intervals, plus a new run's own scatter of its step median]",
        "speed-up: predicted samples/s over the prediction for the run's own configuration [95% "
        "interval of the typical speed-up: the inputs' uncertainty over paired draws, without "
        "single runs' scatter]; faster/slower only when the interval excludes 1 and the change "
        "exceeds 3%",
        "vs row 1: each row's predicted samples/s over the first row's (link=X), the swept values "
        "against each other [95% interval over paired draws]; the same verdict rule",
        "dominant: the largest of compute (data, forward, backward alone, DDP's copies, "
        "optimizer), exposed comm (the rest of the step: all-reduce not hidden behind backward, "
        "and compute slowed by it) and compression (bf16/fp16 casts, PowerSGD's matrix work)",
    ]


def test_the_missed_step_warning_in_full():
    sw = NS(profile=_prof(how="only"), own=NS(step_s=0.25, lo=0.24, hi=0.26))
    assert rp.warnings(sw) == [
        "warning: the model's step for the run's own configuration misses the measured step "
        "(outside its interval, above): read every row with that error"
    ]
