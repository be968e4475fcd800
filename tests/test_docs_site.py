"""The reference site in ``docs/`` builds with ``mkdocs build --strict``, and the README is a
short page whose every example is a line of the reference that a test runs.

* The build fails on a broken link or anchor and on a page missing from ``nav``: a copy of
  the site with each of those faults is built too, and must fail.
* The README: at most 25,000 bytes; both set-up commands in its first 40 lines; its links
  reach files of this repository (and headings of them); its code lines are lines of the
  reference pages, whose own tests run them; the disk figures it gives for the test set-up
  are those of the virtualenv running these tests and of the release-wheel cache.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

from tests.disk_usage import disk_usage
from tests.readme_blocks import DOCS, README, code_blocks

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "mkdocs.yml"
RELEASE_LINES = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )


def nav_pages(config: Path) -> list[str]:
    def walk(entries) -> list[str]:
        found = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found += walk(value) if isinstance(value, list) else [value]
        return found

    return walk(yaml.safe_load(config.read_text(encoding="utf-8"))["nav"])


def test_site_builds_strict_with_every_page_in_nav(tmp_path):
    done = build(CONFIG, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    pages = sorted(path.name for path in DOCS.glob("*.md"))
    assert sorted(nav_pages(CONFIG)) == pages
    for page in pages:
        assert (tmp_path / "site" / page.replace(".md", ".html")).is_file(), page
    # The JSON files of docs/ are part of the site too.
    for data in DOCS.glob("*.json"):
        assert (tmp_path / "site" / data.name).read_bytes() == data.read_bytes()


@pytest.mark.parametrize(
    "fault, message",
    [
        ("orphan.md", 'are not included in the "nav" configuration'),
        ("[gone](no-such-page.md)", "contains a link 'no-such-page.md', but the target"),
        ("[gone](callers.md#no-such-heading)", "does not contain an anchor '#no-such-heading'"),
    ],
)
def test_strict_build_fails_on(fault, message, tmp_path):
    """A page missing from nav, a link to a missing page, a link to a missing heading."""
    shutil.copyfile(CONFIG, tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    if fault.endswith(".md"):
        (tmp_path / "docs" / fault).write_text("# Orphan\n", encoding="utf-8")
    else:
        page = tmp_path / "docs" / "setup.md"
        page.write_text(page.read_text(encoding="utf-8") + f"\n{fault}\n", encoding="utf-8")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert message in output and "warnings in strict mode" in output, output


def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_is_short_with_both_set_up_commands_at_its_top():
    assert len(README.read_bytes()) <= 25_000
    top = readme().splitlines()[:40]
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert any(line.startswith(command + " ") for line in top), command
    assert "```bash" in top


def headings(page: Path) -> set[str]:
    """The anchors MkDocs gives the headings of ``page``."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slugify(m.group(1), "-") for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_readme_links_reach_files_and_headings():
    links = re.findall(r"\]\(([^)\s]+)\)", readme())
    assert links
    for link in links:
        assert "://" not in link, link  # nothing to check offline
        target, _, anchor = link.partition("#")
        path = (ROOT / target).resolve() if target else README
        assert path.exists(), link
        if anchor:
            assert anchor in headings(path), link
        if path.suffix == ".md" and path.parent == DOCS:
            assert path.name in nav_pages(CONFIG), link
    # Every page of the reference is reachable from the README.
    linked = {Path(link.partition("#")[0]).name for link in links}
    assert {path.name for path in DOCS.glob("*.md")} - {"index.md"} <= linked


def reference_lines(language: str) -> set[str]:
    return {
        line
        for page in DOCS.glob("*.md")
        for block in code_blocks(page.read_text(encoding="utf-8"), language)
        for line in block.splitlines()
    }


@pytest.mark.parametrize("language", ["bash", "python"])
def test_readme_code_lines_are_lines_of_the_reference(language):
    """The README quotes the reference: each of its code lines is, byte for byte, a line of
    a block of the same language in ``docs/``, where the page's tests run it."""
    blocks = code_blocks(readme(), language)
    assert blocks
    wanted = reference_lines(language)
    for block in blocks:
        for line in block.splitlines():
            if line.strip():
                assert line in wanted, line


def test_readme_validate_pp_comment_names_the_defaults():
    """``auxcap validate-pp   # world sizes 2..4, relay and direct``: the command's defaults."""
    from codemods.cli.commands import cli

    assert re.search(
        r"^auxcap validate-pp +# world sizes 2\.\.4, relay and direct$", readme(), re.M
    )
    params = {param.name: param.default for param in cli.commands["validate-pp"].params}
    assert params["world_size"] == 4 and params["mode"] == "both"


def stated_gb(label: str) -> float:
    match = re.search(rf"{label} about (\d+\.\d) GB", readme())
    assert match, label
    return float(match.group(1))


def test_readme_venv_figure_is_the_test_virtualenv():
    """The ``.venv`` of ``scripts/setup.sh`` is the virtualenv these tests run in."""
    assert sys.prefix != sys.base_prefix, "the tests run in the virtualenv scripts/setup.sh made"
    stated = stated_gb(r"`\.venv`")
    used = disk_usage(Path(sys.prefix)) / 1e9
    assert 0.75 * stated <= used <= 1.25 * stated, (used, stated)


@pytest.mark.sglang
def test_readme_cache_figure_is_the_six_release_wheels(sglang_release):
    stated = stated_gb(r"six SGLang release wheels and their unpacked trees")
    roots = [sglang_release(version) for version in RELEASE_LINES]
    wheels = [
        wheel
        for version in RELEASE_LINES
        for wheel in (roots[0].parent.parent / "wheels").glob(f"sglang-{version}-*.whl")
    ]
    assert len(wheels) == len(RELEASE_LINES), wheels
    used = disk_usage(*roots, *wheels) / 1e9
    assert 0.75 * stated <= used <= 1.25 * stated, (used, stated)
    total = stated_gb(r"`bash scripts/test\.sh` \|")
    assert abs(total - stated - stated_gb(r"`\.venv`")) <= 0.15, total
