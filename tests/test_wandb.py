"""W&B logging, checked on the files W&B writes in offline mode (the .wandb run file, the table
JSON), no mocks."""

from __future__ import annotations

import contextlib
import csv
import glob
import http.server
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from results import wandb_log
from base.record import RECORD_NAME, read_record
from tests.conftest import serving, wandb_free_env
from tests.records import write_record
from tests.records import train_record, write_sweep

REPO = Path(__file__).resolve().parents[1]


# --- reading what W&B wrote
# ------------------------------------------------------------------------------------


def wandb_records(run_file: str | Path):
    """Records of a .wandb file (W&B's leveldb-log format: 7-byte header, 32 KiB blocks of
    CRC|len|type chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(run_file).read_bytes()
    assert data[:4] == b":W&B", run_file
    pos, buf, block = 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if kind == 0 and length == 0:
            break
        buf += data[pos : pos + length]
        pos += length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def read_run(run_dir: str | Path) -> dict:
    """run (group, job_type, name, tags), history rows, final summary and exit code of one offline
    run."""
    out = {"history": [], "summary": {}, "exit_code": None}
    files = glob.glob(str(Path(run_dir) / "run-*.wandb"))
    if not files:  # a run whose process was killed before W&B wrote anything
        return out
    (run_file,) = files
    for r in wandb_records(run_file):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out.update(
                group=r.run.run_group,
                job_type=r.run.job_type,
                name=r.run.display_name,
                tags=list(r.run.tags),
                project=r.run.project,
                config={u.key: json.loads(u.value_json) for u in r.run.config.update},
            )
        elif kind == "history":
            out["history"].append(
                {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            )
        elif kind == "summary":
            for u in r.summary.update:
                out["summary"]["/".join(u.nested_key) or u.key] = json.loads(u.value_json)
        elif kind == "exit":
            out["exit_code"] = r.exit.exit_code
    return out


def offline_runs(directory: Path) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(directory / "wandb" / "offline-run-*")))


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """No credentials, no user W&B settings: what a fresh CI machine looks like; no online failure
    remembered."""
    home = tmp_path / "home"
    home.mkdir()
    for var, value in wandb_free_env(home).items():
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    monkeypatch.setattr(wandb_log, "_online_failed", None)
    yield home
    import wandb

    # the session's credentials go with it (resolve_mode's login leaves them for the next run)
    wandb.teardown()


@pytest.fixture
def refused_port():
    """A port bound but not listening: connections are refused at once."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]
    s.close()


@contextlib.contextmanager
def hanging_server():
    """A local W&B stand-in whose every request (wandb.init's graphql POST) hangs; yields (url,
    requests seen)."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(self.path)
            time.sleep(600)

        do_GET = do_POST

        def log_message(self, *args):
            pass

    with serving(Handler) as url:
        yield url, seen


# --- mode
# --------------------------------------------------------------------------------------------------


def test_mode_is_the_users_switch_and_online_needs_only_credentials_never_the_network(
    wandb_env, monkeypatch
):
    assert wandb_log.resolve_mode({"mode": "disabled"})[0] == "disabled"
    assert wandb_log.resolve_mode({"mode": "offline"})[0] == "offline"
    mode, why = wandb_log.resolve_mode({"mode": "auto"})
    assert mode == "offline" and "not logged in" in why and "wandb login" in why
    monkeypatch.setenv(
        "WANDB_BASE_URL", "http://127.0.0.1:9"
    )  # nothing listens: resolve_mode must not ask it
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_log.resolve_mode({"mode": "auto"})[0] == "online"
    for env, expected in (("offline", "offline"), ("dryrun", "offline"), ("disabled", "disabled")):
        monkeypatch.setenv("WANDB_MODE", env)
        assert wandb_log.resolve_mode({"mode": "auto"}) == (expected, f"WANDB_MODE={env}")
        assert wandb_log.resolve_mode({"mode": "online"})[0] == expected


def test_no_credentials_go_offline_at_once_and_never_prompt(tmp_path, wandb_env, monkeypatch):
    """Even where W&B could prompt (a terminal, WANDB_SILENT=false): wandb.init(mode="online")
    without a key would ask for one on the terminal; the run goes offline without asking."""
    from wandb.errors import term

    prompts = []

    def prompted(prompt, **kw):
        prompts.append(prompt)
        raise term.NotATerminalError

    monkeypatch.setenv("WANDB_SILENT", "false")
    monkeypatch.setattr(term, "_terminput", prompted)
    job_dir, rec = _job(tmp_path)
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "auto"}})
    assert not prompts
    (run_dir,) = offline_runs(job_dir)
    assert read_run(run_dir)["exit_code"] == 0
    assert json.loads((job_dir / wandb_log.SIDECAR).read_text())["mode"] == "offline"


def test_a_malformed_key_goes_offline_with_the_reason_and_keeps_the_wandb_run(
    tmp_path, wandb_env, monkeypatch
):
    """wandb.login raises on a key W&B cannot use (too short): the run is still logged offline, for
    `wandb sync` after the key is fixed (it was skipped: no W&B run at all)."""
    monkeypatch.setenv("WANDB_API_KEY", "abc")
    mode, why = wandb_log.resolve_mode({"mode": "auto"})
    assert mode == "offline" and "W&B refused the credentials" in why and "wandb login" in why
    job_dir, rec = _job(tmp_path)
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "auto"}})
    (run_dir,) = offline_runs(job_dir)
    assert json.loads((job_dir / wandb_log.SIDECAR).read_text())["mode"] == "offline"


def test_an_unreachable_host_ends_offline_within_the_init_timeout_and_once_per_process(
    tmp_path, wandb_env, monkeypatch, refused_port, capsys
):
    """A refused port (nothing listens), then a host that takes the request and never answers:
    wandb.init gives up after logger.init_timeout_s, the run is logged offline with the cause and
    the fix, the record is kept; the next run in the same process (a local sweep's next job) goes
    offline at once without asking the host again."""
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{refused_port}")
    job_dir, rec = _job(tmp_path)
    t = time.monotonic()
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "auto", "init_timeout_s": 3}})
    took = time.monotonic() - t
    assert took < 3 + 15, took  # + W&B's local offline write on a loaded 2-core machine
    out = capsys.readouterr().out
    assert "online start failed" in out and "WANDB_MODE=offline" in out and "wandb sync" in out, out
    (run_dir,) = offline_runs(job_dir)
    assert read_run(run_dir)["exit_code"] == 0 and read_record(job_dir)["status"] == "ok"
    assert not list(
        (job_dir / "wandb").glob("run-*")
    )  # the failed try leaves nothing `wandb sync` would upload

    monkeypatch.setattr(wandb_log, "_online_failed", None)
    with hanging_server() as (url, seen):
        monkeypatch.setenv("WANDB_BASE_URL", url)
        t = time.monotonic()
        wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "online", "init_timeout_s": 3}})
        assert time.monotonic() - t < 3 + 15
        asked = len(seen)
        assert asked >= 1
        wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "auto", "init_timeout_s": 3}})
        assert len(seen) == asked  # not asked again
    assert len(offline_runs(job_dir)) == 3
    out = capsys.readouterr().out
    assert out.count("online start failed") == 2, out


# --- one run
# --------------------------------------------------------------------------------------------------


def _job(tmp_path, **kw):
    job_dir = tmp_path / "sweep" / "0"
    rec = train_record(
        overrides=["optim=none", "bucket=25", "logger.mode=offline"],
        steps_per_s=2.0,
        num=0,
        sweep_dir=str(tmp_path / "sweep"),
        output_dir=str(job_dir),
        **kw,
    )
    write_record(job_dir, rec)
    return job_dir, read_record(job_dir)


def test_offline_run_has_group_config_tags_history_and_headline_summary(
    tmp_path, wandb_env, capsys
):
    job_dir, rec = _job(tmp_path)
    cfg = {
        **rec["config"],
        "logger": {"name": "wandb", "mode": "offline", "tags": ["cpu"]},
        "tags": ["vit_study"],
    }
    wandb_log.log_run(rec, cfg)
    (run_dir,) = offline_runs(job_dir)
    run = read_run(run_dir)
    assert run["group"] == wandb_log.group_for(tmp_path / "sweep") == f"{tmp_path.name}_sweep"
    assert run["job_type"] == "train" and run["name"] == "optim=none bucket=25"
    assert set(run["tags"]) == {"cpu", "vit_study"} and run["project"] == "ddp-comm-overhead"
    assert run["config"]["task"] == "train" and run["config"]["overrides"] == rec["overrides"]
    steps = rec["result"]["series"]["step_time_s"]
    assert [h["step/time_ms"] for h in run["history"]] == pytest.approx([t * 1e3 for t in steps])
    backward_s = rec["result"]["series"]["phases"]["backward"][0]
    assert run["history"][0]["phase_ms/backward"] == pytest.approx(backward_s * 1e3)
    assert run["history"][0]["throughput/samples_per_s"] == pytest.approx(
        8 / steps[0]
    )  # 4 per rank x 2 ranks
    for label, value in rec["result"]["headline"].items():
        assert run["summary"][label] == pytest.approx(value)
    assert run["summary"]["status"] == "ok" and run["exit_code"] == 0
    assert f"wandb sync {run_dir}" in capsys.readouterr().out
    side = json.loads((job_dir / wandb_log.SIDECAR).read_text())
    assert side["group"] == run["group"] and side["mode"] == "offline"


def test_failed_record_gives_a_finished_run_marked_failed(tmp_path, wandb_env):
    job_dir, rec = _job(tmp_path, status="failed", error="RuntimeError: rank 1 died")
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "offline"}})
    run = read_run(offline_runs(job_dir)[0])
    assert run["exit_code"] == 1 and run["summary"]["status"] == "failed"
    assert "rank 1 died" in run["summary"]["error"]


def test_a_wandb_failure_never_raises_and_leaves_the_record(tmp_path, wandb_env, capsys):
    job_dir, rec = _job(tmp_path)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where W&B wants a directory")
    rec["job"]["output_dir"] = str(blocker)
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "offline"}})  # must not raise
    assert "WARNING" in capsys.readouterr().err
    rec["job"]["output_dir"] = str(job_dir)
    wandb_log.log_run(
        rec, {"logger": {"name": "wandb", "mode": "offline", "project": "bad/name"}}
    )  # wandb.init raises
    assert "Invalid project name" in capsys.readouterr().err
    assert read_record(job_dir / RECORD_NAME)["status"] == "ok"
    wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "disabled"}})
    wandb_log.log_run(rec, {"logger": {"name": "none"}})
    assert not (job_dir / "wandb").exists()


def test_online_with_a_broken_server_falls_back_to_offline_in_seconds(
    tmp_path, wandb_env, monkeypatch
):
    class Broken(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(500)
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
        job_dir, rec = _job(tmp_path)
        t = time.monotonic()
        wandb_log.log_run(rec, {"logger": {"name": "wandb", "mode": "online", "init_timeout_s": 3}})
        assert time.monotonic() - t < 30
    finally:
        server.shutdown()
    (run_dir,) = offline_runs(job_dir)
    assert read_run(run_dir)["exit_code"] == 0


def test_sweep_summary_run_holds_the_table(tmp_path, wandb_env):
    from results.callbacks import sweep_entries
    from results.plots import standard_plots
    from tables.table import build_table

    sweep = tmp_path / "sweep"
    write_sweep(
        sweep,
        [
            train_record(overrides=[f"bucket={b}"], bucket=b, steps_per_s=s)
            for b, s in ((25, 2.0), (100, 3.0))
        ],
        ["bucket=25,100"],
    )
    entries = sweep_entries(sweep)
    table = build_table(entries)
    images = standard_plots(entries, sweep, prefix="sweep_")
    wandb_log.log_sweep(
        table, entries, sweep, {"name": "wandb", "mode": "offline"}, images=images, command="cmd"
    )
    (run_dir,) = offline_runs(sweep)
    run = read_run(run_dir)
    assert run["job_type"] == "sweep_summary" and run["group"] == wandb_log.group_for(sweep)
    (table_json,) = glob.glob(
        str(run_dir / "files" / "media" / "table" / "sweep_table_*.table.json")
    )
    data = json.loads(Path(table_json).read_text())
    assert [row[data["columns"].index("steps/s")] for row in data["data"]] == [2.0, 3.0]
    assert glob.glob(str(run_dir / "files" / "media" / "images" / "plots" / "*.png"))


# --- end to end: train.py sweeps
# -------------------------------------------------------------------------------


def _train(tmp_path, *args, env=None):
    return subprocess.run(
        [
            sys.executable,
            "train.py",
            "-m",
            *args,
            "model=vgg11_tiny",
            "scale=smoke",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_sweep_offline_gives_one_run_per_job_and_a_summary_in_one_group(headline_sweep):
    """The headline sweep (tests.conftest.HEADLINE_SWEEP: optim=bf16,powersgd x bucket=25,100,2000,
    W&B offline, no credentials), shared with test_sweeps."""
    proc = headline_sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = proc.out_dir
    job_runs = [offline_runs(sweep / str(n)) for n in range(6)]
    assert all(len(r) == 1 for r in job_runs), job_runs
    jobs = [read_run(r[0]) for r in job_runs]
    (summary_dir,) = offline_runs(sweep)
    summary = read_run(summary_dir)
    assert {j["group"] for j in jobs} == {summary["group"]} == {wandb_log.group_for(sweep)}
    assert [j["job_type"] for j in jobs] == ["train"] * 6 and summary["job_type"] == "sweep_summary"
    assert [j["exit_code"] for j in jobs] == [0] * 6
    assert jobs[1]["name"].startswith("optim=bf16 bucket=100")
    (table_json,) = glob.glob(
        str(summary_dir / "files" / "media" / "table" / "sweep_table_*.table.json")
    )
    table = json.loads(Path(table_json).read_text())
    col = table["columns"].index
    assert len(table["data"]) == 6
    for n, row in enumerate(table["data"]):
        record = read_record(sweep / str(n))
        assert row[col("status")] == "ok" and row[col("job")] == n
        assert row[col("steps/s")] == pytest.approx(record["result"]["throughput"]["steps_per_s"])
    assert "job 6/6" in proc.stdout and (sweep / "sweep_table.md").is_file()


@pytest.mark.slow
def test_sweep_with_wandb_unreachable_completes_keeps_every_record_and_marks_the_failed_run(
    tmp_path, wandb_env, refused_port
):
    env = {"WANDB_BASE_URL": f"http://127.0.0.1:{refused_port}", "WANDB_API_KEY": "k" * 40}
    # init_timeout_s=3, not the default 15: the first job's online try waits it out (the refused
    # port is retried), the second goes offline at once; how long a try may wait is
    # test_an_unreachable_host_ends_offline_within_the_init_timeout_and_once_per_process's check.
    # One rank per job: W&B is the submitting process's (job.finalise), the same for any world
    # size, and the failed job's rank 0 raising is the failure a rank 1 fault gave (issue 36)
    proc = _train(
        tmp_path,
        "world_size=1",
        "fault.rank=null,0",
        "logger=wandb",
        "logger.mode=online",
        "logger.init_timeout_s=3",
        env=env,
    )
    assert proc.returncode == 1, (
        proc.stdout[-3000:] + proc.stderr[-3000:]
    )  # job 1 failed (injected), by design
    sweep = tmp_path / "sweep"
    records = [read_record(sweep / str(n)) for n in range(2)]
    assert [r["status"] for r in records] == ["ok", "failed"] and "fault injected" in records[1][
        "error"
    ]
    assert "online start failed" in proc.stdout and "wandb sync" in proc.stdout
    with open(sweep / "sweep_table.csv") as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["ok", "failed"]
    ok_run = read_run(offline_runs(sweep / "0")[0])
    assert ok_run["exit_code"] == 0 and ok_run["summary"]["status"] == "ok"
    finished = [read_run(r) for r in offline_runs(sweep / "1")]
    finished = [r for r in finished if r["exit_code"] is not None]
    assert (
        len(finished) == 1
        and finished[0]["exit_code"] == 1
        and finished[0]["summary"]["status"] == "failed"
    )
    assert len(offline_runs(sweep)) == 1  # the summary run


def test_the_logger_fallback_is_conf_logger_wandb_yaml():
    """A partial logger node (hand-made, or an older record's) is completed from wandb_log.FALLBACK,
    conf/logger/wandb.yaml read outside Hydra: it must hold what Hydra composes from it (no value
    that only an interpolation or the schema supplies)."""
    from tests.conftest import compose

    composed = {
        k: v
        for k, v in OmegaConf.to_container(compose(["logger=wandb"]).logger).items()
        if k != "_target_"
    }
    assert composed == wandb_log.FALLBACK
