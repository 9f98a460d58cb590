"""NCCL/Gloo environment from config (`nccl.*`, `gloo.*`), set in each rank before its process group
starts, and the transports NCCL reports with NCCL_DEBUG=INFO (P2P, SHM, NET/IB, ...) read back from
its log files."""

from __future__ import annotations

from base.record import setting
import glob
import os
import re
from collections import Counter
from pathlib import Path

RECORDED_PREFIXES = (
    "NCCL_",
    "TORCH_NCCL_",
    "GLOO_",
    "OMP_NUM_THREADS",
    "MASTER_",
    "CUDA_VISIBLE_DEVICES",
)
NCCL_LOG_STEM = "nccl_debug"


def apply(cfg, output_dir: Path) -> dict[str, str]:
    """Export the configured variables; returns what was set. NCCL_DEBUG output goes to one file per
    process in the job directory so it can be parsed into the record."""
    set_now: dict[str, str] = {}
    for section, prefix in (("nccl", "NCCL_"), ("gloo", "GLOO_")):
        for key, value in setting(cfg, section, {}).items():
            if value is not None:
                set_now[prefix + key] = str(value)
    if set_now.get("NCCL_DEBUG") and "NCCL_DEBUG_FILE" not in os.environ:
        set_now["NCCL_DEBUG_FILE"] = str(output_dir / f"{NCCL_LOG_STEM}.%h.%p.log")
    if cfg.get("cuda_graphs"):
        set_now["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = (
            "0"  # required for capturing NCCL calls in a graph
        )
    os.environ.update(set_now)
    return set_now


def recorded_vars() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(RECORDED_PREFIXES)}


# One line per channel connection, logged by the process that sets it up (NCCL's
# src/transport/{p2p,shm,net}.cc):
#   "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"          P2P and SHM: by the sender only
#   "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct" "Channel 00/0 : 1[0] -> 2[0] [send] via
#   NET/IB/0/GDRDMA"   NET: by both ends, [send] and [receive], with the "Channel 00/0 : 1[0] ->
#   2[0] [receive] via NET/IB/0/GDRDMA"     index of the NIC the channel uses "Ring 00 : 0[7000] ->
#   1[b000] via P2P/IPC"                 older NCCL (bus ids in the brackets)
_VIA = re.compile(
    r"(?:Channel|Ring)\s+\d+(?:/\d+)?\s*:\s*\d+\[[^\]]*\]\s*->\s*\d+\[[^\]]*\]"
    r"(?:\s*\[(send|receive)\])?\s+via\s+(.+?)\s*$"
)


def transport_name(via: str) -> str:
    """The transport a connection uses, without the NIC index: 'NET/IB/1/GDRDMA(PCI)/Shared' ->
    'NET/IB/GDRDMA' (which NIC a channel took is not a different transport), other transports as
    NCCL names them."""
    if not via.startswith("NET/"):
        return via
    parts = via.split("/")
    return f"NET/{parts[1]}" + ("/GDRDMA" if any(p.startswith("GDRDMA") for p in parts[3:]) else "")


def parse_transports(lines) -> dict[str, int]:
    """How many channel connections used each transport, from NCCL_DEBUG=INFO lines of all the
    processes. A NET connection is logged by both ends; only its [send] line counts, so each
    connection counts once."""
    found: Counter = Counter()
    for line in lines:
        m = _VIA.search(line)
        if m and m.group(1) != "receive":
            found[transport_name(m.group(2))] += 1
    return dict(found)


def transports_from_logs(output_dir: Path) -> dict[str, int] | None:
    files = glob.glob(str(output_dir / f"{NCCL_LOG_STEM}.*.log"))
    if not files:
        return None
    lines = []
    for f in files:
        with open(f, errors="replace") as fh:
            lines.extend(fh)
    return parse_transports(lines)
