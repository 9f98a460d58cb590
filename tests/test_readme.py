"""The README's set-up and test commands are what CI runs: a new user who follows the README gets
CI's machine."""

import re

from tests.conftest import ROOT


def readme_block(marker: str) -> list[str]:
    """The indented code block that follows `<!-- ci: <marker> ... -->` in the README."""
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- ci: {marker}\b.*?-->\n\n((?:    .*\n)+)", text)
    assert m, f"README.md has no code block after '<!-- ci: {marker} -->'"
    return [line[4:] for line in m.group(1).splitlines()]


def ci_block(marker: str) -> list[str]:
    text = (ROOT / ".ci" / "run").read_text()
    m = re.search(rf"^# >>> README {marker}\n(.*?)^# <<< README {marker}$", text, re.S | re.M)
    assert m, f".ci/run has no '# >>> README {marker}' block"
    return m.group(1).strip().splitlines()


def test_ci_runs_the_readme_setup_verbatim():
    setup = readme_block("set-up")
    assert any(line.startswith("pip install -r requirements.txt") for line in setup)
    assert ci_block("set-up") == setup


def test_ci_runs_the_readme_test_command_verbatim():
    from tests.durations import README_TEST

    assert ci_block("test") == readme_block("test") == [README_TEST]


def test_the_test_runner_is_installed_by_the_setup():
    requirements = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^pytest\b", requirements, re.M), (
        "pytest must come with `pip install -r requirements.txt`"
    )


def _pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_leads_and_the_rest_is_in_docs():
    """Issue 25: a README a new user reads to the end (about 200 lines); the reference lives in
    docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_every_link_in_the_readme_and_docs_exists_in_a_clone():
    missing = []
    for page in _pages():
        text = page.read_text()
        assert "../shared" not in text, f"{page.name} names a path outside the repository"
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, missing
