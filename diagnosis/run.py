"""diagnose(record): the rules over one run record, settled into one ranked list in which every
millisecond counts once.

The step is accounted for first (diagnosis.accounting), the rules (diagnosis.rules) each return a
finding or None, the what-if model (whatif.api) estimates the saving of the fixes it covers, and
the findings are settled in the order of their savings, each drawing from the part of the step it
acts on, so the savings never add up past the step. Ties, the noise floor and "also explains":
docs/diagnosis.md, "From rules to one ranked list".
"""

from __future__ import annotations

from dataclasses import replace

from base.record import Record, setting
from base.record_types import Evidence, Finding, Folded, Saving, TrainResult
from diagnosis.accounting import phase_seconds
from diagnosis.finding import near_tie, rank_findings
from diagnosis.rules import noise_rule, rules_for
from diagnosis.view import RunView, as_record
from stats.fmt import ms

# 2: CPU contention, per_param on full cores, lower-bound efficiency; 3: no next command repeats the
# run; 4: bucket=null (DDP's default) recommended, exposed comm from one probe step never acted on
# alone, busy-host stragglers, PowerSGD's own sync, efficiencies over 100% not measurable; 5: the
# step accounted for (throughput's step, waits for a late peer are the straggler's), disjoint
# findings (pools, folding), the what-if model's savings, busy-host finding, noise said only where
# it hides a finding
VERSION = 5
MODEL_SAMPLES = 400  # Monte Carlo draws per prediction: a diagnosis runs at the end of every run


def diagnose(
    record: Record | dict,
    nccl_tests: dict | None = None,
    hta: bool = True,
    model: bool = True,
    hidden_out: list | None = None,
) -> dict:
    """The record's diagnosis, as the JSON object `result.diagnosis` holds
    (base.record_types.DiagnosisBlock). hidden_out: a list that receives the findings the noise
    hides (top_fix's candidates after the named ones)."""
    from comm import nccl_tests as nt
    from comm.efficiency import versus_link

    record = as_record(record)
    result = record.result if isinstance(record.result, TrainResult) else TrainResult()
    comm = result.comm
    comparisons = {}
    if comm is not None and comm.vs_microbench is not None and comm.vs_microbench.to_dict():
        # records from before overlap_s was kept beside it: the comm section has it
        comparisons["microbench"] = {"overlap_s": comm.overlap_s, **comm.vs_microbench.to_dict()}
    if nccl_tests is not None:
        vs = nt.versus(record, nccl_tests)
        if vs:
            comparisons["nccl_tests"] = vs
    link = versus_link(record.env.link, comm, int(getattr(record.result, "world_size", None) or 1))
    if link is not None and result.sync != "local":
        comparisons["link"] = (
            link  # behind an emulated link: the reference when nothing was measured
        )
    v = RunView(
        record,
        comparisons.get("microbench") or comparisons.get("nccl_tests") or comparisons.get("link"),
    )
    noise = v.noise()
    found: list[Finding] = []
    notes: list[str] = []
    for rule in rules_for(v.task):
        try:
            f = rule(v)
        except Exception as e:  # noqa: BLE001 - one rule that cannot read a record never costs the others
            notes.append(
                f"rule {rule.__name__} could not read this record ({type(e).__name__}: {e})"
            )
            continue
        if f is not None:
            found.append(f)
    if model and found:
        notes += estimate_with_model(v, found)
    measured_in_job(v, found)
    bound_rules(v, found)
    floor, threshold = noise.floor, noise.threshold
    settled = settle(v, found, floor)
    named = [f for f in settled if f.qualitative or f.material > floor or _shown(f, threshold)]
    hidden = [f for f in settled if f not in named]
    if hidden_out is not None:
        hidden_out += sorted(hidden, key=lambda f: -f.material)
    ranked = rank_findings(named, tie=floor)
    first = noise_rule(v, noise, hidden)
    out = {
        "version": VERSION,
        "task": v.task,
        "findings": [f.to_dict() for f in ([first] if first else []) + ranked],
        "inside_noise": [
            {
                "rule": f.rule,
                "effect": f.material,
                "title": f.title,
                "under": "noise" if f.material > threshold else "threshold",
            }
            for f in hidden
        ],
        "ties": ties(ranked, floor),
        "noise": noise.to_dict(),
        "accounting": v.acc.to_dict() if v.acc is not None else None,
        "comparisons": comparisons,
        "notes": notes + _notes(v, comparisons),
    }
    if hta and result.profiled and setting(v.config, "diagnose.hta", True):
        from diagnosis import hta as hta_check

        out["hta"] = hta_check.cross_check(record)
    return out


def top_fix(record: Record | dict, switchable=lambda change: True) -> tuple[dict, str] | None:
    """(recommends, rule) of the first finding whose fix `switchable` accepts: the named findings in
    rank order, then those the noise hides, largest first (a measurement may show what the noise
    hid); else the top finding's own, or None. What diagnose.verify measures in the job
    (tasks/train/verify.py asks through launchers.rank, before the record is written)."""
    hidden: list[Finding] = []
    named = [
        f for f in diagnose(record, hta=False, hidden_out=hidden)["findings"] if not f.get("first")
    ]
    candidates = [(dict(f.get("recommends") or {}), f["rule"]) for f in named] + [
        (dict(f.recommends or {}), f.rule) for f in hidden
    ]
    for change, rule in candidates:
        if change and switchable(change):
            return change, rule
    return candidates[0] if named else None


def _shown(f: Finding, threshold: float) -> bool:
    """A saving this job measured (measured_in_job: its fix and the current setting in
    interleaved blocks, paired) whose interval lies above the threshold is its own evidence: the
    window's noise floor does not hide it. A window whose step shifted level part-way
    (small_buckets behind a shaped link, 2026-12-07: 71 ms a step for two thirds of it, 47 ms
    after) had a floor of 49%, which hid its fix measured at 49.1% [43.8, 53.9] over 25
    interleaved rounds: the pairing cancels the shift the floor is made of."""
    s = f.saving
    return (
        f.pool == "own"
        and s is not None
        and (s.source, s.basis) == ("measured", "interval")
        and s.lo is not None
        and s.lo > threshold
    )


def measured_in_job(v: RunView, found: list[Finding]) -> None:
    """The finding whose fix the job measured (result.verify) takes the measurement as its saving,
    the estimate kept beside it (Saving.predicted): a measured saving with its interval beats any
    prediction of it."""
    check = getattr(v.record.result, "verify", None)
    if check is None or check.saving is None or not check.change:
        return
    for f in found:
        changes = [f.recommends] + [p["change"] for p in f.predictions]
        if f.rule != check.rule or dict(check.change) not in changes:
            continue
        before = f.saving
        lo, hi = check.ci_lo, check.ci_hi
        interval = f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None and hi is not None else ""
        change = " ".join(f"{k}={val}" for k, val in check.change.items())
        if (
            lo is not None
            and hi is not None
            and hi - lo > 4 * SPREAD
            and before is not None
            and before.fraction is not None
        ):  # too noisy a check: the cause stays named on its estimate, the check beside it
            f.saving = replace(
                before,
                how=f"{before.how}; its fix ({change}) measured in this job: "
                f"{100 * check.saving:.1f}%{interval} over {check.rounds} rounds, an interval too "
                "wide to replace the estimate",
            )
            return
        f.saving = Saving(
            check.saving,
            v.step_s * check.saving if v.step_s else None,
            lo,
            hi,
            of="the time per sample",
            basis="interval",
            source="measured",
            how=f"measured in this job: {100 * check.saving:.1f}%{interval} ({check.rounds} "
            "interleaved "
            f"rounds of {check.block_steps} step(s) with and without {change}"
            + (
                f" (+{check.settle_steps} untimed after each switch)"
                if getattr(check, "settle_steps", 0)
                else ""
            )
            + f", paired t; the check added {check.cost_s:.3g} s to the job, {_budget(v, check)}; "
            "diagnose.verify=false skips it)",
            rule=before.rule if before is not None else None,
            predicted=None
            if before is None or before.fraction is None
            else {
                "fraction": before.fraction,
                "lo": before.lo,
                "hi": before.hi,
                "source": before.source,
            },
        )
        f.pool = "own"
        if dict(check.change) != f.recommends:
            f.recommends, f.command = dict(check.change), v.command(dict(check.change))
        return


SPREAD = 0.10  # a saving is estimated when it is known within +-10 points of the step


def measure_command(v: RunView, change: dict) -> str:
    """The sweep that measures `change` against this run: both settings, interleaved rounds
    (repeats=3)."""
    if not change:
        return "python train.py -m ... repeats=3 (this run and its fix, interleaved)"
    both = {
        k: f"{_now(v, k)},{val}" if _now(v, k) is not None else val for k, val in change.items()
    }
    cmd = v.command({**both, "repeats": 3})
    return cmd if " -m " in cmd else cmd.replace("python train.py ", "python train.py -m ", 1)


def _now(v: RunView, key: str):
    val = setting(v.config, key if key != "optim" else "optim.name")
    return str(val).lower() if isinstance(val, bool) else val


def _budget(v: RunView, check) -> str:
    """The check's budget, as the output states it (diagnose.verify_min_s where the run had it)."""
    if check.budget_s is None:
        return "no budget recorded"
    floor = setting(v.config, "diagnose.verify_min_s")
    return (
        f"its budget {check.budget_s:.3g} s (diagnose.verify_budget of the window"
        + (f", at least diagnose.verify_min_s={floor:g} s" if floor else "")
        + (f", besides {check.decide_s:.2g} s choosing the fix" if check.decide_s else "")
        + ")"
        + _stopped(check)
    )


def _stopped(check) -> str:
    """What ended the rounds (result.verify.stopped; records before it have none): the check may
    run past its budget while its interval is wide, and a reader of "added 12 s, its budget 3 s"
    should see why."""
    width = getattr(check, "width_target", None)
    wide = f"{100 * width:g} points" if width else "diagnose.verify_width"
    return {
        "narrow": f"; the rounds ended when the interval was at most {wide} wide",
        "max_s": f"; the rounds went past the budget while the interval was wider than {wide}, "
        "until diagnose.verify_max_s",
        "max_rounds": f"; the rounds went on while the interval was wider than {wide}, to the "
        "most the check runs",
    }.get(getattr(check, "stopped", None) or "", "")


def bound_rules(v: RunView, found: list[Finding]) -> None:
    """A rule of thumb's best case is a bound, never an estimate: a rule's saving at the top of a
    range no wider than 2 x SPREAD becomes the range's middle; where the range is wider, the
    finding says "at most X%", that it cannot be estimated within +-10 points from this record, and
    the command that measures it (the in-job check, diagnose.verify, where the fix can be switched;
    an interleaved sweep otherwise). A modelled or measured saving with an interval wider than that
    says so too."""
    for f in found:
        s = f.saving
        if s is None or s.fraction is None:
            continue
        lo = s.lo if s.lo is not None else s.fraction
        hi = s.hi if s.hi is not None else s.fraction
        wide = hi - lo > 2 * SPREAD
        cmd = measure_command(v, f.recommends)
        if s.source == "rule" and not wide and s.hi is not None and s.fraction >= s.hi - 1e-9:
            # a narrow range: its middle is within +-SPREAD of every value in it
            f.saving = replace(
                s,
                fraction=(lo + hi) / 2,
                seconds=v.step_s * (lo + hi) / 2 if v.step_s else None,
                how=f"{s.how}; the middle of its range (its best case {100 * hi:.0f}% is a bound)",
                rule=s.rule or _as_rule(s),
            )
        elif s.source == "rule" and wide:
            f.saving = Saving(
                None,
                lo=lo,
                hi=hi,
                of=s.of,
                how=f"(a rule of thumb's best case: {s.how}); not estimated within "
                f"+-{100 * SPREAD:.0f} points from this record: measure it with {cmd}",
                basis="range",
                source="rule",
                rule=_as_rule(s),
            )
        elif wide and s.source == "measured" and "measured in this job" in s.how:
            f.saving = replace(
                s,
                how=f"{s.how}; its interval is wider than +-{100 * SPREAD:.0f} points: a larger "
                f"diagnose.verify_budget or steps= narrows it",
            )
        elif wide and s.source != "measured":
            f.saving = replace(
                s,
                how=f"{s.how}; its interval is wider than +-{100 * SPREAD:.0f} points: measure it "
                f"with {cmd}",
            )


# -------------------------------------------------------------------------------- the what-if model
def model_profile(record):
    """(the what-if model's profile of this record, or None; why not). The model prices a change
    only where it has the run's link: the on-rank microbenchmark (or a one-rank run, which has no
    link to price); a link taken from the sync's own span (no microbenchmark) is a lower bound that
    extrapolates badly to other byte counts."""
    from whatif.api import profile_of

    try:
        prof = profile_of(record)
    except Exception as e:  # noqa: BLE001 - the model cannot read every record
        return None, f"the what-if model cannot read this record ({e})"
    if prof.world_size > 1 and (prof.link is None or prof.link.name.startswith("this run's sync")):
        return None, (
            "the what-if model needs the run's link, and this record has no on-rank microbenchmark "
            "(diagnose.microbench=true measures it)"
        )
    return prof, None


def model_saving(record, change: dict) -> dict | None:
    """whatif.api.saving of `change` on this record, None where the model does not price it."""
    from whatif.api import saving
    from whatif.step import KNOB_ALIASES

    if not change or not all(k in KNOB_ALIASES for k in change):
        return None
    prof, _ = model_profile(record)
    if prof is None:
        return None
    try:
        p = saving(prof, change, samples=MODEL_SAMPLES)
    except Exception:  # noqa: BLE001 - a knob value the model refuses
        return None
    return p if p["fraction"] is not None else None


def estimate_with_model(v: RunView, found: list[Finding]) -> list[str]:
    """Each finding's saving from the what-if model where it covers the finding's fixes
    (Finding.fixes, else its recommended overrides): the best of them, which then becomes the next
    command; the rule of thumb's estimate stays beside it (Saving.rule). Elsewhere the rule's
    estimate stays and says the model does not cover that fix. Returns notes."""
    from whatif.api import saving
    from whatif.step import KNOB_ALIASES

    priced = {id(f): [c for c in _fixes(f) if all(k in KNOB_ALIASES for k in c)] for f in found}
    prof, why = model_profile(v.record) if any(priced.values()) else (None, None)
    for f in found:
        if f.rule == "oversubscription.contention" and prof is not None:
            _contention_cost(v, f, prof)
        options = priced[id(f)] if prof is not None else []
        preds = []
        for change in options:
            try:
                p = saving(prof, change, samples=MODEL_SAMPLES)
            except Exception:  # noqa: BLE001 - a knob value the model refuses: that option only
                continue
            if p["fraction"] is not None:
                preds.append((change, p))
        if not preds:
            fixes = sorted({k for c in _fixes(f) for k in c})
            _rule_only(
                f,
                why
                or (
                    "the what-if model does not cover " + ", ".join(fixes)
                    if fixes
                    else "the what-if model does not cover this fix"
                ),
            )
            continue
        change, best = max(preds, key=_preference)
        rule = _as_rule(f.saving)
        if rule is not None:
            rule["recommends"] = dict(f.recommends)
        f.saving = Saving(
            best["fraction"],
            v.step_s * best["fraction"] if v.step_s else None,
            best["lo"],
            best["hi"],
            of="the time per sample",
            basis="interval",
            source="model",
            how=best["how"]
            + (f"; the best of the {len(preds)} fixes it priced" if len(preds) > 1 else ""),
            rule=rule,
        )
        f.pool = "own"  # the model prices the whole step of the fix, not one part of it
        f.predictions = [
            {"change": c, "fraction": p["fraction"], "lo": p["lo"], "hi": p["hi"]} for c, p in preds
        ]
        if change != f.recommends:
            f.recommends, f.command = change, v.command(change)
    return [why] if why else []


def _contention_cost(v: RunView, f: Finding, prof) -> None:
    """The cause's own size: the step with compute and all-reduce not slowing each other
    (whatif.api.contention_cost); 0 where the run's timers show no such slow-down."""
    from whatif.api import contention_cost

    try:
        c = contention_cost(prof, samples=MODEL_SAMPLES)
    except Exception:  # noqa: BLE001 - the rule's own evidence stands
        return
    f.cause = max(0.0, c["fraction"] or 0.0) if c else 0.0
    f.evidence.append(
        Evidence(
            "what the contention costs (the what-if model: compute and all-reduce not slowing each "
            "other)",
            100 * f.cause,
            "%",
            100 * c["lo"] if c and c["lo"] is not None else None,
            100 * c["hi"] if c and c["hi"] is not None else None,
            "whatif.api.contention_cost",
            (c["how"] if c else "no slow-down calibrated on this run's DDP timers"),
        )
    )


def _preference(pred: tuple[dict, dict]) -> tuple[bool, float]:
    """Which priced fix becomes the next command: one that keeps the effective batch (accumulate=K
    trains with K times the batch per optimizer step) before one that does not, when it saves
    anything; then the larger saving."""
    change, p = pred
    return ("accumulate" not in change and p["fraction"] > 0, p["fraction"])


def _fixes(f: Finding) -> list[dict]:
    return [c for c in f.fixes if c] or ([f.recommends] if f.recommends else [])


def _rule_only(f: Finding, why: str) -> None:
    if f.saving is not None and f.saving.fraction is not None and f.saving.source == "rule":
        f.saving.how += f" (a rule of thumb: {why})"


def _as_rule(s: Saving | None) -> dict | None:
    if s is None or s.fraction is None:
        return None
    return {"fraction": s.fraction, "lo": s.lo, "hi": s.hi, "how": s.how}


# -------------------------------------------------------------------------------- disjoint findings
class Pools:
    """The step's parts a finding's saving can come from, nested so that they add up to the step:

        step = wait (rank 0's wait for a late peer) + own (rank 0's own time)
        own  = input (data + H2D) + exposed (communication after the wait) + compute (the rest)

    A claim takes from its part and from every part above it, so no two findings spend the same
    millisecond."""

    PARENT = {"wait": "step", "own": "step", "input": "own", "exposed": "own", "compute": "own"}

    def __init__(self, v: RunView, found: list[Finding] = ()):
        T = v.step_s or 0.0
        wait = (
            v.wait()
        )  # rank 0's wait for a late peer; the others' wait when rank 0 is the late one
        late = max(
            (
                f.saving.seconds or 0.0
                for f in found
                if f.pool == "wait" and f.saving is not None and f.saving.seconds is not None
            ),
            default=0.0,
        )
        w = min(T, max(wait.total_s if wait else 0.0, late))
        phases = phase_seconds(v.acc)
        inp = phases.get("data", 0.0) + phases.get("h2d", 0.0)
        exposed = v.exposed()
        ex = exposed.median if exposed else 0.0
        if not exposed and v.train.sync in ("per_param", "flat"):
            ex = phases.get("sync", 0.0)
        own = T - w
        self.left = {
            "step": T,
            "wait": w,
            "own": own,
            "input": min(inp, own),
            "exposed": min(ex, own),
            "compute": max(0.0, own - inp - ex),
        }
        self.by: dict[str, list[Finding]] = {k: [] for k in self.left}

    def path(self, pool: str) -> list[str]:
        out = [pool]
        while out[-1] in self.PARENT:
            out.append(self.PARENT[out[-1]])
        return out

    def claim(self, f: Finding, seconds: float) -> tuple[float, Finding | None]:
        """(what it gets, the finding that spent the rest of its part when it gets less)."""
        path = self.path(f.pool if f.pool in self.left else "own")
        got = max(0.0, min(seconds, *(self.left[p] for p in path)))
        spent = None
        if got < seconds:
            tight = min(
                path, key=lambda p: self.left[p]
            )  # the part that ran out, and who spent it first
            spent = self.by[tight][0] if self.by[tight] else None
        for p in path:
            self.left[p] -= got
            self.by[p].append(f)
        return got, spent


def settle(v: RunView, found: list[Finding], floor: float) -> list[Finding]:
    """Savings capped so that they never add up to more than the step; a finding explained by a
    higher one (its part of the step spent there, or its next command already given there) folded
    into that one."""
    pools = Pools(v, found)
    T = v.step_s
    kept: list[Finding] = []
    for f in rank_findings(found, tie=floor):
        same = next((k for k in kept if k.command == f.command), None)
        if same is not None:
            _fold(same, f, "the same next command")
            continue
        s = f.saving
        if T and s is not None and s.ranked is not None and f.pool:
            want = max(0.0, s.ranked * T)  # a rule's bound claims what its rule's figure says
            got, spent = pools.claim(f, want)
            if got < want - 1e-9 * T:
                share = got / T
                if spent is not None and share <= floor:
                    _fold(spent, f, f"its {ms(want)} ms per step are counted there")
                    continue
                if s.fraction is None:  # a bound: lowered to what is left of its part
                    f.saving = replace(
                        s,
                        hi=min(s.hi, share),
                        rule={**s.rule, "fraction": share},
                        capped=f"capped at {100 * share:.1f}%: the rest is counted in a finding "
                        "above"
                        if spent is not None
                        else f"capped at {100 * share:.1f}%: what is left of the step",
                    )
                    kept.append(f)
                    continue
                f.saving = replace(
                    s,
                    fraction=share,
                    seconds=got,
                    lo=min(s.lo, share) if s.lo is not None else None,
                    hi=min(s.hi, share) if s.hi is not None else None,
                    capped=(
                        f"capped at {100 * share:.1f}%: the rest of its {ms(want)} ms per step is "
                        f"counted in a finding above"
                        if spent is not None
                        else f"capped at {100 * share:.1f}%: what is left of the step"
                    ),
                )
        kept.append(f)
    return kept


def _fold(into: Finding, f: Finding, why: str) -> None:
    into.folded.append(
        Folded(
            rule=f.rule,
            title=f.title,
            why=why,
            command=f.command,
            recommends=f.recommends,
            saving=f.saving,
            predictions=f.predictions,
        )
    )


def ties(ranked: list[Finding], floor: float) -> list[dict]:
    """Neighbours in the ranking whose savings differ by less than the noise floor and whose
    evidence is equally strong: this record cannot tell which saves more."""
    out = []
    for i in range(len(ranked) - 1):
        a, b = ranked[i], ranked[i + 1]
        if near_tie(a, b, floor) and a.strength == b.strength:
            out.append(
                {
                    "findings": [i + 1, i + 2],
                    # what they were ranked on: a rule's bound has no fraction (printed "at most")
                    "savings": [a.saving.ranked, b.saving.ranked],
                    "floor": floor,
                }
            )
    return out


def _notes(v: RunView, comparisons: dict) -> list[str]:
    notes = []
    r = v.train
    if (
        v.task == "train"
        and r.comm is not None
        and r.comm.to_dict()
        and v.world_size > 1
        and not comparisons
    ):
        skipped = r.microbench.skipped if r.microbench is not None else None
        notes.append(
            "comm efficiency not measured: "
            + (
                skipped
                or "no on-rank microbenchmark in this record (diagnose.microbench=true runs it)"
            )
        )
    check = getattr(v.result, "verify", None)
    if check is not None and check.skipped and check.change:
        what = " ".join(f"{k}={val}" for k, val in check.change.items())
        notes.append(f"{what} not measured in this job (diagnose.verify): {check.skipped}")
    if getattr(v.result, "backend", None) == "nccl" and not v.result.nccl_transports:
        notes.append(
            "NCCL transports unknown: nccl.DEBUG=INFO records which (P2P, SHM, NET/IB, NET/Socket)"
        )
    if v.task in ("collectives",):
        notes.append(
            "task=collectives measures the link itself; the rules read train, grad_sync and "
            "pair_groups runs"
        )
    return notes


__all__ = ["diagnose", "VERSION", "settle", "Pools"]
