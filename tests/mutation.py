"""The mutation run (docs/testing.md): `nice -n 15 python -m tests.mutation` runs mutmut over the
modules that compute what a user reads ([tool.mutmut] in pyproject.toml) with the fast, process-free
tests, then writes results/mutation.md: per module, mutants killed / survived / judged equivalent,
and each survivor left standing.

A mutant judged equivalent (no test can tell it from the code) is listed in
tests/mutation_equivalent.toml with the mutated line and the reason; the entry counts only while
mutmut still makes that very line, so it goes stale, and the mutant counts as a survivor again, when
the code under it changes. A later run re-tests only the functions whose code changed since mutmut
last ran them, so `--since main` is cheap. The options (--since, --module, --report, --children,
--resume): docs/testing.md "Mutation testing".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "results" / "mutation.md"
EQUIVALENT = ROOT / "tests" / "mutation_equivalent.toml"
RUN = ROOT / "mutants" / "run.json"  # each run's command, machine, load and wall time, for --report
GOAL = 0.90  # issue 30: >= 90% of the non-equivalent mutants killed across the listed modules
KILLED = (
    "killed",
    "timeout",
    "caught by type check",
)  # a test (or the time limit on an endless loop) caught it


NARROWED = """import sys
from mutmut import configuration
from mutmut.__main__ import cli
if sys.argv[1]:
    configuration.config().only_mutate = sys.argv[1].split(",")
sys.argv = ["mutmut", *sys.argv[2:]]
sys.exit(cli())
"""


def covered() -> list[str]:
    """The covered modules, as files: [tool.mutmut] only_mutate in pyproject.toml (globs) expanded
    over the tree. The one list of them, so a module that moves is renamed in pyproject.toml
    only."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    files = {
        str(p.relative_to(ROOT)) for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()
    }
    return sorted(files)


def module_glob(path: str) -> str:
    """mutmut's name pattern for every mutant of one file: stats/within.py -> stats.within.*"""
    return path.removesuffix(".py").replace("/", ".") + ".*"


def changed_since(ref: str) -> list[str]:
    """The covered modules a change touched: files that differ between the merge base of `ref` and
    HEAD and the work tree (committed or not), or are new and untracked."""

    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"error: git {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout.split()

    base = git("merge-base", ref, "HEAD")[0]
    touched = set(git("diff", "--name-only", base)) | set(
        git("ls-files", "--others", "--exclude-standard")
    )
    return [f for f in covered() if f in touched]


def unfinished(modules: list[str]) -> list[str]:
    """What a resumed run (re)tests in these modules: the mutants without a result (a stopped run's
    rest) and the survivors (a test written since may kill them); every mutant of a module that has
    no results yet."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code

    names = []
    for m in modules:
        if not (ROOT / "mutants" / f"{m}.meta").exists():
            names.append(module_glob(m))
            continue
        data = SourceFileMutationData(path=Path(m))
        data.load()
        names += [
            n
            for n, code in data.exit_code_by_key.items()
            if code is None or status_by_exit_code[code] == "survived"
        ]
    return sorted(names)


def equivalents() -> dict[str, dict]:
    if not EQUIVALENT.exists():
        return {}
    return {e["mutant"]: e for e in tomllib.loads(EQUIVALENT.read_text()).get("equivalent", [])}


def mutated_line(diff: str) -> str:
    """The first added line of a mutant's diff, stripped: what an equivalence entry pins."""
    return next(
        (
            ln[1:].strip()
            for ln in diff.splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        ),
        "",
    )


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    lines = diff.splitlines()[2:]
    return (
        [ln[1:].strip() for ln in lines if ln.startswith("-")],
        [ln[1:].strip() for ln in lines if ln.startswith("+")],
    )


def is_text(diff: str) -> bool:
    """A mutant that only rewrites a sentence (a string with a space in it, e.g. a `method`
    description): mutmut's string mutations wrap a literal in XX or change its case. It changes
    words a user reads, not a number, so it is counted apart from the score (a key such as "ci_lo"
    has no space, and its mutants count)."""
    old, new = changed_lines(diff)
    if len(old) != 1 or len(new) != 1:
        return False
    a, b = old[0], new[0]
    for q in ('"', "'"):
        for lit in set(a.split(q)[1::2]):
            if " " in lit and any(
                b == a.replace(f"{q}{lit}{q}", f"{q}{m}{q}", 1)
                for m in (f"XX{lit}XX", lit.lower(), lit.upper())
            ):
                return True
    return False


def collect() -> tuple[dict[str, Counter], list, list, list]:
    """(counts per module, survivors left standing [(module, mutant, diff)], equivalents [(module,
    mutant, reason)], surviving text mutants [(module, mutant, diff)]) from mutmut's results under
    mutants/ (read with mutmut's own readers; run from the repository root)."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    judged = equivalents()
    counts: dict[str, Counter] = defaultdict(Counter)
    standing, equivalent, text = [], [], []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        module = str(path)
        for name, code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[code]
            counts[module]["mutants"] += 1
            if status in KILLED:
                counts[module]["killed"] += 1
                continue
            if status == "not checked":
                counts[module]["not checked"] += 1
                continue
            if status != "survived":
                counts[module][status] += 1
                continue
            diff = get_diff_for_mutant(name, path=path)
            entry = judged.get(name)
            if is_text(diff):
                counts[module]["text"] += 1
                text.append((module, name, diff))
            elif entry and entry.get("line", "").strip() == mutated_line(diff):
                counts[module]["equivalent"] += 1
                equivalent.append((module, name, entry["reason"]))
            else:
                counts[module]["survived"] += 1
                standing.append((module, name, diff))
    return counts, standing, equivalent, text


def score(c: Counter) -> float | None:
    judged = c["killed"] + c["survived"]
    return c["killed"] / judged if judged else None


def report(runs: list[dict]) -> str:
    counts, standing, equivalent, text = collect()
    total = sum((c for c in counts.values() if c["mutants"] > c["not checked"]), Counter())
    lines = [
        "# Mutation testing: do the tests fail when a printed number is wrong?",
        "",
        "Regenerate with `nice -n 10 python -m tests.mutation` (docs/testing.md): mutmut mutates "
        "the modules that "
        "compute what a user reads (pyproject.toml, `[tool.mutmut]`) and runs, for each mutant, "
        "the fast tests "
        "that call the mutated function. Killed includes mutants stopped by the time limit (an "
        "endless loop). "
        "Score = killed / (killed + survived); equivalent mutants (no test can tell them from the "
        "code; "
        "tests/mutation_equivalent.toml gives each one's reason), surviving mutants that only "
        "rewrite a sentence "
        "(text: a description such as a `method`, not a number) and mutants no fast test reaches "
        "are left out "
        "of it and counted apart; not run: mutants a stopped run did not reach (no result either "
        "way).",
        "",
    ]
    for run in runs:  # a full run, or one per --module / --since run whose results the table holds
        lines += [
            f"- run: {run['date']}, commit {run['commit']}, mutmut {run['mutmut']}, "
            f"`{run['command']}`",
            f"- machine: {run['machine']}; load average before {run['load_before']}, after "
            f"{run['load_after']}",
            f"- wall time: {run['wall_s'] / 60:.1f} min (exit code {run['returncode']})",
            *(f"- {note}" for note in run.get("notes", [])),
        ]
    lines += [""] if runs else []
    lines += [
        "| module | mutants | killed | survived | equivalent | text | no tests | not run | other | "
        "score |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, c: Counter) -> str:
        other = (
            c["mutants"]
            - c["killed"]
            - c["survived"]
            - c["equivalent"]
            - c["text"]
            - c["no tests"]
            - c["not checked"]
        )
        s = score(c)
        return (
            f"| {name} | {c['mutants']} | {c['killed']} | {c['survived']} | {c['equivalent']} | "
            f"{c['text']} | "
            f"{c['no tests']} | {c['not checked']} | "
            f"{other} | {'–' if s is None else f'{s:.1%}'} |"
        )

    ran = {m for m in counts if counts[m]["mutants"] > counts[m]["not checked"]}
    lines += [row(f"`{m}`", counts[m]) for m in sorted(ran)]
    lines.append(row("**all**", total))
    waiting = [m for m in covered() if m not in ran]
    if waiting:
        lines += [
            "",
            "Covered but not run yet (no result under mutants/: run `python -m tests.mutation "
            "--module "
            "<path>` for each): " + ", ".join(f"`{m}`" for m in waiting) + ".",
        ]
    s = score(total)
    lines += [
        "",
        f"Goal: >= {GOAL:.0%} of the non-equivalent mutants killed: "
        + ("no mutant judged" if s is None else f"{s:.1%}, {'met' if s >= GOAL else 'NOT MET'}")
        + (
            f" over the modules run; not yet shown for the {len(waiting)} covered modules not run, "
            "nor for "
            f"{total['not checked']} mutant(s) a stopped run did not reach"
            if waiting or total["not checked"]
            else ""
        )
        + ".",
        "",
    ]
    lines += [
        "## Survivors left standing",
        "",
        "Each is a change no fast test notices: a missing test (write one that checks the number "
        "by another "
        "route), or an equivalent mutant (add it to tests/mutation_equivalent.toml with the "
        "reason).",
        "",
    ]
    for _module, name, diff in standing:
        old, new = changed_lines(diff)
        lines.append(f"- `{name}`: `{' '.join(old)[:200]}` -> `{' '.join(new)[:200]}`")
    lines += ["", "## Judged equivalent", ""]
    lines += [f"- `{name}`: {reason}" for _, name, reason in equivalent] or ["(none)"]
    lines += ["", "## Text: surviving mutants that only rewrite a sentence", ""]
    lines += [f"- `{name}`" for _, name, _ in text] or ["(none)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.mutation", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--report", action="store_true", help="only write the report from the last run's results"
    )
    ap.add_argument(
        "--children", type=int, default=2, help="parallel mutant workers (default 2: the 2 cores)"
    )
    ap.add_argument(
        "--since",
        metavar="REF",
        help="only the covered modules changed since REF's merge base (e.g. main): the check "
        "before a "
        "submission",
    )
    ap.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="PATH",
        help="only this covered module (a path as in only_mutate's expansion; repeatable)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="go on with a stopped run: only the mutants (of the named modules, or of all) without "
        "a result "
        "yet, and the survivors, which a test written since may kill; the others keep their result "
        "(without "
        "it, naming a module re-tests all of its mutants)",
    )
    ap.add_argument(
        "--note",
        action="append",
        default=[],
        help="a line the report keeps under the run (e.g. a rerun of the survivors after new "
        "tests)",
    )
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    runs = []
    if RUN.exists():
        kept = json.loads(RUN.read_text())
        runs = kept if isinstance(kept, list) else [kept]
    names: list[str] = []
    modules: list[str] = []
    if args.since or args.module:
        unknown = [m for m in args.module if m not in covered()]
        if unknown:
            print(
                f"error: not a covered module: {', '.join(unknown)}; covered (pyproject.toml "
                "[tool.mutmut] "
                f"only_mutate): {', '.join(covered())}",
                file=sys.stderr,
            )
            return 2
        modules = sorted(set(args.module) | set(changed_since(args.since) if args.since else ()))
        if not modules:
            print(f"no covered module changed since {args.since}: nothing to mutate")
            return 0
        names = [module_glob(m) for m in modules]
    if args.resume:
        modules = modules or covered()
        names = unfinished(modules)
        if not names:
            print("every mutant of these modules has a result and none survived: nothing to resume")
            return 0
        print(f"resuming {len(names)} mutant(s) without a result or surviving")
        print(f"mutating {len(modules)} module(s): {', '.join(modules)}")
    if not args.report:
        import importlib.metadata

        nice = os.nice(0)
        command = (
            f"{f'nice -n {nice} ' if nice else ''}python -m tests.mutation"
            f"{'' if args.children == 2 else f' --children {args.children}'}"
            + (f" --since {args.since}" if args.since else "")
            + "".join(f" --module {m}" for m in args.module)
            + (" --resume" if args.resume else "")
            + f" (mutmut run --max-children {args.children}"
            + (
                f" <{len(names)} mutants>)"
                if args.resume
                else f"{''.join(' ' + n for n in names)})"
            )
        )
        load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        start = time.monotonic()
        # mutmut itself, its only_mutate narrowed to the modules asked for (a partial run generates
        # only their mutants: generating every covered module's takes many minutes on its own)
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                NARROWED,
                ",".join(modules) if names else "",
                "run",
                "--max-children",
                str(args.children),
                *names,  # named, mutmut (re)tests them even with a result
            ]
        )
        run = {
            "date": dt.date.today().isoformat(),
            "commit": commit or "?",
            "mutmut": importlib.metadata.version("mutmut"),
            "command": command,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}",
            "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "wall_s": time.monotonic() - start,
            "returncode": proc.returncode,
        }
        runs = (
            [run] if not names and not args.resume else [*runs, run]
        )  # a full run replaces every result; a partial one (or a resumed one) adds
    if runs and args.note:
        runs[-1]["notes"] = runs[-1].get("notes", []) + args.note
    if runs:
        RUN.write_text(json.dumps(runs))
    REPORT.write_text(report(runs))
    print(f"wrote {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
