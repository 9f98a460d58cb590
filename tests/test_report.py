"""python -m results.report: tables and plots whose content is checked against the run records. Its
main() runs in this process; the bad-path errors (exit code, no traceback) go through the real
command."""

from __future__ import annotations

import contextlib
import csv
import io
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from tests.records import write_record
from tests.records import collectives_record, train_record, write_sweep

REPO = Path(__file__).resolve().parents[1]


def _csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _png(path: Path) -> tuple[int, int]:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    height, width = matplotlib.image.imread(path).shape[:2]
    return width, height


def _report(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "results.report", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _report_here(*args: str | Path) -> str:
    """results.report.main in this process; what it printed."""
    from results.report import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(map(str, args))) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A CPU sweep (optim x bucket, one failed job, one crashed job), a GPU box scaling study, a
    collectives run."""
    root = tmp_path_factory.mktemp("study")
    records = []
    for optim, base in (("none", 2.0), ("bf16", 3.0)):
        for bucket in (25, 100):
            records.append(
                train_record(
                    overrides=[f"optim={optim}", f"bucket={bucket}", "model=vgg11_tiny"],
                    steps_per_s=base + bucket / 200,
                    optim=optim,
                    bucket=bucket,
                    grad_rel_error=0.0 if optim == "none" else 2e-3,
                    host="cpu-box",
                )
            )
    records.append(
        train_record(
            overrides=["optim=powersgd", "bucket=25", "model=vgg11_tiny"],
            steps_per_s=1.0,
            status="failed",
            error="RuntimeError: injected",
            host="cpu-box",
        )
    )
    crashed = train_record(
        overrides=["optim=fp16", "bucket=25", "model=vgg11_tiny"], steps_per_s=1.0, host="cpu-box"
    )
    crashed["status"] = "crashed"
    records.append(crashed)
    write_sweep(
        root / "cpu_sweep",
        records,
        ["optim=none,bf16,powersgd,fp16", "bucket=25,100", "model=vgg11_tiny"],
    )
    scaling = []
    for ws in (1, 2, 4):
        rec = train_record(
            overrides=[f"world_size={ws}"],
            world_size=ws,
            steps_per_s=10.0 / (1 + 0.1 * ws),
            host="gpu-box",
            device="NVIDIA H100 80GB HBM3",
        )
        write_record(root / "gpu_scaling" / f"ws{ws}", rec)
        scaling.append(rec)
    coll = collectives_record(overrides=["task=collectives"], host="cpu-box")
    write_record(root / "collectives", coll)
    out = root / "report"
    stdout = _report_here(
        root / "cpu_sweep",
        root / "gpu_scaling",
        root / "collectives",
        "--out",
        out,
        "--title",
        "Test study",
    )
    return {
        "root": root,
        "out": out,
        "stdout": stdout,
        "records": records,
        "scaling": scaling,
        "coll": coll,
    }


def test_report_states_machines_and_commands_first(study):
    md = (study["out"] / "report.md").read_text()
    assert md.startswith("# Test study")
    cpu, gpu = (
        md.index("## Machine 1: cpu-box / cpu"),
        md.index("## Machine 2: gpu-box / NVIDIA H100 80GB HBM3"),
    )
    assert cpu < gpu
    assert (
        "python train.py -m optim=none,bf16,powersgd,fp16 bucket=25,100 model=vgg11_tiny"
        in md[cpu:gpu]
    )
    assert "python train.py task=collectives" in md[cpu:gpu]
    assert "python train.py world_size=4" in md[gpu:] and "4 x NVIDIA H100 80GB HBM3" in md[gpu:]
    assert f"report: {study['out'] / 'report.md'}" in study["stdout"]  # prints where files went


def test_train_table_matches_the_records_and_keeps_failed_rows(study):
    rows = _csv(study["out"] / "cpu-box-cpu-ws2-train.csv")
    assert [r["configuration"] for r in rows] == [
        "optim=none bucket=25",
        "optim=none bucket=100",
        "optim=bf16 bucket=25",
        "optim=bf16 bucket=100",
        "optim=powersgd bucket=25",
        "optim=fp16 bucket=25",
    ]
    base = study["records"][0]["result"]
    assert rows[0]["baseline"] == "True"
    for row, rec in zip(rows[:4], study["records"][:4]):
        res = rec["result"]
        assert float(row["steps/s"]) == pytest.approx(res["throughput"]["steps_per_s"])
        assert float(row["samples/s"]) == pytest.approx(res["throughput"]["samples_per_s"])
        assert float(row["speed-up"]) == pytest.approx(
            res["throughput"]["samples_per_s"] / base["throughput"]["samples_per_s"]
        )
        assert float(row["step median ms"]) == pytest.approx(res["step_time_s"]["median"] * 1e3)
        assert float(row["exposed comm ms"]) == pytest.approx(res["comm"]["exposed_s"] * 1e3)
        assert float(row["MB/step"]) == pytest.approx(res["comm"]["bytes_per_step"] / 1e6)
        assert float(row["grad rel err"]) == pytest.approx(res["accuracy"]["grad_rel_error"])
    assert rows[4]["status"] == "failed" and rows[4]["error"] == "RuntimeError: injected"
    assert rows[5]["status"] == "failed" and "crashed" in rows[5]["error"]


def test_phase_and_comm_tables_match_the_records(study):
    phases = _csv(study["out"] / "cpu-box-cpu-ws2-phases.csv")
    assert len(phases) == 4  # finished runs only
    for row, rec in zip(phases, study["records"]):
        for name, stats in rec["result"]["phases"].items():
            assert float(row[f"{name} ms"]) == pytest.approx(stats["median"] * 1e3)
    comm = _csv(study["out"] / "cpu-box-cpu-ws2-comm.csv")
    c = study["records"][1]["result"]["comm"]
    assert float(comm[1]["busbw GB/s"]) == pytest.approx(c["busbw_GBps"])
    assert int(comm[1]["buckets"]) == c["buckets"]["count"]


def test_machines_and_world_sizes_are_never_mixed_in_one_table(study):
    out = study["out"]
    gpu_tables = sorted(p.name for p in out.glob("gpu-box-*-train.csv"))
    assert gpu_tables == [f"gpu-box-nvidia-h100-80gb-hbm3-ws{n}-train.csv" for n in (1, 2, 4)]
    for n, rec in zip((1, 2, 4), study["scaling"]):
        rows = _csv(out / f"gpu-box-nvidia-h100-80gb-hbm3-ws{n}-train.csv")
        assert len(rows) == 1 and float(rows[0]["steps/s"]) == pytest.approx(
            rec["result"]["throughput"]["steps_per_s"]
        )
    cpu_rows = _csv(out / "cpu-box-cpu-ws2-train.csv")
    assert all("world_size" not in r["configuration"] for r in cpu_rows)
    scaling = _csv(out / "gpu-box-nvidia-h100-80gb-hbm3-scaling.csv")
    base = study["scaling"][0]["result"]["throughput"]["samples_per_s"]
    for row, rec in zip(scaling, study["scaling"]):
        n = rec["result"]["world_size"]
        samples_per_s = rec["result"]["throughput"]["samples_per_s"]
        assert float(row["scaling efficiency"]) == pytest.approx(samples_per_s / (base * n))


def test_collectives_rows_table(study):
    rows = _csv(study["out"] / "cpu-box-cpu-ws2-collectives-rows.csv")
    want = study["coll"]["result"]["rows"]
    assert len(rows) == len(want)
    for row, r in zip(rows, want):
        assert row["op"] == r["op"] and int(row["size B"]) == r["bytes"]
        assert float(row["busbw GB/s"]) == pytest.approx(r["busbw_GBps"])


def test_plots_are_written_and_linked(study):
    out = study["out"]
    md = (out / "report.md").read_text()
    expected = [
        "cpu-box-cpu-ws2-throughput.png",
        "cpu-box-cpu-ws2-phases.png",
        "cpu-box-cpu-ws2-bucket.png",
        "cpu-box-cpu-ws2-busbw.png",
        "gpu-box-nvidia-h100-80gb-hbm3-scaling.png",
    ]
    for name in expected:
        width, height = _png(out / name)
        assert width > 400 and height > 150
        assert f"]({name})" in md
    assert not (
        out / "gpu-box-nvidia-h100-80gb-hbm3-ws1-bucket.png"
    ).exists()  # no bucket variation there


def test_report_on_a_moved_sweep_dir_defaults_to_its_report_folder(tmp_path):
    """Committed runs are copies: the records' own paths point to where they ran, the report reads
    where they are."""
    write_sweep(
        tmp_path / "ran_here",
        [
            train_record(overrides=[f"bucket={b}"], bucket=b, steps_per_s=2.0 + b / 100)
            for b in (25, 100)
        ],
        ["bucket=25,100"],
    )
    (tmp_path / "ran_here").rename(tmp_path / "committed")
    _report_here(tmp_path / "committed")
    md = (tmp_path / "committed" / "report" / "report.md").read_text()
    assert "python train.py -m bucket=25,100" in md and "| bucket=100 " in md


@pytest.mark.subprocess
def test_bad_paths_give_a_clear_error(tmp_path):
    proc = _report(tmp_path / "nope")
    assert (
        proc.returncode != 0 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    )
    (tmp_path / "empty").mkdir()  # the second case in this process: one start is the entry point's
    from results.report import main

    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "empty")])
    assert e.value.code not in (0, None) and "no run records" in str(e.value.code)
