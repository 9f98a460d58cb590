"""repeats=auto (issue 39): a pilot of interleaved rounds, then the runs x steps stats.power.plan
fixes for compare.target (the half-width of every row's speed-up interval) or compare.budget_s,
judged without the pilot."""

import json
import math

import numpy as np
import pytest

from base.errors import ConfigError
from stats.power import MIN_RUNS, Pilot, half_width, plan, runs_for_half_width
from tables.sweep_order import PILOT_ROUNDS, check_repeats, repeat_arguments


def _pilot(between, per_step, steps=10, k=6, rounds=3, seed=0):
    rng = np.random.default_rng(seed)
    logs = rng.normal(0, math.sqrt(between + per_step / steps), (k, rounds))
    within = np.full((k, rounds), math.sqrt(per_step / steps))
    return Pilot(logs.tolist(), within.tolist(), steps, 17.0, 1.3)


def test_the_half_width_is_the_paired_t_intervals():
    from scipy import stats as st

    assert half_width(0.03, 5) == pytest.approx(
        math.expm1(st.t.ppf(0.975, 4) * 0.03 / math.sqrt(5))
    )
    assert half_width(0.03, 1) is None
    r = runs_for_half_width(0.03, 0.02)
    assert half_width(0.03, r) <= 0.02 < half_width(0.03, r - 1) and r >= MIN_RUNS
    assert runs_for_half_width(0.5, 0.001) is None  # past the cap of runs


def test_the_plan_reaches_the_half_width_or_says_the_budget_stopped_it():
    pilot = _pilot(0.01**2, 0.03**2 * 10)
    p = plan(pilot, rows=5, target=0.02, goal="half_width")
    assert p["reached"] == "target" and p["half_width"] <= 0.02 and p["runs"] >= MIN_RUNS
    assert "reach +-2% on every row's speed-up" in p["reason"] and p["detectable"] > 0.02
    c = p["components"]
    for n in (10, 20, 40):  # no split of the grid that reaches the target is cheaper
        r = runs_for_half_width(math.sqrt(2 * (c["between_var"] + c["per_step_var"] / n)), 0.02)
        assert r is None or r * (17 + 1.3 * n) >= p["runs"] * (17 + 1.3 * p["steps"]) - 1e-9
    tight = plan(pilot, 5, 0.02, budget_s=p["seconds"] / 4, goal="half_width")
    assert tight["reached"] == "budget" and tight["seconds"] <= p["seconds"] / 4
    assert tight["half_width"] > 0.02 and "stopped at compare.budget_s" in tight["reason"]
    assert "+-2% would take" in tight["reason"]
    none_left = plan(pilot, 5, 0.02, budget_s=0.0, goal="half_width")
    assert none_left["runs"] == MIN_RUNS and "affords fewer than" in none_left["reason"]
    assert none_left["steps"] == pilot.steps  # the steps the user's pilot ran, not the grid's least
    assert (
        plan(_pilot(0.01**2, 0.03**2 * 100, steps=100), 5, 0.02, 0.0, goal="half_width")["steps"]
        == 100
    )


def test_the_pilot_is_judged_only_where_the_plan_is_its_own_design():
    """The budget left no round after the pilot: the fallback plan (the fewest rounds at the
    pilot's steps) is what the pilot already ran, so its rounds are judged instead of run again past
    the budget (the headline sweep took 22.4 min of a 20-minute budget that way)."""
    from hydra_plugins.repeat_sweeper import pilot_is_the_plan

    pilot = _pilot(0.01**2, 0.03**2 * 10)
    none_left = plan(pilot, 5, 0.02, budget_s=0.0, goal="half_width")
    reached = plan(pilot, 5, 0.02, goal="half_width")
    tight = plan(pilot, 5, 0.02, budget_s=reached["seconds"] / 4, goal="half_width")
    assert [pilot_is_the_plan(p, 10) for p in (none_left, reached, tight)] == [True, False, False]
    assert pilot_is_the_plan(none_left, 20) is False  # the plan's steps are not the pilot's


def test_repeats_auto_is_a_value_the_sweep_accepts_and_its_pilot_has_three_rounds():
    check_repeats("auto", [])
    assert repeat_arguments("auto", ["optim=none,bf16"])[0] == f"repeat=range(0,{PILOT_ROUNDS})"
    with pytest.raises(ConfigError, match="repeats=auto"):
        check_repeats("often", [])


def test_a_misspelt_repeats_is_refused_by_the_schema_in_one_line():
    from dataclasses import dataclass, field, fields
    from typing import Union

    from omegaconf import OmegaConf

    from base.schema import Compare, Config
    from job.config import check_schema

    meta = next(f for f in fields(Config) if f.name == "repeats").metadata
    assert meta["ge"] == 1 and meta["also"] == ("auto",)
    assert {"target", "budget_s"} <= {f.name for f in fields(Compare)}

    @dataclass
    class Only:  # the same field alone: the full config's own checks are test_config's
        repeats: Union[int, str] = field(default=1, metadata=meta)

    def typed(value):
        return OmegaConf.merge(OmegaConf.structured(Only), {"repeats": value})

    with pytest.raises(ConfigError, match=r"repeats='often': must be a number >= 1 or auto\.$"):
        check_schema(typed("often"))
    check_schema(typed("auto"))
    with pytest.raises(ConfigError, match="must be >= 1"):
        check_schema(typed(0))


def test_the_sweep_table_leaves_the_pilots_runs_out(tmp_path):
    """A record under <sweep>/pilot/ chose the design; the sweep's rows are the planned runs
    alone."""
    from pathlib import Path

    from tables.sweep import sweep_entries

    src = sorted(
        Path(__file__).resolve().parents[1].glob("results/runs/ddp_knobs_vgg11/*/run_record.json")
    )
    assert len(src) >= 2
    for n, path in enumerate(src[:2]):
        for where in (tmp_path / str(n), tmp_path / "pilot" / str(n)):
            where.mkdir(parents=True)
            rec = json.loads(path.read_text())
            rec["job"]["num"] = n
            (where / "run_record.json").write_text(json.dumps(rec))
    entries = sweep_entries(tmp_path)
    assert len(entries) == 2 and all("pilot" not in e.output_dir for e in entries)
    assert len(sweep_entries(tmp_path / "pilot")) == 2
    (tmp_path / "plan.json").write_text(json.dumps({"judged": "planned"}))
    assert all("pilot" not in e.output_dir for e in sweep_entries(tmp_path))
    (tmp_path / "plan.json").write_text(json.dumps({"judged": "pilot"}))  # no round after it
    entries = sweep_entries(tmp_path)
    assert len(entries) == 2 and all("/pilot/" in e.output_dir for e in entries)


def test_repeats_auto_with_one_configuration_is_refused_in_one_line(tmp_path):
    from tests.conftest import train_main

    proc = train_main(
        ["model=vgg11_tiny", "scale=smoke", "logger=none", "repeats=auto"], tmp_path, multirun=True
    )
    assert proc.returncode == 2 and not proc.out_dir.exists()
    err = proc.stderr.strip()
    assert (
        err.startswith("error: repeats=auto") and "\n" not in err and "[sweep]" not in proc.stdout
    )


def _auto_sweep(tmp_path, extra: list[str]):
    from tests.conftest import run_train

    # one rank per job: what is checked is the sweep's stages, plan and table, the same for any
    # world size, and a second rank in each of the sweep's 6 or 12 jobs doubled its CPU time
    proc = run_train(
        [
            "model=vgg11_tiny",
            "scale=smoke",
            "world_size=1",
            "logger=none",
            "optim=none,bf16",
            "repeats=auto",
        ]
        + extra,
        tmp_path,
        multirun=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.out_dir
    p = json.loads((out / "plan.json").read_text())
    lines = proc.stdout.splitlines()
    md = (out / "sweep_table.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and "| ok" in line]
    assert sum(line.startswith("[sweep] pilot job ") for line in lines) == 6
    assert len(sorted((out / "pilot").glob("*/run_record.json"))) == 6
    assert len(rows) == 2 and all("|    3 |" in row for row in rows), rows
    return out, p, lines, md


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_short_repeats_auto_sweep_pilots_plans_and_judges_the_planned_rounds_alone(tmp_path):
    """A target any pilot reaches in 3 rounds (+-10000%): the plan is 3 x 10 steps, run as a second
    stage and judged alone (the pilot's runs are no rows)."""
    out, p, lines, md = _auto_sweep(tmp_path, ["compare.target=100"])
    assert p["reached"] == "target" and (p["runs"], p["steps"]) == (3, 10)
    assert p["judged"] == "planned"
    planned = sorted(out.glob("*/run_record.json"))
    assert len(planned) == 6
    for path in planned:
        rec = json.loads(path.read_text())
        assert rec["config"]["steps"] == 10 and rec["config"]["measure"]["policy"] == "fixed"
    assert json.loads((out / "sweep_order.json").read_text())["repeats"] == 3
    assert sum(line.startswith("[sweep] planned job ") for line in lines) == 6
    assert "repeats=auto: a pilot of 3 rounds x 10 steps" in md and "pilot included" in md
    assert "target reached" in md and "/pilot/" not in md


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_repeats_auto_sweep_whose_pilot_spends_the_budget_judges_the_pilots_rounds(tmp_path):
    """compare.budget_s=1: the pilot spends the budget and the plan would be its own design (3 x
    10 steps), so its rounds are the table's rows and nothing runs past the budget (about 1 min on
    the 2-core VM)."""
    out, p, lines, md = _auto_sweep(tmp_path, ["compare.budget_s=1"])
    assert p["reached"] == "budget" and (p["runs"], p["steps"]) == (3, 10)
    assert p["judged"] == "pilot" and "the pilot's rounds are judged" in p["reason"]
    assert not list(out.glob("[0-9]*/run_record.json"))  # no planned job ran
    assert not any(line.startswith("[sweep] planned job ") for line in lines)
    assert "(0.0 min" not in md and "judged: these rows" in md and "pilot included" not in md


def test_the_sweeper_composes_each_job_once_before_it_runs():
    """_check_jobs composes the whole sweep's jobs before any runs; BasicSweeper's check of each
    batch then composes only a job not composed yet (each compose ~0.3 CPU s, issue 36)."""
    from types import SimpleNamespace

    from hydra_plugins.repeat_sweeper import RepeatingSweeper

    composed = []
    sweeper = RepeatingSweeper(max_batch_size=None, params=None, seed=0, shuffle=True)
    sweeper.hydra_context = SimpleNamespace(
        config_loader=SimpleNamespace(
            load_sweep_config=lambda master_config, sweep_overrides: composed.append(
                sweep_overrides
            )
        )
    )
    sweeper.config = {}
    jobs = [["optim=none"], ["optim=bf16"]]
    sweeper.validate_batch_is_legal(jobs)  # _check_jobs: every job of the sweep
    sweeper.validate_batch_is_legal([jobs[1]])  # BasicSweeper.sweep's batch: composed already
    sweeper.validate_batch_is_legal([["optim=bf16"], ["optim=powersgd"]])
    assert composed == [["optim=none"], ["optim=bf16"], ["optim=powersgd"]]
