"""What this machine offers the ranks, and whether a config fits it: the one GPU count, the host
memory that can still be given, and the checks every task runs against them before any rank starts
(too many ranks per CPU, too much memory, buffers on a device that is not there). `Host` holds the
facts so tests can pose as any machine; the job probes it once (job/config.py) and hands it to every
check."""

from __future__ import annotations

from base.record import setting
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from base.errors import ConfigError, ConfigWarning

OVERSUBSCRIBE_LIMIT = (
    8  # CPU ranks per CPU we still start: the gloo thread's pairs=8 (16 ranks) runs on 2 cores
)
RANK_MEMORY_BYTES = (
    400 << 20
)  # what one CPU rank process costs before it holds any data (python + torch + gloo)


# the files a GPU is reached through on Linux: CUDA's control node, WSL2's GPU bridge, ROCm's
# (whose torch answers through torch.cuda too), Jetson's integrated GPU (L4T), and the loaded NVIDIA
# kernel module's /proc entry: on a headless host without the driver's udev rule /dev/nvidiactl is
# made only when CUDA first starts (the driver runs nvidia-modprobe then), so its absence alone
# would count 0 GPUs on a GPU machine
GPU_DEVICE_NODES = (
    "/dev/nvidiactl",
    "/dev/dxg",
    "/dev/kfd",
    "/dev/nvhost-ctrl-gpu",
    "/dev/nvgpu",
    "/proc/driver/nvidia",
)
PCI_DEVICES = Path("/sys/bus/pci/devices")
NVIDIA_PCI_VENDOR = "0x10de"


def _nvidia_pci_display() -> bool:
    """An NVIDIA display or 3D controller on the PCI bus (sysfs): a GPU whose module and device
    files are not there yet (nvidia-modprobe loads and makes them at CUDA's first start)."""
    try:
        for dev in PCI_DEVICES.iterdir():
            try:
                if (dev / "vendor").read_text().strip() == NVIDIA_PCI_VENDOR and (
                    dev / "class"
                ).read_text().startswith("0x03"):
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def gpu_device_nodes() -> bool:
    """Whether this Linux machine has a file a GPU driver is reached through, or an NVIDIA GPU on
    its PCI bus (elsewhere: True, ask torch). Without either, CUDA sees no GPU, and the count is 0
    without importing torch: the config's ${gpu_or:...} resolves in every refusal and `--cfg job`,
    and torch's import (about 1.5 s of a quiet core) was most of their start-up."""
    return (
        not sys.platform.startswith("linux")
        or any(map(os.path.exists, GPU_DEVICE_NODES))
        or _nvidia_pci_display()
    )


def gpu_count() -> int:
    """GPUs this process may use. CUDA_VISIBLE_DEVICES="" hides them all; it is read here as well
    because CUDA reads it only once per process, so a process whose CUDA started before it was set
    would still count them."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not gpu_device_nodes():
        return 0
    import torch  # here: job.config imports this module in every Hydra app, --help included

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def asked_gpus_per_node(launcher) -> int | None:
    """The GPUs a launcher=slurm job asks for on each node (launcher.gpus_per_node, else the count
    in launcher.gres, e.g. gpu:8 or gpu:a100:8); None for a launcher that runs here."""
    if not launcher or launcher.get("name") != "slurm":
        return None
    if launcher.get("gpus_per_node"):
        return int(launcher["gpus_per_node"])
    gres = str(launcher.get("gres") or "")
    m = re.fullmatch(r"gpu(?::[\w.-]+)?:(\d+)", gres.split(",")[0].strip()) or re.fullmatch(
        r"gpu", gres.strip()
    )
    return (int(m.group(1)) if m.groups() else 1) if m else 0


def gpus_for(root) -> int:
    """GPUs of the machine the ranks run on: for launcher=slurm the nodes the job asks for (the same
    answer on the login node that submits and on the compute nodes), else this one's."""
    asked = asked_gpus_per_node(
        OmegaConf.select(root, "launcher", default=None) if root is not None else None
    )
    return gpu_count() if asked is None else asked


PROC_MEMINFO = "/proc/meminfo"
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def free_host_bytes(
    meminfo: str | Path = PROC_MEMINFO,
    cgroup: str | Path = PROC_CGROUP,
    cgroup_root: str | Path = CGROUP_ROOT,
) -> int | None:
    """Host memory this process can still be given (None where the OS does not say): tasks refuse
    sizes that cannot fit instead of letting the OOM killer take a rank mid-collective.

    The kernel's MemAvailable, not MemFree: Linux fills idle memory with the page cache and gives it
    back on demand, so MemFree is small on a healthy machine (2.5 GiB free beside 21 GiB available
    after a pip install and a few runs). Where this process's cgroup has a memory limit (a
    container, a Slurm job) the room under it counts too, when it is smaller. The paths are
    parameters so tests can pose as any machine."""
    known = [
        b for b in (_mem_available(meminfo), cgroup_room(cgroup, cgroup_root)) if b is not None
    ]
    if known:
        return min(known)
    try:  # not Linux: the pages nobody uses, the best the OS says
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _mem_available(meminfo: str | Path) -> int | None:
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                value, *unit = line.split(":", 1)[1].split()
                return int(value) * (1024 if unit == ["kB"] else 1)
    except (OSError, ValueError):
        pass
    return None


def cgroup_room(
    cgroup: str | Path = PROC_CGROUP, cgroup_root: str | Path = CGROUP_ROOT
) -> int | None:
    """The least room under a memory limit of this process's cgroup or any of its ancestors (None:
    no limit, or no cgroup to read). Room = limit - usage + inactive file cache: the cgroup's usage
    counts its page cache too, and the inactive part is reclaimed before the limit bites (the
    kubelet's working-set rule). cgroup v2 (memory.max, memory.current), else v1
    (memory.limit_in_bytes, memory.usage_in_bytes)."""
    try:
        lines = Path(cgroup).read_text().splitlines()
    except OSError:
        return None
    root = Path(cgroup_root)
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (
            number == "0" and controllers == ""
        ):  # v2 (the unified hierarchy, mounted alone or beside v1)
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # v1's memory controller
            base, files = (
                root / "memory",
                ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
            )
        else:
            continue
        rooms = [r for r in (_room(d, *files) for d in _up_from(base, path)) if r is not None]
        if rooms:
            return min(rooms)
    return None


def _up_from(base: Path, path: str) -> list[Path]:
    """The cgroup's directory and its ancestors up to the hierarchy's root (in a container, whose
    cgroup namespace may show a path the mount does not have, only the root)."""
    own = base / path.strip("/")
    dirs = [own, *own.parents] if own.is_dir() else [base]
    return [d for d in dirs if d == base or base in d.parents]


def _room(d: Path, limit_file: str, usage_file: str, inactive_key: str) -> int | None:
    try:
        limit = (d / limit_file).read_text().strip()
        if limit == "max" or int(limit) >= UNLIMITED:
            return None
        usage = int((d / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    inactive = 0
    try:
        for line in (d / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == inactive_key:
                inactive = int(value)
    except (OSError, ValueError):
        pass
    return max(0, int(limit) - usage + inactive)


def host_cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole host from /proc/stat: every process, not only ours
    (Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass(frozen=True)
class Host:
    """What the machine running the checks offers the ranks. On a Slurm login node (submitting)
    these facts belong to the wrong machine, and the checks that need them are skipped: the compute
    nodes run them again."""

    gpus: int
    cpus: int
    free_bytes: int | None  # host memory still available (free_host_bytes)
    gpu_free_bytes: int | None  # the least free memory of any visible GPU (None without GPUs)
    ranks_started: bool = (
        False  # this process is a rank already (torchrun, a Slurm task): nothing to spawn
    )

    @classmethod
    def probe(cls) -> Host:
        """This machine. Whether this process is a rank already (ranks_started) is the job's to add
        (launchers.already_a_rank): the ground floor does not know who starts ranks."""
        from device.nvml import free_bytes

        gpus = gpu_count()
        free = (
            free_bytes(gpus) if gpus else None
        )  # NVML: no CUDA context in this process (mem_get_info makes one)
        gpu_free = min(free) if free else None
        return cls(
            gpus=gpus,
            cpus=os.cpu_count() or 1,
            free_bytes=free_host_bytes(),
            gpu_free_bytes=gpu_free,
            ranks_started=False,
        )


def ranks_per_node(cfg) -> int:
    """Ranks that share one machine: a Slurm node's tasks, else all of them (the local launcher)."""
    if setting(cfg, "launcher.name") == "slurm":
        return int(setting(cfg, "launcher.tasks_per_node", 1))
    return int(cfg.world_size)


def on_gpus(cfg, host: Host) -> bool:
    """Whether the ranks get a GPU each (device/placement.py decides it in the ranks), so their
    buffers live on the device rather than in host memory."""
    return host.gpus >= ranks_per_node(cfg)


def check_fits(
    cfg,
    host: Host,
    *,
    ranks: int,
    per_rank_bytes: int,
    what: str,
    fix: str,
    submitting: bool = False,
) -> None:
    """Refuse more ranks, or more memory, than one machine holds, instead of letting the OOM killer
    or the scheduler decide mid-run. Submitting: the node's memory is what the job asks for
    (launcher.mem_gb), if it says."""
    gib = 2**30
    if submitting:
        mem_gb = setting(cfg, "launcher.mem_gb")
        if mem_gb and ranks * per_rank_bytes > mem_gb * gib:
            raise ConfigError(
                f"{what}: {ranks} ranks per node need about {ranks * per_rank_bytes / gib:.1f} GiB "
                "and "
                f"the job asks for launcher.mem_gb={mem_gb}. {fix}, or a larger launcher.mem_gb."
            )
        return
    if host.ranks_started:
        return
    if (
        ranks > host.cpus
        and not on_gpus(cfg, host)
        and (cfg.oversubscribe or ranks <= OVERSUBSCRIBE_LIMIT * host.cpus)
    ):
        warn_ranks_over_cores(what, ranks, host.cpus)
    if cfg.oversubscribe:
        return
    override = "or oversubscribe=true if you know better"
    if ranks > OVERSUBSCRIBE_LIMIT * host.cpus and not on_gpus(cfg, host):
        raise ConfigError(
            f"{what} starts {ranks} ranks on this machine's {host.cpus} CPUs: more than "
            f"{OVERSUBSCRIBE_LIMIT} ranks per CPU only measures the scheduler (at most "
            f"{OVERSUBSCRIBE_LIMIT * host.cpus} ranks here). {fix}, {override}."
        )
    if host.free_bytes is not None and ranks * per_rank_bytes > host.free_bytes:
        raise ConfigError(
            f"{what}: {ranks} ranks need about {ranks * per_rank_bytes / gib:.1f} GiB of host "
            "memory "
            f"and {host.free_bytes / gib:.1f} GiB is available (room for "
            f"{host.free_bytes // per_rank_bytes}). {fix}, {override}."
        )


def warn_ranks_over_cores(what: str, ranks: int, cpus: int) -> None:
    """Said once, before the ranks start; the CPU contention finding explains it again after the
    run."""
    warnings.warn(
        f"{what}: {ranks} ranks on this machine's {cpus} CPU cores, more ranks than cores: they "
        "take "
        f"turns on the cores, so every step also times a rank waiting for one (after the run the "
        f"diagnosis's CPU contention finding reports it); {cpus} ranks or fewer measure without "
        "that.",
        ConfigWarning,
        stacklevel=2,
    )


def expected_backend(cfg, host: Host, submitting: bool = False) -> str:
    """The backend the ranks will pick (device/placement.py: auto is nccl when every rank has a GPU
    of its own); still "auto" on a login node, which cannot tell."""
    if cfg.backend != "auto" or submitting:
        return str(cfg.backend)
    return "nccl" if on_gpus(cfg, host) else "gloo"


def check_buffers(
    cfg, host: Host, *, key: str, per_rank_bytes: int, what: str, fix: str, submitting: bool = False
) -> None:
    """A comm task's device choice (`key`: auto|cpu|cuda) and its buffers, on the device they will
    live on (comm.measure.resolve_device: cuda when asked, or auto with nccl or a visible GPU):
    refuse what cannot work or fit there, per node. Submitting: the nodes' GPUs and their memory are
    unknown here."""
    device, backend = OmegaConf.select(cfg, key), expected_backend(cfg, host, submitting)
    if backend == "nccl" and device == "cpu":
        raise ConfigError(
            f"{key}=cpu with backend=nccl: NCCL only moves CUDA tensors. Use backend=gloo, or "
            f"{key}=cuda/auto."
        )
    if device == "cuda" and host.gpus == 0 and not submitting:
        raise ConfigError(f"{key}=cuda but no GPU is visible. Use {key}=cpu (or auto).")
    on_device = device == "cuda" or (
        device == "auto" and (backend == "nccl" or (not submitting and host.gpus > 0))
    )
    if not on_device:
        check_fits(
            cfg,
            host,
            ranks=ranks_per_node(cfg),
            per_rank_bytes=RANK_MEMORY_BYTES + per_rank_bytes,
            what=what,
            fix=fix,
            submitting=submitting,
        )
    elif (
        not submitting and host.gpu_free_bytes is not None and per_rank_bytes > host.gpu_free_bytes
    ):
        raise ConfigError(
            f"{what}: a rank needs about {per_rank_bytes / 2**30:.1f} GiB on its GPU and "
            f"{host.gpu_free_bytes / 2**30:.1f} GiB is free. {fix}."
        )
