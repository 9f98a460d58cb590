"""Autotune: run_job's objective for optimising sweepers, the choice of candidates, and a winner
chosen on re-measured runs with its CI against the default, never the search's luckiest sample."""

from __future__ import annotations

import csv
import json
import math
import pickle

import numpy as np
import pytest
from omegaconf import OmegaConf

from job.run import JobResult, _end
from results import autotune
from base.record import Record
from tables.table import Entry
from tests.conftest import TINY, compose, run_train
from tests.records import train_record

KEYS = ["bucket", "optim", "ddp.static_graph"]
DEFAULTS = {"bucket": 25, "optim": "none", "ddp.static_graph": False}


def entry(
    num: int,
    overrides: list[str],
    samples_per_s: float,
    *,
    steps: list[float] | None = None,
    status: str = "ok",
) -> Entry:
    """A train record whose throughput is samples_per_s (global batch 8) and, if given, whose step
    times are `steps`."""
    rec = train_record(
        overrides=overrides,
        steps_per_s=(samples_per_s or 1.0) / 8,
        num=num,
        status=status,
        error=None if status == "ok" else "RuntimeError: boom",
    )
    if steps is not None and status == "ok":
        rec["result"]["series"]["step_time_s"] = steps
    return Entry.from_record(rec)


# --- the objective
# -------------------------------------------------------------------------------------------------


def test_job_result_is_the_samples_per_s_float_optuna_reads_and_carries_the_status(tmp_path):
    plain = OmegaConf.to_container(compose([*TINY]), resolve=True)
    job = {
        "name": "train",
        "num": 0,
        "output_dir": str(tmp_path / "0"),
        "multirun": True,
        "overrides": [],
    }
    result = train_record(overrides=[], steps_per_s=4.0)["result"]
    ok = _end(Record.ok(plain, job, env={}, started="", result=result), job)
    assert float(ok) == result["throughput"]["samples_per_s"] == 32.0 and ok.exit_code == 0
    assert ok.status == "ok" and ok.record.endswith("run_record.json")
    failed = _end(Record.failed(plain, job, "RuntimeError: rank 1 died"), job)
    assert math.isnan(failed) and failed.status == "failed" and "rank 1 died" in failed.error
    assert failed.exit_code == 0  # a sweep goes on; its table callback gives the sweep's exit code
    back = pickle.loads(
        pickle.dumps(failed)
    )  # crosses the elastic launcher and submitit as a pickle
    assert math.isnan(back) and (back.status, back.error, back.record) == (
        failed.status,
        failed.error,
        failed.record,
    )
    assert (
        float(JobResult(samples_per_s=3.5)) == 3.5 and -1 * JobResult(samples_per_s=3.5) == -3.5
    )  # nevergrad


def test_a_failed_trial_is_a_failed_optuna_trial_and_the_study_goes_on():
    optuna = pytest.importorskip("optuna")
    study = optuna.create_study(direction="maximize")
    for value in (
        JobResult(samples_per_s=10.0),
        JobResult("failed"),
        JobResult(samples_per_s=12.0),
    ):
        trial = study.ask()
        try:
            study.tell(
                trial, values=[float(value)]
            )  # what hydra-optuna-sweeper does with a job's return value
        except ValueError:  # optuna refuses NaN; the sweeper then tells FAIL, as here
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert [t.state.name for t in study.trials] == [
        "COMPLETE",
        "FAIL",
        "COMPLETE",
    ] and study.best_value == 12.0


# --- candidates and the plan
# ---------------------------------------------------------------------------------------


def test_top_candidates_rank_distinct_points_by_median_search_value_without_the_default():
    search = [
        entry(0, ["bucket=100", "optim=bf16", "ddp.static_graph=True"], 50.0),
        entry(
            1, ["bucket=100", "optim=bf16", "ddp.static_graph=true"], 10.0
        ),  # the same point, spelt otherwise
        entry(2, ["bucket=100", "optim=bf16", "ddp.static_graph=true"], 12.0),
        entry(
            3, ["bucket=25", "optim=none", "ddp.static_graph=False"], 99.0
        ),  # the default: always re-measured
        entry(4, ["bucket=5", "optim=fp16", "ddp.static_graph=false"], 20.0),
        entry(5, ["bucket=1", "optim=powersgd", "ddp.static_graph=false"], 0.0, status="failed"),
        entry(6, ["bucket=1", "optim=none", "ddp.static_graph=false"], 15.0),
    ]
    top = autotune.top_candidates(search, KEYS, DEFAULTS, top_k=2)
    assert [c.values for c in top] == [(5, "fp16", False), (1, "none", False)]
    assert top[0].overrides == ["bucket=5", "optim=fp16", "ddp.static_graph=false"]
    everything = autotune.top_candidates(search, KEYS, DEFAULTS, top_k=10)
    assert everything[-1].values == (100, "bf16", True) and everything[-1].search == [
        50.0,
        10.0,
        12.0,
    ]
    default = autotune.default_candidate(KEYS, DEFAULTS, search)
    assert default.overrides == [
        "bucket=25",
        "optim=none",
        "ddp.static_graph=false",
    ] and default.search == [99.0]


def test_a_stage_runs_every_candidate_once_per_round_in_a_seeded_order():
    a, b = (
        autotune.Candidate(KEYS, (25, "none", False)),
        autotune.Candidate(KEYS, (100, "bf16", True)),
    )
    plan = autotune.stage_plan(
        [a, b], ["model=vgg11_tiny"], repeats=3, stage=autotune.SELECT, seed=0
    )
    stage = f"{autotune.STAGE_KEY}={autotune.SELECT}"
    expected = [
        ["model=vgg11_tiny", stage, f"repeat={r}", *c.overrides] for r in range(3) for c in (a, b)
    ]
    assert sorted(map(tuple, plan)) == sorted(map(tuple, expected))
    assert [p[2] for p in plan] == ["repeat=0"] * 2 + ["repeat=1"] * 2 + [
        "repeat=2"
    ] * 2  # round by round
    assert plan == autotune.stage_plan([a, b], ["model=vgg11_tiny"], 3, autotune.SELECT, seed=0)


# --- the verdict
# --------------------------------------------------------------------------------------------------


def _stage(
    points: dict[tuple, float], repeats: int, stage: str, seed: int = 0, start: int = 0
) -> list[Entry]:
    """`repeats` rounds of runs of each point at the given samples/s, with 3% run-to-run noise."""
    rng = np.random.default_rng(seed)
    entries = []
    for r in range(repeats):
        for values, rate in points.items():
            c = autotune.Candidate(KEYS, values)
            entries.append(
                entry(
                    start + len(entries),
                    [f"{autotune.STAGE_KEY}={stage}", f"repeat={r}", *c.overrides],
                    rate * (1 + 0.03 * rng.standard_normal()),
                )
            )
    return entries


def test_the_winner_is_selected_on_re_measured_runs_and_judged_on_fresh_ones():
    default = autotune.Candidate(KEYS, (25, "none", False), search=[100.0])
    lucky = autotune.Candidate(KEYS, (100, "bf16", True), search=[300.0])  # one lucky search run
    real = autotune.Candidate(KEYS, (5, "fp16", False), search=[120.0])
    picked = _stage(
        {default.values: 100.0, lucky.values: 98.0, real.values: 150.0},
        repeats=4,
        stage=autotune.SELECT,
    )
    assert autotune.select(picked, [default, lucky, real], noise=0.02)["chosen"] == real.label
    fresh = _stage(
        {default.values: 100.0, real.values: 150.0},
        repeats=4,
        stage=autotune.CONFIRM,
        seed=1,
        start=12,
    )
    result = autotune.conclude(
        picked, [default, lucky, real], noise=0.02, search_trials=6, confirm=fresh
    )
    assert result["winner"] == result["recommended"] == real.label
    conf = result["confirmation"]
    assert conf["verdict"] == "faster" and conf["speed-up CI"][0] < 1.5 < conf["speed-up CI"][1]
    assert conf["runs"] == [4, 4] and "paired" in conf["method"]
    rows = {r["configuration"]: r for r in result["rows"]}
    assert rows[real.label]["runs"] == 4 and "Benjamini-Hochberg" in rows[real.label]["family"]
    assert rows[lucky.label]["verdict"] in ("no significant difference", "equivalent")
    assert (
        "winner bucket=5 optim=fp16" in result["conclusion"]
        and "confirmed on fresh runs" in result["conclusion"]
    )
    assert "use it with: bucket=5 optim=fp16 ddp.static_graph=false" in result["conclusion"]
    md = autotune.markdown(result)
    assert "| 300 |" in md and "luckiest" in md and "Confirmation on fresh runs" in md


def test_a_selection_that_fresh_runs_do_not_confirm_keeps_the_default():
    default = autotune.Candidate(KEYS, (25, "none", False))
    real = autotune.Candidate(KEYS, (5, "fp16", False))
    picked = _stage({default.values: 100.0, real.values: 150.0}, repeats=4, stage=autotune.SELECT)
    fresh = _stage(
        {default.values: 100.0, real.values: 100.0},
        repeats=4,
        stage=autotune.CONFIRM,
        seed=2,
        start=8,
    )
    result = autotune.conclude(picked, [default, real], noise=0.02, confirm=fresh)
    assert result["winner"] == real.label and result["recommended"] == default.label
    assert "did not confirm" in result["conclusion"] and "keep the default" in result["conclusion"]


def test_no_significant_winner_keeps_the_default_and_optuna_results_say_so(tmp_path):
    default = autotune.Candidate(KEYS, (25, "none", False))
    same = autotune.Candidate(KEYS, (100, "bf16", True), search=[130.0])
    result = autotune.conclude(
        _stage({default.values: 100.0, same.values: 100.5}, 3, autotune.SELECT),
        [default, same],
        noise=0.02,
        search_trials=4,
    )
    assert result["recommended"] == default.label and "keep" in result["conclusion"]
    assert result["chosen"] is None and result["confirmation"] is None
    (tmp_path / autotune.OPTUNA_RESULTS).write_text(
        "name: optuna\nbest_params: {bucket: 100}\nbest_value: 130.0\n"
    )
    autotune.write(tmp_path, result)
    saved = OmegaConf.load(tmp_path / autotune.OPTUNA_RESULTS)
    assert dict(saved.best_params) == {"bucket": 25, "optim": "none", "ddp.static_graph": False}
    assert saved.search_best_value == 130.0 and saved.best_value == pytest.approx(100, rel=0.05)
    assert (
        json.loads((tmp_path / autotune.RESULT_JSON).read_text())["conclusion"]
        == result["conclusion"]
    )


def test_no_finished_re_measurement_gives_no_verdict():
    default, other = (
        autotune.Candidate(KEYS, (25, "none", False)),
        autotune.Candidate(KEYS, (5, "fp16", False)),
    )
    failed = [entry(0, ["autotune.stage=select", *default.overrides], 0.0, status="failed")]
    result = autotune.conclude(failed, [default, other], noise=0.02)
    assert result["winner"] is None and result["conclusion"].startswith("no verdict")


# --- the preset, for real
# ------------------------------------------------------------------------------------------


def test_the_preset_composes_with_the_optuna_sweeper_and_the_searched_keys():
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from hydra import compose as hydra_compose, initialize_config_dir

    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(
            config_name="config", overrides=["experiment=autotune", *TINY], return_hydra_config=True
        )
    sweeper = cfg.hydra.sweeper
    assert (
        sweeper._target_ == "hydra_plugins.ddp_comm_autotune.AutotuneSweeper"
        and sweeper.direction == "maximize"
    )
    assert set(sweeper.params) == {
        "bucket",
        "optim",
        "ddp.static_graph",
        "ddp.gradient_as_bucket_view",
    }
    assert cfg.hydra.callbacks.sweep_table._target_ == "results.autotune.AutotuneTable"
    assert cfg.autotune.repeats >= 2 and cfg.autotune.top_k >= 1


@pytest.mark.slow
def test_autotune_sweep_searches_re_measures_and_ends_with_the_winner_and_its_ci(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = run_train(
        [
            "experiment=autotune",
            *TINY,
            "hydra.sweeper.n_trials=2",
            "autotune.top_k=1",
            "autotune.repeats=2",
        ],
        tmp_path,
        multirun=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = proc.out_dir
    result = json.loads((sweep / autotune.RESULT_JSON).read_text())
    if (
        result["model"]["skipped"] == 2
    ):  # the model ruled both trials out: nothing to select, the default kept
        assert result["rows"] == [] and "keep the default" in result["conclusion"]
        return
    else:
        assert result["search_trials"] == 2 and [r["runs"] for r in result["rows"]] == [2, 2]
    assert result["rows"][0]["default"] and "vs default" in result["rows"][1]
    with open(sweep / "sweep_table.csv") as f:
        rows = list(csv.DictReader(f))
    # one row per configuration: 2 search trials, the 2 selection configurations with their 2 runs
    # each merged, and the confirmation's 2 when a candidate was selected
    staged = sum("autotune.stage=select" in r["overrides"] for r in rows)
    confirmed = sum("autotune.stage=confirm" in r["overrides"] for r in rows)
    model = sum(
        "autotune.stage=model" in r["overrides"] for r in rows
    )  # the default once, for the what-if model
    ran = result["model"]["measured"]
    assert (
        model == 1
        and ran + result["model"]["skipped"] == 2
        and result["model"]["unavailable"] is None
    )
    assert (
        staged == 2
        and confirmed == (2 if result["chosen"] else 0)
        and len(rows) == 1 + ran + 2 + confirmed
    )
    assert all(r["status"] == "ok" for r in rows) and (sweep / "sweep_table.md").is_file()
    assert OmegaConf.load(sweep / autotune.OPTUNA_RESULTS).name == "optuna+confirm"
    assert (
        "Best value" not in proc.stdout + proc.stderr
    )  # the luckiest search sample is not reported
    last = proc.stdout.strip().splitlines()[-2:]
    assert last[0] == f"[autotune] {result['conclusion']}" and "vs default" in result["rows"][1]


# --- pruning with the what-if model
# -----------------------------------------------------------------------------------


def test_the_model_rules_out_trials_before_they_run_and_says_how_many():
    """The default config's run (here a committed VGG11 record) predicts every trial: those whose
    whole predicted interval lies below the default by more than the noise never run; the launcher
    returns the model's upper bound for them, and the summary lists them."""
    from hydra.core.utils import JobReturn, JobStatus

    from hydra_plugins.ddp_comm_autotune import _PruningLauncher
    from tables.table import Entry as E
    from tests.test_whatif import RUNS

    rec = json.loads((RUNS / "vgg11_accumulate/0/run_record.json").read_text())
    rec["job"]["num"] = 0
    keys, defaults = ["bucket", "optim"], {"bucket": None, "optim": "none"}
    pruner = autotune.Pruner(E.from_record(rec), keys, defaults, noise=0.02)
    assert pruner.profile is not None and pruner.why is None
    assert pruner.change(["bucket=null", "optim=powersgd"]) == {"optim": "powersgd"}

    class Launcher:
        launched: list = []

        def launch(self, jobs, initial_job_idx):
            self.launched += [list(j) for j in jobs]
            return [
                JobReturn(overrides=list(j), status=JobStatus.COMPLETED, _return_value=1.0)
                for j in jobs
            ]

    inner = Launcher()
    trials = [
        ["bucket=2000", "optim=none"],
        ["bucket=null", "optim=none"],
        ["bucket=null", "optim=powersgd"],
    ]
    out = _PruningLauncher(inner, pruner).launch(trials, initial_job_idx=1)
    skipped = pruner.summary()
    assert len(out) == 3 and skipped["measured"] + skipped["skipped"] == 3
    assert inner.launched == [
        t for t in trials if not any(p["overrides"] == t for p in skipped["pruned"])
    ]
    for p in skipped["pruned"]:
        assert (
            p["speed-up CI"][1] < 0.98
            and out[trials.index(p["overrides"])].return_value == p["objective"]
        )
    assert all("speed-up" in r for r in skipped["ran"] if r["change"])
    result = autotune.conclude(
        [], [autotune.Candidate(keys, (None, "none"))], noise=0.02, model=skipped
    )
    assert result["model"]["skipped"] == skipped["skipped"]


def test_no_model_run_skips_nothing():
    pruner = autotune.Pruner(None, KEYS, DEFAULTS, noise=0.02)
    assert (
        pruner.rules_out(["bucket=100", "optim=bf16"]) is None and pruner.summary()["measured"] == 1
    )
    assert "did not finish" in pruner.summary()["unavailable"]
