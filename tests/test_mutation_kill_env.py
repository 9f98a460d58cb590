"""comm/env.py (issue 36: a module the mutation run covers): the transport counts the record and
the diagnosis's NCCL transport finding print, read from hand-made NCCL_DEBUG=INFO lines and counted
here by hand (a NET connection logged at both ends counts once), and the variables a run sets."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from comm import env as ce

LINES = [
    "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n",
    "host:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n",
    "host:1:2 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct\n",
    "host:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [send] via NET/IB/0/GDRDMA\n",
    "host:3:4 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [receive] via NET/IB/0/GDRDMA\n",
    "host:1:2 [0] NCCL INFO Channel 01/0 : 1[0] -> 2[0] [send] via NET/IB/1/GDRDMA(PCI)/Shared\n",
    "host:1:2 [0] NCCL INFO Channel 02/0 : 1[0] -> 2[0] [send] via NET/Socket/0\n",
    "host:1:2 [0] NCCL INFO Ring 00 : 0[7000] -> 1[b000] via P2P/IPC\n",
    "host:1:2 [0] NCCL INFO something else via P2P/IPC\n",
]


def test_transports_counted_once_per_connection():
    assert ce.parse_transports(LINES) == {
        "P2P/CUMEM/read": 2,
        "SHM/direct/direct": 1,
        "NET/IB/GDRDMA": 2,
        "NET/Socket": 1,
        "P2P/IPC": 1,
    }
    assert ce.parse_transports([]) == {}


def test_a_transports_name_drops_the_nic():
    assert ce.transport_name("NET/IB/1/GDRDMA(PCI)/Shared") == "NET/IB/GDRDMA"
    assert ce.transport_name("NET/IB/0") == "NET/IB"
    assert ce.transport_name("NET/Socket/GDRDMA") == "NET/Socket"  # the NIC index's place
    assert ce.transport_name("SHM/direct/direct") == "SHM/direct/direct"


def test_transports_from_the_log_files(tmp_path):
    assert ce.transports_from_logs(tmp_path) is None
    (tmp_path / "nccl_debug.a.1.log").write_text("".join(LINES[:3]))
    (tmp_path / "nccl_debug.b.2.log").write_text("".join(LINES[3:5]))
    (tmp_path / "other.log").write_text(LINES[0])
    assert ce.transports_from_logs(tmp_path) == {
        "P2P/CUMEM/read": 2,
        "SHM/direct/direct": 1,
        "NET/IB/GDRDMA": 1,
    }


def test_the_variables_a_run_sets(tmp_path, monkeypatch):
    # apply() writes os.environ: a copy here, put back after the test (no variable leaks out)
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "TORCH_NCCL_"))
    }
    monkeypatch.setattr(os, "environ", clean)
    cfg = OmegaConf.create(
        {"nccl": {"DEBUG": "INFO", "IB_DISABLE": 1, "ALGO": None}, "gloo": {"SOCKET_IFNAME": "lo"}}
    )
    got = ce.apply(cfg, tmp_path)
    assert got == {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_DISABLE": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_DEBUG_FILE": str(tmp_path / "nccl_debug.%h.%p.log"),
    }
    assert os.environ["NCCL_IB_DISABLE"] == "1"
    assert ce.recorded_vars()["GLOO_SOCKET_IFNAME"] == "lo"
    graphs = ce.apply(OmegaConf.create({"cuda_graphs": True}), tmp_path)
    assert graphs == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    clean["NCCL_DEBUG_FILE"] = "/x"
    kept = ce.apply(OmegaConf.create({"nccl": {"DEBUG": "WARN"}}), tmp_path)
    assert kept == {"NCCL_DEBUG": "WARN"}


def test_a_log_with_bytes_that_are_not_text_is_still_read(tmp_path):
    (tmp_path / "nccl_debug.a.1.log").write_bytes(b"\xff\xfe garbage\n" + LINES[2].encode())
    assert ce.transports_from_logs(tmp_path) == {"SHM/direct/direct": 1}
