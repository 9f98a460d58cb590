"""whatif/sources.py (issue 36: a module the mutation run covers): the published-figure checks'
arithmetic, each number worked out by hand. The model's meta-device analysis is replaced by a
hand-made one (seven small tensors, known FLOPs), the step model's predictions by stand-ins whose
samples/s are chosen per configuration, and the link's per-size times by fixed arrays; so the
sources' own sums (steps/s = samples/s / 32 / 8, the 1-GPU step's split, the memory-traffic
times, the nccl-tests busbw, the per-parameter loop) are checked apart from the model. The table,
its summary and the files are checked on hand-made checks. The real run over ViT-L/32 and VGG11
is test_whatif's test_source_checks_are_computed_with_their_inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

import whatif.profile as wprofile
import whatif.sources as src
import whatif.step as wstep
from whatif.links import PRESETS, preset
from whatif.quantity import Draws, Quantity

# a hand-made meta-device analysis: rank-1 PowerSGD at compression rate 2 compresses (5, 5) and
# (6, 6) (2 x (n + m) < n m), not (4, 4) (16 = 16), not (1, 10, 10) read as 1 x 100 (202 > 100);
# the biases are 1-D
FAKE = {
    "names": [
        "features.0.weight",
        "features.0.bias",
        "features.3.weight",
        "classifier.0.weight",
        "classifier.0.bias",
        "classifier.3.weight",
        "classifier.3.bias",
    ],
    "numel": [25, 5, 36, 16, 4, 100, 4],
    "element_size": [4] * 7,
    "shapes": [(5, 5), (5,), (6, 6), (4, 4), (4,), (1, 10, 10), (4,)],
    "order": [6, 5, 4, 3, 2, 1, 0],
    "ready": [1.0, 1.0, 0.8, 0.5, 0.5, 0.1, 0.1],
    "fwd_flops": 200,
    "bwd_flops": 398,
}
N_PARAMS = 190  # sum of FAKE's numel
COMPRESSED = (2, 61)  # (5, 5) and (6, 6): 25 + 36 elements


@pytest.fixture
def analysis(monkeypatch):
    """whatif.profile.analyse_model gives FAKE for the source's model at 224 pixels (the ViT or
    VGG11 the caller names), asked for under its canonical JSON (sorted keys, lru_cache's key)."""
    seen = []

    def analyse(model_json, image_size):
        model = json.loads(model_json)
        # the key synthetic() analyses the same model under (sorted keys): analysed once, cached
        assert model_json == json.dumps(model, sort_keys=True)
        seen.append((model["name"], image_size))
        return FAKE

    monkeypatch.setattr(wprofile, "analyse_model", analyse)
    return seen


def _q(q: Quantity):
    return (q.value, q.lo, q.hi)


# ------------------------------------------------------------------------------- Check's properties
def _check(predicted=2.0, lo=1.0, hi=3.0, published=2.5, below_one=False, note=""):
    return src.Check(
        "003", "m", "w", predicted, lo, hi, "x", published, "p", note, below_one=below_one
    )


def test_check_error_is_relative_to_the_published_figure():
    """error = (predicted - published) / published; none without a published figure (None or 0)."""
    assert _check(predicted=3.0, published=2.0).error == pytest.approx(0.5)
    assert _check(predicted=1.5, published=2.0).error == pytest.approx(-0.25)
    assert _check(published=None).error is None
    assert _check(published=0.0).error is None


def test_check_inside_holds_both_ends_of_the_interval():
    """inside: lo <= published <= hi, both ends included; None without a figure or an interval."""
    assert _check(lo=1.0, hi=3.0, published=1.0).inside is True
    assert _check(lo=1.0, hi=3.0, published=3.0).inside is True
    assert _check(lo=1.0, hi=3.0, published=0.999).inside is False
    assert _check(lo=1.0, hi=3.0, published=3.001).inside is False
    assert _check(published=None).inside is None
    assert _check(lo=math.nan, hi=math.nan, published=2.0).inside is None


def test_check_below_one_is_inside_when_the_interval_reaches_below_one():
    """A source that says only "slower": inside when lo < 1 (1 itself is not slower), whatever the
    published figure (none)."""
    assert _check(lo=0.99, hi=1.2, published=None, below_one=True).inside is True
    assert _check(lo=1.0, hi=1.2, published=None, below_one=True).inside is False
    assert _check(lo=math.nan, hi=math.nan, published=None, below_one=True).inside is False


# --------------------------------------------------------------------------------- memory, PowerSGD
def test_memory_time_streams_at_the_stated_share_of_peak():
    """nbytes / (peak x 0.8), interval from 0.9 (fastest) and 0.6 (slowest) of peak."""
    bw = 864e9  # L40S
    q = src._memory_time(864e9, "L40S", "what")
    assert _q(q) == pytest.approx((864e9 / (bw * 0.8), 864e9 / (bw * 0.9), 864e9 / (bw * 0.6)))
    assert q.source == "what"
    q = src._memory_time(1555e9 * 0.8, "A100", "a")
    assert q.value == pytest.approx(1.0)


def test_powersgd_counts_the_matrices_it_compresses():
    """Rank 1, rate 2: (5, 5) and (6, 6) compress, (4, 4) (16 = 2 x 8) and a (1, 10, 10) tensor
    (1 row of 100: 2 x 101 > 100) do not, 1-D biases are skipped, even between matrices."""
    prof = NS(shapes=FAKE["shapes"], params=NS(numel=FAKE["numel"]))
    assert src._psgd_matrices(prof) == COMPRESSED
    assert src._psgd_matrices(NS(shapes=[(4,), (3,)], params=NS(numel=[4, 3]))) == (0, 0)


# ------------------------------------------------------------------------------- source 003 profile
def test_vit_profile_splits_the_one_gpu_step_by_the_flop_ratio(analysis):
    """The 1-GPU step (1/steps_per_s, +-3%) less the SGD step (12 bytes per parameter at the GPU's
    memory speed) is forward + backward, split 1 : 1.99 (FAKE's backward/forward FLOPs); DDP's
    copies are 8 bytes and the bf16 cast 16 bytes per element; PowerSGD is 11 fp32 passes over the
    compressed matrices plus 8 launches of 5 [3, 10] us per matrix."""
    link = preset("pcie_shm")
    prof = src._vit_profile("L40S", 8.0, link)
    assert analysis and set(analysis) == {("vit_l_32", 224)}
    bw = 864e9

    def mem(nbytes):
        return (nbytes / (bw * 0.8), nbytes / (bw * 0.9), nbytes / (bw * 0.6))

    t1 = (0.125, 0.125 / 1.03, 0.125 * 1.03)
    assert _q(prof.step) == pytest.approx(t1)
    opt = mem(12 * N_PARAMS)
    assert _q(prof.optimizer) == pytest.approx(opt)
    fwd = (0.125 - opt[0]) / 2.99
    assert _q(prof.forward) == pytest.approx((fwd, fwd / 1.03, fwd * 1.03))
    assert _q(prof.backward) == pytest.approx((1.99 * fwd, 1.99 * fwd / 1.03, 1.99 * fwd * 1.03))
    assert _q(prof.copy_in) == pytest.approx(mem(8 * N_PARAMS))
    assert _q(prof.copy_out) == pytest.approx(mem(8 * N_PARAMS))
    assert _q(prof.cast["bf16"]) == pytest.approx(mem(16 * N_PARAMS))
    assert _q(prof.cast["fp16"]) == pytest.approx(mem(16 * N_PARAMS))
    passes = mem(11 * 4 * COMPRESSED[1])
    launches = (16 * 5e-6, 16 * 3e-6, 16 * 10e-6)  # 8 launches x 2 matrices
    assert _q(prof.powersgd) == pytest.approx(tuple(p + k for p, k in zip(passes, launches)))
    assert "16 kernel launches" in prof.powersgd.source
    assert (prof.world_size, prof.batch_per_rank, prof.sync, prof.bucket_cap) == (
        1,
        32,
        "local",
        2000.0,
    )
    assert (prof.device, prof.backend, prof.optim) == ("cuda", "nccl", "none")
    assert prof.link is link
    assert prof.model == "vit_l_32"
    assert list(prof.params.numel) == FAKE["numel"]
    # each input says where it came from (the what-if report lists them)
    assert prof.path == prof.record.result.device_name == "source 003, one L40S"
    assert [q.source for q in (prof.step, prof.optimizer, prof.forward, prof.backward)] == [
        "source 003: 8.0 steps/s on one L40S without DDP",
        "SGD step: 12 bytes per parameter",
        "forward: (1-GPU step - SGD step) / (1 + FLOP ratio)",
        "backward: forward x FLOP ratio",
    ]
    assert [
        q.source for q in (prof.copy_in, prof.copy_out, prof.cast["bf16"], prof.cast["fp16"])
    ] == [
        "DDP copy: 8 bytes per element",
        "DDP copy: 8 bytes per element",
        "bf16 hook: 16 bytes per element",
        "bf16 hook: 16 bytes per element",
    ]
    assert prof.powersgd.source == "PowerSGD: memory passes + 16 kernel launches"


def test_vit_profile_on_the_a100_uses_its_memory_speed(analysis):
    """The same split at 1,555 GB/s: the SGD step is 12 x 190 bytes / (1555e9 x 0.8), taken off
    the 1-GPU step before the FLOP split."""
    prof = src._vit_profile("A100", 5.0, preset("nvlink_a100"))
    assert prof.optimizer.value == pytest.approx(12 * N_PARAMS / (1555e9 * 0.8))
    assert prof.step.value == pytest.approx(0.2)
    # a step of 10 ns, of which the SGD step is 1.83 ns: forward (10 - 1.83) / 2.99 ns
    prof = src._vit_profile("A100", 1e8, preset("nvlink_a100"))
    opt = 12 * N_PARAMS / (1555e9 * 0.8)
    assert prof.forward.value == pytest.approx((1e-8 - opt) / 2.99)


# ----------------------------------------------------------------------------- source 003: the rows
SPS = {  # samples/s per configuration, chosen: steps/s on 8 ranks = sps / 256
    "own": 320.0,
    "ddp1": 288.0,
    "baseline": 512.0,
    "bucket_view": 640.0,
    "bf16": 768.0,
    "powersgd": 1536.0,
}
SHAPE = {  # each configuration's samples, relative to its point: distinct shapes, so ratios differ
    "baseline": np.linspace(0.8, 1.2, 41),
    "bucket_view": np.linspace(0.9, 1.1, 41),
    "bf16": np.linspace(0.7, 1.3, 41) ** 2,
}
COMM = [(0.0, 0.25, "b0", 0), (0.3, 0.35, "b1", 1)]  # 0.25 + 0.05 s of all-reduce


def _role(cfg) -> str:
    if cfg.world_size == 1:
        return {"local": "own", "ddp": "ddp1"}[cfg.sync]
    assert cfg.world_size == 8 and cfg.sync == "ddp" and cfg.bucket_cap == 2000.0
    if not cfg.static_graph:
        assert not cfg.bucket_view and cfg.optim == "none"
        return "baseline"
    assert cfg.bucket_view
    return {"none": "bucket_view", "bf16": "bf16", "powersgd": "powersgd"}[cfg.optim]


@pytest.fixture
def rows(monkeypatch):
    """sources.predict replaced: each configuration's samples/s from SPS (interval 0.9x-1.1x), its
    samples from SHAPE, the baseline's all-reduces COMM; every call kept."""
    calls = []

    def predict(prof, cfg, draws, own=None, timeline=False):
        role = _role(cfg)
        v = SPS[role]
        p = NS(
            role=role,
            cfg=cfg,
            samples_per_s=v,
            sps_lo=0.9 * v,
            sps_hi=1.1 * v,
            sps_samples=v * SHAPE.get(role, np.ones(41)),
            timeline={"comm": COMM} if timeline else None,
        )
        calls.append(NS(prof=prof, p=p, draws=draws, own=own, timeline=timeline))
        return p

    monkeypatch.setattr(src, "predict", predict)
    return calls


PROF = NS(
    world_size=1,
    sync="local",
    optim="none",
    bucket_cap=None,
    accumulate=1,
    bucket_view=False,
    static_graph=False,
    psgd_rank=1,
)


def _steps(role):
    v = SPS[role]
    return (v / 256, 0.9 * v / 256, 1.1 * v / 256)


def _ratio_interval(a, b):
    r = SPS[a] * SHAPE[a] / (SPS[b] * SHAPE[b])
    return tuple(np.percentile(r, [2.5, 97.5]))


def _row(c):
    return (c.source, c.machine, c.what, c.predicted, c.lo, c.hi, c.unit, c.published)


def test_vit_rows_predict_each_configuration_once_with_paired_draws(rows):
    """The run's own configuration, DDP at one GPU (bucket 2000, the link named), then at 8 GPUs
    the baseline, static graph + bucket view, and bf16 and PowerSGD on top: one Draws(samples,
    seed) for all, each against the own prediction, timelines for baseline, bf16, PowerSGD."""
    link = preset("pcie_shm")
    report = src.Report()
    src._vit_study_rows(report, PROF, "L40S", link, "v", {"one": 8.91, "ddp1": 8.4}, 77, 5)
    roles = [c.p.role for c in rows]
    assert roles == ["own", "ddp1", "baseline", "bucket_view", "bf16", "powersgd"]
    draws = rows[0].draws
    assert isinstance(draws, Draws) and (draws.n, draws.seed) == (77, 5)
    assert all(c.draws is draws for c in rows)
    assert all(c.prof is PROF for c in rows)
    assert rows[0].own is None and all(c.own is rows[0].p for c in rows[1:])
    assert [c.timeline for c in rows] == [False, False, True, False, True, True]
    assert rows[0].p.cfg.link is None
    assert all(c.p.cfg.link is link and c.p.cfg.link_name == link.name for c in rows[1:])
    assert report.timelines == {"8 x L40S (v)": [rows[2].p, rows[4].p, rows[5].p]}


def test_vit_rows_on_the_l40s_are_steps_per_second_and_the_bf16_ratio(rows):
    """L40S: DDP at one GPU in steps/s (samples/s / 32), the 8-GPU baseline in steps/s (samples/s /
    32 / 8) against 1/0.701, its all-reduce time (0.25 + 0.05 s = 300 ms) against 587 ms, bf16 /
    baseline (paired samples' ratio for the interval) against 1.65, PowerSGD against 7.5."""
    report = src.Report()
    pub = {"one": 8.91, "ddp1": 8.4}
    src._vit_study_rows(report, PROF, "L40S", preset("pcie_shm"), "v", pub, 50, 0)
    got = [_row(c) for c in report.checks]
    m = "8 x L40S (v)"
    v = SPS["ddp1"]
    assert got[0] == pytest.approx(
        ("003", "1 x L40S", got[0][2], v / 32, 0.9 * v / 32, 1.1 * v / 32, "steps/s", 8.4)
    )
    assert report.checks[0].published_text == "8.4 steps/s"
    assert got[1] == pytest.approx(("003", m, got[1][2], *_steps("baseline"), "steps/s", 1 / 0.701))
    assert got[2][:4] == ("003", m, got[2][2], pytest.approx(300.0))
    assert math.isnan(got[2][4]) and math.isnan(got[2][5])
    assert got[2][6:] == ("ms", 587.0)
    assert report.checks[2].note  # point value only
    lo, hi = _ratio_interval("bf16", "baseline")
    assert got[3] == pytest.approx(("003", m, got[3][2], 768 / 512, lo, hi, "x", 1.65))
    assert got[4] == pytest.approx(("003", m, got[4][2], *_steps("powersgd"), "steps/s", 7.5))
    assert [c.below_one for c in report.checks] == [False] * 5
    assert len(report.checks) == 5
    assert [c.what for c in report.checks] == [
        "DDP at one GPU (its gradient copies)",
        "8-GPU baseline (bucket_cap_mb=2000)",
        "the baseline's all-reduce time",
        "bf16 compression vs the 8-GPU baseline",
        "PowerSGD (rank 1)",
    ]
    assert [c.published_text for c in report.checks] == [
        "8.4 steps/s",
        "more than 6x slower than one GPU; NCCL 587 of 701 ms: 1/0.701 = 1.43 steps/s",
        "587 ms (nsys NCCL row)",
        "+65% (1.65x)",
        "7.5 steps/s",
    ]
    assert [bool(c.note) for c in report.checks] == [False, False, True, False, True]
    assert report.checks[4].note.startswith("the source's code leaves start_powerSGD_iter")


def test_vit_rows_on_the_a100_judge_bf16_by_its_direction(rows):
    """A100: the baseline against 5.17 x 0.92 (8% below one GPU), bf16 against the row before it
    (static graph + bucket view) judged by direction (below_one), PowerSGD with no figure."""
    report = src.Report()
    pub = {"one": 5.0, "ddp1": 4.5}
    src._vit_study_rows(report, PROF, "A100", preset("nvlink_a100"), "v", pub, 50, 0)
    got = [_row(c) for c in report.checks]
    m = "8 x A100 (v)"
    v = SPS["ddp1"]
    assert got[0] == pytest.approx(
        ("003", "1 x A100", got[0][2], v / 32, 0.9 * v / 32, 1.1 * v / 32, "steps/s", 4.5)
    )
    assert got[1] == pytest.approx(("003", m, got[1][2], *_steps("baseline"), "steps/s", 4.6))
    assert report.checks[1].published_text.endswith("5.0 x 0.92 = 4.6 steps/s")
    lo, hi = _ratio_interval("bf16", "bucket_view")
    assert got[2] == pytest.approx(("003", m, got[2][2], 768 / 640, lo, hi, "x", None))
    assert report.checks[2].below_one is True
    assert got[3][:7] == pytest.approx(("003", m, got[3][2], *_steps("powersgd"), "steps/s"))
    assert got[3][7] is None and not report.checks[3].below_one
    assert len(report.checks) == 4
    assert [c.what for c in report.checks] == [
        "DDP at one GPU (its gradient copies)",
        "8-GPU baseline (bucket_cap_mb=2000)",
        "bf16 compression vs the row before it (static graph + bucket view)",
        "PowerSGD (rank 1)",
    ]
    assert report.checks[2].published_text.startswith("slower (< 1x): 'the overhead")
    assert report.checks[2].note.startswith("inside = the interval reaches below 1")
    assert report.checks[3].published_text.startswith("not given (the best A100")
    assert [bool(c.note) for c in report.checks] == [False, False, True, False]


def test_vit_rows_knobs_only_skip_the_baseline_checks(rows):
    """The link from the source's own baseline checks only the knobs: bf16's ratio and PowerSGD."""
    report = src.Report()
    pub = {"one": 8.91, "ddp1": 8.4}
    src._vit_study_rows(
        report, PROF, "L40S", preset("pcie_shm"), "own", pub, 50, 0, knobs_only=True
    )
    assert [c.published for c in report.checks] == [1.65, 7.5]
    assert [c.machine for c in report.checks] == ["8 x L40S (own)"] * 2


def test_ratio_is_the_point_ratio_with_the_paired_samples_interval():
    """a / b at the points; the interval: the 2.5th and 97.5th percentiles of a's samples / b's."""
    a = NS(samples_per_s=3.0, sps_samples=np.arange(1.0, 101.0))
    b = NS(samples_per_s=2.0, sps_samples=np.full(100, 2.0))
    r, lo, hi = src._ratio(a, b)
    assert r == 1.5
    assert (lo, hi) == pytest.approx(tuple(np.percentile(np.arange(1.0, 101.0) / 2, [2.5, 97.5])))


# --------------------------------------------------------------------------- source 003: the study
def test_vit_study_runs_both_machines_and_the_link_from_the_baseline(monkeypatch):
    """L40S on pcie_shm and A100 on nvlink_a100 with the published 1-GPU figures, then L40S again
    on a link whose busbw is the source's own all-reduce: 2 x 7/8 x 1.226 GB / 0.587 s +-5%, alpha
    from pcie_shm, knobs only."""
    profiles, rows = [], []

    def vit_profile(gpu, steps_per_s, link):
        profiles.append((gpu, steps_per_s, link))
        return ("prof", len(profiles))

    def vit_rows(report, prof, gpu, link, variant, pub, samples, seed, knobs_only=False):
        rows.append((prof, gpu, link, variant, pub, samples, seed, knobs_only))
        report.timelines[len(rows)] = gpu  # the report passed on is the caller's

    monkeypatch.setattr(src, "_vit_profile", vit_profile)
    monkeypatch.setattr(src, "_vit_study_rows", vit_rows)
    report = src.Report(inputs=[src.Input("earlier", "v", "source", "s")])
    src.vit_study(report, 123, 4)
    assert report.timelines == {1: "L40S", 2: "A100", 3: "L40S"}
    assert [(g, s) for g, s, _ in profiles] == [("L40S", 8.91), ("A100", 5.17), ("L40S", 8.91)]
    assert profiles[0][2] == preset("pcie_shm") and profiles[1][2] == preset("nvlink_a100")
    own = profiles[2][2]
    v = 2 * 7 / 8 * 306_535_400 * 4 / 0.587
    assert _q(own.busbw) == pytest.approx((v, v / 1.05, v * 1.05), rel=1e-12)
    assert own.alpha == preset("pcie_shm").alpha
    assert own.name == "source 003's own L40S all-reduce"
    assert own.source == "source 003's baseline (587 ms NCCL all-reduce of 1.23 GB on 8 L40S)"
    assert own.busbw.source == "source 003: 587 ms for the baseline's all-reduce"
    l40s, a100 = {"one": 8.91, "ddp1": 8.40}, {"one": 5.17, "ddp1": 5.04}
    assert rows == [
        (("prof", 1), "L40S", profiles[0][2], "published link", l40s, 123, 4, False),
        (("prof", 2), "A100", profiles[1][2], "published link", a100, 123, 4, False),
        (("prof", 3), "L40S", own, "link from the source's baseline", l40s, 123, 4, True),
    ]
    assert [(i.name, i.origin) for i in report.inputs] == [
        ("earlier", "source"),
        ("1-GPU throughput without DDP", "source"),
        ("model, batch, buckets", "source"),
        ("forward/backward split", "elsewhere"),
        ("GPU memory bandwidth", "elsewhere"),
        ("DDP's gradient copies", "elsewhere"),
        ("SGD step", "elsewhere"),
        ("bf16 hook", "elsewhere"),
        ("PowerSGD hook", "elsewhere"),
        ("links", "elsewhere"),
        ("L40S link, second variant", "source"),
    ]
    _inputs_say_what_and_where(report.inputs)
    psgd = report.inputs[8].value
    assert "plus 8 kernel launches" in psgd
    assert psgd.endswith("serial (torch.cuda.synchronize in its decompression)")
    assert [i.source for i in report.inputs[1:3]] == [src.VIT_STUDY] * 2
    assert report.inputs[-1].source == src.VIT_STUDY
    assert report.inputs[4].source == src.GPU["L40S"]["source"] + "; " + src.GPU["A100"]["source"]
    assert (
        report.inputs[9].source
        == PRESETS["pcie_shm"].source + " | " + PRESETS["nvlink_a100"].source
    )


def _inputs_say_what_and_where(inputs):
    """Every input row has its name, value, origin and source written out (the table shows them)."""
    for i in inputs:
        assert all(isinstance(x, str) and x for x in (i.name, i.value, i.origin, i.source)), i


# ------------------------------------------------------------------------------------- source 000
def test_vgg11_thread_loop_and_ddp_checks(analysis, monkeypatch):
    """The link: busbw = 2 x 15/16 x 494.6 MB / 60 ms (60 ms x/÷ 1.1), alpha ib100's;
    the profile: 128 images of FAKE's per-image FLOPs (the analysis runs 2) at 15.7 TFLOPS x 0.6
    [0.8, 0.4], SGD with momentum 20 and the copies 8 bytes per parameter at 900 GB/s x 0.8 [0.9,
    0.6]; the loop: each classifier tensor's time, a size shared by two tensors counted twice,
    point from alpha-beta by hand; DDP's all-reduce time and exposed comm from its prediction."""
    sizes_seen, calls, made = [], [], []
    times = {
        16: np.linspace(1e-3, 2e-3, 40),
        64: np.full(40, 3e-3),
        400: np.linspace(5e-3, 9e-3, 40),
    }

    def link_times(link, n, sizes, draws):
        sizes_seen.append((link, n, list(sizes), draws))
        return [times[s] for s in sizes], [np.ones(40) for _ in sizes]

    def predict(prof, cfg, draws, own=None, timeline=False):
        calls.append((prof, cfg, draws, own, timeline))
        made.append(
            NS(
                timeline={"comm": [(0.0, 0.01, "b", 0), (0.02, 0.05, "b", 1)]},
                buckets=[1, 2, 3],
                parts={"exposed_comm_s": 0.004},
            )
        )
        return made[-1]

    monkeypatch.setattr(wstep, "link_times", link_times)
    monkeypatch.setattr(src, "predict", predict)
    report = src.Report(inputs=[src.Input("earlier", "v", "source", "s")])
    src.vgg11_thread(report, 40, 3)
    assert analysis and set(analysis) == {("vgg11", 224)}
    ((link, n, sizes, draws),) = sizes_seen
    assert n == 16 and sizes == [16, 64, 400]  # classifier tensors: 64, 16, 400, 16 bytes
    assert isinstance(draws, Draws) and (draws.n, draws.seed) == (40, 3)
    c = 2 * 15 / 16 * 123_642_856 * 4
    assert _q(link.busbw) == pytest.approx(
        (c / 0.060, c / (0.060 * 1.1), c * 1.1 / 0.060), rel=1e-14
    )
    assert link.alpha == preset("ib100").alpha
    assert link.name == "source 000's nccl-tests"
    assert link.busbw.source == "busbw from the source's nccl-tests figure"
    assert link.source.startswith("source 000: 471 MiB (the classifier's 494.6 MB) in ~60 ms")
    prof, cfg, ddp_draws, own, timeline = calls[0]
    assert len(calls) == 1 and ddp_draws is draws and own is None and timeline is True
    assert (cfg.sync, cfg.bucket_cap, cfg.world_size) == ("ddp", None, 16)
    assert (prof.world_size, prof.batch_per_rank, prof.sync, prof.link) == (
        16,
        128,
        "per_param",
        link,
    )
    assert (prof.device, prof.backend, prof.run_to_run_sd) == ("cuda", "nccl", 0.02)
    assert prof.path == "source 000, 16 x V100"
    # written out at full precision: a figure off in its 12th digit shows
    peak = 15.7 * 1e12
    fl = 128 * (200 / 2)
    assert _q(prof.forward) == pytest.approx(
        (fl / (peak * 0.6), fl / (peak * 0.8), fl / (peak * 0.4)), rel=1e-14, abs=0
    )
    fl = 128 * (398 / 2)
    assert _q(prof.backward) == pytest.approx(
        (fl / (peak * 0.6), fl / (peak * 0.8), fl / (peak * 0.4)), rel=1e-14, abs=0
    )
    assert (prof.forward.source, prof.backward.source) == (
        "VGG11 forward FLOPs / V100",
        "VGG11 backward FLOPs / V100",
    )

    def mem(b):  # the V100's 900 GB/s at 80% (point), 90% and 60% (the range's ends)
        return b / (900e9 * 0.8), b / (900e9 * 0.9), b / (900e9 * 0.6)

    assert _q(prof.optimizer) == pytest.approx(mem(20 * N_PARAMS), rel=1e-14, abs=0)
    assert _q(prof.copy_in) == pytest.approx(mem(8 * N_PARAMS), rel=1e-14, abs=0)
    assert _q(prof.copy_out) == pytest.approx(mem(8 * N_PARAMS), rel=1e-14, abs=0)
    assert prof.optimizer.source == "SGD with momentum: 20 bytes per parameter"
    assert prof.copy_in.source == prof.copy_out.source == "DDP copy: 8 bytes per element"
    loop = times[64] + 2 * times[16] + times[400]
    lo, hi = np.percentile(loop, [2.5, 97.5])
    alpha, busbw = preset("ib100").alpha.value, c / 0.060
    point = sum(30 * alpha + 2 * 15 / 16 * s / busbw for s in (64, 16, 400, 16))
    first, ddp_comm, exposed = report.checks
    assert (first.source, first.machine, first.unit, first.published) == (
        "000",
        "16 x V100, IB",
        "ms",
        280.682,
    )
    assert (first.predicted, first.lo, first.hi) == pytest.approx((1e3 * point, 1e3 * lo, 1e3 * hi))
    assert "(4 calls)" in first.what
    assert ddp_comm.predicted == pytest.approx(40.0)  # 10 + 30 ms
    assert "(3)" in ddp_comm.what
    assert exposed.predicted == pytest.approx(4.0)
    for ch in (ddp_comm, exposed):
        assert ch.published is None and ch.unit == "ms" and math.isnan(ch.lo) and math.isnan(ch.hi)
        assert ch.source == "000" and ch.machine == "16 x V100, IB"
    assert report.timelines == {"16 x V100 (source 000)": made}
    assert [(i.name, i.origin) for i in report.inputs] == [
        ("earlier", "source"),
        ("all-reduce speed", "source"),
        ("per-parameter loop", "source"),
        ("per-call latency", "elsewhere"),
        ("V100 compute", "elsewhere"),
    ]
    _inputs_say_what_and_where(report.inputs)
    assert [i.source for i in report.inputs[1:]] == [
        src.VGG11_THREAD,
        src.VGG11_THREAD,
        PRESETS["ib100"].source,
        src.GPU["V100"]["source"],
    ]
    assert [c.published_text for c in report.checks] == [
        "280.682 ms measured in PyTorch",
        "(no DDP figure published; compare the loop's 280.682 ms)",
        "(no DDP figure published; the loop's 280.682 ms are all exposed)",
    ]
    assert report.checks[0].note.startswith("the link explains ~1/4.6 of the measured loop")
    assert report.checks[1].note == "point value, the sum of the buckets' all-reduces"
    assert report.checks[2].note.startswith("the classifier's buckets are ready within")
    assert exposed.what == "DDP, default buckets: exposed communication per step"


# ------------------------------------------------------------------------------------------ output
def _report():
    r = src.Report()
    r.inputs = [
        src.Input("in one", "v1", "source", "doc A"),
        src.Input("in two", "v2", "elsewhere", "doc B"),
    ]
    r.checks = [
        src.Check("003", "M1", "w1", 3.0, 2.5, 4.0, "steps/s", 2.0, "2 steps/s"),  # +50%, no
        src.Check("003", "M2", "w2", 89.5, math.nan, math.nan, "ms", 587.0, "587 ms", "pt"),  # -85%
        src.Check("003", "M3", "w3", 1.0, 0.9, 1.2, "x", None, "slower", below_one=True),
        src.Check("003", "M4", "w4", 0.5, 0.4, 1.1, "x", None, "slower", below_one=True),
        src.Check("000", "M5", "w5", 2.0, 1.0, 3.0, "x", None, "none"),
        src.Check("000", "M6", "w6", 1.5, 1.25, 1.75, "x", 1.5, "1.5x", "n6"),  # 0%, yes
        src.Check("000", "M7", "w7", 1.0, 1.1, 1.2, "x", None, "slower", below_one=True),
        src.Check("000", "M8", "w8", 0.9, math.nan, math.nan, "x", None, "slower", below_one=True),
    ]
    return r


EXPECTED_MD = """# The what-if model against published figures

Regenerate: `CMD` (pure computation: no run, no GPU).

Every prediction is the model at the inputs' point values with its 95% prediction interval (Monte \
Carlo over the inputs' intervals); the error is (predicted - published) / published. These are \
checks against published numbers, not fits: no input was tuned to an outcome.

## Predicted against published

| source | machine | what | predicted [95% interval] | published | error | inside |
|---|---|---|---|---|---|---|
| 003 | M1 | w1 | 3.0 [2.5, 4.0] steps/s | 2 steps/s | +50% | no |
| 003 | M2 | w2 | 89.5 ms | 587 ms | -85% | - |
| 003 | M3 | w3 | 1.00 [0.90, 1.20] x | slower | direction wrong | yes |
| 003 | M4 | w4 | 0.50 [0.40, 1.10] x | slower | direction right | yes |
| 000 | M5 | w5 | 2.0 [1.0, 3.0] x | none | - | - |
| 000 | M6 | w6 | 1.50 [1.25, 1.75] x | 1.5x | +0% | yes |
| 000 | M7 | w7 | 1.000 [1.100, 1.200] x | slower | direction wrong | no |
| 000 | M8 | w8 | 0.9 x | slower | direction right | - |

Notes:

- M2, w2: pt
- M6, w6: n6

## What the checks say

- M1, w1: +50% (outside the interval)
- M2, w2: -85%
- M3, w3: predicted 1x, published slower: the point misses the direction, the interval reaches \
below 1
- M4, w4: predicted 0.5x, published slower: the point agrees, the interval reaches below 1
- M6, w6: +0% (inside the interval)
- M7, w7: predicted 1x, published slower: the point misses the direction, and the interval stays \
above 1
- M8, w8: predicted 0.9x, published slower: the point agrees, and the interval stays above 1

## Inputs

| input | value | from | source |
|---|---|---|---|
| in one | v1 | source | doc A |
| in two | v2 | elsewhere | doc B |

Link presets (whatif/links.py) and their sources:

"""


def test_markdown_rows_errors_and_inside():
    """Each check's row: its interval (or the point alone), error as a signed percentage, inside as
    yes/no ('-' without a figure or an interval, a direction check's included); a direction check:
    right when the point is below 1 (1 itself is wrong). Then the notes, the summary, the inputs
    and the link presets, each section after a blank line."""
    text = src.markdown(_report(), "CMD")
    head, presets = text.split("Link presets (whatif/links.py) and their sources:\n\n")
    assert head + "Link presets (whatif/links.py) and their sources:\n\n" == EXPECTED_MD
    assert presets.count("\n") == len(PRESETS) and presets.endswith("\n")
    assert all(line.startswith("- `") for line in presets.splitlines())


def test_markdown_without_notes_has_no_notes_section():
    r = src.Report(checks=[src.Check("003", "M", "w", 1.0, 0.5, 2.0, "x", 1.0, "1x")])
    assert "Notes:" not in src.markdown(r, "c")


def test_markdown_lists_every_link_preset_with_its_figures():
    """One line per preset: busbw and alpha with their intervals (pcie_shm: 24 [6, 35] GB/s, 5 [2,
    10] us)."""
    lines = src.markdown(src.Report(), "c").splitlines()
    listed = [ln for ln in lines if ln.startswith("- `")]
    assert len(listed) == len(PRESETS)
    pcie = next(ln for ln in listed if ln.startswith("- `pcie_shm`"))
    assert "busbw 24 [6, 35] GB/s, alpha 5 [2, 10] us. " in pcie
    assert pcie.endswith(PRESETS["pcie_shm"].source)
    a100 = next(ln for ln in listed if ln.startswith("- `nvlink_a100`"))
    assert "busbw 230.8 [200, 240] GB/s, alpha 1 [0.5, 3] us." in a100


def test_summary_says_each_checks_error_and_direction():
    """The summary: the error and whether the interval holds the figure; a direction check: agrees
    when the point is below 1, and whether the interval reaches below 1; no line without error."""
    out = src._summary(_report())
    assert out == [
        "- M1, w1: +50% (outside the interval)",
        "- M2, w2: -85%",
        "- M3, w3: predicted 1x, published slower: the point misses the direction, the interval "
        "reaches below 1",
        "- M4, w4: predicted 0.5x, published slower: the point agrees, the interval reaches "
        "below 1",
        "- M6, w6: +0% (inside the interval)",
        "- M7, w7: predicted 1x, published slower: the point misses the direction, and the "
        "interval stays above 1",
        "- M8, w8: predicted 0.9x, published slower: the point agrees, and the interval stays "
        "above 1",
    ]


def test_fmt_point_alone_without_an_interval():
    assert src._fmt(89.54, math.nan, math.nan, "ms") == "89.5 ms"
    assert src._fmt(8.4, 7.9, 9.0, "steps/s") == "8.4 [7.9, 9.0] steps/s"


# ------------------------------------------------------------------------------------ run and main
@pytest.fixture
def stubbed_run(monkeypatch):
    """vit_study and vgg11_thread add hand-made checks and timelines; plots are only recorded."""
    import whatif.report as wreport

    seen = NS(studies=[], plots=[])

    def vit(report, samples, seed):
        seen.studies.append(("vit", samples, seed))
        report.checks += _report().checks[:2]
        report.inputs += _report().inputs
        report.timelines["8 x L40S (published link)"] = ["p1"]

    def vgg(report, samples, seed):
        seen.studies.append(("vgg", samples, seed))
        report.timelines["16 x V100 (source 000)"] = ["p2", "p3"]
        report.timelines["X1 (b)"] = ["p4"]
        report.checks[0].predicted = np.float32(3.0)  # not a JSON number: written as text

    monkeypatch.setattr(src, "vit_study", vit)
    monkeypatch.setattr(src, "vgg11_thread", vgg)
    monkeypatch.setattr(
        wreport, "plot_timeline", lambda preds, path, title: seen.plots.append((preds, path, title))
    )
    return seen


def test_run_writes_the_table_and_the_checks_with_their_errors(tmp_path, stubbed_run):
    """run: both studies at the default 2000 samples and seed 0 into a new nested folder, the
    markdown with its command, the JSON (indented 2) with each check's error and inside, a
    timeline plot per machine with a slug file name (lower case, no leading or trailing _)."""
    out = tmp_path / "o" / "p"
    report = src.run(out)
    assert stubbed_run.studies == [("vit", 2000, 0), ("vgg", 2000, 0)]
    command = f"python -m whatif.sources --out {out} --samples 2000"
    md = (out / "source_predictions.md").read_text()
    assert f"Regenerate: `{command}`" in md and "| 003 | M1 | w1 |" in md
    raw = (out / "source_predictions.json").read_text()
    assert raw.startswith('{\n  "command": ')
    data = json.loads(raw)
    assert data["command"] == command
    assert [(c["machine"], c["error"], c["inside"]) for c in data["checks"]] == [
        ("M1", "0.5", False),  # float32's error is float32 too: text
        ("M2", pytest.approx(89.5 / 587 - 1), None),
    ]
    assert data["checks"][0]["predicted"] == "3.0" and data["checks"][0]["unit"] == "steps/s"
    assert data["inputs"][1] == {
        "name": "in two",
        "value": "v2",
        "origin": "elsewhere",
        "source": "doc B",
    }
    assert stubbed_run.plots == [
        (
            ["p1"],
            out / "source_8_x_l40s_published_link.png",
            "predicted steps: 8 x L40S (published link)",
        ),
        (
            ["p2", "p3"],
            out / "source_16_x_v100_source_000.png",
            "predicted steps: 16 x V100 (source 000)",
        ),
        (["p4"], out / "source_x1_b.png", "predicted steps: X1 (b)"),
    ]
    assert len(report.checks) == 2


def test_run_passes_samples_and_seed(tmp_path, stubbed_run):
    src.run(tmp_path, samples=7, seed=9)
    assert stubbed_run.studies == [("vit", 7, 9), ("vgg", 7, 9)]
    assert "--samples 7" in (tmp_path / "source_predictions.md").read_text()


def test_main_defaults_and_options(monkeypatch, capsys):
    """main: --out results/whatif, 2000 samples, seed 0 by default; integers from the command line;
    prints the table with its command; returns 0."""
    runs = []

    def run(out, samples, seed):
        runs.append((out, samples, seed))
        return _report()

    monkeypatch.setattr(src, "run", run)
    assert src.main([]) == 0
    assert runs == [(Path("results/whatif"), 2000, 0)]
    printed = capsys.readouterr().out
    assert "Regenerate: `python -m whatif.sources --out results/whatif --samples 2000`" in printed
    assert "| 003 | M1 | w1 | 3.0 [2.5, 4.0] steps/s | 2 steps/s | +50% | no |" in printed
    assert src.main(["--out", "x", "--samples", "5", "--seed", "3"]) == 0
    assert runs[1] == (Path("x"), 5, 3)
    assert "--out x --samples 5`" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        src.main(["--help"])
    helped = capsys.readouterr().out
    assert "The model against published figures" in helped and "python -m whatif.sources" in helped
    assert "Pure computation" not in helped  # the docstring's first paragraph only
