"""Memory preflight (tasks/train/memory.py): the estimate's parts against what torch really
allocates and saves on CPU, and the refusal before any rank starts, naming the batch size that
fits."""

import dataclasses
import re

import pytest
import torch
from omegaconf import OmegaConf

from job.config import prepare
from base.errors import ConfigError
from tasks.train.memory import GiB, estimate, preflight
from device.placement import Placement
from models import build_model
from tests.bad_input import CPU_BOX, accepted, refused
from tests.conftest import TINY, compose

TWO_GPUS = dataclasses.replace(CPU_BOX, gpus=2, cpus=16, free_bytes=64 * GiB)

CPU = Placement("cpu", None, "gloo", "test")


def cfg_of(*over):
    return OmegaConf.create(prepare(compose([*TINY, *over])))


def saved_bytes_on_cpu(cfg, batch: int) -> int:
    """What autograd really keeps for backward in one CPU forward (parameters excluded)."""
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.data.image_size)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    x = torch.randn(batch, 3, cfg.data.image_size, cfg.data.image_size)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.CrossEntropyLoss()(model(x), torch.zeros(batch, dtype=torch.long))
    largest = sorted(saved.values())[-2:]
    return sum(saved.values()) + sum(largest)


def test_parts_match_what_torch_allocates():
    cfg = cfg_of()
    est = estimate(cfg)
    model = build_model(cfg.model, cfg.data.image_size)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert est.fixed == {
        "parameters": params,
        "gradients": params,
        "momentum": params,
        "buckets": params,
    }
    for batch in (1, 3):
        assert est.activations_fixed + est.per_sample * batch == saved_bytes_on_cpu(cfg, batch)


def test_parts_follow_the_knobs():
    assert "buckets" not in estimate(cfg_of("ddp.gradient_as_bucket_view=true")).fixed
    assert "momentum" not in estimate(cfg_of("solver.momentum=0")).fixed
    assert "buckets" not in estimate(cfg_of("sync=per_param")).fixed
    half = estimate(cfg_of("optim=bf16")).fixed
    assert half["comm hook"] == half["gradients"] // 2


def test_a_batch_that_does_not_fit_is_refused_with_the_one_that_does():
    cfg = cfg_of("batch_size=64")
    room = preflight(cfg, CPU, 1, room=(1 << 50, "a large room")).total(
        40
    )  # with the reserve and the data pool
    with pytest.raises(
        ConfigError,
        match="batch_size=64 does not fit in test room.*batch_size=40 fits by this "
        "estimate \\(or accumulate=2 batch_size=32: the same effective batch\\)",
    ):
        preflight(cfg, CPU, 1, room=(room, "test room"))
    assert preflight(cfg_of("batch_size=40"), CPU, 1, room=(room, "test room")) is not None


def test_a_model_larger_than_the_device_is_refused_for_every_batch():
    with pytest.raises(ConfigError, match="No batch size fits"):
        preflight(cfg_of(), CPU, 1, room=(1024, "a tiny device"))


def test_the_train_check_refuses_before_any_rank_starts(monkeypatch):
    """GPU ranks: against their GPU, naming the batch size that fits; CPU ranks: against the host's
    free memory."""
    monkeypatch.setattr(
        "tasks.train.memory.capacity",
        lambda placement, ranks: (8 * GiB, "cuda:0 (a test GPU, 8.0 GiB)"),
    )
    message = refused(
        ["model=vgg11", "scale=smoke", "world_size=2", "batch_size=4096", "data.image_size=224"],
        host=TWO_GPUS,
    )
    assert "model=vgg11 batch_size=4096 does not fit in cuda:0 (a test GPU, 8.0 GiB)" in message
    fits = int(re.search(r"batch_size=(\d+) fits by this estimate", message).group(1))
    accepted(
        ["model=vgg11", "scale=smoke", "world_size=2", f"batch_size={fits}", "data.image_size=224"],
        host=TWO_GPUS,
    )
    small = dataclasses.replace(CPU_BOX, free_bytes=GiB // 2)
    assert "world_size=2: 2 ranks need about" in refused([*TINY], host=small)


def test_an_image_too_small_for_the_model_is_bad_input():
    with pytest.raises(
        ConfigError, match="model=vgg11_tiny cannot take data.image_size=8 inputs .* Use a larger"
    ):
        prepare(compose([*TINY, "data.image_size=8"]))


# ------------------------------------------------------------------- host memory (issue 19, item 1)
MEMINFO = """MemTotal:       24576000 kB
MemFree:         2621440 kB
MemAvailable:   22020096 kB
Buffers:          102400 kB
Cached:         18874368 kB
"""


def _cgroup_v2(root, limit: str, current: int, inactive_file: int, path: str = "job"):
    (root / "cgroup.controllers").write_text("memory\n")
    d = root / path
    d.mkdir(parents=True)
    (d / "memory.max").write_text(limit + "\n")
    (d / "memory.current").write_text(f"{current}\n")
    (d / "memory.stat").write_text(f"anon 100\ninactive_file {inactive_file}\nactive_file 5\n")
    (root / "self_cgroup").write_text(f"0::/{path}\n")
    return root / "self_cgroup"


def test_host_memory_counts_what_the_kernel_can_give_not_mem_free(tmp_path):
    """A healthy machine whose page cache fills memory: 2.5 GiB free, 21 GiB available. The old
    reading (the pages nobody uses) refused the default run; MemAvailable counts the cache the
    kernel gives back."""
    from device.host import free_host_bytes

    (tmp_path / "meminfo").write_text(MEMINFO)
    no_cgroup = tmp_path / "none"
    assert free_host_bytes(tmp_path / "meminfo", no_cgroup, tmp_path) == 21 * GiB
    host = dataclasses.replace(
        CPU_BOX, free_bytes=free_host_bytes(tmp_path / "meminfo", no_cgroup, tmp_path)
    )
    accepted([], host=host)  # the default VGG11 job: about 5.3 GiB for 2 ranks
    assert "21.0 GiB is available" in refused(["world_size=16"], host=host)


def test_a_cgroup_limit_counts_where_it_leaves_less_room(tmp_path):
    from device.host import cgroup_room, free_host_bytes

    (tmp_path / "meminfo").write_text(MEMINFO)
    v2 = tmp_path / "v2"
    v2.mkdir()
    own = _cgroup_v2(v2, str(8 * GiB), current=6 * GiB, inactive_file=3 * GiB)
    assert cgroup_room(own, v2) == 5 * GiB  # limit - usage + the page cache it reclaims first
    assert free_host_bytes(tmp_path / "meminfo", own, v2) == 5 * GiB
    unlimited = tmp_path / "unlimited"
    unlimited.mkdir()
    own = _cgroup_v2(unlimited, "max", current=6 * GiB, inactive_file=0)
    assert (
        cgroup_room(own, unlimited) is None
        and free_host_bytes(tmp_path / "meminfo", own, unlimited) == 21 * GiB
    )
    v1 = tmp_path / "v1"  # cgroup v1: the memory controller's own hierarchy
    (v1 / "memory" / "slurm" / "job_7").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text(
        "9223372036854771712\n"
    )  # the root: no limit
    (v1 / "memory" / "slurm" / "memory.limit_in_bytes").write_text(f"{4 * GiB}\n")
    (v1 / "memory" / "slurm" / "memory.usage_in_bytes").write_text(f"{3 * GiB}\n")
    (v1 / "memory" / "slurm" / "job_7" / "memory.limit_in_bytes").write_text(f"{16 * GiB}\n")
    (v1 / "memory" / "slurm" / "job_7" / "memory.usage_in_bytes").write_text(f"{GiB}\n")
    (v1 / "self_cgroup").write_text("5:cpu:/\n4:memory:/slurm/job_7\n0::/\n")
    assert cgroup_room(v1 / "self_cgroup", v1) == GiB  # the parent's limit is the tighter one


@pytest.mark.parametrize(
    "over",
    [(), ("model=vit_tiny",), ("model=timm_tiny",), ("sync=per_param", "data.image_size=32")],
)
def test_a_small_model_on_cpu_ranks_takes_its_activation_pass_on_the_cpu(over):
    """A small model's activation pass runs on the CPU where its ranks do (milliseconds; the first
    meta forward of a process loads torch's meta kernels and sympy, 1.2-1.7 CPU s): what torch
    saves there, the meta pass's bytes for a convolution net, and the caller's RNG left where it
    was. A GPU's ranks keep the meta pass."""
    cfg = cfg_of(*over)
    torch.manual_seed(123)
    cpu, meta = estimate(cfg, "cpu"), estimate(cfg, "cpu", route="meta")
    after = torch.rand(1)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(1))  # neither route drew from the caller's RNG
    assert cpu == estimate(cfg, "cpu", route="cpu") and cpu.activations_counted
    for batch in (1, 3):
        assert cpu.activations_fixed + cpu.per_sample * batch == saved_bytes_on_cpu(cfg, batch)
    assert cpu == meta or not cfg.model.name.startswith("vgg")  # a convolution net: the same
    assert estimate(cfg, "cuda") == estimate(cfg, "cuda", route="meta")


def test_a_small_model_on_large_inputs_keeps_the_meta_pass(monkeypatch):
    """The CPU pass allocates what autograd saves; past CPU_ROUTE_INPUT elements a sample the meta
    pass, which allocates nothing, decides."""
    import tasks.train.memory as memory

    at_256, at_288 = cfg_of("data.image_size=256"), cfg_of("data.image_size=288")
    devices = []
    real = memory._activation_bytes
    monkeypatch.setattr(memory, "_activation_bytes", lambda *a: devices.append(a[-1]) or real(*a))
    estimate(at_256, "cpu")
    estimate(at_288, "cpu")
    assert devices == ["cpu", "cpu", "meta", "meta"]


def test_a_model_the_cpu_cannot_run_falls_back_to_the_meta_pass(monkeypatch):
    """A forward the CPU refuses (a CUDA-only kernel in the user's model) is not a refused config:
    the meta pass decides, as before the CPU route."""
    import tasks.train.memory as memory

    real = memory._activation_bytes

    def cpu_refuses(model, *a):
        if a[-1] == "cpu":
            raise RuntimeError("no CPU kernel for this op")
        return real(model, *a)

    monkeypatch.setattr(memory, "_activation_bytes", cpu_refuses)
    cfg = cfg_of()
    assert estimate(cfg, "cpu") == estimate(cfg, "cpu", route="meta")
