"""whatif/api.py (issue 36: a module the mutation run covers): what the diagnosis, the autotune and
the command call. The step model is replaced by stand-ins that keep every call (profile,
configuration, draws, own, timeline) and return predictions with chosen speed-ups, so the
module's own work is checked by hand: which configuration each call predicts, the paired draws,
the sweep's order and de-duplication, the saving 1 - 1/speed-up and its widening by the time the
model does not explain (worked out in the docstrings), the contention-free configuration and the
autotune's rule. The predictions on committed records are test_whatif's."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace as NS

import pytest

import whatif.api as api
import whatif.links as lk
from base.record import Record
from whatif.profile import Contention, Profile, ProfileError
from whatif.quantity import Quantity
from whatif.step import NOT_MODELLED, Config


@dataclass
class Prof:
    """The fields Config.of reads, and the contention and measured step api reads."""

    world_size: int = 2
    sync: str = "ddp"
    optim: str = "none"
    bucket_cap: object = 25.0
    accumulate: int = 1
    bucket_view: bool = False
    static_graph: bool = False
    psgd_rank: int = 1
    contention: object = None
    step: object = None


@pytest.fixture
def model(monkeypatch):
    """api._predict replaced (and profile_of: the record is the profile): each call kept; its
    prediction carries the configuration and a speed-up from `speedups` keyed by the
    configuration's label against the prof's own (1.0 for the own configuration)."""
    state = NS(calls=[], speedups={}, step={})

    def predict(prof, cfg, draws, own=None, timeline=False):
        label = cfg.label(Config.of(prof))
        s = state.speedups.get(label, (1.0, 0.9, 1.1))
        p = NS(
            config=cfg,
            label=label,
            prof=prof,
            speedup=s[0],
            speedup_lo=s[1],
            speedup_hi=s[2],
            dominant="exposed comm",
            step_s=state.step.get(label, 1.0),
        )
        state.calls.append(NS(prof=prof, cfg=cfg, draws=draws, own=own, timeline=timeline, p=p))
        return p

    monkeypatch.setattr(api, "_predict", predict)
    monkeypatch.setattr(api, "profile_of", lambda record, model=None: record)
    return state


def _the(record, prof):
    """profile_of's stand-in: the caller's record ("rec") gives prof."""
    assert record == "rec"
    return prof


# -------------------------------------------------------------------------------------- profile_of
def test_profile_of_reads_each_kind_of_record(monkeypatch):
    """A Profile as it is; a dict and a Record through from_record with the record's output dir
    ("" without one) and the stand-in model; a path through load_record."""
    seen = []
    monkeypatch.setattr(
        api, "from_record", lambda rec, path, model: seen.append((rec, path, model)) or "P"
    )
    monkeypatch.setattr(api, "load_record", lambda path: (("rec", path), "/the/path"))
    prof = Profile.__new__(Profile)
    assert api.profile_of(prof) is prof and api.profile_of(prof, "vgg11") is prof
    assert api.profile_of({"status": "ok", "task": "train"}, "m1") == "P"
    rec, path, model = seen[-1]
    assert isinstance(rec, Record) and rec.task == "train" and path == "" and model == "m1"
    r = Record.from_dict({"status": "ok", "task": "train", "job": {"output_dir": "/out"}})
    assert api.profile_of(r) == "P" and seen[-1] == (r, "/out", None)
    assert api.profile_of("some/dir", "m2") == "P" and seen[-1] == (
        ("rec", "some/dir"),
        "/the/path",
        "m2",
    )
    assert len(seen) == 3


# --------------------------------------------------------------------------------------- link_from
def test_link_from_a_preset_a_link_or_none():
    link = lk.preset("ib100")
    assert api.link_from() is None
    assert api.link_from(link) is link
    assert api.link_from("10gbe") == lk.preset("10gbe")


def test_link_from_nccl_tests_reads_a_path_and_takes_a_parsed_dict(monkeypatch, tmp_path):
    import comm.nccl_tests as nt

    monkeypatch.setattr(nt, "read", lambda path: ("read", path))
    monkeypatch.setattr(lk, "from_nccl_tests", lambda parsed: ("link", parsed))
    f = tmp_path / "out.txt"
    assert api.link_from("ib100", nccl_tests=f) == ("link", ("read", f))
    assert api.link_from(nccl_tests=str(f)) == ("link", ("read", str(f)))
    assert api.link_from(nccl_tests={"rows": []}, collectives="x") == ("link", {"rows": []})


def test_link_from_collectives_takes_a_record_a_dict_or_a_path(monkeypatch):
    """A task=collectives record (as a Record, its dict, or a path through load_record) makes the
    link; another task is refused with the task named."""
    monkeypatch.setattr(lk, "from_collectives", lambda rec: ("link", rec.task, rec.status))
    coll = {"status": "ok", "task": "collectives"}
    assert api.link_from("ib100", collectives=coll) == ("link", "collectives", "ok")
    assert api.link_from(collectives=Record.from_dict(coll)) == ("link", "collectives", "ok")

    def load_record(p):
        assert p == "a/dir"
        return Record.from_dict(coll), p

    monkeypatch.setattr(api, "load_record", load_record)
    assert api.link_from(collectives="a/dir") == ("link", "collectives", "ok")
    with pytest.raises(ProfileError, match="that record is task=train, not task=collectives"):
        api.link_from(collectives={"status": "ok", "task": "train"})


# ------------------------------------------------------------------------------------- base_config
def test_base_config_names_the_link_and_the_world_size():
    prof = Prof()
    assert api.base_config(prof) == Config.of(prof)
    link = lk.preset("ib100")
    cfg = api.base_config(prof, link, 8)
    assert cfg.link is link and cfg.link_name == "ib100" and cfg.world_size == 8
    assert (cfg.sync, cfg.bucket_cap) == ("ddp", 25.0)
    cfg = api.base_config(prof, None, 4)
    assert cfg.link is None and cfg.link_name == "own" and cfg.world_size == 4


# ------------------------------------------------------------------------------------------ predict
def test_predict_is_the_changed_configuration_against_the_own_with_the_same_draws(model):
    """Two calls: the own configuration (no own, no timeline), then base + link + world size +
    change, against the own prediction, both on one Draws(samples, seed); the changed one is
    returned."""
    prof = Prof()
    p = api.predict(
        prof, {"bucket": 100}, link="ib100", world_size=4, samples=33, seed=7, timeline=True
    )
    own, new = model.calls
    assert own.cfg == Config.of(prof) and own.own is None and own.timeline is False
    assert new.cfg.bucket_cap == 100.0 and new.cfg.world_size == 4 and new.cfg.link_name == "ib100"
    assert new.cfg.link == lk.preset("ib100")
    assert new.own is own.p and new.timeline is True and p is new.p
    assert own.draws is new.draws and (own.draws.n, own.draws.seed) == (33, 7)
    assert all(c.prof is prof for c in model.calls)


def test_predict_defaults_to_1000_draws_seed_0_and_no_change(model):
    p = api.predict(Prof())
    own, new = model.calls
    assert (own.draws.n, own.draws.seed) == (api.DEFAULT_SAMPLES, 0) == (1000, 0)
    assert new.cfg == own.cfg and new.timeline is False and p is new.p


def test_predict_takes_its_link_from_nccl_tests_or_collectives(model, monkeypatch):
    monkeypatch.setattr(lk, "from_nccl_tests", lambda parsed: lk.preset("ib200"))
    monkeypatch.setattr(lk, "from_collectives", lambda rec: lk.preset("25gbe"))
    api.predict(Prof(), nccl_tests={"x": 1})
    assert model.calls[-1].cfg.link_name == "ib200"
    api.predict(Prof(), collectives={"status": "ok", "task": "collectives"})
    assert model.calls[-1].cfg.link_name == "25gbe"


# ------------------------------------------------------------------------------------ predict_sweep
def test_sweep_runs_every_combination_once_in_order(model):
    """The grid's product, the last key fastest; a combination that gives a configuration already
    seen (bucket 25 is the run's own: 25 and 25.0) is predicted once; each row against the own
    prediction with its timeline, labelled against the run's own configuration."""
    prof = Prof()
    sw = api.predict_sweep(
        prof,
        {"bucket": ["25", "25.0", "100"], "accumulate": ["1", "4"]},
        link="ib100",
        samples=9,
        seed=2,
    )
    own, *rows = model.calls
    assert own.cfg == Config.of(prof) and own.own is None and own.timeline is True
    assert [(r.cfg.bucket_cap, r.cfg.accumulate) for r in rows] == [
        (25.0, 1),
        (25.0, 4),
        (100.0, 1),
        (100.0, 4),
    ]
    assert all(r.own is own.p and r.timeline is True and r.draws is own.draws for r in rows)
    assert (own.draws.n, own.draws.seed) == (9, 2)
    assert [r.label for r in sw.rows] == [
        "link=ib100",
        "accumulate=4 link=ib100",
        "bucket=100 link=ib100",
        "bucket=100 accumulate=4 link=ib100",
    ]
    assert sw.rows == [r.p for r in rows] and sw.own is own.p and sw.profile is prof
    assert sw.base == api.base_config(prof, lk.preset("ib100")) and sw.link == lk.preset("ib100")
    assert sw.not_modelled == NOT_MODELLED


def test_sweep_takes_its_link_from_nccl_tests_or_collectives(model, monkeypatch):
    monkeypatch.setattr(lk, "from_nccl_tests", lambda parsed: lk.preset("ib200"))
    monkeypatch.setattr(lk, "from_collectives", lambda rec: lk.preset("25gbe"))
    assert api.predict_sweep(Prof(), nccl_tests={"x": 1}).link == lk.preset("ib200")
    assert model.calls[-1].cfg.link_name == "ib200"
    coll = {"status": "ok", "task": "collectives"}
    assert api.predict_sweep(Prof(), collectives=coll).link == lk.preset("25gbe")
    assert model.calls[-1].cfg.link_name == "25gbe"


def test_sweep_without_a_grid_is_the_base_configuration(model):
    sw = api.predict_sweep(Prof(), world_size=4)
    own, row = model.calls
    assert row.cfg.world_size == 4 and sw.rows == [row.p] and sw.link is None
    assert sw.rows[0].label == "world_size=4"
    assert (own.draws.n, own.draws.seed) == (1000, 0)


# --------------------------------------------------------------------------------------- parse_grid
def test_parse_grid_splits_keys_and_values():
    assert api.parse_grid(["bucket=25,100", " optim =none,bf16,", "link=a=b"]) == {
        "bucket": ["25", "100"],
        "optim": ["none", "bf16"],
        "link": ["a=b"],
    }
    assert api.parse_grid([]) == {}
    with pytest.raises(ValueError, match=r"--sweep 'bucket': write key=v1,v2"):
        api.parse_grid(["bucket"])
    with pytest.raises(ValueError, match=r"--sweep 'bucket= , ': no values"):
        api.parse_grid(["bucket= , "])


# ------------------------------------------------------------------------------------------- saving
def _pred(step_s, sps, lo=None, hi=None, speedup=None, speedup_lo=None, speedup_hi=None):
    return NS(
        step_s=step_s,
        samples_per_s=sps,
        lo=lo,
        hi=hi,
        speedup=speedup,
        speedup_lo=speedup_lo,
        speedup_hi=speedup_hi,
        dominant="compute",
        label="bucket=100",
    )


def test_saved_is_one_less_the_inverse_speedup():
    """1.25x saves 20%, 2x 50%, 0.8x costs 25%; no speed-up, no saving."""
    assert api._saved(_pred(1, 1, speedup=1.25, speedup_lo=2.0, speedup_hi=0.8)) == pytest.approx(
        {"fraction": 0.2, "lo": 0.5, "hi": -0.25}
    )
    assert api._saved(_pred(1, 1)) == {"fraction": None, "lo": None, "hi": None}


def test_unexplained_range_when_the_model_under_predicts():
    """own 2.0 s [1.8, 2.2] at 100 samples/s (200 a step), measured 3.0 s: U = 1.0 s. The new step
    1.0 s at 150 samples/s holds 150 / 200 = 0.75 of the own step's samples. U kept: 1 - (1.0 +
    1.0) / (0.75 x 3.0) = 1/9; U removed: 1 - 1.0 / 2.25 = 5/9."""
    own, new = _pred(2.0, 100.0, 1.8, 2.2), _pred(1.0, 150.0)
    got = api.unexplained_range(NS(value=3.0), own, new)
    assert got == pytest.approx((1 / 9, 5 / 9, 1.0))


def test_unexplained_range_when_the_model_over_predicts():
    """measured 1.0 s against own 2.0 s [1.8, 2.2]: U = -1.0 s, the new step shrinks in proportion
    (1.0 x 1.0 / 2.0 = 0.5 s kept); per step 0.75: 1 - 0.5 / 0.75 = 1/3 kept, 1 - 1.0 / 0.75 =
    -1/3 removed."""
    own, new = _pred(2.0, 100.0, 1.8, 2.2), _pred(1.0, 150.0)
    got = api.unexplained_range(NS(value=1.0), own, new)
    assert got == pytest.approx((1 / 3, -1 / 3, -1.0))


def test_unexplained_range_is_none_inside_the_interval_or_without_a_step():
    """Both ends of the own interval count as inside; a missing or zero step says nothing."""
    own, new = _pred(1.0, 100.0, 0.9, 1.1), _pred(0.5, 150.0)
    assert api.unexplained_range(NS(value=0.9), own, new) is None
    assert api.unexplained_range(NS(value=1.1), own, new) is None
    assert api.unexplained_range(NS(value=1.1000001), own, new) is not None
    assert api.unexplained_range(NS(value=0.8999999), own, new) is not None
    assert api.unexplained_range(None, own, new) is None
    assert api.unexplained_range(NS(value=0.0), own, new) is None
    assert api.unexplained_range(NS(value=1.5), _pred(0.0, 100.0, 0.9, 1.1), new) is None
    assert api.unexplained_range(NS(value=1.5), own, _pred(0.0, 150.0)) is None


@pytest.fixture
def pair(monkeypatch):
    """saving's profile and its (own, changed) pair chosen by the test; the call kept."""
    state = NS(prof=None, own=None, new=None, calls=[])
    monkeypatch.setattr(api, "profile_of", lambda record: _the(record, state.prof))

    def own_and_changed(prof, change, **kw):
        state.calls.append((prof, change, kw))
        return state.own, state.new

    monkeypatch.setattr(api, "_own_and_changed", own_and_changed)
    return state


def test_saving_inside_the_models_interval(pair):
    """The own step agrees with the measured one: fraction 1 - 1/1.25 = 0.2, interval from the
    speed-up's (1/1.1 .. 1/1.5 saved), how from the prediction's label."""
    pair.prof = NS(step=Quantity(1.0, 0.9, 1.1))
    pair.own = _pred(1.0, 100.0, 0.9, 1.1)
    pair.new = _pred(0.8, 125.0, speedup=1.25, speedup_lo=1.1, speedup_hi=1.5)
    out = api.saving("rec", {"bucket": 100}, samples=5)
    assert pair.calls == [(pair.prof, {"bucket": 100}, {"samples": 5})]
    assert out["fraction"] == pytest.approx(0.2)
    assert (out["lo"], out["hi"]) == pytest.approx((1 - 1 / 1.1, 1 - 1 / 1.5))
    assert out["of"] == "time per sample" and out["dominant"] == "compute"
    assert out["prediction"] is pair.new
    assert out["how"] == (
        "the what-if model (bucket=100): predicted samples/s against the run's own configuration"
    )


def test_saving_widens_its_range_by_the_unexplained_time(pair):
    """measured 1.5 s against own 1.0 s [0.9, 1.1]: U = +500 ms, the range [0.05, 0.3] widens to
    hold 1/9 (U kept) and 5/9 (U removed): [0.05, 5/9]; how says so with the percentages."""
    pair.prof = NS(step=Quantity(1.5, 1.4, 1.6))
    pair.own = _pred(1.0, 100.0, 0.9, 1.1)
    pair.new = _pred(0.5, 150.0, speedup=1.25, speedup_lo=1 / 0.95, speedup_hi=1 / 0.7)
    out = api.saving("rec", {"bucket": 100})
    assert out["fraction"] == pytest.approx(0.2)
    assert (out["lo"], out["hi"]) == pytest.approx((0.05, 5 / 9))
    assert out["how"] == (
        "the what-if model (bucket=100): predicted samples/s against the run's own configuration"
        "; the model's step of the run's own configuration misses the measured one by +500 ms, so "
        "the range holds that time kept by the change (11%) or removed with it (56%)"
    )
    pair.new = _pred(0.5, 150.0, speedup=1.25, speedup_lo=1.0 / 0.5, speedup_hi=1 / 0.2)
    out = api.saving("rec", {"bucket": 100})
    assert (out["lo"], out["hi"]) == pytest.approx((1 / 9, 0.8))  # 0.5 and 0.8 hold 5/9, not 1/9


def test_saving_widens_both_ends_when_the_model_over_predicts(pair):
    """measured 0.5 s against own 1.0 s [0.9, 1.1]: U = -500 ms; 1/3 kept, -1/3 removed (see
    unexplained_range) widen [0.05, 0.3] to [-1/3, 1/3]."""
    pair.prof = NS(step=Quantity(0.5, 0.45, 0.55))
    pair.own = _pred(1.0, 100.0, 0.9, 1.1)
    pair.new = _pred(0.5, 150.0, speedup=1.25, speedup_lo=1 / 0.95, speedup_hi=1 / 0.7)
    out = api.saving("rec", {"bucket": 100})
    assert (out["lo"], out["hi"]) == pytest.approx((-1 / 3, 1 / 3))
    assert out["how"].endswith(
        "by -500 ms, so the range holds that time kept by the change (-33%) "
        "or removed with it (33%)"
    )


def test_saving_says_the_unexplained_time_to_3_digits_and_the_savings_in_percent(pair):
    """U = 12.34 ms (12.3 to 3 digits); the new step 12.34 ms holds per = 0.2468 / 1.01234 of the
    own step's samples, so per x measured = 0.2468 s = 20 U: U kept saves 1 - 2U / 20U = 90%, U
    removed 1 - U / 20U = 95%."""
    g, m = 0.01234, 1.01234
    per = 0.2468 / m
    pair.prof = NS(step=Quantity(m, 0.95 * m, 1.05 * m))
    pair.own = _pred(1.0, 100.0, 0.995, 1.005)
    pair.new = _pred(g, per * 100.0 / g, speedup=1.25, speedup_lo=1.1, speedup_hi=1.5)
    out = api.saving("rec", {})
    assert out["how"].endswith(
        "misses the measured one by +12.3 ms, so the range holds that time kept by the change "
        "(90%) or removed with it (95%)"
    )


def test_saving_predicts_with_the_default_draws(model, monkeypatch):
    """saving's own and changed predictions: 1000 draws, seed 0, no timeline, unless told."""
    prof = Prof(step=None)
    monkeypatch.setattr(api, "profile_of", lambda record: _the(record, prof))
    api.saving("rec", {"bucket": 100})
    own, new = model.calls
    assert (own.draws.n, own.draws.seed, new.timeline) == (1000, 0, False)
    assert new.cfg.bucket_cap == 100.0 and new.own is own.p
    api.saving("rec", {"bucket": 100}, seed=4, timeline=True)
    assert (model.calls[-1].draws.seed, model.calls[-1].timeline) == (4, True)


def test_saving_keeps_its_range_without_an_interval(pair):
    """No speed-up interval: nothing to widen (the unexplained time is not looked at)."""
    pair.prof = NS(step=Quantity(1.5, 1.4, 1.6))
    pair.own = _pred(1.0, 100.0, 0.9, 1.1)
    for lo, hi in ((None, 1.5), (1.1, None)):
        pair.new = _pred(0.5, 150.0, speedup=1.25, speedup_lo=lo, speedup_hi=hi)
        out = api.saving("rec", {})
        assert out["how"].endswith("configuration") and out["fraction"] == pytest.approx(0.2)
    pair.new = _pred(0.5, 150.0, speedup=None, speedup_lo=1.1, speedup_hi=1.5)
    out = api.saving("rec", {})
    assert out["how"].endswith("configuration") and out["lo"] == pytest.approx(1 - 1 / 1.1)


# -------------------------------------------------------------------------------- contention_cost
def _contention(s_compute, s_comm):
    return Contention(Quantity.exact(s_compute), Quantity.exact(s_comm), "calibrated", 0.25)


def test_contention_cost_is_the_run_without_contention_against_the_run(model, monkeypatch):
    """The own configuration predicted with both factors 1 ("none (what if)", the per-call cost
    kept), against the run's own (calibrated) on draws of the same size and seed; its saving
    1 - 1/1.25 = 0.2 and the calibration's how."""
    prof = Prof(contention=_contention(1.3, 1.0))
    monkeypatch.setattr(api, "profile_of", lambda record: _the(record, prof))
    model.speedups[""] = (1.25, 1.1, 1.5)
    model.speedups["(the run's own config)"] = (1.25, 1.1, 1.5)
    out = api.contention_cost("rec", samples=17, seed=3)
    own, free = model.calls
    assert own.prof is prof and own.cfg == Config.of(prof) and own.own is None
    c = free.prof.contention
    assert (c.s_compute.value, c.s_comm.value, c.how, c.per_call) == (
        1.0,
        1.0,
        "none (what if)",
        0.25,
    )
    assert c.s_compute.lo is None and c.s_comm.lo is None
    assert free.cfg == Config.of(prof) and free.own is own.p
    assert (own.draws.n, own.draws.seed, free.draws.n, free.draws.seed) == (17, 3, 17, 3)
    assert out == pytest.approx(
        {"fraction": 0.2, "lo": 1 - 1 / 1.1, "hi": 1 - 1 / 1.5, "how": "calibrated"}
    )
    prof.contention = _contention(1.0, 1.2)
    assert api.contention_cost("rec") is not None
    assert (model.calls[-1].draws.n, model.calls[-1].draws.seed) == (1000, 0)


def test_contention_cost_is_none_without_contention(model, monkeypatch):
    prof = Prof(contention=_contention(1.0, 1.0))
    monkeypatch.setattr(api, "profile_of", lambda record: prof)
    assert api.contention_cost("rec") is None and model.calls == []


# ------------------------------------------------------------------------------- prune, ruled_out
def test_ruled_out_needs_the_whole_interval_below_one_less_the_noise():
    assert api.ruled_out(_pred(1, 1, speedup_hi=0.979)) is True
    assert api.ruled_out(_pred(1, 1, speedup_hi=0.98)) is False  # 1 - 0.02: not below
    assert api.ruled_out(_pred(1, 1, speedup_hi=0.94), noise=0.05) is True
    assert api.ruled_out(_pred(1, 1, speedup_hi=0.95), noise=0.05) is False
    assert api.ruled_out(_pred(1, 1, speedup_hi=None)) is False


def test_prune_keeps_what_the_model_cannot_rule_out(monkeypatch):
    """Each candidate predicted on the one profile with the caller's options; those with the whole
    interval below 1 - noise skipped with their prediction, the rest kept in order."""
    prof = object()
    monkeypatch.setattr(api, "profile_of", lambda record: _the(record, prof))
    his = {"a": 0.97, "b": 0.99, "c": 0.5, "d": 0.979}
    seen = []

    def predict(p, change, **kw):
        seen.append((p, change, kw))
        return _pred(1, 1, speedup_hi=his[change["k"]])

    monkeypatch.setattr(api, "predict", predict)
    cands = [{"k": k} for k in "abcd"]
    keep, skipped = api.prune("rec", cands, samples=3)
    assert keep == [{"k": "b"}]
    assert [(c, p.speedup_hi) for c, p in skipped] == [
        ({"k": "a"}, 0.97),
        ({"k": "c"}, 0.5),
        ({"k": "d"}, 0.979),
    ]
    assert seen == [(prof, c, {"samples": 3}) for c in cands]
    keep, skipped = api.prune("rec", cands, noise=0.035)
    assert keep == [{"k": "a"}, {"k": "b"}, {"k": "d"}]
