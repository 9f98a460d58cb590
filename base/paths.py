"""Where a reader (python -m whatif, python -m results.report) writes when it is not told: beside
the run it read, except inside the repository's committed results/ folder, whose files only their
own regeneration commands write (results/README.md). There it writes under ./outputs/<name>/ with
the same relative path, and --out says otherwise."""

from __future__ import annotations

from pathlib import Path

COMMITTED = Path(__file__).resolve().parent.parent / "results"


def reader_out(source: str | Path, name: str) -> Path:
    """The default output folder of a reader called `name` for a run or sweep dir (or a record file)
    `source`."""
    p = Path(source)
    d = p if p.is_dir() else p.parent
    try:
        inside = d.resolve().relative_to(COMMITTED)
    except ValueError:
        return d / name
    return Path("outputs") / name / inside
