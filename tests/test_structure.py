"""The house's rules, kept by tools: the import layers and no circles (import-linter, contracts in pyproject.toml),
and ruff's lint. Each fails with the tool's own report of what broke the rule."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed: pip install -r requirements.txt")
    return found


def test_imports_keep_the_layers_and_make_no_circles():
    out = subprocess.run([_tool("lint-imports")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_ruff_check_is_clean():
    out = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_noqa_markers_say_why():
    """A `# noqa: CODE` stands with a one-line reason beside it (`# noqa: BLE001 - why`)."""
    bare = []
    for path in ROOT.rglob("*.py"):
        if any(p in path.parts for p in (".venv", "runs", "mutants")):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            _, noqa, rest = line.partition("# " + "noqa")
            if noqa and not rest.partition(" - ")[2].strip() and not rest.partition(" (")[2].strip():
                bare.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bare, "\n".join(bare)


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """The lines that carry logic: no blanks, comments, imports or docstring fences (those repeat by nature)."""
    kept = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        s = line.strip()
        if not s or s.startswith(("#", "import ", "from ", '"""', "'''")):
            continue
        kept.append((n, s))
    return kept


def test_no_block_of_six_lines_is_repeated():
    """Issue 21's rule: a repeated block of six or more lines of code is a helper that was not written. Checked over
    every Python file of the tree, tests included, within a file and across files (YAML is declarative: left out)."""
    width, seen, repeats = 6, {}, []
    for path in sorted(ROOT.rglob("*.py")):
        if any(p in path.parts for p in (".venv", "runs", "mutants", ".git")):
            continue
        lines = _code_lines(path)
        for k in range(len(lines) - width + 1):
            block = tuple(s for _, s in lines[k:k + width])
            where = f"{path.relative_to(ROOT)}:{lines[k][0]}"
            first = seen.setdefault(block, where)
            if first != where:
                repeats.append(f"{where} repeats {first}: {block[0]}")
    assert not repeats, "\n".join(repeats[:20])


def test_no_module_imports_another_ones_private_names():
    """A name with a leading underscore is its module's own: a second module that needs it gets a public name (tests
    may reach in; they are not the house)."""
    import ast

    packages = {"base", "stats", "device", "comm", "models", "data", "tasks", "results", "whatif", "diagnosis",
                "launchers", "job", "hydra_plugins"}
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if any(p in path.parts for p in (".venv", "runs", "mutants", ".git", "tests")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in packages:
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert not found, "\n".join(found)


def test_every_module_sits_in_a_layer():
    """The layers contract checks only the modules it names: a module outside every layer would go unchecked."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {part.strip() for layer in layers for part in layer.replace("|", ":").split(":")}
    outside = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in config["root_packages"] or rel.name == "__init__.py" and len(rel.parts) == 2:
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        if not any(module == n or module.startswith(n + ".") for n in named):
            outside.append(module)
    assert not outside, f"modules in no layer of pyproject.toml: {outside}"
