"""Emulated links (`link=`): the rate arithmetic, the config group, every refusal (one line, before
any rank starts), the record's env.link and the labels the summary, the sweep table, W&B and the
diagnosis give a run behind one; and, as root (`root` marker: skipped with the reason without root
or network namespaces, as the slurm tests are), real runs behind a shaped link: collectives' busbw
near the rate, every task, and nothing left behind whatever ends the run (its end, a failing rank,
SIGTERM, SIGKILL of the launcher), with the next run starting clean."""

from __future__ import annotations

from base.record import Record
from base.record_types import CollectivesResult, Link

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from comm import link as arith
from device.host import Host
from base.errors import ConfigError
from launchers import link
from launchers.link import Support
from tests.conftest import ROOT, TINY, compose, run_inprocess, run_train

GIB = 2**30
CPU_HOST = Host(gpus=0, cpus=2, free_bytes=16 * GIB, gpu_free_bytes=None)
OK = Support(None, qdiscs=frozenset({"htb", "tbf"}))
TINY_COLLECTIVES = [
    "task=collectives",
    "logger=none",
    "collectives.ops=[all_reduce]",
    "collectives.min_bytes=64K",
    "collectives.max_bytes=64K",
    "collectives.iters=2",
    "collectives.warmup_iters=1",
    "collectives.inplace=true",
]


def link_problem() -> str | None:
    """Why the root tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root: an emulated link creates network namespaces and shapes them with tc"
    support = link.probe()
    if support.problem is not None:
        return (
            f"this machine cannot build an emulated link ({support.problem}: "
            f"{support.detail or 'see probe()'})"
        )
    if "htb" not in support.qdiscs:
        return "the htb qdisc is not in this kernel"
    return None


PROBLEM = link_problem()
needs_link = pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM))


# --------------------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize(
    "text, bit_s",
    [
        ("1gbit", 1e9),
        ("2.5gbit", 2.5e9),
        ("100mbit", 1e8),
        ("1Gbit/s", 1e9),
        ("25Gbit", 25e9),
        ("1e9", 1e9),
        (10**9, 1e9),
        (2.5e9, 2.5e9),
    ],
)
def test_rates_are_read_as_tc_writes_them(text, bit_s):
    assert arith.parse_rate(text) == bit_s


@pytest.mark.parametrize(
    "text, says",
    [
        ("1gbps", "bytes per second"),
        ("1GB", "not a rate"),
        ("1g", "not a rate"),
        ("fast", "not a rate"),
        ("0", "positive"),
        (True, "not a rate"),
    ],
)
def test_ambiguous_or_wrong_rates_are_refused(text, says):
    with pytest.raises(arith.RateError, match=says):
        arith.parse_rate(text)


def test_what_a_shaped_rate_allows_and_the_token_bucket():
    assert arith.payload_fraction() == pytest.approx(
        1448 / 1514
    )  # TCP/IPv4 + timestamps, Ethernet header
    assert arith.payload_rate(1e9) == pytest.approx(956.4e6, rel=1e-4)
    assert arith.default_burst(1e9) == 125_000  # 1 ms at 1 Gbit/s
    assert arith.default_burst(1e8) == 12_500  # 1 ms at 100 Mbit/s: no 64 KiB floor any more
    assert arith.default_burst(2e7) == 3 * 1514  # at least 3 frames
    # the veths' segments fit the bucket: one frame below it, the kernel's defaults above 64 KiB
    assert arith.gso_cap(125_000) == (65536, 65535)
    assert arith.gso_cap(12_500) == (12_500 - 1514, (12_500 - 1514) // 1514)
    assert arith.gso_cap(3 * 1514) == (2 * 1514, 2) and arith.gso_cap(1514) == (1514, 1)
    assert (
        arith.htb_quantum(1e9) == 125_000
        and arith.htb_quantum(1e11) == 200_000
        and arith.htb_quantum(1e6) == 1514
    )
    assert arith.tc_rate(2.5e9) == "2500000000bit" and arith.human(2.5e9) == "2.5 Gbit/s"


# --------------------------------------------------------------------------------- the config group
@pytest.mark.parametrize("choice, rate", [("1gbe", 1e9), ("10gbe", 1e10), ("25gbe", 2.5e10)])
def test_presets_compose_to_their_rate(choice, rate):
    spec = link.spec_of(compose([f"link={choice}"]))
    assert (
        spec.rate_bit_s == rate
        and spec.qdisc == "htb"
        and spec.ranks_per_node == 1
        and spec.latency_us is None
    )
    assert spec.label == f"link={choice} ({arith.human(rate).replace(' ', '')})"


def test_no_link_by_default_and_any_rate_on_the_command_line():
    assert link.spec_of(compose([])) is None
    spec = link.spec_of(compose(["link.rate=2.5gbit", "link.qdisc=tbf", "link.ranks_per_node=2"]))
    assert (spec.rate_bit_s, spec.qdisc, spec.ranks_per_node, spec.label) == (
        2.5e9,
        "tbf",
        2,
        "link.rate=2.5Gbit/s",
    )
    assert link.spec_of(compose(["link=1gbe", "link.burst_bytes=200000"])).burst_bytes == 200000


def test_help_lists_the_link_group(monkeypatch, capsys):
    import train

    monkeypatch.setattr(sys, "argv", ["train.py", "--help"])
    assert train.main() == 0
    out = capsys.readouterr().out
    assert all(choice in out for choice in ("link=", "1gbe", "10gbe", "25gbe", "link.rate="))


# ----------------------------------------------------------------------------------------- refusals
def refused(overrides: list[str], support: Support = OK, host: Host = CPU_HOST) -> str:
    with pytest.raises(ConfigError) as e:
        link.check(compose(overrides), host=host, support=support)
    message = str(e.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "support, says",
    [
        (Support("root"), "link=1gbe (1Gbit/s) needs root"),
        (Support("tools", "tc"), "needs iproute2's ip and tc, and tc is not installed"),
        (
            Support("netns", "Operation not permitted"),
            "does not let even root create a network namespace",
        ),
        (Support("veth", "Unknown device type."), "cannot make a veth pair or a bridge"),
        (
            Support(None, qdiscs=frozenset({"tbf"})),
            "the htb qdisc is not in this kernel (tc: unknown qdisc kind): "
            "modprobe sch_htb, or use link.qdisc=tbf",
        ),
    ],
)
def test_refused_where_the_machine_cannot_build_a_link(support, says):
    assert says in refused(["link=1gbe"], support)


def test_latency_only_where_netem_exists():
    assert "link.latency_us=50 needs the netem qdisc" in refused(
        ["link=1gbe", "link.latency_us=50"]
    )
    link.check(
        compose(["link=1gbe", "link.latency_us=50"]),
        host=CPU_HOST,
        support=Support(None, qdiscs=frozenset({"htb", "netem"})),
    )
    assert "without a rate" in refused(["link.latency_us=50"])


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["backend=nccl"], "with backend=nccl: a link is for CPU ranks on gloo"),
        (["device=cuda"], "with device=cuda: a link is for CPU ranks on gloo"),
        (["task=collectives", "collectives.device=cuda"], "with collectives.device=cuda"),
    ],
)
def test_gpu_and_nccl_runs_are_refused_with_the_reason(overrides, says):
    message = refused(["link=1gbe", *overrides])
    assert says in message and "NCCL between GPUs of one host does not use" in message
    assert "device=cpu backend=gloo" in message


def test_device_auto_on_a_gpu_machine_is_refused_and_cpu_ranks_are_not():
    gpu_host = Host(gpus=2, cpus=16, free_bytes=64 * GIB, gpu_free_bytes=70 * GIB)
    assert "device=auto on a machine with 2 GPU(s)" in refused(["link=1gbe"], host=gpu_host)
    link.check(compose(["link=1gbe", "device=cpu", "backend=gloo"]), host=gpu_host, support=OK)


@pytest.mark.parametrize(
    "overrides, host, says",
    [
        (["launcher=slurm"], CPU_HOST, "start.sh --link-rate"),
        (
            [],
            Host(gpus=0, cpus=2, free_bytes=16 * GIB, gpu_free_bytes=None, ranks_started=True),
            "without torchrun",
        ),
        (["gloo.SOCKET_IFNAME=eth0"], CPU_HOST, "drop gloo.SOCKET_IFNAME"),
        (["link.ranks_per_node=3", "world_size=2"], CPU_HOST, "link.ranks_per_node<=2"),
        (["link.rate=1gbps"], CPU_HOST, "tc reads 'bps' as bytes per second"),
        (["link.rate=100kbit"], CPU_HOST, "outside 1 Mbit/s"),
        (["link.burst_bytes=1000"], CPU_HOST, "smaller than one frame"),
        (
            ["link.rate=10mbit", "model=vgg11"],
            CPU_HOST,
            "link=1gbe (10Mbit/s): all-reducing one step's fp32 gradients "
            "(531 MB) takes about 445 s at 10 Mbit/s, over timeout_s=120",
        ),
    ],
)
def test_refused_combinations(overrides, host, says):
    assert says in refused(["link=1gbe", *overrides], host=host)


def test_no_link_is_accepted_without_root():
    link.check(compose([]), host=CPU_HOST, support=Support("root"))  # link=none never asks for root


def test_the_refusal_reaches_the_user_as_one_line_and_exit_2(tmp_path, monkeypatch):
    """Through the real entry point (train.main, in this process), with the machine's answer
    injected the way check() reads it: not root."""
    import launchers.link

    from tests.conftest import train_main

    monkeypatch.setattr(launchers.link, "probe", lambda: launchers.link.Support("root"))
    proc = train_main([*TINY, "link=1gbe"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "link=1gbe (1Gbit/s) needs root" in errors[0]
    assert "rank 0" not in proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------- labels
def facts(rate: float = 1e9, check: float | None = 0.94e9, **more) -> dict:
    out = {
        "emulated": True,
        "source": "link=",
        "preset": "1gbe",
        "rate_bit_s": rate,
        "qdisc": "htb",
        "burst_bytes": 125000,
        "latency_us": None,
        "payload_rate_bit_s": arith.payload_rate(rate),
        "nodes": 2,
        "ranks_per_node": 1,
        "check": {
            "rate_bit_s": check,
            "of_payload_rate": check / arith.payload_rate(rate),
            "rtt_us": 25.0,
        }
        if check
        else None,
    }
    return {**out, **more}


def test_describe_labels_an_emulated_link_and_says_what_it_is_not():
    line = arith.describe(facts())
    assert (
        line.startswith("link: EMULATED 1 Gbit/s (htb, burst 125000 B)")
        and "no added latency" in line
    )
    assert "check transfer 940 Mbit/s (98% of the 956.4 Mbit/s TCP payload rate)" in line
    assert (
        arith.describe(link.LOOPBACK)
        == "link: none emulated (ranks on one host talk over loopback)"
    )
    assert (
        arith.short_label(facts()) == "emulated link 1 Gbit/s"
        and arith.short_label(link.LOOPBACK) is None
    )
    assert "WARNING: slow" in arith.describe(facts(warning="slow"))


def test_sweep_table_and_wandb_label_runs_behind_an_emulated_link(tmp_path):
    from tables.table import build_table
    from tables.entries import Entry
    from results.wandb_log import run_tags
    from tests.records import train_record

    behind, plain = (
        train_record(overrides=[f"link={name}"], steps_per_s=s)
        for name, s in (("1gbe", 1), ("none", 2))
    )
    behind["env"]["link"], plain["env"]["link"] = facts(), dict(link.LOOPBACK)
    table = build_table([Entry.from_record(r) for r in (behind, plain)])
    note = next(n for n in table.notes if n.startswith("EMULATED LINK"))
    assert (
        "1 Gbit/s (htb), check transfers 940 Mbit/s..940 Mbit/s" in note
        and "1 run(s) without one" in note
    )
    assert "EMULATED LINK" in table.markdown()
    assert {"emulated-link", "link:1 Gbit/s"} <= set(run_tags(None, Record.from_dict(behind), {}))
    assert "emulated-link" not in run_tags(None, Record.from_dict(plain), {})


def test_collectives_summary_sets_busbw_beside_the_link():
    from tasks.collectives import vs_link

    r = {
        "ops": ["all_reduce"],
        "rows": [
            {"op": "all_reduce", "bytes": b, "busbw_GBps": g}
            for b, g in ((1 << 20, 0.08), (1 << 26, 0.117))
        ],
    }
    r = CollectivesResult.from_dict(r)
    [line] = vs_link(r, Link.from_dict(facts()))
    assert "all_reduce busbw at 67108864 B 0.936 Gbit/s = 98% of the 956.4 Mbit/s" in line
    assert vs_link(r, Link.from_dict(dict(link.LOOPBACK))) == []


def test_interface_shaping_is_read_back_for_runs_the_tool_did_not_shape():
    htb = link._shaping(
        "qdisc htb 1: root refcnt 2 r2q 8 default 0x1\n",
        "class htb 1:1 root prio 0 rate 1Gbit ceil 1Gbit burst 125000b cburst 125000b\n",
    )
    assert (
        htb["emulated"]
        and htb["qdisc"] == "htb"
        and htb["rate_bit_s"] == 1e9
        and htb["burst_bytes"] == 125000
    )
    tbf = link._shaping("qdisc tbf 8001: root refcnt 2 rate 2500Mbit burst 1250Kb lat 50ms\n", "")
    assert tbf["rate_bit_s"] == 2.5e9 and tbf["burst_bytes"] == 1250 * 1024
    assert link._shaping("qdisc noqueue 0: root refcnt 2\n", "") == {}


def test_diagnosis_names_the_link_not_cpu_contention():
    """A 2-core run where both ranks keep the cores busy and communication is most of the step:
    behind an emulated link whose rate explains the sync's time, the first finding is the link (send
    fewer bytes), ranked above the CPU contention; without the link in the record the same figures
    cannot say which it is."""
    from diagnosis import diagnose
    from tests.test_diagnosis import _contended

    rec = _contended()
    r = rec["result"]
    step = r["step_time_s"]["median"]
    nbytes = 60_000_000
    r["comm"].update(
        bytes_per_step=nbytes,
        buckets={"count": 3, "sizes_bytes": [nbytes // 3] * 3},
        time_s=0.7 * step,
        overlap_s=0.1 * step,
        exposed_s=0.6 * step,  # over 6 probe steps: an
        exposed_ci_lo=0.57 * step,
        exposed_ci_hi=0.63 * step,
        exposed_n=6,
    )  # interval (issue 19.13)
    rate = (
        nbytes * 8 / (0.7 * step) / arith.payload_fraction() / 0.9
    )  # the sync at 90% of the link's payload rate
    before = [f["rule"] for f in diagnose(rec)["findings"] if not f.get("first")]
    assert before[0] != "exposed_comm.slow_link"
    rec["env"]["link"] = facts(rate=rate)
    diag = diagnose(rec)
    named = [f for f in diag["findings"] if not f.get("first")]
    assert named[0]["rule"] == "exposed_comm.slow_link", [f["rule"] for f in named]
    assert "90% of the emulated link" in named[0]["title"] and named[0]["command"].endswith(
        "optim=bf16"
    )
    assert diag["comparisons"]["link"]["efficiency"] == pytest.approx(0.9)


# --------------------------------------------------------------------------------- root: real links
def ranks_left(owner: int | None = None) -> list[int]:
    """Live processes of a link run (of the launcher `owner`, or of any) inside one of its
    namespaces. (Processes the launcher started in its own namespace carry the mark too, e.g.
    multiprocessing's resource tracker; they hold nothing of the link, and end with the
    launcher.)"""
    host = os.stat("/proc/self/ns/net").st_ino
    return [pid for pid in marked(owner) if net_inodes(pid) and host not in net_inodes(pid)]


def marked(owner: int | None = None) -> list[int]:
    """Live processes carrying a link run's mark (of the launcher `owner`, or of any)."""
    found = []
    for proc in Path("/proc").iterdir():
        mark = link._marker(proc.name) if proc.name.isdigit() else None
        if mark and (owner is None or mark.split(":")[1] == str(owner)):
            state = (
                (Path("/proc") / proc.name / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if (Path("/proc") / proc.name / "stat").exists()
                else "Z"
            )
            if state != "Z":
                found.append(int(proc.name))
    return found


def net_inodes(pid: int | str) -> set[int]:
    """The network namespaces a process is in or holds a descriptor of."""
    out = set()
    for path in [Path(f"/proc/{pid}/ns/net"), *Path(f"/proc/{pid}/fd").glob("*")]:
        try:
            m = re.fullmatch(r"net:\[(\d+)\]", os.readlink(path))
        except OSError:
            continue
        if m:
            out.add(int(m.group(1)))
    return out


def holders(inodes: set[int]) -> list[str]:
    """Every process, thread, descriptor or mount (`ip netns add` bind-mounts one in /run/netns)
    that still refers to one of these namespaces (none: the kernel freed it)."""
    found = [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if any(f"net:[{i}]" in line for i in inodes)
    ]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        paths = [*proc.glob("task/*/ns/net"), *proc.glob("fd/*")]
        for path in paths:
            try:
                m = re.fullmatch(r"net:\[(\d+)\]", os.readlink(path))
            except OSError:
                continue
            if m and int(m.group(1)) in inodes:
                found.append(str(path))
    return found


def host_links() -> list[str]:
    return sorted(
        re.findall(
            r"^\d+: ([^:@]+)",
            subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout,
            re.MULTILINE,
        )
    )


def this_process_holds_nothing() -> None:
    own = os.stat("/proc/self/ns/net").st_ino
    assert net_inodes("self") == {own}, net_inodes("self")
    assert {os.stat(p).st_ino for p in Path("/proc/self/task").glob("*/ns/net")} == {own}


def wait_for(what, limit: float = 60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.2)
    return what()


@pytest.mark.root
@needs_link
def test_a_slow_link_has_a_small_bucket_and_segments_that_fit_it():
    """Behind 20 Mbit/s the bucket is 3 frames and both veth ends hand the qdisc at most 2 frames
    at once (a 64 KiB segment would pass a small htb bucket on credit, at the line's speed), and
    the shaping still carries the rate: the check transfer reaches the payload rate."""
    spec = link.spec_of(compose(["link.rate=20mbit", "link.check_s=1"]))
    assert spec.burst_bytes == 3 * 1514
    with link.Network(spec, world_size=2) as net:
        for fd, dev in ((net.node_fds[0], "nic0"), (net.switch, "port1")):
            out = link.run_in(fd, ["ip", "-d", "link", "show", "dev", dev]).stdout
            assert "gso_max_size 3028 gso_max_segs 2" in out, out
        assert 0.9 < net.facts()["check"]["of_payload_rate"] < 1.05, net.facts()["check"]


@pytest.mark.root
@needs_link
def test_network_is_built_checked_and_gone_when_closed():
    before = host_links()
    spec = link.spec_of(compose(["link=1gbe"]))
    with link.Network(spec, world_size=2) as net:
        inodes = {os.fstat(fd).st_ino for fd in [net.switch, *net.node_fds]}
        assert len(inodes) == 3 and host_links() == before  # nothing in the host's namespace
        out = link.run_in(net.node_fds[0], ["tc", "class", "show", "dev", "nic0"]).stdout
        assert "rate 1Gbit" in out and "burst 125000b" in out
        f = net.facts()
        assert (
            f["emulated"]
            and f["rate_bit_s"] == 1e9
            and f["qdisc"] == "htb"
            and f["burst_bytes"] == 125000
        )
        assert (
            f["addresses"] == ["198.18.0.1", "198.18.0.2"] and f["rendezvous"] == "198.18.0.1:29500"
        )
        assert 0.8 < f["check"]["of_payload_rate"] < 1.05, f["check"]  # the shaping holds
        assert (
            f["check"]["rtt_us"] > 0
            and f["latency_us"] is None
            and f["latency_note"].startswith("none added")
        )
        assert os.environ[link.MARK_ENV].split(":")[1] == str(os.getpid())
    assert link.MARK_ENV not in os.environ and not holders(inodes)
    this_process_holds_nothing()


@pytest.mark.root
@needs_link
def test_orphans_of_a_dead_launcher_are_killed_at_the_next_start_and_live_runs_are_left_alone():
    def holder(owner: int, ticks) -> subprocess.Popen:
        return subprocess.Popen(
            ["unshare", "--net", "sleep", "300"],
            env={**os.environ, link.MARK_ENV: f"test:{owner}:{ticks}"},
        )

    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = holder(dead.pid, 1)  # its launcher is gone
    alive = holder(
        os.getpid(), link._start_ticks(os.getpid())
    )  # a run whose launcher lives (this test)
    try:
        assert wait_for(lambda: {orphan.pid, alive.pid} <= set(ranks_left()), 10)
        assert orphan.pid in link.reap_stale()
        assert orphan.wait(timeout=10) == -signal.SIGKILL and alive.poll() is None
    finally:
        for p in (orphan, alive):
            p.kill()
            p.wait()


@pytest.mark.root
@pytest.mark.slow
@needs_link
def test_collectives_busbw_within_10_percent_of_what_the_link_allows(tmp_path):
    """The issue's check that the shaping works: `python train.py task=collectives link=1gbe`, 64
    MiB all-reduces."""
    before = host_links()
    proc = run_train(
        [
            "task=collectives",
            "link=1gbe",
            "logger=none",
            "collectives.ops=[all_reduce]",
            "collectives.min_bytes=64M",
            "collectives.max_bytes=64M",
            "collectives.iters=8",
            "collectives.warmup_iters=1",
            "collectives.inplace=true",
        ],
        tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((proc.out_dir / "run_record.json").read_text())
    env_link = record["env"]["link"]
    assert env_link["emulated"] and env_link["rate_bit_s"] == 1e9 and env_link["qdisc"] == "htb"
    assert env_link["check"]["rate_bit_s"] > 0 and env_link["latency_note"]
    [row] = record["result"]["rows"]
    # busbw from the median of the 8 timed blocks (the table's last column): a busy neighbour's
    # burst moves the mean
    busbw = (
        row["bytes"] / (row["time_median_us"] * 1e-6) * 8
    )  # bit/s; all_reduce at 2 ranks: busbw = algbw
    share = busbw / env_link["payload_rate_bit_s"]
    assert 0.9 <= share <= 1.1, (
        f"busbw {busbw / 1e9:.3f} Gbit/s (mean-based {row['busbw_GBps'] * 8:.3f}) is "
        f"{share:.0%} of the link's payload rate"
    )
    assert record["env"]["vars"]["GLOO_SOCKET_IFNAME"] == "nic0"
    assert record["env"]["vars"]["MASTER_ADDR"] == "198.18.0.1"
    assert (
        "link: EMULATED 1 Gbit/s (htb" in proc.stdout
        and "vs the emulated link: all_reduce busbw" in proc.stdout
    )
    assert "hostname of the client socket cannot be retrieved" not in proc.stderr
    assert host_links() == before and not ranks_left()


@pytest.mark.root
@pytest.mark.slow
@needs_link
def test_every_task_runs_behind_a_link_and_this_process_keeps_nothing(tmp_path, capfd):
    runs = {
        "train": [*TINY, "link=1gbe"],
        "grad_sync": [
            "task=grad_sync",
            "model=vgg11_tiny",
            "logger=none",
            "link=1gbe",
            "grad_sync.iters=2",
            "grad_sync.warmup_iters=1",
        ],
        "pair_groups": [
            "task=pair_groups",
            "logger=none",
            "link.rate=100mbit",
            "pair_groups.iters=32",
        ],
        "collectives": [
            *TINY_COLLECTIVES,
            "link=10gbe",
            "link.ranks_per_node=2",
        ],  # one node of 2 ranks
    }
    for task, overrides in runs.items():
        record, code = run_inprocess(overrides, tmp_path, name=task)
        assert code == 0 and record["status"] == "ok", (task, record and record["error"])
        env_link = record["env"]["link"]
        assert env_link["emulated"] and env_link["source"] == "link=", task
        this_process_holds_nothing()
    assert record["env"]["link"]["nodes"] == 1 and record["env"]["link"]["check"] is None
    assert "one node" in record["env"]["link"]["check_note"]
    assert "link: EMULATED" in capfd.readouterr().out
    assert not ranks_left()


@pytest.mark.root
@pytest.mark.slow
@needs_link
def test_a_failing_rank_ends_the_link_run_and_leaves_nothing(tmp_path):
    record, code = run_inprocess([*TINY, "link=1gbe", "fault.rank=1", "fault.step=1"], tmp_path)
    assert code == 1 and record["status"] == "failed" and "rank 1" in record["error"]
    assert record["env"]["link"]["emulated"]
    this_process_holds_nothing()
    assert wait_for(lambda: not ranks_left(), 30)


def _start_endless(tmp_path: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "train.py",
        "task=collectives",
        "link=1gbe",
        "logger=none",
        "collectives.ops=[all_reduce]",
        "collectives.min_bytes=16M",
        "collectives.max_bytes=16M",
        "collectives.iters=100000",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )


def _ranks_in_their_namespaces(proc: subprocess.Popen) -> set[int]:
    """Once both ranks of the run are in their nodes' namespaces: every namespace the run made (the
    ranks' and the launcher's descriptors)."""
    host = os.stat("/proc/self/ns/net").st_ino

    def joined():
        ranks = ranks_left(proc.pid)
        return ranks if len(ranks) == 2 else None

    ranks = wait_for(joined, 180)
    assert ranks, (
        f"the ranks did not start: {proc.poll()} "
        f"{proc.stdout.read() if proc.poll() is not None else ''}"
    )
    inodes = set().union(*(net_inodes(pid) for pid in ranks)) | (net_inodes(proc.pid) - {host})
    assert len(inodes) == 3, inodes  # node 0, node 1, the switch
    return inodes


@pytest.mark.root
@pytest.mark.slow
@needs_link
def test_sigterm_of_the_launcher_leaves_an_interrupted_record_and_nothing_else(tmp_path):
    before = host_links()
    proc = _start_endless(tmp_path)
    try:
        inodes = _ranks_in_their_namespaces(proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, out[-3000:]
    assert json.loads((tmp_path / "run" / "run_record.json").read_text())["status"] == "interrupted"
    assert wait_for(lambda: not ranks_left(proc.pid) and not holders(inodes), 30), holders(inodes)
    assert host_links() == before


@pytest.mark.root
@pytest.mark.slow
@needs_link
def test_sigkill_of_the_launcher_leaves_no_namespace_and_the_next_run_starts_clean(tmp_path):
    """The launcher gets no chance to clean up: the ranks die with it (PR_SET_PDEATHSIG), the last
    holders of the run's namespaces are gone, and the kernel frees them with their veth pairs,
    bridge and qdiscs."""
    before = host_links()
    proc = _start_endless(tmp_path)
    try:
        inodes = _ranks_in_their_namespaces(proc)
        proc.kill()
        proc.wait(timeout=30)
        assert wait_for(lambda: not ranks_left(proc.pid) and not holders(inodes), 30), (
            ranks_left(proc.pid),
            holders(inodes),
        )
    finally:
        proc.kill()
        for pid in marked(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert host_links() == before
    record, code = run_inprocess([*TINY_COLLECTIVES, "link=1gbe"], tmp_path, name="next")
    assert code == 0 and record["env"]["link"]["check"]["rate_bit_s"] > 0
    this_process_holds_nothing()


@pytest.mark.root
@pytest.mark.slow
@needs_link
def test_a_sweep_over_links_labels_its_table(tmp_path):
    proc = run_train(["link=none,1gbe", *TINY_COLLECTIVES], tmp_path, multirun=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted(proc.out_dir.glob("*/run_record.json"))]
    assert [r["env"]["link"]["emulated"] for r in records] == [False, True]
    assert (
        "EMULATED LINK: rows ran behind 1 Gbit/s (htb)"
        in (proc.out_dir / "sweep_table.md").read_text()
    )


# -------------------------------------------------------------------------------- the Slurm cluster
NODES_SH = ROOT / "launchers" / "slurm_cluster" / "nodes.sh"


def nodes_link(args: str) -> subprocess.CompletedProcess:
    """start.sh's shaping function (nodes.sh: nodes_link) on the cluster's namespaced nodes."""
    script = (
        f'say() {{ echo "$*"; }}; die() {{ echo "$*" >&2; exit 1; }}; . "{NODES_SH}"; '
        f"nodes_link {args}"
    )
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


@pytest.mark.root
@needs_link
def test_start_sh_link_rate_shapes_both_ends_of_every_node_and_unshapes_again():
    """nodes.sh's nodes_net_up + nodes_link in a network and mount namespace of the test's own (its
    /run/netns and /etc/hosts private), so the names cannot meet a real cluster's."""
    script = f'''set -e
mount -t tmpfs tmpfs /run && mkdir -p /run/netns
cp /etc/hosts /run/hosts && mount --bind /run/hosts /etc/hosts
say() {{ echo "$*"; }}; die() {{ echo "$*" >&2; exit 1; }}
. "{NODES_SH}"
nodes_net_up 2
nodes_link 2 2.5gbit
tc class show dev slurm-veth2; tc -n slurm-node2 class show dev eth0
nodes_link 2 ""
echo UNSHAPED; tc qdisc show dev slurm-veth2; tc -n slurm-node2 qdisc show dev eth0
'''
    proc = subprocess.run(
        ["unshare", "--net", "--mount", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    shaped, unshaped = proc.stdout.split("UNSHAPED")
    assert (
        shaped.count("class htb 1:1 root prio 0 rate 2500Mbit ceil 2500Mbit burst 312500b") == 2
    ), shaped
    assert "htb" not in unshaped
    assert (
        "links shaped: every node's eth0 and its bridge port at 2.5gbit (htb, burst 312500 B)"
        in shaped
    )


@pytest.mark.slurm
@pytest.mark.root
@pytest.mark.slow
@needs_link
def test_a_two_node_slurm_job_behind_shaped_links_records_them(tmp_path):
    """The namespaced cluster's links shaped as `start.sh --nodes 2 --link-rate 1gbit` shapes them:
    a 2-node collectives job's record reads the shaping from its rank's interface, and its busbw
    stays under the rate."""
    from tests.slurm_cluster import cluster_problem

    problem = cluster_problem(nodes=2)
    if problem:
        pytest.skip(problem)
    shaped_before = (
        "htb"
        in subprocess.run(
            ["tc", "qdisc", "show", "dev", "slurm-veth1"], capture_output=True, text=True
        ).stdout
    )
    # a cluster started with --link-rate keeps its own shaping; else shape it here
    assert shaped_before or nodes_link("2 1gbit").returncode == 0
    try:
        proc = run_train(
            [
                "launcher=slurm",
                "launcher.nodes=2",
                "launcher.tasks_per_node=1",
                "launcher.cpus_per_task=1",
                "launcher.timeout_min=10",
                *TINY_COLLECTIVES[:2],
                "collectives.ops=[all_reduce]",
                "collectives.min_bytes=16M",
                "collectives.max_bytes=16M",
                "collectives.iters=4",
                "collectives.inplace=true",
            ],
            tmp_path,
            multirun=True,
            timeout=600,
        )
    finally:
        if not shaped_before:
            nodes_link("2 ''")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((proc.out_dir / "0" / "run_record.json").read_text())
    env_link = record["env"]["link"]
    assert (
        env_link["emulated"]
        and env_link["source"] == "interface"
        and env_link["interface"] == "eth0"
    )
    assert env_link["qdisc"] == "htb" and env_link["check"] is None
    assert env_link["rate_bit_s"] == 1e9 or shaped_before
    [row] = record["result"]["rows"]
    assert row["busbw_GBps"] * 8e9 <= 1.02 * env_link["payload_rate_bit_s"]
    assert "EMULATED LINK" in (proc.out_dir / "sweep_table.md").read_text()
