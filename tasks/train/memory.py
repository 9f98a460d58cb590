"""Memory preflight: estimate one rank's peak memory for task=train and refuse, before any rank
starts, a config that cannot fit on the GPU, naming the batch size that would (CPU ranks: the same
estimate, against the host memory the node's ranks share, is device.host.check_fits's to judge).
An out-of-memory error halfway into a multi-rank run costs the user a queue slot and tells less.

The model is built on the meta device (shapes only, no memory): its parameters give the fixed
part, and one forward pass under torch.autograd.graph.saved_tensors_hooks at two batch sizes
separates what autograd keeps for backward per sample. A small model (CPU_ROUTE_PARAMS) of a rank
not on a GPU takes that pass on the CPU instead, on zeros: what its CPU kernels save (a convolution
net's bytes are the meta pass's; attention's CPU kernel saves less, tests/test_train_memory.py), in
milliseconds, where the first meta forward of a process loads torch's Python meta kernels and
sympy: 1.6 s [0.8, 2.4] of every `python train.py` start of a tiny model on the 2-core machine
(docs/testing.md, issue 36). Added to that: gradients, SGD momentum, DDP
buckets, comm hook buffers, a backward working set and a fixed reserve (docs/config.md says which).
It is an estimate: it refuses only configs it finds larger than the whole device, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from device.host import RANK_MEMORY_BYTES
from base.errors import ConfigError

GiB = 1024**3
RESERVE = {"cuda": 1 * GiB, "cpu": RANK_MEMORY_BYTES, "fake": RANK_MEMORY_BYTES}
# parameters (elements) up to which the activation pass runs on the CPU (a few MB of weights and a
# forward of milliseconds for the tiny models; VGG11's 133 M stay on the meta device)
CPU_ROUTE_PARAMS = 2_000_000
# ... and input elements per sample up to which (3 x 256 x 256): the CPU pass allocates what it
# saves, where the meta pass allocates nothing, so a small net on large inputs stays on meta
CPU_ROUTE_INPUT = 3 * 256 * 256


@dataclass
class Estimate:
    fixed: dict[str, int]  # bytes that do not grow with the batch, by part
    per_sample: int  # activation bytes (saved + backward working set) per sample of the micro-batch
    activations_fixed: int  # activation bytes that do not grow with the batch
    activations_counted: bool = (
        True  # False: an operation without a meta kernel (only the fixed part is known)
    )

    def total(self, batch: int) -> int:
        return sum(self.fixed.values()) + self.activations_fixed + self.per_sample * batch

    def largest_batch(self, capacity: int) -> int:
        room = capacity - sum(self.fixed.values()) - self.activations_fixed
        return max(0, room // self.per_sample) if self.per_sample else (1 << 30 if room >= 0 else 0)


def _activation_bytes(model, criterion, shape: tuple, batch: int, device: str) -> int:
    """Bytes autograd saves for backward in one forward of `batch` samples on `device` (the
    model's), the parameters left out, plus the gradients of the two largest."""
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        key = t.untyped_storage()._cdata
        if key not in params:
            saved[key] = t.untyped_storage().nbytes()
        return t

    x = torch.zeros(batch, *shape, device=device)
    y = torch.zeros(batch, dtype=torch.long, device=device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        criterion(model(x), y)
    largest = sorted(saved.values())[-2:]
    return sum(saved.values()) + sum(largest)


def estimate(cfg, kind: str | None = None, route: str | None = None) -> Estimate:
    """kind: the device the rank computes on ("cuda", "cpu", "fake"): adds its reserve, and on CPU
    the in-memory image pool. None: the model's own parts only. route: the device of the
    activation pass, "meta" or "cpu" (None: the CPU for a model of CPU_ROUTE_PARAMS or fewer on
    inputs of CPU_ROUTE_INPUT elements or fewer whose rank is not on a GPU)."""
    from models import build_model, input_shape

    with torch.device("meta"):
        model = build_model(cfg.model, cfg.data.image_size)
    params = list(model.parameters())
    all_bytes = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    fixed = {"parameters": all_bytes, "gradients": grads}
    if cfg.solver.momentum:
        fixed["momentum"] = grads
    if (cfg.sync == "ddp" and not cfg.ddp.gradient_as_bucket_view) or cfg.sync == "flat":
        fixed["buckets"] = grads
    optim = cfg.optim.name
    if cfg.sync == "ddp" and optim in ("fp16", "bf16"):
        fixed["comm hook"] = grads // 2
    elif cfg.sync == "ddp" and optim == "powersgd" and cfg.optim.use_error_feedback:
        fixed["comm hook"] = grads
    criterion = torch.nn.CrossEntropyLoss()
    shape = input_shape(cfg)

    def passes(m, device: str) -> tuple[int, int]:
        return tuple(_activation_bytes(m, criterion, shape, b, device) for b in (1, 2))

    if route is None:  # a rank on the CPU: its own kernels' bytes (attention's differ from meta's)
        small = (
            sum(p.numel() for p in params) <= CPU_ROUTE_PARAMS
            and math.prod(shape) <= CPU_ROUTE_INPUT
        )
        route = "cpu" if small and kind != "cuda" else "meta"
    if route == "cpu":
        try:
            with torch.random.fork_rng(devices=[]):  # its weights' draw leaves the caller's RNG
                one, two = passes(build_model(cfg.model, cfg.data.image_size), "cpu")
        except (RuntimeError, NotImplementedError, ValueError, IndexError, AssertionError):
            # an op the CPU refuses (a CUDA-only kernel) or a shape error: the meta pass decides
            route = "meta"
    if route == "meta":
        try:
            one, two = passes(model, "meta")
        except NotImplementedError:  # an operation without a meta kernel: activations unknown
            one = two = 0
        except RuntimeError as e:  # a shape error: the run would fail the same way in every rank
            raise ConfigError(
                f"model={cfg.model.name} cannot take data.image_size={cfg.data.image_size} inputs "
                f"({str(e).splitlines()[0]}). Use a larger data.image_size."
            ) from None
    if kind is not None:
        if (
            cfg.data.kind == "fake" and kind != "cuda"
        ):  # the in-memory image pool lives with the CPU ranks
            fixed["data pool"] = int(cfg.data.pool) * math.prod(shape) * 4
        fixed["reserve"] = RESERVE[kind]
    return Estimate(
        fixed,
        per_sample=two - one,
        activations_fixed=max(0, 2 * one - two),
        activations_counted=bool(two),
    )


def rank_bytes(cfg) -> int:
    """One CPU rank's peak host memory at cfg.batch_size (the check of the host's memory,
    device.host.check_fits)."""
    return estimate(cfg, "cpu").total(int(cfg.batch_size))


def capacity(placement, local_ranks: int) -> tuple[int, str]:
    """(bytes one rank may use, what that is) on the GPU `placement` gives it (shared GPUs: shared
    by the node's ranks). Host memory is device.host.Host's to tell (device.host.check_fits)."""
    props = torch.cuda.get_device_properties(
        placement.gpu
    )  # NVML-free and context-free: no CUDA context is made
    sharing = local_ranks if placement.shared else 1
    share = f", shared by {sharing} ranks" if sharing > 1 else ""
    return (
        props.total_memory // sharing,
        f"cuda:{placement.gpu} ({props.name}, {_size(props.total_memory)}{share})",
    )


def preflight(cfg, placement, local_ranks: int, room: tuple[int, str] | None = None) -> Estimate:
    """Raise ConfigError if one rank of this run cannot fit on its GPU. room: (bytes, what) to check
    against (default: the placement's GPU, see capacity())."""
    cap, what = room if room is not None else capacity(placement, local_ranks)
    est = estimate(cfg, placement.kind)
    b = int(cfg.batch_size)
    need = est.total(b)
    if need <= cap:
        return est
    parts = ", ".join(f"{k} {_size(v)}" for k, v in est.fixed.items())
    acts = est.activations_fixed + est.per_sample * b
    head = (
        f"model={cfg.model.name} batch_size={b} does not fit in {what}: one rank needs about "
        f"{_size(need)} ({parts}, activations {_size(acts)} at {b} samples; estimate)."
    )
    fits = est.largest_batch(cap)
    if fits < 1:
        raise ConfigError(
            f"{head} No batch size fits: the model's fixed part alone is too large for it."
        )
    hint = ""
    k = math.ceil(b / fits)
    if k > 1 and b % k == 0:
        hint = (
            f" (or accumulate={k * int(cfg.accumulate)} batch_size={b // k}: the same "
            "effective batch)"
        )
    raise ConfigError(f"{head} batch_size={fits} fits by this estimate{hint}.")


def _size(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB // 10 else f"{n / 1024**2:.1f} MiB"
