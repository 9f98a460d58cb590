"""Each DDP knob changes what ran, seen in the record: buckets built, bytes sent, hooks called,
no_sync skipping communication, DDP's own report of its flags, autocast dtype, profiler traces, comm
environment. Five runs, made once in this process (run_job on composed configs, 2 gloo ranks each)
and shared by the tests."""

import json

import pytest

from tests.conftest import TINY, run_inprocess

pytestmark = pytest.mark.slow
# no in-job check: no test here reads it, and the powersgd run's check of bf16 took its 3 s budget
# (diagnose.verify_min_s) of both ranks; the check's own runs are test_verify_runs'
BASE = [*TINY, "bucket=0.001", "warmup_steps=2", "diagnose.verify=false"]
RUNS = {
    "none": [],
    "bf16": [
        "optim=bf16",
        "accumulate=2",
        "ddp.static_graph=true",
        "ddp.gradient_as_bucket_view=true",
    ],
    "fp16": ["optim=fp16"],
    "powersgd": ["optim=powersgd"],
    "misc": [
        "bucket=25",
        "ddp.find_unused_parameters=true",
        "ddp.broadcast_buffers=false",
        "precision=bf16",
        "profile.enabled=true",
        "profile.wait=0",
        "profile.warmup=1",
        "profile.active=1",
        "nccl.DEBUG=INFO",
        "gloo.SOCKET_IFNAME=lo",
    ],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name, extra in RUNS.items():
        tmp = tmp_path_factory.mktemp(name)
        rec, code = run_inprocess([*BASE, *extra], tmp)
        assert code == 0 and rec["status"] == "ok", f"{name}: {rec and rec.get('error')}"
        out[name] = rec
        out[name]["_dir"] = tmp / "run"
    return out


def comm(runs, name):
    return runs[name]["result"]["comm"]


def test_bucket_cap_changes_the_buckets_ddp_built(runs):
    small, default = comm(runs, "none")["buckets"], comm(runs, "misc")["buckets"]
    assert small["count"] > default["count"] >= 1
    assert sum(small["sizes_bytes"]) == sum(
        default["sizes_bytes"]
    )  # same gradients, cut differently
    assert (
        comm(runs, "none")["collectives_per_step"] == small["count"]
    )  # built-in reducer: one all-reduce per bucket


@pytest.mark.parametrize("scheme", ["bf16", "fp16"])
def test_compression_hooks_halve_the_bytes_and_really_run(runs, scheme):
    base, c = comm(runs, "none"), comm(runs, scheme)
    assert c["bytes_per_step"] == base["bytes_per_step"] / 2
    assert (
        c["collectives_per_step"] == base["collectives_per_step"]
    )  # seen by the counter: the Python hook ran
    ddp = runs[scheme]["result"]["ddp"]
    assert ddp["comm_hook"] == f"{scheme}_compress_hook" and ddp["comm_hook_calls"] > 0


def test_powersgd_sends_fewer_bytes(runs):
    assert comm(runs, "powersgd")["bytes_per_step"] < comm(runs, "none")["bytes_per_step"] / 2
    assert (
        runs["powersgd"]["result"]["ddp"]["powersgd_iter"]
        > runs["powersgd"]["config"]["optim"]["start_iter"]
    )


def test_gradient_error_is_measured_for_lossy_schemes(runs):
    err = {
        k: runs[k]["result"]["accuracy"]["grad_rel_error"]
        for k in ("none", "fp16", "bf16", "powersgd")
    }
    assert err["none"] is None
    assert 0 < err["fp16"] < err["bf16"] < 0.05  # fp16 keeps 3 more mantissa bits than bf16
    assert err["powersgd"] > err["bf16"]  # a rank-1 approximation loses more than rounding


def test_accumulate_skips_communication_on_micro_steps(runs):
    r, base = runs["bf16"]["result"], runs["none"]["result"]
    assert r["accumulate"] == 2 and r["effective_batch"] == 2 * r["global_batch"]
    assert (
        r["comm"]["collectives_per_step"] == base["comm"]["collectives_per_step"]
    )  # not doubled: no_sync skipped


def test_ddp_reports_the_flags_it_ran_with(runs):
    on, misc, none = (
        runs["bf16"]["result"]["ddp"],
        runs["misc"]["result"]["ddp"],
        runs["none"]["result"]["ddp"],
    )
    assert on["static_graph"] and on["gradient_as_bucket_view"]
    assert not none["static_graph"] and not none["gradient_as_bucket_view"]
    assert (
        misc["find_unused_parameters"]
        and not misc["broadcast_buffers"]
        and none["broadcast_buffers"]
    )


def test_precision_bf16_autocasts_the_forward(runs):
    assert runs["misc"]["result"]["forward_dtype"] == "bfloat16"
    assert runs["none"]["result"]["forward_dtype"] == "float32"
    for name in (
        "none",
        "misc",
    ):  # torch's own TF32 defaults in effect, recorded (precision=fp32 and bf16 keep them)
        assert runs[name]["result"]["precision_flags"] == {
            "cudnn_allow_tf32": True,
            "matmul_allow_tf32": False,
            "float32_matmul_precision": "highest",
        }


def test_profile_writes_a_chrome_trace_per_rank(runs):
    for rank in (0, 1):
        trace = runs["misc"]["_dir"] / f"trace.rank{rank}.json"
        assert trace.exists(), f"missing {trace}"
        assert "traceEvents" in json.loads(trace.read_text())


def test_comm_environment_is_set_and_recorded(runs):
    v = runs["misc"]["env"]["vars"]
    assert v["NCCL_DEBUG"] == "INFO" and v["GLOO_SOCKET_IFNAME"] == "lo"
    assert "NCCL_DEBUG" not in runs["none"]["env"]["vars"]
