"""The config's schema: the type, the allowed values and the bounds of every key conf/ can hold.

Hydra merges conf/'s YAML onto these dataclasses, so a wrong type or an unknown choice (`steps=1.5`, `sync=allgather`,
a misspelt key) is refused while the config is composed, before any code of ours runs. The values themselves (the
defaults) live in the YAML only: a field here says what a key may hold, conf/ says what it holds. Bounds are field
metadata (`ge`/`gt`), checked once by job.config.check_schema; the checks between keys belong to each task's
check().

Each group option extends its group's schema in its defaults list (`- /schema/model/vgg@_here_`), the primary config
extends `config_schema` (Hydra's "structured config as schema" pattern). The launcher group is left untyped: its
options belong to launchers/slurm, which checks them. Importing this module registers everything in Hydra's
ConfigStore (Hydra's idiom; job.config imports it, so everything that composes conf/ has it).
"""

from __future__ import annotations

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
        """Python 3.10: a choice that is its name wherever a string is expected (f-strings, ==, JSON)."""

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


# ----------------------------------------------------------------------------------------------------------- choices
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


class DeviceKind(StrEnum):
    """`device=`: where the ranks compute (the device layer itself is device.cpu.Device and its subclasses)."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class RankDevice(StrEnum):
    """Where the ranks compute (`device=`; decided in device/placement.py)."""

    auto = "auto"  # a GPU per rank where there are GPUs, else CPU
    cpu = "cpu"
    cuda = "cuda"
    fake = "fake"  # tests only: CPU tensors through the GPU code paths, the stream rules checked (device/fake.py)


# task=collectives' names, nccl-tests' choices (comm/bandwidth.py maps them to torch; dtype aliases such as fp32 are
# aliases of the enum too)
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
    """The model families, each with its own keys (a schema below); a new model of any family is one YAML file, and
    one that is none of these is `custom` (its own _target_, input_shape and num_classes)."""

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


# ---------------------------------------------------------------------------------------------------------- groups
@dataclass
class Model:
    """conf/model/*.yaml: `_target_` makes the model (models.build_model passes it the keys it takes, and image_size);
    arch and name say what it is, in the record. torchvision and timm models need nothing more than their name."""

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
    """model=custom: model._target_ names the user's nn.Module class or factory; it gets num_classes (and image_size,
    input_shape) where its signature takes them."""

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
    """conf/data/*.yaml: `_target_` is the Dataset (data.build_dataset passes it the keys it takes, the samples needed,
    the sample shape and the rank's seed)."""

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
    """conf/optim/*.yaml: `_target_` returns (state, hook) for DDP.register_comm_hook (tasks/train/hooks.py); null:
    DDP's own all-reduce."""

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
    """conf/link/*.yaml: the network between the ranks (launchers/link.py builds it; comm/link.py reads rates)."""

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
    """conf/logger/*.yaml: `_target_` logs a finished run's record (job/finalise.py calls it with record= and cfg=);
    null: no logger."""

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


# ------------------------------------------------------------------------------------------------ top-level sections
@dataclass
class DDPFlags:
    static_graph: bool = MISSING
    gradient_as_bucket_view: bool = MISSING
    find_unused_parameters: bool = MISSING
    broadcast_buffers: bool = MISSING


@dataclass
class Solver:
    lr: float = ge(0)
    momentum: float = ge(0)


@dataclass
class Profile:
    enabled: bool = MISSING
    wait: int = ge(0)
    warmup: int = ge(0)
    active: int = ge(1)


@dataclass
class Collectives:
    ops: List[Op] = MISSING
    reduce_op: ReduceOp = MISSING
    min_bytes: Union[int, str] = (
        MISSING  # bytes, or with nccl-tests' suffixes: 64K, 8M, 8G (powers of 1024)
    )
    max_bytes: Union[int, str] = MISSING
    factor: float = gt(1)
    dtype: DType = MISSING
    warmup_iters: int = ge(0)
    iters: int = ge(1)
    inplace: Union[bool, str] = MISSING  # true | false | both
    check_iters: int = ge(0)
    corrupt_rank: Optional[int] = ge(0)
    device: DeviceKind = MISSING


@dataclass
class GradSync:
    warmup_iters: int = ge(0)
    iters: int = ge(1)
    device: DeviceKind = MISSING


@dataclass
class PairGroups:
    warmup_iters: int = ge(0)
    iters: int = ge(1)
    shape: List[int] = MISSING
    async_op: bool = MISSING
    threads: Optional[int] = ge(1)


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
    rank: Optional[int] = ge(0)
    step: int = ge(0)
    sleep_s: float = ge(
        0
    )  # test knob: a known delay in every step's optimizer phase, on every rank
    delay_s: float = ge(
        0
    )  # benchmark knob (tasks/train/faults.py): a known delay per step at delay_at ...
    delay_at: FaultAt = MISSING  # ... data | h2d | backward | after_optimizer
    delay_rank: Optional[int] = ge(0)  # ... on this rank (null: every rank)
    hang: Optional[HangKind] = None  # test knob: a hang of this kind (tasks/train/faults.py) ...
    hang_rank: int = ge(0)  # ... on this rank ...
    hang_step: int = ge(0)  # ... at this step


@dataclass
class Hang:
    """A hung job (launchers/hang.py)."""

    enabled: bool = MISSING
    after_s: Optional[float] = gt(0)
    min_s: float = gt(0)
    step_factor: float = gt(0)
    fr_buffer: int = ge(0)


@dataclass
class Script:
    """task=script: the user's training script, run as torchrun would run it (tasks/script)."""

    path: Optional[str] = None  # the script; relative to the directory train.py was started in
    args: List[str] = MISSING  # its command-line arguments (sys.argv[1:])
    max_steps: Optional[int] = ge(
        1
    )  # stop every rank after this many optimizer steps (null: run to its end)
    first_step_timeout_s: float = gt(
        0
    )  # no optimizer step by then: not a training script (one line, failed)


@dataclass
class Measure:
    policy: MeasurePolicy = MISSING
    rel_ci: float = gt(0)
    max_steps: Optional[int] = ge(1)
    max_s: Optional[float] = gt(0)
    block_steps: int = ge(1)


@dataclass
class Compare:
    noise: float = ge(0)
    target: float = gt(0)  # repeats=auto: half-width of every row's speed-up interval (0.02: +-2%)
    budget_s: float = gt(0)  # repeats=auto: machine seconds for the whole sweep, pilot included


@dataclass
class Diagnose:
    microbench: Any = (
        MISSING  # auto | true | false (checked in tasks/train/check.py: OmegaConf has no bool|str)
    )
    microbench_iters: int = ge(1)
    microbench_budget: float = gt(0)
    hta: bool = MISSING


@dataclass
class Autotune:
    """experiment=autotune's own settings (conf/experiment/autotune.yaml); absent in every other run."""

    stage: str = MISSING
    top_k: int = ge(1)
    repeats: int = ge(1)
    prune: bool = (
        True  # the what-if model rules trials out before they run (results/autotune.py: Pruner)
    )


@dataclass
class Config:
    """conf/config.yaml: the knobs users type on the command line, then the groups."""

    tags: List[str] = MISSING
    task: Task = MISSING
    world_size: int = ge(1)
    backend: Backend = MISSING
    device: RankDevice = MISSING
    timeout_s: float = gt(0)
    seed: int = MISSING
    oversubscribe: bool = MISSING
    sync: Sync = MISSING
    bucket: Optional[Union[int, float]] = gt(
        0
    )  # MB; null: DDP's default (tasks/train/ddp.py: bucket_caps)
    ddp: DDPFlags = field(default_factory=DDPFlags)
    accumulate: int = ge(1)
    precision: Precision = MISSING
    cuda_graphs: bool = MISSING
    h2d: H2D = MISSING
    batch_size: int = ge(1)
    warmup_steps: int = ge(0)
    steps: int = ge(1)
    measure: Measure = field(default_factory=Measure)
    repeats: Union[int, str] = field(
        default=MISSING, metadata={"ge": 1, "also": ("auto",)}
    )  # R runs per configuration, or auto (a pilot, then the plan: hydra_plugins/repeat_sweeper)
    repeat: int = ge(0)
    compare: Compare = field(default_factory=Compare)
    verbose: bool = MISSING
    timing: bool = MISSING
    probe_steps: int = ge(0)
    solver: Solver = field(default_factory=Solver)
    profile: Profile = field(default_factory=Profile)
    nccl: Dict[str, Optional[str]] = MISSING  # any NCCL_<KEY>: open, add one with +nccl.KEY=value
    gloo: Dict[str, Optional[str]] = MISSING
    collectives: Collectives = field(default_factory=Collectives)
    grad_sync: GradSync = field(default_factory=GradSync)
    pairs: int = ge(1)
    pair_groups: PairGroups = field(default_factory=PairGroups)
    fault: Fault = field(default_factory=Fault)
    hang: Hang = field(default_factory=Hang)
    script: Script = field(default_factory=Script)
    diagnose: Diagnose = field(default_factory=Diagnose)
    autotune: Optional[Autotune] = None
    scaling: Optional[Dict[str, str]] = None  # experiment=scaling: sync_at_<world size>
    # groups: each option carries its own schema (above); the launcher's belong to launchers/slurm
    model: Any = MISSING
    data: Any = MISSING
    optim: Any = MISSING
    scale: Any = MISSING
    launcher: Any = MISSING
    logger: Any = MISSING
    link: Any = MISSING


GROUP_SCHEMAS = {
    "model": {arch.value: node for arch, node in MODEL_SCHEMAS.items()},  # one per arch
    "data": {"fake": FakeData, "raw_folder": RawFolderData},
    "optim": {"hook": CommHookConfig, "powersgd": PowerSGD},
    "scale": {"scale": Scale},
    "logger": {"none": Logger, "wandb": WandbLogger},
    "link": {"link": Link},
}


def typed(schema: type, node: Any) -> Any:
    """A plain node (what the ranks get) as its schema's dataclass instance: fields read as attributes, enums as
    enums. The node was checked when the config was composed; this only gives it its types back."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))


def _register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, options in GROUP_SCHEMAS.items():
        for name, node in options.items():
            cs.store(group=f"schema/{group}", name=name, node=node)


_register()
