"""Device and backend choice (device/placement.py): pure functions with the GPU count and the
environment injected, so every Slurm binding variant is checked here without a GPU; then the
agreement between ranks, in the parent (before any rank starts) and inside a real 1-rank process
group."""

import os
import socket
from datetime import timedelta

import pytest
import torch.distributed as dist

from device.host import gpu_count
from device.placement import Placement, PlacementError, agree, place, preflight, settle
from tests.conftest import compose, close_group

NO_SLURM: dict = {}


def test_tests_not_marked_gpu_see_no_gpu():
    """Defect 1: whatever the machine has, this test (and the ranks and train.py runs of other
    unmarked tests) sees no GPU, so the gloo/CPU paths are what the suite tests."""
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert gpu_count() == 0


def test_device_cpu_keeps_ranks_on_cpu_on_a_2_gpu_machine():
    p = place("cpu", "auto", visible=2, local_rank=1, local_world=2, env=NO_SLURM)
    assert (p.kind, p.gpu, p.backend) == ("cpu", None, "gloo")


def test_every_local_rank_sees_all_gpus():
    p = place("auto", "auto", visible=8, local_rank=3, local_world=8, env=NO_SLURM)
    assert (p.kind, p.gpu, p.backend) == ("cuda", 3, "nccl")


def test_gpus_per_task_binding():
    env = {"SLURM_GPUS_PER_TASK": "1", "SLURM_GPUS_ON_NODE": "8"}
    p = place("auto", "auto", visible=1, local_rank=5, local_world=8, env=env)
    assert (p.kind, p.gpu, p.backend) == ("cuda", 0, "nccl") and "gpus-per-task" in p.how


def test_gpus_per_task_as_tres():
    env = {"SLURM_TRES_PER_TASK": "cpu=4,gres/gpu:a100=2"}
    p = place("auto", "auto", visible=2, local_rank=1, local_world=4, env=env)
    assert (p.kind, p.gpu) == ("cuda", 0)


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_GPUS_ON_NODE": "8", "SLURM_GPU_BIND": "single:1"},  # --gpu-bind=single:1
        {
            "SLURM_STEP_GPUS": "0,1,2,3,4,5,6,7",
            "CUDA_VISIBLE_DEVICES": "5",
        },  # --gpu-bind=map_gpu:0,...,7
        {"SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"},  # a site default binding
        {"SLURM_GPUS_PER_NODE": "a100:8"},
    ],
)
def test_slurm_binds_one_gpu_per_task_without_gpus_per_task(env):
    """Defect 5: device_count()==1 while LOCAL_WORLD_SIZE=8 and SLURM_GPUS_PER_TASK unset was placed
    on CPU (gloo)."""
    p = place("auto", "auto", visible=1, local_rank=6, local_world=8, env=env)
    assert (p.kind, p.gpu, p.backend) == ("cuda", 0, "nccl") and "bound" in p.how


def test_ranks_sharing_one_gpu_fail_loudly_instead_of_running_on_cpu():
    with pytest.raises(PlacementError, match="cannot have a GPU of its own.*device=cpu"):
        place("auto", "auto", visible=1, local_rank=1, local_world=2, env=NO_SLURM)
    with pytest.raises(PlacementError, match="cannot have a GPU of its own"):
        place(
            "auto", "auto", visible=1, local_rank=0, local_world=8, env={"SLURM_GPUS_ON_NODE": "1"}
        )


def test_gpus_requested_but_none_visible_fails_loudly():
    with pytest.raises(
        PlacementError, match="Slurm gave this job GPUs .SLURM_GPUS_ON_NODE=4. but rank 2 sees none"
    ):
        place(
            "auto", "auto", visible=0, local_rank=2, local_world=4, env={"SLURM_GPUS_ON_NODE": "4"}
        )


def test_no_gpu_anywhere_is_cpu_gloo():
    p = place(
        "auto", "auto", visible=0, local_rank=0, local_world=2, env={"SLURM_GPUS_ON_NODE": "0"}
    )
    assert (p.kind, p.backend) == ("cpu", "gloo")


def test_device_cuda_with_gloo_may_share_gpus():
    p = place("cuda", "gloo", visible=1, local_rank=1, local_world=2, env=NO_SLURM)
    assert (p.kind, p.gpu, p.backend, p.shared) == ("cuda", 0, "gloo", True)


@pytest.mark.parametrize(
    "device,backend,visible,match",
    [
        ("cpu", "nccl", 2, "NCCL only moves CUDA tensors"),
        ("fake", "nccl", 0, "NCCL only moves CUDA tensors"),
        ("cuda", "auto", 0, "device=cuda needs CUDA GPUs"),
        ("auto", "nccl", 0, "backend=nccl needs CUDA GPUs"),
        ("gpu", "auto", 0, "device='gpu' is not known"),
    ],
)
def test_bad_requests(device, backend, visible, match):
    with pytest.raises(PlacementError, match=match):
        place(device, backend, visible, 0, 1, NO_SLURM)


def test_fake_is_cpu_with_gloo():
    p = place("fake", "auto", visible=0, local_rank=0, local_world=2, env=NO_SLURM)
    assert (p.kind, p.backend, str(p.torch_device)) == ("fake", "gloo", "cpu")


def facts(rank, host, kind="cuda", backend="nccl", gpu="GPU-a", shared=False):
    return {
        "rank": rank,
        "host": host,
        "kind": kind,
        "backend": backend,
        "gpu": gpu,
        "shared": shared,
    }


def test_agree_refuses_nodes_that_chose_differently():
    """Defect 5: nodes that see different GPU counts used to mix nccl and gloo and hang at init."""
    everyone = [
        facts(0, "a", gpu="GPU-0"),
        facts(1, "a", gpu="GPU-1"),
        facts(2, "b", "cpu", "gloo", None),
        facts(3, "b", "cpu", "gloo", None),
    ]
    with pytest.raises(PlacementError, match="ranks 0,1: cuda/nccl; ranks 2,3: cpu/gloo"):
        agree(everyone)


def test_agree_passes_on_one_rank_error_to_all():
    with pytest.raises(PlacementError, match="rank 1 on b: no GPU"):
        agree([facts(0, "a"), {"rank": 1, "host": "b", "error": "no GPU"}])


def test_agree_refuses_two_ranks_on_one_gpu():
    with pytest.raises(PlacementError, match="ranks 0 and 1 on a were given the same GPU"):
        agree([facts(0, "a", gpu="GPU-x"), facts(1, "a", gpu="GPU-x"), facts(2, "b", gpu="GPU-x")])
    agree(
        [
            facts(0, "a", "cuda", "gloo", "GPU-x", shared=True),
            facts(1, "a", "cuda", "gloo", "GPU-x", shared=True),
        ]
    )


def test_preflight_refuses_before_any_rank_starts(monkeypatch):
    """The local launcher: the same decision every rank will take, made in the parent (exit 2
    there)."""
    monkeypatch.setattr("device.placement.gpu_count", lambda: 1)
    cfg = compose(["model=vgg11_tiny", "scale=smoke", "logger=none", "world_size=2"])
    with pytest.raises(
        PlacementError, match="rank 0 cannot have a GPU of its own .2 rank.s. on this node, 1 GPU"
    ):
        preflight(cfg)
    assert preflight(compose(["scale=smoke", "logger=none", "device=cpu"])).kind == "cpu"
    assert preflight(compose(["scale=smoke", "logger=none"]), submitting=True) is None


def test_settle_agrees_through_the_store_and_the_group_starts_on_it(monkeypatch):
    """Inside a rank: settle() rendezvous, agrees, and init_process_group starts on the store it
    returns."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    for k, v in {
        "MASTER_ADDR": "localhost",
        "MASTER_PORT": str(port),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        monkeypatch.setenv(k, v)
    cfg = compose(["scale=smoke", "logger=none", "device=fake"])
    placement, store = settle(cfg, 0, 1, 0, 1, timedelta(seconds=30))
    assert placement == Placement("fake", None, "gloo", placement.how)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        assert dist.get_backend() == "gloo"
    finally:
        close_group()


def test_pair_groups_under_device_auto_runs_on_cpu_on_a_one_gpu_box():
    """Issue 10 defect 11 at run time: the gloo thread's experiment must not need a GPU per rank."""
    from omegaconf import OmegaConf

    import tasks
    from device.placement import preflight, requested_device

    cfg = OmegaConf.create(
        {
            "task": "pair_groups",
            "device": "auto",
            "backend": "auto",
            "world_size": 2,
            "launcher": {"name": "local"},
        }
    )

    def cpu_by_default(
        cfg,
    ) -> bool:  # the task says (tasks/__init__.py); the device layer does not know tasks
        return getattr(tasks.get(cfg.task), "CPU_BY_DEFAULT", False)

    assert requested_device(cfg, cpu_by_default(cfg)) == "cpu"
    placement = preflight(cfg, gpus=1, ranks_started=False, cpu_by_default=cpu_by_default(cfg))
    assert placement.kind == "cpu" and placement.backend == "gloo"
    cfg.task = "train"
    assert requested_device(cfg, cpu_by_default(cfg)) == "auto"


def test_one_gpu_count_and_it_honours_an_empty_cuda_visible_devices(monkeypatch):
    """The one GPU count (device/host.py) says 0 under CUDA_VISIBLE_DEVICES="" even where torch,
    whose CUDA started before the variable was set, still counts GPUs: the config checks and the
    placement can no longer disagree."""
    import torch

    import device.placement
    import job.config
    from device import host

    assert not hasattr(job.config, "gpu_count") and not hasattr(device.placement, "visible_gpus")
    counted = []
    with (
        monkeypatch.context() as m
    ):  # torch's answer faked for gpu_count alone, undone before anything else runs
        m.setattr(torch.cuda, "is_available", lambda: True)
        m.setattr(torch.cuda, "device_count", lambda: 2)
        m.setattr(host, "gpu_device_nodes", lambda: True)
        m.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        counted.append(host.gpu_count())
        m.setenv("CUDA_VISIBLE_DEVICES", "")
        counted.append(host.gpu_count())
        m.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        m.setattr(host, "gpu_device_nodes", lambda: False)  # no driver file: torch is not asked
        counted.append(host.gpu_count())
    assert counted == [2, 0, 0]


def test_the_gpu_count_without_torch_agrees_with_torchs_on_this_machine(monkeypatch):
    """The shortcut (no GPU driver file, so 0 without importing torch) gives torch's own answer
    here (on a GPU machine: that a driver file is found where torch sees GPUs)."""
    import torch

    from device import host

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    torchs = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert host.gpu_count() == torchs
    assert host.gpu_device_nodes() or torchs == 0


def test_a_gpu_whose_device_files_are_not_made_yet_is_still_asked_of_torch(monkeypatch, tmp_path):
    """On a headless host without the driver's udev rule /dev/nvidiactl appears only when CUDA first
    starts (the driver runs nvidia-modprobe): the loaded module's /proc entry or an NVIDIA display
    controller on the PCI bus sends the count to torch, not to 0. Other PCI devices do not."""
    from device import host

    made = set()
    monkeypatch.setattr(host.sys, "platform", "linux")
    monkeypatch.setattr(host.os.path, "exists", lambda p: p in made)
    monkeypatch.setattr(host, "PCI_DEVICES", tmp_path)
    for name, vendor, cls in (("a", "0x8086", "0x030000"), ("b", "0x10de", "0x040300")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "vendor").write_text(vendor + "\n")
        (tmp_path / name / "class").write_text(cls + "\n")
    assert not host.gpu_device_nodes()  # an Intel GPU, an NVIDIA GPU's audio function
    made.add("/proc/driver/nvidia")
    assert host.gpu_device_nodes()
    made.clear()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "vendor").write_text("0x10de\n")
    (tmp_path / "c" / "class").write_text("0x030200\n")  # a 3D controller (A100, H100)
    assert host.gpu_device_nodes()
