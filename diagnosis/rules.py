"""The rules: each reads one record of the tasks it is registered for (@reads;
diagnosis.view.RunView) and returns a Finding or None.

A rule fires on the lower end of its figure's interval where the record has one (a condition that
the interval does not clear is not a finding), else on the figure itself, and says "no interval".
Every saving is arithmetic on this run's own numbers, and says which arithmetic; where one record
cannot say, the saving is None and the command is the run that would measure it. Findings are ranked
by diagnosis.finding.rank_findings."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple

from comm.buckets import DEFAULT_CAP_MB
from comm.efficiency import not_measurable
from comm.fit import fit_latency_bandwidth
from base.record import setting
from base.record_types import (
    CommStats,
    Evidence,
    Finding,
    GradSyncResult,
    MicrobenchSize,
    PairGroupsResult,
    Saving,
    Straggler,
    StragglerRank,
)
from diagnosis.sources import (
    GLOO_PAIRS_THREAD,
    MORE_GPUS_ARTICLE,
    NCCL_RDMA_ARTICLE,
    VGG11_THREAD,
    VIT_STUDY,
    cite,
)
from diagnosis.view import OTHER_LOAD, Noise, RunView, Sample, interval_note, lower
from stats.fmt import ms

EXPOSED_SHARE = 0.15  # exposed communication above 15% of the step
LOW_EFFICIENCY = (
    0.5  # the sync moves its bytes at under half the microbenchmark's speed: the path, not the link
)
INPUT_SHARE = 0.10  # data wait + host-to-device copy above 10% of the step
STRAGGLER_SHARE = 0.05  # one rank's extra work above 5% of the step
# The straggler's saving is this run's accounting; the step the fix leaves (the step less the
# others' wait) is a separate run's, and a step median scatters from run to run (log-normal sd).
# Short steps scatter far more than long ones (timer slack, a scheduler quantum, another process's
# burst are a larger share of them): steps under SHORT_STEP_S on the 2-core VM scattered 23.9%
# (vgg11_tiny batch 2 @64 on CPU, 4-10 ms steps: the pooled sd of log step medians over its
# configurations run more than once, 28 df, in the committed loopback records of
# results/whatif/validation_committed, not the diagnosis benchmark's; tests/test_diagnosis_rescore
# derives it again from them); longer steps:
# whatif.profile.RUN_TO_RUN_SD. Without it the stated interval (the per-rank medians' own, about 1
# point wide) held the saving a run of the fix measured in 5 of the 18 straggler runs of
# results/diagnosis_benchmark, the fix's step being 0.9-1.65x the step left.
SHORT_STEP_S = 0.05
SHORT_STEP_RUN_TO_RUN_SD = 0.239
TINY_BUCKET = 1 << 20  # "very many tiny buckets": more than MANY_BUCKETS, median under 1 MiB
MANY_BUCKETS = 32
DDP_BUCKET_MB = int(
    DEFAULT_CAP_MB
)  # DDP's cap when bucket_cap_mb is left at None (bucket=null, the default)
DDP_FIRST_BUCKET = (
    1 << 20
)  # ... and its first bucket's cap then (an explicit bucket_cap_mb caps the first bucket too)
LARGER_BUCKET_MB = 4 * DDP_BUCKET_MB
CPU_BUSY = 0.8
SAME_CPU = (
    0.5  # a straggler on a full CPU host must have used at least half its lag in extra CPU time
)
MAX_STEPS = 200
COMM_DOMINATED = cite(
    VIT_STUDY, "communication dominated the step; the remedy depended on the link"
)


# ------------------------------------------------------------------------------------- the registry
class Rule(NamedTuple):
    check: Callable[[RunView], Finding | None]
    tasks: tuple[str, ...] | None  # the tasks whose records it reads; None: every task's


RULES: list[Rule] = []


def reads(*tasks: str):
    """Registers the rule below it with the tasks whose records it reads (none named: every task's);
    diagnosis.run runs it on those records only, so a rule starts from its own condition. Rules run
    in the order they are registered, which breaks exact ties in the ranking."""

    def register(check):
        RULES.append(Rule(check, tasks or None))
        return check

    return register


def rules_for(task: str | None) -> list[Callable[[RunView], Finding | None]]:
    return [r.check for r in RULES if r.tasks is None or task in r.tasks]


# ------------------------------------------------------------------------------------- the findings
@dataclass(frozen=True)
class Template:
    """What every finding of one kind says the same way: its rule, the source case it matches, the
    part of the step its saving comes from (diagnosis.run's pools) and whether it is a configuration
    fact that noise does not hide (qualitative). The rule that makes it adds what comes from the
    numbers."""

    rule: str
    matches: str
    pool: str = ""
    qualitative: bool = False

    def finding(
        self,
        v: RunView,
        *,
        title: str,
        detail: str,
        evidence: list[Evidence],
        saving: Saving | None,
        impact: float,
        change: dict | None = None,
        env: dict | None = None,
        **more,
    ) -> Finding:
        """The finding; it recommends `change` and its command is this run's with `change` (and
        `env`), unless
        `more` names its own recommends= or command=."""
        if "command" not in more:
            more["command"] = v.command(change, env)
        more.setdefault("recommends", change)
        return Finding(
            rule=self.rule,
            title=title,
            detail=detail,
            evidence=evidence,
            matches=self.matches,
            saving=saving,
            impact=impact,
            pool=self.pool,
            qualitative=self.qualitative,
            **more,
        )


NOISE = Template(
    "noise", "no source: the tool's own trust rule (a difference inside the noise is not a finding)"
)
EXPOSED_UNEXPLAINED = Template("exposed_comm.unexplained", COMM_DOMINATED, pool="exposed")
EXPOSED_UNCLEAR = Template(
    "exposed_comm.unexplained", COMM_DOMINATED
)  # no pool: it estimates no saving
EXPOSED_UNCONFIRMED = Template("exposed_comm.unconfirmed", COMM_DOMINATED, pool="exposed")
SYNC_PATH = Template(
    "exposed_comm.sync_path",
    cite(
        VGG11_THREAD,
        "PyTorch's all_reduce of 471 MB took 280 ms where nccl-tests took ~60 ms for the same "
        "bytes; the "
        "cause was the default-stream host-to-device copy, not the network",
    ),
    pool="exposed",
)
SLOW_LINK = Template(
    "exposed_comm.slow_link",
    cite(
        VIT_STUDY,
        "bf16 compression +65% and PowerSGD >5x on the PCIe-bound L40S box; sources 001 and 004: "
        "gradient "
        "accumulation cuts how often the sync runs",
    ),
    pool="exposed",
)
PER_PARAM = Template(
    "per_param",
    cite(
        VGG11_THREAD,
        "the thread's per-parameter all_reduce loop: 280 ms against ~60 ms for one call of the "
        "same bytes; "
        "source 001's reply: use DDP instead of hand-written all_reduce",
    ),
    pool="exposed",
)
DDP_WORLD_SIZE_1 = Template(
    "ddp_world_size_1",
    cite(
        VIT_STUDY,
        "DDP on one GPU cost 3-7% of throughput against no DDP (8.91 -> 8.40 steps/s on L40S)",
    ),
    pool="exposed",
)
INPUT_PIPELINE = Template(
    "input_pipeline",
    cite(
        VGG11_THREAD,
        "the poster's fix: the batch copy on the default stream synchronised every step; a "
        "separate stream "
        "solved it",
    ),
    pool="input",
)
OVERSUBSCRIPTION = Template(
    "oversubscription",
    cite(
        GLOO_PAIRS_THREAD,
        "gloo on a CPU host: time grew with every pair of ranks added; the ranks competed for "
        "cores",
    ),
    pool="own",
)
CONTENTION = Template(
    "oversubscription.contention",
    cite(
        GLOO_PAIRS_THREAD,
        "gloo on a CPU host: ranks competed for cores; the reply: use DDP, no_sync (accumulate "
        "locally), NCCL on GPUs",
    ),
    pool="own",
)
PAIR_GROUPS_OVERSUBSCRIPTION = Template("oversubscription", cite(GLOO_PAIRS_THREAD), pool="own")
STRAGGLER = Template(
    "straggler",
    cite(MORE_GPUS_ARTICLE, "a single slow GPU holds every other one at the barrier"),
    pool="wait",
)
ONE_BUCKET = Template(
    "bucket_layout.one_bucket",
    cite(
        VIT_STUDY,
        "bucket_cap_mb=2000 put ViT-L/32's 1.2 GB of gradients in one bucket: no overlap; 11 "
        "smaller buckets "
        "overlapped backward",
    ),
    pool="exposed",
)
MANY_TINY_BUCKETS = Template(
    "bucket_layout.many_tiny",
    cite(
        VIT_STUDY,
        "the bucket size trades overlap against per-call cost; the optimum depends on the model "
        "and the "
        "machine",
    ),
    pool="exposed",
)
NCCL_SHM = Template(
    "nccl_transport",
    cite(
        VIT_STUDY,
        "8 L40S GPUs over PCIe (NODE/SYS links): NCCL chose SHM/direct/direct and 8 GPUs ran >6x "
        "slower than "
        "one; bf16 compression gave +65%",
    ),
    qualitative=True,
)
NCCL_SOCKETS = Template(
    "nccl_transport",
    cite(NCCL_RDMA_ARTICLE, "RDMA over InfiniBand/RoCE via NCCL_IB_HCA instead of sockets"),
    qualitative=True,
)
GRAD_SYNC_PER_PARAM = Template(
    "grad_sync.per_param",
    cite(
        VGG11_THREAD,
        "per-parameter all_reduce 280 ms against nccl-tests ~60 ms for the same 471 MB",
    ),
)
POWERSGD_SYNC = Template(
    "powersgd_sync",
    cite(
        VIT_STUDY,
        "PowerSGD worked best with a single bucket: with one bucket there is no overlap to lose",
    ),
    pool="exposed",
    qualitative=True,
)
# counters of the host, not a timing difference: the noise floor does not hide it (the busy host
# raises that floor)
BUSY_HOST = Template(
    "busy_host",
    cite(GLOO_PAIRS_THREAD, "gloo on a CPU host: ranks that wait for a core slow every collective"),
    pool="own",
    qualitative=True,
)


# --------------------------------------------------------------------------------- evidence helpers
def ev_ms(name: str, s: Sample | None, source: str) -> Evidence:
    if s is None:
        return Evidence(name, None, "ms", source=source, note="not in the record")
    lo, hi = s.ci_lo, s.ci_hi
    return Evidence(
        name,
        s.median * 1e3,
        "ms",
        lo * 1e3 if lo is not None else None,
        hi * 1e3 if hi is not None else None,
        source,
        interval_note(s),
    )


def ev_pct(name: str, s: Sample | None, source: str) -> Evidence:
    if s is None:
        return Evidence(name, None, "%", source=source, note="not in the record")
    lo, hi = s.ci_lo, s.ci_hi
    return Evidence(
        name,
        100 * s.median,
        "%",
        100 * lo if lo is not None else None,
        100 * hi if hi is not None else None,
        source,
        interval_note(s),
    )


def ev(name: str, value, unit: str, source: str, note: str = "") -> Evidence:
    return Evidence(
        name,
        value,
        unit,
        source=source,
        note=note or ("no interval: one figure" if value is not None else "not in the record"),
    )


def _step_ev(v: RunView) -> Evidence:
    if v.acc:
        return ev_ms("step (throughput)", v.step_sample(), "result.throughput")
    return ev_ms("step time (median)", v.step, "result.step_time_s")


def _saving(
    v: RunView,
    seconds: float | None,
    how: str,
    lo_s: float | None = None,
    hi_s: float | None = None,
    of: str = "the step",
) -> Saving:
    return Saving(
        fraction=v.fraction(seconds),
        seconds=seconds,
        lo=v.fraction(lo_s),
        hi=v.fraction(hi_s),
        of=of,
        how=how,
    )


def _ranks_per_host(v: RunView) -> int:
    hosts = v.env.hostnames or [None]
    return max(1, math.ceil(v.world_size / len(hosts)))


def _micro_calls(v: RunView) -> list[MicrobenchSize]:
    """The on-rank microbenchmark's timed calls: its sizes, then its one-element latency call where
    it has one."""
    micro = v.train.microbench
    if micro is None:
        return []
    return (micro.sizes or []) + ([micro.latency] if micro.latency is not None else [])


def _efficiency_ev(ref: dict) -> Evidence:
    if ref.get("source") != "result.env.link" and (unread := not_measurable(ref)) is not None:
        return Evidence(
            "comm efficiency (sync's speed / microbenchmark's at the same calls)",
            None,
            "%",
            source=f"result.comm.vs_microbench ({ref['reference']})",
            note=unread,
        )
    lo, hi = ref.get("efficiency_ci_lo"), ref.get("efficiency_ci_hi")
    return Evidence(
        f"comm efficiency (sync's speed / the {ref['reference']} at the same calls)",
        100 * ref["efficiency"],
        "%",
        100 * lo if lo is not None else None,
        100 * hi if hi is not None else None,
        f"{ref.get('source', 'result.comm.vs_microbench')} ({ref['reference']})",
        "interval from the microbenchmark's per-size intervals"
        if lo is not None
        else "no interval: the link's rate is a setting"
        + (
            "; above 100%: the shaper's burst passed part of it at the line's speed"
            if ref["efficiency"] > 1
            else ""
        )
        if ref.get("source") == "result.env.link"
        else "no interval: too few microbenchmark calls",
    )


# ----------------------------------------------------------------------------------- the noise rule
def noise_rule(v: RunView, noise: Noise, hidden: list[Finding] | None = None) -> Finding | None:
    """Said before the findings, not numbered as a cause, and only where the run's own noise hides a
    finding: one whose effect is above the 2% threshold (compare.noise's default, below which
    nothing is named anyway) and under the floor the noise sets. The title names the size of what it
    hides."""
    floor, threshold = noise.floor, noise.threshold
    masked = [f for f in hidden or [] if threshold < f.material <= floor]
    if not noise.noisy or not masked:
        return None
    n = noise.n or v.train.steps or 1
    half = noise.rel_halfwidth or floor
    # the median's interval narrows roughly as 1/sqrt(n): steps for +-5%, at least 30 (a 95%
    # interval, drift test) and at least twice this run's (where outliers or drift set the floor,
    # the half-width may already be under 5%: an H200 run of 50 steps was told steps=47), at most
    # MAX_STEPS (beyond that the noise is a busy machine)
    steps = min(MAX_STEPS, max(30, 2 * n, int(math.ceil(n * (half / 0.05) ** 2))))
    evidence = [_step_ev(v)]
    steady = noise.steady
    if steady is not None and steady.drift is not None:
        evidence.append(
            ev(
                "drift, last third vs first third of the window",
                100 * steady.drift,
                "%",
                "result.steady",
                f"p={steady.p_value:.2g}" if steady.p_value is not None else "",
            )
        )
    sizes = ", ".join(f"{100 * f.material:.1f}% ({f.rule})" for f in masked)
    return NOISE.finding(
        v,
        first=True,
        title=f"Noisy measurement: differences under {100 * floor:.1f}% of the step are not "
        "attributable; it hides "
        f"{len(masked)} finding{'s' if len(masked) != 1 else ''} of {sizes}",
        detail="; ".join(noise.reasons)
        + ". More steps narrow the interval when the noise is random; a busy "
        "machine needs a quieter moment.",
        evidence=evidence,
        saving=None,
        impact=floor,
        change={"steps": steps},
    )


# -------------------------------------------------------------------------------------- train rules
@reads("train")
def exposed_comm(v: RunView) -> Finding | None:
    """Exposed communication is a large share of the step: either the sync path is slow (low
    efficiency against the microbenchmark) or the link is (the sync already runs near the
    microbenchmark's speed)."""
    c = v.train.comm
    sync = v.train.sync
    if c is None or v.world_size < 2 or sync == "per_param" or c.exposed_s is None:
        return None  # per_param: the per_param rule is this condition, named by its cause
    exposed = v.exposed()  # less rank 0's wait for a late peer: that is the straggler's time
    if sync != "ddp" and v.phase("sync") and exposed.ci_lo is None:
        s = v.phase("sync")  # an explicit sync's phase has the interval its series give
        less = exposed.wait_s
        cut = lambda x: max(0.0, x - less) if x is not None else None  # noqa: E731 - a local helper
        exposed = replace(
            s, median=cut(s.median), ci_lo=cut(s.ci_lo), ci_hi=cut(s.ci_hi), wait_s=less
        )
    share = v.fraction_of_step(exposed)
    if share is None or lower(share) < EXPOSED_SHARE:
        return None
    ref = (
        v.reference if not not_measurable(v.reference) else None
    )  # an efficiency over 100% tells neither cause
    exposed_s = exposed.median
    evidence = [
        ev_ms(
            "exposed communication per step"
            + (", less the wait for a late peer" if exposed.wait_s else ""),
            exposed,
            "result.comm.exposed_s",
        ),
        ev_pct("share of the step", share, "exposed / step"),
        _step_ev(v),
    ]
    if exposed.ci_lo is None:
        return _exposed_unconfirmed(v, exposed, share, evidence)
    link = _link_reference(v)
    if (
        link is not None
        and (ref is None or efficiency_side(ref) is None)
        and efficiency_side(link) == "high"
    ):
        # the measured reference cannot tell, and the sync runs at the link's set rate (or beyond
        # it)
        ref = link
    if ref is None:
        return EXPOSED_UNEXPLAINED.finding(
            v,
            title=f"Exposed communication is {100 * share.median:.0f}% of the step; this record "
            "cannot tell a "
            "slow sync path from a slow link",
            detail=(
                "The comparison with the microbenchmark of the sync's own calls is "
                f"{not_measurable(v.reference)}. "
                if v.reference
                else "No microbenchmark of the sync's own calls in this record "
                "(diagnose.microbench was off, skipped "
                "or not run; or pass --nccl-tests FILE). "
            )
            + "Run it to see which of the two it is.",
            evidence=evidence,
            saving=Saving(
                None,
                how="the microbenchmark says how much of the exposed time the link itself needs",
            ),
            impact=share.median,
            change={"diagnose.microbench": True},
        )
    evidence.append(_efficiency_ev(ref))
    evidence.append(
        ev_ms(
            f"the same calls in the {ref['reference']}",
            Sample(
                ref["achievable_s"],
                ref.get("achievable_ci_lo"),
                ref.get("achievable_ci_hi"),
                source=ref["reference"],
            ),
            ref.get("source") or "result.comm.vs_microbench.achievable_s",
        )
    )
    side = efficiency_side(ref)
    if side == "low":
        return _sync_path(v, c, exposed_s, share, ref, evidence)
    if side == "high":
        return _slow_link(v, c, exposed_s, share, ref, evidence)
    return _cause_unclear(v, share, ref, evidence)


def _link_reference(v: RunView) -> dict | None:
    """The sync against the emulated link's set rate (comm.efficiency.versus_link), when the run ran
    behind one.

    A shaper's rate is a setting, not a measurement, so this reference has no noise; and a token
    bucket lets a burst (up to its depth) pass at the line's speed, so a sync of a few buckets can
    beat the set rate (efficiency over 100%) and an on-rank microbenchmark of back-to-back calls can
    land anywhere between the two. Neither makes the sync path slow: a sync at or above half of what
    the set rate allows is the link's time. Used where the measured reference cannot tell (not
    measurable, or its interval straddles LOW_EFFICIENCY)."""
    from comm.efficiency import versus_link

    if v.train.sync == "local":
        return None
    link = versus_link(v.env.link, v.train.comm, v.world_size)
    if link is None or link.get("efficiency") is None:
        return None
    return link


def efficiency_side(ref: dict) -> str | None:
    """Which cause the comm efficiency names, read on the end of its interval that could refute it:
    "low" (the sync path) when even the upper end is under LOW_EFFICIENCY, "high" (the link) when
    even the lower end is at or above it, None when the interval straddles it. A figure without an
    interval (the link's rate is a setting; too few microbenchmark calls) is its own bound."""
    lo, hi = ref.get("efficiency_ci_lo"), ref.get("efficiency_ci_hi")
    lo = ref["efficiency"] if lo is None else lo
    hi = ref["efficiency"] if hi is None else hi
    if hi < LOW_EFFICIENCY:
        return "low"
    if lo >= LOW_EFFICIENCY:
        return "high"
    return None


def _cause_unclear(v, share, ref, evidence) -> Finding:
    """The efficiency's interval straddles LOW_EFFICIENCY: the microbenchmark is too noisy to tell a
    slow sync path from a slow link, and more timed calls per size narrow it."""
    iters = max(20, 4 * int(setting(v.config, "diagnose.microbench_iters") or 5))
    lo, hi = (
        ref["efficiency"] if ref.get(k) is None else ref[k]
        for k in ("efficiency_ci_lo", "efficiency_ci_hi")
    )
    change = {"diagnose.microbench": True, "diagnose.microbench_iters": iters}
    return EXPOSED_UNCLEAR.finding(
        v,
        title=f"Exposed communication is {100 * share.median:.0f}% of the step; the comm "
        "efficiency's interval "
        f"[{100 * lo:.0f}, {100 * hi:.0f}]% straddles "
        f"{100 * LOW_EFFICIENCY:.0f}%, so it cannot tell a slow sync path from a slow link",
        detail="More timed calls per size in the microbenchmark "
        f"(diagnose.microbench_iters={iters}) narrow the "
        "interval; the run's diagnosis then names the cause.",
        evidence=evidence,
        saving=Saving(
            None, how="the microbenchmark says how much of the exposed time the link itself needs"
        ),
        impact=share.median,
        change=change,
    )


def _exposed_unconfirmed(v, exposed, share, evidence) -> Finding:
    """Exposed communication from too few probe steps for an interval (one by default): a single
    step's exposed time moved from 315 to 58 ms between two runs of one config, so no cause or
    remedy rests on it alone; the next run measures it over enough steps."""
    n = exposed.n or 1
    ref = v.reference
    if ref is not None:
        evidence.append(_efficiency_ev(ref))
    return EXPOSED_UNCONFIRMED.finding(
        v,
        title=f"Exposed communication was {100 * share.median:.0f}% of the step in {n} probe step"
        f"{'s' if n != 1 else ''}: too few samples to name a cause",
        detail=(
            f"DDP's reducer timers were read over probe_steps={n} untimed step(s) after the "
            "window, and one step's "
            "exposed time moves a lot between runs; probe_steps=6 reads them over 6 steps, which "
            "gives it a 95% "
            "interval, and the diagnosis of that run names the cause (a slow sync path or a slow "
            "link) and what "
            "to change."
        ),
        evidence=evidence,
        saving=Saving(
            None, how="one probe step cannot say; probe_steps=6 measures it with an interval"
        ),
        impact=share.median,
        change={"probe_steps": 6},
    )


def _sync_path(v, c, exposed_s, share, ref, evidence) -> Finding:
    on_gpu = v.gpu_like  # device=fake runs the GPU paths (and their copies) on CPU
    h2d = v.train.h2d.mode if v.train.h2d is not None else None
    sync = v.train.sync
    if on_gpu and h2d == "blocking":
        change, env = {"h2d": "side_stream"}, None
        why = (
            "h2d=blocking copies each batch on the compute stream: the host waits for the GPU "
            "every step, which "
            "also delays the all-reduces queued behind it (the VGG11 thread's own finding)"
        )
    elif sync == "flat":
        change, env = {"sync": "ddp"}, None
        why = (
            "sync=flat packs, all-reduces and unpacks after backward: no overlap, and two "
            "copies of every gradient"
        )
    elif not on_gpu:
        per_rank = max(1, (v.env.cpu_count or 1) // _ranks_per_host(v))
        threads = next((w.torch_threads for w in v.works()), None)
        if (
            threads is not None and threads <= per_rank
        ):  # the threads already fit: fewer syncs, not fewer threads
            k = max(4, 2 * int(v.train.accumulate or 1))
            change, env = {"accumulate": k}, None
            why = (
                "on CPU the all-reduce's gloo threads compete with the compute threads of every "
                "rank on the host, "
                f"and {threads} intra-op thread(s) per rank already fit the cores; accumulate={k} "
                "syncs once per "
                f"{k} micro-batches (DDP's no_sync), so the cores go to compute (the gloo thread's "
                "reply)"
            )
        else:
            change, env = {}, {"OMP_NUM_THREADS": per_rank}
            why = (
                "on CPU the all-reduce's gloo threads compete with the compute threads of every "
                "rank on the host; "
                f"{per_rank} intra-op thread(s) per rank leaves the cores to share rather than to "
                "fight over"
            )
    else:
        change, env = {"bucket": LARGER_BUCKET_MB}, None
        why = (
            f"DDP's calls run slower than alone: fewer, larger buckets (bucket={LARGER_BUCKET_MB}: "
            "4x DDP's "
            f"{DDP_BUCKET_MB} MiB) cut per-call overhead"
        )
    gain = min(exposed_s, max(0.0, ref["sync_s"] - ref["achievable_s"]))
    return SYNC_PATH.finding(
        v,
        title=(
            f"Exposed communication is {100 * share.median:.0f}% of the step and the all-reduces "
            "spanned "
            f"{1 / ref['efficiency']:.1f}x their time in the {ref['reference']} (waits for "
            "gradients included): "
            "the sync path, not the link, is the likelier problem"
            if ref.get("overlap_s")
            else f"Exposed communication is {100 * share.median:.0f}% of the step and the sync "
            "runs at "
            f"{100 * ref['efficiency']:.0f}% of the {ref['reference']}'s speed: the sync path is "
            "the problem, "
            "not the link"
        ),
        detail=why + ".",
        evidence=evidence,
        saving=_saving(
            v,
            gain,
            f"the exposed time the sync would lose at the {ref['reference']}'s speed "
            f"({ms(ref['sync_s'])} ms -> {ms(ref['achievable_s'])} ms)",
            0.0,
            exposed_s,
        ),
        impact=share.median,
        change=change,
        env=env,
    )


def _slow_link(v, c, exposed_s, share, ref, evidence) -> Finding:
    change = {"optim": "bf16"} if v.train.sync == "ddp" else {"sync": "ddp", "optim": "bf16"}
    err = v.train.accuracy.grad_rel_error if v.train.accuracy is not None else None
    k = 4
    alternatives = (
        "Other levers: optim=powersgd (far fewer bytes; its gradient error and bytes are measured "
        "by the run), "
        f"bucket={LARGER_BUCKET_MB} (fewer calls), or accumulate={k} (one sync per {k} "
        "micro-batches: "
        f"~{ms(exposed_s * (1 - 1 / k))} ms less exposed time per {k} micro-batches, at {k}x the "
        "effective "
        "batch)."
    )
    return SLOW_LINK.finding(
        v,
        title=f"Exposed communication is {100 * share.median:.0f}% of the step and the sync "
        "already runs "
        + (
            f"at {100 * ref['efficiency']:.0f}% of the {ref['reference']}'s speed"
            if ref["efficiency"] <= 1
            else f"as fast as the {ref['reference']}"
        )
        + ": the link is the bottleneck, send fewer bytes",
        detail=(
            "bf16 compression halves the bytes on the wire; its gradient error is measured by that "
            "run "
            "(grad rel err)"
            + (f"; this run's own error is {err:.2e}" if err else "")
            + ". "
            + alternatives
        ),
        evidence=evidence,
        saving=_saving(
            v,
            exposed_s / 2,
            "half the bytes, so half the exposed time if the link stays the bottleneck "
            "(the compression kernels' own cost not counted)",
            0.0,
            exposed_s,
        ),
        impact=share.median,
        change=change,
        fixes=[change]
        + (
            [{"optim": "powersgd"}, {"bucket": LARGER_BUCKET_MB}, {"accumulate": k}]
            if v.train.sync == "ddp"
            else [{"sync": "ddp"}]
        ),
    )


@reads("train")
def per_param(v: RunView) -> Finding | None:
    """The explicit per-parameter all-reduce: collectives x per-call latency, against the bandwidth,
    from this run's numbers (the microbenchmark's per-size times, fitted with task=grad_sync's
    latency-bandwidth arithmetic)."""
    if v.train.sync != "per_param" or v.world_size < 2:
        return None
    c = v.train.comm if v.train.comm is not None else CommStats()
    sync = v.phase("sync")
    if sync is None:
        return None
    n = c.collectives_per_step
    nbytes = c.bytes_per_step
    evidence = [
        ev_ms("per-parameter sync per step", sync, "result.phases.sync"),
        ev_pct("share of the step", v.share(("sync",)), "sync / step"),
        ev("all_reduce calls per step", n, "", "result.comm.collectives_per_step", "counted"),
        ev(
            "bytes per step",
            nbytes / 1e6 if nbytes else None,
            "MB",
            "result.comm.bytes_per_step",
            "counted",
        ),
    ]
    detail = [
        f"{n:.0f} all_reduce calls per step after backward: none of it overlaps the backward pass, "
        "and every "
        "call pays the collective's latency."
    ]
    rows = [{"bytes": r.bytes, "time_s": r.time_s.median} for r in _micro_calls(v)]
    one_call = c.vs_microbench.one_call_of_total_s if c.vs_microbench is not None else None
    if len(rows) >= 2 and n:
        fit = fit_latency_bandwidth(rows)  # task=grad_sync's arithmetic, on this run's probe
        if fit and fit.get("beta_GBps") and fit["alpha_s"] > 0:
            latency, moving = n * fit["alpha_s"], nbytes / (fit["beta_GBps"] * 1e9)
            evidence += [
                ev(
                    "per-call latency (fit)",
                    1e3 * fit["alpha_s"],
                    "ms",
                    "result.microbench.sizes",
                    f"t = alpha + bytes/beta over {fit['points']} sizes, weights {fit['weights']}",
                ),
                ev("bandwidth (fit)", fit["beta_GBps"], "GB/s", "result.microbench.sizes", "algbw"),
            ]
            rest = sync.median - latency - moving
            detail.append(
                f"{n:.0f} calls x {ms(fit['alpha_s'])} ms latency = {ms(latency)} ms; moving "
                f"the bytes at {fit['beta_GBps']:.3g} GB/s = {ms(moving)} ms; measured "
                f"{ms(sync.median)} ms"
                + (
                    f": the other {ms(rest)} ms is the same calls "
                    "running slower inside training than alone."
                    if rest > 0
                    else "."
                )
            )
    if one_call:
        evidence.append(
            ev(
                "one all_reduce of the whole gradient, alone",
                1e3 * one_call,
                "ms",
                "result.microbench.total",
                "median of the microbenchmark's calls",
            )
        )
    detail.append(
        "DDP buckets the gradients into a few large calls and starts them while backward still "
        "runs."
    )
    lo = sync.median - one_call if one_call else None
    full = v.contention()
    how = "DDP overlaps the all-reduce with backward; at best it hides all of it" + (
        "; at worst (no overlap) it saves the calls' overhead, down to one call of the total"
        if lo is not None
        else ""
    )
    point = sync.median
    if (
        full is not None and lo is not None
    ):  # overlap needs a free core: gloo's all-reduce is CPU work
        point = max(lo, 0.0)
        how = (
            f"this host's cores are full (host {100 * full.host_busy:.0f}% busy, the ranks' own "
            "work "
            f"{100 * full.own:.0f}%), so DDP's all-reduce cannot run beside backward for free: the "
            "estimate is "
            "the no-overlap case, the calls' overhead down to one call of the total; hiding all of "
            "it is the "
            "range's top"
        )
    return PER_PARAM.finding(
        v,
        title=f"The explicit per-parameter all-reduce is in use: {n:.0f} collectives per step, "
        f"{100 * (v.fraction(sync.median) or 0):.0f}% of the step, none overlapped",
        detail=" ".join(detail),
        evidence=evidence,
        saving=_saving(v, point, how, max(lo, 0.0) if lo is not None else 0.0, sync.median),
        impact=v.fraction(sync.median) or 0.0,
        change={"sync": "ddp"},
    )


@reads("train")
def ddp_world_size_1(v: RunView) -> Finding | None:
    if v.train.sync != "ddp" or v.world_size != 1:
        return None
    cost = v.train.comm.exposed_s if v.train.comm is not None else None
    if cost is None:
        return None
    return DDP_WORLD_SIZE_1.finding(
        v,
        title="DDP at world size 1: there is no one to communicate with, yet DDP still runs its "
        "reducer",
        detail="DDP copies gradients into its buckets, all-reduces a one-rank group and copies "
        "them back; plain "
        "training (sync=local) does none of that. The estimate is DDP's own exposed reducer time; "
        "its bucket "
        "copies inside backward are not in it, so the real cost can be larger.",
        evidence=[
            ev_ms("DDP exposed reducer time per step", v.exposed(), "result.comm.exposed_s"),
            _step_ev(v),
        ],
        saving=_saving(
            v, cost, "DDP's exposed reducer time, which plain training does not have", cost, None
        ),
        impact=v.fraction(cost) or 0.0,
        change={"sync": "local"},
    )


@reads("train")
def input_pipeline(v: RunView) -> Finding | None:
    share = v.share(("data", "h2d"))
    if share is None or lower(share) < INPUT_SHARE:
        return None
    data, h2d = v.phase("data"), v.phase("h2d")
    mode = v.train.h2d.mode if v.train.h2d is not None else None
    workers = int(setting(v.config, "data.workers") or 0)
    evidence = [
        ev_ms("data wait per step", data, "result.phases.data"),
        ev_ms("H2D copy per step", h2d, "result.phases.h2d"),
        ev_pct("their share of the step", share, "(data + h2d) / step"),
    ]
    copy_bound = h2d and data and h2d.median >= data.median
    if copy_bound and (not v.gpu_like or mode == "side_stream"):
        return None  # the copy already runs beside compute: no knob of this tool makes it shorter
    if copy_bound:
        change, secs = {"h2d": "side_stream"}, h2d.median
        title = f"The host-to-device copy is {100 * share.median:.0f}% of the step with h2d={mode}"
        detail = (
            "The copy runs on the compute stream, so compute waits for it (and, with h2d=blocking, "
            "the host "
            "waits for the GPU). A side stream copies the next batch while this one computes."
        )
        how = "a side stream hides the copy behind compute when compute takes longer"
    else:
        n = max(2, 2 * workers)
        change, secs = {"data.workers": n}, data.median if data else None
        title = f"The step waits for data: data + H2D are {100 * share.median:.0f}% of the step"
        detail = (
            f"data.workers={workers}: "
            + (
                "batches are made in the training process, between steps. "
                if workers == 0
                else "the loader does not keep up. "
            )
            + f"{n} worker processes prepare batches ahead."
        )
        how = "loader workers prepare batches during compute, up to the whole wait"
    return INPUT_PIPELINE.finding(
        v,
        title=title,
        detail=detail,
        evidence=evidence,
        saving=_saving(v, secs, how, 0.0, secs),
        impact=share.median,
        change=change,
    )


@reads("train")
def oversubscription(v: RunView) -> Finding | None:
    """gloo ranks on CPU asking for more threads than the host has cores
    (pair_groups_oversubscription: the same for task=pair_groups)."""
    if v.device != "cpu" or v.world_size < 2:
        return None
    works = v.works()
    cores = v.env.cpu_count
    if not works or not cores:
        return None
    per_host = _ranks_per_host(v)
    threads = works[0].torch_threads
    if per_host * threads <= cores:
        return _contention(v, per_host, threads)
    cpu = sum(w.cpu_s for w in works) / len(works) * per_host
    wall = max(w.wall_s for w in works)
    steps = works[0].steps or 1
    invol = statistics.median(w.involuntary_switches for w in works) / steps
    compute = v.share(("forward", "backward"))
    fair = max(1, cores // per_host)
    return OVERSUBSCRIPTION.finding(
        v,
        title=f"{per_host} ranks x {threads} compute threads on {cores} cores: the ranks "
        "oversubscribe the CPU",
        detail=(
            "Each rank's forward and backward run on torch's intra-op threads, and gloo's "
            "all-reduce threads need "
            "the same cores: a rank ready to compute or to answer its peer waits for a core, so "
            "adding ranks "
            "slows every rank's compute."
        ),
        evidence=[
            ev("ranks on this host", per_host, "", "result.world_size / env.hostnames", "counted"),
            ev(
                "torch intra-op threads per rank",
                threads,
                "",
                "result.per_rank[].work.torch_threads",
                "counted",
            ),
            ev("cores", cores, "", "env.cpu_count", "counted"),
            ev(
                "the ranks' CPU use over the window",
                100 * cpu / (cores * wall) if wall else None,
                "%",
                "result.per_rank[].work.cpu_s",
                "getrusage of each rank / cores x wall",
            ),
            ev(
                "host busy over the window (every process)",
                100 * works[0].host_busy if works[0].host_busy is not None else None,
                "%",
                "result.per_rank[0].work.host_busy",
                "/proc/stat",
            ),
            ev(
                "involuntary context switches per step per rank",
                invol,
                "",
                "result.per_rank[].work.involuntary_switches",
                "median over ranks",
            ),
            ev_pct("compute share of the step (forward + backward)", compute, "phases"),
        ],
        saving=Saving(
            None,
            how="one record cannot say how fast a rank computes without the contention; "
            "`python train.py -m experiment=scaling` measures one rank alone",
        ),
        impact=compute.median if compute else 0.0,
        change={},
        env={"OMP_NUM_THREADS": fair},
    )


def _contention(v: RunView, per_host: int, threads: int) -> Finding | None:
    """No more compute threads than cores, yet the cores are full and the ranks keep being
    preempted: under DDP on CPU gloo's all-reduce threads run beside backward on the same cores, so
    the overlap turns into turn-taking."""
    c = v.contention()
    if c is None or v.train.sync != "ddp":
        return None
    compute = v.share(("forward", "backward"))
    evidence = [
        ev("ranks on this host", per_host, "", "result.world_size / env.hostnames", "counted"),
        ev(
            "torch intra-op threads per rank",
            threads,
            "",
            "result.per_rank[].work.torch_threads",
            "counted",
        ),
        ev("cores", c.cores, "", "env.cpu_count", "counted"),
        ev(
            "host busy over the window (every process)",
            100 * c.host_busy,
            "%",
            "result.per_rank[0].work.host_busy",
            "/proc/stat",
        ),
        ev(
            "the ranks' own CPU use over the window",
            100 * c.own,
            "%",
            "result.per_rank[].work.cpu_s",
            "getrusage of each rank / cores x wall",
        ),
        ev(
            "involuntary context switches per second per rank",
            c.switches_per_s,
            "",
            "result.per_rank[].work.involuntary_switches",
            "median over ranks: preempted for another thread",
        ),
        ev_pct("compute share of the step (forward + backward)", compute, "phases"),
    ]
    ref = v.reference
    comm = v.train.comm
    if ref and comm is not None and comm.time_s:
        alone = "what the link allows" if ref.get("source") == "result.env.link" else "alone"
        evidence.append(
            ev(
                f"the all-reduces' span in training vs {alone}",
                1e3 * comm.time_s,
                "ms",
                "result.comm.time_s",
                f"{alone} ({ref['reference']}): {ms(ref['achievable_s'])} ms",
            )
        )
    k = max(4, 2 * int(v.train.accumulate or 1))  # never the run's own setting
    return CONTENTION.finding(
        v,
        title=f"{per_host} DDP ranks keep the {c.cores} cores {100 * c.host_busy:.0f}% busy and "
        "are preempted "
        f"{c.switches_per_s:.0f} times a second: compute and gloo's all-reduce threads take turns "
        "on the "
        "cores",
        detail=(
            "DDP overlaps each bucket's all-reduce with the rest of backward; with gloo on CPU the "
            "all-reduce is "
            "CPU work on gloo's own threads, so on a host with no spare core it does not hide "
            "behind backward, it "
            "slows it down. The same contention makes identical ranks finish at different times, "
            "so it is not "
            f"named as a straggler. Fewer syncs (accumulate={k}: DDP's no_sync for {k - 1} of {k} "
            "micro-batches, "
            "the gloo thread's first reply) leave the cores to the compute; `python train.py -m "
            "experiment=scaling` measures one rank alone."
        ),
        evidence=evidence,
        saving=Saving(
            None,
            how="how much compute the all-reduce's CPU work displaces is measured by "
            f"accumulate={k} "
            "against accumulate=1 (compare samples/s)",
        ),
        impact=compute.median if compute else 0.0,
        change={"accumulate": k},
    )


@reads("pair_groups")
def pair_groups_oversubscription(v: RunView) -> Finding | None:
    """gloo ranks of task=pair_groups sharing the host's cores (more ranks x threads than cores, or
    a busy host)."""
    r = v.result
    if not isinstance(r, PairGroupsResult):
        return None
    per_cpu, busy, threads = r.ranks_per_cpu, r.cpu_busy_fraction, r.torch_threads or 1
    if per_cpu is None or busy is None or (per_cpu * threads <= 1 and busy < CPU_BUSY):
        return None
    world, iters = r.world_size, r.iters
    if threads > 1:
        change = {"pair_groups.threads": 1}
    elif not r.async_op:
        change = {"pair_groups.async_op": True}
    else:
        change = {"pairs": max(1, int(r.cpu_count) // 2)}
    return PAIR_GROUPS_OVERSUBSCRIPTION.finding(
        v,
        title=f"{world} gloo ranks x {threads} thread(s) on {r.cpu_count} CPUs "
        f"({per_cpu * threads:.2g} threads per CPU, {100 * busy:.0f}% busy): the ranks compete for "
        "cores",
        detail=(
            "Each pair's traffic is independent, but a rank that is ready to answer its peer waits "
            "for a CPU; "
            "the time per all_reduce then grows with the number of pairs."
        ),
        evidence=[
            ev(
                "time per all_reduce, rank 0",
                r.per_op_us_rank0,
                "us",
                "result.per_op_us_rank0",
                f"mean over {iters} calls",
            ),
            ev(
                "CPU busy (ranks' CPU time / cores x window)",
                100 * busy,
                "%",
                "result.cpu_busy_fraction",
                "getrusage",
            ),
            ev(
                "host busy (every process)",
                100 * r.host_busy_fraction if r.host_busy_fraction is not None else None,
                "%",
                "result.host_busy_fraction",
                "/proc/stat",
            ),
            ev(
                "involuntary context switches per all_reduce per rank",
                r.involuntary_switches / (world * iters),
                "",
                "result.involuntary_switches",
                "getrusage",
            ),
        ],
        saving=Saving(
            None,
            how="one pairs= value cannot say how fast the loop runs without contention; a sweep "
            "over pairs (python train.py -m task=pair_groups pairs=1,2,4) sets it beside pairs=1",
        ),
        impact=min(1.0, 1 - 1 / (per_cpu * threads)) if per_cpu * threads > 1 else busy - CPU_BUSY,
        change=change,
    )


WHAT_DIFFERS = {
    "data": "its data loading",
    "h2d": "its host-to-device copy",
    "compute": "its compute (forward + backward)",
    "optimizer": "its optimizer step (and what runs with it: step hooks, logging)",
    "outside": "what it runs outside the timed phases (between steps: hooks, logging, checkpoints)",
}


@reads("train")
def straggler(v: RunView) -> Finding | None:
    """The rank the others wait for (tasks/train/stragglers.py: the most work between collectives).
    Its saving is the others' wait: rank 0 spends it in the collective or at the block barrier
    (diagnosis.accounting), and the exposed communication rule counts only what remains after it."""
    if v.world_size < 2:
        return None
    s = v.train.straggler
    if s is None or not s.to_dict():
        s = _straggler_from_phases(v)
    if s is None or s.significant is False:
        return None
    share = v.fraction(s.by_s) if s.by_s is not None else s.share_of_step
    if share is None or share < STRAGGLER_SHARE:
        return None
    slowest = v.train.slowest_rank if v.train.has("slowest_rank") else s.rank
    if s.rank != slowest and s.significant is not True:
        return (
            None  # the straggler and the slowest rank disagree, and neither is significant: noise
        )
    rank, mostly = s.rank, s.mostly or "compute"
    if _waited_for_a_core(v, s):
        return None
    others = [p for p in s.per_rank if p.rank != rank]
    mine = next(p for p in s.per_rank if p.rank == rank)
    ci = mine.ready_ci or [None, None]
    # the committed CPU studies made before the per-rank work held the optimizer: their figures were
    # not kept
    complete = any(p.optimizer_s is not None for p in s.per_rank)
    what = (
        "data + H2D + forward + backward compute + optimizer + time outside the phases"
        if complete
        else "data + H2D + forward + backward compute (an older record)"
    )
    evidence = [
        Evidence(
            f"rank {rank}'s work between collectives",
            1e3 * mine.ready_s,
            "ms",
            1e3 * ci[0] if ci[0] is not None else None,
            1e3 * ci[1] if ci[1] is not None else None,
            "result.straggler.per_rank",
            what,
        ),
        ev(
            "the other ranks' median",
            1e3 * statistics.median(p.ready_s for p in others),
            "ms",
            "result.straggler.per_rank",
            f"{len(others)} rank(s)",
        ),
        ev(
            "what differs most",
            1e3 * s.parts_s[mostly] if s.parts_s else None,
            "ms",
            "result.straggler.parts_s",
            mostly,
        ),
    ]
    wait = v.wait()
    where = ""
    if wait and wait.rank == rank and v.acc:
        barrier, inside = wait.at_barrier_s or 0.0, wait.in_sync_s or 0.0
        evidence.append(
            ev(
                "rank 0's wait for it per step",
                1e3 * wait.total_s,
                "ms",
                "diagnosis.accounting",
                f"{ms(inside)} ms inside {wait.phase or 'the collective'}, {ms(barrier)} ms at the "
                "block barrier",
            )
        )
        where = (
            " Rank 0 spends that wait at the barrier between timed blocks, in no phase of its own."
            if barrier >= inside
            else f" Rank 0 spends that wait inside {wait.phase or 'the collective'}: "
            "its phase table counts it there."
        )
        probe = v.acc.probe
        if probe is not None and probe.wait_s and probe.wait_s >= 0.5 * (probe.exposed_s or 0):
            where += (
                " The exposed communication DDP's timers measured on rank 0 "
                f"({ms(probe.exposed_s)} ms) is "
                f"this wait ({ms(probe.wait_s)} ms): {ms(probe.transfer_s)} ms of it is the "
                "transfer."
            )
    gpu = v.device == "cuda"
    if mostly == "data":
        change, env = (
            {"data.workers": max(2, 2 * int(setting(v.config, "data.workers") or 0))},
            None,
        )
        fix = "More loader workers prepare that rank's batches ahead."
    elif mostly == "h2d" and v.gpu_like:
        change, env = {"h2d": "side_stream"}, None
        fix = "A side stream copies the next batch while this one computes."
    elif mostly in ("optimizer", "outside"):
        change, env = {"profile.enabled": True}, None
        fix = (
            f"A profiler trace of every rank (trace.rank{rank}.json) shows what rank {rank} runs "
            "there that the "
            "others do not."
        )
    else:
        change = {"world_size": 1, "sync": "local"}
        env = {"CUDA_VISIBLE_DEVICES": rank % max(1, v.env.device_count or 1)} if gpu else None
        fix = "Time that rank's device alone with the command below and compare."
    lo = hi = None
    if (
        s.significant
        and ci[0] is not None
        and all(p.ready_ci and p.ready_ci[0] is not None for p in others)
    ):
        lo = max(0.0, ci[0] - max(p.ready_ci[1] for p in others))
        hi = ci[1] - min(p.ready_ci[0] for p in others)
        scatter = _after_fix_scatter(v, s.by_s)
        if scatter is not None:
            down, up, sd, source = scatter
            lo, hi = max(0.0, lo - down), hi + up
            evidence.append(
                ev(
                    "a run of the fix: its step's run-to-run scatter",
                    100 * sd,
                    "%",
                    source,
                    f"log-normal sd of a step median; the step the fix leaves "
                    f"({ms(v.step_s - s.by_s)} ms) x e^(+-1.96 sd) widens the interval",
                )
            )
    saving = _saving(
        v,
        s.by_s,
        "the others' wait, if the straggler worked as fast as their median",
        lo if lo is not None else 0.0,
        hi if hi is not None else s.by_s,
    )
    saving.basis, saving.source = ("interval" if lo is not None else "range"), "measured"
    return STRAGGLER.finding(
        v,
        title=f"Rank {rank}"
        + (f" on {s.host}" if s.host else "")
        + f" is the straggler: the others wait "
        f"{ms(s.by_s)} ms per step for it ({100 * share:.0f}% of the step), in "
        f"{WHAT_DIFFERS.get(mostly, mostly)}",
        detail=(
            "Under DDP the all-reduce evens out step times, so the slowest wall clock does not "
            "name the culprit; "
            f"the rank with the most work between collectives does.{where} {fix}"
        )
        + ("" if s.significant else " (no interval: per-rank phase medians)"),
        evidence=evidence,
        saving=saving,
        impact=share,
        change=change,
        env=env,
        recommends={} if mostly in ("compute", "optimizer", "outside") else change,
    )  # diagnostic runs: not checked


def _after_fix_scatter(v: RunView, by_s: float | None) -> tuple[float, float, float, str] | None:
    """(seconds the saving may be lower, higher, the sd, where the sd comes from) for a separate run
    of the fix: the step it leaves (this step less the others' wait) is another run's step median,
    scattering run to run by a log-normal sd (SHORT_STEP_RUN_TO_RUN_SD for a step under
    SHORT_STEP_S off GPU, where it was measured: a CUDA step's scatter is not a busy 2-core VM's;
    else the device's whatif.profile.RUN_TO_RUN_SD) at 95% (1.96 sd). None without a step or a
    wait."""
    from whatif.profile import RUN_TO_RUN_SD

    if not v.step_s or by_s is None:
        return None
    rest = v.step_s - by_s
    if rest <= 0:
        return None
    if rest < SHORT_STEP_S and v.device != "cuda":
        sd, source = SHORT_STEP_RUN_TO_RUN_SD, "diagnosis.rules.SHORT_STEP_RUN_TO_RUN_SD"
    else:
        sd, source = RUN_TO_RUN_SD.get(v.device, 0.05), "whatif.profile.RUN_TO_RUN_SD"
    z = 1.959963984540054
    return rest * (math.exp(z * sd) - 1), rest * (1 - math.exp(-z * sd)), sd, source


def _waited_for_a_core(v: RunView, s: Straggler) -> bool:
    """On a full or busy host two identical ranks finish at different times because one waited for a
    core: that is not a straggler of its own. A lag whose lower end is at most twice the longest
    wait of any rank's loop thread for a core (per step), on a rank that did no more work (extra CPU
    time under half its lag), is within the scheduler's reach, whichever rank shows it: the loop
    thread's wait is a lower bound, since a rank also stops while its gloo threads wait for a core;
    the record's run-queue wait also says it directly (the straggler's extra wait for a core
    explains at least half its lag); without the counters (a kernel that keeps no schedstat, or a
    committed record made before they were read) it falls back to CPU time (its extra CPU time
    explains under half its lag while the host was full or busy). A rank that sleeps (I/O, a lock, a
    slow peer of its own) shows neither."""
    busy = v.contention() is not None  # the ranks fill the cores themselves
    other = v.other_load()  # or other processes took them
    if not (busy or (other is not None and other > OTHER_LOAD)):
        return False
    reach = _core_wait_per_step(v)
    extra_cpu = _extra_per_step(v, s.rank, "cpu_s")
    if (
        reach is not None
        and SAME_CPU * _lag_low(s) <= reach
        and (extra_cpu is None or extra_cpu < SAME_CPU * s.by_s)
    ):
        # a loop thread's wait for a core covers half the lag or more, and the late rank did no more
        # work
        return True
    queue = _extra_per_step(v, s.rank, "runqueue_s")
    if queue is not None:
        return queue >= SAME_CPU * s.by_s
    if (s.mostly or "compute") != "compute":
        return False
    return (extra_cpu is None and not busy) or (
        extra_cpu is not None and extra_cpu < SAME_CPU * s.by_s
    )


def _core_wait_per_step(v: RunView) -> float | None:
    """How long a rank's loop thread waited on a run queue for a core per step (schedstat), the most
    of any rank: on a host the ranks fill or others share, that is how far apart identical ranks can
    finish through the scheduler alone, whichever rank it happens to be (the counters need not show
    it on the late one: a rank also stops when its gloo thread, or a lock that thread holds, waits
    for a core). None without the counters."""
    per = [
        w.main_runqueue_s / w.steps for w in v.works() if w.main_runqueue_s is not None and w.steps
    ]
    return max(per) if len(per) >= 2 else None


def _lag_low(s: Straggler) -> float:
    """The lower end of the straggler's lag: its work's interval against the others' (as the
    saving's range), else the lag itself."""
    mine = next((p for p in s.per_rank or [] if p.rank == s.rank), None)
    others = [p for p in s.per_rank or [] if p.rank != s.rank]
    ci = (mine.ready_ci if mine is not None else None) or [None, None]
    if (
        ci[0] is None
        or not others
        or not all(p.ready_ci and p.ready_ci[1] is not None for p in others)
    ):
        return s.by_s
    return max(0.0, ci[0] - max(p.ready_ci[1] for p in others))


def _extra_per_step(v: RunView, rank: int, key: str) -> float | None:
    """A window counter (cpu_s: getrusage; runqueue_s: schedstat) per measured step, the rank's
    beyond the other ranks' median; None where a rank lacks it."""
    per = {p.rank: p.work for p in v.train.per_rank or [] if p.work is not None and p.work.steps}
    if rank not in per or len(per) < 2 or any(getattr(w, key) is None for w in per.values()):
        return None
    x = {r: getattr(w, key) / w.steps for r, w in per.items()}
    return x[rank] - statistics.median(c for r, c in x.items() if r != rank)


def _straggler_from_phases(v: RunView) -> Straggler | None:
    """Records without result.straggler: per-rank phase medians (no intervals). With DDP the
    backward phase holds the wait for the others, so only data + H2D + forward count there."""
    per = [
        p
        for p in v.train.per_rank or []
        if p.phases_median is not None and p.phases_median.to_dict()
    ]
    if len(per) < 2:
        return None
    ddp = v.train.sync == "ddp"
    medians = {p.rank: p.phases_median.to_dict() for p in per}  # the phases the rank timed, by name
    parts = {
        r: {
            "data": m.get("data", 0.0),
            "h2d": m.get("h2d", 0.0),
            "compute": m.get("forward", 0.0) + (0.0 if ddp else m.get("backward", 0.0)),
        }
        for r, m in medians.items()
    }
    ready = {r: sum(x.values()) for r, x in parts.items()}
    slow = max(ready, key=ready.get)
    others = [r for r in ready if r != slow]
    gap = ready[slow] - statistics.median(ready[r] for r in others)
    diff = {
        k: parts[slow][k] - statistics.median(parts[r][k] for r in others)
        for k in ("data", "h2d", "compute")
    }
    return Straggler(
        rank=slow,
        host=next(p.host for p in per if p.rank == slow),
        by_s=gap,
        share_of_step=v.fraction(gap),
        significant=None,
        mostly=max(diff, key=diff.get),
        parts_s=diff,
        per_rank=[StragglerRank(rank=r, ready_s=ready[r], ready_ci=None) for r in ready],
    )


@reads("train")
def bucket_layout(v: RunView) -> Finding | None:
    if v.train.sync != "ddp" or v.world_size < 2:
        return None
    ddp, comm = v.train.ddp, v.train.comm
    sizes = (
        (ddp.buckets.sizes_bytes if ddp is not None and ddp.buckets is not None else None)
        or (comm.buckets.sizes_bytes if comm is not None and comm.buckets is not None else None)
        or []
    )
    exposed = comm.exposed_s if comm is not None else None
    total = sum(sizes)
    if not sizes or exposed is None:
        return None
    cap = v.train.bucket_mb or setting(v.config, "bucket")
    evidence = [
        ev("buckets DDP built", len(sizes), "", "result.ddp.buckets.count", f"bucket_cap_mb={cap}"),
        ev("gradient bytes", total / 2**20, "MiB", "result.ddp.buckets.sizes_bytes", "counted"),
        ev_ms("exposed communication per step", v.exposed(), "result.comm.exposed_s"),
    ]
    default_k = ddp_default_buckets(total)
    stock = {"bucket": "null"}  # DDP's own default (the key's null: bucket_cap_mb=None)
    if len(sizes) == 1 and default_k > 1:
        gain = exposed * (1 - 1 / default_k)
        return ONE_BUCKET.finding(
            v,
            title=f"One {total / 2**20:.0f} MiB bucket: the all-reduce can only start after the "
            "whole backward",
            detail=(
                f"With DDP's default buckets (bucket=null: {DDP_BUCKET_MB} MiB, the first capped "
                "at 1 MiB) DDP "
                f"would build ~{default_k} buckets and all-reduce the first ones while backward "
                "computes the rest; "
                "only the last bucket's all-reduce stays exposed."
            ),
            evidence=evidence,
            saving=_saving(
                v,
                gain,
                f"exposed x (1 - 1/{default_k}): all but the last of ~{default_k} buckets "
                "hidden, if backward is long enough to hide them",
                0.0,
                exposed,
            ),
            impact=v.fraction(exposed) or 0.0,
            change=stock,
        )
    if len(sizes) > MANY_BUCKETS and statistics.median(sizes) < TINY_BUCKET:
        latency = min((r.time_s.median for r in _micro_calls(v)), default=None)
        gain = latency * (len(sizes) - default_k) if latency is not None else None
        return MANY_TINY_BUCKETS.finding(
            v,
            title=f"{len(sizes)} buckets of median {statistics.median(sizes) / 2**10:.0f} KiB: "
            "each all-reduce is "
            "mostly per-call latency",
            detail=(
                f"DDP's default buckets (bucket=null: {DDP_BUCKET_MB} MiB, the first capped at 1 "
                "MiB) would make "
                f"~{default_k} calls of the same bytes."
            ),
            evidence=evidence,
            saving=(
                _saving(
                    v,
                    min(gain, exposed),
                    f"{len(sizes) - default_k} fewer calls x the smallest call's "
                    "microbenchmark time, at most the exposed time",
                    0.0,
                    exposed,
                )
                if gain is not None
                else Saving(
                    None, how="needs the microbenchmark's per-call time (diagnose.microbench=true)"
                )
            ),
            impact=v.fraction(exposed) or 0.0,
            change=stock,
        )
    return None


def ddp_default_buckets(total_bytes: int) -> int:
    """About how many buckets DDP's default caps make of total_bytes (a first of ~1 MiB, then 25 MiB
    each)."""
    if total_bytes <= DDP_FIRST_BUCKET:
        return 1
    return 1 + math.ceil((total_bytes - DDP_FIRST_BUCKET) / (DDP_BUCKET_MB * 2**20))


@reads()  # NCCL's channel lines are in every task's record
def nccl_transport(v: RunView) -> Finding | None:
    """NCCL_DEBUG=INFO's channel lines: SHM (through host memory) or a socket NET where P2P or IB
    was expected."""
    t = v.result.nccl_transports if v.result.nccl_transports is not None else {}
    hosts = v.env.hostnames or []
    shm = {k: n for k, n in t.items() if k.startswith("SHM")}
    sock = {k: n for k, n in t.items() if k.startswith("NET/Socket")}
    if len(hosts) <= 1 and shm and (v.env.device_count or 0) > 1:
        name, expected = ", ".join(shm), "P2P (NVLink or PCIe peer-to-peer)"
        means = (
            "SHM moves every byte GPU -> host memory -> GPU over PCIe, through the CPU: busbw is "
            "bounded by host "
            "memory and the PCIe root complex rather than the GPUs' own links"
        )
        change, template = ({"optim": "bf16"} if v.task == "train" else {}), NCCL_SHM
    elif len(hosts) > 1 and sock:
        name, expected = ", ".join(sock), "NET/IB (InfiniBand or RoCE)"
        means = (
            "NCCL's socket transport moves data through the kernel's TCP stack with CPU copies; if "
            "`ibv_devinfo` "
            "lists ports, NCCL is not using them"
        )
        change, template = {"nccl.IB_HCA": "mlx5"}, NCCL_SOCKETS
    else:
        return None
    c = v.train.comm if v.train.comm is not None else CommStats()
    ref = v.reference or {}
    evidence = [
        ev(
            "channel connections by transport",
            sum(t.values()),
            "",
            "result.nccl_transports",
            ", ".join(f"{k}: {n}" for k, n in t.items()),
        ),
        ev("gradient-sync busbw", c.busbw_GBps, "GB/s", "result.comm.busbw_GBps"),
        ev(
            f"{ref.get('reference', 'microbenchmark')} busbw at the same calls",
            ref.get("reference_busbw_GBps"),
            "GB/s",
            "result.comm.vs_microbench",
        ),
    ]
    share = v.fraction(c.exposed_s)
    return template.finding(
        v,
        title=f"NCCL used {name} where {expected} was expected",
        detail=means
        + ". The busbw above is what this path gave; `nvidia-smi topo -m` shows the links.",
        evidence=evidence,
        saving=Saving(
            None,
            how="depends on the link NCCL could use instead; compare task=collectives busbw on a "
            "machine with that link",
        ),
        impact=share or 0.0,
        change=change,
    )


# ----------------------------------------------------------------------------------- task=grad_sync
@reads("grad_sync")
def grad_sync_per_param(v: RunView) -> Finding | None:
    r = v.result
    if not isinstance(r, GradSyncResult) or r.methods is None:
        return None
    m = r.methods
    pp = m.per_param
    # the methods in the record's order (the first of equal times is named)
    others = {
        k: x.time_s
        for k in m.to_dict()
        if k in ("flat", "bucketed", "coalesced")
        for x in [getattr(m, k)]
        if x is not None and x.time_s
    }
    if pp is None or not pp.time_s or not others:
        return None
    best_name = min(others, key=lambda k: others[k])
    best = others[best_name]
    spread = max(
        0.02, abs((pp.time_max_s if pp.has("time_max_s") else pp.time_s) - pp.time_s) / pp.time_s
    )
    if pp.time_s <= best * (1 + spread):
        return None
    micro = m.microbench
    saving = pp.time_s - best
    return GRAD_SYNC_PER_PARAM.finding(
        v,
        title=f"Per-parameter all_reduce ({pp.calls} calls) takes {pp.time_s / best:.2f}x the "
        f"{best_name} "
        f"sync of the same gradients",
        detail=" ".join(r.explanation or []),
        evidence=[
            ev(
                "per_param sync",
                1e3 * pp.time_s,
                "ms",
                "result.methods.per_param.time_s",
                f"median over {r.iters} syncs, average over ranks",
            ),
            ev(
                f"{best_name} sync",
                1e3 * best,
                "ms",
                f"result.methods.{best_name}.time_s",
                f"median over {r.iters} syncs",
            ),
            ev(
                "one all_reduce of the same bytes (microbench)",
                1e3 * micro.time_s if micro is not None and micro.time_s else None,
                "ms",
                "result.methods.microbench.time_s",
            ),
        ],
        saving=Saving(
            saving / pp.time_s,
            saving,
            of="the gradient sync",
            how=f"measured here: {best_name} instead of per_param",
        ),
        impact=saving / pp.time_s,
        recommends={"sync": "ddp"},
        command=" ".join(
            [
                "python",
                "train.py",
                "task=train",
                "sync=ddp",
                f"model={setting(v.config, 'model.name') or 'vgg11'}",
            ]
        ),
    )


@reads("train")
def powersgd_sync(v: RunView) -> Finding | None:
    """PowerSGD's lost overlap is not this tool's doing: torch's hook synchronises the device in
    every bucket's decompression (torch.cuda.synchronize, powerSGD_hook.py), and on gloo this tool
    runs its buckets one after another (tasks/train/ddp.py: serialized) so that ranks issue them in
    the same order. Said whatever the noise: it is how the run was made, not a timing."""
    if v.train.optim != "powersgd" or v.world_size < 2:
        return None
    syncs = (
        v.train.device_layer.comm_hook_device_syncs if v.train.device_layer is not None else None
    )
    device_sync = v.device == "cuda" or (syncs or 0) > 0
    serialized = bool(v.train.ddp is not None and v.train.ddp.serialized)
    if not (device_sync or serialized):
        return None
    exposed = v.train.comm.exposed_s if v.train.comm is not None else None
    why = []
    if device_sync:
        why.append(
            "torch's PowerSGD hook calls torch.cuda.synchronize(device) in every bucket's "
            "decompression "
            "(torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py): the host waits for "
            "the whole "
            "device there, so backward's remaining work is not queued while a bucket is "
            "all-reduced. That is "
            "torch's own sync, in any training that uses the hook, not this tool's; the record "
            "names it "
            "(device_layer.window_unchecked_because)"
        )
    if serialized:
        why.append(
            "on gloo this tool waits for each bucket's PowerSGD before DDP hands over the next "
            "(ddp.serialized: "
            "gloo's callback threads could otherwise issue different buckets' all-reduces in "
            "different orders "
            "on different ranks), so the buckets do not overlap each other or backward here"
        )
    evidence = [ev_ms("exposed communication per step", v.exposed(), "result.comm.exposed_s")]
    if syncs is not None:
        evidence.append(
            ev(
                "device-wide syncs from the comm hook",
                syncs,
                "",
                "result.device_layer.comm_hook_device_syncs",
                "counted by the fake device",
            )
        )
    return POWERSGD_SYNC.finding(
        v,
        title="PowerSGD's lost overlap is "
        + (
            "torch's own device sync in every bucket"
            if device_sync
            else "its buckets run one after another on gloo"
        ),
        detail="; ".join(why)
        + ". Compare its samples/s with optim=bf16, whose hook does not synchronise.",
        evidence=evidence,
        saving=Saving(
            None,
            how="no setting of this tool removes torch's sync; optim=bf16 or one bucket (the ViT "
            "study's PowerSGD setting) measures the alternative",
        ),
        impact=v.fraction(exposed) or 0.0,
        change={"optim": "bf16"},
    )


@reads("train")
def busy_host(v: RunView) -> Finding | None:
    """Other processes took a share of the host's CPUs during the window (host counters minus the
    ranks' own CPU time). What it costs the ranks is the time their loop thread waited on a run
    queue for a core (schedstat), nearly all of it the others' doing: that wait is the estimate,
    the ranks given the CPU the others took the range's top (the comment below). Without run-queue
    counters (a kernel that keeps no schedstat; the committed CPU studies made before the counters
    were read) the cost is not estimated."""
    if v.device == "cuda":
        return None
    other = v.other_load()
    if other is None or other <= OTHER_LOAD:
        return None
    host = v._one_host()
    works, cores, own = host
    busy = works[0].host_busy
    queues = [
        w.main_runqueue_s / w.steps for w in works if w.main_runqueue_s is not None and w.steps
    ]
    evidence = [
        ev(
            "host busy over the window (every process)",
            100 * busy,
            "%",
            "result.per_rank[0].work.host_busy",
            "/proc/stat",
        ),
        ev(
            "the ranks' own CPU use over the window",
            100 * own,
            "%",
            "result.per_rank[].work.cpu_s",
            "getrusage of each rank / cores x wall",
        ),
        ev(
            "other processes' share of the host",
            100 * other,
            "%",
            "host busy - the ranks' own",
            "no interval: counters over the window",
        ),
    ]
    if queues:
        queue = statistics.median(queues)
        evidence.append(
            ev(
                "the loop thread's wait for a core per step",
                1e3 * queue,
                "ms",
                "result.per_rank[].work.main_runqueue_s",
                "schedstat run-queue time, median over ranks",
            )
        )
        # The step grows by the loop thread's wait for a core: nearly all of it the other
        # processes' doing. Without them (the fix, run in the same sweep of the diagnosis
        # benchmark) the loop thread waited 0.5-1.1 ms a step against 5.6-6.6 ms beside a spinner:
        # 85-92% of its wait was the spinner's, where the others' share of the CPU it queued
        # behind (the estimate until 2026-12-07) gave it 60-66% and undershot the measured saving
        # by 12-18 points. The estimate is the whole wait (median over ranks), the range's bottom
        # too; it misses that the step waits for the later rank each step and the CPU a
        # preempted thread loses to cold caches, so the range's top is the CPU-bound limit: the
        # ranks given the others' share of the host, own / (own + other) of the step left,
        # capped by the ranks' own CPU on every core (1 - own: no step is shorter than its CPU
        # spread over every core).
        limit = min(other / (own + other), 1.0 - own) if own + other > 0 else 0.0
        saving = _saving(
            v,
            queue,
            f"the loop thread's wait for a core ({ms(queue)} ms per step, median over ranks), "
            "all of it the other processes' doing; at most the ranks given the CPU they took "
            f"({100 * limit:.0f}% of the step). Not known within 10 points: on the 2026-12-07 "
            "diagnosis benchmark this wait, 32-40% of the step in every busy run, stood for "
            "savings of 22-46%; stop that process and run the same command "
            "again to measure it",
            queue,
            max(queue, limit * v.step_s) if v.step_s else queue,
        )
        saving.source = "measured"
    else:
        saving = Saving(
            None, how="this record has no run-queue counters; a run on a quiet host measures it"
        )
    return BUSY_HOST.finding(
        v,
        title=f"Other processes used {100 * other:.0f}% of the host's {cores} cores during the "
        "window: the ranks "
        "waited for cores they would otherwise have",
        detail=(
            "The host was busy with work that is not this run's (host counters minus the ranks' "
            "own CPU time). "
            "Every rank's compute, and gloo's all-reduce threads, queue behind it for a core; the "
            "numbers of this "
            "run hold that wait, so no knob of the run measures its own speed here. Find what runs "
            "beside it "
            "(the command below) and run again when the host is quiet."
        ),
        evidence=evidence,
        saving=saving,
        impact=other,
        recommends={},
        command="ps -eo pid,pcpu,etime,args --sort=-pcpu | head -8",
    )


# ---------------------------------------------------------------------------------- a rank's stalls
HICCUP_SHARED = Template(
    "hiccup.shared",
    cite(
        MORE_GPUS_ARTICLE,
        "a rank doing more work (logging, evaluation, checkpointing every N steps) holds every "
        "other one at the barrier",
    ),
    pool="wait",
    qualitative=True,
)
HICCUP = Template(
    "hiccup",
    cite(
        MORE_GPUS_ARTICLE,
        "a rank doing more work (logging, evaluation, checkpointing every N steps) holds every "
        "other "
        "one at the barrier",
    ),
    pool="wait",
    qualitative=True,
)
HICCUP_MADS = (
    5.0  # a step is a spike past the rank's median by this many median absolute deviations ...
)
HICCUP_SHARE = 0.25  # ... and by this share of the median at least
HICCUP_MIN = 2  # a single slow step is not a pattern
HICCUP_MARGIN = 2.0  # beyond noise: stalls this many times the others' largest excursion ...
HICCUP_PERIOD_MAX = 500  # the longest lattice tried: longer periods are the spikes' (few, large)
HICCUP_ALPHA = 0.01  # ... or more spikes than the others' rate of rises makes this likely
HICCUP_MIN_STEPS = 10
HICCUP_SHARED_RISE = 0.25  # another rank up by this share of a spike on its step: the machine's
HICCUP_PARTS = ("data", "forward", "backward", "optimizer", "outside")
HICCUP_WHERE = {
    "outside": "its own code outside the timed phases (evaluation, checkpointing, logging)",
    "data": "its data wait",
    "forward": "forward",
    "backward": "backward compute",
    "optimizer": "the optimizer",
}


def _rank_series(series) -> dict[str, list[float]] | None:
    steps = series.step_time_s or []
    ph = series.phases.to_dict() if series.phases is not None else {}
    if len(steps) < HICCUP_MIN_STEPS:
        return None
    col = {
        name: (ph.get(name) or [0.0] * len(steps))
        for name in ("data", "h2d", "forward", "backward", "sync", "optimizer")
    }
    timed = [sum(col[n][i] for n in col) for i in range(len(steps))]
    ready = [s - col["sync"][i] for i, s in enumerate(steps)]
    return {
        "ready": ready,
        # the work no collective waits inside: DDP waits for its all-reduces at the end of
        # backward, so a rank stalled in its data, forward, optimizer or own code and the rank
        # waiting for it both jump in `ready` on the same step; apart from backward only the
        # first does
        "apart": [r - col["backward"][i] for i, r in enumerate(ready)],
        "outside": [max(0.0, s - timed[i]) for i, s in enumerate(steps)],
        **{n: col[n] for n in ("data", "forward", "backward", "optimizer")},
    }


def _cut(values: list[float]) -> float:
    med = statistics.median(values)
    mad = statistics.median(abs(x - med) for x in values)
    return med + max(HICCUP_MADS * mad, HICCUP_SHARE * med)


def _spikes(values: list[float]) -> list[int]:
    cut = _cut(values)
    return [i for i, x in enumerate(values) if x > cut]


def _whole_lattice(two: list[int], n: int) -> bool:
    """Whether two steps are all of their lattice the window holds (a stall every p steps that a
    short window catches twice), not two of a longer run's steps that happen to stand out."""
    a, b = two
    p = b - a
    return p >= 2 and a - p < 0 and b + p >= n


def _beyond_noise(
    ready: list[float],
    own: list[int],
    spikes: set[int],
    others: list[list[float]],
    noise: list[list[float]] | None = None,
) -> tuple[list[int], float, float | None] | None:
    """(the steps of the stall, the others' largest excursion, the chance of its lattice) for a
    rank's work series against the noise of the same run, or None where no stall is told apart
    from it. On a shared CPU every rank's step jumps now and then (a preemption is one scheduler
    slice, ~4 ms): two such jumps on one rank fit a "period" and were named a hiccup on healthy
    runs (4 ms "every 14 steps", 3% of the step), and a long run collects a dozen on every rank.
    A rank's stall is beyond that noise where (the first that holds; the lattice first, as it
    names the period)
    - its work on one lattice (every p-th step from r, p up to HICCUP_PERIOD_MAX and a third of
      the window: the user's loop evaluating, logging or checkpointing every p steps; a
      scheduler's jumps are not periodic) is larger than on its
      other steps: a one-sided Mann-Whitney test of the lattice's steps against the rest (normal
      approximation), times the lattices tried (Bonferroni), under HICCUP_ALPHA, while no other
      rank's work is up on that lattice by half as much (every rank evaluating every p steps is
      the job's, not a rank's). A stall on a third of the steps inflates the rank's spread until
      the spike cut (5 MADs) rises past it: 5 ms every 3 steps of 10 ms went unseen by spikes
      alone; the lattice test compares the steps themselves; or
    - more than HICCUP_MIN of its own spikes, or HICCUP_MIN that are the whole of their lattice in
      the window (_whole_lattice), are each HICCUP_MARGIN x the largest excursion the other ranks
      made above their median off this rank's spikes and the step after each (tens of ms on a few
      irregular steps, or every N steps of a window too short for the lattice test, against a
      few ms of noise; a noise spike among them is not the stall: only these are kept).
    A stall the noise matches in size and count is not told apart from it, whatever rank made it:
    how small a stall is seen is measured on real runs by `python -m diagnosis.hiccup_power`.
    `noise`: the other ranks' series whose excursions the size route compares against, where
    `others` is a part of their step (the stall must stand above their whole step's noise)."""
    import numpy as np
    from scipy.special import ndtr  # norm.sf(z) is ndtr(-z) (norm_gen._sf), bit for bit

    n = len(ready)
    med = statistics.median(ready)
    # the others' noise, off this rank's spikes and the step after each: their wait for it can
    # fall in their next step's work (an all-reduce the stall made late) as well as in its sync
    near = spikes | {i + 1 for i in spikes}
    rises = [
        x - m
        for o, m in ((o, statistics.median(o)) for o in (others if noise is None else noise))
        for i, x in enumerate(o)
        if i not in near
    ]
    envelope = max([0.0, *rises])
    big = [i for i in own if ready[i] - med > HICCUP_MARGIN * envelope]
    whole = len(big) > HICCUP_MIN or (len(big) == HICCUP_MIN and _whole_lattice(big, n))
    size = (big, envelope, None) if whole else None
    x = np.asarray(ready)
    if np.ptp(x) == 0:
        return size  # every step alike: no lattice stands out (and no spread to test against)
    index = np.arange(n)
    rank = _average_ranks(x)
    periods, offsets, rank_sums = [], [], []
    for p in range(2, min(n // 3, HICCUP_PERIOD_MAX) + 1):  # ranks summed by offset: O(n) a p
        periods.append(np.full(p, p))
        offsets.append(np.arange(p))
        rank_sums.append(np.bincount(index % p, weights=rank, minlength=p))
    if not periods:
        return size
    period, offset, rank_sum = (np.concatenate(a) for a in (periods, offsets, rank_sums))
    m = (n - offset + period - 1) // period  # the lattice's steps in the window
    keep = m >= 3
    period, offset, rank_sum, m = period[keep], offset[keep], rank_sum[keep], m[keep]
    u = rank_sum - m * (m + 1) / 2  # Mann-Whitney U of the lattice's steps
    _, counts = np.unique(x, return_counts=True)
    ties = (counts**3 - counts).sum() / (n * (n - 1))
    sd = np.sqrt(m * (n - m) / 12 * (n + 1 - ties))
    chance = ndtr(-(u - m * (n - m) / 2 - 0.5) / sd) * len(m)
    best = int(np.argmin(chance))
    if chance[best] >= HICCUP_ALPHA:
        return size
    on = index % period[best] == offset[best]
    shift = float(np.median(x[on]) - np.median(x[~on]))
    for o in others:
        y = np.asarray(o[:n])
        k = on[: len(y)]
        if k.any() and (~k).any() and np.median(y[k]) - np.median(y[~k]) >= shift / 2:
            return size
    return [int(i) for i in index[on]], envelope, float(chance[best])


def _average_ranks(x):
    """Ranks 1..n of x, ties given their mean rank: scipy.stats.rankdata(x)'s values (each a whole
    or half number, exact in floats) without importing scipy.stats, which was ~0.5 CPU s of every
    run's diagnosis (the parent's and the in-job check's rank's: issue 36)."""
    import numpy as np

    order = np.argsort(x, kind="stable")
    y = x[order]
    starts = np.flatnonzero(np.concatenate(([True], y[1:] != y[:-1])))
    counts = np.diff(np.append(starts, y.size))
    ranks = np.empty(y.size)
    ranks[order] = np.repeat(starts + 1 + (counts - 1) / 2, counts)
    return ranks


def _grew(w: dict[str, list[float]], on: list[int], parts, n: int | None = None) -> dict:
    """Per part of a rank's step: its mean on the stalled steps less its median on the others
    (over the first n steps)."""
    stalled = set(on)
    return {
        part: statistics.mean(w[part][i] for i in on)
        - statistics.median(x for i, x in enumerate(w[part][:n]) if i not in stalled)
        for part in parts
    }


def _steps_text(on: list[int], offset: int) -> str:
    """The stalled steps as the user counts them (warm-up included, from 1), the first six."""
    return ", ".join(str(offset + i + 1) for i in on[:6]) + (", ..." if len(on) > 6 else "")


def _series_ev(name: str, seconds: float, note: str) -> Evidence:
    return Evidence(name, 1e3 * seconds, "ms", source="result.per_rank[].series", note=note)


def _stall_saving(share: float | None, per_step: float, how: str) -> Saving:
    """A stall's saving: its time averaged over every step, the most that removing it saves."""
    return Saving(
        fraction=share,
        seconds=per_step,
        lo=None,
        hi=share,
        how=how,
        basis="range",
        source="measured",
    )


def _shared_stall(v: RunView, works: dict[int, dict[str, list[float]]]) -> Finding | None:
    """Every rank's step work up on one lattice (every p-th step) and no rank's own stall told
    apart: a rank stalled inside backward, where the others wait for it inside theirs (DDP's
    all-reduces end backward, so the phases cannot say whose it was), or work every rank does every
    p steps. The lattice test alone (_beyond_noise's first route, on the least of the ranks' work
    each step: what every rank spent), so its chance is the same Bonferroni-bounded one. On the
    113 committed 2-rank records with per-rank series (2026-12-07) it named none; it named a 2-rank
    run whose rank 0 slept 100 ms inside backward every 5 steps (p = 1e-5). Which rank, or what,
    is for a profile of those steps."""
    n = min(len(w["ready"]) for w in works.values())
    least = [min(w["ready"][i] for w in works.values()) for i in range(n)]
    found = _beyond_noise(least, [], set(), [])
    if found is None or found[2] is None:
        return None
    on, _, chance = found
    period = on[1] - on[0]  # a lattice the test takes holds 3 steps or more
    base, extra = _stalls(least, on)
    per_step = sum(extra) / n
    each = [_grew(w, on, HICCUP_PARTS, n) for w in works.values()]
    grew = {part: statistics.mean(g[part] for g in each) for part in HICCUP_PARTS}
    mostly = max(grew, key=grew.get)
    share = v.fraction(per_step)
    steps_text = _steps_text(on, v.train.warmup_steps or 0)
    return HICCUP_SHARED.finding(
        v,
        title=f"Every rank's step is {1e3 * statistics.median(extra):.0f} ms longer every {period} "
        f"steps, in {'backward' if mostly == 'backward' else HICCUP_WHERE[mostly]}: "
        f"{1e3 * per_step:.1f} ms per step on average"
        + (f" ({100 * share:.0f}% of the step)" if share is not None else ""),
        detail=(
            f"On every {period}th step all ranks' work jumps together, so no one rank's stall is "
            "told apart: a rank stalled inside backward (the others wait for it inside theirs, "
            "where DDP waits for the all-reduces), or work every rank does that often. Profile "
            f"those steps (profile.enabled=true in task=train) to see whose it is."
        ),
        evidence=[
            _series_ev(
                "the stall, every rank (median over the lattice's steps)",
                statistics.median(extra),
                f"steps {steps_text}: the least of the ranks' work, against its median",
            ),
            _series_ev("what grew on those steps (mean over ranks)", grew[mostly], mostly),
            _series_ev(
                "averaged over every step",
                per_step,
                f"that lattice by chance: p = {chance:.2g} (Bonferroni)",
            ),
        ],
        saving=_stall_saving(
            share, per_step, "the stall averaged over the steps, if it left the step"
        ),
        command=v.command(),
        impact=share or 0.0,
        recommends={},
    )


def _stalled_rank(works: dict[int, dict[str, list[float]]], key: str):
    """(its stall averaged over the steps, the rank, _beyond_noise's answer) for the rank whose
    series `key` holds the largest stall told apart from the noise, or None."""
    # a part of the step (key "apart") spikes where the whole step does too (a stall makes the
    # step long; the others' wait for it is in their backward): a busy host's 3-5 ms jitter in a
    # 9 ms part of a 20 ms step, the step itself not out of line, was named a stall
    spikes = {r: set(_spikes(w[key])) & set(_spikes(w["ready"])) for r, w in works.items()}
    # a rank's own: the other ranks' work is not up on those steps by a quarter as much (a
    # machine-wide stall is not a rank's; a 4 ms jump of a rank's 10 ms work on one of rank 0's
    # 120 ms stalls, under load, took that step from rank 0's lattice: "every 6 steps" for 3)
    med = {r: statistics.median(w[key]) for r, w in works.items()}

    def rise(r: int, i: int) -> float:
        return works[r][key][i] - med[r]

    owns = {
        r: sorted(
            i
            for i in spikes[r]
            if all(
                i not in spikes[o] or rise(o, i) < HICCUP_SHARED_RISE * rise(r, i)
                for o in works
                if o != r
            )
        )
        for r in works
    }
    found = []
    for rank, w in works.items():
        others = [o[key] for r, o in works.items() if r != rank]
        noise = None if key == "ready" else [o["ready"] for r, o in works.items() if r != rank]
        beyond = _beyond_noise(w[key], owns[rank], spikes[rank], others, noise)
        if beyond is not None:
            found.append((sum(_stalls(w[key], beyond[0])[1]) / len(w[key]), rank, beyond))
    # (its stall a step, rank, ...): the largest stall a step; a tie to the last bit goes to the
    # higher rank
    return max(found) if found else None


def _stalls(ready: list[float], own: list[int]) -> tuple[float, list[float]]:
    """(the rank's usual step work, each stall's extra over it): the usual is the median of the
    other steps, since a stall on every 2nd step moves the median of them all."""
    stalled = set(own)
    base = statistics.median(x for i, x in enumerate(ready) if i not in stalled)
    return base, [ready[i] - base for i in own]


def _period(own: list[int], n: int) -> tuple[int, list[int], list[int]] | None:
    """(p, the spikes off it, the steps of it without a spike) for spikes on every p-th step of a
    window of n: all of them evenly spaced, or, from three on the lattice, all but one (a stall the
    rank's scheduler or collector added, or one its work hid). A stall every 3 steps with one such
    extra spike was named "on 4 of 10 steps": its period, what the user recognises, was lost to the
    one step off it. None where no lattice holds them so."""
    gaps = {b - a for a, b in zip(own, own[1:])}
    if gaps == {1}:
        return None  # consecutive steps: a burst, not a period
    if len(gaps) == 1:
        return gaps.pop(), [], []
    best = None
    for p in sorted(g for g in gaps if g >= 2):
        for r in sorted({i % p for i in own}):
            on = [i for i in own if i % p == r]
            off = [i for i in own if i % p != r]
            missed = [i for i in range(on[0], on[-1] + 1, p) if i not in own]
            if len(on) >= 3 and len(off) + len(missed) <= max(1, len(on) // 5):
                if best is None or len(on) > len(best[0]):
                    best = (on, p, off, missed)
    return None if best is None else (best[1], best[2], best[3])


@reads("train")
def hiccup(v: RunView) -> Finding | None:
    """A rank that stalls now and then: rank 0 evaluating or writing a checkpoint every N steps, a
    logger flushing, a slow disk. Its median step is the others', so the straggler rule (medians of
    the work between collectives) does not see it, and the noise floor it inflates hides every
    finding behind it. Reads each rank's per-step series (the record's per_rank[].series, where the
    run kept one: task=script) and names the rank whose own work, the step less its wait for the
    all-reduces, jumps on some steps while the other ranks' does not: its rank, how often (the
    period when the steps are evenly spaced), how long, and which part of the step grew. Its
    evidence is the spikes against the rank's own median and spread (past median + max(5 MAD, 25% of
    it)), not the step's interval, so the noise the spikes make does not hide it (qualitative)."""
    if v.world_size < 2 or not v.train.per_rank:
        return None
    works = {p.rank: _rank_series(p.series) for p in v.train.per_rank if p.series is not None}
    works = {r: w for r, w in works.items() if w is not None}
    if len(works) < 2:
        return None
    key = "ready"
    hit = _stalled_rank(works, key)
    if hit is None:  # a stall outside backward, the others' wait for it inside theirs
        key = "apart"
        hit = _stalled_rank(works, key)
    if hit is None:
        return _shared_stall(v, works)
    per_step, rank, (own, envelope, chance) = hit
    w, series = works[rank], works[rank][key]
    parts = HICCUP_PARTS if key == "ready" else tuple(x for x in HICCUP_PARTS if x != "backward")
    base, extra = _stalls(series, own)
    offset = v.train.warmup_steps or 0
    period = _period(own, len(series))
    if period is None:
        every = f"on {len(own)} of {len(series)} steps"
        every_text = every
    else:
        p, off, missed = period
        every = f"every {p} steps"
        every_text = every + (
            "".join(
                f" ({what} step {offset + i + 1})"
                for what, found_i in (("and once more, on", off), ("but not on", missed))
                for i in found_i
            )
            if len(off) + len(missed) <= 1
            else f" (on {len(own) - len(off)} of those {len(own) - len(off) + len(missed)} steps"
            + (f", and on {len(off)} more" if off else "")
            + ")"
        )
    grew = _grew(w, own, parts)
    mostly = max(grew, key=grew.get)
    share = v.fraction(per_step)
    steps_text = _steps_text(own, offset)
    stall = statistics.median(extra)
    host = next((p.host for p in v.train.per_rank if p.rank == rank), None)
    evidence = [
        _series_ev(
            "its stall (median over the spikes)",
            stall,
            f"steps {steps_text}, against its own median step work",
        ),
        _series_ev("its usual work between collectives", base, "median")
        if key == "ready"
        else _series_ev(
            "its usual work outside backward",
            base,
            "median; backward left out: the others wait for its stall inside theirs",
        ),
        _series_ev("what grew on those steps", grew[mostly], mostly),
        _series_ev("averaged over every step", per_step, "what the other ranks wait, per step"),
        _series_ev(
            "the other ranks' largest excursion",
            envelope,
            "their noise above their median, off its spike steps"
            + (
                f"; its spikes on that lattice by chance: p = {chance:.2g} (Bonferroni)"
                if chance is not None
                else f"; each stall over {HICCUP_MARGIN:g}x it"
            ),
        ),
    ]
    if mostly == "outside":
        fix = (
            "Run that work on every rank over its shard, less often, or off the step (an "
            "asynchronous "
            "checkpoint: torch.distributed.checkpoint.async_save), then run the same command again."
        )
        todo = (
            f"in the script, move rank {rank}'s {every.removeprefix('on ')} work off the step; "
            "then: "
        )
    else:
        fix = f"Profile rank {rank}'s {mostly} on those steps (profile.enabled=true in task=train)."
        todo = ""
    return HICCUP.finding(
        v,
        title=f"Rank {rank}"
        + (f" on {host}" if host else "")
        + f" stalls {1e3 * stall:.0f} ms {every_text} in "
        f"{HICCUP_WHERE[mostly]}; the other ranks wait for it: {1e3 * per_step:.1f} ms per step on "
        "average" + (f" ({100 * share:.0f}% of the step)" if share is not None else ""),
        detail=(
            f"A median step hides it: rank {rank}'s usual step is the others'. On the spike steps "
            "its own work "
            + (
                "(the step less its wait for the all-reduces)"
                if key == "ready"
                else "outside backward (where DDP waits for the all-reduces)"
            )
            + " jumps while the other ranks' does not, and they wait "
            f"at the next all-reduce. {fix}"
        ),
        evidence=evidence,
        saving=_stall_saving(
            share, per_step, "the others' wait averaged over the steps, if the stall left the step"
        ),
        command=todo + v.command(),
        impact=share or 0.0,
        recommends={},
    )
