"""What a pip user reads points at the repository, not at files their install lacks: the sdist and the wheel leave
out examples/, example_project/, tests/ and bench/, and PyPI renders README.md without the repository beside it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO = "https://github.com/mutexcron/mutexcron"
# Contributors read contributing.md in a clone, where these paths are files.
USER_PAGES = sorted(path for path in (ROOT / "docs").glob("*.md") if path.name != "contributing.md")
NOT_SHIPPED = re.compile(r"(?<![\[\w/])`((?:examples|example_project|tests|bench)/[^`\s]*)`(?!\])")
RELATIVE_LINK = re.compile(r"\]\((?!https?:|#)([^)\s]+)\)")
REPO_LINK = re.compile(re.escape(REPO) + r"/(?:blob|tree)/main/([^)#\s]+)")


def _prose(text: str) -> str:
    """The page without its fenced code blocks and snippet includes, where a path is a command's argument."""
    return re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.MULTILINE | re.DOTALL)


def test_the_project_names_its_repository_and_docs_site_source() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]

    assert urls["Source"] == REPO
    assert f"repo_url: {REPO}" in (ROOT / "mkdocs.yml").read_text()


def test_user_pages_link_files_outside_the_package_to_the_repository() -> None:
    bare = {page.name: NOT_SHIPPED.findall(_prose(page.read_text())) for page in USER_PAGES}

    assert {name: paths for name, paths in bare.items() if paths} == {}


def test_the_readme_has_no_link_that_breaks_on_pypi() -> None:
    assert RELATIVE_LINK.findall((ROOT / "README.md").read_text()) == []


def test_every_repository_link_names_a_file_that_exists() -> None:
    pages = [ROOT / "README.md", *USER_PAGES]
    linked = {path for page in pages for path in REPO_LINK.findall(page.read_text())}

    assert linked and sorted(path for path in linked if not (ROOT / path).exists()) == []
