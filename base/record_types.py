"""The run record's schema, as code: the blocks of `base.record.Record` and each task's result.

Seconds and bytes unless a name says otherwise (`_us`, `_GBps`, `_mb`). A field that a run may not
have (a knob that was off, a probe that did not run, a failed run's partial result) is `None`;
readers test `is None`, never fall back to `{}`. docs/record.md is generated from these classes
(`python -m base.record_types > docs/record.md`). Maps keyed by data (phase names, rank numbers,
headline labels, config overrides) stay dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from base.typed import Block, RecordError, schema_lines

__all__ = ["RecordError"]  # re-exported: base.record raises it


def doc(text: str, **kw) -> Any:
    """A field with a line for docs/record.md."""
    return field(metadata={"doc": text}, **kw)


# ------------------------------------------------------------------------------------ shared blocks


@dataclass
class Summary(Block):
    """stats.summary.describe: a sample's median with its 95% interval and the usual order
    statistics."""

    n: int | None = None
    median: float | None = None
    ci_lo: float | None = None
    ci_hi: float | None = None
    ci_level: float | None = None
    ci_method: str | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    p90: float | None = None
    q1: float | None = None
    q3: float | None = None
    iqr: float | None = None
    outliers_low: int | None = None
    outliers_high: int | None = None
    rel_ci_halfwidth: float | None = None
    lag1: float | None = doc(
        "lag-1 autocorrelation of the series (serial summaries only)", default=None
    )
    n_eff: float | None = doc(
        "effective sample size after autocorrelation (serial summaries only)", default=None
    )


@dataclass
class Phases(Block):
    """One value per step phase (rank 0's step, timed between marks)."""

    data: Any = None
    h2d: Any = None
    forward: Any = None
    backward: Any = None
    sync: Any = None
    optimizer: Any = None
    graph_replay: Any = doc(
        "cuda_graphs=true: the replayed forward, backward and optimizer step, one phase",
        default=None,
    )


@dataclass
class PhaseSummaries(Phases):
    data: Summary | None = None
    h2d: Summary | None = None
    forward: Summary | None = None
    backward: Summary | None = None
    sync: Summary | None = None
    optimizer: Summary | None = None
    graph_replay: Summary | None = None


@dataclass
class PhaseSeconds(Phases):
    data: float | None = None
    h2d: float | None = None
    forward: float | None = None
    backward: float | None = None
    sync: float | None = None
    optimizer: float | None = None
    graph_replay: float | None = None


@dataclass
class PhaseSeries(Phases):
    data: list[float] | None = None
    h2d: list[float] | None = None
    forward: list[float] | None = None
    backward: list[float] | None = None
    sync: list[float] | None = None
    optimizer: list[float] | None = None
    graph_replay: list[float] | None = None


@dataclass
class Bandwidth(Block):
    """One timed collective across ranks (comm.measure.rank_stats plus bus bandwidth)."""

    bytes: int | None = None
    calls: int | None = None
    time_s: float | None = None
    time_max_s: float | None = None
    slowest_rank: int | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None


# -------------------------------------------------------------------------------------- job and env


@dataclass
class JobInfo(Block):
    name: str | None = doc("Hydra's job name", default=None)
    num: int | None = doc("the job's number in its sweep", default=None)
    output_dir: str | None = None
    sweep_dir: str | None = None
    sweep_id: str | None = doc(
        "the sweep's id, shared by its jobs' records (results.callbacks)", default=None
    )
    slurm_job_id: str | None = None
    log: str | None = doc("the failing rank's log, when a failure named one", default=None)


@dataclass
class LinkCheck(Block):
    """The measured rate and round trip of an emulated link (launchers/link.py)."""

    method: str | None = None
    bytes: int | None = None
    seconds: float | None = None
    rate_bit_s: float | None = None
    of_rate: float | None = None
    of_payload_rate: float | None = None
    rtt_us: float | None = None
    rtt_min_us: float | None = None
    rtt_rounds: int | None = None


@dataclass
class Link(Block):
    """The network the ranks used (docs/links.md)."""

    emulated: bool | None = None
    source: str | None = None
    interface: str | None = None
    speed_bit_s: float | None = doc(
        "the interface's own speed, when not emulated and the kernel says", default=None
    )
    preset: str | None = None
    rate_bit_s: float | None = None
    payload_rate_bit_s: float | None = None
    payload_fraction: float | None = None
    latency_us: float | None = None
    latency_note: str | None = None
    qdisc: str | None = None
    shaped: str | None = None
    how: str | None = None
    mtu: int | None = None
    burst_bytes: int | None = None
    htb_quantum_bytes: int | None = None
    nodes: int | None = None
    ranks_per_node: int | None = None
    addresses: list[str] | None = None
    rendezvous: str | None = None
    build_s: float | None = None
    check: LinkCheck | None = None
    check_note: str | None = None
    warning: str | None = doc("the check transfer missed the rate it was shaped to", default=None)
    note: str | None = None


@dataclass
class Env(Block):
    """Where the ranks ran; every field None when they never got that far."""

    hostnames: list[str] | None = None
    cpu_count: int | None = None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    python: str | None = None
    devices: list[Any] | None = None
    device_count: int | None = None
    backend: str | None = None
    world_size: int | None = None
    vars: dict[str, str | None] | None = doc(
        "NCCL_*, GLOO_*, OMP_NUM_THREADS, MASTER_* as the ranks saw them", default=None
    )
    link: Link | None = doc(
        "the network the ranks used; None in records made before links were recorded", default=None
    )


# ---------------------------------------------------------------------------------- diagnosis block


@dataclass
class Noise(Block):
    noisy: bool | None = None
    floor: float | None = None
    rel_halfwidth: float | None = None
    ci_level: float | None = None
    n: int | None = None
    measured: float | None = None
    threshold: float | None = None
    of: str | None = None
    reasons: list[str] | None = None


@dataclass
class AccountingProbe(Block):
    exposed_s: float | None = None
    transfer_s: float | None = None
    wait_s: float | None = None


@dataclass
class AccountingRank0(Block):
    phases_s: PhaseSeconds | None = None
    phases_total_s: float | None = None
    barrier_s: float | None = None
    outside_s: float | None = None
    residual_s: float | None = None
    step_mean_s: float | None = None
    wall_per_step_s: float | None = None


@dataclass
class AccountingRank(Block):
    rank: int | None = None
    host: str | None = None
    work_s: float | None = None
    barrier_s: float | None = None
    step_mean_s: float | None = None
    wall_per_step_s: float | None = None


@dataclass
class AccountingSync(Block):
    phase: str | None = None
    compute_s: float | None = None
    exposed_s: float | None = None
    transfer_s: float | None = None


@dataclass
class AccountingWait(Block):
    rank: int | None = None
    phase: str | None = None
    at_barrier_s: float | None = None
    in_sync_s: float | None = None
    total_s: float | None = None


@dataclass
class Accounting(Block):
    """Where a step's time goes across ranks (diagnosis.accounting)."""

    basis: str | None = None
    complete: bool | None = None
    world_size: int | None = None
    step_s: float | None = None
    step_lo_s: float | None = None
    step_hi_s: float | None = None
    steps_per_s: float | None = None
    timer_median_s: float | None = None
    work_s: dict[str, float] | None = doc(
        "each rank's work per step, keyed by rank number", default=None
    )
    work_is_complete: bool | None = None
    late_rank: int | None = None
    rank0: AccountingRank0 | None = None
    ranks: list[AccountingRank] | None = None
    sync: AccountingSync | None = None
    wait: AccountingWait | None = None
    probe: AccountingProbe | None = None


@dataclass
class Comparison(Block):
    """The sync phase against what a reference (the microbenchmark, the link) says it could take."""

    method: str | None = None
    source: str | None = None
    reference: str | None = None
    bytes: int | None = None
    calls: int | None = None
    sync_s: float | None = None
    overlap_s: float | None = None
    achievable_s: float | None = None
    achievable_ci_lo: float | None = None
    achievable_ci_hi: float | None = None
    one_call_of_total_s: float | None = None
    efficiency: float | None = None
    efficiency_ci_lo: float | None = None
    efficiency_ci_hi: float | None = None
    efficiency_is: str | None = None
    sync_busbw_GBps: float | None = None
    reference_busbw_GBps: float | None = None


@dataclass
class Comparisons(Block):
    microbench: Comparison | None = None
    link: Comparison | None = None


@dataclass
class InsideNoise(Block):
    rule: str | None = None
    title: str | None = None
    effect: float | None = None
    under: str | None = None


@dataclass
class Evidence(Block):
    """A number a finding rests on, from the record, with its interval or the words saying why there
    is none."""

    name: str
    value: float | None
    unit: str = doc('printed after the number: "ms", "%", "GB/s", "x", ""', default="")
    ci_lo: float | None = doc("the 95% interval, in the value's unit", default=None)
    ci_hi: float | None = None
    source: str = doc('where in the record: "result.comm.exposed_s"', default="")
    note: str = doc("how the interval came about, or why there is none", default="")


@dataclass
class Saving(Block):
    """What a finding's fix saves. fraction: of `of` (the step the throughput implies, or the time
    per sample); lo/hi: a 95% interval (basis "interval": measured, or the what-if model's) or the
    range the arithmetic allows (basis "range"). None fraction: the record cannot say; `how` then
    says what would measure it. source: "model" (whatif), "rule" (a rule of thumb) or "measured";
    rule: the rule of thumb's own estimate where the model replaced it (the checked-estimates table
    sets both beside what a sweep measured). capped: why it is smaller than its own arithmetic (part
    of its time is counted in a higher-ranked finding)."""

    fraction: float | None
    seconds: float | None = None
    lo: float | None = None
    hi: float | None = None
    of: str = "the step"
    how: str = ""
    basis: str = "range"
    source: str = "rule"
    rule: dict[str, Any] | None = None
    capped: str = ""
    predicted: dict[str, Any] | None = doc(
        "source measured (diagnose.verify): the estimate the measurement replaced (fraction, lo, "
        "hi, "
        "source)",
        default=None,
    )

    @property
    def ranked(self) -> float | None:
        """What ranks the finding: the estimate, or for a rule's bound (fraction None, printed "at
        most", issue
        38) the rule's own figure, so that printing a best case as a bound changes no ranking."""
        if self.fraction is not None:
            return self.fraction
        if self.source == "rule" and self.hi is not None and self.rule:
            return self.rule.get("fraction")
        return None

    @property
    def strength(self) -> int:
        """2: an interval (measured or modelled); 1: a point, an arithmetic range or a rule's bound;
        0: not estimated."""
        if self.ranked is None:
            return 0
        if self.fraction is None:
            return 1
        return 2 if self.basis == "interval" and self.lo is not None and self.hi is not None else 1


@dataclass
class Folded(Block):
    """A finding another one explains (its time is the other's): kept with what it estimated, for
    the sweep's checked-estimates table."""

    rule: str
    title: str
    why: str
    command: str
    recommends: dict[str, Any] = field(default_factory=dict)
    saving: Saving | None = None
    predictions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Finding(Block):
    """One cause the diagnosis names (diagnosis/rules.py makes them, diagnosis.finding prints and
    ranks them)."""

    rule: str = doc('e.g. "exposed_comm.sync_path"')
    title: str = doc("one line")
    detail: str = doc("why, in words, from the numbers")
    evidence: list[Evidence] = doc("the numbers it rests on")
    matches: str = doc("the source case it matches (diagnosis.sources.cite)")
    saving: Saving | None = doc("what its fix saves; None: not estimated")
    command: str = doc("the exact command to try next")
    recommends: dict[str, Any] = doc(
        "the overrides `command` changes (checked against sweeps)", default_factory=dict
    )
    impact: float = doc(
        "share of the step the condition concerns (ranks findings without a saving)", default=0.0
    )
    first: bool = doc(
        "the noise: printed before everything else, not numbered as a cause", default=False
    )
    qualitative: bool = doc(
        "a configuration fact (e.g. the transport), not a timing: noise does not hide it",
        default=False,
    )
    pool: str = doc("the part of the step its saving comes from (diagnosis.run: Pools)", default="")
    fixes: list[dict[str, Any]] = doc(
        "the fixes of its cause the model may price (overrides)", default_factory=list
    )
    predictions: list[dict[str, Any]] = doc(
        "the what-if model's saving of each fix it priced", default_factory=list
    )
    folded: list[Folded] = doc(
        "findings this one explains (theirs is its time)", default_factory=list
    )
    cause: float | None = doc(
        "what the cause itself costs (share of the step), where it can be smaller than what its "
        "fix saves (accumulate=K also spreads the optimizer over K micro-batches)",
        default=None,
    )

    @property
    def effect(self) -> float:
        """The size findings are ranked by: the saving of the fix, else the share of the step it
        concerns."""
        return self.saving.ranked if self.saving and self.saving.ranked is not None else self.impact

    @property
    def material(self) -> float:
        """The size the noise floor is compared with: the effect, and no more than the cause itself
        costs."""
        return self.effect if self.cause is None else min(self.effect, self.cause)

    @property
    def strength(self) -> int:
        return self.saving.strength if self.saving is not None else 0


@dataclass
class DiagnosisBlock(Block):
    """The diagnosis made when the record was written (diagnosis.run): the noise (first, where it
    hides a finding), then the findings ranked by the saving of their fix."""

    version: int | None = None
    task: str | None = None
    error: str | None = doc("why the diagnosis could not run; the record is kept", default=None)
    noise: Noise | None = None
    findings: list[Finding] | None = None
    inside_noise: list[InsideNoise] | None = None
    ties: list[Any] | None = None
    notes: list[str] | None = None
    accounting: Accounting | None = None
    comparisons: Comparisons | None = None
    hta: dict[str, Any] | None = doc(
        "HolisticTraceAnalysis's cross-check of profiled runs (diagnosis.hta)", default=None
    )


# ------------------------------------------------------------------------------------------ results


@dataclass
class TaskResult(Block):
    """What every task's result has."""

    headline: dict[str, Any] | None = doc("the sweep table's columns: label -> value", default=None)
    diagnosis: DiagnosisBlock | None = None
    warnings: list[str] | None = doc(
        "what the run's console must warn about (e.g. a loss that is not finite)", default=None
    )
    signal: str | None = doc("interrupted runs: the signal's name", default=None)
    progress: dict[str, Any] | None = doc(
        "interrupted runs: how far rank 0 got (warmup_steps_done, measured_steps_done)",
        default=None,
    )
    nccl_transports: dict[str, int] | None = doc(
        "NCCL channel connections by transport (nccl.DEBUG=INFO): "
        "launchers/rank.py adds it to any task's result",
        default=None,
    )


# ---- task=train


@dataclass
class Measure(Block):
    """The timed window's stopping rule and what it reached (tasks/train/window.py)."""

    policy: str | None = None
    min_steps: int | None = None
    block_steps: int | None = None
    rel_ci_target: float | None = None
    max_steps: int | None = None
    max_s: float | None = None
    steps: int | None = None
    blocks: int | None = None
    window_s: float | None = None
    stopped_by: str | None = None
    precision_of: str | None = None
    rel_ci_halfwidth: float | None = None
    target_reached: bool | None = None
    agreement: str | None = None


@dataclass
class Blocks(Block):
    walls_s: list[float] | None = None
    steps: list[int] | None = None


@dataclass
class Throughput(Block):
    wall_s: float | None = None
    steps_per_s: float | None = None
    ci_lo: float | None = None
    ci_hi: float | None = None
    samples_per_s: float | None = None
    samples_ci_lo: float | None = None
    samples_ci_hi: float | None = None
    ci_level: float | None = None
    n_blocks: int | None = None
    method: str | None = None
    lag1: float | None = None
    n_eff: float | None = None
    batches: int | None = None
    blocks: Blocks | None = None
    basis: str | None = None


@dataclass
class SteadyState(Block):
    steady: bool | None = None
    drift: float | None = None
    p_value: float | None = None
    method: str | None = None
    of: str | None = None
    reason: str | None = None


@dataclass
class Threads(Block):
    intra_op: int | None = None
    inter_op: int | None = None
    OMP_NUM_THREADS: str | None = None


@dataclass
class RankWork(Block):
    """One rank's own work, measured inside the rank (tasks/train/stragglers.py)."""

    what: str | None = None
    steps: int | None = None
    wall_s: float | None = None
    wall_per_step_s: float | None = None
    step_mean_s: float | None = None
    cpu_s: float | None = None
    compute_s: float | None = None
    backward_compute_s: float | None = None
    backward_from: str | None = None
    data_s: float | None = None
    h2d_s: float | None = None
    forward_s: float | None = None
    optimizer_s: float | None = None
    outside_s: float | None = None
    phases_mean_s: PhaseSeconds | None = None
    ready_s: Summary | None = None
    host_busy: float | None = None
    runqueue_s: float | None = None
    main_runqueue_s: float | None = None
    voluntary_switches: int | None = None
    involuntary_switches: int | None = None
    torch_threads: int | None = None


@dataclass
class TrainRank(Block):
    rank: int | None = None
    host: str | None = None
    wall_s: float | None = None
    steps_per_s: float | None = None
    step_median_s: float | None = None
    step_p90_s: float | None = None
    phases_median: PhaseSeconds | None = None
    block_walls_s: list[float] | None = None
    cpu_s_per_step: float | None = None
    threads: Threads | None = None
    work: RankWork | None = None
    series: Series | None = doc(
        "this rank's per-step series (task=script, and task=train since 2026-12-07): the hiccup "
        "rule (diagnosis/rules.py) reads a rank's stalls every N steps in it",
        default=None,
    )


@dataclass
class BucketInfo(Block):
    count: int | None = None
    sizes_bytes: list[int] | None = None
    order: str | None = None
    rebuilt: bool | None = None


@dataclass
class CommStats(Block):
    """Gradient communication per step (tasks/train/result.py comm_stats)."""

    method: str | None = None
    bytes_per_step: float | None = None
    collectives_per_step: float | None = None
    time_s: float | None = None
    overlap_s: float | None = None
    exposed_s: float | None = None
    exposed_ci_lo: float | None = None
    exposed_ci_hi: float | None = None
    exposed_n: int | None = None
    backward_compute_s: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    buckets: BucketInfo | None = None
    vs_microbench: Comparison | None = None


@dataclass
class BucketCaps(Block):
    rule: str | None = None
    bytes: int | None = None
    first_bytes: int | None = None


@dataclass
class DdpInfo(Block):
    """The DDP wrapper as built (tasks/train/ddp.py describe)."""

    bucket_cap_mb: float | str | None = None
    bucket_caps: BucketCaps | None = None
    buckets: BucketInfo | None = None
    broadcast_buffers: bool | None = None
    find_unused_parameters: bool | None = None
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    serialized: bool | None = None
    comm_hook: str | None = None
    comm_hook_calls: int | None = None
    powersgd_iter: int | None = None
    powersgd_note: str | None = doc(
        "what PowerSGD's warm_start=false costs a GPU step", default=None
    )


@dataclass
class Accuracy(Block):
    final_loss: float | None = None
    grad_rel_error: float | None = None
    grad_error_steps: int | None = None


@dataclass
class H2d(Block):
    mode: str | None = None
    copies: bool | None = None
    note: str | None = None


@dataclass
class TimeBudget(Block):
    job_s: float | None = None
    before_task_s: float | None = None
    setup_s: float | None = None
    warmup_s: float | None = None
    window_s: float | None = None
    probes_s: float | None = None
    window_share: float | None = None
    launcher_wall_s: float | None = None
    launcher_cpu_s: float | None = None
    launcher_cpu_share: float | None = None


@dataclass
class Series(Block):
    step_time_s: list[float] | None = None
    phases: PhaseSeries | None = None
    tool_s: list[float] | None = doc(
        "task=script: host seconds in the tool's own hooks per measured step (the real calls "
        "they wrap left out): the attach cost's micro route (python -m tasks.script.cost)",
        default=None,
    )
    substituted_hook_s: list[float] | None = doc(
        "task=script: host seconds per measured step in the all-reduce the tool put in place of "
        "DDP's built-in (no hook asked for: the scaling by 1/world size and the process "
        "group's allreduce call): an upper bound of that substitution's cost, as the built-in "
        "does the same scaling and all-reduce in C++",
        default=None,
    )
    substituted_collective_s: list[float] | None = doc(
        "task=script: of substituted_hook_s, the calling thread's CPU seconds per measured step "
        "in the process group's allreduce call itself (its work queued, the flight recorder's "
        "entry): the call DDP's built-in makes the same from C++, so the substitution's own "
        "cost is substituted_hook_s less this (the scaling pass, the Python around the call, "
        "and any wait for a core or the GIL inside it)",
        default=None,
    )
    gc_s: list[float] | None = doc(
        "task=script: host seconds in Python's garbage collector per measured step (gc.callbacks): "
        "a full collection inside the window is milliseconds a step that neither the script's "
        "work nor the hooks account for (python -m tasks.script.cost reads it on both sides)",
        default=None,
    )


@dataclass
class MicrobenchSize(Block):
    bytes: int | None = None
    calls: int | None = None
    time_s: Summary | None = None
    busbw_GBps: float | None = None


@dataclass
class Microbench(Block):
    """The collectives microbenchmark run beside the training (diagnose.microbench)."""

    mode: str | None = None
    method: str | None = None
    timing: str | None = None
    budget_s: float | None = None
    run_estimate_s: float | None = None
    cost_s: float | None = None
    dtype: str | None = None
    iters: int | None = None
    warmup: int | None = None
    skipped: str | None = None
    sizes: list[MicrobenchSize] | None = None
    total: MicrobenchSize | None = None
    latency: MicrobenchSize | None = None


@dataclass
class StragglerRank(Block):
    rank: int | None = None
    host: str | None = None
    ready_s: float | None = None
    ready_ci: list[float | None] | None = None
    compute_s: float | None = None
    data_s: float | None = None
    h2d_s: float | None = None
    optimizer_s: float | None = None
    outside_s: float | None = None
    cpu_s: float | None = None
    runqueue_s: float | None = None
    involuntary_switches: int | None = None
    torch_threads: int | None = None


@dataclass
class Straggler(Block):
    """The rank the others wait for, and why (tasks/train/stragglers.py)."""

    rank: int | None = None
    host: str | None = None
    by_s: float | None = None
    share_of_step: float | None = None
    significant: bool | None = None
    mostly: str | None = None
    parts_s: dict[str, float] | None = doc(
        "compute, data, h2d, optimizer, outside: the straggler's lead in each", default=None
    )
    method: str | None = None
    per_rank: list[StragglerRank] | None = None


@dataclass
class Fault(Block):
    """What fault.* injects (tasks/train/faults.py): a delay on one rank, a sleep after every
    optimizer step."""

    delay_s: float | None = None
    delay_rank: int | None = None
    delay_at: str | None = None
    delay_every: int | None = doc(
        "delay_s on every N-th step only (null: every step)", default=None
    )
    sleep_s: float | None = None
    sleep_at: str | None = None
    sleep_rank: int | None = doc("null: every rank", default=None)


@dataclass
class InJobCheck(Block):
    """diagnose.verify (tasks/train/verify.py): the top finding's fix, run inside the job after the
    window in blocks interleaved with the run's own setting (same ranks, same data stream), so its
    saving is measured, not predicted. The diagnosis prints it in place of the estimate ("measured
    in this job")."""

    change: dict[str, Any] | None = doc(
        "the overrides checked (the top finding's recommends, or diagnose.verify_fix); null: "
        "nothing checked",
        default=None,
    )
    rule: str | None = doc("the finding whose fix was checked", default=None)
    saving: float | None = doc(
        "1 - time per sample with the fix / without it (per step: same batch)", default=None
    )
    ci_lo: float | None = doc(
        "95% interval of the saving: paired t on the rounds, AB/BA crossover from 5 rounds "
        "(stats.block_ab)",
        default=None,
    )
    ci_hi: float | None = None
    rounds: int = doc("interleaved rounds: one block of each setting, order alternating", default=0)
    block_steps: int = doc("timed steps per block", default=0)
    settle_steps: int = doc(
        "untimed steps at the head of every block, right after the switch (a shaped link's "
        "token bucket refilled while the other setting sent less, a wrapper's first step); 0 in "
        "records made before",
        default=0,
    )
    base_walls_s: list[float] = doc(
        "per round, the current setting's block wall clock, timed as the window's: the sum of "
        "its sub-blocks of measure.block_steps, each its slowest rank's",
        default_factory=list,
    )
    fix_walls_s: list[float] = doc(
        "per round, the fix's block wall clock, timed as base_walls_s", default_factory=list
    )
    cost_s: float | None = doc(
        "seconds the check added to the job (decision, set-up, warm-up, rounds)", default=None
    )
    budget_s: float | None = doc(
        "the budget of set-up, warm-up and rounds: diagnose.verify_budget x the window, at "
        "least diagnose.verify_min_s",
        default=None,
    )
    decide_s: float | None = doc(
        "of cost_s, rank 0's diagnosis that chose the fix (outside the budget)", default=None
    )
    stopped: str | None = doc(
        "why the rounds ended: narrow (the interval at most width_target wide, from 6 rounds), "
        "budget, max_s (past the budget while wider, diagnose.verify_max_s), max_rounds; null in "
        "records made before",
        default=None,
    )
    width_target: float | None = doc(
        "diagnose.verify_width: the interval width on the saving that ends the rounds",
        default=None,
    )
    method: str = ""
    skipped: str | None = doc("why no check ran (null: it ran)", default=None)


@dataclass
class PrecisionFlags(Block):
    float32_matmul_precision: str | None = None
    matmul_allow_tf32: bool | None = None
    cudnn_allow_tf32: bool | None = None


@dataclass
class DeviceLayer(Block):
    kind: str | None = None
    window_sync_check: str | None = None
    window_unchecked_because: str | None = None
    checked_ops: int | None = None
    streams: int | None = None
    copies: int | None = None
    blocking_copies: int | None = None
    waits: int | None = None
    record_streams: int | None = None
    freed_without_record_stream: int | None = None
    cross_stream_uses: int | None = None
    replays: int | None = None
    comm_hook_device_syncs: int | None = None


@dataclass
class ReadyMode(Block):
    forward_s: list[float] | None = None
    backward_s: list[float] | None = None
    ready_s: list[list[float]] | None = doc("per step, each gradient's ready time", default=None)


@dataclass
class ReadyModes(Block):
    alone: ReadyMode | None = None
    with_sync: ReadyMode | None = None


@dataclass
class PowersgdCosts(Block):
    rank: int | None = None
    skipped: str | None = doc(
        "why the PowerSGD costs were not timed (over the probe's budget)", default=None
    )
    matrices: int | None = None
    min_compression_rate: float | None = None
    s: list[float] | None = None
    pre_s: list[float] | None = None
    mid_s: list[float] | None = None
    post_s: list[float] | None = None
    fresh_s: list[float] | None = doc(
        "the hook's clone and new error written into freshly allocated memory", default=None
    )
    touched_s: list[float] | None = doc(
        "the same writes into touched buffers: fresh_s less this is the fresh pages' cost",
        default=None,
    )
    fresh_bytes: int | None = doc("bytes each of fresh_s and touched_s wrote", default=None)


@dataclass
class HookCosts(Block):
    cast_timed: str | None = None
    cast_bf16_s: list[float] | None = None
    cast_fp16_s: list[float] | None = None
    copy_in_s: list[float] | None = None
    copy_out_s: list[float] | None = None
    powersgd: PowersgdCosts | None = None


@dataclass
class GradReady(Block):
    """When each gradient is ready in backward, and what the comm hooks cost
    (tasks/train/grad_ready.py)."""

    method: str | None = None
    timing: str | None = None
    dtype: str | None = None
    names: list[str] | None = None
    shapes: list[list[int]] | None = None
    numel: list[int] | None = None
    element_size: list[int] | None = None
    order: list[int] | None = None
    modes: ReadyModes | None = None
    costs: HookCosts | None = None


@dataclass
class TrainResult(TaskResult):
    """task=train: one DDP training run's timed window."""

    device: str | None = None
    device_name: str | None = None
    world_size: int | None = None
    backend: str | None = None
    sync: str | None = None
    optim: str | None = None
    bucket_mb: float | str | None = doc(
        "bucket_cap_mb as DDP got it; 'default' when left to DDP", default=None
    )
    precision: str | None = None
    forward_dtype: str | None = None
    precision_flags: PrecisionFlags | None = None
    cuda_graphs: bool | None = None
    batch_per_rank: int | None = None
    global_batch: int | None = None
    accumulate: int | None = None
    effective_batch: int | None = None
    warmup_steps: int | None = None
    steps: int | None = None
    timing: bool | None = None
    profiled: bool | None = None
    measure: Measure | None = None
    throughput: Throughput | None = doc(
        "from the timed blocks' walls (slowest rank per block); lag1 and n_eff: "
        "the blocks' serial correlation and effective sample size",
        default=None,
    )
    step_time_s: Summary | None = doc(
        "rank 0's step times; ci_lo/ci_hi null below 10 steps", default=None
    )
    phases: PhaseSummaries | None = doc(
        "rank 0's time per step phase, each a Summary", default=None
    )
    steady: bool | None = doc(
        "true / false / null (too few steps to test, or a drift over 2% the test "
        "cannot call: unknown)",
        default=None,
    )
    steady_state: SteadyState | None = None
    per_rank: list[TrainRank] | None = None
    slowest_rank: int | None = None
    comm: CommStats | None = doc("null for sync=local", default=None)
    ddp: DdpInfo | None = None
    accuracy: Accuracy | None = None
    h2d: H2d | None = None
    time_budget: TimeBudget | None = None
    series: Series | None = doc("rank 0, per measured step", default=None)
    microbench: Microbench | None = None
    straggler: Straggler | None = None
    fault: Fault | None = None
    device_layer: DeviceLayer | None = None
    grad_ready: GradReady | None = doc(
        "the what-if model's probe, untimed, after the window", default=None
    )
    verify: InJobCheck | None = doc(
        "diagnose.verify: the top finding's fix measured in this job", default=None
    )


@dataclass
class ScriptResult(TrainResult):
    """task=script: the user's own training script, its measured steps mapped onto task=train's
    figures (tasks/script/result.py): the same phases, throughput, per-rank work and comm block."""

    script: dict[str, Any] | None = doc(
        "the script: path, args, how it ended (finished, exited 0, stopped at "
        "script.max_steps), steps_taken, and each DDP it built (what it asked for, "
        "the knobs applied, its own comm hook)",
        default=None,
    )


# ---- task=train_reference (a maintainer's task: python -m tasks.train.harness_cost --reference)


@dataclass
class TrainReferenceResult(TaskResult):
    """task=train_reference: a hand-written DDP loop's throughput, the yardstick for the harness's
    own cost."""

    steps: int | None = None
    global_batch: int | None = None
    world_size: int | None = None
    throughput: Throughput | None = None
    precision: str | None = None
    precision_flags: PrecisionFlags | None = None
    threads: list[Threads] | None = None
    cpu_s_per_step: list[float] | None = None


# ---- task=collectives


@dataclass
class CollectiveRow(Block):
    op: str | None = None
    mode: str | None = None
    bytes: int | None = None
    requested_bytes: int | None = None
    count: int | None = None
    dtype: str | None = None
    redop: str | None = None
    root: int | None = None
    time_us: float | None = None
    time_max_us: float | None = None
    slowest_rank: int | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    wrong: int | None = None
    time_median_us: float | None = None
    time_ci_lo_us: float | None = None
    time_ci_hi_us: float | None = None
    time_ci_level: float | None = None
    blocks: int | None = None


@dataclass
class CollectivesResult(TaskResult):
    """task=collectives: nccl-tests style rows, one per (op, size, mode)."""

    device: str | None = None
    device_name: str | None = None
    backend: str | None = None
    world_size: int | None = None
    dtype: str | None = None
    reduce_op: str | None = None
    ops: list[str] | None = None
    modes: list[str] | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    check_iters: int | None = None
    timing: str | None = None
    notes: list[str] | None = None
    rows: list[CollectiveRow] | None = None
    wrong_total: int | None = None
    time_per_rank_us: list[list[float]] | None = doc("aligned with rows", default=None)
    avg_busbw_GBps: float | None = None


# ---- task=grad_sync


@dataclass
class SyncMethod(Bandwidth):
    """One way to all-reduce the model's gradients (tasks/grad_sync.py)."""

    how: str | None = None
    unsupported: str | None = None
    wrong: int | None = None
    phases_s: dict[str, float] | None = None
    bucket_mb: float | str | None = None
    bucket_rule: str | None = None
    bucket_bytes: list[int] | None = None
    bucket_params: list[list[str]] | None = None
    order: str | None = None


@dataclass
class SyncMethods(Block):
    per_param: SyncMethod | None = None
    coalesced: SyncMethod | None = None
    flat: SyncMethod | None = None
    bucketed: SyncMethod | None = None
    microbench: SyncMethod | None = None


@dataclass
class ParamSync(Bandwidth):
    name: str | None = None
    group: str | None = None
    shape: list[int] | None = None
    numel: int | None = None


@dataclass
class GroupSync(Block):
    group: str | None = None
    tensors: int | None = None
    bytes: int | None = None
    per_param_s: float | None = None
    microbench_s: float | None = None
    microbench_busbw_GBps: float | None = None
    ratio: float | None = None


@dataclass
class LatencyFit(Block):
    alpha_s: float | None = None
    beta_GBps: float | None = None
    points: int | None = None
    weights: str | None = None


@dataclass
class GradSyncResult(TaskResult):
    """task=grad_sync: per-parameter vs bucketed gradient all-reduce."""

    model: str | None = None
    params: int | None = None
    param_tensors: int | None = None
    total_bytes: int | None = None
    dtype: str | None = None
    reduce_op: str | None = None
    world_size: int | None = None
    backend: str | None = None
    device: str | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    timing: str | None = None
    per_param: list[ParamSync] | None = None
    groups: list[GroupSync] | None = None
    methods: SyncMethods | None = None
    latency: Bandwidth | None = None
    fit: LatencyFit | None = None
    explanation: list[str] | None = None


# ---- task=pair_groups


@dataclass
class PairRank(Block):
    rank: int | None = None
    host: str | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    group_setup_s: float | None = None
    block_us_per_op: list[float] | None = None
    host_busy_fraction: float | None = None
    voluntary_switches: int | None = None
    involuntary_switches: int | None = None
    torch_threads: int | None = None


@dataclass
class PairGroupsResult(TaskResult):
    """task=pair_groups: many two-rank process groups all-reducing at once (the gloo pair-groups
    thread)."""

    device: str | None = None
    backend: str | None = None
    world_size: int | None = None
    pairs: int | None = None
    shape: list[int] | None = None
    async_op: bool | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    cpu_count: int | None = None
    ranks_per_cpu: float | None = None
    omp_num_threads: str | None = None
    torch_threads: int | None = None
    hosts: list[str] | None = None
    per_rank: list[PairRank] | None = None
    per_op_us: Summary | None = None
    per_op_us_rank0: float | None = None
    rank0_s: float | None = None
    slowest_s: float | None = None
    slowest_rank: int | None = None
    group_setup_s_rank0: float | None = None
    cpu_s_total: float | None = None
    cpu_busy_fraction: float | None = None
    host_busy_fraction: float | None = None
    voluntary_switches: int | None = None
    involuntary_switches: int | None = None
    explanation: list[str] | None = None


RESULT_TYPES: dict[str, type[TaskResult]] = {
    "train": TrainResult,
    "collectives": CollectivesResult,
    "grad_sync": GradSyncResult,
    "pair_groups": PairGroupsResult,
    "train_reference": TrainReferenceResult,
    "script": ScriptResult,
}


def result_type(task: str | None) -> type[TaskResult]:
    """The result type of a task; a task this tool does not know reads as TaskResult (its figures in
    .extra)."""
    return RESULT_TYPES.get(task or "", TaskResult)


def result_from_dict(task: str | None, d: Any, where: str = "result") -> TaskResult | None:
    """A task's result from its JSON object (None stays None)."""
    if d is None:
        return None
    return result_type(task).from_dict(d, where)


def schema_markdown(record_cls: type) -> str:
    """docs/record.md's schema part: the record's fields, what every result has, and each task's
    result, generated from these classes."""
    import dataclasses

    seen: set = set()
    common = tuple(f.name for f in dataclasses.fields(TaskResult))
    out = [
        "## The record",
        "",
        *schema_lines(record_cls, seen=seen),
        "",
        "## result: what every task's has (TaskResult)",
        "",
        *schema_lines(TaskResult, seen=seen),
        "",
    ]
    for task, cls in RESULT_TYPES.items():
        out += [
            f"## result of task={task} ({cls.__name__}; besides the above)",
            "",
            f"{' '.join((cls.__doc__ or '').split())}",
            "",
            *schema_lines(cls, seen=seen, skip=common),
            "",
        ]
    return "\n".join(out)
