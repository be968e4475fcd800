"""The patch leaves no lint finding that the checkout did not already have.

SGLang 0.5.23 is laid out as a checkout (``python/sglang``, ``test/registered``, its
``.isort.cfg``) and patched; every Python file the patch touches is checked before and
after with the tools and versions SGLang's pre-commit runs (isort 5.13.2, black 24.10.0,
codespell 2.4.1, ``sglang_support.lint_tools``).  Per file and tool, the number of lines
the tool would change (a blank line it would move counts) or the misspellings it reports
may not grow, and a file the patch adds has none.
"""

from __future__ import annotations

import pytest
from sglang_support.lint_tools import KINDS, findings, lay_out_checkout, write_file

from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
#: Model files whose new first-party import isort once moved (it had landed above the
#: gap between the third-party and first-party sections).
FIRST_IN_SECTION = (
    "apertus",
    "bailing_moe",
    "exaone_moe",
    "gemma4_mm",
    "minimax_m3_vl",
    "qwen2_5_vl",
    "qwen3",
    "qwen3_moe",
)


@pytest.fixture(scope="module")
def measured(sglang_release, tmp_path_factory):
    checkout = lay_out_checkout(sglang_release(RELEASE), tmp_path_factory.mktemp("lint") / "sglang")
    result = generate(checkout)
    changes = [c for c in result.changes if c.path.endswith(".py")]
    paths = [c.path for c in changes]
    before = findings(checkout, [c.path for c in changes if c.old is not None])
    for change in changes:
        write_file(checkout, change.path, change.new)
    after = findings(checkout, paths)
    return result, changes, before, after


def test_no_touched_file_gains_a_lint_finding(measured):
    _, changes, before, after = measured
    assert len(changes) >= 25
    grown = {
        change.path: (before.get(change.path), after[change.path])
        for change in changes
        if any(
            after[change.path][kind] > before.get(change.path, dict.fromkeys(KINDS, 0))[kind]
            for kind in KINDS
        )
    }
    assert grown == {}


def test_the_files_the_patch_adds_are_clean(measured):
    _, changes, _, after = measured
    added = [change.path for change in changes if change.old is None]
    assert any(path.startswith("test/registered/") for path in added), added
    assert {path: after[path] for path in added} == {
        path: dict.fromkeys(KINDS, 0) for path in added
    }


def test_the_new_import_sits_inside_the_first_party_section(measured):
    result, _, _, _ = measured
    by_path = {change.path: change for change in result.changes}
    for name in FIRST_IN_SECTION:
        change = by_path[f"python/sglang/srt/models/{name}.py"]
        lines = change.new.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("from sglang."))
        # The gap between the sections sits right above the first sglang import, and
        # the section runs on from it without another gap.
        assert lines[first - 1] == "", name
        section = lines[first : lines.index("", first)]
        assert sum(1 for line in section if line.startswith("from sglang.")) > 1, name
