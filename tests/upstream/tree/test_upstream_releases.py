"""The release a tree declares names it in messages; one auxcap has not seen is generated the
same way, with one line saying so; a part that cannot be completed names the release."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from codemods.upstream.generate import CannotApply, generate
from codemods.upstream.tree.releases import SEEN, release_of, unseen_line
from codemods.upstream.tree.sglang_tree import detect_tree

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "upstream"


def _tree(path: Path, version: str | None, models=("family_llama_like.py",)) -> Path:
    shutil.copytree(FIXTURES / "mini_sglang" / "sglang", path / "sglang")
    for name in models:
        shutil.copyfile(FIXTURES / name, path / "sglang" / "srt" / "models" / name)
    if version is not None:
        (path / "sglang" / "_version.py").write_text(
            f"__version__ = version = '{version}'\n__version_tuple__ = (0,)\n"
        )
    return path


def test_a_seen_release_says_nothing_and_a_new_one_says_one_line(tmp_path):
    seen = detect_tree(_tree(tmp_path / "a", SEEN[-1]))
    assert release_of(seen) == SEEN[-1] and unseen_line(seen) is None
    new = detect_tree(_tree(tmp_path / "b", "0.9.1"))
    assert release_of(new) == "0.9.1"
    assert unseen_line(new).startswith("SGLang 0.9.1 is a release auxcap has not seen")


def test_an_unseen_release_is_generated_the_same_way(tmp_path):
    seen = generate(_tree(tmp_path / "a", SEEN[-1]))
    root = _tree(tmp_path / "b", "0.9.1")
    done = CliRunner().invoke(cli, ["upstream-patch", str(root)])
    assert done.exit_code == 0, done.output
    assert done.stdout == seen.patch
    notes = [line for line in done.stderr.splitlines() if "has not seen" in line]
    assert notes == [
        "auxcap: note: SGLang 0.9.1 is a release auxcap has not seen; every part decided "
        "from what the tree holds, as on every release"
    ]


def test_a_part_that_cannot_apply_names_the_release_and_file(tmp_path):
    root = _tree(tmp_path, "0.5.99", models=())
    shutil.copyfile(FIXTURES / "kimi_unrecognised.py", root / "sglang/srt/models/kimi_linear.py")
    with pytest.raises(CannotApply) as err:
        generate(root)
    assert err.value.release == "0.5.99" and err.value.part == "kimi_linear"
    assert err.value.file.endswith("sglang/srt/models/kimi_linear.py")
    assert "SGLang 0.5.99" in str(err.value)
    done = CliRunner().invoke(cli, ["upstream-patch", str(root)])
    assert done.exit_code == 2
    assert "kimi_linear.py: unrecognised Kimi-Linear model file" in done.stderr
    assert "(SGLang 0.5.99; part kimi_linear)" in done.stderr
