"""tasks/grad_sync.py (issue 36: a module the mutation run covers): the grad_sync comparison's
figures and their reading, by hand. The result is assembled from per-rank timings written out in
the test (3 ranks: the average, the slowest rank, algbw = bytes / time, busbw = algbw x 2(n-1)/n =
algbw x 4/3, the module ratios, the alpha-beta fit by numpy's weighted polyfit); the gradients'
pattern is checked element by element against ((i + k) % 7 + 1) x (rank + 1); the methods and the
rank's loop run on a one-rank gloo group in this process, their clocks replaced by ones whose
readings are given, so every time they record is worked out from them; the explanation's lines, the
headline and the console view are checked word for word."""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from omegaconf import OmegaConf

import models  # noqa: F401 - imported here, not inside the first test that builds a model
import tasks.grad_sync as gs
from base import schema
from base.errors import ConfigError
from base.record_types import GradSyncResult
from comm import CorrectnessError
from tests.conftest import close_group

CPU = torch.device("cpu")
HERE = "tests.test_mutation_kill_grad_sync"


# -------------------------------------------------------------------------- the models built here
class Tiny(nn.Module):
    """Two layers the forward uses, one it does not (its gradients never become ready), one frozen
    parameter (no gradient at all). 1x1 convolutions: their meta backward needs no decomposition
    (a Linear's or a relu's imports torch._dynamo, 2 s). It takes one sample of its input_shape,
    5 x 1 x 1, in a batch of 1, and nothing else."""

    def __init__(self, num_classes: int = 2):
        super().__init__()
        self.a = nn.Conv2d(5, 4, 1)
        self.b = nn.Conv2d(4, num_classes, 1)
        self.unused = nn.Conv2d(2, 2, 1)
        self.frozen = nn.Parameter(torch.zeros(5), requires_grad=False)

    def forward(self, x):
        if tuple(x.shape) != (1, 5, 1, 1):
            raise ValueError(f"one 5 x 1 x 1 sample, not {tuple(x.shape)}")
        return self.b(self.a(x))


class Sized(nn.Module):
    """Its parameters grow with the image size: image_size x 2 weights and 2 biases (no forward:
    its order is DDP's first guess)."""

    def __init__(self, image_size: int):
        super().__init__()
        self.fc = nn.Linear(image_size, 2)


class ReadsValues(nn.Module):
    """Its __init__ reads a tensor's value, which a meta tensor has not: built for real."""

    def __init__(self, image_size: int):
        super().__init__()
        self.fc = nn.Linear(image_size, 3)
        assert torch.ones(1).item() == 1.0


class FailsOnMeta(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 3)

    def forward(self, x):
        raise ValueError("no meta here")


def _cfg(target, image_size=8, bucket=None, **model):
    return OmegaConf.create(
        {
            "model": {"_target_": target, "arch": "custom", "name": "tiny", **model},
            "scale": {"image_size": image_size},
            "grad_sync": {"iters": 3, "warmup_iters": 2, "device": "cpu"},
            "bucket": bucket,
        }
    )


TINY = _cfg(f"{HERE}.Tiny", input_shape=[5, 1, 1])


# ------------------------------------------------------------------------------------ config, model
def test_settings_and_the_largest_collective():
    s = gs.settings(TINY)
    assert (s.iters, s.warmup_iters, str(s.device.name)) == (3, 2, "cpu")
    # 224 x 2 weights + 2 biases, fp32: the model sized for a 224-pixel image, whatever scale says
    assert gs.largest_collective(_cfg(f"{HERE}.Sized")) == (
        (224 * 2 + 2) * 4,
        "one step's fp32 gradients",
    )
    assert gs.param_shapes(TINY) == [
        ("a.weight", (4, 5, 1, 1)),
        ("a.bias", (4,)),
        ("b.weight", (2, 4, 1, 1)),
        ("b.bias", (2,)),
        ("unused.weight", (2, 2, 1, 1)),
        ("unused.bias", (2,)),
    ]


def test_check_sizes_three_copies_of_the_gradients(monkeypatch):
    seen = []
    monkeypatch.setattr(
        gs, "check_buffers", lambda cfg, host, **kw: seen.append((cfg.model.name, host, kw))
    )
    probed = object()
    monkeypatch.setattr(gs, "Host", NS(probe=lambda: probed))
    host = object()
    gs.check(TINY, submitting=True, host=host)
    gs.check(TINY)
    # 20 + 4 + 8 + 2 + 4 + 2 = 40 trainable elements, 160 B of fp32 gradients
    assert seen == [
        (
            "tiny",
            host,
            dict(
                key="grad_sync.device",
                per_rank_bytes=3 * 160,
                what="task=grad_sync with model=tiny (3 copies of 160 B of gradients per rank)",
                fix="Use fewer ranks per node or a smaller model",
                submitting=True,
            ),
        ),
        ("tiny", probed, {**seen[0][2], "submitting": False}),
    ]


def test_ready_order_is_autograds_with_unused_parameters_last_and_frozen_ones_left_out():
    shapes, ready, how = gs.model_gradients(TINY)
    assert [n for n, _ in shapes] == [
        "a.weight",
        "a.bias",
        "b.weight",
        "b.bias",
        "unused.weight",
        "unused.bias",
    ]
    # backward reaches b before a (a convolution's weight gradient before its bias's); the unused
    # layer never gets a gradient: it goes last, in reverse parameter order
    assert ready == [2, 3, 0, 1, 5, 4]
    assert how == (
        "autograd's gradient-ready order (meta-device backward), as DDP rebuilds its buckets"
    )
    # no input_shape: a 3 x image_size x image_size image (the conv takes 3 channels, 8 pixels)
    conv = _cfg("torch.nn.Conv2d", in_channels=3, out_channels=2, kernel_size=8)
    shapes, ready, how = gs.model_gradients(conv)
    assert shapes == [("weight", (2, 3, 8, 8)), ("bias", (2,))]
    assert ready == [0, 1] and how.startswith("autograd's")  # a conv: weight first
    one = _cfg("torch.nn.Conv2d", in_channels=3, out_channels=2, kernel_size=8, bias=False)
    assert gs.model_gradients(one)[1:] == ([0], how)  # one parameter


def test_without_a_meta_backward_the_order_is_ddps_initial_guess():
    # both built for scale.image_size, 8: an 8-input layer
    shapes, ready, how = gs.model_gradients(_cfg(f"{HERE}.ReadsValues"))
    assert shapes == [("fc.weight", (3, 8)), ("fc.bias", (3,))] and ready == [1, 0]
    assert how == "reverse parameter order (DDP's initial guess)"
    shapes, ready, how = gs.model_gradients(_cfg(f"{HERE}.Sized"))
    assert shapes == [("fc.weight", (2, 8)), ("fc.bias", (2,))] and ready == [1, 0]
    assert how == (
        "reverse parameter order (DDP's initial guess; meta backward failed: NotImplementedError)"
    )
    shapes, ready, how = gs.model_gradients(_cfg(f"{HERE}.FailsOnMeta", input_shape=[2]))
    assert shapes == [("fc.weight", (3, 2)), ("fc.bias", (3,))] and ready == [1, 0]
    assert how == "reverse parameter order (DDP's initial guess; meta backward failed: ValueError)"
    assert gs.model_gradients(_cfg("torch.nn.ReLU")) == (
        [],
        [],
        "reverse parameter order (DDP's initial guess)",
    )


# ---------------------------------------------------------------------------------------- gradients
def _pattern(numel, k, factor):
    """Element i of tensor k: ((i + k) % 7 + 1) x factor."""
    return ((np.arange(numel) + k) % 7 + 1) * factor


SHAPES = [("features.0.weight", (2, 20000)), ("features.0.bias", (5,)), ("classifier.w", (3, 3))]


def test_fill_writes_the_pattern_and_the_sum_over_ranks_is_checked_element_by_element():
    g = gs.Grads(SHAPES, rank=2, world=4, device=CPU)
    assert g.names == ["features.0.weight", "features.0.bias", "classifier.w"]
    assert (g.rank, g.world) == (2, 4)
    assert g.total_bytes == (40000 + 5 + 9) * 4
    g.fill()
    for k, t in enumerate(g.tensors):  # 40000 elements: a whole 7 x 4096 tile and a tail
        assert t.dtype == torch.float32
        np.testing.assert_array_equal(t.view(-1).numpy(), _pattern(t.numel(), k, 3))
    assert g.wrong_after_sum() == 40000 + 5 + 9  # rank 2's share alone, not the sum of 4 ranks
    for k, t in enumerate(g.tensors):  # the sum over ranks 0..3: (1 + 2 + 3 + 4) x the pattern
        t.view(-1).copy_(torch.from_numpy(_pattern(t.numel(), k, 10)))
    assert g.wrong_after_sum() == 0
    g.tensors[0].view(-1)[5] += 1  # in the first tile
    g.tensors[0].view(-1)[39999] = 0  # in the tail
    g.tensors[1][4] = -1
    assert g.wrong_after_sum() == 3


# ------------------------------------------------------------------------------------------ methods
@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """A one-rank gloo group in this process: all_reduce leaves every tensor as it was."""
    dist.init_process_group(
        "gloo",
        init_method=f"file://{tmp_path_factory.mktemp('gs') / 'store'}",
        rank=0,
        world_size=1,
    )
    yield
    close_group()


class Ticks:
    """A Clock whose mark is the count of marks so far times 1 ms, from 0: seconds(a, b) = b - a."""

    def __init__(self, device=None):
        self.n = itertools.count()

    def mark(self):
        return next(self.n) * 1e-3

    def seconds(self, a, b):
        return b - a


def test_the_four_methods_sync_the_gradients_and_mark_their_phases(group):
    g = gs.Grads(SHAPES, rank=0, world=1, device=CPU)
    pp = gs.PerParam(g)
    flat = gs.Flat(g, CPU)
    buck = gs.Bucketed(g, 0.00005, CPU)  # 52 B buckets: the 36 B tensor, then the 20 B one, ...
    coal = gs.Coalesced(g, "gloo", CPU)
    assert (pp.name, pp.calls, pp.calls_label) == ("per_param", 3, "one all_reduce per parameter")
    assert (flat.name, flat.calls, flat.calls_label) == (
        "flat",
        1,
        "copy into one buffer, one all_reduce, copy back",
    )
    assert flat.buffer.shape == (40014,) and not flat.buffer.any()
    assert [o.numel() for o in flat.outs] == [40000, 5, 9]
    assert (coal.name, coal.calls, coal.calls_label) == (
        "coalesced",
        1,
        "_coalescing_manager around the 3 all_reduce calls -> "
        "ProcessGroup(gloo).allreduce_coalesced, one call",
    )
    # no ready order: the reverse of the parameters' (DDP's first guess); the 36 B tensor closes
    # no 52 B bucket, the 20 B one added does
    assert buck.name == "bucketed" and buck.buckets == [[2, 1], [0]]
    assert buck.bucket_bytes == [56, 160000] and buck.calls == 2
    assert [b.numel() for b in buck.buffers] == [14, 40000] and not any(
        b.any() for b in buck.buffers
    )
    assert [[o.numel() for o in outs] for outs in buck.outs] == [[9, 5], [40000]]
    assert buck.calls_label == (
        "2 DDP buckets (bucket_cap_mb=5e-05: every bucket capped at 4.95911e-05 MiB, the first "
        "too), async all_reduce per bucket, wait at the end"
    )
    assert gs.Bucketed(g, 0.00005, CPU, ready=[0, 1, 2]).buckets == [[0], [1, 2]]
    for method, marks in ((pp, 4), (flat, 4), (buck, 3), (coal, 2)):
        g.fill()
        for t in g.tensors:
            t.mul_(1)
        clock = Ticks()
        assert method(clock) == [i * 1e-3 for i in range(marks)], method.name
        assert g.wrong_after_sum() == 0, method.name  # one rank: the sum is its own pattern
    # the flat buffer holds the gradients one after another
    np.testing.assert_array_equal(
        flat.buffer.numpy(), np.concatenate([t.view(-1).numpy() for t in g.tensors])
    )
    np.testing.assert_array_equal(
        buck.buffers[0].numpy(), _pattern(9, 2, 1).tolist() + [*_pattern(5, 1, 1)]
    )


# ------------------------------------------------------------------------------ one method's timing
class Scripted(gs.PerParam):
    """A method whose marks are given, one list a call (seconds on the stand-in clock)."""

    def __init__(self, grads, script):
        super().__init__(grads)
        self.script = iter(script)

    def __call__(self, clock):
        return next(self.script)


class Plain:
    """Clock(device) with seconds(a, b) = b - a: the scripted marks are the times."""

    def __init__(self, device):
        assert device == CPU

    def seconds(self, a, b):
        return b - a


SETTINGS = dataclasses.replace(schema.GradSync(), warmup_iters=2, iters=3)


@pytest.fixture
def barriers(monkeypatch):
    """dist.barrier counted, not called (no group); the method's clock the plain one."""
    calls = []
    monkeypatch.setattr(dist, "barrier", lambda: calls.append(1))
    monkeypatch.setattr(gs, "Clock", Plain)
    return calls


def test_time_method_takes_the_medians_of_the_timed_syncs_after_the_warm_up(barriers):
    g = gs.Grads([("w", (3, 4)), ("b", (5,))], rank=0, world=2, device=CPU)
    script = [
        [0, 100, 300],  # warm-up: left out
        [0, 50, 60],  # warm-up
        [0, 1, 3],  # 1 + 2 = 3
        [10, 14, 16],  # 4 + 2 = 6
        [0, 3, 9],  # 3 + 6 = 9
    ]
    out = gs._time_method(Scripted(g, script), g, SETTINGS, CPU)
    # each phase's median over the 3 timed syncs: median(1, 4, 3) = 3, median(2, 2, 6) = 2; the
    # total is the median of the syncs' sums (6), not the sum of the medians (5)
    assert out == {"total_s": 6, "parts_s": [3, 2], "wrong": 17}
    assert len(barriers) == 5  # one before every sync, the warm-up's too
    # rank 0 of 2 wrote its own share (x 1), not the sum (x 3): all 17 elements are wrong


class NoCoalescing(gs.Coalesced):
    """A backend without allreduce_coalesced: the error on call `fails_at`."""

    def __init__(self, grads, error, fails_at=0):
        super().__init__(grads, "gloo", CPU)
        self.error, self.fails_at, self.n = error, fails_at, 0

    def __call__(self, clock):
        self.n += 1
        if self.n > self.fails_at:
            raise self.error
        return [0, 1]


def test_a_backend_without_coalescing_is_reported_not_raised(barriers):
    g = gs.Grads([("w", (3,))], rank=0, world=1, device=CPU)
    for error, said in (
        (
            RuntimeError("allreduce_coalesced is not supported\nby gloo"),
            "allreduce_coalesced is not supported",
        ),
        (RuntimeError(), "RuntimeError"),
        (NotImplementedError("no coalescing"), "no coalescing"),
        (ValueError(""), "ValueError"),
    ):
        assert gs._time_method(NoCoalescing(g, error), g, SETTINGS, CPU) == {
            "unsupported": said,
            "wrong": None,
        }
    # failing once it has timed a sync is a failure; so is any other method's, and a peer's
    with pytest.raises(RuntimeError, match="later"):
        gs._time_method(NoCoalescing(g, RuntimeError("later"), fails_at=3), g, SETTINGS, CPU)
    warm = gs._time_method(NoCoalescing(g, RuntimeError("warm"), fails_at=2), g, SETTINGS, CPU)
    assert warm["unsupported"] == "warm"  # the third call, the first timed one: nothing timed yet
    with pytest.raises(dist.DistError, match="peer"):
        gs._time_method(NoCoalescing(g, dist.DistError("peer")), g, SETTINGS, CPU)

    class Broken(gs.PerParam):
        def __call__(self, clock):
            raise RuntimeError("per_param broke")

    with pytest.raises(RuntimeError, match="per_param broke"):
        gs._time_method(Broken(g), g, SETTINGS, CPU)


def test_groups_are_the_top_level_modules_in_parameter_order():
    names = ["features.0.weight", "classifier.w", "features.3.bias", "bias", "classifier.b"]
    assert gs._groups(names) == {"features": [0, 2], "classifier": [1, 4], "bias": [3]}
    assert list(gs._groups(names)) == ["features", "classifier", "bias"]


# ------------------------------------------------------------------------------ the result, 3 ranks
R_SHAPES = [
    ("features.0.weight", (4, 3)),  # 48 B
    ("features.0.bias", (4,)),  # 16 B
    ("classifier.weight", (2, 4)),  # 32 B
    ("classifier.bias", (2,)),  # 8 B
]
MS = 1e-3
# per parameter, per rank: the averages 4, 2, 3, 1.5 ms lie on t = 1 ms + bytes x 62.5 ns/B
PP = [[3, 5, 4], [2, 1, 3], [4, 3, 2], [1, 2, 1.5]]


def _everyone(coalesced=True, flat=True):
    def rank(r):
        return {
            "methods": {
                "per_param": {
                    "total_s": [10, 12, 11][r] * MS,
                    "parts_s": [PP[k][r] * MS for k in range(4)],
                    "wrong": [0, 2, 1][r],
                },
                "flat": (
                    {
                        "total_s": [5, 6, 7][r] * MS,
                        "parts_s": [[1, 3, 0.5], [2, 3, 1], [3, 3, 1.5]][r],
                        "wrong": 0,
                    }
                    if flat
                    else {"unsupported": "no flat", "wrong": None}
                ),
                "bucketed": {
                    "total_s": [4, 4, 7][r] * MS,
                    "parts_s": [[3, 1], [3, 2], [6, 3]][r],
                    "wrong": 0,
                },
                "coalesced": (
                    {"total_s": [2, 9, 1][r] * MS, "parts_s": [1], "wrong": [0, 0, 4][r]}
                    if coalesced
                    else {"unsupported": "allreduce_coalesced: not here", "wrong": None}
                ),
            },
            "micro": {
                "total": [5, 4, 6][r] * MS,
                "latency": [0.1, 0.3, 0.2][r] * MS,
                "group:features": [2, 3, 4][r] * MS,
                "group:classifier": 0.0,
            },
        }

    return [rank(r) for r in range(3)]


def _assembled(bucket=0.00005, coalesced=True, device=CPU, flat=True):
    g = gs.Grads(R_SHAPES, rank=0, world=3, device=CPU)
    methods = [
        gs.PerParam(g),
        gs.Flat(g, CPU),
        gs.Bucketed(g, bucket, CPU, [3, 2, 1, 0]),
        gs.Coalesced(g, "gloo", CPU),
    ]
    ctx = NS(
        world_size=3,
        backend="gloo",
        cfg=OmegaConf.create({"bucket": bucket, "model": {"name": "tiny"}}),
    )
    sizes = {"total": 104, "latency": 4, "group:features": 64, "group:classifier": 40}
    groups = {"features": [0, 1], "classifier": [2, 3]}
    everyone = _everyone(coalesced, flat)
    r = gs._result(ctx, SETTINGS, device, g, methods, groups, sizes, everyone, "how")
    return r, methods


def _bw(nbytes, t):
    """(algbw, busbw) in GB/s for 3 ranks: bytes / t / 1e9, and x 2 x 2 / 3."""
    return nbytes / t / 1e9, nbytes / t / 1e9 * 4 / 3


def test_result_per_parameter_rows_written_out():
    r, _ = _assembled()
    for k, (p, (name, shape)) in enumerate(zip(r.per_param, R_SHAPES)):
        nbytes = int(np.prod(shape)) * 4
        avg = np.mean(PP[k]) * MS
        assert (p.name, p.group, p.shape, p.numel, p.bytes) == (
            name,
            name.split(".")[0],
            list(shape),
            nbytes // 4,
            nbytes,
        )
        assert p.time_s == pytest.approx(avg)
        assert p.time_max_s == pytest.approx(max(PP[k]) * MS)
        assert p.slowest_rank == int(np.argmax(PP[k]))
        assert (p.algbw_GBps, p.busbw_GBps) == pytest.approx(_bw(nbytes, avg))
    assert [p.slowest_rank for p in r.per_param] == [1, 2, 0, 1]
    assert (r.params, r.param_tensors, r.total_bytes) == (26, 4, 104)
    # the alpha-beta fit on relative error: numpy's weighted least squares (weights 1/t on the
    # residual, 1/t^2 on its square) of the 4 averages
    x = np.array([48, 16, 32, 8])
    y = np.array([np.mean(row) for row in PP]) * MS
    slope, alpha = np.polyfit(x, y, 1, w=1 / y)
    assert r.fit.alpha_s == pytest.approx(alpha) and alpha == pytest.approx(1e-3)
    assert r.fit.beta_GBps == pytest.approx(1 / slope / 1e9)
    assert (r.fit.points, r.fit.weights) == (4, "1/t^2")


def test_result_methods_written_out():
    r, methods = _assembled()
    m = r.methods
    totals = {
        "per_param": [10, 12, 11],
        "flat": [5, 6, 7],
        "bucketed": [4, 4, 7],
        "coalesced": [2, 9, 1],
        "microbench": [5, 4, 6],
    }
    for name, ms in totals.items():
        got = getattr(m, name)
        avg = sum(ms) / 3 * MS
        assert got.time_s == pytest.approx(avg), name
        assert got.time_max_s == pytest.approx(max(ms) * MS), name
        assert got.slowest_rank == ms.index(max(ms)), name
        assert (got.algbw_GBps, got.busbw_GBps) == pytest.approx(_bw(104, avg)), name
    assert [m.per_param.wrong, m.flat.wrong, m.bucketed.wrong, m.coalesced.wrong] == [3, 0, 0, 4]
    assert [m.per_param.calls, m.flat.calls, m.bucketed.calls, m.coalesced.calls] == [4, 1, 2, 1]
    assert m.per_param.how == "one all_reduce per parameter"
    assert m.coalesced.how == methods[3].calls_label and m.bucketed.how == methods[2].calls_label
    assert m.flat.phases_s == pytest.approx({"pack": 2, "all_reduce": 3, "unpack": 1})
    assert m.bucketed.phases_s == pytest.approx({"pack+all_reduce": 4, "unpack": 2})
    assert m.per_param.phases_s is None and m.coalesced.phases_s is None
    # the 52 B buckets in ready order 3, 2, 1, 0: 8 + 32 + 16 = 56 B, then the 48 B weight
    assert m.bucketed.bucket_bytes == [56, 48]
    assert m.bucketed.bucket_params == [
        ["classifier.bias", "classifier.weight", "features.0.bias"],
        ["features.0.weight"],
    ]
    assert (m.bucketed.bucket_mb, m.bucketed.order) == (0.00005, "how")
    assert m.bucketed.bucket_rule == (
        "bucket_cap_mb=5e-05: every bucket capped at 4.95911e-05 MiB, the first too"
    )
    assert m.flat.bucket_mb is None and m.per_param.order is None
    mb = m.microbench
    assert (mb.calls, mb.bytes, mb.wrong, mb.unsupported) == (1, 104, None, None)
    assert mb.how == (
        "one all_reduce of a standalone buffer of the same bytes, back-to-back like "
        "task=collectives"
    )
    assert r.latency.bytes == 4 and r.latency.time_s == pytest.approx(0.2 * MS)
    assert (r.latency.time_max_s, r.latency.slowest_rank) == (pytest.approx(0.3 * MS), 1)
    assert (r.latency.algbw_GBps, r.latency.busbw_GBps) == pytest.approx(_bw(4, 0.2 * MS))


def test_result_groups_header_and_headline_written_out():
    r, _ = _assembled()
    features, classifier = r.groups
    assert (features.group, features.tensors, features.bytes) == ("features", 2, 64)
    assert features.per_param_s == pytest.approx((4 + 2) * MS)
    assert features.microbench_s == pytest.approx(3 * MS)
    assert features.microbench_busbw_GBps == pytest.approx(_bw(64, 3 * MS)[1])
    assert features.ratio == pytest.approx(2.0)
    # a one-call time of 0 (below the clock's resolution): no ratio, no division by zero
    assert (classifier.group, classifier.tensors, classifier.bytes) == ("classifier", 2, 40)
    assert classifier.per_param_s == pytest.approx((3 + 1.5) * MS)
    assert (classifier.microbench_s, classifier.microbench_busbw_GBps, classifier.ratio) == (
        0,
        0,
        None,
    )
    assert (r.model, r.dtype, r.reduce_op, r.world_size, r.backend, r.device) == (
        "tiny",
        "float32",
        "sum",
        3,
        "gloo",
        "cpu",
    )
    assert (r.warmup_iters, r.iters, r.timing) == (2, 3, "time.perf_counter")
    assert r.explanation == gs.explain(r) and len(r.explanation) == 5
    assert r.headline == {
        "model": "tiny",
        "ranks": 3,
        "MiB": 0.0,
        "per_param ms": 11.0,
        "flat ms": 6.0,
        "bucketed ms": 5.0,
        "coalesced ms": 4.0,
        "microbench ms": 5.0,
        "per_param/microbench x": 2.2,
    }
    gpu = _assembled(device=torch.device("cuda", 1))[0]
    assert (gpu.device, gpu.timing) == ("cuda:1", "CUDA events on the current stream")


def test_result_default_buckets_and_a_backend_without_coalescing():
    r, methods = _assembled(bucket=None, coalesced=False)
    assert (r.methods.bucketed.bucket_mb, r.methods.bucketed.calls) == ("default", 1)
    assert r.methods.bucketed.bucket_rule.startswith("DDP's default (bucket_cap_mb=None)")
    c = r.methods.coalesced
    assert (c.calls, c.how, c.unsupported) == (
        1,
        methods[3].calls_label,
        "allreduce_coalesced: not here",
    )
    assert (c.time_s, c.wrong, c.algbw_GBps) == (None, None, None)
    assert r.headline["coalesced ms"] is None and r.headline["per_param ms"] == 11.0


# ------------------------------------------------------------------------------------- explanation
def _r(n, t_pp, t_mb, probe, pp_max=None, mb_max=None, calls=(), flat=None, fit=None):
    """A result with what explain() reads: 1e9 B (953.7 MiB) in n tensors; per-parameter calls
    given as (bytes, seconds)."""
    return GradSyncResult.from_dict(
        {
            "param_tensors": n,
            "total_bytes": 10**9,
            "latency": {"time_s": probe},
            "methods": {
                "per_param": {"time_s": t_pp, "time_max_s": t_pp if pp_max is None else pp_max},
                "microbench": {
                    "time_s": t_mb,
                    "time_max_s": t_mb if mb_max is None else mb_max,
                    "algbw_GBps": 4.0,
                    "busbw_GBps": 6.0,
                },
                "flat": flat,
            },
            "fit": fit,
            "per_param": [{"bytes": b, "time_s": t} for b, t in calls],
        }
    )


def test_latency_dominates_with_the_loops_own_small_calls_as_the_latency():
    # 3 calls of <= 64 KiB (the one of 64 KiB + 1 B is not): their median, 2 ms, is the latency;
    # 3 extra calls x 2 ms = 6 ms of the 10 ms gap: 60%
    r = _r(
        4,
        0.020,
        0.010,
        0.0005,
        pp_max=0.0208,
        mb_max=0.0112,
        calls=[(65536, 0.002), (65536, 0.001), (1000, 0.003), (65537, 0.009)],
        flat={"time_s": 0.01, "phases_s": {"pack": 0.00144, "all_reduce": 0.004, "unpack": 0.003}},
        fit={"alpha_s": 0.0015, "beta_GBps": 12.5, "points": 4},
    )
    assert gs.explain(r) == [
        "per_param made 4 all_reduce calls, microbench 1, for the same 953.7 MiB: 20 ms vs 10 ms "
        "(2.00x).",
        "Per-call latency here: 2 ms (median of the 3 per-parameter calls of <= 64.0 KiB; an "
        "isolated 4 B all_reduce, back-to-back: 0.5 ms); one call of the total moves 6 GB/s "
        "busbw.",
        "per_param is 10 ms slower; 3 extra calls x 2 ms latency = 6 ms explain 60% of it: the "
        "number of collectives x per-call latency dominates. Fewer, larger calls (flat, bucketed, "
        "coalesced) remove it.",
        "flat = pack 1.44 ms + all_reduce 4 ms + unpack 3 ms: the copies cost 44% of it.",
        "Fit over the 4 per-parameter calls, t = alpha + bytes/beta (relative error): alpha = 1.5 "
        "ms per call, beta = 12.5 GB/s algbw; 4 x alpha = 6 ms of per_param's 20 ms.",
    ]


def test_latency_dominates_from_half_the_gap_and_is_capped_at_all_of_it():
    # two small calls are too few: the 4 B probe is the latency. 1 x 250 ms of a 500 ms gap: 50%
    half = gs.explain(_r(2, 0.75, 0.25, 0.25, calls=[(8, 0.001), (8, 0.002)]))
    assert half[1] == (
        "Per-call latency here: 250 ms (an isolated 4 B all_reduce, back-to-back); one call of the "
        "total moves 6 GB/s busbw."
    )
    assert half[2].startswith(
        "per_param is 500 ms slower; 1 extra calls x 250 ms latency = 250 ms explain 50% of it: "
    )
    # 10 extra calls x 10 ms = 100 ms, twice the 50 ms gap: all of it
    twice = gs.explain(_r(11, 0.15, 0.10, 0.01))
    assert twice[2].startswith(
        "per_param is 50 ms slower; 10 extra calls x 10 ms latency = 100 ms explain 100% of it"
    )
    assert len(half) == len(twice) == 3  # no flat phases, no fit


def test_bandwidth_explains_the_rest():
    # 1 x 10 ms of a 250 ms gap: 4%; without the 2 calls' latency per_param moves 1e9 B in 480 ms
    lines = gs.explain(_r(2, 0.5, 0.25, 0.01))
    assert lines[2] == (
        "per_param is 250 ms slower; 1 extra calls x 10 ms latency = 10 ms explain only 4% of it. "
        "The rest (240 ms) is bandwidth: with the latency taken out, the per-parameter calls move "
        "2.08 GB/s algbw against 4 GB/s for one call of the total."
    )
    # one tensor whose call takes the probe's whole 500 ms: nothing is left to move the bytes
    lines = gs.explain(_r(1, 0.5, 0.25, 0.5))
    assert lines[2] == (
        "per_param is 250 ms slower; 0 extra calls x 500 ms latency = 0 ms explain only 0% of it. "
        "The rest (250 ms) is bandwidth: the per-parameter calls move data slower than one call "
        "of the total."
    )
    assert lines[0].endswith("500 ms vs 250 ms (2.00x).")
    # 111 ms of 250: 44% (44.4, not rounded up)
    assert "= 111 ms explain only 44% of it." in gs.explain(_r(2, 0.5, 0.25, 0.111))[2]


def test_within_the_spread_is_bandwidth_bound():
    # the gap, 250 ms, equals the spread: microbench's slowest rank 250 ms off its average
    lines = gs.explain(_r(2, 0.75, 0.5, 0.01, mb_max=0.75))
    assert lines[2] == (
        "The two differ by 250 ms, within the spread of this measurement (250 ms): the 2 calls' "
        "latency (2 x 10 ms = 20 ms, 3% of per_param) is small next to moving the bytes, so this "
        "sync is bandwidth-bound and fewer, larger calls would not help much here."
    )
    assert gs.explain(_r(2, 0.75, 0.5, 0.01, pp_max=1.0))[2].startswith(
        "The two differ by 250 ms, within the spread of this measurement (250 ms)"
    )  # per_param's slowest rank 250 ms off
    # 40 ms apart: within 5% of the slower one (50 ms), the ranks agreeing
    assert gs.explain(_r(2, 1.0, 0.96, 0.01))[2].startswith(
        "The two differ by 40 ms, within the spread of this measurement (50 ms)"
    )
    assert gs.explain(_r(2, 1.0, 0.94, 0.01))[2].startswith("per_param is 60 ms slower")
    # the calls' latency as a share of per_param: 4 x 44.4 ms of 400 ms, 44% (44.4)
    assert "(4 x 44.4 ms = 178 ms, 44% of per_param)" in gs.explain(_r(4, 0.4, 0.39, 0.0444))[2]
    assert gs.explain(_r(2, 0.94, 1.0, 0.01))[2].startswith("per_param is 60 ms faster")


def test_faster_per_param_and_the_lines_left_out():
    lines = gs.explain(
        _r(2, 0.25, 0.5, 0.01, flat={"time_s": 0.1}, fit={"alpha_s": 0.0, "beta_GBps": 3.0})
    )
    assert lines[0].endswith("250 ms vs 500 ms (0.50x).")
    assert lines[2:] == [
        "per_param is 250 ms faster than one call of the total: on this backend several smaller "
        "calls move the bytes faster than one large one (per-call latency 10 ms)."
    ]  # no flat phases; a fit with no latency (alpha 0) is not printed
    assert len(gs.explain(_r(2, 0.25, 0.5, 0.01, fit={"alpha_s": 1e-3, "beta_GBps": None}))) == 3
    assert len(gs.explain(_r(2, 0.25, 0.5, 0.01, fit={"alpha_s": 1e-3, "beta_GBps": 1.0}))) == 4


# ---------------------------------------------------------------------------------------- headline
def _methods(**times):
    return {k: (None if v is None else {"time_s": v}) for k, v in times.items()}


def test_headline_in_ms_and_mib():
    r = GradSyncResult.from_dict(
        {
            "model": "m",
            "world_size": 16,
            "total_bytes": 123456789,  # 117.74 MiB
            "methods": _methods(per_param=0.0123456, flat=0.002, coalesced=None, microbench=0.004),
        }
    )
    r.methods.bucketed = None
    r.methods.coalesced = gs.SyncMethod(unsupported="no")
    assert gs._headline(r) == {
        "model": "m",
        "ranks": 16,
        "MiB": 117.7,
        "per_param ms": 12.346,
        "flat ms": 2.0,
        "bucketed ms": None,
        "coalesced ms": None,
        "microbench ms": 4.0,
        "per_param/microbench x": 3.086,
    }
    r.methods.microbench.time_s = 0.0  # no ratio to a time of 0
    assert "per_param/microbench x" not in gs._headline(r)
    assert gs._headline(r)["microbench ms"] == 0.0


# --------------------------------------------------------------------------------------- summarize
def _summary_result(buckets=9):
    sync = {"time_s": 0.0124456, "time_max_s": 0.013, "algbw_GBps": 0.3968, "busbw_GBps": 0.39682}
    return GradSyncResult.from_dict(
        {
            "model": "tiny",
            "params": 1234567,
            "param_tensors": 2,
            "total_bytes": 4938268,  # 4.71 MiB
            "world_size": 2,
            "backend": "gloo",
            "device": "cpu",
            "warmup_iters": 1,
            "iters": 3,
            "timing": "time.perf_counter",
            "per_param": [
                {
                    "name": "features.0.weight",
                    "shape": [1234, 1000],
                    "bytes": 4936000,
                    "time_s": 0.0123456,
                    "algbw_GBps": 0.39982,
                    "busbw_GBps": 0.39983,
                },
                {
                    "name": "features.0.bias",
                    "shape": [567],
                    "bytes": 2268,
                    "time_s": 0.0001,
                    "algbw_GBps": 0.02268,
                    "busbw_GBps": 0.0227,
                },
            ],
            "groups": [
                {
                    "group": "features",
                    "tensors": 2,
                    "bytes": 4938268,
                    "per_param_s": 0.0124456,
                    "microbench_s": 0.005,
                    "ratio": 2.48912,
                },
                {
                    "group": "other",
                    "tensors": 1,
                    "bytes": 4,
                    "per_param_s": 0.0,
                    "microbench_s": 0.0,
                    "ratio": None,
                },
            ],
            "methods": {
                "per_param": {**sync, "calls": 2, "how": "one all_reduce per parameter"},
                "flat": {},  # read from a record that has no such method: not shown
                "bucketed": {
                    **sync,
                    "calls": buckets,
                    "how": "b",
                    "bucket_bytes": [1024 * (i + 1) for i in range(buckets)],
                    "order": "reverse",
                },
                "coalesced": {"calls": 1, "how": "c", "unsupported": "not on gloo"},
                "microbench": {
                    "calls": 1,
                    "time_s": 0.005,
                    "time_max_s": 0.0061,
                    "algbw_GBps": 0.98765,
                    "busbw_GBps": 0.98766,
                    "how": "one",
                },
            },
            "latency": {"bytes": 4, "time_s": 0.00005, "time_max_s": 0.00007},
            "explanation": ["first.", "second."],
        }
    )


def test_summary_word_for_word():
    """The console view: every figure of the hand-made result in its column (ms to 3 decimals,
    GB/s to 3, the sizes in binary units), the method a record does not hold left out, the one the
    backend lacks as n/a, the first 8 of 9 buckets."""
    assert gs.summarize(NS(result=_summary_result())).splitlines() == [
        "grad_sync: tiny, 2 parameter tensors, 1,234,567 params = 4.7 MiB of fp32 gradients; "
        "2 ranks, backend gloo, device cpu",
        "each method: 1 warm-up + 3 timed syncs (median; barrier before each, time.perf_counter); "
        "time = average over ranks; busbw = algbw x 2(n-1)/n, GB = 1e9 B",
        "",
        "per-parameter all_reduce (the thread's loop):",
        "  #  parameter                          shape                       bytes    time ms   "
        "algbw   busbw",
        "  0  features.0.weight                  1234x1000                 4936000     12.346   "
        "0.400   0.400",
        "  1  features.0.bias                    567                          2268      0.100   "
        "0.023   0.023",
        "",
        "by top-level module (per-parameter sum vs one all_reduce of the same bytes):",
        "     module           tensors        size  per-param ms  one call ms  ratio",
        "     features               2     4.7 MiB        12.446        5.000  2.49x",
        "     other                  1         4 B         0.000        0.000      -",
        "",
        "one sync of all 4.7 MiB:",
        "     method      calls    time ms    slowest   algbw   busbw  how",
        "     per_param       2     12.446     13.000   0.397   0.397  one all_reduce per "
        "parameter",
        "     bucketed        9     12.446     13.000   0.397   0.397  b",
        "     coalesced       1        n/a                             not supported here: not on "
        "gloo",
        "     microbench      1      5.000      6.100   0.988   0.988  one",
        "                       buckets: 1.0 KiB, 2.0 KiB, 3.0 KiB, 4.0 KiB, 5.0 KiB, 6.0 KiB, "
        "7.0 KiB, 8.0 KiB ...; order: reverse",
        "     latency         1      0.050      0.070                  one all_reduce of 4 B",
        "",
        "why:",
        "  first.",
        "  second.",
    ]


def test_summary_bucket_list_and_no_result():
    eight = gs.summarize(NS(result=_summary_result(buckets=8))).splitlines()
    assert eight[19] == (
        "                       buckets: 1.0 KiB, 2.0 KiB, 3.0 KiB, 4.0 KiB, 5.0 KiB, 6.0 KiB, "
        "7.0 KiB, 8.0 KiB; order: reverse"
    )
    r = _summary_result()
    r.methods.bucketed.bucket_bytes = []
    assert not any("buckets:" in x for x in gs.summarize(NS(result=r)).splitlines())
    r.methods.bucketed = None
    assert "     bucketed " not in gs.summarize(NS(result=r))
    assert gs.summarize(NS(result=None)) == "grad_sync: no result"
    r.per_param = []
    assert gs.summarize(NS(result=r)) == "grad_sync: no result"


# ------------------------------------------------------------------------------ a rank's whole run
@pytest.fixture
def rank(group, monkeypatch):
    """run() on the one-rank group with Ticks for its methods' clock (1 ms a mark) and a
    time_window that calls the step once and returns 1 us, 2 us, ... in call order; every
    all_reduce's element count recorded, and what the device is resolved from and handed to."""
    seen = NS(reduced=[], iters=[], resolved=[], made=[])
    real = dist.all_reduce

    def all_reduce(t, *a, **kw):
        seen.reduced.append(t.numel())
        return real(t, *a, **kw)

    def time_window(step, iters, device):
        assert device == CPU
        step()
        seen.iters.append(iters)
        return len(seen.iters) * 1e-6

    def resolve_device(*args):
        seen.resolved.append(args)
        return CPU

    def spy(cls):
        class Spy(cls):
            def __init__(self, *args):
                seen.made.append((cls.__name__, args[1:]))
                super().__init__(*args)

        return Spy

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(gs, "Clock", Ticks)
    monkeypatch.setattr(gs, "time_window", time_window)
    monkeypatch.setattr(gs, "resolve_device", resolve_device)
    for name in ("Grads", "Flat", "Bucketed", "Coalesced"):
        monkeypatch.setattr(gs, name, spy(getattr(gs, name)))
    return seen


def _ctx(cfg=TINY, world_size=1, is_main=True):
    return NS(
        cfg=cfg,
        backend="gloo",
        torch_device=CPU,
        local_rank=3,
        rank=0,
        world_size=world_size,
        is_main=is_main,
    )


def test_a_rank_times_every_method_and_the_microbenchmarks(rank):
    cfg = _cfg(f"{HERE}.Tiny", bucket=0.0001, input_shape=[5, 1, 1])
    r = gs.run(_ctx(cfg))
    # the device: from grad_sync.device, the backend, the rank's placement and local rank; every
    # buffer made there
    assert rank.resolved == [(gs.settings(cfg).device, "gloo", CPU, 3)]
    ready = [2, 3, 0, 1, 5, 4]
    assert rank.made == [
        ("Grads", (0, 1, CPU)),
        ("Flat", (CPU,)),
        ("Bucketed", (0.0001, CPU, ready)),
        ("Coalesced", ("gloo", CPU)),
    ]
    # Tiny's 6 tensors: 20, 4, 8, 2, 4, 2 elements (40, 160 B); in autograd's order 104 B buckets
    # (0.0001 MiB): 32 + 8 + 80 = 120 B closes the first, the other 40 B make the second
    tensors = [20, 4, 8, 2, 4, 2]
    # per_param, flat, the buckets, coalesced: each method's 2 warm-up + 3 timed syncs, in turn
    methods = 5 * tensors + 5 * [40] + 5 * [30, 10] + 5 * tensors
    # the microbenchmarks: 2 warm-up calls and the window's, on the first elements of the flat
    # buffer: the total, the 4 B probe, the modules a (24 elements), b (10) and unused (6)
    micro = [40] * 3 + [1] * 3 + [24] * 3 + [10] * 3 + [6] * 3
    assert rank.reduced == methods + micro
    assert rank.iters == [3, 20, 3, 3, 3]  # the probe: at least 20 calls
    m = r.methods
    # 1 ms between marks: per_param's 7 marks are 6 ms, flat's 4 are 3 ms, ...
    assert [m.per_param.time_s, m.flat.time_s, m.bucketed.time_s, m.coalesced.time_s] == (
        pytest.approx([6e-3, 3e-3, 2e-3, 1e-3])
    )
    assert [p.time_s for p in r.per_param] == pytest.approx([1e-3] * 6)
    assert m.flat.phases_s == pytest.approx({"pack": 1e-3, "all_reduce": 1e-3, "unpack": 1e-3})
    assert [m.per_param.wrong, m.flat.wrong, m.bucketed.wrong, m.coalesced.wrong] == [0] * 4
    assert (m.bucketed.bucket_mb, m.bucketed.bucket_bytes) == (0.0001, [120, 40])
    assert m.bucketed.bucket_params == [
        ["b.weight", "b.bias", "a.weight"],
        ["a.bias", "unused.bias", "unused.weight"],
    ]  # autograd's order, the unused layer last
    assert m.bucketed.order.startswith("autograd's gradient-ready order")
    assert m.coalesced.how.endswith("ProcessGroup(gloo).allreduce_coalesced, one call")
    assert (m.microbench.bytes, m.microbench.time_s) == (160, pytest.approx(1e-6))
    assert (r.latency.bytes, r.latency.time_s) == (4, pytest.approx(2e-6))
    assert [(g.group, g.tensors, g.bytes) for g in r.groups] == [
        ("a", 2, 96),
        ("b", 2, 40),
        ("unused", 2, 24),
    ]
    assert [g.microbench_s for g in r.groups] == pytest.approx([3e-6, 4e-6, 5e-6])
    assert (r.model, r.params, r.param_tensors, r.total_bytes) == ("tiny", 40, 6, 160)
    assert (r.world_size, r.device, r.warmup_iters, r.iters) == (1, "cpu", 2, 3)


def test_gradients_off_the_exact_sum_fail_the_run_on_rank_0_only(rank, monkeypatch):
    def no_coalescing(self, clock):
        raise RuntimeError("no coalescing here")

    monkeypatch.setattr(gs.Coalesced, "__call__", no_coalescing)
    # 2 ranks expected, 1 there: every element holds rank 0's share, not the sum of 2 ranks'
    with pytest.raises(CorrectnessError) as e:
        gs.run(_ctx(world_size=2))
    assert str(e.value) == (
        "grad_sync: gradients differ from the exact sum after sync (per_param: 40, flat: 40, "
        "bucketed: 40 wrong elements)"
    )
    r = e.value.result
    assert (r.world_size, r.methods.per_param.wrong, r.methods.flat.wrong) == (2, 40, 40)
    assert r.methods.coalesced.unsupported == "no coalescing here"
    assert r.methods.per_param.busbw_GBps == pytest.approx(r.methods.per_param.algbw_GBps)
    assert gs.run(_ctx(world_size=2, is_main=False)) is None  # the other ranks return


def test_a_model_without_trainable_parameters_is_refused():
    cfg = _cfg("torch.nn.ReLU")
    with pytest.raises(ConfigError) as e:
        gs.run(_ctx(cfg))
    assert str(e.value) == "model tiny has no trainable parameters to synchronise."


def test_result_goes_on_past_a_method_the_backend_lacks():
    """Any method may be unsupported (the rank's loop only lets coalescing be): the methods after
    it are still assembled."""
    r, _ = _assembled(flat=False)
    assert (r.methods.flat.unsupported, r.methods.flat.time_s) == ("no flat", None)
    assert r.methods.bucketed.time_s == pytest.approx(5 * MS)
    assert r.methods.coalesced.time_s == pytest.approx(4 * MS)


def test_a_fit_that_does_not_match_its_type_is_kept_and_named(monkeypatch):
    monkeypatch.setattr(gs, "fit_latency_bandwidth", lambda rows: {"alpha_s": "slow", "points": 4})
    with pytest.warns(UserWarning, match=r"kept as written under result\.fit\.unchecked"):
        r, _ = _assembled()
    assert r.fit.points == 4 and len(r.explanation) == 4  # no fit line


def test_buffers_are_fp32_on_the_device_given_whatever_torchs_default_dtype(monkeypatch):
    """The gradients, their pattern and the methods' buffers are made fp32 on the run's device.
    Grads is checked on the CPU, by the device its tensors are asked for (its pattern's % on a
    meta tensor would import torch._dynamo, 2 s); the buffers on the meta device (no memory)."""
    asked = []
    for name in ("empty", "arange"):
        real = getattr(torch, name)

        def made(*args, real=real, name=name, **kw):
            asked.append((name, kw.get("device")))
            return real(*args, **kw)

        monkeypatch.setattr(torch, name, made)
    meta = torch.device("meta")
    torch.set_default_dtype(torch.float64)
    try:
        g = gs.Grads(SHAPES, rank=0, world=1, device=CPU)
        monkeypatch.undo()
        flat = gs.Flat(g, meta)
        buck = gs.Bucketed(g, 0.00005, meta)
    finally:
        torch.set_default_dtype(torch.float32)
    assert asked == [("empty", CPU)] * 3 + [("arange", CPU)]
    assert [t.dtype for t in [*g.tensors, g._base]] == [torch.float32] * 4
    buffers = [flat.buffer, *buck.buffers]
    assert [(b.dtype, b.device.type) for b in buffers] == [(torch.float32, "meta")] * 3
