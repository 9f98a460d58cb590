"""The five source documents (the README's "What it reproduces"), as the cases a finding can point
to: what the person saw, and what was found or recommended there. Quoted figures are the documents'
own, never this machine's. Code names a source by what it is (VIT_STUDY); the output by its number
("source 003"), as the docs do."""

from __future__ import annotations

from typing import NamedTuple


class Source(NamedTuple):
    number: str  # as the output and the docs name it: "source 003"
    title: str
    case: str  # what was seen there, and what was found or recommended


VGG11_THREAD = Source(
    "000",
    "VGG11 thread",
    "VGG11 on 16 nodes: a per-parameter all_reduce loop took 280 ms for the 471 MB classifier "
    "where nccl-tests "
    "moved the same bytes in ~60 ms; the poster's own fix: the batch's host-to-device copy on the "
    "default "
    "stream forced a sync every step, moving it to a side stream solved it",
)
GLOO_PAIRS_THREAD = Source(
    "001",
    "gloo pair-groups thread",
    "gloo on CPU, one process group per pair of ranks: time grew linearly with the number of "
    "pairs; replies: "
    "use DDP instead of hand-written all_reduce, accumulate gradients (no_sync), NCCL where "
    "possible, "
    "async_op=True to overlap",
)
NCCL_RDMA_ARTICLE = Source(
    "002",
    "NCCL / CUDA graphs / RDMA article",
    "DDP communication overhead: use NCCL, CUDA graphs for launch overhead, and RDMA (NCCL_IB_HCA, "
    "NCCL_IB_GID_INDEX) on InfiniBand/RoCE instead of sockets",
)
VIT_STUDY = Source(
    "003",
    "ViT-L/32 DDP study",
    "8x L40S over PCIe: NCCL used SHM (via CPU memory), 8 GPUs were >6x slower than one; DDP on "
    "one GPU cost "
    "3-7% against no DDP; one 2 GB bucket left no overlap; bf16 compression +65% (L40S), PowerSGD "
    ">5x, "
    "smaller buckets +12% with bf16",
)
MORE_GPUS_ARTICLE = Source(
    "004",
    "DDP slower with more GPUs article",
    "communication dominates as GPUs are added; a single slow GPU holds every other one at the "
    "barrier; "
    "gradient accumulation cuts sync frequency; network bandwidth (Ethernet vs InfiniBand) limits "
    "scaling",
)

SOURCES = {
    s.number: s
    for s in (VGG11_THREAD, GLOO_PAIRS_THREAD, NCCL_RDMA_ARTICLE, VIT_STUDY, MORE_GPUS_ARTICLE)
}


def cite(source: Source, point: str = "") -> str:
    """'source 000 (VGG11 thread): <point or the whole case>'."""
    return f"source {source.number} ({source.title}): {point or source.case}"
