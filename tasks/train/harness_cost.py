"""What measuring costs: the same config run with per-phase timing on and off, and the throughput ratio.

    python -m tasks.train.harness_cost [overrides...]        e.g. python -m tasks.train.harness_cost scale=paper

Each variant runs as a normal `python train.py` job (its own ranks, its own run record); the ratio compares the
wall-clock throughput of the measured windows, which both variants take the same way."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def run_variant(overrides: list[str], timing: bool, out: Path) -> dict:
    cmd = [sys.executable, "train.py", *overrides, f"timing={str(timing).lower()}", "logger=none", f"hydra.run.dir={out}"]
    subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL)
    return json.loads((out / "run_record.json").read_text())


def main(argv: list[str] | None = None) -> float:
    overrides = list(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="harness_cost_") as tmp:
        on = run_variant(overrides, True, Path(tmp) / "on")
        off = run_variant(overrides, False, Path(tmp) / "off")
    a, b = on["result"]["throughput"]["steps_per_s"], off["result"]["throughput"]["steps_per_s"]
    ratio = a / b
    print(f"config: {' '.join(overrides) or '(defaults)'}  device: {on['result']['device_name']}  "
          f"world_size: {on['result']['world_size']}  steps: {on['result']['steps']}")
    print(f"timing on : {a:.4f} steps/s")
    print(f"timing off: {b:.4f} steps/s")
    print(f"ratio on/off: {ratio:.4f}  (cost of measuring: {(1 - ratio) * 100:+.2f}% of throughput; "
          f"run-to-run noise is of the same order on a busy machine: repeat before trusting small values)")
    return ratio


if __name__ == "__main__":
    main()
