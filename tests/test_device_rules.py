"""The rules the GPU paths follow, as pure functions and checks that run without a GPU: CUDA-graph
feasibility, DDP's own timing waits, the CUDA device layer's calls (against the torch installed),
communication figures that were not measured, NCCL's transport lines, and the non-deprecated
collective names."""

import dataclasses
import inspect
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from comm.env import parse_transports, transport_name, transports_from_logs
from device.placement import Placement
from tasks.train.cuda_graphs import problems
from tasks.train.ddp import stats_waits, synchronised_iterations, warmup_warning
from base.record_types import BucketInfo, DdpInfo
from tasks.train.result import comm_figures
from tests.bad_input import CPU_BOX, accepted, refused
from tests.conftest import TINY, compose, close_group

GiB = 2**30
GRAPHS = ["model=vgg11_tiny", "scale=smoke", "cuda_graphs=true"]
ONE_GPU = dataclasses.replace(CPU_BOX, gpus=1, cpus=8)
TWO_GPUS = dataclasses.replace(CPU_BOX, gpus=2, cpus=8)
FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
CUDA = Placement("cuda", 0, "nccl", "test")


# -------------------------------------------------------------------------------------- CUDA graphs
def graph_cfg(*over):
    return compose(["model=vgg11_tiny", "scale=smoke", "logger=none", "cuda_graphs=true", *over])


def test_graphs_on_one_gpu_per_rank_with_nccl_are_feasible():
    assert problems(graph_cfg(), CUDA) == []
    assert (
        problems(graph_cfg("backend=gloo", "sync=local"), Placement("cuda", 0, "gloo", "t")) == []
    )


@pytest.mark.parametrize(
    "placement,over,expect",
    [
        (
            Placement("cpu", None, "gloo", "no GPU visible"),
            [],
            "the ranks run on CPU (no GPU visible)",
        ),
        (
            Placement("cuda", 0, "gloo", "t"),
            ["backend=gloo"],
            "backend=gloo: its CUDA path waits on the host",
        ),
        (Placement("cuda", 0, "gloo", "t", shared=True), ["sync=local"], "ranks share GPUs"),
        (CUDA, ["sync=flat"], "sync=flat"),
        (CUDA, ["accumulate=2"], "accumulate>1"),
    ],
)
def test_graph_problems(placement, over, expect):
    """Defect 4: gloo (its CUDA path waits on the host) and ranks without a GPU each were accepted
    and crashed."""
    assert any(expect in p for p in problems(graph_cfg(*over), placement))


def test_graphs_with_two_ranks_on_a_one_gpu_box_are_refused_before_any_rank():
    assert "rank 0 cannot have a GPU of its own" in refused(
        GRAPHS + ["world_size=2", "backend=gloo"], host=ONE_GPU
    )
    assert (
        "cuda_graphs=true needs a CUDA GPU per rank and the ranks would run on CPU (device=cpu)"
        in refused(GRAPHS + ["world_size=2", "device=cpu"], host=ONE_GPU)
    )


def test_graphs_on_the_fake_device_accept_gloo():
    assert problems(graph_cfg("device=fake"), Placement("fake", None, "gloo", "t")) == []


def test_graphs_submitted_to_slurm_without_gpus_are_refused():
    cfg = graph_cfg("launcher=slurm")
    assert any("no GPUs requested" in p for p in problems(cfg, None))
    assert problems(graph_cfg("launcher=slurm_1x8"), None) == []


# --------------------------------------------------------------------------------- DDP warm-up rule
def test_ddp_waits_at_synchronised_forwards_2_to_11():
    assert stats_waits(before=0, during=3) == 2  # forwards 2 and 3 read the timings of 1 and 2
    assert stats_waits(before=10, during=50) == 1  # forward 11 reads iteration 10's
    assert stats_waits(before=11, during=50) == 0
    assert synchronised_iterations(3, accumulate=4, static_graph=False) == 3
    assert synchronised_iterations(3, accumulate=4, static_graph=True) == 4


GPU_BLOCKS = [
    "measure.block_steps=10"
]  # the GPU scales' blocks (scale=smoke times every step alone)


def test_warmup_rule_counts_synchronised_steps_not_micro_steps():
    """Defect 6: accumulate=4 warmup_steps=3 passed the old check (3 x 4 >= 10) with 8 waits in the
    window; two of them open a timed block (50 steps: blocks of 5, steps 0 and 5), so 6 are
    timed."""
    cfg = compose([*TINY, *GPU_BLOCKS, "accumulate=4", "warmup_steps=3", "steps=50"])
    message = warmup_warning(cfg)
    assert message and message.startswith(
        "warmup_steps=3: 6 measured step(s) include a host wait inside a timed block"
    )
    assert "warmup_steps>=11" in message
    assert warmup_warning(compose([*TINY, *GPU_BLOCKS, "warmup_steps=11"])) is None


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["scale=vit_study"],
        ["scale=paper"],
        ["scale=smoke"],
        ["experiment=vit_ddp_optimizations", "scale=vit_study"],
    ],
)
def test_no_warmup_warning_where_the_wait_opens_a_block(overrides):
    """Issue 19.7: the shipped presets warned, but their one wait (forward 11 after 10 warm-up
    steps) is the first step of a block, run right after the block's device sync and barrier:
    nothing is left to wait for."""
    cfg = compose([*overrides, "logger=none"])
    cfg.warmup_steps, cfg.steps = cfg.scale.warmup_steps, cfg.scale.steps
    cfg.measure.block_steps = 10  # as on a GPU machine (gpu_or)
    assert warmup_warning(cfg) is None
    cfg.warmup_steps = 2  # forwards 3..11 measured: blocks of 5 or 8 put most mid-block
    assert warmup_warning(cfg) is not None or cfg.steps < 12


def test_check_warns_on_gpu_only(monkeypatch):
    monkeypatch.setattr(
        "tasks.train.memory.capacity", lambda placement, ranks: (80 * GiB, "a test GPU")
    )
    with pytest.warns(UserWarning, match="6 measured step"):
        accepted(
            [*TINY, *GPU_BLOCKS, "accumulate=4", "warmup_steps=3", "steps=50", "world_size=2"],
            host=TWO_GPUS,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accepted([*TINY, *GPU_BLOCKS, "accumulate=4", "warmup_steps=3", "world_size=2"])


# --------------------------------------------------------------------------- the CUDA layer, mocked
class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return self

        return record

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_cuda_capture_is_thread_local(monkeypatch):
    """Defect 7: capture in the default "global" mode races the DataLoader's pin-memory thread."""
    from device.cuda import CudaDevice

    assert (
        "capture_error_mode" in inspect.signature(torch.cuda.graph).parameters
    )  # the torch installed has it
    seen = {}

    def graph(g, **kwargs):
        seen.update(kwargs)
        return Recorder()

    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: Recorder())
    monkeypatch.setattr(torch.cuda, "graph", graph)
    out = CudaDevice(0).capture(lambda: "loss")
    assert seen == {"capture_error_mode": "thread_local"} and out.output == "loss"


def test_cuda_window_raises_on_syncs_and_restores_the_mode(monkeypatch):
    from device.cuda import CudaDevice, HostSyncInWindow

    assert '"error"' in inspect.getsource(
        torch.cuda.set_sync_debug_mode
    )  # the mode this torch knows
    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    dev = CudaDevice(0)
    with pytest.raises(HostSyncInWindow, match="inside the measured window"):
        with dev.window(strict=True):
            raise RuntimeError("called a synchronizing CUDA operation")
    assert modes == ["error", 0] and dev.window_check(True) == "error"
    with dev.window(strict=False):
        pass
    assert modes == ["error", 0] and dev.window_check(False) == "off"


def test_cuda_calls_exist_in_the_torch_installed():
    """Every torch.cuda call device/cuda.py makes, checked against this torch (no GPU needed to look
    them up)."""
    for name in (
        "Stream",
        "current_stream",
        "stream",
        "Event",
        "synchronize",
        "CUDAGraph",
        "graph",
        "set_sync_debug_mode",
        "get_sync_debug_mode",
        "get_device_properties",
        "get_device_name",
    ):
        assert hasattr(torch.cuda, name), name
    assert hasattr(torch.Tensor, "record_stream")
    assert "stream" in inspect.signature(torch.cuda.Event.record).parameters
    assert "wait_stream" in dir(torch.cuda.Stream)


# ------------------------------------------------------------------ comm figures, transports, names
def test_ddp_without_its_runtime_stats_records_not_measured():
    """Defect 3: with no probe the empty DDP sync phase became time_s=0 under the explicit-strategy
    method."""
    steps = [
        {"data": 0.1, "forward": 0.2, "backward": 0.3, "sync": 1e-6, "optimizer": 0.1, "step": 0.7}
    ] * 3
    ddp = DdpInfo(buckets=BucketInfo(count=1, sizes_bytes=[4]))
    c = comm_figures(ddp, 2, steps, None, collectives=1, nbytes=4)
    assert c.time_s is None and c.exposed_s is None and c.method.startswith("not measured")
    explicit = comm_figures(None, 2, steps, None, collectives=22, nbytes=4)
    assert explicit.time_s == 1e-6 and explicit.method.startswith("median sync phase")
    graphed = [{"data": 0.1, "h2d": 0.1, "graph_replay": 0.5, "step": 0.7}] * 3
    probe = {
        "comm_s": 0.2,
        "overlap_s": 0.1,
        "backward_compute_s": 0.3,
        "method": "eager steps before capture",
    }
    c = comm_figures(DdpInfo(buckets=BucketInfo()), 2, graphed, probe, collectives=1, nbytes=4)
    assert c.time_s == 0.2 and c.method == "eager steps before capture"


@pytest.mark.parametrize(
    "log,expected",
    [
        ("p2p.log", {"P2P/CUMEM/read": 4}),
        ("shm.log", {"SHM/direct/direct": 4}),
        ("net_ib.log", {"NET/IB/GDRDMA": 4, "P2P/CUMEM/read": 4}),
    ],
)
def test_nccl_transports_from_saved_logs(tmp_path, log, expected):
    """Defect 10: NET connections are logged by both ends and carry the NIC index; they were counted
    twice, per NIC."""
    shutil.copy(FIXTURES / log, tmp_path / "nccl_debug.host.1.log")
    assert transports_from_logs(tmp_path) == expected


def test_transport_names_drop_the_nic_index():
    assert transport_name("NET/IB/1/GDRDMA(PCI)/Shared") == "NET/IB/GDRDMA"
    assert transport_name("NET/Socket/0") == "NET/Socket"
    assert transport_name("P2P/CUMEM/read") == "P2P/CUMEM/read"
    assert parse_transports(
        ["a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer/read"]
    ) == {"P2P/direct pointer/read": 1}


def test_all_gather_and_reduce_scatter_run_with_future_warnings_as_errors(tmp_path):
    from tasks.collectives import Case, settings

    c = settings(compose(["task=collectives", "logger=none"]))
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            for op in ("all_gather", "reduce_scatter"):
                Case(op, "out_of_place", 64, c, 0, 1, torch.device("cpu"))()
    finally:
        close_group()


def test_powersgd_without_warm_start_is_noted_in_the_record(tmp_path):
    from tasks.train.ddp import DDPSync

    cfg = OmegaConf.create(
        {
            "optim": {
                "_target_": "tasks.train.hooks.powersgd",
                "name": "powersgd",
                "rank": 1,
                "start_iter": 2,
                "min_compression_rate": 2.0,
                "use_error_feedback": True,
                "warm_start": False,
                "orthogonalization_epsilon": 0.0,
                "random_seed": 0,
                "batch_tensors_with_same_shape": False,
                "batched": False,
            },
            "cuda_graphs": False,
            "bucket": 25,
            "ddp": {
                "static_graph": False,
                "broadcast_buffers": True,
                "gradient_as_bucket_view": False,
                "find_unused_parameters": False,
            },
        }
    )
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        described = DDPSync(cfg, torch.nn.Linear(4, 2), torch.device("cpu")).describe()
    finally:
        close_group()
    assert "refills its Q matrices from CPU torch.randn every step" in described.powersgd_note
