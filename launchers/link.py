"""Ranks behind an emulated network link (`link=1gbe`, `link.rate=2.5gbit`): each emulated node (one
rank, or `link.ranks_per_node`) gets a network namespace with one NIC on a bridge, every NIC and
switch port shaped with tc to the rate; gloo and the rendezvous use that network.

The namespaces are anonymous and held only by the launcher's descriptors and the ranks (which ask
for SIGKILL when the launcher dies), so whatever ends the run, the kernel frees them; orphans of a
dead launcher are reaped by the next link run. Why this mechanism, and what a link does not
emulate: docs/links.md.
"""

from __future__ import annotations

from base.record import setting
import ctypes
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from comm import link as arith
from comm.bandwidth import bus_factor
from base.errors import ConfigError
from base.log import get

log = get(__name__)

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
SUBNET = "198.18.0"  # RFC 2544 benchmarking range; exists only inside the run's namespaces
NIC = "nic0"  # each node's NIC, inside its namespace
SWITCH = "switch0"  # the bridge, inside the switch's namespace
RENDEZVOUS_PORT = (
    29500  # rank 0's store, on node 0's address: private to the run, so a fixed port cannot clash
)
CHECK_PORT = 5201
MARK_ENV = "DDP_COMM_LINK_RUN"
MIN_RATE, MAX_RATE = 1e6, 400e9
RTT_ROUNDS = 50
TOOLS_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


class LinkError(ConfigError):
    """The link cannot be built here, or not as asked: one line naming the cause and the fix (exit
    2)."""


# ------------------------------------------------------------------------------------- the syscalls
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
)


def _syscall(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(fd: int) -> None:
    _syscall(_libc.setns(fd, CLONE_NEWNET), "setns(CLONE_NEWNET)")


def _in_thread(fn):
    """fn() in a thread of its own, which may move to another network namespace and then ends; its
    result or its exception comes back here. This thread never changes namespace."""
    box: dict = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    thread = threading.Thread(target=body, name="link-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def new_netns() -> int:
    """A new, empty network namespace, held by the returned descriptor only (close it and the kernel
    frees it)."""

    def body():
        _syscall(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    return _in_thread(body)


def run_in(
    fd: int, argv: list[str], script: str | None = None, pass_fds: tuple = ()
) -> subprocess.CompletedProcess:
    """argv started inside the namespace of fd (`ip -batch -` / `tc -batch -` with script on stdin);
    pass_fds: this process's descriptors the child gets under the same numbers (/proc/self/fd/<n>
    there)."""

    def body():
        _setns(fd)
        return subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=60, pass_fds=pass_fds
        )

    return _in_thread(body)


def socket_in(fd: int) -> socket.socket:
    """A TCP socket that belongs to the namespace of fd (whichever thread uses it later)."""

    def body():
        _setns(fd)
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    return _in_thread(body)


def tool(name: str) -> str | None:
    """iproute2's ip or tc: on PATH, or in the sbin directories a non-root PATH lacks."""
    return shutil.which(name) or next(
        (str(Path(d) / name) for d in TOOLS_DIRS if (Path(d) / name).is_file()), None
    )


# ----------------------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class Spec:
    """What a run asked for (cfg.link), checked."""

    name: str
    rate_bit_s: float
    qdisc: str
    burst_bytes: int
    latency_us: float | None
    ranks_per_node: int
    check_s: float
    mtu: int = arith.DEFAULT_MTU

    @property
    def label(self) -> str:
        rate = arith.human(self.rate_bit_s).replace(" ", "")
        return f"link={self.name} ({rate})" if self.name != "none" else f"link.rate={rate}"

    @property
    def quantum(self) -> int:
        return arith.htb_quantum(self.rate_bit_s, self.mtu)


def wanted(cfg) -> bool:
    return setting(cfg, "link.rate") is not None or setting(cfg, "link.latency_us") is not None


def spec_of(cfg) -> Spec | None:
    """cfg.link as a Spec, or None for link=none. Raises LinkError for values no link can have."""
    node = setting(cfg, "link", {})
    if not wanted(cfg):
        return None
    name = str(node.get("name") or "none")
    if node.get("rate") is None:
        raise LinkError(
            f"link.latency_us={node.get('latency_us')} without a rate: choose one as well "
            "(link=1gbe, "
            "link=10gbe or link.rate=<rate>)"
        )
    try:
        rate = arith.parse_rate(node["rate"])
    except arith.RateError as e:
        raise LinkError(str(e)) from None
    if not MIN_RATE <= rate <= MAX_RATE:
        raise LinkError(
            f"link.rate={node['rate']} ({arith.human(rate)}): outside {arith.human(MIN_RATE)} .. "
            f"{arith.human(MAX_RATE)}, the rates tc shapes dependably here"
        )
    burst = node.get("burst_bytes")
    mtu_frame = arith.DEFAULT_MTU + arith.ETHERNET_HEADER
    if burst is not None and burst < mtu_frame:
        raise LinkError(
            f"link.burst_bytes={burst}: smaller than one frame ({mtu_frame} B), so nothing could "
            "be "
            f"sent; use at least {mtu_frame}, or null for the default"
        )
    return Spec(
        name=name,
        rate_bit_s=rate,
        qdisc=str(node.get("qdisc") or "htb"),
        burst_bytes=int(burst) if burst is not None else arith.default_burst(rate),
        latency_us=None if node.get("latency_us") is None else float(node["latency_us"]),
        ranks_per_node=int(node.get("ranks_per_node") or 1),
        check_s=float(node.get("check_s") or 0),
    )


def nodes_for(world_size: int, ranks_per_node: int) -> int:
    return max(1, math.ceil(world_size / ranks_per_node))


def address(node: int) -> str:
    return f"{SUBNET}.{node + 1}"


def node_name(node: int) -> str:
    return f"node{node}.link"


# ------------------------------------------------------------------------------------ can we, here?
@dataclass(frozen=True)
class Support:
    """What this machine lets a link run do; problem: why none can be built (None: one can)."""

    problem: str | None = None
    detail: str = ""
    qdiscs: frozenset = field(
        default_factory=frozenset
    )  # of htb, tbf, netem: the shapers that work here


@lru_cache(maxsize=1)
def probe() -> Support:
    """Try everything a link needs, in a throwaway namespace (freed on return): root, a network
    namespace, veth and bridge, and which of htb, tbf and netem the kernel has. About 50 ms; once
    per process."""
    if os.geteuid() != 0:
        return Support("root")
    ip, tc = tool("ip"), tool("tc")
    if ip is None or tc is None:
        return Support("tools", " and ".join(n for n, p in (("ip", ip), ("tc", tc)) if p is None))
    try:
        fd = new_netns()
    except OSError as e:
        return Support("netns", e.strerror or str(e))
    try:
        made = run_in(
            fd,
            [ip, "-batch", "-"],
            "link add probe0 type veth peer name probe1\n"
            "link add probe2 type bridge\nlink set probe0 up\nlink set probe1 up\n",
        )
        if made.returncode != 0:
            return Support("veth", _first_line(made.stderr))
        found = set()
        for kind, opts in (
            ("htb", "htb default 1"),
            ("tbf", "tbf rate 1gbit burst 70000 latency 50ms"),
            ("netem", "netem delay 10us"),
        ):
            tried = run_in(
                fd, [tc, "qdisc", "add", "dev", "probe0", "root", "handle", "1:", *opts.split()]
            )
            if tried.returncode == 0:
                found.add(kind)
                run_in(fd, [tc, "qdisc", "del", "dev", "probe0", "root"])
        return Support(None, qdiscs=frozenset(found))
    finally:
        os.close(fd)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else "no message"


def check(cfg, *, submitting: bool = False, host=None, support: Support | None = None) -> None:
    """Every refusal of a link run, before any rank starts (one line, exit 2). support: injected by
    tests; default: this machine, probed once."""
    from launchers import already_a_rank

    spec = spec_of(cfg)
    if spec is None:
        return
    what = spec.label
    launcher = setting(cfg, "launcher.name", "local")
    if launcher != "local" or submitting:
        raise LinkError(
            f"{what} builds its network on this machine, which a Slurm job's nodes cannot join: on "
            "Slurm "
            "the ranks use the cluster's own network (the test cluster's veths are shaped by "
            "launchers/slurm_cluster/start.sh --link-rate). Drop link=, or use launcher=local."
        )
    if (host is not None and host.ranks_started) or (host is None and already_a_rank()):
        raise LinkError(
            f"{what} starts its own ranks, each in its network namespace, and this process is a "
            "rank "
            "already (torchrun or srun): run `python train.py ...` itself, without torchrun."
        )
    gpus = host.gpus if host is not None else None
    _check_cpu_only(cfg, what, gpus)
    for key in ("gloo", "nccl"):
        if setting(cfg, f"{key}.SOCKET_IFNAME"):
            raise LinkError(
                f"{what} points gloo at the emulated NIC ({NIC}) itself; drop {key}.SOCKET_IFNAME."
            )
    world = int(cfg.world_size)
    if spec.ranks_per_node > world:
        raise LinkError(
            f"link.ranks_per_node={spec.ranks_per_node} but the run has {world} rank(s): all of "
            "them "
            "would share one node and nothing would cross the link. Use "
            f"link.ranks_per_node<={world}."
        )
    if nodes_for(world, spec.ranks_per_node) > 250:
        raise LinkError(
            f"{what}: {nodes_for(world, spec.ranks_per_node)} emulated nodes, more than the 250 "
            "one "
            "private /24 holds; raise link.ranks_per_node"
        )
    _check_timeout(cfg, spec, world)
    support = support if support is not None else probe()
    _refuse_unsupported(support, spec, what)


def _check_cpu_only(cfg, what: str, gpus: int | None) -> None:
    from omegaconf import OmegaConf

    import tasks
    from device.host import gpu_count
    from device.placement import requested_device

    cpu_by_default = getattr(tasks.get(str(cfg.task)), "CPU_BY_DEFAULT", False)
    backend, device = str(cfg.get("backend", "auto")), requested_device(cfg, cpu_by_default)
    task_device = str(OmegaConf.select(cfg, f"{cfg.task}.device", default="auto") or "auto")
    gpus = gpu_count() if gpus is None else gpus
    asked = (
        "backend=nccl"
        if backend == "nccl"
        else "device=cuda"
        if device == "cuda"
        else f"{cfg.task}.device=cuda"
        if task_device == "cuda"
        else f"device=auto on a machine with {gpus} GPU(s)"
        if device == "auto" and gpus > 0
        else None
    )
    if asked:
        raise LinkError(
            f"{what} with {asked}: a link is for CPU ranks on gloo. It is emulated in the Linux "
            "network "
            "stack, which NCCL between GPUs of one host does not use (NVLink, PCIe, shared "
            "memory), so "
            "nothing would be shaped. Add device=cpu backend=gloo (on a GPU machine too), or drop "
            "link=."
        )


def _check_timeout(cfg, spec: Spec, world: int) -> None:
    """A collective slower than timeout_s fails the run after minutes: say so now, with the
    arithmetic."""
    if nodes_for(world, spec.ranks_per_node) < 2:
        return
    import tasks

    largest = getattr(tasks.get(str(cfg.get("task"))), "largest_collective", None)
    try:
        nbytes, what = largest(cfg) if largest is not None else (None, None)
    except Exception:  # noqa: BLE001 - the task's own check reports a bad model or size
        return
    if not nbytes:
        return
    seconds = (
        nbytes * bus_factor("all_reduce", world) * 8 / arith.payload_rate(spec.rate_bit_s, spec.mtu)
    )
    if seconds > float(cfg.timeout_s):
        raise LinkError(
            f"{spec.label}: all-reducing {what} ({nbytes / 1e6:.0f} MB) takes about {seconds:.0f} "
            "s at "
            f"{arith.human(spec.rate_bit_s)}, over timeout_s={cfg.timeout_s:g}: the collective "
            "would time "
            f"out. Raise the rate, or timeout_s={math.ceil(seconds * 3)}."
        )


# Support.problem -> the refusal, with {what} (the link asked for) and {detail} (what failed)
UNSUPPORTED = {
    "root": "{what} needs root: it creates network namespaces, veth pairs and a bridge and shapes "
    "them with tc "
    "(CAP_SYS_ADMIN, CAP_NET_ADMIN). Run it as root (sudo), or drop link= to run over loopback.",
    "tools": "{what} needs iproute2's ip and tc, and {detail} is not installed: install iproute2 "
    "(apt-get install "
    "iproute2), or drop link=.",
    "netns": "{what}: this machine does not let even root create a network namespace ({detail}); a "
    "container needs "
    "CAP_SYS_ADMIN and CAP_NET_ADMIN. Run it on a machine or VM of your own, or drop link=.",
    "veth": "{what}: the kernel cannot make a veth pair or a bridge ({detail}): modprobe veth "
    "bridge, or drop link=.",
}


def _refuse_unsupported(support: Support, spec: Spec, what: str) -> None:
    if support.problem is not None:
        raise LinkError(UNSUPPORTED[support.problem].format(what=what, detail=support.detail))
    if spec.qdisc not in support.qdiscs:
        other = next((q for q in ("htb", "tbf") if q != spec.qdisc and q in support.qdiscs), None)
        raise LinkError(
            f"{what}: the {spec.qdisc} qdisc is not in this kernel (tc: unknown qdisc kind): "
            "modprobe "
            f"sch_{spec.qdisc}" + (f", or use link.qdisc={other}." if other else ", or drop link=.")
        )
    if spec.latency_us is not None and "netem" not in support.qdiscs:
        raise LinkError(
            f"link.latency_us={spec.latency_us:g} needs the netem qdisc, which this kernel lacks, "
            "so no "
            "qdisc can add latency here. Drop link.latency_us: the link then emulates the rate "
            "only (the "
            "record has the path's own measured round-trip time)."
        )


# -------------------------------------------------------------------------------------- the network
def _start_ticks(pid: int | str) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Network:
    """The run's emulated network: build() it in the process that starts the ranks, hand rank_info()
    to every rank, close() it after the ranks ended (a `with` block does both). Closing only drops
    this process's hold; the kernel frees everything once the ranks are gone too."""

    def __init__(self, spec: Spec, world_size: int):
        self.spec, self.world_size = spec, world_size
        self.nodes = nodes_for(world_size, spec.ranks_per_node)
        self.run_id = uuid.uuid4().hex[:12]
        self.switch: int | None = None
        self.node_fds: list[int] = []
        self.check: dict | None = None
        self.check_note: str | None = None
        self.build_s: float | None = None
        self._marked: str | None = None

    # -- life cycle
    def __enter__(self) -> "Network":
        try:
            self.build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def build(self) -> None:
        t0 = time.perf_counter()
        reaped = reap_stale()
        if reaped:
            log.warning(
                f"warning: killed {len(reaped)} process(es) left behind by an earlier link run "
                "whose launcher "
                f"died (pids {', '.join(map(str, reaped))})"
            )
        ip, tc = tool("ip"), tool("tc")
        try:
            self.switch = new_netns()
            self.node_fds = [new_netns() for _ in range(self.nodes)]
        except OSError as e:
            raise LinkError(
                f"{self.spec.label}: cannot create a network namespace ({e.strerror or e})"
            ) from None
        me = os.getpid()
        switch_ip = [f"link add {SWITCH} type bridge", f"link set {SWITCH} up"]
        gso_size, gso_segs = arith.gso_cap(self.spec.burst_bytes, self.spec.mtu)
        end = f"mtu {self.spec.mtu} gso_max_size {gso_size} gso_max_segs {gso_segs}"
        for i, fd in enumerate(self.node_fds):
            switch_ip += [
                f"link add port{i} {end} type veth peer name {NIC} {end} netns /proc/self/fd/{fd}",
                f"link set port{i} master {SWITCH} up",
            ]
        self._batch(
            self.switch, [ip, "-batch", "-"], switch_ip, "the switch", pass_fds=tuple(self.node_fds)
        )
        for i, fd in enumerate(self.node_fds):
            self._batch(
                fd,
                [ip, "-batch", "-"],
                ["link set lo up", f"addr add {address(i)}/24 dev {NIC}", f"link set {NIC} up"],
                f"node {i}",
            )
            self._batch(
                fd, [tc, "-batch", "-"], self.shaper(NIC, node_side=True), f"node {i}'s NIC"
            )
        self._batch(
            self.switch,
            [tc, "-batch", "-"],
            [line for i in range(self.nodes) for line in self.shaper(f"port{i}", node_side=False)],
            "the switch ports",
        )
        self.build_s = time.perf_counter() - t0
        if self.nodes < 2:
            self.check_note = "one node: no traffic crosses the link"
        elif self.spec.check_s <= 0:
            self.check_note = "link.check_s=0: no check transfer"
        else:
            try:
                self.check = check_transfer(
                    self.node_fds[0], self.node_fds[1], address(1), self.spec
                )
            except OSError as e:
                raise LinkError(
                    f"{self.spec.label}: the check transfer from node 0 to node 1 failed ({e}); "
                    "the "
                    "emulated network does not carry traffic"
                ) from None
        self._marked = f"{self.run_id}:{me}:{_start_ticks(me)}"
        os.environ[MARK_ENV] = self._marked  # every rank inherits it: how reap_stale finds orphans

    def close(self) -> None:
        for fd in [*self.node_fds, *([self.switch] if self.switch is not None else [])]:
            try:
                os.close(fd)
            except OSError:
                pass
        self.node_fds, self.switch = [], None
        if self._marked is not None and os.environ.get(MARK_ENV) == self._marked:
            del os.environ[MARK_ENV]
        self._marked = None

    def _batch(
        self, fd: int, argv: list[str], lines: list[str], where: str, pass_fds: tuple = ()
    ) -> None:
        done = run_in(fd, argv, "\n".join(lines) + "\n", pass_fds)
        if done.returncode != 0:
            raise LinkError(
                f"{self.spec.label}: setting up {where} failed ({Path(argv[0]).name}: "
                f"{_first_line(done.stderr or done.stdout)})"
            )

    def shaper(self, dev: str, node_side: bool) -> list[str]:
        """tc lines that shape dev's egress to the rate (netem's delay on the node side only:
        one-way latency)."""
        s = self.spec
        rate, burst = arith.tc_rate(s.rate_bit_s), s.burst_bytes
        if s.qdisc == "htb":
            r2q = max(1, round(s.rate_bit_s / 8 / s.quantum))
            lines = [
                f"qdisc add dev {dev} root handle 1: htb default 1 r2q {r2q}",
                f"class add dev {dev} parent 1: classid 1:1 htb rate {rate} ceil {rate} burst "
                f"{burst} "
                f"cburst {burst} quantum {s.quantum}",
            ]
        else:
            lines = [
                f"qdisc add dev {dev} root handle 1: tbf rate {rate} burst {burst} latency 50ms"
            ]
        if node_side and s.latency_us is not None:
            lines.append(
                f"qdisc add dev {dev} parent 1:1 handle 10: netem delay {s.latency_us:g}us limit "
                "100000"
            )
        return lines

    # -- what the ranks and the record get
    def facts(self) -> dict:
        """The record's env.link: explicit, for readers and the what-if model (rates in bit/s, sizes
        in bytes)."""
        s = self.spec
        netem = "netem" in probe().qdiscs
        payload = arith.payload_rate(s.rate_bit_s, s.mtu)
        facts = {
            "emulated": True,
            "source": "link=",
            "preset": s.name,
            "rate_bit_s": s.rate_bit_s,
            "qdisc": s.qdisc,
            "burst_bytes": s.burst_bytes,
            "htb_quantum_bytes": s.quantum if s.qdisc == "htb" else None,
            "shaped": f"egress of every node's NIC ({NIC}) and of its switch port: each direction "
            "of each node's "
            "link, at the rate",
            "latency_us": s.latency_us,
            "latency_note": (
                f"netem delay {s.latency_us:g} us on each node's egress (one way)"
                if s.latency_us is not None
                else "none added"
                + (
                    ""
                    if netem
                    else " (this kernel has no netem qdisc): "
                    "rate only; check.rtt_us is the path's own"
                )
            ),
            "mtu": s.mtu,
            "payload_fraction": arith.payload_fraction(s.mtu),
            "payload_rate_bit_s": payload,
            "nodes": self.nodes,
            "ranks_per_node": s.ranks_per_node,
            "interface": NIC,
            "addresses": [address(i) for i in range(self.nodes)],
            "rendezvous": f"{self.rendezvous_host}:{RENDEZVOUS_PORT}",
            "check": self.check,
            "check_note": self.check_note,
            "build_s": self.build_s,
            "how": "network namespaces (one per node, one for the switch), veth pairs into a "
            "bridge, tc on every "
            "egress (launchers/link.py)",
        }
        if self.check and self.check["rate_bit_s"] < 0.9 * payload:
            facts["warning"] = (
                f"the check transfer reached {arith.human(self.check['rate_bit_s'])}, "
                f"{self.check['of_payload_rate']:.0%} of what the link allows: this host (its "
                "CPUs, "
                "busy or too few for the rate) is the limit, not the emulated link"
            )
        return facts

    @property
    def rendezvous_host(self) -> str:
        """The one address the ranks rendezvous at: node 0's NIC, where rank 0 serves the store."""
        return address(0)

    def rank_info(self) -> dict:
        """What every rank needs (plain data: it travels in the job dict): the facts for the record,
        and how to join."""
        me = os.getpid()
        return {
            "emulated": True,
            "facts": self.facts(),
            "join": {
                "owner_pid": me,
                "ranks_per_node": self.spec.ranks_per_node,
                "node_fds": list(self.node_fds),
                "node_inodes": [os.fstat(fd).st_ino for fd in self.node_fds],
                "master_addr": self.rendezvous_host,
                "master_port": RENDEZVOUS_PORT,
                "ifname": NIC,
                "hosts": "".join(
                    f"{a}{address(i)} {node_name(i)}\n"
                    for i in range(self.nodes)
                    for a in ("", "::ffff:")
                ),
            },
        }


LOOPBACK = {
    "emulated": False,
    "source": "loopback",
    "rate_bit_s": None,
    "qdisc": None,
    "latency_us": None,
    "interface": "lo",
    "note": "no link emulated: ranks on one host talk over loopback",
}


def check_transfer(sender: int, receiver: int, receiver_addr: str, spec: Spec) -> dict:
    """One TCP stream node 0 -> node 1 for spec.check_s seconds, after RTT_ROUNDS 1-byte round
    trips: the receiver's goodput over the last 80% of the transfer (past TCP's start), and the
    median round-trip time."""
    server = socket_in(receiver)
    client = socket_in(sender)
    limit = 10 + 4 * spec.check_s
    try:
        server.settimeout(limit)
        client.settimeout(limit)
        server.bind((receiver_addr, CHECK_PORT))
        server.listen(1)
        marks: list[tuple[float, int]] = []
        failure: list[BaseException] = []

        def receive():
            try:
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(limit)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    for _ in range(RTT_ROUNDS):
                        conn.sendall(conn.recv(1))
                    total = 0
                    while True:
                        chunk = conn.recv(1 << 20)
                        if not chunk:
                            break
                        total += len(chunk)
                        marks.append((time.perf_counter(), total))
            except BaseException as e:  # noqa: BLE001 - reported by the sender's side
                failure.append(e)

        thread = threading.Thread(target=receive, name="link-check", daemon=True)
        thread.start()
        client.connect((receiver_addr, CHECK_PORT))
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(RTT_ROUNDS):
            t = time.perf_counter()
            client.sendall(b"x")
            if not client.recv(1):
                raise OSError("the receiver closed the check connection")
            rtts.append(time.perf_counter() - t)
        block = b"\0" * (1 << 20)
        end = time.perf_counter() + spec.check_s
        while time.perf_counter() < end:
            client.sendall(block)
        client.shutdown(socket.SHUT_WR)
        thread.join(limit)
        if failure:
            raise OSError(str(failure[0]))
        if len(marks) < 3:
            raise OSError("the receiver saw almost nothing")
        t_first, t_last = marks[0][0], marks[-1][0]
        t0, n0 = next(m for m in marks if m[0] >= t_first + 0.2 * (t_last - t_first))
        rate = (marks[-1][1] - n0) * 8 / max(t_last - t0, 1e-9)
        payload = arith.payload_rate(spec.rate_bit_s, spec.mtu)
        return {
            "rate_bit_s": rate,
            "of_rate": rate / spec.rate_bit_s,
            "of_payload_rate": rate / payload,
            "bytes": marks[-1][1],
            "seconds": t_last - t_first,
            "rtt_us": statistics.median(rtts) * 1e6,
            "rtt_min_us": min(rtts) * 1e6,
            "rtt_rounds": RTT_ROUNDS,
            "method": f"one TCP stream node 0 -> node 1 for {spec.check_s:g} s before the ranks "
            "start; rate = "
            "payload bytes the receiver got over the last 80% of the transfer / their time; rtt = "
            "median "
            f"of {RTT_ROUNDS} 1-byte round trips (TCP_NODELAY)",
        }
    finally:
        client.close()
        server.close()


# ------------------------------------------------------------------------------------ inside a rank
def join(info: dict) -> None:
    """First thing in a rank of a link run: die with the launcher, enter this rank's node, and point
    gloo and the rendezvous at the emulated network. Only this thread moves; every thread and
    process the rank starts later (gloo's, the store's, data loader workers) inherits the
    namespace."""
    j = info["join"]
    # torch's spawn wrapper asked for SIGINT, which a rank turns into an orderly stop; with the
    # launcher gone there is nobody to stop for, and a rank blocked in a collective would wait out
    # its timeout holding the namespace
    _syscall(_libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != j["owner_pid"]:
        os._exit(1)  # the launcher died before we asked to die with it: nothing to run for
    node = int(os.environ["RANK"]) // int(j["ranks_per_node"])
    fd = os.open(f"/proc/{j['owner_pid']}/fd/{j['node_fds'][node]}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_ino != j["node_inodes"][node]:
            raise RuntimeError(
                f"the launcher's descriptor {j['node_fds'][node]} is not node {node}'s namespace"
            )
        _setns(fd)
    finally:
        os.close(fd)
    _name_the_nodes(j["hosts"])
    os.environ.update(
        {
            "MASTER_ADDR": j["master_addr"],
            "MASTER_PORT": str(j["master_port"]),
            "GLOO_SOCKET_IFNAME": j["ifname"],
            "TORCHELASTIC_USE_AGENT_STORE": "False",
        }
    )  # rank 0 serves the store on node 0's NIC


def _name_the_nodes(lines: str) -> None:
    """Give the nodes' addresses names (node0.link ...) in this rank's own view of /etc/hosts: the
    rendezvous store looks up every peer's name (as an IPv4-mapped IPv6 address), and with no DNS
    reachable from the namespace each lookup printed a c10d warning. A mount namespace of this
    rank's own (private propagation, so nothing reaches the host's), /etc/hosts plus the nodes
    bind-mounted over it from a file that is unlinked at once: nothing stays on disk, the kernel
    drops the mount with the rank. Best effort: without it the run is the same, with the
    warnings."""
    try:
        _syscall(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _syscall(
            _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /"
        )
    except OSError:
        return
    fd, path = tempfile.mkstemp(prefix="ddp-comm-hosts-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(Path("/etc/hosts").read_text(errors="replace").rstrip("\n") + "\n" + lines)
        _syscall(
            _libc.mount(path.encode(), b"/etc/hosts", None, MS_BIND, None),
            "mount --bind /etc/hosts",
        )
    except OSError:
        pass
    finally:
        os.unlink(path)


def observe() -> dict:
    """A rank that the local launcher did not start (torchrun, Slurm): the link it talks over, read
    from the interface that leads to MASTER_ADDR (tc's qdisc, sysfs speed). A rate-limiting qdisc
    there (such as launchers/slurm_cluster/start.sh --link-rate sets) counts as emulated; the run
    did not build it, so there is no check transfer."""
    ip, tc = tool("ip"), tool("tc")
    try:
        dev = os.environ.get("GLOO_SOCKET_IFNAME")
        if not dev and ip:
            dev = _interface_to(
                ip, socket.gethostbyname(os.environ.get("MASTER_ADDR") or "127.0.0.1")
            )
        if not dev:
            return {
                "emulated": None,
                "source": "interface",
                "note": "unknown: no interface found for MASTER_ADDR",
            }
        facts = {
            "emulated": False,
            "source": "interface",
            "interface": dev,
            "rate_bit_s": None,
            "qdisc": None,
            "latency_us": None,
            "check": None,
            "check_note": "not built by this run: no check transfer",
        }
        speed = Path(f"/sys/class/net/{dev}/speed")
        try:
            mbit = int(speed.read_text().strip())
            facts["speed_bit_s"] = mbit * 1e6 if mbit > 0 else None
        except (OSError, ValueError):
            facts["speed_bit_s"] = None
        if tc and dev != "lo":
            facts.update(
                _shaping(
                    *(
                        subprocess.run(
                            [tc, what, "show", "dev", dev],
                            capture_output=True,
                            text=True,
                            timeout=10,
                        ).stdout
                        for what in ("qdisc", "class")
                    )
                )
            )
        return facts
    except Exception as e:  # noqa: BLE001 - the record says it could not tell; the run goes on
        return {
            "emulated": None,
            "source": "interface",
            "note": f"unknown: {type(e).__name__}: {e}",
        }


def _interface_to(ip: str, addr: str) -> str | None:
    """The interface traffic to addr leaves by; for one of this host's own addresses (rank 0 on the
    master node, whose route is `local ... dev lo`), the interface that holds it, which is what the
    other nodes reach."""
    route = subprocess.run(
        [ip, "-o", "route", "get", addr], capture_output=True, text=True, timeout=10
    ).stdout
    m = re.search(r"\bdev (\S+)", route)
    if route.startswith("local") and not addr.startswith("127."):
        held = subprocess.run(
            [ip, "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=10
        ).stdout
        own = re.search(rf"^\d+:\s+(\S+)\s+inet {re.escape(addr)}/", held, re.MULTILINE)
        return own.group(1) if own else None
    return m.group(1) if m else None


def _size(text: str) -> int:
    """tc's printed sizes: 125000b, 1250Kb, 2Mb (powers of 1024)."""
    m = re.match(r"(\d+(?:\.\d+)?)([KMG]?)b$", text)
    return (
        int(float(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)])
        if m
        else 0
    )


def _shaping(qdiscs: str, classes: str) -> dict:
    """The rate-limiting qdisc `tc qdisc show` / `tc class show` print for one interface, as record
    fields."""
    kinds = re.findall(r"^qdisc (\S+)", qdiscs, re.MULTILINE)
    shaper = next((k for k in kinds if k in ("htb", "tbf")), None)
    found: dict = {}
    line = None
    if shaper == "htb":
        line = re.search(r"^class htb \S+ .*$", classes, re.MULTILINE)
    elif shaper == "tbf":
        line = re.search(r"^qdisc tbf .*$", qdiscs, re.MULTILINE)
    rate = line and re.search(r"\brate (\S+)", line.group(0))
    if rate:
        found = {
            "emulated": True,
            "qdisc": shaper,
            "rate_bit_s": arith.parse_rate(rate.group(1)),
            "note": "shaped outside this run",
        }
        burst = re.search(r"\bburst (\S+)", line.group(0))
        found["burst_bytes"] = _size(burst.group(1)) if burst else None
        found["payload_rate_bit_s"] = arith.payload_rate(found["rate_bit_s"])
    delay = re.search(r"^qdisc netem .*?\bdelay (\S+)", qdiscs, re.MULTILINE)
    if delay:
        found["latency_note"] = f"netem delay {delay.group(1)} on this interface"
    return found


# ---------------------------------------------------------------------------------------- leftovers
def _marker(pid: str) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    key = MARK_ENV.encode() + b"="
    at = env.find(key)
    if at < 0 or (at > 0 and env[at - 1] != 0):
        return None
    return env[at + len(key) :].split(b"\0", 1)[0].decode(errors="replace")


def reap_stale() -> list[int]:
    """Kill processes left by a link run whose launcher is gone (they hold its namespaces). Such a
    process carries DDP_COMM_LINK_RUN=<run>:<launcher pid>:<launcher start ticks>; its launcher is
    gone when no process with that pid and start time exists. Runs whose launcher lives are left
    alone (another run at the same time)."""
    killed = []
    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == me:
            continue
        mark = _marker(proc.name)
        if not mark or mark.count(":") != 2:
            continue
        _, owner, start = mark.split(":")
        if owner.isdigit() and _start_ticks(owner) == start:
            continue
        try:
            os.kill(int(proc.name), signal.SIGKILL)
            killed.append(int(proc.name))
        except OSError:
            pass
    return killed
