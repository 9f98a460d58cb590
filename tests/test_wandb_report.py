"""The W&B Report of a sweep (results/wandb_report.py): the spec written offline, read back with
wandb_workspaces' own model and checked against what the runs really logged; the push checked on the
requests a stand-in W&B API (a small HTTP server on loopback) receives. No network."""

from __future__ import annotations

import contextlib
import glob
import http.server
import json
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from base.record_types import Finding
from results import wandb_log, wandb_report
from results.callbacks import SweepTable
from tests.conftest import serving
from tests.records import train_record, write_sweep
from tests.test_wandb import offline_runs, read_run, wandb_env  # noqa: F401 - wandb_env is a fixture

COMMAND = "python train.py -m bucket=25,100"


def wandb_workspaces_model(spec: Path):
    """The spec as wandb_workspaces reads a report: its pydantic model, then the Report made from
    it."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2 import internal

    return wr.Report._from_model(internal.ReportViewspec.model_validate_json(spec.read_text()))


def blocks_of(report, kind: str) -> list:
    return [b for b in report.blocks if type(b).__name__ == kind]


def panels_of(report, kind: str) -> list:
    return [
        (p, grid)
        for grid in blocks_of(report, "PanelGrid")
        for p in grid.panels
        if type(p).__name__ == kind
    ]


def sweep_config(sweep: Path, **logger) -> OmegaConf:
    """The parts of a multirun's config the end-of-sweep callback reads."""
    return OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": str(sweep)},
                "job": {"name": "train"},
                "mode": "MULTIRUN",
                "overrides": {"hydra": [], "task": ["bucket=25,100"]},
            },
            "logger": {"name": "wandb", "mode": "offline", **logger},
        }
    )


def offline_sweep(tmp_path: Path, **logger) -> Path:
    """Two hand-made train records, each logged by wandb_log as its job would, then the end-of-sweep
    callback."""
    sweep = tmp_path / "multirun" / "2025-01-31" / "12-00-00"
    write_sweep(
        sweep,
        [
            train_record(overrides=[f"bucket={b}"], bucket=b, steps_per_s=s)
            for b, s in ((25, 2.0), (100, 3.0))
        ],
        ["bucket=25,100"],
    )
    for n in range(2):
        wandb_log.log_run(
            json.loads((sweep / str(n) / "run_record.json").read_text()),
            {"logger": {"name": "wandb", "mode": "offline"}},
        )
    SweepTable(fail_on_failed_jobs=False).on_multirun_end(sweep_config(sweep, **logger))
    return sweep


# --- offline: the spec
# ------------------------------------------------------------------------------------------


def test_offline_sweep_writes_a_spec_with_the_table_the_plots_the_diagnosis_and_the_groups_runs(
    tmp_path, wandb_env, capsys
):
    sweep = offline_sweep(tmp_path)
    spec = sweep / wandb_report.SPEC_NAME
    assert spec.is_file()
    out = capsys.readouterr().out
    assert f"python -m results.wandb_report {sweep} --push" in out and str(spec) in out
    report = wandb_workspaces_model(spec)

    jobs = [read_run(offline_runs(sweep / str(n))[0]) for n in range(2)]
    (summary_dir,) = offline_runs(sweep)
    summary = read_run(summary_dir)
    group = wandb_log.group_for(sweep)
    assert {j["group"] for j in jobs} == {summary["group"]} == {group}
    assert report.title.startswith("How does bucket change throughput") and group in report.title
    assert report.entity == "" and report.project == "ddp-comm-overhead"
    text = json.dumps(json.loads(spec.read_text()))
    assert COMMAND in text and "hosts: node-a" in text  # the exact command and the machine

    # every run set filters on the sweep's group (and so shows its runs and no others)
    runsets = [rs for grid in blocks_of(report, "PanelGrid") for rs in grid.runsets]
    assert runsets and all(f"Metric(\"Group\") == '{group}'" in rs.filters for rs in runsets)
    assert all(rs.entity == "" and rs.project == "" for rs in runsets)  # filled in by the push

    # the table panel reads the sweep_summary run's table, which that run logged under this name
    ((table, grid),) = panels_of(report, "WeavePanelSummaryTable")
    assert table.table_name == "sweep_table"
    assert "Metric(\"JobType\") == 'sweep_summary'" in grid.runsets[0].filters
    assert glob.glob(
        str(summary_dir / "files" / "media" / "table" / f"{table.table_name}_*.table.json")
    )
    # ... and the table with its CIs and verdicts as text
    md = [b.text for b in blocks_of(report, "MarkdownBlock")]
    table_md = (sweep / "sweep_table.md").read_text()
    (shown,) = [m for m in md if "| job " in m]

    def lines(text):  # the report's Markdown round trip drops trailing spaces
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    assert (
        lines(shown) in lines(table_md) and "| 1.50 (1 run: no CI) | no verdict |" in shown
    )  # one run a side

    # throughput: the sweep's own plot with its CIs, logged by the summary run, and the reason it is
    # an image
    media = {k: p for p, _ in panels_of(report, "MediaBrowser") for k in p.media_keys}
    assert "plots/throughput" in media and "plots/phases" in media
    for key in media:
        name = key.split("/", 1)[1]
        assert glob.glob(
            str(summary_dir / "files" / "media" / "images" / "plots" / f"{name}_*.png")
        ), key
    assert "cannot draw intervals" in text

    # line plots of every run of the group, step by step, on metrics the runs really log
    lines = [p for p, _ in panels_of(report, "LinePlot")]
    logged = {k for j in jobs for row in j["history"] for k in row}
    names = {m.name for p in lines for m in p.y}
    assert {"step/time_ms", "throughput/samples_per_s", "phase_ms/backward"} <= names <= logged
    assert {p.x.name for p in lines} == {"Step"}
    assert len(jobs[0]["history"]) == 6  # one row per measured step, so Step is the measured step
    (jobs_grid,) = {id(g): g for p, g in panels_of(report, "LinePlot")}.values()
    assert "Metric(\"JobType\") == 'train'" in jobs_grid.runsets[0].filters

    # the diagnosis as text, with its next: commands
    diagnosis_md = (sweep / "sweep_diagnosis.md").read_text()
    assert any(m.strip() and m.strip() in diagnosis_md for m in md)
    # links to the evidence: the runs (by their ids) and the artifacts wandb_log logged
    assert f"runs/{summary_dir.name.rsplit('-', 1)[1]}" in text
    for n, _job in enumerate(jobs):
        assert f"runs/{offline_runs(sweep / str(n))[0].name.rsplit('-', 1)[1]}" in text
        assert (
            f"artifacts/run_record/{wandb_log.artifact_name('record', group, f'job{n}')}/latest"
            in text
        )
    assert f"artifacts/sweep_table/{wandb_log.artifact_name('sweep', group)}/latest" in text


def test_the_spec_lists_the_next_commands_of_the_diagnosis():
    def found(command: str, first: bool = False) -> dict:
        return Finding("r", "t", "", [], "no source", None, command, first=first).to_dict()

    diagnosis = {
        "runs": [
            {
                "diagnosis": {
                    "findings": [found("no", first=True), found("python train.py optim=bf16")]
                }
            },
            {"diagnosis": {"findings": [found("python train.py optim=bf16")]}},
            {"diagnosis": {"findings": [found("python train.py bucket=25")]}},
            {"diagnosis": None},
        ]
    }
    assert wandb_report._next_commands(diagnosis) == [
        "python train.py optim=bf16",
        "python train.py bucket=25",
    ]


def test_no_report_with_logger_report_false_or_wandb_disabled(tmp_path, wandb_env, monkeypatch):
    sweep = offline_sweep(tmp_path, report=False)
    assert not (sweep / wandb_report.SPEC_NAME).exists()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert (
        wandb_report.at_sweep_end(
            sweep, {"name": "wandb", "mode": "auto"}, entries=[], table=None, command=""
        )
        == []
    )
    assert (
        wandb_report.at_sweep_end(sweep, {"name": "none"}, entries=[], table=None, command="") == []
    )
    assert not (sweep / wandb_report.SPEC_NAME).exists()


def test_logger_report_is_typed_and_on_by_default_under_logger_wandb():
    from hydra.errors import ConfigCompositionException

    from tests.conftest import compose

    assert compose(["logger=wandb"]).logger.report is True
    assert compose(["logger=wandb", "logger.report=false"]).logger.report is False
    with pytest.raises(ConfigCompositionException, match="logger.report=sometimes"):
        compose(["logger=wandb", "logger.report=sometimes"])


def test_the_cli_rebuilds_the_spec_from_the_sweep_dir(tmp_path, wandb_env, capsys):
    sweep = offline_sweep(tmp_path)
    spec = sweep / wandb_report.SPEC_NAME
    first = wandb_workspaces_model(spec)
    spec.unlink()
    assert wandb_report.main([str(sweep)]) == 0
    again = wandb_workspaces_model(spec)
    assert again.title == first.title
    assert [type(b).__name__ for b in again.blocks] == [type(b).__name__ for b in first.blocks]
    with pytest.raises(SystemExit, match="does not exist"):
        wandb_report.main([str(tmp_path / "nowhere")])


# --- pushing: a stand-in W&B API on loopback
# ---------------------------------------------------------------------


@contextlib.contextmanager
def wandb_api(hang: bool = False):
    """A stand-in for the W&B API: answers the GraphQL requests saving a report makes, records each
    one."""
    seen: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != "/graphql":  # W&B's own telemetry
                return self.do_GET()
            if hang:
                time.sleep(60)
            request = json.loads(body)
            seen.append(request)
            query, variables = request.get("query", ""), request.get("variables") or {}
            data: dict = {}
            if "upsertView" in query:
                data = {
                    "upsertView": {
                        "inserted": not variables.get("id"),
                        "view": {
                            "id": variables.get("id") or "VmlldzoxMjM0NQ==",
                            "name": variables["name"],
                            "displayName": variables["displayName"],
                            "description": variables["description"],
                            "project": {
                                "id": "UHJvamVjdDox",
                                "name": variables["projectName"],
                                "entityName": variables["entityName"],
                            },
                            "spec": variables["spec"],
                            "updatedAt": "2025-01-31T12:00:00",
                            "createdAt": "2025-01-31T12:00:00",
                        },
                    }
                }
            elif "ProjectInternalId" in query:
                data = {"project": {"id": "UHJvamVjdDox", "internalId": "1"}}
            elif "GetProjects" in query:
                data = {
                    "models": {"edges": [], "pageInfo": {"endCursor": None, "hasNextPage": False}}
                }
            elif "CreateProject" in query:
                data = {
                    "result": {
                        "project": {
                            "id": "UHJvamVjdDox",
                            "name": "ddp-comm-overhead",
                            "entityName": "team",
                            "description": None,
                            "access": None,
                            "views": None,
                        },
                        "model": {
                            "id": "UHJvamVjdDox",
                            "name": "ddp-comm-overhead",
                            "entityName": "team",
                        },
                        "inserted": True,
                    }
                }
            elif "viewer" in query:
                data = {
                    "viewer": {
                        "id": "VXNlcjox",
                        "entity": "team",
                        "username": "me",
                        "flags": "{}",
                        "teams": {"edges": []},
                    }
                }
            out = json.dumps({"data": data}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    with serving(Handler) as url:
        yield url, seen
        import wandb

        wandb.teardown()


def upserts(seen: list[dict]) -> list[dict]:
    return [r["variables"] for r in seen if "upsertView" in r.get("query", "")]


def test_push_saves_the_spec_with_entity_project_and_full_links_and_pushing_again_updates_it(
    tmp_path, wandb_env, monkeypatch, capsys
):
    sweep = offline_sweep(tmp_path)
    group = wandb_log.group_for(sweep)
    title = wandb_workspaces_model(sweep / wandb_report.SPEC_NAME).title
    with wandb_api() as (url, seen):
        monkeypatch.setenv("WANDB_BASE_URL", url)
        monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
        assert wandb_report.main([str(sweep), "--push"]) == 0
        first = upserts(seen)
        assert wandb_report.main([str(sweep), "--push"]) == 0
        assert (
            wandb_report.main([str(sweep)]) == 0
        )  # rebuilt from the sweep dir: keeps the report's id
        assert wandb_report.main([str(sweep), "--push"]) == 0
        again = upserts(seen)[len(first) :]
    report_url = f"{url}/team/ddp-comm-overhead/reports/"
    assert capsys.readouterr().out.count(report_url) >= 2
    # created (no id), then saved again with its links made absolute; the second push updates that
    # report
    assert [u["id"] for u in first] == [None, "VmlldzoxMjM0NQ=="]
    assert len(again) >= 2 and {u["id"] for u in again} == {"VmlldzoxMjM0NQ=="}
    sent = first[-1]
    assert (
        sent["entityName"] == "team" and sent["projectName"] == "ddp-comm-overhead"
    )  # the login's default entity
    assert sent["displayName"] == title and sent["type"] == "runs"
    spec = json.loads(sent["spec"])
    text = json.dumps(spec)
    runsets = [
        rs
        for b in spec["blocks"]
        if b.get("type") == "panel-grid"
        for rs in b["metadata"]["runSets"]
    ]
    assert runsets and all(
        rs["project"] == {"entityName": "team", "name": "ddp-comm-overhead", "id": "1"}
        for rs in runsets
    )
    assert all(
        any(f["key"]["name"] == "group" and f["value"] == group for f in rs["filters"]["filters"])
        for rs in runsets
    )
    summary_id = offline_runs(sweep)[0].name.rsplit("-", 1)[1]
    assert f"{url}/team/ddp-comm-overhead/runs/{summary_id}" in text
    assert f"{url}/team/ddp-comm-overhead/artifacts/sweep_table/" in text
    assert '"url": "runs/' not in text and '"url": "artifacts/' not in text
    # the spec now holds the report's id and its place
    pushed = wandb_workspaces_model(sweep / wandb_report.SPEC_NAME)
    assert pushed.id == "VmlldzoxMjM0NQ==" and pushed.entity == "team"


def test_online_sweep_pushes_at_once_and_a_hung_api_costs_the_upload_timeout_and_one_warning(
    tmp_path, wandb_env, monkeypatch, capsys
):
    sweep = offline_sweep(tmp_path)
    side = sweep / wandb_log.SIDECAR
    side.write_text(
        json.dumps({**json.loads(side.read_text()), "mode": "online"})
    )  # as if the runs went online
    (sweep / wandb_report.SPEC_NAME).unlink()
    capsys.readouterr()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    from results.callbacks import sweep_entries
    from tables.table import build_table

    entries = sweep_entries(sweep)
    kw = dict(entries=entries, table=build_table(entries), command=COMMAND)
    with wandb_api() as (url, seen):
        monkeypatch.setenv("WANDB_BASE_URL", url)
        assert wandb_report.at_sweep_end(sweep, {"name": "wandb", "mode": "online"}, **kw)
        assert len(upserts(seen)) == 2
    assert f"report: {url}/team/ddp-comm-overhead/reports/" in capsys.readouterr().out

    with wandb_api(hang=True) as (url, seen):
        monkeypatch.setenv("WANDB_BASE_URL", url)
        t = time.monotonic()
        wandb_report.at_sweep_end(
            sweep, {"name": "wandb", "mode": "online", "finish_timeout_s": 4}, **kw
        )
        took = time.monotonic() - t
    err = capsys.readouterr()
    assert took < 4 + 6, took  # the upload timeout, plus building the spec on a loaded machine
    warnings = [line for line in err.err.splitlines() if line.startswith("[wandb] WARNING")]
    assert (
        len(warnings) == 1 and "finish_timeout_s=4" in warnings[0]
    )  # one line, whatever else a test run logs
    assert (sweep / wandb_report.SPEC_NAME).is_file() and "--push" in err.out  # kept to push later


# --- the committed studies
# ---------------------------------------------------------------------------------------


def test_results_report_wandb_report_gives_one_report_with_a_section_per_study(
    tmp_path, wandb_env, monkeypatch
):
    from results import report

    monkeypatch.setenv("WANDB_MODE", "offline")
    studies = []
    for name, s in (("study_a", 2.0), ("study_b", 4.0)):
        studies.append(
            write_sweep(
                tmp_path / "runs" / name,
                [
                    train_record(overrides=[f"bucket={b}"], bucket=b, steps_per_s=s * k)
                    for b, k in ((25, 1.0), (100, 1.2))
                ],
                ["bucket=25,100"],
            )
        )
    out = tmp_path / "out"
    assert (
        report.main([*map(str, studies), "--out", str(out), "--wandb-report", "--title", "Studies"])
        == 0
    )
    spec = wandb_workspaces_model(out / wandb_report.SPEC_NAME)
    assert spec.title == "Studies"
    assert [h.text.split(":")[0] for h in blocks_of(spec, "H1")] == ["study_a", "study_b"]
    groups = []
    for name in ("study_a", "study_b"):
        (run_dir,) = offline_runs(out / "wandb_studies" / name)
        run = read_run(run_dir)
        assert run["job_type"] == "sweep_summary" and run["group"].startswith(f"{name} ")
        groups.append(run["group"])
    filters = [rs.filters for grid in blocks_of(spec, "PanelGrid") for rs in grid.runsets]
    assert all(any(f"'{g}'" in f for g in groups) for f in filters)
    assert all(any(f"'{g}'" in f for f in filters) for g in groups)
    assert not panels_of(
        spec, "LinePlot"
    )  # the studies' jobs ran without W&B: no per-step runs to draw
    assert not list(
        Path(studies[0]).glob("**/wandb")
    )  # nothing written into the studies themselves


# --- a real sweep
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_headline_sweep_offline_writes_a_report_on_the_metrics_its_runs_log(headline_sweep):
    proc = headline_sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = proc.out_dir
    report = wandb_workspaces_model(sweep / wandb_report.SPEC_NAME)
    group = wandb_log.group_for(sweep)
    assert report.title.startswith("How do optim and bucket change throughput")
    logged = {
        k
        for n in range(6)
        for row in read_run(offline_runs(sweep / str(n))[0])["history"]
        for k in row
    }
    names = {m.name for p, _ in panels_of(report, "LinePlot") for m in p.y}
    assert "step/time_ms" in names and names <= logged
    assert all(
        f"'{group}'" in rs.filters for grid in blocks_of(report, "PanelGrid") for rs in grid.runsets
    )
    assert panels_of(report, "WeavePanelSummaryTable") and "--push" in proc.stdout
