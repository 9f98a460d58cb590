"""W&B the way W&B users work: evidence as artifacts, groups named for the study, the sweep table's
columns as they are. Checked on what W&B writes offline (the artifact records in the .wandb run file
and the files they point at), no mocks."""

from __future__ import annotations

import base64
import glob
import hashlib
import json
from pathlib import Path

from results import wandb_log
from base.record import RECORD_NAME, Record, read_record
from tables.table import Table
from tests.records import train_record, write_sweep
from tests.test_wandb import offline_runs, wandb_env, wandb_records  # noqa: F401 - wandb_env is a fixture


def artifacts(run_dir: Path) -> dict[str, dict]:
    """{name: {type, metadata, files: {path in artifact: (digest, local_path)}}} of one offline
    run."""
    (run_file,) = glob.glob(str(run_dir / "run-*.wandb"))
    found = {}
    for r in wandb_records(run_file):
        if r.WhichOneof("record_type") == "artifact":
            a = r.artifact
            found[a.name] = {
                "type": a.type,
                "metadata": json.loads(a.metadata or "{}"),
                "files": {c.path: (c.digest, c.local_path) for c in a.manifest.contents},
            }
    return found


def holds(artifact: dict, path: Path) -> bool:
    """The artifact has `path` under its name, with W&B's digest (base64 MD5) of the bytes on disk,
    staged as is."""
    digest, staged = artifact["files"][path.name]
    data = path.read_bytes()
    return (
        digest == base64.b64encode(hashlib.md5(data).digest()).decode()
        and Path(staged).read_bytes() == data
    )


def _job(tmp_path, profile: bool, status="ok"):
    sweep = tmp_path / "multirun" / "2025-01-31" / "12-00-00"
    rec = train_record(
        overrides=["bucket=100", "logger.mode=offline"],
        bucket=100,
        steps_per_s=2.0,
        status=status,
        error=None if status == "ok" else "RuntimeError: rank 1 died",
    )
    rec["config"]["profile"] = {"enabled": profile, "wait": 1, "warmup": 1, "active": 3}
    write_sweep(sweep, [rec], ["bucket=25,100", "experiment=autotune"])
    job_dir = sweep / "0"
    for rank in (0, 1):
        (job_dir / f"trace.rank{rank}.json").write_text(
            json.dumps({"traceEvents": [{"name": "step", "pid": rank}]})
        )
    return job_dir, read_record(job_dir)


def test_run_record_and_each_ranks_trace_are_artifacts_of_the_offline_run(tmp_path, wandb_env):
    job_dir, rec = _job(tmp_path, profile=True)
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "offline"}})
    (run_dir,) = offline_runs(job_dir)
    found = artifacts(run_dir)
    group = "autotune 2025-01-31_12-00-00"
    record = found[wandb_log.artifact_name("record", group, "job0")]
    assert record["type"] == "run_record" and holds(record, job_dir / RECORD_NAME)
    assert record["metadata"]["status"] == "ok"
    assert record["metadata"]["samples/s"] == rec["result"]["headline"]["samples/s"]
    trace = found[wandb_log.artifact_name("trace", group, "job0")]
    assert trace["type"] == "profiler_trace" and set(trace["files"]) == {
        "trace.rank0.json",
        "trace.rank1.json",
    }
    assert all(holds(trace, job_dir / f"trace.rank{r}.json") for r in (0, 1))


def test_a_failed_run_keeps_its_record_artifact_and_traces_need_profile_enabled(
    tmp_path, wandb_env
):
    job_dir, rec = _job(tmp_path, profile=False, status="failed")
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "offline"}})
    found = artifacts(offline_runs(job_dir)[0])
    assert [a["type"] for a in found.values()] == [
        "run_record"
    ]  # stale trace files are not this run's evidence
    (record,) = found.values()
    assert record["metadata"]["status"] == "failed" and holds(record, job_dir / RECORD_NAME)


def test_groups_are_named_for_the_study_then_the_date(tmp_path):
    stamp = "2025-01-31_12-00-00"
    for study in "ab":
        (tmp_path / study / "2025-01-31" / "12-00-00").mkdir(parents=True)
    by_experiment = write_sweep(
        tmp_path / "a" / "2025-01-31" / "12-00-00", [], ["experiment=autotune", "bucket=1,25"]
    )
    by_keys = write_sweep(
        tmp_path / "b" / "2025-01-31" / "12-00-00",
        [],
        ["optim=none,bf16", "bucket=25,100", "seed=1"],
    )
    assert wandb_log.group_for(by_experiment) == f"autotune {stamp}"
    assert wandb_log.group_for(by_keys) == f"optim,bucket {stamp}"
    single = tmp_path / "outputs" / "2025-01-31" / "12-00-00"
    single.mkdir(parents=True)
    assert wandb_log.group_for(single, ["bucket=100"], "train") == f"train {stamp}"
    assert (
        wandb_log.group_for(single, ["experiment=ddp_overhead"], "train") == f"ddp_overhead {stamp}"
    )
    rec = train_record(overrides=["bucket=100"], steps_per_s=2.0, output_dir=str(single))
    assert wandb_log._record_group(Record.from_dict(rec), {}) == f"train {stamp}"
    assert wandb_log._record_group(Record.from_dict(rec), {"group": "mine"}) == "mine"
    tagged = Record.from_dict({**rec, "overrides": ["experiment=ddp_overhead"]})
    assert "experiment:ddp_overhead" in wandb_log.run_tags(None, tagged, {})
    assert len(wandb_log.group_for(by_keys, task="train")) <= 128


def test_sweep_summary_has_the_table_csv_as_an_artifact_and_every_column_of_the_table(
    tmp_path, wandb_env
):
    from results.callbacks import sweep_entries, write_sweep_table
    from tables.table import build_table

    sweep = tmp_path / "multirun" / "2025-01-31" / "12-00-00"
    write_sweep(
        sweep,
        [
            train_record(overrides=[f"bucket={b}"], bucket=b, steps_per_s=s)
            for b, s in ((25, 2.0), (100, 3.0))
        ],
        ["bucket=25,100"],
    )
    entries = sweep_entries(sweep)
    built = build_table(entries)
    # columns another part of the tool may add (CI, verdict): the W&B table must carry them as the
    # Table has them
    extra = {"speed-up CI": ["–", "1.4 [1.3, 1.6]"], "verdict": ["baseline", "faster"]}
    table = Table(
        built.columns + list(extra),
        [{**row, **{c: v[i] for c, v in extra.items()}} for i, row in enumerate(built.rows)],
        title=built.title,
        notes=built.notes,
    )
    md, csv = write_sweep_table(sweep, table, "python train.py -m bucket=25,100")
    (sweep / "autotune.json").write_text(json.dumps({"conclusion": "keep the default"}))
    wandb_log.log_sweep(table, entries, sweep, {"name": "wandb", "mode": "offline"}, command="cmd")
    (run_dir,) = offline_runs(sweep)
    (table_json,) = glob.glob(
        str(run_dir / "files" / "media" / "table" / "sweep_table_*.table.json")
    )
    data = json.loads(Path(table_json).read_text())
    assert data["columns"] == table.columns
    for c, values in extra.items():
        assert [row[data["columns"].index(c)] for row in data["data"]] == values
    group = "bucket 2025-01-31_12-00-00"
    evidence = artifacts(run_dir)[wandb_log.artifact_name("sweep", group)]
    assert evidence["type"] == "sweep_table" and evidence["metadata"]["jobs"] == 2
    assert holds(evidence, csv) and holds(evidence, md) and holds(evidence, sweep / "autotune.json")
    assert wandb_log.SIDECAR not in evidence["files"]
