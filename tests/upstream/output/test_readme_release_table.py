"""The per-release model table of ``docs/models.md`` is what the generator decides on each
release wheel."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from sglang_support.generated import release_result

from codemods.upstream.output.release_table import Column, matrix
from tests.readme_blocks import MODELS_PAGE
from tests.test_installs import PROJECT_ROOT


def _script():
    path = PROJECT_ROOT / "scripts" / "model_table.py"
    spec = importlib.util.spec_from_file_location("model_table_script", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_matrix_lists_reasons_once_and_counts_patched_files():
    columns = [
        Column(
            "0.5.20",
            {"llama.py": "patched: layer-loop append", "beam.py": "no: forward not recognised"},
        ),
        Column(
            "0.5.23",
            {
                "llama.py": "patched: layer-entry callback",
                "beam.py": "no: forward not recognised",
                "gemma.py": "no: refuses PP",
            },
        ),
    ]
    text = matrix(columns)
    assert "| `beam.py` | no [1] | no [1] |" in text
    assert "| `gemma.py` | - | no: refuses PP |" in text
    assert "| `llama.py` | patched: layer-loop append | patched: layer-entry callback |" in text
    assert "| **patched** | 1 | 1 |" in text
    assert text.count("forward not recognised") == 1


def test_matrix_shows_a_renamed_relay_as_such():
    from codemods.upstream.output.release_table import RELAY_RENAME_CELL

    text = matrix([Column("0.5.23", {"kimi_linear.py": RELAY_RENAME_CELL})])
    assert f"| `kimi_linear.py` | {RELAY_RENAME_CELL} |" in text
    assert "Why not patched" not in text
    assert "| **patched** | 0 |" in text


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(1800)
def test_release_table_matches_the_generator(sglang_release, monkeypatch):
    def whole_patch_plan(tree, names=None):
        # The plan ``generate`` made for the whole patch of the release (the same call).
        assert names is None
        return release_result(tree.root).family

    monkeypatch.setattr(sys.modules[matrix.__module__], "plan_for_tree", whole_patch_plan)
    script = _script()
    readme = MODELS_PAGE.read_text(encoding="utf-8")
    assert script.RELEASES_START in readme and script.RELEASES_END in readme
    roots = {version: sglang_release(version) for version in script.RELEASE_LINES}
    wanted = script.release_section(roots)
    start = readme.index(script.RELEASES_HEADING)
    end = readme.index(script.RELEASES_END) + len(script.RELEASES_END) + 1
    assert readme[start:end] == wanted
    header = wanted.split(script.RELEASES_START, 1)[1]
    for version in script.RELEASE_LINES:
        assert f" {version} " in header.splitlines()[3], version
