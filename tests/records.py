"""Run records with chosen numbers, shaped like the schema (base/record.py), written as the tool
writes them (Record.write).

For tests of the tables, plots, report and W&B logging: every figure is derived from a few
arguments, so a test can check a table cell against the number it put in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from base.record import Record
from base.record import train_headline

PHASE_SHARE = {
    "data": 0.05,
    "h2d": 0.05,
    "forward": 0.25,
    "backward": 0.45,
    "sync": 0.1,
    "optimizer": 0.1,
}


def _env(host: str, device: str, world_size: int, backend: str) -> dict[str, Any]:
    return {
        "hostnames": [host],
        "cpu_count": 2,
        "torch": "2.15.0",
        "cuda": None if device == "cpu" else "13.2",
        "nccl": None if device == "cpu" else "2.27.7",
        "devices": [device] * world_size,
        "device_count": 0 if device == "cpu" else world_size,
        "backend": backend,
        "world_size": world_size,
        "vars": {"OMP_NUM_THREADS": "1"},
    }


def train_record(
    *,
    overrides: list[str],
    steps_per_s: float,
    num: int | None = None,
    optim: str = "none",
    bucket: float = 25,
    world_size: int = 2,
    batch_per_rank: int = 4,
    host: str = "node-a",
    device: str = "cpu",
    bytes_per_step: int = 8_000_000,
    exposed_s: float = 0.004,
    grad_rel_error: float = 0.0,
    steps: int = 6,
    sweep_dir: str | None = None,
    output_dir: str | None = None,
    status: str = "ok",
    error: str | None = None,
    headline: bool = True,
) -> dict[str, Any]:
    step = 1.0 / steps_per_s
    global_batch = batch_per_rank * world_size
    result: dict[str, Any] = {
        "device": "cpu" if device == "cpu" else "cuda",
        "device_name": device,
        "world_size": world_size,
        "backend": "gloo" if device == "cpu" else "nccl",
        "sync": "ddp",
        "optim": optim,
        "bucket_mb": bucket,
        "batch_per_rank": batch_per_rank,
        "global_batch": global_batch,
        "accumulate": 1,
        "effective_batch": global_batch,
        "warmup_steps": 1,
        "steps": steps,
        "throughput": {
            "wall_s": steps * step,
            "steps_per_s": steps_per_s,
            "samples_per_s": steps_per_s * global_batch,
            # one step per timed block, +-2% around the step time: the sum is exactly steps * step
            "blocks": {
                "walls_s": [step * (1 + 0.01 * (i - (steps - 1) / 2)) for i in range(steps)],
                "steps": [1] * steps,
            },
        },
        "step_time_s": {
            "median": step,
            "p90": step * 1.1,
            "mean": step,
            "min": step * 0.9,
            "max": step * 1.2,
        },
        "phases": {
            p: {"median": step * share, "p90": step * share * 1.1, "mean": step * share}
            for p, share in PHASE_SHARE.items()
        },
        "per_rank": [
            {
                "rank": r,
                "host": host,
                "steps_per_s": steps_per_s,
                "step_median_s": step,
                "step_p90_s": step * 1.1,
                "phases_median": {p: step * s for p, s in PHASE_SHARE.items()},
            }
            for r in range(world_size)
        ],
        "slowest_rank": world_size - 1,
        "comm": {
            "bytes_per_step": bytes_per_step,
            "collectives_per_step": 3,
            "buckets": {"count": 3, "sizes_bytes": [bytes_per_step // 3] * 3},
            "time_s": step * 0.3,
            "overlap_s": step * 0.3 - exposed_s,
            "exposed_s": exposed_s,
            "exposed_n": 1,  # one DDP probe step
            "backward_compute_s": step * 0.4,
            "algbw_GBps": bytes_per_step / (step * 0.3) / 1e9,
            "busbw_GBps": bytes_per_step / (step * 0.3) / 1e9,
            "method": "ddp comm hook timestamps",
        },
        "accuracy": {"final_loss": 2.3, "grad_rel_error": grad_rel_error, "grad_error_steps": 3},
        "h2d": {"mode": "blocking", "copies": False, "note": "cpu"},
        "series": {
            "step_time_s": [step * (1 + 0.01 * i) for i in range(steps)],
            "phases": {p: [step * s] * steps for p, s in PHASE_SHARE.items()},
        },
    }
    if headline:
        result["headline"] = train_headline(result)
    return _record(
        "train",
        overrides,
        result,
        num,
        host,
        device,
        world_size,
        sweep_dir,
        output_dir,
        status,
        error,
    )


def collectives_record(
    *,
    overrides: list[str],
    busbw_peak: float = 2.0,
    world_size: int = 2,
    host: str = "node-a",
    device: str = "cpu",
    num: int | None = None,
    sweep_dir: str | None = None,
    output_dir: str | None = None,
) -> dict[str, Any]:
    rows = []
    for op in ("all_reduce", "all_gather"):
        for size in (1024, 16384, 262144, 4194304):
            busbw = busbw_peak * size / (size + 65536) * (1.0 if op == "all_reduce" else 0.7)
            factor = (
                2 * (world_size - 1) / world_size
                if op == "all_reduce"
                else (world_size - 1) / world_size
            )
            algbw = busbw / factor
            rows.append(
                {
                    "op": op,
                    "bytes": size,
                    "count": size // 4,
                    "dtype": "float32",
                    "time_us": size / (algbw * 1e9) * 1e6,
                    "algbw_GBps": algbw,
                    "busbw_GBps": busbw,
                }
            )
    result = {
        "rows": rows,
        "headline": {
            "peak busbw GB/s (all_reduce)": max(
                r["busbw_GBps"] for r in rows if r["op"] == "all_reduce"
            )
        },
    }
    return _record(
        "collectives",
        overrides,
        result,
        num,
        host,
        device,
        world_size,
        sweep_dir,
        output_dir,
        "ok",
        None,
    )


def _optim(name: str) -> dict:
    """config.optim as conf/optim/<name>.yaml writes it: its factory in _target_ (none: no hook)."""
    return {"_target_": None if name == "none" else f"tasks.train.hooks.{name}", "name": name}


def _record(
    task, overrides, result, num, host, device, world_size, sweep_dir, output_dir, status, error
):
    return {
        "status": status,
        "error": error,
        "task": task,
        "overrides": overrides,
        "job": {
            "name": "train",
            "num": num,
            "output_dir": output_dir,
            "sweep_dir": sweep_dir,
            "slurm_job_id": None,
            "log": None,
        },
        "config": {
            "task": task,
            "world_size": world_size,
            "logger": {"_target_": None, "name": "none"},
            "optim": _optim(result.get("optim", "none")),
            "bucket": result.get("bucket_mb", 25),
        },
        "env": _env(host, device, world_size, "gloo" if device == "cpu" else "nccl"),
        "started": "2025-01-01T00:00:00Z",
        "finished": "2025-01-01T00:01:00Z",
        "result": result if status == "ok" else {},
        "command": "python train.py " + " ".join(overrides),
    }


def write_sweep(
    sweep_dir: str | Path, records: list[dict[str, Any]], sweep_overrides: list[str] | None = None
) -> Path:
    """Each record into <sweep_dir>/<num>/ with Hydra's .hydra/overrides.yaml, plus
    multirun.yaml."""
    sweep_dir = Path(sweep_dir)
    for num, record in enumerate(records):
        job_dir = sweep_dir / str(num)
        (job_dir / ".hydra").mkdir(parents=True, exist_ok=True)
        (job_dir / ".hydra" / "overrides.yaml").write_text(
            "".join(f"- {o}\n" for o in record["overrides"])
        )
        record["job"].update(num=num, output_dir=str(job_dir), sweep_dir=str(sweep_dir))
        if record["status"] != "crashed":
            write_record(job_dir, record)
    task = sweep_overrides if sweep_overrides is not None else []
    (sweep_dir / "multirun.yaml").write_text(
        "hydra:\n  job:\n    name: train\n  overrides:\n    hydra:\n    - hydra.mode=MULTIRUN\n    "
        "task:\n" + "".join(f"    - {o}\n" for o in task)
    )
    return sweep_dir


def write_record(directory, record: dict) -> Path:
    """A hand-made record dict written the way the tool writes records."""
    return Record.from_dict(record).write(directory)
