"""The comm tasks' arithmetic and checks, without ranks: nccl-tests' bandwidth definitions against
hand-computed values, size lists and rounding, the exact-result inputs against an independent
simulation of each collective, the wrong-element counter against deliberately wrong results, config
errors, and the grad_sync explanation logic."""

import dataclasses

import pytest
import torch

from base.record_types import GradSyncResult
from comm import bandwidth as bw
from comm.check import count_wrong, expected_output, fill_input
from comm.fit import fit_latency_bandwidth
from device.host import OVERSUBSCRIBE_LIMIT
from tasks import collectives, grad_sync
from tests.bad_input import CPU_BOX, GIB, accepted, composed, refused

ONE_GPU_EACH = dataclasses.replace(CPU_BOX, gpus=2, gpu_free_bytes=70 * GIB)


# ----------------------------------------------------------------------------- bandwidth arithmetic
@pytest.mark.parametrize(
    "op,n,factor",
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 1.75),
        ("all_reduce", 16, 1.875),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 2, 0.5),
        ("broadcast", 16, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_bus_factor_matches_nccl_tests(op, n, factor):
    assert bw.bus_factor(op, n) == pytest.approx(factor)


def test_algbw_busbw_hand_computed():
    # 1e9 B all-reduced by 8 ranks in 0.1 s: 10 GB/s algbw, x 2*7/8 = 17.5 GB/s busbw
    assert bw.algbw(10**9, 0.1) == pytest.approx(10.0)
    assert bw.busbw("all_reduce", 10**9, 0.1, 8) == pytest.approx(17.5)
    # all_gather of 4e8 B in total (1e8 per rank) over 4 ranks in 0.2 s: 2 GB/s, busbw 1.5 GB/s
    assert bw.busbw("all_gather", 4 * 10**8, 0.2, 4) == pytest.approx(1.5)
    assert bw.busbw("reduce_scatter", 10**6, 1e-3, 2) == pytest.approx(0.5)
    assert bw.busbw("broadcast", 3 * 10**9, 1.0, 16) == pytest.approx(3.0)
    # the VGG11 thread: the classifier's 123,642,856 fp32 gradients (471.7 MiB) on 16 ranks
    classifier = 123_642_856 * 4
    assert bw.fmt_bytes(classifier) == "471.7 MiB"
    assert bw.algbw(classifier, 0.280682) == pytest.approx(1.76203, rel=1e-5)
    assert bw.busbw("all_reduce", classifier, 0.280682, 16) == pytest.approx(
        3.30382, rel=1e-5
    )  # per-param
    assert bw.busbw("all_reduce", classifier, 0.060, 16) == pytest.approx(
        15.45536, rel=1e-5
    )  # nccl-tests
    assert bw.algbw(100, 0.0) == 0.0


def test_size_list_like_nccl_tests():
    assert bw.size_list(1024, 16777216, 4) == [
        1024,
        4096,
        16384,
        65536,
        262144,
        1048576,
        4194304,
        16777216,
    ]
    assert bw.size_list(1001, 5000, 2) == [1001, 2002, 4004]
    assert bw.size_list(8, 8, 2) == [8]
    assert bw.size_list(10, 40, 1.5) == [10, 15, 22, 33]
    with pytest.raises(ValueError):
        bw.size_list(10, 5, 2)
    with pytest.raises(ValueError):
        bw.size_list(10, 50, 1)


def test_counts_and_rounding():
    # nccl-tests' count column: all_gather prints elements per rank, reduce_scatter elements each
    # rank receives
    assert bw.counts("all_gather", 1024, 4, 2) == {"send": 128, "recv": 256, "count": 128}
    assert bw.counts("reduce_scatter", 1024, 4, 2) == {"send": 256, "recv": 128, "count": 128}
    assert bw.counts("all_reduce", 1024, 2, 8) == {"send": 512, "recv": 512, "count": 512}
    assert bw.size_unit("all_gather", 4, 3) == 12 and bw.size_unit("broadcast", 4, 3) == 4
    assert (
        bw.round_size(1001, 8) == 1000 and bw.round_size(3, 8) == 8 and bw.round_size(16, 8) == 16
    )
    planned, note = collectives.plan_sizes("all_gather", [1001, 2002, 4004], 4, 2)
    assert planned == [(1001, 1000), (2002, 2000), (4004, 4000)]
    assert "multiple of 8 B" in note and "1001->1000" in note
    planned, note = collectives.plan_sizes("all_reduce", [1, 2, 4, 8], 4, 2)
    assert planned == [(1, 4), (8, 8)] and "dropped" in note
    assert collectives.plan_sizes("all_reduce", [1024, 4096], 4, 2) == (
        [(1024, 1024), (4096, 4096)],
        None,
    )


def test_exact_integer_limits():
    assert bw.exact_integer_limit("float32") == 2**24
    assert bw.exact_integer_limit("bfloat16") == 256
    assert bw.exact_integer_limit("float16") == 2048
    assert bw.exact_integer_limit("int8") == 127


# -------------------------------------------------------------------------------- correctness check
def simulate(op, redop, world, recv, dtype, root=0, salt=3):
    """What each rank would hold after a correct collective, computed directly from every rank's
    filled input."""
    tdt = bw.DTYPES[dtype][0]
    send = (
        recv * world if op == "reduce_scatter" else (recv // world if op == "all_gather" else recv)
    )
    inputs = []
    for r in range(world):
        buf = torch.zeros(send, dtype=tdt)
        fill_input(buf, redop if op in bw.REDUCING_OPS else None, r, world, dtype, salt)
        inputs.append(buf.double())
    if op == "broadcast":
        return [inputs[root].to(tdt)] * world
    if op == "all_gather":
        return [torch.cat(inputs).to(tdt)] * world
    stack = torch.stack(inputs)
    red = {
        "sum": stack.sum(0),
        "prod": stack.prod(0),
        "max": stack.amax(0),
        "min": stack.amin(0),
        "avg": stack.sum(0) / world,
    }[redop].to(tdt)
    if op == "all_reduce":
        return [red] * world
    return [red[r * recv : (r + 1) * recv] for r in range(world)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "int32"])
@pytest.mark.parametrize("redop", ["sum", "prod", "max", "min", "avg"])
@pytest.mark.parametrize("world", [2, 3, 8])
def test_expected_output_matches_a_correct_collective(dtype, redop, world):
    for op in bw.OPS:
        recv = 96 if op != "all_gather" else 96 * world
        for rank, got in enumerate(simulate(op, redop, world, recv, dtype)):
            want = expected_output(
                op,
                redop if op in bw.REDUCING_OPS else None,
                rank,
                world,
                recv,
                dtype,
                torch.device("cpu"),
                salt=3,
            )
            assert count_wrong(got, want, redop, dtype, world) == 0, (op, rank)
            # chunked evaluation (how large buffers are checked) gives the same values
            halves = torch.cat(
                [
                    expected_output(
                        op,
                        redop if op in bw.REDUCING_OPS else None,
                        rank,
                        world,
                        recv,
                        dtype,
                        torch.device("cpu"),
                        salt=3,
                        lo=lo,
                        hi=hi,
                    )
                    for lo, hi in ((0, recv // 3), (recv // 3, recv))
                ]
            )
            assert torch.equal(halves, want)


def test_check_catches_deliberately_wrong_results():
    world, recv = 4, 64
    got = simulate("all_reduce", "sum", world, recv, "float32")[0].clone()
    want = expected_output(
        "all_reduce", "sum", 0, world, recv, "float32", torch.device("cpu"), salt=3
    )
    assert count_wrong(got, want, "sum", "float32", world) == 0
    got[5] += 1  # one element off by one
    got[17] = float("nan")
    assert count_wrong(got, want, "sum", "float32", world) == 2
    # max instead of sum: the inputs differ across ranks, so every element is wrong
    maxed = simulate("all_reduce", "max", world, recv, "float32")[0]
    assert count_wrong(maxed, want, "sum", "float32", world) == recv
    # a broadcast that moved nothing leaves the non-root's zeros
    bwant = expected_output("broadcast", None, 1, world, recv, "float32", torch.device("cpu"))
    assert count_wrong(torch.zeros(recv), bwant, None, "float32", world) == recv
    # all_gather chunks in the wrong rank order
    g = (
        simulate("all_gather", None, world, recv * world, "int32")[0]
        .view(world, recv)
        .flip(0)
        .reshape(-1)
    )
    gwant = expected_output(
        "all_gather", None, 0, world, recv * world, "int32", torch.device("cpu"), salt=3
    )
    assert count_wrong(g, gwant, None, "int32", world) > 0
    # avg tolerates rounding of pre-multiplied sums but not a wrong value
    a = simulate("all_reduce", "avg", world, recv, "float32")[0].clone()
    awant = expected_output(
        "all_reduce", "avg", 0, world, recv, "float32", torch.device("cpu"), salt=3
    )
    assert count_wrong(a * (1 + 1e-7), awant, "avg", "float32", world) == 0
    a[0] += 0.5
    assert count_wrong(a, awant, "avg", "float32", world) == 1


def test_grad_pattern_is_exact_after_a_sum():
    shapes = [("a.weight", (5, 7)), ("a.bias", (5,)), ("b.weight", (3, 10000))]
    world = 3
    ranks = [grad_sync.Grads(shapes, r, world, torch.device("cpu")) for r in range(world)]
    for g in ranks:
        g.fill()
    summed = [sum(g.tensors[k] for g in ranks) for k in range(len(shapes))]
    g0 = ranks[0]
    for t, s in zip(g0.tensors, summed):
        t.copy_(s)
    assert g0.wrong_after_sum() == 0
    g0.tensors[2][1, 9999] += 1
    g0.tensors[1][0] = 0
    assert g0.wrong_after_sum() == 2


# ------------------------------------------------------------------------------------ config errors
@pytest.mark.parametrize(
    "overrides,words",
    [
        (["collectives.ops=[allreduce]"], "Did you mean all_reduce"),
        (["collectives.ops=[]"], "empty"),
        (["collectives.reduce_op=mean"], "collectives.reduce_op='mean' is not known"),
        (["collectives.dtype=float8"], "collectives.dtype='float8' is not known"),
        (["collectives.min_bytes=0"], "collectives.min_bytes=0: a size in bytes >= 1"),
        (["collectives.max_bytes=512"], "larger than max_bytes=512"),
        (["collectives.factor=1"], "collectives.factor=1.0: must be > 1"),
        (["collectives.inplace=sometimes"], "both"),
        (["collectives.iters=0"], "collectives.iters=0: must be >= 1"),
        (
            ["collectives.device=tpu"],
            "collectives.device='tpu' is not known; choose one of: auto, cpu, cuda",
        ),
        (["collectives.corrupt_rank=-1"], "collectives.corrupt_rank=-1: must be >= 0"),
        (["collectives.corrupt_rank=2"], "collectives.corrupt_rank=2 but the run has 2 ranks"),
        (
            ["backend=gloo", "collectives.reduce_op=avg", "collectives.dtype=int32"],
            "gloo averages in floating point",
        ),
        (["collectives.max_bytes=1048576G"], "Lower collectives.max_bytes"),
        (["backend=nccl", "collectives.device=cpu"], "NCCL only moves CUDA tensors"),
    ],
)
def test_collectives_bad_input(overrides, words):
    assert words in refused(["task=collectives", *overrides], host=ONE_GPU_EACH)


def test_collectives_what_gloo_can_do_is_accepted():
    accepted(["task=collectives", "backend=gloo", "collectives.reduce_op=avg"])  # float: fine


def test_collectives_inplace_modes():
    def modes(value):
        return collectives.modes(collectives.settings(composed([f"collectives.inplace={value}"])))

    assert modes("both") == ["out_of_place", "in_place"]  # default: nccl-tests' layout
    assert modes("true") == ["in_place"] and modes("false") == ["out_of_place"]


def test_pair_groups_refuses_more_ranks_than_the_machine_holds():
    too_many = OVERSUBSCRIBE_LIMIT * CPU_BOX.cpus // 2 + 1
    assert f"pairs={too_many} starts {2 * too_many} ranks" in refused(
        ["task=pair_groups", f"pairs={too_many}"]
    )
    with pytest.warns(UserWarning, match="oversubscribe"):
        accepted(["task=pair_groups", f"pairs={CPU_BOX.cpus}"])
    for bad, words in (
        (["pairs=0"], "pairs=0: must be >= 1"),
        (["pair_groups.iters=0"], "must be >= 1"),
        (["pair_groups.shape=[10,0]"], "positive dimensions"),
        (["pair_groups.threads=0"], "pair_groups.threads=0: must be >= 1"),
    ):
        assert words in refused(["task=pair_groups", *bad])


def test_grad_sync_bad_input():
    for bad, words in (
        (["grad_sync.iters=0"], "must be >= 1"),
        (["grad_sync.warmup_iters=-1"], "must be >= 0"),
        (["grad_sync.device=gpu"], "is not known"),
        (["bucket=0"], "bucket=0: must be > 0"),
    ):
        assert words in refused(["task=grad_sync", *bad])
    many_cpus = dataclasses.replace(CPU_BOX, cpus=10000)
    assert "3 copies of 506.8 MiB" in refused(
        ["task=grad_sync", "world_size=10000"], host=many_cpus
    )


# ---------------------------------------------------------------------------------------- grad_sync
def test_vgg11_shapes_and_ddp_buckets():
    shapes, ready, how = grad_sync.model_gradients(composed(["task=grad_sync"]))
    assert len(shapes) == 22 and "meta-device backward" in how
    classifier = sum(torch.Size(s).numel() for n, s in shapes if n.startswith("classifier"))
    assert classifier == 123_642_856
    shapes, ready, _ = grad_sync.model_gradients(composed(["task=grad_sync", "model=vgg11_tiny"]))
    # autograd's order: the classifier first (last layer first, bias before weight), then the convs
    # weight first
    assert ready[:8] == [21, 20, 19, 18, 17, 16, 14, 15]
    g = grad_sync.Grads(shapes, 0, 2, torch.device("cpu"))
    b = grad_sync.Bucketed(g, bucket_mb=0.01, device=torch.device("cpu"), ready=ready)
    # what DistributedDataParallel(bucket_cap_mb=0.01) reports after its rebuild on 2 gloo ranks
    # (torch 2.15): rebuilt_bucket_sizes '55848, 11648, 4000', indices '21 20 19 18 17 16, 14 15 12
    # 13 10 11 8 9 6, 7 4 5 2 3 0 1'
    assert b.bucket_bytes == [55848, 11648, 4000]
    assert b.buckets == [
        [21, 20, 19, 18, 17, 16],
        [14, 15, 12, 13, 10, 11, 8, 9, 6],
        [7, 4, 5, 2, 3, 0, 1],
    ]
    assert sum(b.bucket_bytes) == g.total_bytes


def test_latency_bandwidth_fit():
    rows = [{"bytes": n, "time_s": 1e-4 + n / 2e9} for n in (4, 1000, 10**6, 10**8)]
    fit = fit_latency_bandwidth(rows)
    assert fit["alpha_s"] == pytest.approx(1e-4) and fit["beta_GBps"] == pytest.approx(2.0)


def synthetic(n, t_pp, t_mb, lat, small_calls=()):
    m = lambda t: {  # noqa: E731 - helper
        "time_s": t,
        "time_max_s": t,
        "algbw_GBps": 1e9 / t / 1e9,
        "busbw_GBps": 1e9 / t / 1e9,
    }
    return GradSyncResult.from_dict(
        {
            "param_tensors": n,
            "total_bytes": 10**9,
            "latency": {"time_s": lat},
            "methods": {"per_param": m(t_pp), "microbench": m(t_mb)},
            "fit": None,
            "per_param": [{"bytes": 256, "time_s": t} for t in small_calls],
        }
    )


def test_explanation_follows_the_numbers():
    latency_bound = grad_sync.explain(synthetic(n=1000, t_pp=0.60, t_mb=0.10, lat=0.0005))
    assert any("per-call latency dominates" in x for x in latency_bound)
    assert "999 extra calls x 0.5 ms latency = 500 ms" in " ".join(latency_bound)
    bandwidth_bound = grad_sync.explain(synthetic(n=22, t_pp=0.280, t_mb=0.060, lat=0.0001))
    assert any("is bandwidth" in x and "GB/s algbw" in x for x in bandwidth_bound)
    same = grad_sync.explain(synthetic(n=22, t_pp=0.101, t_mb=0.100, lat=0.0001))
    assert any("within the spread" in x and "bandwidth-bound" in x for x in same)
    # the loop's own small calls (2 ms each) set the latency when there are enough of them, not the
    # 0.1 ms probe
    loop = grad_sync.explain(
        synthetic(n=100, t_pp=0.30, t_mb=0.10, lat=0.0001, small_calls=[0.002] * 5)
    )
    assert "Per-call latency here: 2 ms (median of the 5 per-parameter calls" in " ".join(loop)
    assert any("per-call latency dominates" in x for x in loop)
