"""whatif/validate.py (issue 36: a module the mutation run covers): the validation's numbers on
hand-made records and rows: each row's error and whether its interval holds the measurement, the
MAPE, the worst row, the coverage with its Wilson interval (against scipy's), the pooled run-to-run
sd worked out by hand, a record's knobs, workload and plainness, the source each group is predicted
from (the model stood in for: its prediction is given), the Markdown and JSON written, and the
command line's exit codes. The command on committed records is test_whatif's."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from scipy.stats import binomtest

import base.record as br
from base.record import Record
from base.record_types import Summary
from base.typed import RecordError
from whatif import validate as vd
from whatif.profile import ProfileError


def _ddp(cap=None, has=True, static=False, view=False):
    return NS(
        bucket_cap_mb=cap,
        has=lambda k: has and k == "bucket_cap_mb",
        static_graph=static,
        gradient_as_bucket_view=view,
    )


def _rec(
    median=0.1,
    *,
    world=2,
    sync="ddp",
    optim="none",
    bucket_mb=None,
    ddp="plain",
    accumulate=1,
    rank=None,
    link=None,
    hosts=("h0",),
    model="vgg11",
    batch=32,
    image=224,
    task="train",
    status="ok",
    ci=None,
):
    step = None if median is None else Summary.from_dict({"median": median, **(ci or {})})
    settings = {"model.name": model, "data.image_size": image, "optim.rank": rank}
    return NS(
        task=task,
        status=status,
        result=NS(
            world_size=world,
            sync=sync,
            optim=optim,
            bucket_mb=bucket_mb,
            accumulate=accumulate,
            ddp=_ddp() if ddp == "plain" else ddp,
            batch_per_rank=batch,
            precision="fp32",
            device="cpu",
            step_time_s=step,
        ),
        setting=settings.get,
        env=NS(link=link, hostnames=None if hosts is None else list(hosts)),
    )


def _link(rate=1e9, emulated=True, **kw):
    return NS(emulated=emulated, rate_bit_s=rate, **kw)


# ------------------------------------------------------------------------------------ rows, summary
def _row(
    measured,
    predicted,
    lo,
    hi,
    group="g",
    change="c",
    target="t",
    source="s",
    mlo=None,
    mhi=None,
    note="",
):
    return vd.Row(group, source, target, change, measured, mlo, mhi, predicted, lo, hi, note)


def test_a_rows_error_is_relative_to_the_measured_step():
    """(0.5625 - 0.5) / 0.5 = +12.5%; (0.4375 - 0.5) / 0.5 = -12.5% (exact in binary)."""
    assert _row(0.5, 0.5625, 0.5, 0.6).error == 0.125
    assert _row(0.5, 0.4375, 0.4, 0.45).error == -0.125


@pytest.mark.parametrize(
    "lo, hi, inside",
    [(0.4, 0.6, True), (0.5, 0.6, True), (0.4, 0.5, True), (0.51, 0.6, False), (0.4, 0.49, False)],
)
def test_a_row_is_inside_when_its_interval_holds_the_measurement_ends_included(lo, hi, inside):
    assert _row(0.5, 0.55, lo, hi).inside is inside


def test_mape_worst_and_coverage_of_three_rows():
    """|errors| 12.5%, 25%, 0%: MAPE 12.5%; the worst is the -25% row (by magnitude); 2 of 3
    inside, with the Wilson interval scipy gives for 2 of 3."""
    rows = [
        _row(0.5, 0.5625, 0.5, 0.6, target="a"),
        _row(0.5, 0.375, 0.3, 0.45, target="b"),
        _row(0.25, 0.25, 0.2, 0.3, target="c"),
    ]
    v = vd.Validation(rows=rows)
    assert v.mape == pytest.approx((0.125 + 0.25 + 0.0) / 3)
    assert v.worst.target == "b"
    ci = binomtest(2, 3).proportion_ci(confidence_level=0.95, method="wilson")
    assert v.coverage == pytest.approx((2 / 3, ci.low, ci.high))


def test_no_rows_no_summary():
    v = vd.Validation()
    assert v.mape is None and v.worst is None and v.coverage is None
    assert v.rows == [] and v.skipped == [] and v.run_to_run == []


@pytest.mark.parametrize(
    "k, n", [(0, 1), (1, 1), (2, 3), (9, 10), (17, 20), (5, 50), (0, 21), (16, 16)]
)
def test_wilson_interval_is_scipys(k, n):
    """The 95% Wilson score interval, as scipy.stats.binomtest gives it, kept inside [0, 1] (0 of
    21 and 16 of 16 land a rounding error outside it unclipped)."""
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    lo, hi = vd.wilson(k, n)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert 0.0 <= lo <= hi <= 1.0


def test_wilson_interval_at_another_z():
    """z = 1 (about a 68% interval): the score formula written out."""
    k, n, z = 3, 10, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert vd.wilson(k, n, z) == pytest.approx((centre - half, centre + half))


# -------------------------------------------------------------------------------------------- knobs
def test_knobs_of_a_plain_record():
    assert vd.knobs(_rec()) == {
        "world_size": 2,
        "sync": "ddp",
        "optim": "none",
        "bucket": "default",
        "accumulate": 1,
        "ddp.static_graph": "false",
        "ddp.gradient_as_bucket_view": "false",
        "optim.rank": 1,
    }


def test_knobs_fill_what_the_record_leaves_out():
    """No world size, sync, optim, accumulate or rank: 1 rank, ddp, none, 1, rank 1."""
    k = vd.knobs(_rec(world=None, sync=None, optim=None, accumulate=None, rank=None))
    assert (k["world_size"], k["sync"], k["optim"], k["accumulate"], k["optim.rank"]) == (
        1,
        "ddp",
        "none",
        1,
        1,
    )
    k = vd.knobs(_rec(world=4, sync="local_sgd", optim="powersgd", accumulate=8, rank=4))
    assert (k["world_size"], k["sync"], k["optim"], k["accumulate"], k["optim.rank"]) == (
        4,
        "local_sgd",
        "powersgd",
        8,
        4,
    )
    assert isinstance(vd.knobs(_rec(world="4"))["world_size"], int)


@pytest.mark.parametrize(
    "ddp, bucket_mb, bucket",
    [
        (_ddp(100.0), None, "100"),  # DDP's own cap first
        (_ddp(2.5), 100, "2.5"),
        (_ddp(None), 100, "default"),  # DDP says it was left unset
        (_ddp(100.0, has=False), 25, "25"),  # a DDP block without the field: the record's
        (None, 50.0, "50"),
        (None, None, "default"),
        (None, "default", "default"),
    ],
)
def test_a_records_bucket_cap(ddp, bucket_mb, bucket):
    assert vd.knobs(_rec(ddp=ddp, bucket_mb=bucket_mb))["bucket"] == bucket


def test_ddp_flags_are_lowercase_words():
    k = vd.knobs(_rec(ddp=_ddp(static=True, view=True)))
    assert k["ddp.static_graph"] == "true" and k["ddp.gradient_as_bucket_view"] == "true"
    k = vd.knobs(_rec(ddp=None))
    assert k["ddp.static_graph"] == "false" and k["ddp.gradient_as_bucket_view"] == "false"


@pytest.mark.parametrize(
    "link, kept",
    [
        (None, False),
        (_link(), True),
        (_link(emulated=False), False),
        (_link(rate=0), False),
        (_link(rate=None), False),
    ],
)
def test_only_an_emulated_link_with_a_rate_is_the_runs_link(link, kept):
    rec = _rec(link=link)
    assert (vd.link_of(rec) is link) if kept else vd.link_of(rec) is None


def test_a_workload_is_model_batch_size_precision_device_and_hosts():
    assert vd.workload(_rec(hosts=("h1", "h0", "h1"))) == (
        "vgg11",
        32,
        224,
        "fp32",
        "cpu",
        ("h0", "h1"),
    )
    assert vd.workload(_rec(hosts=None))[-1] == ()


def test_plainness_orders_each_departure_from_the_plain_run():
    """Each knob off its plain value sets its own flag, in the documented order, then the world
    size: a 1-rank run is less plain than a 2-rank one, 2 ranks plainer than 4."""
    assert vd.plainness(_rec()) == (False,) * 8 + (2,)
    departures = [
        _rec(sync="local_sgd"),
        _rec(optim="bf16"),
        _rec(ddp=_ddp(100.0)),
        _rec(accumulate=4),
        _rec(ddp=_ddp(view=True)),
        _rec(ddp=_ddp(static=True)),
        _rec(link=_link()),
        _rec(world=1),
    ]
    for i, r in enumerate(departures):
        got = vd.plainness(r)
        assert got[:8] == tuple(j == i for j in range(8)), i
    assert vd.plainness(_rec(ddp=_ddp(25.0)))[2] is False  # 25 MB is as plain as the default
    assert vd.plainness(_rec(world=4))[-1] == 4


# --------------------------------------------------------------------------------------- run-to-run
def test_run_to_run_pools_the_log_medians_of_repeated_configurations():
    """Config A: logs 0, 0.2 (mean 0.1, SS 0.02, 1 df); config B (optim=bf16): logs 1.0, 1.1, 1.3
    (mean 1.1333, SS 0.046667, 2 df); one lone run and the unusable ones add nothing: sd =
    sqrt(0.066667 / 3)."""
    members = [
        ("z0", _rec(0.0)),
        ("a0", _rec(math.exp(0.0))),
        ("a1", _rec(math.exp(0.2))),
        ("b0", _rec(math.exp(1.0), optim="bf16")),
        ("b1", _rec(math.exp(1.1), optim="bf16")),
        ("b2", _rec(math.exp(1.3), optim="bf16")),
        ("c0", _rec(5.0, accumulate=4)),
        ("z1", _rec(-1.0)),
        ("n0", _rec(None)),
        ("n1", NS(result=None)),
    ]
    ss = 0.02 + (1.0 - 3.4 / 3) ** 2 + (1.1 - 3.4 / 3) ** 2 + (1.3 - 3.4 / 3) ** 2
    sd, df = vd.run_to_run(members)
    assert df == 3 and sd == pytest.approx(math.sqrt(ss / 3))


def test_run_to_run_needs_two_degrees_of_freedom():
    one = [("a0", _rec(1.0)), ("a1", _rec(2.0)), ("b", _rec(3.0, world=4))]
    assert vd.run_to_run(one) == (None, 1)
    two = one + [("a2", _rec(4.0))]
    sd, df = vd.run_to_run(two)
    logs = [0.0, math.log(2), math.log(4)]
    m = sum(logs) / 3
    assert df == 2 and sd == pytest.approx(math.sqrt(sum((x - m) ** 2 for x in logs) / 2))
    assert vd.run_to_run([]) == (None, 0)


def test_runs_behind_links_of_another_rate_are_other_configurations():
    """The same knobs behind 1 and 2 Gbit/s are two configurations (no repeats here); behind the
    same rate, a link block that differs otherwise (each run's own check) is a repeat."""
    apart = [("a", _rec(1.0, link=_link(1e9))), ("b", _rec(2.0, link=_link(2e9))), ("c", _rec(3.0))]
    assert vd.run_to_run(apart) == (None, 0)
    same = [
        ("a", _rec(1.0, link=_link(1e9, rtt=1))),
        ("b", _rec(2.0, link=_link(1e9, rtt=2))),
        ("c", _rec(4.0, link=_link(1e9, rtt=3))),
    ]
    sd, df = vd.run_to_run(same)
    assert df == 2 and sd == pytest.approx(math.log(2))  # logs 0, ln2, 2 ln2: sd ln 2


# ------------------------------------------------------------------------------------ target config
@dataclass(frozen=True)
class _Cfg:
    knobs: dict
    link: object = None
    link_name: str = "own"


def test_a_target_behind_an_emulated_link_is_predicted_behind_it(monkeypatch):
    """The target's knobs go to changed(); a link of 2.5e9 bit/s becomes the model's emulated
    2.5 Gbit/s link over the source's own link and share, named so."""
    calls = []
    monkeypatch.setattr(vd, "changed", lambda base, k: _Cfg(k) if base == "base" else None)
    monkeypatch.setattr(
        vd, "emulated", lambda gbit, own, share: calls.append((gbit, own, share)) or "L"
    )
    prof = NS(link="own link", link_share=0.5)
    cfg = vd.target_config(prof, "base", _rec(link=_link(2.5e9), accumulate=4))
    assert cfg.knobs["accumulate"] == 4 and cfg.link == "L"
    assert cfg.link_name == "emulated 2.5 Gbit/s"
    assert calls == [(2.5, "own link", 0.5)]
    plain = vd.target_config(prof, "base", _rec())
    assert plain == _Cfg(vd.knobs(_rec())) and len(calls) == 1


# ---------------------------------------------------------------------------------------- groups_of
@pytest.fixture
def records(monkeypatch):
    """find_records gives the paths of `state.found`; Record.read the record `state.by` holds for a
    path's name (its directory's for a run_record.json), raising what it holds where that is an
    exception."""
    state = NS(found=[], by={}, asked=[])

    def find_records(*roots):
        state.asked.append(roots)
        return list(state.found)

    def read(path):
        r = state.by[_name(path)]
        if isinstance(r, Exception):
            raise r
        return r

    monkeypatch.setattr(br, "find_records", find_records)
    monkeypatch.setattr(Record, "read", staticmethod(read))
    return state


def _name(path):
    p = Path(path)
    return p.parent.name if p.name == "run_record.json" else p.name


def test_groups_of_sorts_finished_train_runs_by_workload(records):
    records.found = [Path(p) for p in ("a", "b", "c", "d", "e", "f")]
    records.by = {
        "a": _rec(),
        "b": _rec(batch=64),
        "c": _rec(task="collectives"),
        "d": _rec(status="failed"),
        "e": RecordError("bad field"),
        "f": _rec(optim="bf16"),
    }
    groups, skipped = vd.groups_of(["x"])
    assert records.asked == [("x",)]
    assert {k: [p for p, _ in v] for k, v in groups.items()} == {
        vd.workload(_rec()): ["a", "f"],
        vd.workload(_rec(batch=64)): ["b"],
    }
    assert skipped == [
        "c: task=collectives status=ok (not a finished train run)",
        "d: task=train status=failed (not a finished train run)",
        "e: unreadable (bad field)",
    ]


@pytest.mark.parametrize("error", [OSError("gone"), ValueError("junk")])
def test_groups_of_skips_what_cannot_be_read(records, error):
    records.found, records.by = [Path("a")], {"a": error}
    assert vd.groups_of(["x"]) == ({}, [f"a: unreadable ({error})"])


# ----------------------------------------------------------------------------------------- validate
@pytest.fixture
def model(records, monkeypatch):
    """The model stood in for: from_record gives a profile per source path (ProfileError for a path
    named in `bad`), predict returns `state.pred[target's optim]` (or raises it), Config.of the
    profile's name; the knobs' change is what target_config returns."""
    state = NS(bad=set(), pred={}, draws=[], records=records, profiles=[])

    def from_record(rec, path):
        assert rec is records.by[_name(path)]  # the source's own record
        if path in state.bad:
            raise ProfileError("too old")
        prof = NS(path=path, run_to_run_sd=0.03)
        state.profiles.append(prof)
        return prof

    class Draws:
        def __init__(self, n, seed):
            state.draws.append((n, seed))

    def predict(prof, cfg, draws):
        assert prof is state.profiles[-1] and cfg.prof is prof and isinstance(draws, Draws)
        p = state.pred[cfg.optim]
        if isinstance(p, Exception):
            raise p
        return p

    def target_config(prof, base, rec):
        assert prof is state.profiles[-1] and base == f"base of {prof.path}"
        optim = rec.result.optim
        return NS(prof=prof, optim=optim, label=lambda b: f"optim={optim} from {b}")

    monkeypatch.setattr(vd, "from_record", from_record)
    monkeypatch.setattr(vd, "predict", predict)
    monkeypatch.setattr(vd, "Draws", Draws)
    monkeypatch.setattr(vd, "Config", NS(of=lambda prof: f"base of {prof.path}"))
    monkeypatch.setattr(vd, "target_config", target_config)
    return state


def _ci(lo, hi):
    return {"ci_lo": lo, "ci_hi": hi, "ci_level": 0.95}


def test_validate_predicts_every_run_of_a_group_from_its_plainest(model, tmp_path):
    """The plainest run (2 ranks, plain knobs) is the source whatever the order; each other run is a
    row with its measured median and interval, the prediction's step and interval and notes joined;
    a run without a step time, one the model rejects and one of another task are skipped, saying
    why; the Monte Carlo draws are the samples and seed asked for."""
    model.records.found = [Path(p) for p in ("w1", "coll", "src", "bad", "bf16", "ps", "nost")]
    model.records.by = {
        "w1": _rec(0.3, world=1),
        "src": _rec(0.2),
        "bf16": _rec(0.25, optim="bf16", ci=_ci(0.24, 0.27)),
        "ps": _rec(0.3, optim="powersgd"),
        "nost": _rec(None, optim="bf16"),
        "bad": _rec(0.3, optim="adamw"),
        "coll": _rec(task="collectives"),
    }
    model.pred = {
        "none": NS(step_s=0.31, lo=0.29, hi=0.33, notes=["n1"]),
        "bf16": NS(step_s=0.24, lo=0.22, hi=0.26, notes=["n1", "n2"]),
        "powersgd": NS(step_s=0.36, lo=0.33, hi=0.4, notes=[]),
        "adamw": KeyError("adamw"),
    }
    v = vd.validate(["d"], samples=321, seed=7)
    assert model.draws == [(321, 7)]
    group = "vgg11 batch 32 @224 (cpu)"
    assert [(r.group, r.source, r.target, r.change) for r in v.rows] == [
        (group, "src", "w1", "optim=none from base of src"),
        (group, "src", "bf16", "optim=bf16 from base of src"),
        (group, "src", "ps", "optim=powersgd from base of src"),
    ]
    w1, bf16, ps = v.rows
    assert (w1.measured, w1.measured_lo, w1.measured_hi) == (0.3, None, None)
    assert (bf16.measured, bf16.measured_lo, bf16.measured_hi) == (0.25, 0.24, 0.27)
    assert (bf16.predicted, bf16.lo, bf16.hi, bf16.note) == (0.24, 0.22, 0.26, "n1; n2")
    assert (w1.predicted, w1.lo, w1.hi, w1.note) == (0.31, 0.29, 0.33, "n1") and ps.note == ""
    assert v.skipped == [
        "coll: task=collectives status=ok (not a finished train run)",
        "bad: not predicted ('adamw')",
        "nost: no step time",
    ]
    # no configuration ran twice: the profile keeps its own run-to-run sd, 0 df
    assert v.run_to_run == [(group, 0.03, 0)] and model.profiles[0].run_to_run_sd == 0.03


def test_validate_pools_the_groups_repeats_into_the_profiles_scatter(model):
    """Three repeats of the source's configuration (logs 0, ln 2, 2 ln 2: sd ln 2 over 2 df)
    replace the profile's stated scatter; the default samples and seed are 1000 and 0."""
    model.records.found = [Path(p) for p in ("a", "b", "c", "t")]
    model.records.by = {
        "a": _rec(1.0),
        "b": _rec(2.0),
        "c": _rec(4.0),
        "t": _rec(1.0, optim="bf16"),
    }
    model.pred = {
        "none": NS(step_s=1.0, lo=0.9, hi=1.1, notes=[]),
        "bf16": NS(step_s=1.0, lo=0.9, hi=1.1, notes=[]),
    }
    v = vd.validate(["d"])
    assert model.draws == [(1000, 0)]
    [(w, sd, df)] = v.run_to_run
    assert df == 2 and sd == pytest.approx(math.log(2)) and model.profiles[0].run_to_run_sd == sd
    assert [r.target for r in v.rows] == ["b", "c", "t"]


def test_validate_skips_a_group_whose_source_cannot_be_one(model):
    """The first group's source is rejected: that group is skipped, the next one still
    predicted."""
    model.records.found = [Path(p) for p in ("a", "b", "c", "d")]
    model.records.by = {
        "a": _rec(1.0),
        "b": _rec(1.0, optim="bf16"),
        "c": _rec(1.0, batch=64),
        "d": _rec(1.0, batch=64, optim="bf16"),
    }
    model.bad = {"a"}
    model.pred = {"bf16": NS(step_s=1.0, lo=0.9, hi=1.1, notes=[])}
    v = vd.validate(["d"])
    assert v.skipped == ["a: cannot be a source (too old)"]
    assert [(r.source, r.target) for r in v.rows] == [("c", "d")]
    assert v.run_to_run == [("vgg11 batch 64 @224 (cpu)", 0.03, 0)]


def test_validate_reads_a_named_source_from_outside_the_dirs(model, tmp_path):
    """--source, a run directory outside the dirs: its record joins them (first) and is every
    group's source; a group without it is skipped, member by member."""
    src = tmp_path / "src"
    src.mkdir()
    model.records.found = [Path("t1"), Path("other")]
    model.records.by = {"src": _rec(0.2, world=4), "t1": _rec(0.3), "other": _rec(0.3, batch=64)}
    model.pred = {"none": NS(step_s=0.28, lo=0.25, hi=0.31, notes=[])}
    v = vd.validate(["d"], source=src)
    assert [(r.source, r.target) for r in v.rows] == [(str(src / "run_record.json"), "t1")]
    assert v.skipped == ["other: not the workload of --source"]
    assert model.profiles[0].path == str(src / "run_record.json")


def test_validate_takes_a_named_source_among_the_dirs_once(model, tmp_path):
    """--source naming a record file the dirs already hold: not read twice; chosen over a plainer
    run; a group before it without the source is skipped (after what was skipped already), and
    the source's group still predicted."""
    (tmp_path / "s").mkdir()
    srcf = tmp_path / "s" / "run_record.json"
    srcf.write_text("{}")
    model.records.found = [Path("gone"), Path("other"), tmp_path / "p", srcf]
    model.records.by = {
        "gone": OSError("no such file"),
        "other": _rec(0.3, batch=64),
        "p": _rec(0.2),
        "s": _rec(0.3, optim="bf16"),
    }
    model.pred = {"none": NS(step_s=0.2, lo=0.19, hi=0.21, notes=[])}
    v = vd.validate(["d"], source=srcf)
    assert [(r.source, r.target) for r in v.rows] == [(str(srcf), str(tmp_path / "p"))]
    assert v.skipped == ["gone: unreadable (no such file)", "other: not the workload of --source"]
    # the run directory names the same source
    v = vd.validate(["d"], source=tmp_path / "s")
    assert [(r.source, r.target) for r in v.rows] == [(str(srcf), str(tmp_path / "p"))]


def test_validate_skips_unreadable_records(model):
    model.records.found = [Path("a"), Path("b")]
    model.records.by = {"a": OSError("gone"), "b": RecordError("bad")}
    v = vd.validate(["d"])
    assert v.skipped == ["a: unreadable (gone)", "b: unreadable (bad)"] and v.rows == []


# ------------------------------------------------------------------------------------------- output
def _v(rows, mape, worst, cov, skipped=(), rr=()):
    return NS(
        rows=rows, mape=mape, worst=worst, coverage=cov, skipped=list(skipped), run_to_run=list(rr)
    )


def _rows():
    return [
        _row(
            0.5,
            0.5625,
            0.5,
            0.6,
            group="g1",
            change="bucket=100",
            target="t1",
            source="s1",
            mlo=0.45,
            mhi=0.55,
            note="n2; n1",
        ),
        _row(
            0.5,
            0.375,
            0.3,
            0.45,
            group="g1",
            change="optim=bf16",
            target="t2",
            source="s1",
            note="n1",
        ),
        _row(0.25, 0.25, 0.2, 0.3, group="g2", change="accumulate=4", target="t3", source="s0"),
    ]


def test_markdown_summary_and_per_workload_lines():
    """Three rows (errors +12.5%, -25%, 0%): MAPE 12.5% misses 5%, the worst -25% misses 15%, 2 of
    3 inside (67%) misses 90-98%; workload g1: MAPE 18.8%, worst -25.0% (signed, the larger
    magnitude), 50% inside; g2: 0.0%, +0.0%, 100%. The steps in ms to their intervals' digits
    (562.5 in [500, 600] to tens: 560; 375 to tens, half to even: 380)."""
    rows = _rows()
    text = vd.markdown(
        _v(rows, 0.125, rows[1], (2 / 3, 0.2077, 0.9385), rr=[("g1", 0.031, 3), ("g2", 0.05, 1)]),
        "CMD",
    )
    lines = text.splitlines()
    assert (
        lines[0] == "# What-if validation: predicted against measured"
        and lines[2] == "Regenerate: `CMD`"
    )
    assert "- rows: 3" in lines
    assert "- MAPE: 12.5% (goal <= 5%: MISSED)" in lines
    assert "- worst row: -25.0% (optim=bf16, t2) (goal <= 15%: MISSED)" in lines
    assert (
        "- coverage of the 95% prediction intervals: 67% [21, 94] (Wilson 95%) of 3 rows "
        "(goal 90-98%: MISSED)" in lines
    )
    assert "| g1 | 2 | 18.8% | -25.0% | 50% |" in lines
    assert "| g2 | 1 | 0.0% | +0.0% | 100% |" in lines
    assert "| g1 | bucket=100 | 500 [450, 550] | 560 [500, 600] | +12.5% | yes | t1 |" in lines
    assert "| g1 | optim=bf16 | 500 | 380 [300, 450] | -25.0% | no | t2 |" in lines
    assert "| g2 | accumulate=4 | 250 | 250 [200, 300] | +0.0% | yes | t3 |" in lines
    assert "Sources: s0, s1" in lines
    assert (
        "Run-to-run scatter in the prediction intervals (log-normal sd of a run's step median): "
        "g1: 3.1% (pooled over the repeats here, 3 df); "
        "g2: 5.0% (stated default: too few repeats here)"
    ) in lines
    at = lines.index("Model notes on these rows:")
    assert lines[at + 1 :] == ["", "- n1", "- n2"]
    assert text.endswith("- n2\n") and "Skipped:" not in text


@pytest.mark.parametrize(
    "mape, worst, cov, met",
    [
        (0.05, 0.15, 0.90, (True, True, True)),
        (0.05, -0.15, 0.98, (True, True, True)),
        (0.0501, 0.1501, 0.8999, (False, False, False)),
        (0.01, -0.1501, 0.9801, (True, False, False)),
    ],
)
def test_markdown_goals_are_met_at_their_bounds(mape, worst, cov, met):
    """MAPE <= 5%, |worst| <= 15%, coverage in [90%, 98%]: each bound itself meets its goal."""
    w = NS(error=worst, change="c", target="t")
    rows = [_row(1.0, 1.0, 0.9, 1.1)]
    lines = vd.markdown(_v(rows, mape, w, (cov, 0.5, 1.0), rr=[("g", 0.02, 2)]), "C").splitlines()
    words = [
        next(ln for ln in lines if ln.startswith(p)).endswith("met)")
        for p in ("- MAPE", "- worst", "- coverage")
    ]
    assert tuple(words) == met
    assert "g: 2.0% (pooled over the repeats here, 2 df)" in next(
        ln for ln in lines if ln.startswith("Run-to-run")
    )


def test_markdown_without_rows_lists_what_was_skipped():
    text = vd.markdown(_v([], None, None, None, skipped=["a: why", "b: why not"]), "C")
    lines = text.splitlines()
    assert "No pairs: every record was skipped (below)." in lines and "MAPE" not in text
    assert lines[-4:] == ["Skipped:", "", "- a: why", "- b: why not"]
    assert (
        vd.markdown(_v(_rows()[2:], 0.0, _rows()[2], (1.0, 0.2, 1.0)), "C").count("Model notes")
        == 0
    )


def test_as_json_holds_each_row_with_its_error_and_the_goals():
    rows = _rows()
    v = vd.Validation(rows=rows, skipped=["x: why"])
    d = vd.as_json(v)
    assert d["rows"][0] == {**rows[0].__dict__, "error": 0.125, "inside": True}
    assert [r["inside"] for r in d["rows"]] == [True, False, True]
    assert d["mape"] == pytest.approx(0.125)
    assert d["worst"] == {**rows[1].__dict__, "error": -0.25}
    assert d["coverage"] == v.coverage and d["skipped"] == ["x: why"]
    assert d["goals"] == {"mape": 0.05, "worst": 0.15, "coverage": (0.90, 0.98)}
    empty = vd.as_json(vd.Validation())
    assert (
        empty["worst"] is None
        and empty["mape"] is None
        and empty["coverage"] is None
        and empty["rows"] == []
    )


# ------------------------------------------------------------------------------------------ command
@pytest.fixture
def checked(monkeypatch):
    """validate stood in for: it records its arguments and returns `state.v`."""
    state = NS(args=[], v=vd.Validation(rows=_rows()))

    def validate(dirs, source, samples, seed):
        state.args.append((dirs, source, samples, seed))
        return state.v

    monkeypatch.setattr(vd, "validate", validate)
    return state


def test_the_command_prints_and_writes_the_validation(checked, tmp_path, capsys):
    d = tmp_path / "runs"
    d.mkdir()
    out = tmp_path / "out"
    rc = vd.main([str(d), "--source", "S", "--out", str(out), "--samples", "300", "--seed", "5"])
    assert rc == 0 and checked.args == [([str(d)], "S", 300, 5)]
    printed = capsys.readouterr().out
    assert (
        f"Regenerate: `python -m whatif.validate {d} --source S --out {out} --samples 300 --seed 5`"
        in printed
    )
    assert (out / "validation.md").read_text() + "\n" == printed
    data = json.loads((out / "validation.json").read_text())
    assert data["mape"] == pytest.approx(0.125) and len(data["rows"]) == 3


def test_the_command_defaults_and_its_exit_codes(checked, tmp_path, capsys):
    """Defaults: 1000 samples, seed 0 (left out of the command line), no source, nothing written;
    exit 1 with no rows; 2 (and nothing validated) for a directory that does not exist."""
    d = tmp_path / "runs"
    d.mkdir()
    checked.v = vd.Validation()
    assert vd.main([str(d), str(d)]) == 1
    assert checked.args == [([str(d), str(d)], None, 1000, 0)]
    out = capsys.readouterr().out
    assert f"Regenerate: `python -m whatif.validate {d} {d} --samples 1000`" in out
    assert list(tmp_path.iterdir()) == [d]
    assert vd.main([str(d), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err == f"python -m whatif.validate: {tmp_path / 'missing'} does not exist\n"
    assert len(checked.args) == 1


def test_markdown_whole_page():
    """The page as a reader sees it: the summary (coverage 90% [60, 98] met at its lower bound),
    the workload's line (2 of 3 inside: 67%), each row in ms to its interval's digits (a 0.2 ms
    wide interval: two decimals, 2000.00 [1999.90, 2000.10]; no interval: the value alone), the
    sources, the scatter, the notes and what was skipped, each block after a blank line."""
    rows = [
        _row(2.0, 2.0, 1.9999, 2.0001, change="bucket=100", target="t1", mlo=1.9999, mhi=2.0001),
        _row(1.0, 1.25, 1.2, 1.3, change="optim=bf16", target="t2", note="m"),
        _row(0.5, 0.5, 0.4, 0.6, change="accumulate=4", target="t3", note="; m"),
    ]
    v = _v(rows, 1 / 12, rows[1], (0.9, 0.6, 0.98), skipped=["x: why"], rr=[("g", 0.031, 3)])
    assert vd.markdown(v, "CMD") == "\n".join(
        [
            "# What-if validation: predicted against measured",
            "",
            "Regenerate: `CMD`",
            "",
            "Step time (median, rank 0) of each target run against the model's prediction from "
            "its group's source run; intervals 95% (measured: the median's order-statistic "
            "interval; predicted: Monte Carlo prediction interval). error = (predicted - "
            "measured) / measured.",
            "",
            "- rows: 3",
            "- MAPE: 8.3% (goal <= 5%: MISSED)",
            "- worst row: +25.0% (optim=bf16, t2) (goal <= 15%: MISSED)",
            "- coverage of the 95% prediction intervals: 90% [60, 98] (Wilson 95%) of 3 rows "
            "(goal 90-98%: met)",
            "",
            "| workload | rows | MAPE | worst | coverage |",
            "|---|---|---|---|---|",
            "| g | 3 | 8.3% | +25.0% | 67% |",
            "",
            "| workload | change from the source | measured ms | predicted ms | error | inside | "
            "target run |",
            "|---|---|---|---|---|---|---|",
            "| g | bucket=100 | 2000.00 [1999.90, 2000.10] | 2000.00 [1999.90, 2000.10] | +0.0% "
            "| yes | t1 |",
            "| g | optim=bf16 | 1000 | 1250 [1200, 1300] | +25.0% | no | t2 |",
            "| g | accumulate=4 | 500 | 500 [400, 600] | +0.0% | yes | t3 |",
            "",
            "Sources: s",
            "",
            "Run-to-run scatter in the prediction intervals (log-normal sd of a run's step "
            "median): g: 3.1% (pooled over the repeats here, 3 df)",
            "",
            "Model notes on these rows:",
            "",
            "- m",
            "",
            "Skipped:",
            "",
            "- x: why",
            "",
        ]
    )


def test_markdown_prints_the_goals_from_their_constants(monkeypatch):
    """The goals printed are GOAL_MAPE and GOAL_WORST in whole percent (90% set here)."""
    monkeypatch.setattr(vd, "GOAL_MAPE", 0.9)
    monkeypatch.setattr(vd, "GOAL_WORST", 0.9)
    w = NS(error=0.1, change="c", target="t")
    text = vd.markdown(_v([_row(1.0, 1.0, 0.9, 1.1)], 0.1, w, (1.0, 0.5, 1.0)), "C")
    assert "- MAPE: 10.0% (goal <= 90%: met)" in text
    assert "- worst row: +10.0% (c, t) (goal <= 90%: met)" in text


def test_an_emulated_links_name_is_its_rate_in_gbit_s(monkeypatch):
    """1000005000.5 bit/s is 1.0000050005 Gbit/s: '1.00001' to %g's 6 digits."""
    monkeypatch.setattr(vd, "changed", lambda base, k: _Cfg(k))
    monkeypatch.setattr(vd, "emulated", lambda gbit, own, share: gbit)
    cfg = vd.target_config(NS(link=None, link_share=None), "base", _rec(link=_link(1000005000.5)))
    assert cfg.link_name == "emulated 1.00001 Gbit/s" and cfg.link == pytest.approx(1.0000050005)


def test_the_commands_help_names_it_and_its_arguments(capsys):
    """--help: the program's name, the docstring's first paragraph (not the second), each
    argument's help."""
    with pytest.raises(SystemExit) as done:
        vd.main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m whatif.validate ")
    assert "Predicted against measured: python -m whatif.validate <dirs of run records>" in out
    assert "Every finished task=train record" not in out
    assert "dirs run or sweep directories holding run records options:" in out
    assert (
        "--source SOURCE the run every other run of its workload is predicted from --out OUT "
        "write validation.md and validation.json here --samples" in out
    )


def test_the_command_makes_its_output_directory_and_writes_into_it_again(checked, tmp_path):
    """--out a/b: both made; a second run into the same directory overwrites; the JSON indented
    by two spaces."""
    d = tmp_path / "runs"
    d.mkdir()
    out = tmp_path / "a" / "b"
    assert vd.main([str(d), "--out", str(out)]) == 0
    assert vd.main([str(d), "--out", str(out)]) == 0
    text = (out / "validation.json").read_text()
    assert text.startswith('{\n  "rows": [\n    {\n      "group": "g1",')
