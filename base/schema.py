"""The config's schema: every key conf/ can hold, its type, allowed values and bounds, and for the
knobs (the top-level keys and their sections) also the default and the doc.

Hydra merges conf/'s YAML onto these dataclasses, so a wrong type, an unknown choice or a misspelt
key is refused while the config is composed, before any code of ours runs. A knob is one
`knob(default, doc, ge=...)` field and nothing else: docs/config.md's table and --help's knob list
are written from the fields (base/config_doc.py). Group options keep their values in YAML, one file
per choice, and extend their group's schema in their defaults list (`- /schema/model/vgg@_here_`).
Bounds are checked once by job.config.check_schema; the checks between keys belong to each task's
check(). The launcher group is left untyped (launchers/slurm checks its options). Importing this
module registers everything in Hydra's ConfigStore; job.config imports it.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Union

from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


CONF_DIR = (
    Path(__file__).resolve().parent.parent / "conf"
)  # the values (conf/) of this schema's keys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, Enum):
        """Python 3.10: a choice that is its name wherever a string is expected (f-strings, ==,
        JSON)."""

        def __str__(self) -> str:
            return self.value

        def __format__(self, spec: str) -> str:
            return self.value.__format__(spec)


def ge(n: float) -> Any:
    """A field whose value must be >= n (checked with the other bounds, before any rank starts)."""
    return field(default=MISSING, metadata={"ge": n})


def gt(n: float) -> Any:
    """A field whose value must be > n."""
    return field(default=MISSING, metadata={"gt": n})


def knob(default: Any, doc: str, *, main: bool = False, hint: str = "", **bounds: float) -> Any:
    """A knob, described once: its default (an interpolation such as `${scale.steps}` where it
    depends on a group's choice), its one-line doc, its bounds (`ge`/`gt`, checked by
    job.config.check_schema), whether `--help` lists it (main) and, for a value typed with a unit,
    what the number means when a wrong type is refused (hint). conf/config.yaml holds none."""
    meta = {"doc": doc, "main": main, **({"hint": hint} if hint else {}), **bounds}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, doc: str) -> Any:
    """A section of knobs (`ddp.*`, `measure.*`): its dataclass holds each one's default and doc."""
    return field(default_factory=cls, metadata={"doc": doc})


def group(doc: str) -> Any:
    """A config group: one YAML file per option in conf/<group>/, each typed by GROUP_SCHEMAS."""
    return field(default=MISSING, metadata={"doc": doc, "group": True})


# ------------------------------------------------------------------------------------------ choices
class Task(StrEnum):
    """task=: what a run measures (tasks/__init__.py maps each to its module)."""

    train = "train"
    train_reference = (
        "train_reference"  # a hand-written DDP loop, for measuring the harness (harness_cost)
    )
    collectives = "collectives"
    grad_sync = "grad_sync"
    pair_groups = "pair_groups"
    script = "script"  # the user's own training script, unchanged (tasks/script)


class Backend(StrEnum):
    auto = "auto"  # nccl when every rank has its own GPU, else gloo
    nccl = "nccl"
    gloo = "gloo"


class Sync(StrEnum):
    ddp = "ddp"
    per_param = "per_param"
    flat = "flat"
    local = "local"


class Precision(StrEnum):
    fp32 = "fp32"  # torch's defaults (tasks/train/loop.py: set_precision)
    fp32_strict = "fp32_strict"  # no TF32 anywhere
    tf32 = "tf32"
    bf16 = "bf16"


class H2D(StrEnum):
    blocking = "blocking"
    non_blocking = "non_blocking"
    side_stream = "side_stream"


class MeasurePolicy(StrEnum):
    fixed = "fixed"  # exactly `steps` measured steps
    adaptive = "adaptive"  # blocks until the median step's CI is +-measure.rel_ci, or a cap


class ScriptCommTiming(StrEnum):
    """`script.comm_timing=`: how task=script times the communication of a DDP whose script asks for
    no comm hook (docs/script.md)."""

    hook = "hook"  # an all-reduce in DDP's place, through a Python comm hook: each bucket timed
    ddp_logging = "ddp_logging"  # DDP's built-in, read from its runtime stats each step


class DeviceKind(StrEnum):
    """`device=`: where the ranks compute (the device layer itself is device.cpu.Device and its
    subclasses)."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class RankDevice(StrEnum):
    """Where the ranks compute (`device=`; decided in device/placement.py)."""

    auto = "auto"  # a GPU per rank where there are GPUs, else CPU
    cpu = "cpu"
    cuda = "cuda"
    # tests only: CPU tensors through the GPU code paths, the stream rules checked (device/fake.py)
    fake = "fake"


# task=collectives' names, nccl-tests' choices (comm/bandwidth.py maps them to torch; dtype aliases
# such as fp32 are aliases of the enum too)
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
REDUCE_OPS = {
    "sum": "SUM",
    "prod": "PRODUCT",
    "max": "MAX",
    "min": "MIN",
    "avg": "AVG",
}  # -> torch's ReduceOp name
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64")
DTYPE_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
    "fp64": "float64",
    "int": "int32",
    "long": "int64",
}
Op = StrEnum("Op", {name: name for name in OPS})
ReduceOp = StrEnum("ReduceOp", {name: name for name in REDUCE_OPS})
DType = StrEnum("DType", {**{name: name for name in DTYPE_NAMES}, **DTYPE_ALIASES})


class Arch(StrEnum):
    """The model families, each with its own keys (a schema below); a new model of any family is one
    YAML file, and one that is none of these is `custom` (its own _target_, input_shape and
    num_classes)."""

    vgg = "vgg"
    torchvision = "torchvision"
    vit = "vit"
    timm = "timm"
    custom = "custom"  # model=custom: the user's own nn.Module, named by model._target_


class DataKind(StrEnum):
    fake = "fake"
    raw_folder = "raw_folder"


class CommHook(StrEnum):
    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"
    powersgd = "powersgd"


class LinkQdisc(StrEnum):
    htb = "htb"  # hierarchical token bucket: one class at the rate (what DESIGN.md's figures used)
    tbf = "tbf"  # token bucket filter: the simplest shaper


class LoggerName(StrEnum):
    none = "none"
    wandb = "wandb"


class WandbMode(StrEnum):
    auto = "auto"
    online = "online"
    offline = "offline"
    disabled = "disabled"


# ------------------------------------------------------------------------------------------- groups
@dataclass
class Model:
    """conf/model/*.yaml: `_target_` makes the model (models.build_model passes it the keys it
    takes, and image_size); arch and name say what it is, in the record. torchvision and timm models
    need nothing more than their name."""

    _target_: str = MISSING
    arch: Arch = MISSING
    name: str = MISSING
    num_classes: int = ge(1)


@dataclass
class VGGModel(Model):
    layers: List[Any] = MISSING  # conv widths and "M" (max-pool)
    classifier: List[int] = MISSING  # hidden widths of the classifier


@dataclass
class ViTModel(Model):
    patch_size: int = ge(1)
    num_layers: int = ge(1)
    num_heads: int = ge(1)
    hidden_dim: int = ge(1)
    mlp_dim: int = ge(1)


@dataclass
class CustomModel(Model):
    """model=custom: model._target_ names the user's nn.Module class or factory; it gets num_classes
    (and image_size, input_shape) where its signature takes them."""

    input_shape: List[int] = (
        MISSING  # one sample, e.g. [3, 224, 224]: the fake data is made in this shape
    )


MODEL_SCHEMAS = {
    Arch.vgg: VGGModel,
    Arch.torchvision: Model,
    Arch.vit: ViTModel,
    Arch.timm: Model,
    Arch.custom: CustomModel,
}


@dataclass
class Data:
    """conf/data/*.yaml: `_target_` is the Dataset (data.build_dataset passes it the keys it takes,
    the samples needed, the sample shape and the rank's seed)."""

    _target_: str = MISSING
    kind: DataKind = MISSING
    image_size: int = ge(1)
    num_classes: int = ge(1)
    workers: int = ge(0)
    pin_memory: bool = MISSING


@dataclass
class FakeData(Data):
    pool: int = ge(1)


@dataclass
class RawFolderData(Data):
    root: str = MISSING


@dataclass
class CommHookConfig:
    """conf/optim/*.yaml: `_target_` returns (state, hook) for DDP.register_comm_hook
    (tasks/train/hooks.py); null: DDP's own all-reduce."""

    _target_: Optional[str] = None
    name: CommHook = MISSING


@dataclass
class PowerSGD(CommHookConfig):
    rank: int = ge(1)
    start_iter: int = ge(1)
    min_compression_rate: float = ge(0)
    use_error_feedback: bool = MISSING
    warm_start: bool = MISSING
    batch_tensors_with_same_shape: bool = MISSING
    orthogonalization_epsilon: float = ge(0)
    random_seed: int = MISSING
    batched: bool = MISSING


@dataclass
class Scale:
    name: str = MISSING
    world_size: int = ge(1)
    batch_size: int = ge(1)
    image_size: int = ge(1)
    warmup_steps: int = ge(0)
    steps: int = ge(1)
    measure_policy: MeasurePolicy = MISSING
    max_steps: Optional[int] = ge(1)
    max_s: Optional[float] = gt(0)
    block_steps: int = ge(1)


@dataclass
class Link:
    """conf/link/*.yaml: the network between the ranks (launchers/link.py builds it; comm/link.py
    reads rates)."""

    name: str = MISSING
    rate: Optional[Union[int, float, str]] = (
        MISSING  # bit/s or tc's units (1gbit, 2.5gbit); null: no link
    )
    qdisc: LinkQdisc = MISSING
    burst_bytes: Optional[int] = ge(1)
    latency_us: Optional[float] = ge(0)
    ranks_per_node: int = ge(1)
    check_s: float = ge(0)


@dataclass
class Logger:
    """conf/logger/*.yaml: `_target_` logs a finished run's record (job/finalise.py calls it with
    record= and cfg=); null: no logger."""

    _target_: Optional[str] = None
    name: LoggerName = MISSING


@dataclass
class WandbLogger(Logger):
    mode: WandbMode = MISSING
    project: str = MISSING
    entity: Optional[str] = MISSING
    group: Optional[str] = MISSING
    tags: List[str] = MISSING
    init_timeout_s: float = gt(0)  # wandb.init's timeout (results/wandb_log.py)
    finish_timeout_s: float = gt(0)  # uploads' timeout: run.finish, saving a report
    report: bool = MISSING  # a W&B Report of each sweep (results/wandb_report.py)


# ------------------------------------------------------------------------------- top-level sections
# Every key below is a knob: its type, default, bounds and doc are its field. A default may be an
# interpolation (`${scale.steps}`: each scale's value, in conf/scale/). The config page's table
# (python -m base.config_doc --write docs/config.md) and --help's knob list are written from them.
@dataclass
class DDPFlags:
    static_graph: bool = knob(
        False, "DDP's static_graph: the graph is the same every step", main=True
    )
    gradient_as_bucket_view: bool = knob(
        False, "DDP's gradient_as_bucket_view: gradients are views into the buckets (no copy)"
    )
    find_unused_parameters: bool = knob(False, "DDP's find_unused_parameters")
    broadcast_buffers: bool = knob(
        True, "DDP's broadcast_buffers: rank 0's buffers sent every forward"
    )


@dataclass
class Solver:
    lr: float = knob(0.01, "SGD's learning rate", ge=0)
    momentum: float = knob(0.9, "SGD's momentum", ge=0)


@dataclass
class Profile:
    enabled: bool = knob(
        False,
        "torch.profiler Chrome trace per rank (trace.rank<N>.json), NVTX ranges per phase and the "
        "CUDA profiler API range (nsys --capture-range=cudaProfilerApi); such a run's timings are "
        "marked profiled: true",
    )
    wait: int = knob(1, "timed blocks before the profiler warms up", ge=0)
    warmup: int = knob(
        1,
        "timed blocks of profiler warm-up (its schedule counts blocks, so its end is never timed)",
        ge=0,
    )
    active: int = knob(3, "timed blocks recorded", ge=1)


@dataclass
class Collectives:
    ops: List[Op] = knob(list(OPS), "the collectives timed, in this order")
    reduce_op: ReduceOp = knob(ReduceOp.sum, "all_reduce's and reduce_scatter's reduction")
    min_bytes: Union[int, str] = knob(
        1024, "the smallest size: bytes, or nccl-tests' suffixes: 64K, 8M, 8G (powers of 1024)"
    )
    max_bytes: Union[int, str] = knob("16M", "the largest size (as min_bytes)")
    factor: float = knob(4, "each size is the last times this", gt=1)
    dtype: DType = knob(
        DType.float32, "the element type (nccl-tests' aliases too: fp32, bf16, half...)"
    )
    warmup_iters: int = knob(5, "untimed calls per size", ge=0)
    iters: int = knob(20, "timed calls per size", ge=1)
    inplace: Union[bool, str] = knob(
        "both", "true | false | both (nccl-tests' out-of-place and in-place columns side by side)"
    )
    check_iters: int = knob(
        1, "untimed rounds on exactly predictable inputs; a wrong element fails the run", ge=0
    )
    corrupt_rank: Optional[int] = knob(
        None, "test knob: this rank perturbs one output element in the first check round", ge=0
    )
    device: DeviceKind = knob(
        DeviceKind.auto, "where the tensors live (gloo can move CUDA tensors)"
    )


@dataclass
class GradSync:
    warmup_iters: int = knob(2, "untimed rounds per method", ge=0)
    iters: int = knob(5, "timed rounds per method", ge=1)
    device: DeviceKind = knob(DeviceKind.auto, "where the gradients live")


@dataclass
class PairGroups:
    warmup_iters: int = knob(8, "untimed all-reduces per pair", ge=0)
    iters: int = knob(1024, "timed all-reduces per pair", ge=1)
    shape: List[int] = knob([10, 10], "the all-reduced tensor's shape")
    async_op: bool = knob(False, "issue every all-reduce, wait at the end")
    threads: Optional[int] = knob(
        None, "torch threads (OMP_NUM_THREADS) per rank; null: leave as is", ge=1
    )


class FaultAt(StrEnum):
    data = "data"  # the loader's next batch comes late
    h2d = "h2d"  # a blocking host-to-device copy waits for the device
    backward = "backward"  # inside backward (a gradient hook)
    after_optimizer = (
        "after_optimizer"  # right after the optimizer step (where logging or checkpointing sits)
    )


class HangKind(StrEnum):
    skip_allreduce = (
        "skip_allreduce"  # every rank all-reduces a metric each step; hang_rank skips one
    )
    extra_barrier = "extra_barrier"  # a barrier under `if rank == hang_rank`
    data_sleep = "data_sleep"  # hang_rank's loader never returns its next batch
    kill = "kill"  # hang_rank kills itself (SIGKILL) mid-step
    size_mismatch = "size_mismatch"  # hang_rank all-reduces a metric of another size once
    pg_order = "pg_order"  # two process groups, entered in the opposite order by hang_rank
    busy = "busy"  # hang_rank loops for ever in Python


@dataclass
class Fault:
    rank: Optional[int] = knob(
        None,
        "raise on this rank at fault.step (task=train), to see how a failing rank is reported",
        ge=0,
    )
    step: int = knob(0, "the step fault.rank raises at", ge=0)
    sleep_s: float = knob(
        0, "test knob: a known delay in every step's optimizer phase, on every rank", ge=0
    )
    delay_s: float = knob(
        0,
        "benchmark knob (python -m diagnosis.benchmark): a known delay per step at delay_at on "
        "delay_rank, installed before the warm-up, recorded as result.fault",
        ge=0,
    )
    delay_at: FaultAt = knob(FaultAt.backward, "where delay_s is spent (h2d: a blocking copy only)")
    delay_rank: Optional[int] = knob(None, "the rank delay_s slows (null: every rank)", ge=0)
    delay_every: int = knob(
        1,
        "delay_s on every N-th step only (counted from the first warm-up step): a rank "
        "evaluating, logging or checkpointing every N steps (1: every step, a straggler)",
        ge=1,
    )
    busy_cores: int = knob(
        0,
        "benchmark knob (python -m diagnosis.benchmark): this many processes spin in Python on the "
        "machine that launches the ranks (launcher=local), from before the ranks start until the "
        "job ends, however it ends: a busy neighbour of known size (launchers/busy.py)",
        ge=0,
    )
    hang: Optional[HangKind] = knob(
        None,
        "test knob (python -m diagnosis.hang_benchmark): a hang of this kind on hang_rank at "
        "hang_step",
    )
    hang_rank: int = knob(1, "the rank fault.hang hangs", ge=0)
    hang_step: int = knob(3, "the step fault.hang starts at", ge=0)


@dataclass
class Hang:
    """A hung job (launchers/hang.py, docs/failures.md): no rank made a step or a collective, nor
    moved to a stack it had not shown before."""

    enabled: bool = knob(
        True,
        "declare a run without progress for after_s hung, and keep its dumps in <run dir>/hang/",
    )
    after_s: Optional[float] = knob(
        None,
        "seconds without progress; null: max(min_s, step_factor x the median step), before the "
        "first step never under min_s; never above 0.8 x timeout_s",
        gt=0,
    )
    min_s: float = knob(30, "after_s's floor when it is null", gt=0)
    step_factor: float = knob(20, "after_s in median steps when it is null", gt=0)
    fr_buffer: int = knob(
        200,
        "Flight Recorder entries kept per rank (TORCH_FR_BUFFER_SIZE, unless set); 0: off",
        ge=0,
    )


@dataclass
class Script:
    """task=script: the user's script, run as torchrun would run it (tasks/script,
    docs/script.md)."""

    path: Optional[str] = knob(
        None, "the script; relative to the directory train.py was started in"
    )
    args: List[str] = knob([], "its command-line arguments: 'script.args=[--epochs,1,--lr,0.1]'")
    max_steps: Optional[int] = knob(
        None,
        "stop every rank after this many optimizer steps (null: the script runs to its end)",
        ge=1,
    )
    first_step_timeout_s: float = knob(
        60, "no optimizer step by then: refused as not a training script", gt=0
    )
    comm_timing: ScriptCommTiming = knob(
        "hook",
        "where no comm hook is asked for: hook (the tool's all-reduce in DDP's place, each "
        "bucket's start and end) or ddp_logging (DDP's built-in, its runtime stats every step: "
        "comm start and end per step, no bucket starts; CPU)",
    )


@dataclass
class Measure:
    """The measured window: timed blocks of steps (defaults per scale, conf/scale/)."""

    policy: MeasurePolicy = knob(
        "${scale.measure_policy}",
        "fixed: exactly `steps` steps; adaptive: blocks until the median step's 95% CI is "
        "+-rel_ci, or a cap",
    )
    rel_ci: float = knob(
        0.02, "adaptive: the target half-width of the median step's CI, relative, in (0, 1)", gt=0
    )
    max_steps: Optional[int] = knob(
        "${scale.max_steps}",
        "adaptive: stop here even if the target is not reached (null: no step cap)",
        ge=1,
    )
    max_s: Optional[float] = knob(
        "${scale.max_s}",
        "adaptive: stop after this many seconds of window (null: no time cap)",
        gt=0,
    )
    block_steps: int = knob(
        "${scale.block_steps}",
        "steps per timed block, each block's wall clock one throughput sample; at most steps // 6",
        ge=1,
    )


@dataclass
class Compare:
    noise: float = knob(
        0.02,
        "verdicts: faster / slower need the whole CI beyond 1 +- noise, equivalent the whole CI "
        "inside",
        ge=0,
    )
    target: float = knob(
        0.015,
        "repeats=auto: the half-width the plan aims at on every row's 95% speed-up interval",
        gt=0,
    )
    budget_s: float = knob(
        1200.0,
        "repeats=auto: seconds for the whole sweep, pilot included; the table says if it decided",
        gt=0,
    )


@dataclass
class Diagnose:
    """The diagnosis: ranked findings printed after every run and sweep, kept in the record."""

    microbench: Any = knob(  # OmegaConf has no bool|str: checked in tasks/train/check.py
        "auto",
        "auto | true | false: after the window, time an all_reduce of each size the sync sends, "
        "on the same ranks; auto: only when it costs <= microbench_budget of the run",
    )
    microbench_iters: int = knob(
        5, "timed calls per size (auto may take fewer to stay in budget)", ge=1
    )
    microbench_budget: float = knob(0.1, "auto's budget, a fraction of the run", gt=0)
    hta: bool = knob(
        True, "profile.enabled runs: cross-check overlap with HolisticTraceAnalysis (if installed)"
    )
    verify: bool = knob(
        True,
        "after the window, run the top switchable finding's fix in blocks interleaved with this "
        "setting (same ranks and data): its saving measured, with an interval "
        "(tasks/train/verify.py)",
    )
    verify_budget: float = knob(
        0.3, "the check's cost: at most this share of the window's time (< 3 rounds: skipped)", gt=0
    )
    verify_min_s: float = knob(
        3.0,
        "the check's budget is at least this many seconds: a window of a few seconds holds no "
        "block long enough to measure a fix in 30% of it (0: the share alone)",
        ge=0,
    )
    verify_width: float = knob(
        0.1,
        "the check stops once its interval on the saving is at most this wide (0.1: +-5 points of "
        "the step; from 6 rounds) and, while wider, goes on past its budget up to verify_max_s",
        gt=0,
    )
    verify_max_s: float = knob(
        15.0,
        "the most seconds the check spends (set-up and rounds) while its interval is wider than "
        "verify_width; never less than its budget (0: the budget alone)",
        ge=0,
    )
    verify_fix: Any = knob(  # OmegaConf has no dict|None: checked in tasks/train/check.py
        None,
        "a change to measure in the job in place of the top finding's fix, e.g. {bucket: 100}; "
        "the run's own setting ({sync: ddp} on a ddp run) is an A/A check, a true saving of 0",
    )
    probe_budget: float = knob(
        0.5,
        "probe_steps < 6 and their exposed comm > 15% of the step: the missing probe steps are "
        "taken when they cost at most this share of the window (0.5: a 10-step window's 5)",
        ge=0,
    )


@dataclass
class Autotune:
    """experiment=autotune's own settings (conf/experiment/autotune.yaml); absent in every other
    run."""

    stage: str = MISSING
    top_k: int = ge(1)
    repeats: int = ge(1)
    prune: bool = (
        True  # the what-if model rules trials out before they run (results/autotune.py: Pruner)
    )


NCCL_KEYS = ("ALGO", "PROTO", "IB_HCA", "IB_GID_INDEX", "IB_TIMEOUT", "SOCKET_IFNAME", "DEBUG")


@dataclass
class Config:
    """The primary config: the knobs users type on the command line, then the groups
    (conf/config.yaml holds only the defaults list and Hydra's settings)."""

    tags: List[str] = knob([], "W&B tags; experiment presets set them")
    task: Task = knob(Task.train, "what a run measures (docs/config.md#tasks)")
    world_size: int = knob(
        "${launcher.world_size}",
        "ranks; local: the scale's (ranks on this machine); Slurm: launcher.nodes x "
        "launcher.tasks_per_node",
        ge=1,
        main=True,
    )
    backend: Backend = knob(
        Backend.auto, "nccl when every rank has its own GPU, else gloo", main=True
    )
    device: RankDevice = knob(
        RankDevice.auto,
        "where ranks compute; auto: a GPU per rank where there are GPUs, else CPU; fake: tests "
        "only (docs/device.md)",
        main=True,
    )
    timeout_s: float = knob(
        120,
        "collective timeout; a rank that never arrives fails the job instead of hanging it",
        gt=0,
        main=True,
    )
    seed: int = knob(0, "the seed of weights and data")
    oversubscribe: bool = knob(
        False, "start ranks beyond this host's CPUs and memory (refused otherwise)", main=True
    )
    sync: Sync = knob(
        Sync.ddp,
        "gradient sync; per_param: the thread's loop, flat: one buffer, local: no communication",
        main=True,
    )
    bucket: Optional[Union[int, float]] = knob(
        None,
        "DDP bucket_cap_mb, in MB; null: DDP's default (25 MiB buckets, the first capped at 1 "
        "MiB); a number caps every bucket, the first too",
        gt=0,
        main=True,
        hint="The bucket is in MB (DDP's bucket_cap_mb, so bucket=25MB is bucket=25); bucket=null "
        "leaves DDP's default (25 MiB buckets, the first capped at 1 MiB).",
    )
    ddp: DDPFlags = section(DDPFlags, "DDP's constructor flags; the record shows what DDP reports")
    accumulate: int = knob(
        1,
        "micro-steps per optimizer step; DDP skips communication (no_sync) on the first K-1",
        ge=1,
        main=True,
    )
    precision: Precision = knob(
        Precision.fp32,
        "the step's numerics; fp32: torch's defaults (cuDNN convolutions may use TF32, matmuls do "
        "not); fp32_strict: no TF32; tf32: TF32 matmuls and convolutions; bf16: autocast",
        main=True,
    )
    cuda_graphs: bool = knob(
        False, "capture forward+backward+optimizer once, replay it; GPU, sync=ddp|local", main=True
    )
    h2d: H2D = knob(
        H2D.blocking, "how a batch reaches the GPU; side_stream: on its own stream", main=True
    )
    batch_size: int = knob("${scale.batch_size}", "samples per rank", ge=1, main=True)
    warmup_steps: int = knob("${scale.warmup_steps}", "untimed steps before the window", ge=0)
    steps: int = knob(
        "${scale.steps}",
        "measure.policy=fixed: the steps measured; adaptive: the minimum",
        ge=1,
        main=True,
    )
    measure: Measure = section(Measure, "the measured window: timed blocks of steps")
    repeats: Union[int, str] = knob(
        1,
        "with -m: run every configuration R times, interleaved (A B A B); each a job of its own; "
        "auto: a pilot, then the runs x steps planned for compare.target",
        ge=1,
        also=("auto",),
        main=True,
    )
    repeat: int = knob(
        0, "which repeat a job is: set by the sweeper from `repeats`, not typed", ge=0
    )
    compare: Compare = section(Compare, "the verdicts between configurations")
    verbose: bool = knob(
        False,
        "print the full detail (method notes, per rank, every finding); false: <= 25 lines; "
        "train.log has it all",
        main=True,
    )
    timing: bool = knob(
        True,
        "per-phase timing; false leaves only the wall clock (python -m tasks.train.harness_cost)",
    )
    probe_steps: int = knob(
        1,
        "untimed steps after the window: DDP comm/overlap stats (+1 step to read them), gradient "
        "error; 6 or more give the exposed communication a 95% interval (each costs a training "
        "step), 1 is a single sample",
        ge=0,
    )
    solver: Solver = section(
        Solver, 'the SGD optimizer ("optim" is the gradient communication scheme)'
    )
    profile: Profile = section(
        Profile,
        "torch.profiler; wait / warmup / active count timed blocks (1 step on CPU, "
        "measure.block_steps on GPU)",
    )
    nccl: Dict[str, Optional[str]] = knob(
        {key: None for key in NCCL_KEYS},
        "NCCL_<KEY> set in every rank before the process group starts, and recorded (null: leave "
        "as is); any other: +nccl.KEY=value; nccl.DEBUG=INFO puts the transports used in the "
        "record",
    )
    gloo: Dict[str, Optional[str]] = knob({"SOCKET_IFNAME": None}, "GLOO_<KEY>, as nccl.*")
    collectives: Collectives = section(Collectives, "task=collectives (nccl-tests style)")
    grad_sync: GradSync = section(
        GradSync, "task=grad_sync (the VGG11 thread: per-parameter vs flat vs bucketed)"
    )
    pairs: int = knob(1, "task=pair_groups: pairs of ranks (2 x pairs ranks)", ge=1)
    pair_groups: PairGroups = section(PairGroups, "task=pair_groups (the gloo thread)")
    fault: Fault = section(Fault, "fault injection, to see how the tool reports a rank that fails")
    hang: Hang = section(
        Hang, "a hung job (docs/failures.md): its ranks' Flight Recorder dumps and stacks kept"
    )
    script: Script = section(
        Script, "task=script: your own training script, unchanged (docs/script.md)"
    )
    diagnose: Diagnose = section(Diagnose, "the on-rank microbenchmark and the HTA cross-check")
    autotune: Optional[Autotune] = knob(
        None, "experiment=autotune's settings (conf/experiment/autotune.yaml)"
    )
    scaling: Optional[Dict[str, str]] = knob(None, "experiment=scaling: sync_at_<world size>")
    # groups: each option carries its own schema (above); the launcher's belong to launchers/slurm
    model: Any = group("the model, random weights, never downloaded")
    data: Any = group(
        "the data set (fake: an in-memory pool made once per rank; raw_folder: data.root=)"
    )
    optim: Any = group("the DDP comm hook")
    scale: Any = group(
        "the sizes: world_size, batch_size, image_size, warmup and steps, the window"
    )
    launcher: Any = group("how ranks start: on this machine, or through Slurm (docs/slurm.md)")
    logger: Any = group("where a finished run is logged (docs/wandb.md)")
    link: Any = group("ranks behind an emulated network link (root, CPU/gloo; docs/links.md)")


GROUP_SCHEMAS = {
    "model": {arch.value: node for arch, node in MODEL_SCHEMAS.items()},  # one per arch
    "data": {"fake": FakeData, "raw_folder": RawFolderData},
    "optim": {"hook": CommHookConfig, "powersgd": PowerSGD},
    "scale": {"scale": Scale},
    "logger": {"none": Logger, "wandb": WandbLogger},
    "link": {"link": Link},
}


def typed(schema: type, node: Any) -> Any:
    """A plain node (what the ranks get) as its schema's dataclass instance: fields read as
    attributes, enums as enums. The node was checked when the config was composed; this only gives
    it its types back."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))


def _register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, options in GROUP_SCHEMAS.items():
        for name, node in options.items():
            cs.store(group=f"schema/{group}", name=name, node=node)


_register()
