"""DDP's bucket assignment for any bucket cap, with torch's own code.

`assign` calls `dist._compute_bucket_assignment_by_size`, the function DDP's reducer calls when it
rebuilds its buckets after the first backward, on meta tensors of the parameters' sizes, with the
limits DDP uses and in the order the gradients became ready: no memory is spent and the answer is
torch's, not a reimplementation. Two things to know before the code: the first bucket is capped at
1 MiB only when `bucket_cap_mb` is left unset, and the buckets come out in ready order, the order
the reducer launches them. How torch 2.14 builds them: docs/whatif.md "The step model in detail".
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
DEFAULT_CAP_MB = 25.0  # torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB


def is_default(cap_mb) -> bool:
    """The record's or the user's way of saying "DDP's default": None (bucket_cap_mb left unset) or
    "default"."""
    return cap_mb is None or (
        isinstance(cap_mb, str) and cap_mb.strip().lower() in ("default", "none", "null", "")
    )


def limits(cap_mb) -> list[int]:
    """[first bucket cap, cap] in bytes, as DDP(bucket_cap_mb=cap_mb) rebuilds with (None /
    "default": DDP's default)."""
    # here: the commands that only read records import this module, not torch
    import torch.distributed as dist

    cap = None if is_default(cap_mb) else float(cap_mb)
    try:
        from torch.nn.parallel.distributed import _BucketCapacityConfig

        c = _BucketCapacityConfig.create(cap, None, False)
        first, rest = int(c.first_bucket_bytes_cap), int(c.bucket_bytes_cap)
    except (
        ImportError,
        AttributeError,
        TypeError,
    ):  # older torch: the first bucket was always 1 MiB
        rest = int((DEFAULT_CAP_MB if cap is None else cap) * MIB)
        first = min(int(dist._DEFAULT_FIRST_BUCKET_BYTES), rest)
    return [first, rest]


def bucket_cap_mb(bucket) -> float | None:
    """conf's `bucket` as DDP's bucket_cap_mb: null leaves DDP's own default (stock DDP), a number
    is passed as is."""
    return None if bucket is None else float(bucket)


def bucket_caps(bucket) -> tuple[int, int]:
    """(first bucket's cap, every other bucket's cap) in bytes, as DDP derives them from
    bucket_cap_mb (torch/nn/parallel/distributed.py, _BucketCapacityConfig.create, torch 2.14):
    bucket_cap_mb=None gives 25 MiB buckets with the first capped at
    dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB); an explicit bucket_cap_mb caps every bucket at that
    size, the first too (bucket=25 is not stock DDP). After the first step the reducer rebuilds the
    buckets in the order gradients became ready, so the first bucket holds the first gradients
    backward produces (the output layers): the small first cap lets the first all-reduce start
    early. Asks torch's own bucket config where it has one (limits)."""
    first, cap = limits(bucket)
    return first, cap


def bucket_rule(bucket) -> str:
    """The bucket setting in words, for the record and the summary."""
    first, cap = bucket_caps(bucket)
    if bucket is None:
        return (
            f"DDP's default (bucket_cap_mb=None): {cap / MIB:g} MiB buckets, the first capped at "
            f"{first / MIB:g} MiB"
        )
    return (
        f"bucket_cap_mb={float(bucket):g}: every bucket capped at {cap / MIB:g} MiB, the first too"
    )


def label(cap_mb) -> str:
    return "default" if is_default(cap_mb) else f"{float(cap_mb):g}"


@dataclass(frozen=True)
class Bucket:
    params: tuple[
        int, ...
    ]  # parameter indices (model.parameters() order, trainable only), in ready order
    nbytes: int


def assign(
    numel: list[int],
    element_size: list[int],
    ready_order: list[int],
    cap_mb,
    dtypes: list[str] | None = None,
) -> list[Bucket]:
    """The buckets DDP rebuilds for parameters of these sizes, gradients ready in `ready_order`, in
    launch order."""
    if sorted(ready_order) != list(range(len(numel))):
        raise ValueError(f"ready_order must be a permutation of the {len(numel)} parameter indices")
    import torch
    import torch.distributed as dist

    dtypes = dtypes or [_dtype_for(e) for e in element_size]
    tensors = [
        torch.empty(int(numel[i]), dtype=getattr(torch, dtypes[i]), device="meta")
        for i in ready_order
    ]
    order, _ = dist._compute_bucket_assignment_by_size(
        tensors, limits(cap_mb), [False] * len(tensors), list(ready_order)
    )
    return [
        Bucket(tuple(int(i) for i in b), sum(int(numel[i]) * int(element_size[i]) for i in b))
        for b in order
    ]


def _dtype_for(element_size: int) -> str:
    return {2: "float16", 4: "float32", 8: "float64"}.get(int(element_size), "float32")
