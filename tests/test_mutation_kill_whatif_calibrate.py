"""whatif/calibrate.py (issue 36: a module the mutation run covers): the calibrated figures'
search, on a stand-in model whose step is a known function of the figure (so the root is worked
out by hand: step = 1 + 2 v measured at 2.0 is v = 0.5), with the runs, their knobs and links
hand-made; the printed line's median and range by hand. The derivation from the committed records
is test_whatif_prices' slow test."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

import whatif.calibrate as cal
from whatif.profile import ProfileError
from whatif.quantity import Quantity


def _rec(step_s=2.0, *, world=1, optim="none", link=None, plain=1):
    result = NS(step_time_s=None if step_s is None else NS(median=step_s))
    return NS(result=result, knobs={"world_size": world, "optim": optim}, link=link, plain=plain)


def _prof(device="cpu", world=2, hosts=1, link=None, total_bytes=1000):
    return NS(
        device=device,
        world_size=world,
        hosts=hosts,
        record=NS(link=link),
        params=NS(total_bytes=total_bytes),
        core_scaling=None,
        link_share=None,
        psgd_alloc=None,
    )


@pytest.fixture
def model(monkeypatch):
    """Stand-ins for the records and the model: groups_of gives `groups`, from_record the prof
    (or ProfileError where the record says so), predict's step is step(v) of the figure _set put
    on the prof."""
    state = NS(groups={}, step=lambda v: 1 + 2 * v, calls=[])

    def groups_of(paths):
        assert paths == ["x"]
        return state.groups, []

    monkeypatch.setattr(cal, "groups_of", groups_of)
    monkeypatch.setattr(cal, "plainness", lambda rec: rec.plain)
    monkeypatch.setattr(cal, "knobs", lambda rec: rec.knobs)
    monkeypatch.setattr(cal, "link_of", lambda rec: rec.link)

    def from_record(rec, path):
        if getattr(rec, "bad", False):
            raise ProfileError("no")
        assert path == rec.path
        return rec.prof

    monkeypatch.setattr(cal, "from_record", from_record)
    monkeypatch.setattr(cal, "Config", NS(of=lambda prof: ("base", id(prof))))

    def target_config(prof, base, rec):
        assert base == ("base", id(prof)) and rec.knobs
        return rec

    monkeypatch.setattr(cal, "target_config", target_config)

    def predict(prof, cfg, draws):
        assert isinstance(draws, cal.PointDraws)
        assert cfg.result.step_time_s is not None  # the target's configuration
        v = prof.core_scaling[0] if prof.core_scaling else prof.link_share[0]
        state.calls.append(v)
        return NS(step_s=state.step(v))

    monkeypatch.setattr(cal, "predict", predict)
    return state


def _group(prof, *targets, src_plain=0):
    src = _rec(1.0, plain=src_plain)
    src.prof, src.path = prof, "src"
    return [("src", src), *targets]


def test_the_search_finds_the_figure_that_predicts_the_measured_step(model):
    prof = _prof(world=2)
    model.groups = {"w": _group(prof, ("a", _rec(2.0)), ("b", _rec(4.0)))}
    rows = cal.implied("core_scaling", ["x"])
    # 1 + 2 v = 2 at v = 0.5; = 4 at v = 1.5 (bisection over [0, 2], 40 halvings: 2e-12)
    assert [p for p, _ in rows] == ["a", "b"]
    assert rows[0][1] == pytest.approx(0.5, abs=1e-10)
    assert rows[1][1] == pytest.approx(1.5, abs=1e-10)
    assert prof.core_scaling[0] == prof.core_scaling[1] == prof.core_scaling[2]
    # a root near the high end: 1 + 2 v = 4.5 at v = 1.75 (the gap at v = 2 is +0.5)
    model.groups = {"w": _group(prof, ("c", _rec(4.5)))}
    assert cal.implied("core_scaling", ["x"])[0][1] == pytest.approx(1.75, abs=1e-10)
    # a root on the low end of a falling step: 5 - 2 v = 5 at v = 0
    model.step = lambda v: 5 - 2 * v
    model.groups = {"w": _group(prof, ("e", _rec(5.0)))}
    assert cal.implied("core_scaling", ["x"])[0][1] == pytest.approx(0.0, abs=1e-10)
    model.groups = {"w": _group(prof, ("a", _rec(2.0)), ("b", _rec(4.0)))}
    # a decreasing step: the root is found from the other side
    model.step = lambda v: 5 - 2 * v
    rows = cal.implied("core_scaling", ["x"])
    assert rows[0][1] == pytest.approx(1.5, abs=1e-10) and rows[1][1] == pytest.approx(
        0.5, abs=1e-10
    )


def test_without_a_root_the_nearer_end_of_the_range(model):
    prof = _prof(world=2)
    model.groups = {"w": _group(prof, ("lo", _rec(0.5)), ("hi", _rec(10.0)))}
    rows = cal.implied("core_scaling", ["x"])
    # step runs 1..5 over [0, 2]: 0.5 is below it all (gap +0.5 at 0, +4.5 at 2), 10 above (-9, -5)
    assert rows == [("lo", 0.0), ("hi", 2.0)]
    # equally far from both ends: the low one
    model.step = lambda v: 1 + (v - 1) ** 2
    model.groups = {"w": _group(prof, ("tie", _rec(0.0)))}
    assert cal.implied("core_scaling", ["x"]) == [("tie", 0.0)]
    model.groups = {"w": _group(prof, ("near", _rec(0.0)))}
    model.step = lambda v: 1 + (v - 0.9) ** 2  # 1.81 at 0, 2.21 at 2: 0 is nearer
    assert cal.implied("core_scaling", ["x"]) == [("near", 0.0)]
    model.step = lambda v: 1 + (v - 1.1) ** 2  # 2.21 at 0, 1.81 at 2: 2 is nearer
    assert cal.implied("core_scaling", ["x"]) == [("near", 2.0)]


def test_the_source_is_the_plainest_run_and_is_not_a_target(model):
    prof, other = _prof(world=2), _prof(world=2)
    plain = _rec(2.0, plain=0)
    plain.prof, plain.path = prof, "plainest"
    busy = _rec(4.0, plain=5)
    busy.prof, busy.path = other, "busy"
    model.groups = {"w": [("busy", busy), ("plainest", plain), ("t", _rec(3.0, plain=3))]}
    rows = cal.implied("core_scaling", ["x"])
    assert [p for p, _ in rows] == ["busy", "t"]
    assert rows[1][1] == pytest.approx(1.0, abs=1e-10)
    assert prof.core_scaling is not None and other.core_scaling is None


def test_runs_it_does_not_apply_to_or_without_a_step_are_left_out(model):
    prof = _prof(world=2)
    model.groups = {
        "w": _group(prof, ("none", _rec(None)), ("same_world", _rec(2.0, world=2))),
        "v": _group(_prof(world=2), ("ok", _rec(2.0))),
    }
    rows = cal.implied("core_scaling", ["x"])
    assert [p for p, _ in rows] == ["ok"]
    # a source the model cannot read: its group is skipped, the others go on
    bad = _rec(1.0, plain=0)
    bad.bad, bad.path = True, "src"
    model.groups = {
        "b": [("src", bad), ("t", _rec(2.0))],
        "v": _group(_prof(world=2), ("ok", _rec(2.0))),
    }
    assert [p for p, _ in cal.implied("core_scaling", ["x"])] == ["ok"]


def test_the_link_share_search_range_and_where_it_applies(model):
    link = NS(rate_bit_s=1e9)
    prof = _prof(world=2)
    model.step = lambda v: 3 - 2 * v  # a larger share, a shorter step
    model.groups = {"w": _group(prof, ("l", _rec(1.4, world=2, link=link)))}
    rows = cal.implied("link_share", ["x"])
    assert rows[0][1] == pytest.approx(0.8, abs=1e-10)
    assert prof.link_share[0] == prof.link_share[1] == prof.link_share[2]
    lo, hi = cal.RANGES["link_share"]
    assert lo == 0.5 and hi == cal.TC_PAYLOAD


def test_applies(monkeypatch):
    monkeypatch.setattr(cal, "knobs", lambda rec: rec.knobs)
    k = {"world_size": 1, "optim": "powersgd"}
    rec = NS(knobs=k, link=None)
    assert cal._applies("fresh_pages", _prof(), rec)
    assert not cal._applies("fresh_pages", _prof(), NS(knobs={**k, "optim": "none"}, link=None))


def test_applies_core_scaling_and_link_share(monkeypatch):
    monkeypatch.setattr(cal, "knobs", lambda rec: rec.knobs)
    monkeypatch.setattr(cal, "link_of", lambda rec: rec.link)
    one = NS(knobs={"world_size": 1, "optim": "none"}, link=None)
    two = NS(knobs={"world_size": 2, "optim": "none"}, link=None)
    # core_scaling: a CPU run on one host with fewer ranks than the source
    assert cal._applies("core_scaling", _prof("cpu", 2, 1), one)
    assert not cal._applies("core_scaling", _prof("cpu", 2, 1), two)
    assert not cal._applies("core_scaling", _prof("cuda", 2, 1), one)
    assert not cal._applies("core_scaling", _prof("cpu", 2, 2), one)
    assert cal._applies("core_scaling", _prof("cpu", 4, 1), two)
    # link_share: 2 ranks or more behind a link of at most 1 Gbit/s, from an unshaped source
    at = NS(knobs={"world_size": 2}, link=NS(rate_bit_s=1e9))
    assert cal.LINK_SHARE_MAX_BIT_S == 1e9
    assert cal._applies("link_share", _prof(), at)
    assert not cal._applies("link_share", _prof(), NS(knobs={"world_size": 2}, link=None))
    assert not cal._applies(
        "link_share", _prof(), NS(knobs={"world_size": 2}, link=NS(rate_bit_s=1.01e9))
    )
    assert not cal._applies(
        "link_share", _prof(), NS(knobs={"world_size": 1}, link=NS(rate_bit_s=1e8))
    )
    assert cal._applies("link_share", _prof(), NS(knobs={"world_size": 3}, link=NS(rate_bit_s=1e8)))
    assert not cal._applies("link_share", _prof(link=NS(rate_bit_s=1e10)), at)


def test_set_puts_the_figure_where_the_model_reads_it():
    p = _prof(total_bytes=4000)
    cal._set("fresh_pages", p, 2e-9)
    assert p.psgd_alloc.value == pytest.approx(8e-6, rel=1e-12)
    assert p.psgd_alloc == Quantity.exact(p.psgd_alloc.value, "calibration")
    assert p.core_scaling is None and p.link_share is None
    cal._set("link_share", p, 0.9)
    assert p.link_share == (0.9, 0.9, 0.9) and p.core_scaling is None
    cal._set("core_scaling", p, 0.6)
    assert p.core_scaling == (0.6, 0.6, 0.6) and p.link_share == (0.9, 0.9, 0.9)


def test_summary_is_median_min_max():
    assert cal.summary([("a", 3.0), ("b", 1.0), ("c", 2.0)]) == (2.0, 1.0, 3.0)
    assert cal.summary([("a", 4.0), ("b", 1.0), ("c", 2.0), ("d", 8.0)]) == (3.0, 1.0, 8.0)
    assert cal.summary([("a", 5.0)]) == (5.0, 5.0, 5.0)


def test_ranges_and_units():
    assert cal.RANGES["fresh_pages"] == (0.0, 10e-9)
    assert cal.RANGES["core_scaling"] == (0.0, 2.0)
    assert cal.UNITS == {
        "fresh_pages": (1e9, "ns per byte"),
        "core_scaling": (1.0, "(exponent)"),
        "link_share": (1.0, "of the shaped rate"),
    }


def test_main_prints_each_run_and_the_median_and_range(monkeypatch, tmp_path, capsys):
    seen = {}

    def implied(what, dirs):
        seen["args"] = (what, dirs)
        return [("r1", 0.3e-9), ("r2", 0.5e-9), ("r3", 0.4e-9)]

    monkeypatch.setattr(cal, "implied", implied)
    assert cal.main(["fresh_pages", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert seen["args"] == ("fresh_pages", [str(tmp_path)])
    assert out == [
        "0.300 ns per byte  r1",
        "0.500 ns per byte  r2",
        "0.400 ns per byte  r3",
        "fresh_pages: 0.4 ns per byte [0.3, 0.5] (median [range] of 3 run(s))",
    ]


def test_help_names_the_command_its_figures_and_the_directories(capsys):
    with pytest.raises(SystemExit):
        cal.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith(
        "usage: python -m whatif.calibrate [-h] {core_scaling,fresh_pages,link_share}"
    )
    assert "Each is a figure the records under validation do not carry" in out
    assert "dirs run or sweep directories holding the runs" in out


def test_main_refuses_a_missing_directory_and_no_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cal, "implied", lambda what, dirs: [])
    assert cal.main(["core_scaling", str(tmp_path / "nope"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'nope'} does not exist: give run directories\n"
    assert cal.main(["core_scaling", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: no run there that core_scaling applies to, with a source run of its workload\n"
    )
    with pytest.raises(SystemExit):
        cal.main(["nothing", str(tmp_path)])
