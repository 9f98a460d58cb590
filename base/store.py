"""The rendezvous stores this tool hosts, each listening on one address only.

torch's TCPStore server listens on every interface whatever host it is given, unauthenticated, for
the whole run: anything that reaches the machine could read or write the ranks' keys. So a store
started here listens on a socket bound by this module (TCPStore's `master_listen_fd`): in a local
run, the local launcher's address (127.0.0.1, or the bridge address behind emulated links); in a
multi-node run whose ranks make their own store (Slurm tasks), the address MASTER_ADDR names. Only
when that name resolves to a loopback address here while the job spans several hosts (a
Debian-style /etc/hosts maps the host's own name to 127.0.1.1) does it listen on every interface,
and the rank says so. Under torchrun the agent hosts the store (TORCHELASTIC_USE_AGENT_STORE).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from datetime import timedelta

import torch.distributed as dist

from base.log import get

LOOPBACK = "127.0.0.1"
EVERY_INTERFACE = ""
log = get(__name__)


def _resolved(host: str, port: int = 0) -> list[tuple]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback for info in _resolved(host))
    except (OSError, ValueError):
        return False


def listen_address(master_addr: str, spans_hosts: bool) -> str:
    """Where a store for ranks dialling `master_addr` listens (see the module docstring)."""
    addresses = [info[4][0] for info in _resolved(master_addr)]
    outside = [a for a in addresses if not ipaddress.ip_address(a).is_loopback]
    if outside:
        return outside[0]
    if not spans_hosts:
        return addresses[0]
    log.warning(
        f"warning: MASTER_ADDR={master_addr} resolves to {addresses[0]} (loopback) on this host "
        "while the job "
        "spans several hosts, so the rendezvous store listens on every interface; set MASTER_ADDR "
        "to this "
        "host's address on the job's network to keep it on that one"
    )
    return EVERY_INTERFACE


def bound_socket(address: str, port: int = 0) -> socket.socket:
    """A TCP socket bound (not yet listening) to address:port; EVERY_INTERFACE binds them all."""
    if address == EVERY_INTERFACE:
        sock = socket.socket(
            socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET, socket.SOCK_STREAM
        )
        where: tuple = ("", port)
    else:
        family, _, _, _, where = _resolved(address, port)[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
    except BaseException:
        sock.close()
        raise
    return sock


def serve(
    address: str,
    port: int = 0,
    *,
    dial: str | None = None,
    world_size: int | None = None,
    timeout: timedelta = timedelta(seconds=300),
) -> dist.TCPStore:
    """A TCPStore server listening on address:port only (port 0: a free one, read back from
    `.port`). dial: the name this process's own client dials (default: address; for EVERY_INTERFACE,
    loopback)."""
    sock = bound_socket(address, port)
    port = sock.getsockname()[1]
    fd = sock.detach()  # the store's server owns it from here
    try:
        return dist.TCPStore(
            dial or address or LOOPBACK,
            port,
            world_size,
            True,
            timeout,
            wait_for_workers=False,
            master_listen_fd=fd,
        )
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise


def rank_store(rank: int, world_size: int, spans_hosts: bool, timeout: timedelta) -> dist.Store:
    """The store of ranks that make their own (MASTER_ADDR/MASTER_PORT, as `env://` would): rank 0
    serves it on the address MASTER_ADDR names, the others dial it."""
    master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank == 0:
        return serve(
            listen_address(master, spans_hosts),
            port,
            dial=master,
            world_size=world_size,
            timeout=timeout,
        )
    return dist.TCPStore(master, port, world_size, False, timeout)


def interface_of(address: str) -> str | None:
    """The name of this host's network interface holding the IPv4 `address` (Linux), else None: what
    GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME take, so the ranks' own sockets listen there too."""
    if not sys.platform.startswith("linux"):
        return None
    import fcntl
    import struct

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(
                    probe.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15])
                )
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def gather_objects(
    store: dist.Store, key: str, rank: int, world_size: int, mine, to_all: bool = True
) -> list | None:
    """Every rank's `mine`, in rank order, through the store rather than a collective: for a rank
    side that must not issue one on the process groups the user's script made (task=script).
    to_all=False: rank 0 alone reads them (the others get None)."""
    import pickle

    store.set(f"{key}/{rank}", pickle.dumps(mine))
    if not to_all and rank != 0:
        return None
    return [pickle.loads(store.get(f"{key}/{r}")) for r in range(world_size)]
