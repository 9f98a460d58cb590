"""tasks/pair_groups.py (issue 36: a module the mutation run covers): the pair_groups figures and
their reading, by hand. A rank's loop runs against stand-ins for torch.distributed, the clocks,
getrusage and /proc/stat whose readings are given, so every figure it gathers is worked out from
them (a clock that moves 0.5 s a reading: 2 timed calls a block are 0.25 s = 250000 us each); the
result's machine share is CPU-seconds over CPUs x the slowest window, the explanation's lines and
the console view are checked line by line."""

from __future__ import annotations

import itertools
import os
from types import SimpleNamespace as NS

import pytest
import torch
from omegaconf import OmegaConf

import tasks.pair_groups as pg
from base.errors import ConfigError
from base.record import Record
from base.record_types import PairGroupsResult, PairRank, Summary
from device.host import Host

HOST = Host(gpus=0, cpus=4, free_bytes=1 << 34, gpu_free_bytes=None)


def _cfg(pairs=1, world_size=None, launcher="local", **pair_groups):
    return OmegaConf.create(
        {
            "pairs": pairs,
            "world_size": 2 * pairs if world_size is None else world_size,
            "launcher": {"name": launcher},
            "pair_groups": pair_groups,
        }
    )


def test_pairs_are_twice_as_many_ranks_on_the_local_launcher():
    assert pg.RANKS_KNOB == ("pairs", 2) and pg.CPU_BY_DEFAULT is True
    cfg = _cfg(pairs=3, world_size=1)
    pg.derive(cfg, None)
    assert cfg.world_size == 6
    cfg = _cfg(pairs=3, world_size=4, launcher="slurm")
    pg.derive(cfg, None)
    assert cfg.world_size == 4
    s = pg.settings(_cfg(iters=5, shape=[3, 4]))
    assert (s.iters, list(s.shape), s.warmup_iters, s.async_op, s.threads) == (
        5,
        [3, 4],
        8,
        False,
        None,
    )


@pytest.fixture
def checks(monkeypatch):
    seen = NS(fits=[], gpus=False, node=None)

    def check_fits(cfg, host, **kw):
        assert cfg.pair_groups is not None and host is HOST
        seen.fits.append(kw)

    def on_gpus(cfg, host):
        assert cfg.pair_groups is not None and host is HOST
        return seen.gpus

    monkeypatch.setattr(pg, "check_fits", check_fits)
    monkeypatch.setattr(pg, "on_gpus", on_gpus)
    monkeypatch.setattr(pg, "ranks_per_node", lambda cfg: seen.node or cfg.world_size)
    return seen


def test_check_refuses_a_bad_shape_and_a_world_that_is_not_two_per_pair(checks):
    for shape in ([10, 0], [-1]):
        with pytest.raises(ConfigError) as e:
            pg.check(_cfg(shape=shape), host=HOST)
        assert str(e.value) == (
            f"pair_groups.shape={shape}: a list of positive dimensions, e.g. [10,10]."
        )
    pg.check(_cfg(shape=[1, 1]), host=HOST)
    with pytest.raises(ConfigError) as e:
        pg.check(_cfg(pairs=2, world_size=6), host=HOST)
    assert str(e.value) == (
        "task=pair_groups with pairs=2 needs 4 ranks and this run has world_size=6: set pairs=3 "
        "(launcher=slurm: launcher.nodes x launcher.tasks_per_node = 2 x pairs)."
    )


def test_check_sizes_the_ranks_against_this_machine(checks):
    pg.check(_cfg(pairs=2), host=HOST)
    assert checks.fits == [
        dict(
            ranks=4,
            per_rank_bytes=pg.RANK_MEMORY_BYTES,
            what="pairs=2",
            fix="Use fewer pairs, or more nodes (launcher=slurm)",
        )
    ]
    pg.check(_cfg(pairs=4), host=HOST, submitting=True)  # the compute nodes check it
    checks.gpus = True
    pg.check(_cfg(pairs=4), host=HOST)  # a GPU each: no host memory to size
    assert len(checks.fits) == 1


def test_check_warns_when_the_ranks_threads_oversubscribe_the_cpus(checks, recwarn):
    pg.check(_cfg(pairs=2), host=HOST)  # 4 ranks on 4 CPUs
    pg.check(_cfg(pairs=2, threads=1), host=HOST)
    assert len(recwarn) == 0
    with pytest.warns(UserWarning) as w:
        pg.check(_cfg(pairs=2, threads=2), host=HOST)
    assert str(w[0].message) == (
        "pairs=2: 4 ranks x 2 threads on 4 CPUs oversubscribe this machine; the result shows the "
        "contention (CPU busy %, involuntary context switches)."
    )
    with pytest.warns(UserWarning) as w:
        pg.check(_cfg(pairs=3), host=HOST)
    assert str(w[0].message).startswith("pairs=3: 6 ranks on 4 CPUs oversubscribe")
    checks.node = 2  # per node: 2 ranks x 2 threads fit 4 CPUs
    pg.check(_cfg(pairs=3, threads=2), host=HOST)
    assert len(recwarn) == 0


class _Clock:
    def __init__(self, step=0.5):
        self.k, self.step, self.start = -1, step, 10.0
        self.cpu = itertools.cycle([1.0, 1.25])

    def perf_counter(self):
        self.k += 1
        return self.start + self.k * self.step

    def process_time(self):
        return next(self.cpu)


@pytest.fixture
def rank(monkeypatch):
    """Rank `rank` of 2 x pairs, its peers played by the stand-ins: every rank gathers the same
    figures as this one but its rank, wall (x 1.2 for rank 1) and host."""
    st = NS(groups=[], reduces=[], waits=0, barriers=0, destroyed=[], figures=None, threads=[])
    st.devices, st.synced = set(), set()

    class Work:
        def wait(self):
            st.waits += 1

    def new_group(ranks):
        st.groups.append(ranks)
        return f"g{ranks[0]}"

    def all_reduce(x, group=None, async_op=False):
        st.reduces.append((tuple(x.shape), group, async_op))
        st.devices.add(str(x.device))
        return Work() if async_op else None

    fake_dist = NS(
        new_group=new_group,
        all_reduce=all_reduce,
        barrier=lambda: setattr(st, "barriers", st.barriers + 1),
        destroy_process_group=lambda g: st.destroyed.append(g),
    )
    monkeypatch.setattr(pg, "dist", fake_dist)
    monkeypatch.setattr(pg, "time", _Clock())
    ru = itertools.cycle([NS(ru_nvcsw=10, ru_nivcsw=3), NS(ru_nvcsw=15, ru_nivcsw=7)])

    def getrusage(who):
        assert who == "self"
        return next(ru)

    monkeypatch.setattr(pg, "resource", NS(RUSAGE_SELF="self", getrusage=getrusage))
    st.jiffies = [(100, 1000), (160, 1100)]
    monkeypatch.setattr(pg, "host_cpu_jiffies", lambda: st.jiffies.pop(0))
    monkeypatch.setattr(pg, "synchronize", lambda device: st.synced.add(str(device)))
    monkeypatch.setattr(pg.torch, "set_num_threads", lambda n: st.threads.append(n))
    monkeypatch.setattr(pg.torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(pg.os, "cpu_count", lambda: 4)
    monkeypatch.setenv("OMP_NUM_THREADS", "9")

    def gather_all(figures):
        st.figures = figures
        return [
            {**figures, "rank": r, "wall_s": figures["wall_s"] * (1.2 if r == 1 else 1.0)}
            for r in range(len(st.groups) * 2)
        ]

    monkeypatch.setattr(pg, "gather_all", gather_all)

    def ctx(cfg, r=0, world=None, backend="gloo"):
        return NS(
            cfg=cfg,
            world_size=2 * cfg.pairs if world is None else world,
            rank=r,
            backend=backend,
            torch_device=torch.device("meta"),
            hostname="h",
            is_main=r == 0,
        )

    st.ctx = ctx
    return st


def test_a_ranks_loop_and_the_figures_it_gathers(rank):
    cfg = _cfg(pairs=2, iters=16, warmup_iters=3, shape=[2, 3])
    res = pg.run(rank.ctx(cfg, r=2))
    assert res is None  # not rank 0
    assert rank.groups == [[0, 1], [2, 3]]  # every rank makes every pair's group
    assert rank.reduces == [((2, 3), "g2", False)] * (3 + 16)  # in its own pair's group
    assert rank.destroyed == ["g2"] and rank.barriers == 2 and rank.waits == 0
    # clock readings 0, 0.5 (groups made), 1.0 (window opens), blocks of 2 calls each 0.5 s (8),
    # the window closes at 9.5: 8.5 s; CPU 1.0 -> 1.25
    f = rank.figures
    assert f["rank"] == 2 and f["host"] == "h"
    assert f["group_setup_s"] == 0.5 and f["wall_s"] == 8.5 and f["cpu_s"] == 0.25
    assert f["block_us_per_op"] == [250000.0] * 8
    assert (f["voluntary_switches"], f["involuntary_switches"]) == (5, 4)
    assert f["torch_threads"] == 3
    assert f["host_busy_fraction"] == pytest.approx(0.6)  # 60 of 100 jiffies busy
    assert rank.threads == [] and os.environ["OMP_NUM_THREADS"] == "9"
    assert rank.devices == {"cpu"} and rank.synced == {"cpu"}  # gloo: on the CPU


def test_the_second_rank_of_a_pair_uses_its_pair_and_nccl_its_device(rank):
    pg.run(rank.ctx(_cfg(pairs=2, iters=2, warmup_iters=0), r=3, backend="nccl"))
    assert {g for _, g, _ in rank.reduces} == {"g2"} and rank.destroyed == ["g2"]
    assert rank.devices == {"meta"} and rank.synced == {"meta"}


def test_async_calls_are_waited_and_threads_set_and_rank_0_writes_the_result(rank):
    cfg = _cfg(pairs=1, iters=3, warmup_iters=2, async_op=True, threads=2)
    res = pg.run(rank.ctx(cfg, r=0))
    assert rank.threads == [2] and os.environ["OMP_NUM_THREADS"] == "2"
    assert rank.reduces == [((10, 10), "g0", True)] * 5 and rank.waits == 5
    # 3 calls in blocks of 1: 0.5 s each = 500000 us; window 1.0 -> 4.5
    assert rank.figures["block_us_per_op"] == [500000.0] * 3
    assert rank.figures["wall_s"] == 3.5
    assert isinstance(res, PairGroupsResult) and res.rank0_s == 3.5 and res.slowest_rank == 1
    assert res.device == "cpu"


def test_no_host_share_without_proc_stat_or_a_tick(rank):
    rank.jiffies = [None, (1, 2)]
    pg.run(rank.ctx(_cfg(iters=2)))
    assert rank.figures["host_busy_fraction"] is None
    rank.jiffies = [(5, 100), (5, 100)]
    pg.run(rank.ctx(_cfg(iters=2)))
    assert rank.figures["host_busy_fraction"] is None


def test_a_world_that_is_not_two_per_pair_is_refused_in_the_rank(rank):
    with pytest.raises(ConfigError) as e:
        pg.run(rank.ctx(_cfg(pairs=2), world=6))
    assert str(e.value) == (
        "task=pair_groups with pairs=2 needs world_size=4, this run has 6 ranks. Start 2 x pairs "
        "ranks, or set pairs=3."
    )


def _everyone(hosts=("a", "a", "a", "a")):
    return [
        dict(
            rank=r,
            host=hosts[r],
            wall_s=[2.0, 2.5, 4.0, 3.0][r],
            cpu_s=[1.0, 2.0, 3.0, 2.0][r],
            block_us_per_op=[10.0, 12.0, 11.0, 13.0, 9.0, 14.0, 10.5, 11.5] if r == 0 else [1.0],
            voluntary_switches=[1, 2, 3, 4][r],
            involuntary_switches=[100, 200, 300, 400][r],
            torch_threads=2,
            group_setup_s=[0.25, 0.5, 0.5, 0.5][r],
            host_busy_fraction=[0.7, 0.1, 0.1, 0.1][r],
        )
        for r in range(4)
    ]


def _ctx2():
    return NS(world_size=4, cfg=NS(pairs=2), backend="gloo")


def test_the_result_of_four_ranks_on_one_host(monkeypatch):
    monkeypatch.setattr(pg.os, "cpu_count", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    p = pg.settings(_cfg(iters=100, warmup_iters=5, shape=[4, 4]))
    r = pg._result(_ctx2(), p, torch.device("cpu"), _everyone())
    assert (r.pairs, r.world_size, r.backend, r.device) == (2, 4, "gloo", "cpu")
    assert (r.iters, r.warmup_iters, r.shape, r.async_op) == (100, 5, [4, 4], False)
    assert (r.torch_threads, r.omp_num_threads, r.cpu_count, r.hosts) == (2, "1", 2, ["a"])
    assert (r.rank0_s, r.slowest_s, r.slowest_rank) == (2.0, 4.0, 2)
    assert r.per_op_us_rank0 == pytest.approx(2.0 / 100 * 1e6)  # 20000 us
    # 8 blocks: median 11.25; the 95% order-statistic interval of 8 is (min, max), 9 and 14:
    # (2nd, 7th) covers only 1 - 2 x 9/256 = 93%
    assert r.per_op_us.median == pytest.approx(11.25) and r.per_op_us.n == 8
    assert (r.per_op_us.ci_lo, r.per_op_us.ci_hi) == (9.0, 14.0)
    # 8 CPU-s of 2 CPUs x 4 s: all of the machine
    assert r.cpu_s_total == 8.0 and r.cpu_busy_fraction == pytest.approx(1.0)
    assert r.host_busy_fraction == 0.7 and r.ranks_per_cpu == 2.0
    assert (r.involuntary_switches, r.voluntary_switches) == (1000, 10)
    assert r.group_setup_s_rank0 == 0.25
    assert [x.rank for x in r.per_rank] == [0, 1, 2, 3] and isinstance(r.per_rank[1], PairRank)
    assert r.per_rank[2].wall_s == 4.0
    assert r.headline == {
        "pairs": 2,
        "ranks": 4,
        "rank 0 s": 2.0,
        "slowest s": 4.0,
        "us per all_reduce": 20000.0,
        "CPU busy %": 100.0,
        "host busy %": 70.0,
        "invol. switches / op": 2.5,  # 1000 / (4 ranks x 100)
    }
    assert r.explanation == pg.explain(r)


def test_the_result_rounds_its_headline(monkeypatch):
    monkeypatch.setattr(pg.os, "cpu_count", lambda: 3)
    ev = _everyone()
    ev[0]["wall_s"], ev[2]["wall_s"] = 1.234567, 7.654321
    ev[0]["host_busy_fraction"] = 0.123456
    ev[1]["torch_threads"] = 5  # rank 0's count is the one reported
    p = pg.settings(_cfg(iters=3))
    r = pg._result(_ctx2(), p, torch.device("cpu"), ev)
    h = r.headline
    assert h["rank 0 s"] == 1.2346 and h["slowest s"] == 7.6543
    assert h["us per all_reduce"] == round(1.234567 / 3 * 1e6, 2) == 411522.33
    assert h["CPU busy %"] == round(100 * 8 / (3 * 7.654321), 1) == 34.8
    assert h["host busy %"] == 12.3
    assert h["invol. switches / op"] == round(1000 / 12, 3) == 83.333
    assert r.ranks_per_cpu == pytest.approx(4 / 3) and r.torch_threads == 2
    # a window under a second still has its share: 8 CPU-s / (3 CPUs x 0.8 s)
    for e in ev:
        e["wall_s"] = 0.8
    r = pg._result(_ctx2(), p, torch.device("cpu"), ev)
    assert r.cpu_busy_fraction == pytest.approx(8 / 2.4)


def test_a_figure_of_the_wrong_kind_is_named_by_its_rank():
    ev = _everyone()
    ev[1]["group_setup_s"] = "slow"
    with pytest.warns(
        UserWarning, match=r"result\.per_rank\[1\]\.group_setup_s: expected a number"
    ):
        pg._result(_ctx2(), pg.settings(_cfg(iters=3)), torch.device("cpu"), ev)


def test_the_result_across_hosts_has_no_machine_share(monkeypatch):
    monkeypatch.setattr(pg.os, "cpu_count", lambda: None)  # unknown: 1
    p = pg.settings(_cfg(iters=100))
    r = pg._result(_ctx2(), p, torch.device("cpu"), _everyone(("a", "b", "a", "b")))
    assert r.hosts == ["a", "b"] and r.cpu_count == 1
    assert r.cpu_busy_fraction is None and r.host_busy_fraction is None and r.ranks_per_cpu is None
    assert r.headline["CPU busy %"] is None and r.headline["host busy %"] is None
    assert r.explanation[1] == (
        "ranks span several hosts: CPU share not computed (per-rank CPU time is in per_rank)."
    )
    # a window of no length: no share either
    ev = _everyone()
    for e in ev:
        e["wall_s"] = 0.0
    r = pg._result(_ctx2(), p, torch.device("cpu"), ev)
    assert r.cpu_busy_fraction is None and r.slowest_rank == 0


def _r(**kw):
    base = dict(
        iters=100,
        world_size=4,
        shape=[10, 10],
        rank0_s=0.123456,
        slowest_rank=3,
        slowest_s=0.2,
        per_op_us=Summary(n=8, median=1234.5, ci_lo=1200.0, ci_hi=1300.0),
        per_op_us_rank0=1234.56,
        cpu_busy_fraction=0.5,
        host_busy_fraction=None,
        involuntary_switches=200,
        cpu_count=8,
        ranks_per_cpu=0.5,
        torch_threads=1,
        cpu_s_total=1.5,
    )
    return PairGroupsResult(**{**base, **kw})


def test_the_reading_without_contention():
    lines = pg.explain(_r())
    assert lines == [
        "rank 0: 100 all_reduces of 10x10 in 0.1235 s = 1230 [1200, 1300] us each (median of 8 "
        "timed blocks, 95% CI); slowest rank 3: 0.2 s.",
        "4 ranks on 8 CPUs (0.5 ranks per CPU, 1 torch thread(s) each) used 1.5 CPU-s in the "
        "window: 50% of the machine; 0.50 involuntary context switches (the kernel preempting a "
        "runnable thread) per all_reduce per rank.",
        "No sign of CPU contention (no more ranks than CPUs, CPUs 50% busy): the time per "
        "all_reduce is the round trip of the backend's transport (per-call latency), which other "
        "pairs do not share.",
    ]
    # no blocks' summary: rank 0's mean
    assert pg.explain(_r(per_op_us=None))[0].endswith("= 1234.6 us each; slowest rank 3: 0.2 s.")
    # a summary without a median (a record's empty block) too: it used to print None and fail,
    # as a Summary's to_dict() is never empty
    assert pg.explain(_r(per_op_us=Summary()))[0].endswith(
        "= 1234.6 us each; slowest rank 3: 0.2 s."
    )


def test_the_reading_names_the_contention_it_sees():
    tail = (
        ", so a rank that is ready to answer its peer often waits for a CPU; time per all_reduce "
        "then grows with the number of pairs although each pair's traffic is independent. Compare "
        "pairs values at the same ranks-per-CPU, or pair_groups.threads=1 / async_op=true, to "
        "separate it from the transport."
    )
    lines = pg.explain(_r(ranks_per_cpu=2.0, cpu_count=2, cpu_busy_fraction=0.5))
    assert lines[2] == "CPU contention: more ranks than CPUs (4 on 2)" + tail
    lines = pg.explain(_r(ranks_per_cpu=1.0, cpu_busy_fraction=0.8))
    assert lines[2] == "CPU contention: the ranks kept 80% of the CPUs busy" + tail
    lines = pg.explain(_r(cpu_busy_fraction=0.79, host_busy_fraction=0.8))
    assert lines[1].endswith(
        "79% of the machine (80% busy counting every process on the host); 0.50 involuntary "
        "context switches (the kernel preempting a runnable thread) per all_reduce per rank."
    )
    assert lines[2] == "CPU contention: other processes kept the host 80% busy" + tail
    lines = pg.explain(_r(cpu_busy_fraction=0.79, host_busy_fraction=0.79, ranks_per_cpu=1.0))
    assert lines[2].startswith("No sign of CPU contention (no more ranks than CPUs, CPUs 79% busy)")


def test_the_console_view():
    r = _r(
        pairs=2,
        backend="gloo",
        device="cpu",
        warmup_iters=8,
        async_op=True,
        explanation=["one", "two"],
        per_rank=[
            PairRank(
                rank=0,
                host="a-very-long-hostname-here",
                wall_s=0.123456,
                cpu_s=0.5,
                voluntary_switches=7,
                involuntary_switches=9,
                torch_threads=1,
            )
        ],
    )
    rec = Record.from_dict({"task": "pair_groups", "status": "ok", "result": r.to_dict()})
    assert pg.summarize(rec).splitlines() == [
        "pair_groups: pairs=2 (4 ranks), backend gloo, device cpu, 100 all_reduces of 10x10 per "
        "rank in its pair's group (async_op=True, waited at the end of each timed block); 8 "
        "untimed first",
        " rank host                time s     us/op    CPU s   vol.sw  invol.sw threads",
        "    0 a-very-long-host    0.1235    1234.6    0.500        7         9       1",
        "Time to run target() (rank 0) = 0.123456 s; slowest rank 3: 0.200000 s",
        "why:",
        "  one",
        "  two",
    ]
    rec.result.iters, rec.result.per_rank[0].wall_s = 1, 1000.0  # 1e9 us per call
    assert pg.summarize(rec).splitlines()[2].split()[3] == "1000000000.0"
    rec.result.async_op = False
    assert "per rank in its pair's group; 8 untimed first" in pg.summarize(rec)
    assert pg.summarize(Record.from_dict({"task": "pair_groups", "status": "ok"})) == (
        "pair_groups: no result"
    )
    rec.result.rank0_s = None
    assert pg.summarize(rec) == "pair_groups: no result"
