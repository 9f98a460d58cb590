"""The diagnosis on the records of the benchmark's first measured run (issue 29; 2026-11-25
18:03-18:10 UTC, the 2-core VM, quiet, as root): its misses, each re-diagnosed from the records as
they were run (python -m diagnosis.benchmark --score), so a rule change is checked on real runs of
known cause without running them again. A copy of the four sweeps the tests read is kept in
tests/fixtures (records and Hydra's overrides only): results/diagnosis_benchmark holds the latest
run, which a re-run replaces."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from diagnosis import diagnose
from diagnosis.benchmark import cases, load, main, table

BENCH = Path(__file__).resolve().parent / "fixtures" / "benchmark_2026-11-25"


def record(sweep: str, job: int) -> dict:
    return json.loads((BENCH / sweep / str(job) / "run_record.json").read_text())


def named(d: dict) -> list[dict]:
    return [f for f in d["findings"] if not f.get("first")]


def rate(rec: dict) -> str:
    return next(o.split("=", 1)[1] for o in rec["overrides"] if o.startswith("link.rate="))


# ---------------------------------------------------------------------------------------- busy host
@pytest.mark.parametrize("job", [0, 1, 2])
def test_a_busy_host_is_not_a_straggler(job):
    """Another process spinning on one of 2 cores made one rank finish 1-2 ms later (run 0: rank 1,
    2.4 ms, with less CPU time and less run-queue wait of its own than rank 0): within the 3-4 ms a
    rank's loop thread waited for a core per step, so no rank of its own is the cause. The old rules
    named rank 1 the straggler first."""
    d = diagnose(record("busy", job))
    top = named(d)[0]
    assert top["rule"] == "busy_host", [f["title"] for f in named(d)]
    assert not any(f["rule"] == "straggler" for f in named(d))


SECOND = (
    Path(__file__).resolve().parent / "fixtures" / "benchmark_2026-11-25b"
)  # the second quiet run, 21:30 UTC


@pytest.mark.parametrize("job", [0, 1, 2])
def test_a_busy_host_is_named_first_in_the_second_run(job):
    """The benchmark's second run (same machine, quiet, as root), as its stored diagnoses missed it:
    run 0 named rank 1 a straggler (3.7 ms later with less CPU time than rank 0; its loop thread
    alone waited 3.2 ms a step for a core: the lag is the scheduler's, as a rank also stops while
    its gloo threads wait); runs 1 and 2 named nothing, the busy host's finding hidden under a noise
    floor of 17% and 30% that the busy host itself raised. A busy host is read from the host's
    counters, not from a timing difference, so the floor does not hide it."""
    d = diagnose(json.loads((SECOND / "busy" / str(job) / "run_record.json").read_text()))
    assert named(d) and named(d)[0]["rule"] == "busy_host", [f["title"] for f in named(d)]
    assert not any(f["rule"] == "straggler" for f in named(d))


def test_a_real_straggler_on_a_busy_host_is_still_named():
    """The same busy record with 100 ms more work on rank 1 (a sleep: no CPU time, no run-queue
    wait): far beyond what waiting for a core explains, so rank 1 is the straggler, first."""
    rec = copy.deepcopy(record("busy", 0))
    s = rec["result"]["straggler"]
    assert s["rank"] == 1
    s["by_s"] += 0.1
    s["share_of_step"] = None
    mine = next(p for p in s["per_rank"] if p["rank"] == 1)
    mine["ready_s"] += 0.1
    mine["ready_ci"] = [x + 0.1 for x in mine["ready_ci"]]
    tp = rec["result"]["throughput"]  # every step 100 ms longer: the others wait for it
    slower = 1 / (1 + 0.1 * tp["steps_per_s"])
    for k in ("steps_per_s", "ci_lo", "ci_hi", "samples_per_s", "samples_ci_lo", "samples_ci_hi"):
        tp[k] *= slower
    tp["wall_s"] += 0.1 * rec["result"]["steps"]
    top = named(diagnose(rec))[0]
    assert top["rule"] == "straggler" and "Rank 1" in top["title"], top["title"]


# --------------------------------------------------------------------------------------- slow links
@pytest.mark.parametrize("job", [0, 2, 4, 3])
def test_a_slow_link_is_named_where_the_microbenchmark_cannot_tell(job):
    """Behind a shaped link the on-rank microbenchmark of back-to-back calls lands anywhere between
    the set rate and the line's speed (the token bucket's burst is about one vgg11_tiny gradient):
    its comparison straddled 50% (20 Mbit/s, job 4) or ran slower than the sync itself (80 Mbit/s,
    job 3), and the old rules called the exposed communication unexplained. The link's set rate,
    which the record holds, says the sync runs at or beyond it: the link."""
    rec = record("link", job)
    d = diagnose(rec)
    top = named(d)[0]
    assert top["rule"] == "exposed_comm.slow_link", (rate(rec), top["title"])
    assert not any(f["rule"] == "exposed_comm.unexplained" for f in named(d))
    assert top["recommends"] and "diagnose.microbench" not in top["recommends"]


def test_a_slow_sync_path_is_still_the_sync_path_behind_a_link():
    """The link's rate is read only where the measured reference cannot tell: a microbenchmark that
    says the sync is slow (efficiency well under 50%) still names the sync path."""
    rec = copy.deepcopy(record("link", 4))
    vs = rec["result"]["comm"]["vs_microbench"]
    for k in ("efficiency", "efficiency_ci_lo", "efficiency_ci_hi"):
        vs[k] = vs[k] / 3
    for k in ("achievable_s", "achievable_ci_lo", "achievable_ci_hi"):
        vs[k] = vs[k] / 3
    top = named(diagnose(rec))[0]
    assert top["rule"] == "exposed_comm.sync_path", top["title"]


# ---------------------------------------------------------------------------------------- the model
@pytest.mark.parametrize("job", [0, 1, 2])
def test_the_models_range_holds_the_time_it_does_not_explain(job):
    """36 buckets of 8 KiB behind a 200 Mbit/s link: the what-if model's step of the run's own
    configuration was about half the measured one (the per-call cost inside training is not in the
    on-rank microbenchmark), and its saving's range held both ends of that unexplained time. Since
    issue 38 the model prices that cost per call from the run's own DDP span (36 calls: more than
    overlap explains), so the run's own step is explained and the point estimate itself is near the
    measured saving of bucket=null, 64-69% (the committed fix runs): 63-75% here, each range
    overlapping 64-69%. The first range (before either) ended at 57-61%."""
    top = named(diagnose(record("buckets", job)))[0]
    assert top["rule"].startswith("bucket_layout")
    s = top["saving"]
    assert s["source"] == "model" and s["lo"] <= 0.69 and s["hi"] >= 0.64, s
    assert 0.59 <= s["fraction"] <= 0.76, s


def test_unexplained_range_is_silent_where_the_model_fits():
    from whatif.api import unexplained_range
    from whatif.quantity import Quantity
    from whatif.step import Prediction

    def pred(step, lo, hi):  # 8 samples per step either way
        return Prediction(None, "", step, lo, hi, 8 / step, 8 / hi, 8 / lo)

    own, new = pred(0.036, 0.022, 0.051), pred(0.018, 0.010, 0.027)
    assert (
        unexplained_range(Quantity(0.04, 0.03, 0.05), own, new) is None
    )  # inside the prediction interval
    kept, removed, gap = unexplained_range(Quantity(0.068, 0.042, 0.095), own, new)
    assert gap == pytest.approx(0.032)
    assert kept == pytest.approx(1 - (0.018 + 0.032) / 0.068)  # the 32 ms stay after the change
    assert removed == pytest.approx(1 - 0.018 / 0.068)  # or go with what it removes
    fast_own, fast_new = (
        pred(0.100, 0.080, 0.120),
        pred(0.040, 0.030, 0.050),
    )  # the model over-predicts by 50 ms
    kept, removed, gap = unexplained_range(Quantity(0.050, 0.045, 0.055), fast_own, fast_new)
    assert gap == pytest.approx(-0.050)
    assert kept == pytest.approx(
        1 - 0.040 * 0.5 / 0.050
    )  # the new step shrinks as the run's did: 60%, not ~100%
    assert removed == pytest.approx(1 - 0.040 / 0.050)


# ------------------------------------------------------------------------------------------ --score
def test_score_rediagnoses_the_records_without_running_them(tmp_path, capsys):
    """--score reads a finished benchmark's records and diagnoses each again with this version of
    the rules; the records on disk stay as they were run."""
    for sweep in ("busy", "base"):
        shutil.copytree(BENCH / sweep, tmp_path / sweep)
    stale = tmp_path / "busy" / "0" / "run_record.json"
    rec = json.loads(stale.read_text())
    rec["result"]["diagnosis"]["findings"] = []  # a stored diagnosis that names nothing
    stale.write_text(json.dumps(rec))
    chosen = [c for c in cases() if c.name in ("busy_host", "healthy")]
    stored = {r["case"]: r for r in table(tmp_path, chosen, 0.1)["rows"]}
    assert stored["busy_host"]["tops"][0] is None
    rescored = {r["case"]: r for r in table(tmp_path, chosen, 0.1, rescore=True)["rows"]}
    assert (
        rescored["busy_host"]["tops"] == ["busy_host"] * 3 and rescored["busy_host"]["false"] == 0
    )
    assert json.loads(stale.read_text())["result"]["diagnosis"]["findings"] == []
    assert all(r.record.result.diagnosis.version for r in load(tmp_path, rescore=True))
    main(["--score", str(tmp_path), "--cases", "busy_host"])
    out = capsys.readouterr().out
    assert "| busy_host |" in out and "Scored by diagnosis version" in out


@pytest.mark.parametrize("job", [1, 3, 5])
def test_per_param_is_priced_by_the_model_where_small_sizes_do_not_resolve_the_bandwidth(job):
    """sync=per_param on loopback: the microbenchmark's 10 sizes (16 B-50 KB) all take ~0.4 ms, and
    in job 3 the weighted fit's slope came out negative, so the fit raised (busbw inf), the model
    lost the run's link and the diagnosis fell back to the rule of thumb's 94% [94%, 94%] against a
    measured 73% [33%, 89%]. The fit now takes the bootstrap fits that resolve the bandwidth, and
    the model's range (with its unexplained time) holds the measured saving in every run."""
    from whatif.api import profile_of

    rec = record("base", job)
    assert "sync=per_param" in rec["overrides"]
    assert profile_of(rec).link.name == "this run's ranks"
    top = named(diagnose(rec))[0]
    assert top["rule"] == "per_param" and top["saving"]["source"] == "model", top["saving"]
    assert top["saving"]["lo"] <= 0.89 and top["saving"]["hi"] >= 0.33, top["saving"]


def test_a_flat_fit_takes_the_draws_that_resolve_the_bandwidth():
    from whatif.links import fit_alpha_beta

    # the time falls with the bytes at the point (all latency, loopback): job 3's fit
    pts = [
        (16, 5.0e-4, 3.0e-4, 5.2e-3),
        (432, 4.6e-4, 2.9e-4, 4.4e-3),
        (4096, 4.2e-4, 1.7e-4, 4.1e-3),
        (50176, 3.5e-4, 2.2e-4, 2.7e-3),
    ]
    link = fit_alpha_beta(pts, 2, name="flat", source="test")
    assert (
        0 < link.busbw.value < float("inf") and link.busbw.lo <= link.busbw.value <= link.busbw.hi
    )
    assert any("do not resolve the bandwidth" in n for n in link.notes)


# ------------------------------------------ issue 38: the stated interval against a run of the fix
# A copy of the benchmark's 2026-11-28 run (results/diagnosis_benchmark, under load ~1.8): its
# busy_host runs, straggler_data_r0's and the healthy (sync=ddp) runs that measured their fixes.
BENCH_1128 = Path(__file__).resolve().parent / "fixtures" / "benchmark_2026-11-28"
BENCH_1207 = Path(__file__).resolve().parent / "fixtures" / "benchmark_2026-12-07"


def _rows_1128(names: tuple[str, ...]) -> dict[str, dict]:
    chosen = [c for c in cases() if c.name in names]
    return {r["case"]: r for r in table(BENCH_1128, chosen, 0.1, rescore=True)["rows"]}


def test_busy_hosts_estimate_is_the_loop_threads_whole_wait_for_a_core():
    """busy_host priced a rank's wait for a core by the others' share of the CPU it queued behind
    (60-66% of it): -18, -12, -18 points against the fix run in the same sweep, interleaved
    (2026-12-07, fault.busy_cores=1,0; a copy in tests/fixtures/benchmark_2026-12-07/busy). Those
    fix runs show the loop thread waiting 0.5-1.1 ms a step without the spinner against 5.6-6.6
    with it: nearly all its wait is the spinner's. The estimate is the whole wait, median over
    ranks (by hand here), the range's top the ranks given the CPU the others took."""
    chosen = [c for c in cases() if c.name == "busy_host"]
    rows = {r["case"]: r for r in table(BENCH_1207, chosen, 0.1, rescore=True)["rows"]}
    row = rows["busy_host"]
    assert row["tops"] == ["busy_host"] * 3
    assert all(abs(e) <= 0.07 for e in row["errors"]), row["errors"]
    assert sum(abs(e) <= 0.05 for e in row["errors"]) >= 2, row["errors"]
    assert sum(row["holds"]) >= 2 and all(w <= 0.20 for w in row["widths"]), row
    rec = json.loads((BENCH_1207 / "busy" / "0" / "run_record.json").read_text())
    works = [p["work"] for p in rec["result"]["per_rank"]]
    cores = rec["env"]["cpu_count"]
    wall = max(w["wall_s"] for w in works)
    own = sum(w["cpu_s"] for w in works) / (cores * wall)
    other = works[0]["host_busy"] - own
    waits = sorted(w["main_runqueue_s"] / w["steps"] for w in works)
    top = named(diagnose(rec))[0]
    assert top["rule"] == "busy_host"
    s = top["saving"]
    assert s["seconds"] == pytest.approx((waits[0] + waits[1]) / 2, rel=1e-6)
    assert s["lo"] == pytest.approx(s["fraction"], rel=1e-9)
    assert s["hi"] == pytest.approx(min(other / (own + other), 1 - own), rel=1e-6)
    # the 2026-11-28 runs measured their fix in another sweep, minutes away (Welch): 27% [17, 35]
    # against 38% estimated; kept as they score, not tuned to
    old = _rows_1128(("busy_host", "healthy"))["busy_host"]
    assert old["tops"] == ["busy_host"] * 3 and all(e <= 0.12 for e in old["errors"]), old


def test_a_stragglers_interval_holds_a_separate_run_of_the_fix():
    """The straggler's stated interval was the per-rank medians' own (about 1 point wide): it held
    the saving a run of the fix measured in 0 of straggler_data_r0's 3 runs (94% [93, 94] against
    91%). The step the fix leaves is another run's, and a step median that short scatters 23.9% run
    to run (SHORT_STEP_RUN_TO_RUN_SD, calibrated on the loopback records, not these): with it the
    interval holds all three, under 20 points wide, and its ends are the medians' interval moved by
    the step left x (e^(+-1.96 sd) - 1), by hand here."""
    import math

    from diagnosis.rules import SHORT_STEP_RUN_TO_RUN_SD

    row = _rows_1128(("straggler_data_r0", "healthy"))["straggler_data_r0"]
    assert row["top1"] == 3 and row["holds"] == [True] * 3, row
    assert all(0.03 < w <= 0.20 for w in row["widths"]), row["widths"]
    rec = json.loads((BENCH_1128 / "stragglers" / "2" / "run_record.json").read_text())
    top = named(diagnose(rec))[0]
    assert top["rule"] == "straggler"
    s = rec["result"]["straggler"]
    mine = next(p for p in s["per_rank"] if p["rank"] == s["rank"])
    other = next(p for p in s["per_rank"] if p["rank"] != s["rank"])
    step = top["saving"]["seconds"] / top["saving"]["fraction"]
    rest = step - s["by_s"]
    z, sd = 1.959963984540054, SHORT_STEP_RUN_TO_RUN_SD
    lo = mine["ready_ci"][0] - other["ready_ci"][1] - rest * (math.exp(z * sd) - 1)
    hi = mine["ready_ci"][1] - other["ready_ci"][0] + rest * (1 - math.exp(-z * sd))
    assert top["saving"]["lo"] == pytest.approx(lo / step, rel=1e-6)
    assert top["saving"]["hi"] == pytest.approx(hi / step, rel=1e-6)


def test_a_short_gpu_step_is_not_given_the_cpu_vms_scatter():
    """SHORT_STEP_RUN_TO_RUN_SD (23.9%) was measured on the busy 2-core VM's CPU steps: a CUDA run
    whose step the fix leaves is under SHORT_STEP_S takes the GPU's stated scatter, not +-60%."""
    import math
    from types import SimpleNamespace

    from diagnosis.rules import SHORT_STEP_RUN_TO_RUN_SD, _after_fix_scatter
    from whatif.profile import RUN_TO_RUN_SD

    z = 1.959963984540054
    for device, sd in (("cpu", SHORT_STEP_RUN_TO_RUN_SD), ("cuda", RUN_TO_RUN_SD["cuda"])):
        down, up, got, source = _after_fix_scatter(
            SimpleNamespace(step_s=0.030, device=device), 0.010
        )
        assert got == sd and down == pytest.approx(0.020 * (math.exp(z * sd) - 1))
        assert up == pytest.approx(0.020 * (1 - math.exp(-z * sd)))
        assert source.endswith("SHORT_STEP_RUN_TO_RUN_SD") == (device == "cpu")
    # a long step: the device's own figure on both
    assert (
        _after_fix_scatter(SimpleNamespace(step_s=0.5, device="cpu"), 0.1)[2]
        == RUN_TO_RUN_SD["cpu"]
    )


def test_the_short_step_scatter_is_what_the_committed_loopback_records_give():
    """SHORT_STEP_RUN_TO_RUN_SD is stated as derived, not tuned: the pooled sd of log step medians
    over the CPU configurations run more than once whose step is under SHORT_STEP_S, in the runs
    results/whatif/validation_committed validates (its Regenerate line names them; none is a
    diagnosis-benchmark run). A constant edited by hand, or a change to what counts as a repeat,
    fails here."""
    import re

    from base.record import Record
    from diagnosis.rules import SHORT_STEP_RUN_TO_RUN_SD, SHORT_STEP_S
    from whatif.validate import run_to_run

    root = Path(__file__).resolve().parent.parent
    md = (root / "results/whatif/validation_committed/validation.md").read_text()
    named = re.search(r"python -m whatif\.validate ((?:results/runs/\S+ )+)--out", md)
    dirs = named.group(1).split()
    short = []
    for d in dirs:
        for p in sorted((root / d).rglob("run_record.json")):
            rec = Record.read(p)
            step = getattr(rec.result, "step_time_s", None)
            if step is not None and step.median and rec.result.device == "cpu":
                if step.median < SHORT_STEP_S:
                    short.append((str(p), rec))
    sd, df = run_to_run(short)
    assert df == 28 and round(sd, 3) == SHORT_STEP_RUN_TO_RUN_SD, (sd, df)


# ------------------------------------ 2026-12-07: the quiet run's healthy false finding (issue 37)
# A copy of results/diagnosis_benchmark's healthy base/4 record of the quiet rerun committed at
# 0a13ec6 (12:27-12:41 UTC, load 0.5-1.8): sync=ddp, vgg11_tiny, loopback, nothing injected.


def test_a_probe_the_window_contradicts_names_nothing_on_a_healthy_run():
    """Its six probe steps read 5.8 ms [1.3, 6.8] of exposed communication, 74% of the step, and
    the rule named it (exposed_comm.unexplained, the efficiency [6, 62]% straddling 50%); the
    window's whole backward phase, which holds DDP's all-reduce wait, was 4.38 ms [3.70, 5.06]
    with 2.45 ms of it compute. The probe did not run as the window did: its figure is the window's
    bound with no lower end, and a healthy run names nothing."""
    from diagnosis.view import RunView

    rec = json.loads((BENCH_1207 / "base" / "4" / "run_record.json").read_text())
    assert "sync=ddp" in rec["overrides"] and rec["result"]["comm"]["exposed_s"] > 0.0055
    assert named(diagnose(rec)) == [], [f["title"] for f in named(diagnose(rec))]
    e = RunView(rec).exposed()
    r = rec["result"]
    bwd, bc = r["phases"]["backward"], r["comm"]["backward_compute_s"]
    assert e.ci_lo == 0.0 and "did not run as the window did" in e.source
    assert e.median >= bwd["median"] - bc and e.ci_hi < r["comm"]["exposed_s"]


def test_a_probe_the_window_holds_is_still_read():
    """The same record with 6 ms more of every window step in backward (the probe's 5.8 ms of
    exposed communication now fits in it): the probe's figure and interval stand, and 74%
    exposed is named again."""
    from diagnosis.view import RunView

    rec = json.loads((BENCH_1207 / "base" / "4" / "run_record.json").read_text())
    r = rec["result"]
    r["phases"]["backward"] = {
        k: (v + 0.006 if k in ("median", "ci_lo", "ci_hi", "mean", "min", "max", "q1", "q3") else v)
        for k, v in r["phases"]["backward"].items()
    }
    r["series"]["phases"]["backward"] = [b + 0.006 for b in r["series"]["phases"]["backward"]]
    e = RunView(rec).exposed()
    assert e.median == pytest.approx(r["comm"]["exposed_s"] - e.wait_s)
    assert e.ci_lo == pytest.approx(r["comm"]["exposed_ci_lo"] - e.wait_s)
    assert [f["rule"] for f in named(diagnose(rec))][:1] == ["exposed_comm.unexplained"]
