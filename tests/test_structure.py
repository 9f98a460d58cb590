"""The house's rules, kept by tools: the import layers and no circles (import-linter, contracts in
pyproject.toml), and ruff's lint. Each fails with the tool's own report of what broke the rule."""

import ast
import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for the three checks that walk every module (ast.walk
    only reads it): each parsed the whole repository again, ~0.5-1 CPU s apiece (issue 36)."""
    return ast.parse(path.read_text())


def _tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed: pip install -r requirements.txt")
    return found


def test_imports_keep_the_layers_and_make_no_circles():
    out = subprocess.run(
        [_tool("lint-imports")], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_ruff_check_is_clean():
    out = subprocess.run(
        [_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_noqa_markers_say_why():
    """A `# noqa: CODE` stands with a one-line reason beside it (`# noqa: BLE001 - why`)."""
    bare = []
    for path in ROOT.rglob("*.py"):
        if any(p in path.parts for p in (".venv", "runs", "mutants")):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            _, noqa, rest = line.partition("# " + "noqa")
            if (
                noqa
                and not rest.partition(" - ")[2].strip()
                and not rest.partition(" (")[2].strip()
            ):
                bare.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bare, "\n".join(bare)


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """The statements that carry logic, one per logical line (a call the formatter spreads over ten
    lines is one statement): no comments, imports or bare strings such as docstrings (those repeat
    by nature)."""
    import io
    import tokenize

    kept, toks = [], []
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    try:
        tokens = list(
            tokenize.generate_tokens(io.StringIO(path.read_text(errors="replace")).readline)
        )
    except (tokenize.TokenError, SyntaxError):
        return kept
    for tok in tokens:
        if tok.type in skip:
            continue
        if tok.type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
            toks.append(tok)
            continue
        if (
            toks
            and toks[0].string not in ("import", "from")
            and not (len(toks) == 1 and toks[0].type == tokenize.STRING)
        ):
            kept.append((toks[0].start[0], " ".join(t.string for t in toks)))
        toks = []
    return kept


def test_no_block_of_six_lines_is_repeated():
    """Issue 21's rule: a repeated block of six or more lines of code is a helper that was not
    written. Checked over every Python file of the tree, tests included, within a file and across
    files (YAML is declarative: left out)."""
    width, seen, repeats = 6, {}, []
    for path in sorted(ROOT.rglob("*.py")):
        if any(p in path.parts for p in (".venv", "runs", "mutants", ".git")):
            continue
        lines = _code_lines(path)
        for k in range(len(lines) - width + 1):
            block = tuple(s for _, s in lines[k : k + width])
            where = f"{path.relative_to(ROOT)}:{lines[k][0]}"
            first = seen.setdefault(block, where)
            if first != where:
                repeats.append(f"{where} repeats {first}: {block[0]}")
    assert not repeats, "\n".join(repeats[:20])


def test_no_module_imports_another_ones_private_names():
    """A name with a leading underscore is its module's own: a second module that needs it gets a
    public name (tests may reach in; they are not the house)."""

    packages = {
        "base",
        "stats",
        "device",
        "comm",
        "models",
        "data",
        "tasks",
        "results",
        "whatif",
        "diagnosis",
        "launchers",
        "job",
        "hydra_plugins",
    }
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if any(p in path.parts for p in (".venv", "runs", "mutants", ".git", "tests")):
            continue
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in packages
            ):
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert not found, "\n".join(found)


def test_every_module_sits_in_a_layer():
    """The layers contract checks only the modules it names: a module outside every layer would go
    unchecked."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {part.strip() for layer in layers for part in layer.replace("|", ":").split(":")}
    outside = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if (
            rel.parts[0] not in config["root_packages"]
            or rel.name == "__init__.py"
            and len(rel.parts) == 2
        ):
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        if not any(module == n or module.startswith(n + ".") for n in named):
            outside.append(module)
    assert not outside, f"modules in no layer of pyproject.toml: {outside}"


def _package_imports() -> dict[tuple[str, str], list[str]]:
    """Every import between two top-level packages (train.py counts as the package `train`):
    module-level and lazy ones inside functions alike, each with where it is (ast, so a lazy import
    is seen as import-linter sees it)."""
    import tomllib

    packages = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
            "root_packages"
        ]
    )
    edges: dict[tuple[str, str], list[str]] = {}
    files = [ROOT / "train.py"] + [
        p for pkg in sorted(packages) for p in sorted((ROOT / pkg).rglob("*.py"))
    ]
    for path in files:
        rel = path.relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        here = parts[0]
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                # a relative import stays inside its package: resolve it to count it like any other
                base = parts[: len(parts) - node.level] if node.level else []
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                continue
            for name in names:
                there = name.split(".")[0]
                if there != here and there in packages:
                    edges.setdefault((here, there), []).append(f"{rel}:{node.lineno}")
    return edges


def _layer_ranks() -> tuple[dict[str, int], dict[str, str]]:
    """Each package's rank (higher imports lower) from pyproject.toml's layers contract, train.py on
    top; and the allowed upward imports: the contract's ignore_imports entries, as package pairs,
    each with its reason."""
    import tomllib

    text = (ROOT / "pyproject.toml").read_text()
    config = tomllib.loads(text)["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    ranks = {"train": len(contract["layers"])}
    for rank, layer in enumerate(reversed(contract["layers"])):
        for part in layer.replace("|", ":").split(":"):
            ranks.setdefault(part.strip().split(".")[0], rank)
    lines = text.splitlines()
    allowed = {}
    for entry in contract.get("ignore_imports", []):
        at = next(n for n, line in enumerate(lines) if f'"{entry}"' in line)
        reason = lines[at - 1].strip()
        assert reason.startswith("#") and len(reason) > 10, (
            f"pyproject.toml: {entry!r} needs a one-line reason above"
        )
        importer, imported = (side.strip().split(".")[0] for side in entry.split("->"))
        allowed[(importer, imported)] = reason
    return ranks, allowed


def test_packages_import_downward_without_a_circle():
    """Issue 35: the module contracts can all pass while the packages sit in a circle (results ->
    diagnosis -> results, through a lazy import). Here every import counts, between top-level
    packages: no cycle, and none runs from a lower layer to a higher one or across independent ones
    unless pyproject.toml lists it with a reason."""
    import graphlib

    edges = _package_imports()
    ranks, allowed = _layer_ranks()
    unranked = sorted({p for edge in edges for p in edge} - set(ranks))
    assert not unranked, f"packages in no layer of pyproject.toml: {unranked}"
    upward = [
        f"{a} -> {b} ({', '.join(where[:3])})"
        for (a, b), where in sorted(edges.items())
        if ranks[a] <= ranks[b] and (a, b) not in allowed
    ]
    assert not upward, "imports from a lower (or the same) layer up: " + "; ".join(upward)
    graph = {a: {b for (x, b) in edges if x == a} for (a, _) in edges}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        pytest.fail(f"packages import each other in a circle: {' -> '.join(e.args[1])}")


def test_the_package_graph_sees_lazy_imports():
    """The check above is only as good as its graph: diagnosis/__main__.py's lazy import of
    tables.sweep (inside main) is in it."""
    assert any(
        w.startswith("diagnosis/__main__.py") for w in _package_imports()[("diagnosis", "tables")]
    )


def test_the_process_ends_in_train_py_and_the_tools_main_blocks_only():
    """One exit point (issue 35): library code returns its outcome (job.run.JobResult) and train.py
    exits with it; a command-line tool's `if __name__ == "__main__":` block may exit too. Nothing
    else calls sys.exit (examples/ holds users' own training scripts, which task=script runs as they
    are, exits included)."""

    found = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "examples", ".venv", "mutants") or "runs" in rel.parts:
            continue
        tree = _tree(path)
        mains = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
        ]
        allowed = {id(n) for m in mains for n in ast.walk(m)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "sys.exit"
                and id(node) not in allowed
            ):
                found.append(f"{rel}:{node.lineno}")
    assert not found, found
