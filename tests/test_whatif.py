"""The what-if model (whatif/): bucket assignment against torch's own, the alpha-beta fit on
synthetic data, the overlap simulation on hand-made timelines, the interval arithmetic, the command,
the source checks and the validation command on hand-made records. Fast: no process group, no
training run (tests/test_whatif_runs.py has those)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from comm import buckets as bk
from whatif import links as lk
from whatif.quantity import Draws, Quantity, interval
from whatif.step import BucketPlan, Seg, simulate_backward

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "results" / "runs"
MIB = 1 << 20


def _record(rel: str) -> dict:
    return json.loads((RUNS / rel / "run_record.json").read_text())


# ------------------------------------------------------------------------------------------ buckets
def test_limits_follow_torchs_bucket_config():
    assert bk.limits(None) == [MIB, 25 * MIB]  # bucket_cap_mb left unset: first bucket 1 MiB
    assert bk.limits("default") == [MIB, 25 * MIB]
    assert bk.limits(25) == [
        25 * MIB,
        25 * MIB,
    ]  # an explicit 25 also caps the first bucket at 25 MiB
    assert bk.limits(100.0) == [100 * MIB, 100 * MIB]


def test_resnet18_buckets_match_pytorch_issue_48880():
    """pytorch/pytorch#48880 lists ResNet-18's buckets at DDP's defaults: 2,052,000 / 28,852,224 /
    15,853,824 bytes."""
    import torch
    import torchvision

    with torch.device("meta"):
        m = torchvision.models.resnet18()
    ps = list(m.parameters())
    got = bk.assign([p.numel() for p in ps], [4] * len(ps), list(reversed(range(len(ps)))), None)
    assert [b.nbytes for b in got] == [2_052_000, 28_852_224, 15_853_824]
    assert got[0].params == (61, 60)  # fc.bias, fc.weight: the gradients ready first


@pytest.mark.parametrize(
    "run",
    [
        "vgg11_accumulate/0",
        "vgg11_bucket100/0",
        "ddp_knobs_vgg11/2",
        "vit_ddp_optimizations/0",
        "vit_ddp_optimizations/5",
        "vit_ddp_optimizations/6",
        "time_to_verdict/fixed/0",
    ],
)
def test_buckets_match_what_ddp_built_in_committed_runs(run):
    """torch's own answer: the rebuilt bucket sizes DDP reported in real runs (VGG11 and ViT-L/32 at
    25, 100 and 2000 MB), from the model's parameter sizes and autograd's ready order alone."""
    from whatif.profile import from_record

    rec = _record(run)
    prof = from_record(rec, run)
    got = [
        b.nbytes
        for b in bk.assign(
            prof.params.numel, prof.params.element_size, prof.params.order, prof.bucket_cap
        )
    ]
    assert got == rec["result"]["ddp"]["buckets"]["sizes_bytes"]


def test_assign_rejects_a_ready_order_that_is_not_a_permutation():
    with pytest.raises(ValueError, match="permutation"):
        bk.assign([10, 10], [4, 4], [0, 0], 25)


# ----------------------------------------------------------------------------------- alpha-beta fit
def _synthetic_points(alpha, busbw, n, rng, noise=0.02):
    sizes = [2**k for k in range(10, 28, 2)]
    pts = []
    for s in sizes:
        t = 2 * (n - 1) * alpha + 2 * (n - 1) / n * s / busbw
        m = t * math.exp(rng.normal(0, noise))
        pts.append((s, m, m * math.exp(-1.96 * noise), m * math.exp(1.96 * noise)))
    return pts


def test_alpha_beta_fit_recovers_known_parameters():
    rng = np.random.default_rng(1)
    alpha, busbw, n = 20e-6, 5e9, 4
    fit = lk.fit_alpha_beta(
        _synthetic_points(alpha, busbw, n, rng), n, name="synthetic", source="test", resamples=400
    )
    assert fit.alpha.value == pytest.approx(alpha, rel=0.15)
    assert fit.busbw.value == pytest.approx(busbw, rel=0.05)
    assert fit.alpha.lo <= fit.alpha.value <= fit.alpha.hi
    assert fit.point_time(1 << 24, n) == pytest.approx(
        2 * 3 * alpha + 1.5 * (1 << 24) / busbw, rel=0.05
    )


def test_alpha_beta_fit_intervals_cover_the_truth():
    """Over 30 synthetic data sets with 2% noise, the 95% intervals hold the true busbw and alpha
    most of the time."""
    alpha, busbw, n = 50e-6, 1e9, 2
    hits_b = hits_a = 0
    trials = 30
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        fit = lk.fit_alpha_beta(
            _synthetic_points(alpha, busbw, n, rng),
            n,
            name="s",
            source="t",
            resamples=300,
            seed=seed,
        )
        hits_b += fit.busbw.lo <= busbw <= fit.busbw.hi
        hits_a += fit.alpha.lo <= alpha <= fit.alpha.hi
    assert hits_b >= 0.8 * trials and hits_a >= 0.8 * trials


def test_ring_and_tree_arithmetic():
    link = lk.Link("x", Quantity.exact(10e-6), Quantity.exact(10e9), "test")
    assert link.point_time(1e9, 8) == pytest.approx(14 * 10e-6 + 1.75 * 1e9 / 10e9)
    assert link.point_time(1e9, 1) == 0.0
    tree = lk.Link("t", Quantity.exact(10e-6), Quantity.exact(10e9), "test", tree=True)
    # a small message on 64 ranks: the tree's 2 log2(64) = 12 latency steps beat the ring's 126
    assert tree.point_time(8, 64) == pytest.approx(12 * 10e-6 + 2 * 63 / 64 * 8 / 10e9)


def test_every_preset_has_a_public_source_and_an_interval():
    for p in lk.PRESETS.values():
        link = p.link()
        assert link.busbw.lo <= link.busbw.value <= link.busbw.hi and link.busbw.has_interval
        assert link.alpha.has_interval and p.source
        assert (
            "/" not in p.source.split(":")[0]
            or "nccl" in p.source.lower()
            or "IEEE" in p.source
            or "InfiniBand" in p.source
        )


def test_nccl_tests_file_is_a_link_interpolated_at_its_rank_count():
    from comm.nccl_tests import read, time_at

    parsed = read(ROOT / "tests/fixtures/nccl_tests/all_reduce_perf_2xH100.log")
    link = lk.from_nccl_tests(parsed)
    assert link.point_time(1 << 20, parsed["ranks"] or 2) == pytest.approx(
        time_at(parsed, 1 << 20, parsed["ranks"] or 2)
    )


def test_collectives_record_is_a_link():
    from base.record import Record

    link = lk.from_collectives(Record.read(RUNS / "collectives/0"))
    assert link.measured_ranks == 2 and link.busbw.value > 0 and link.busbw.has_interval


def test_emulated_link_keeps_the_host_floor():
    floor = lk.Link("host", Quantity.exact(50e-6), Quantity.exact(0.7e9), "test")
    slow = lk.emulated(1.0, floor)
    fast = lk.emulated(10.0, floor)
    assert slow.floor is floor and slow.alpha is floor.alpha
    assert slow.busbw.value == pytest.approx(1e9 / 8 * lk.LINK_SHARE[0])
    assert lk.LINK_SHARE == (0.941, 0.941, 0.949)  # python -m whatif.calibrate link_share
    assert (
        fast.busbw.value > floor.busbw.value
    )  # the model takes the slower of the two (step.link_times)


# ----------------------------------------------------------------------------------- the simulation
def _plan(ready_fracs, nbytes=(1, 1), serial=False, pre=()):
    out = []
    for k, (f, b) in enumerate(zip(ready_fracs, nbytes)):
        out.append(BucketPlan(k, b, f, 0.0, list(pre), [Seg("net", f"b{k}", b)], serial))
    return out


def test_one_bucket_at_the_end_does_not_overlap():
    r = simulate_backward(
        _plan([1.0], (1,)), B=1.0, copy_in=0.0, costs={}, net_time=[[0.4]], duty=[[1.0]]
    )
    assert r.end == pytest.approx(1.4) and r.compute_end == pytest.approx(1.0)


def test_an_early_bucket_hides_behind_backward():
    r = simulate_backward(
        _plan([0.2, 1.0]),
        B=1.0,
        copy_in=0.0,
        costs={},
        net_time=[[0.3], [0.1]],
        duty=[[1.0], [1.0]],
        record=True,
    )
    assert r.end == pytest.approx(1.1)  # bucket 0 ran 0.2-0.5 beside compute; bucket 1 1.0-1.1
    assert [(round(a, 6), round(b, 6)) for a, b, _, _ in r.lane.comm] == [(0.2, 0.5), (1.0, 1.1)]


def test_buckets_queue_on_one_stream_in_order():
    r = simulate_backward(
        _plan([0.2, 1.0]),
        B=1.0,
        copy_in=0.0,
        costs={},
        net_time=[[2.0], [0.1]],
        duty=[[1.0], [1.0]],
        record=True,
    )
    assert r.end == pytest.approx(
        2.3
    )  # bucket 1 is ready at 1.0 but waits for bucket 0 (until 2.2)
    assert r.lane.comm[1][0] == pytest.approx(2.2)


def test_contention_slows_compute_while_an_all_reduce_runs():
    # compute at half speed while bucket 0 (0.3 s) runs from 0.2: 0.15 of work done by 0.5, 0.65
    # left -> ends at 1.15
    r = simulate_backward(
        _plan([0.2, 1.0]),
        B=1.0,
        copy_in=0.0,
        costs={},
        net_time=[[0.3], [0.0]],
        duty=[[1.0], [1.0]],
        s_c=2.0,
        s_m=1.0,
    )
    assert r.compute_end == pytest.approx(1.15)
    # a duty of 0.5 (half of the all-reduce is waiting on the wire) halves the slow-down: 1 + (2-1)
    # x 0.5 = 1.5
    r = simulate_backward(
        _plan([0.2, 1.0]),
        B=1.0,
        copy_in=0.0,
        costs={},
        net_time=[[0.3], [0.0]],
        duty=[[0.5], [1.0]],
        s_c=2.0,
        s_m=1.0,
    )
    assert r.compute_end == pytest.approx(0.2 + 0.3 + (0.8 - 0.3 / 1.5))


def test_a_serial_hook_blocks_compute_until_its_bucket_is_done():
    r = simulate_backward(
        _plan([0.2, 1.0], serial=True),
        B=1.0,
        copy_in=0.0,
        costs={},
        net_time=[[0.3], [0.1]],
        duty=[[1.0], [1.0]],
    )
    assert r.compute_end == pytest.approx(1.3) and r.end == pytest.approx(1.4)


def test_pre_hook_work_runs_on_the_compute_thread():
    plan = _plan([0.5, 1.0], pre=[("cast", 0.5)])
    r = simulate_backward(
        plan, B=1.0, copy_in=0.0, costs={"cast": 0.2}, net_time=[[0.1], [0.1]], duty=[[1.0], [1.0]]
    )
    # each launch costs 0.1 of compute first: bucket 0 goes at 0.6, bucket 1 at 1.2 (1.0 of
    # gradients + 2 x 0.1), and its all-reduce ends at 1.3
    assert r.first_launch == pytest.approx(0.6)
    assert r.compute_end == pytest.approx(1.1) and r.end == pytest.approx(1.3)


def test_copies_into_buckets_delay_the_ready_times():
    plan = [BucketPlan(0, 1, 0.5, 0.5, [], [Seg("net", "b0", 1)], False)]
    r = simulate_backward(plan, B=1.0, copy_in=0.2, costs={}, net_time=[[0.1]], duty=[[1.0]])
    assert r.first_launch == pytest.approx(0.6)  # half the gradient and half of the copies done
    assert r.end == pytest.approx(1.2)


# ------------------------------------------------------------------------------ interval arithmetic
def test_split_lognormal_sampling_keeps_the_interval():
    q = Quantity(10.0, 8.0, 15.0)
    x = q.sample(np.random.default_rng(0), 200_000)
    assert np.median(x) == pytest.approx(10.0, rel=0.01)
    lo, hi = interval(x)
    assert lo == pytest.approx(8.0, rel=0.02) and hi == pytest.approx(15.0, rel=0.02)


def test_interval_of_a_sum_is_narrower_than_the_sum_of_intervals():
    d = Draws(50_000, 0)
    a, b = Quantity(1.0, 0.9, 1.1), Quantity(1.0, 0.9, 1.1)
    lo, hi = interval(d.get("a", a) + d.get("b", b))
    assert (
        2.0 - 0.2 < lo < 2.0 - 0.12 and 2.0 + 0.12 < hi < 2.0 + 0.2
    )  # ~ sqrt(2) x 0.1 either side


def test_exact_quantities_have_no_width_and_draws_are_shared_by_name():
    d = Draws(100, 3)
    assert np.all(d.get("x", Quantity.exact(2.0)) == 2.0)
    q = Quantity(1.0, 0.5, 2.0)
    assert np.array_equal(d.get("y", q), d.get("y", q))
    assert not np.array_equal(d.get("y", q), Draws(100, 4).get("y", q))
    # a ratio of two predictions sharing an input: the shared input cancels
    y = d.get("y", q)
    assert np.allclose((3 * y) / (2 * y), 1.5)


def test_low_coverage_intervals_are_widened_to_95():
    d = {"median": 10.0, "ci_lo": 9.0, "ci_hi": 11.0, "ci_level": 0.75}
    q = Quantity.from_describe(d)
    assert q.lo < 9.0 and q.hi > 11.0
    assert (
        Quantity.from_describe({"median": 1.0, "ci_lo": None, "ci_hi": None}).has_interval is False
    )


def test_quantity_refuses_an_interval_without_its_value():
    with pytest.raises(ValueError):
        Quantity(5.0, 6.0, 7.0)


# -------------------------------------------------------------------------------------- predictions
def test_the_model_reproduces_a_committed_run_and_its_knobs_move_the_step_the_right_way():
    from whatif.api import predict_sweep

    sw = predict_sweep(
        RUNS / "vgg11_accumulate/0",
        {"bucket": ["25", "2000"], "accumulate": ["1", "4"]},
        samples=200,
    )
    own = sw.own
    measured = sw.profile.step.value
    assert abs(own.step_s - measured) / measured < 0.10 and own.lo <= measured <= own.hi
    rows = {r.label: r for r in sw.rows}
    assert rows["bucket=2000"].step_s > own.step_s  # one bucket: nothing overlaps
    assert rows["accumulate=4"].samples_per_s > own.samples_per_s  # one sync per 4 micro-batches
    assert rows["accumulate=4"].speedup_lo > 1


def test_world_size_and_a_link_preset_change_the_prediction():
    from whatif.api import predict

    slow = predict(RUNS / "vgg11_accumulate/0", {"world_size": 8}, link="1gbe", samples=200)
    own = predict(RUNS / "vgg11_accumulate/0", samples=200)
    assert slow.dominant == "exposed comm" and slow.step_s > 2 * own.step_s
    assert slow.speedup < 8 / 2  # 4x the ranks, well under 4x the samples/s
    with pytest.raises(ValueError, match="unknown knob"):
        predict(RUNS / "vgg11_accumulate/0", {"bukcet": 100}, samples=200)


def test_ranks_sharing_a_cpu_host_slow_each_ranks_compute():
    from dataclasses import replace

    from whatif.profile import from_record
    from whatif.step import Config, changed, cpu_share

    prof = from_record(_record("vgg11_accumulate/0"), "x")  # 2 ranks x 1 thread on 2 cores
    base = Config.of(prof)
    assert cpu_share(prof, base).value == 1.0
    # same host: half a core each; time x 2 ** e, e = 0.577 [0.298, 0.922] (CORE_SCALING)
    four = cpu_share(prof, changed(base, {"world_size": 4}))
    assert four.value == pytest.approx(1.4918, abs=1e-4)
    assert (four.lo, four.hi) == pytest.approx((2**0.298, 2**0.922))
    one = cpu_share(
        prof, changed(base, {"world_size": 1, "sync": "local"})
    )  # one rank gets both cores: not twice as fast (perfect scaling, the best case)
    assert one.value == pytest.approx(0.6703, abs=1e-4)
    assert (one.lo, one.hi) == pytest.approx((0.5**0.922, 0.5**0.298))
    # a network link between hosts: more hosts, the same ranks per host
    assert (
        cpu_share(prof, replace(changed(base, {"world_size": 8}), link=lk.preset("10gbe"))).value
        == 1.0
    )
    assert cpu_share(
        prof, changed(base, {"world_size": 8, "ranks_per_host": 1})
    ).value == pytest.approx(0.5**0.577)


def test_a_one_rank_run_needs_a_link_to_predict_ddp():
    from whatif.api import predict

    with pytest.raises(ValueError, match="--link"):
        predict(RUNS / "vgg11_local/0", {"sync": "ddp", "world_size": 2}, samples=200)
    p = predict(RUNS / "vgg11_local/0", {"sync": "ddp", "world_size": 8}, link="ib100", samples=200)
    # DDP's default buckets (the run had none): the first capped at 1 MiB, so fc3 (16.4 MB) gets one
    # of its own
    assert p.samples_per_s > 0 and p.buckets[0] == 16_388_000 and len(p.buckets) == 5


@pytest.mark.parametrize(
    "run",
    [
        "vgg11_local/0",
        "vgg11_sync/1",
        "ddp_knobs_vgg11/6",
        "vit_ddp_overhead/1",
        "vit_ddp_optimizations/4",
        "time_to_verdict/fixed/2",
    ],
)
def test_runs_on_committed_records_of_every_kind(run):
    from whatif.api import predict

    p = predict(RUNS / run, samples=200)
    assert p.lo <= p.step_s <= p.hi and p.samples_per_s > 0


def test_old_records_say_what_they_assume():
    from whatif.profile import from_record

    prof = from_record(_record("vgg11_accumulate/0"), "x")
    text = " ".join(prof.notes)
    assert "not measured" in text and "FLOP" in text


# -------------------------------------------------------------------------------------- the command
def test_command_writes_table_json_and_timeline(tmp_path, capsys):
    from whatif.__main__ import main

    rc = main(
        [
            str(RUNS / "vgg11_accumulate/0"),
            "--sweep",
            "bucket=25,2000",
            "optim=none,bf16",
            "--samples",
            "200",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "measured step" in out and "speed-up" in out and "not modelled" in out
    for name in ("whatif.md", "whatif.csv", "whatif.json", "whatif_timeline.png"):
        assert (tmp_path / name).stat().st_size > 0
    data = json.loads((tmp_path / "whatif.json").read_text())
    assert len(data["rows"]) == 4 and data["rows"][0]["step_lo"] <= data["rows"][0]["step_s"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["/nonexistent/run"], "does not exist"),
        ([str(RUNS / "collectives/0")], "task=collectives"),
        ([str(RUNS / "vgg11_accumulate/0"), "--sweep", "bukcet=100"], "unknown knob"),
        ([str(RUNS / "vgg11_accumulate/0"), "--sweep", "bucket"], "key=v1,v2"),
        ([str(RUNS / "vgg11_accumulate/0"), "--link", "56k_modem"], "unknown link"),
        ([str(RUNS / "vgg11_accumulate/0"), "--nccl-tests", "/nonexistent.log"], "cannot read"),
    ],
)
def test_command_refuses_bad_input_in_one_line(args, says, capsys, tmp_path):
    from whatif.__main__ import main

    assert main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---------------------------------------------------------------------------------------- the probe
def test_grad_ready_probe_on_a_local_model():
    import torch
    from omegaconf import OmegaConf

    from device.cpu import Device
    from tasks.train.grad_ready import grad_ready_probe
    from tasks.train.sync import Sync

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cfg = OmegaConf.create({"cuda_graphs": False, "probe_steps": 2, "optim": {"name": "none"}})
    batches = iter([(torch.randn(5, 8), torch.randint(0, 4, (5,))) for _ in range(4)])
    out = grad_ready_probe(
        cfg,
        Sync(model),
        torch.nn.CrossEntropyLoss(),
        lambda: torch.autocast("cpu", enabled=False),
        batches,
        Device(),
    )
    assert out["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert sorted(out["order"]) == [0, 1, 2, 3] and set(out["order"][:2]) == {
        2,
        3,
    }  # the last layer first
    alone = out["modes"]["alone"]
    assert "with_sync" not in out["modes"] and len(alone["ready_s"]) == 2
    for rep, total in zip(alone["ready_s"], alone["backward_s"]):
        assert all(0 <= t <= total for t in rep)
    assert set(out["costs"]) >= {"copy_in_s", "copy_out_s", "cast_bf16_s", "powersgd"}
    assert out["costs"]["cast_timed"] == "bf16" and out["costs"]["powersgd"]["matrices"] == 2
    assert all(p.grad is None for p in model.parameters())


def test_grad_ready_probe_keeps_powersgd_inside_its_budget():
    import torch
    from omegaconf import OmegaConf

    from device.cpu import Device
    from tasks.train.grad_ready import _costs

    params = [torch.nn.Parameter(torch.zeros(64, 64)), torch.nn.Parameter(torch.zeros(64))]
    cfg = OmegaConf.create({"optim": {"name": "none"}})
    costs = _costs(cfg, params, Device(), budget_s=0.0)
    assert "over the probe's budget" in costs["powersgd"]["skipped"]
    cfg = OmegaConf.create({"optim": {"name": "powersgd", "rank": 2, "min_compression_rate": 2.0}})
    assert (
        _costs(cfg, params, Device(), budget_s=0.0)["powersgd"]["rank"] == 2
    )  # the run's own: always timed


# ------------------------------------------------------------------------------------------ sources
def test_source_checks_are_computed_with_their_inputs(tmp_path):
    from whatif.sources import run

    report = run(tmp_path, samples=200)
    checks = {(c.machine, c.what): c for c in report.checks}
    assert any(c.published == 7.5 for c in report.checks)  # PowerSGD on 8 L40S
    assert any(c.published == 280.682 for c in report.checks)  # source 000's per-parameter loop
    assert {i.origin for i in report.inputs} == {"source", "elsewhere"}
    a100 = next(
        c
        for (m, w), c in checks.items()
        if m.startswith("8 x A100") and w.startswith("8-GPU baseline")
    )
    assert a100.published == pytest.approx(5.17 * 0.92)
    text = (tmp_path / "source_predictions.md").read_text()
    assert "NVIDIA/nccl#527" in text and "Regenerate" in text


# ----------------------------------------------------------------------------------------- validate
def test_validation_on_hand_made_records(tmp_path):
    """Targets whose measured step is the model's own prediction (error 0, inside) and one 30%
    slower (the worst row, outside its interval): MAPE, worst row and coverage come out as built."""
    from whatif.api import predict
    from whatif.validate import markdown, validate

    src = _record("vgg11_accumulate/0")
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "run_record.json").write_text(json.dumps(src))
    made = []
    for i, (change, factor) in enumerate(
        [({"bucket": 100}, 1.0), ({"accumulate": 4}, 1.0), ({"bucket": 2000}, 1.3)], start=1
    ):
        p = predict(src, change, samples=200)
        rec = copy.deepcopy(src)
        r = rec["result"]
        if "bucket" in change:
            r["ddp"]["bucket_cap_mb"] = r["bucket_mb"] = float(change["bucket"])
        if "accumulate" in change:
            r["accumulate"] = change["accumulate"]
        m = p.step_s * factor
        r["step_time_s"] = {**r["step_time_s"], "median": m, "ci_lo": m * 0.98, "ci_hi": m * 1.02}
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "run_record.json").write_text(json.dumps(rec))
        made.append(p)
    v = validate([tmp_path], samples=200)
    assert len(v.rows) == 3
    errors = sorted(round(abs(r.error), 3) for r in v.rows)
    assert errors[:2] == [0.0, 0.0] and errors[2] == pytest.approx(0.3 / 1.3, abs=0.01)
    assert v.worst.change == "bucket=2000" and not v.worst.inside
    assert v.coverage[0] == pytest.approx(2 / 3) and v.mape == pytest.approx(
        0.3 / 1.3 / 3, abs=0.005
    )
    text = markdown(v, "python -m whatif.validate x")
    assert "MAPE" in text and "MISSED" in text and "coverage" in text


def test_validation_takes_a_source_from_outside_the_dirs(tmp_path):
    from whatif.api import predict
    from whatif.validate import validate

    src = _record("vgg11_accumulate/0")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "run_record.json").write_text(json.dumps(src))
    rec = copy.deepcopy(src)
    rec["result"]["world_size"] = 4
    m = predict(src, {"world_size": 4}, samples=200).step_s
    rec["result"]["step_time_s"] = {
        **rec["result"]["step_time_s"],
        "median": m,
        "ci_lo": m * 0.98,
        "ci_hi": m * 1.02,
    }
    (tmp_path / "ws4" / "0").mkdir(parents=True)
    (tmp_path / "ws4" / "0" / "run_record.json").write_text(json.dumps(rec))
    v = validate([tmp_path / "ws4"], source=tmp_path / "src", samples=200)
    assert [r.change for r in v.rows] == ["world_size=4"] and abs(v.rows[0].error) < 1e-9


def test_saving_and_pruning_for_the_diagnosis_and_the_autotune():
    from whatif.api import prune, saving

    s = saving(RUNS / "vgg11_accumulate/0", {"accumulate": 4}, samples=200)
    assert 0 < s["lo"] <= s["fraction"] <= s["hi"] < 1 and s["of"] == "time per sample"
    keep, skipped = prune(
        RUNS / "vgg11_accumulate/0",
        [{"bucket": 2000}, {"accumulate": 4}, {"bucket": 100}],
        samples=200,
    )
    assert {"accumulate": 4} in keep and [c for c, _ in skipped] == [{"bucket": 2000}]


def test_validation_reads_an_emulated_link_from_the_record():
    from base.record import Record
    from base.record_types import Link
    from whatif.validate import knobs, link_of

    rec = Record.from_dict(copy.deepcopy(_record("vgg11_accumulate/0")))
    assert link_of(rec) is None
    rec.env.link = Link.from_dict({"emulated": True, "rate_bit_s": 1e9, "qdisc": "htb"})
    assert link_of(rec).rate_bit_s == 1e9
    assert knobs(rec)["bucket"] == "25" and knobs(rec)["world_size"] == 2
