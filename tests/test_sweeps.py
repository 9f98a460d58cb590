"""The product's headline use and the study presets, as users type them (small model, CPU, 2 gloo
ranks)."""

import csv
import json

import pytest

from tests.conftest import run_train

pytestmark = pytest.mark.slow


def records(sweep_dir):
    return {
        int(p.parent.name): json.loads(p.read_text()) for p in sweep_dir.glob("*/run_record.json")
    }


def test_bf16_powersgd_by_bucket_sweep_writes_one_table(headline_sweep):
    proc = headline_sweep  # shared with test_wandb's sweep test (W&B offline)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(proc.out_dir)
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs.values())
    seen = {(r["config"]["optim"]["name"], r["config"]["bucket"]) for r in recs.values()}
    assert seen == {(o, b) for o in ("bf16", "powersgd") for b in (25, 100, 2000)}
    rows = list(csv.DictReader((proc.out_dir / "sweep_table.csv").open()))
    assert len(rows) == 6
    assert (proc.out_dir / "sweep_table.md").read_text().count("| ok") == 6
    assert (
        "Baseline for speed-up" in (proc.out_dir / "sweep_table.md").read_text()
    )  # the footnotes: in the file
    # issue 25: one line per finished job, Hydra's launch lines quiet, a 5-column table that fits
    # 120 columns
    lines = proc.stdout.splitlines()
    assert sum(line.startswith("[sweep] job ") for line in lines) == 6
    assert not any(
        "Launching 6 jobs locally" in line or line.lstrip().startswith("#0 :") for line in lines
    )
    # the sweep's table: the first block of table lines (a checked-estimates table may follow it,
    # after the sweep diagnosis, when a run's recommendation is a configuration the sweep ran)
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    table = lines[first:end]
    assert len(table) == 2 + 6 and table[0].count("|") == 6 and max(map(len, table)) <= 120, (
        "\n".join(table)
    )


def test_ddp_overhead_preset(tmp_path):
    proc = run_train(
        ["experiment=ddp_overhead", "scale=smoke", "model=vit_tiny", "logger=none"],
        tmp_path,
        multirun=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(proc.out_dir)
    assert sorted(r["result"]["sync"] for r in recs.values()) == ["ddp", "local"]
    assert all(r["result"]["world_size"] == 1 for r in recs.values())
    assert all(r["config"]["tags"] == ["vit_study", "ddp_overhead"] for r in recs.values())


def test_vit_ddp_optimizations_preset_runs_the_studys_rows(tmp_path):
    """One rank per row: what is checked is the knobs each row gives DDP, read back from DDP itself
    (two ranks under the same knobs: test_ddp_knobs)."""
    proc = run_train(
        [
            "experiment=vit_ddp_optimizations",
            "scale=smoke",
            "model=vit_tiny",
            "logger=none",
            "world_size=1",
        ],
        tmp_path,
        multirun=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [records(proc.out_dir)[i] for i in range(8)]
    ddp = [r["result"]["ddp"] for r in recs]
    assert [d["static_graph"] for d in ddp[:3]] == [False, True, True]
    assert [d["gradient_as_bucket_view"] for d in ddp[:3]] == [False, False, True]
    assert [d["comm_hook"] for d in ddp[3:5]] == ["bf16_compress_hook", "powerSGD_hook"]
    assert [d["bucket_cap_mb"] for d in ddp] == [2000, 2000, 2000, 2000, 2000, 100, 25, 100]
