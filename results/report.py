"""Paper-style tables and plots from run records.

    python -m results.report <run or sweep dirs...> [--out DIR] [--title TEXT] [--machine-key
    hosts|devices]

Writes report.md, one CSV per table and PNG plots into --out (default: <dir>/report for one dir,
else ./report). Records are grouped by machine (hostnames + device names; `--machine-key devices`
drops the hostnames, for multi-node runs whose node names differ) and, inside a machine, by world
size, so no table mixes numbers from different hardware or rank counts. Only the scaling plot
crosses world sizes, on purpose."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections import defaultdict
from pathlib import Path

from results import plots
from tables.sweep import (
    device_names,
    host_names,
    commands,
    describe_machine,
    load_entries,
    machine_key,
)
from tables.table import (
    Entry,
    Table,
    build_table,
    comm_table,
    phase_table,
    rows_table,
    scaling_table,
)


# ----------------------------------------------------------------------------------------- machines


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:40] or "machine"


# ----------------------------------------------------------------------------------------- commands


# --------------------------------------------------------------------------------------- the report


class _Writer:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.md: list[str] = []
        self.files: list[Path] = []

    def table(self, table: Table, stem: str, heading: str = "####") -> None:
        if not table.rows:
            return
        path = table.write_csv(self.out / f"{stem}.csv")
        self.files.append(path)
        self.md += [
            f"{heading} {table.title}",
            "",
            table.markdown(),
            f"CSV: [{path.name}]({path.name})",
            "",
        ]

    def images(self, images: dict[str, Path]) -> None:
        for name, path in images.items():
            self.files.append(path)
            self.md += [f"![{name}]({path.name})", ""]


def _task_tables(w: _Writer, entries: list[Entry], stem: str) -> None:
    by_task: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_task[e.task or "unknown"].append(e)
    for task, group in by_task.items():
        if task == "train":
            w.table(
                build_table(group, first="configuration", title="Throughput (task=train)"),
                f"{stem}-train",
            )
            w.table(phase_table(group), f"{stem}-phases")
            w.table(comm_table(group), f"{stem}-comm")
        else:
            w.table(
                build_table(group, first="configuration", title=f"Headline (task={task})"),
                f"{stem}-{task}",
            )
            w.table(
                rows_table(group, title=f"Results per op and size (task={task})"),
                f"{stem}-{task}-rows",
            )


def _pair_groups_section(w: _Writer, group: list[Entry], slug: str, name: str) -> None:
    """task=pair_groups crosses world sizes on purpose: the curve over pairs is the gloo thread's
    finding."""
    pairs = sorted(
        (e for e in group if e.task == "pair_groups"),
        key=lambda e: getattr(e.result, "pairs", None) or 0,
    )
    if not pairs:
        return
    w.md += ["### Pair groups across pairs", ""]
    w.table(
        build_table(
            pairs, first="configuration", title="Pair groups (task=pair_groups), one row per pairs="
        ),
        f"{slug}-pair-groups",
    )
    curve = plots.pair_groups(pairs, w.out / f"{slug}-pair-groups.png", context=name)
    if curve:
        w.images({"pair groups": curve})


def _diagnosis_section(w: _Writer, group: list[Entry], slug: str) -> None:
    """Findings per run, estimates checked within each sweep, comm efficiency and stragglers
    (diagnosis/)."""
    from diagnosis import diagnose_sweep
    from results.diagnosis_tables import (
        by_sweep,
        checked_table,
        efficiency_table,
        findings_table,
        straggler_table,
    )

    diagnoses, checked = {}, []
    for sweep in by_sweep([e for e in group if e.ok and e.record]).values():
        d = diagnose_sweep(sweep)
        done = [e for e in sweep if e.ok and e.record]
        diagnoses.update({id(e): r["diagnosis"] for e, r in zip(done, d["runs"])})
        checked += d["checked"]
    tables = [
        (findings_table(group, diagnoses), "diagnosis"),
        (checked_table(checked), "checked-estimates"),
        (efficiency_table(group), "comm-efficiency"),
        (straggler_table(group), "stragglers"),
    ]
    if any(t.rows for t, _ in tables):
        w.md += ["### Diagnosis", ""]
        for table, stem in tables:
            w.table(table, f"{slug}-{stem}")


def write_report(
    entries: list[Entry], out: Path, title: str, argv: list[str], by: str = "hosts"
) -> tuple[Path, list[Path]]:
    out.mkdir(parents=True, exist_ok=True)
    w = _Writer(out)

    # jobs without a record (crashed) belong to the machine of their sweep's other jobs
    sweep_key: dict[str, tuple] = {}
    for e in entries:
        if e.record and e.output_dir:
            sweep_key.setdefault(str(Path(e.output_dir).parent), machine_key(e, by))
    sections: dict[tuple, list[Entry]] = defaultdict(list)
    for e in entries:
        key = (
            machine_key(e, by)
            if e.record
            else sweep_key.get(str(Path(e.output_dir or ".").parent), ("unknown",))
        )
        sections[key].append(e)

    w.md += [
        f"# {title}",
        "",
        f"{len(entries)} runs on {len(sections)} machine(s); regenerate with "
        f"`python -m results.report {' '.join(shlex.quote(a) for a in argv)}`.",
        "",
    ]
    if len(sections) > 1:
        w.md += [
            "Each machine has its own section: numbers from different hardware are never compared "
            "in one "
            "table.",
            "",
        ]

    slugs: set[str] = set()
    for i, (_key, group) in enumerate(sections.items(), 1):
        first = next((e for e in group if e.record), None)
        name = (
            ", ".join(host_names(first)) + " / " + ", ".join(sorted(set(device_names(first))))
            if first
            else "unknown"
        )
        slug = _slug(name)
        if slug in slugs:
            slug = f"{slug}-{i}"
        slugs.add(slug)
        w.md += [f"## Machine {i}: {name}", ""] + describe_machine(group) + [""]
        w.md += ["Command(s):", "", "```"] + commands(group) + ["```", ""]

        by_size: dict[str, list[Entry]] = defaultdict(list)
        for e in group:
            if e.task != "pair_groups":  # pair groups: one table across pairs, below
                by_size[str(e.knob("world_size") or "?")].append(e)
        numbered = lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0)  # noqa: E731 - sort key
        for size, sized in sorted(by_size.items(), key=numbered):
            stem = f"{slug}-ws{size}"
            w.md += [f"### World size {size}", ""]
            _task_tables(w, sized, stem)
            w.images(plots.standard_plots([e for e in sized], out, prefix=f"{stem}-", title=name))
        if len(by_size) > 1:
            w.table(scaling_table(group), f"{slug}-scaling", heading="###")
            scaling = plots.scaling(group, out / f"{slug}-scaling.png", context=name)
            if scaling:
                w.images({"scaling": scaling})
        _pair_groups_section(w, group, slug, name)
        _diagnosis_section(w, group, slug)

    report = out / "report.md"
    report.write_text("\n".join(w.md).rstrip() + "\n")
    return report, w.files


def main(argv: list[str] | None = None) -> int:
    from base.paths import reader_out

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m results.report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "dirs", nargs="+", help="run or sweep directories (or run_record.json files)"
    )
    parser.add_argument(
        "--out",
        help="output folder (default: <dir>/report for one dir, outputs/report/<path> for "
        "a dir under the committed results/; else ./report)",
    )
    parser.add_argument("--title", default="Gradient communication overhead: results")
    parser.add_argument(
        "--machine-key",
        choices=["hosts", "devices"],
        default="hosts",
        help="what makes two runs the same machine (default: hostnames + device names)",
    )
    parser.add_argument(
        "--wandb-report",
        action="store_true",
        help="also a W&B Report of these studies, a section each (results/wandb_report.py): saved "
        "when W&B is online, else its spec <out>/wandb_report.json and the command to push it",
    )
    args = parser.parse_args(argv)
    entries = load_entries(args.dirs)
    if not entries:
        raise SystemExit(
            f"results.report: no run records under {', '.join(args.dirs)} "
            "(each run writes run_record.json in its output dir)."
        )
    out = (
        Path(args.out)
        if args.out
        else (reader_out(args.dirs[0], "report") if len(args.dirs) == 1 else Path("report"))
    )
    report, files = write_report(entries, out, args.title, argv, by=args.machine_key)
    print(report.read_text())
    print(f"report: {report}")
    for f in files:
        print(f"  {f}")
    if args.wandb_report:
        from results.wandb_report import studies_report

        studies_report(args.dirs, out, title=args.title, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
