"""The run record: one JSON per run, the only thing tables, plots and W&B read.

Fields (schema_version 1):
  schema_version  int; readers refuse versions they do not know
  status          "ok" | "failed";  error: message of the failure (failed only)
  task            "train" | "collectives" | "grad_sync" | "pair_groups"
  overrides       the command-line overrides of this job (Hydra's task overrides)
  job             {name, num, output_dir, sweep_dir, slurm_job_id, log}
  config          the resolved config every rank ran with
  env             {hostnames, cpu_count, torch, cuda, nccl, devices, device_count, backend, world_size, vars{NCCL_*, GLOO_*, OMP_NUM_THREADS}}
  started, finished  ISO-8601 UTC
  result          task-specific figures, seconds and bytes unless a name says otherwise; see README "The run record"
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RECORD_NAME = "run_record.json"


class RecordError(ValueError):
    pass


def write_record(directory: str | Path, record: dict[str, Any]) -> Path:
    """Atomic: write a temp file beside the target, fsync, rename. A crash leaves the old file or none."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RECORD_NAME
    record = {"schema_version": SCHEMA_VERSION, **record}
    fd, tmp = tempfile.mkstemp(prefix=".run_record.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, sort_keys=False, default=_jsonable)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_record(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / RECORD_NAME
    with open(path) as f:
        record = json.load(f)
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RecordError(
            f"{path}: run record schema_version {version!r}, this tool reads {SCHEMA_VERSION}. "
            "Re-run the job with this version of the tool, or read it with the version that wrote it."
        )
    record["_path"] = str(path)
    return record


def find_records(*roots: str | Path) -> list[Path]:
    """Every run record under the given run or sweep directories, in job order."""
    found: list[Path] = []
    for root in roots:
        root = Path(root)
        if root.is_file():
            found.append(root)
            continue
        found.extend(root.rglob(RECORD_NAME))

    def job_key(p: Path):
        name = p.parent.name
        return (str(p.parent.parent), int(name) if name.isdigit() else float("inf"), name)

    return sorted(set(found), key=job_key)


def _jsonable(obj: Any):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)
