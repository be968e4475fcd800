"""Running upstream-patch again: on a tree it patched, with the models it was given, and on
a tree without a Kimi-Linear file (a fork, or a release that dropped it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from tests.gitrepo import IDENTITY, git, isolate_git

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
FAMILY_MODELS = ("family_llama_like.py", "family_qwen_base.py", "family_qwen_derived.py")


def family_checkout(path: Path, models=FAMILY_MODELS) -> Path:
    """A git work tree holding an SGLang package with capture-hook models and no
    Kimi-Linear file."""
    shutil.copytree(FIXTURES / "mini_sglang" / "sglang", path / "sglang")
    for name in models:
        shutil.copyfile(FIXTURES / name, path / "sglang" / "srt" / "models" / name)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "SGLang files", env=IDENTITY)
    return path


def auxcap(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    return family_checkout(tmp_path / "sglang")


def test_branch_with_models_is_idempotent_for_those_models(checkout, tmp_path):
    """The re-generation check after the commit asks for the same models; asking for all
    of them would find the others unpatched and call the result not idempotent."""
    body = tmp_path / "PR.md"
    done = auxcap(
        "upstream-patch",
        str(checkout),
        "--models",
        "family_llama_like",
        "--branch",
        "pp/llama",
        "--pr-body",
        str(body),
    )
    assert done.exit_code == 0, done.output
    committed = git(checkout, "show", "--name-only", "--format=", "pp/llama").split()
    assert "sglang/srt/models/family_llama_like.py" in committed
    assert "sglang/srt/models/family_qwen_derived.py" not in committed
    text = body.read_text()
    assert "Idempotent: running `auxcap upstream-patch` again" in text
    assert "Not idempotent" not in text


@pytest.mark.parametrize("models", [(), ("--models", "family_llama_like")])
def test_patched_tree_without_kimi_linear_is_nothing_to_do(checkout, tmp_path, models):
    done = auxcap(
        "upstream-patch", str(checkout), "--branch", "pp/all", "--pr-body", str(tmp_path / "PR.md")
    )
    assert done.exit_code == 0, done.output
    assert "Idempotent: running" in (tmp_path / "PR.md").read_text()

    again = auxcap("upstream-patch", str(checkout), *models, "-o", str(tmp_path / "p"))
    assert again.exit_code == 0, again.output
    assert "nothing to do: already patched; the patch is empty" in again.output
    assert (tmp_path / "p").read_bytes() == b""

    branch_again = auxcap("upstream-patch", str(checkout), *models, "--branch", "pp/again")
    assert branch_again.exit_code == 0, branch_again.output
    assert "pp/again" not in git(checkout, "branch", "--list")


def test_a_model_that_refuses_pp_only_loses_its_dead_early_return(checkout, tmp_path):
    """The only model file with a hook refuses PP in its constructor: its early return never
    runs.  The patch drops it and nothing else (no helper module, no relay declared, no
    sizing); applied, a second run has nothing to do."""
    models = checkout / "sglang" / "srt" / "models"
    for name in FAMILY_MODELS:
        (models / name).unlink()
    shutil.copyfile(FIXTURES / "family_refuses_pp.py", models / "family_refuses_pp.py")
    patch = tmp_path / "dead.diff"
    done = auxcap("upstream-patch", str(checkout), "-o", str(patch))
    assert done.exit_code == 0, done.output
    text = patch.read_text()
    changed = [line for line in text.splitlines() if line.startswith(("+", "-"))]
    assert changed == [
        "--- a/sglang/srt/models/family_refuses_pp.py",
        "+++ b/sglang/srt/models/family_refuses_pp.py",
        "-        if not self.pp_group.is_last_rank:",
        "-            return",
    ]
    git(checkout, "apply", str(patch))
    again = auxcap("upstream-patch", str(checkout))
    assert again.exit_code == 0, again.output
    assert "nothing to do" in again.output


def test_kimi_linear_asked_for_by_name_must_exist(checkout):
    done = auxcap("upstream-patch", str(checkout), "--models", "kimi_linear,family_llama_like")
    assert done.exit_code == 2
    assert "kimi_linear.py: Kimi-Linear model file not found" in done.output


def test_a_tree_without_any_capture_hook_is_an_error(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(FIXTURES / "mini_sglang" / "sglang", root / "sglang")
    done = auxcap("upstream-patch", str(root))
    assert done.exit_code == 2
    models = root / "sglang" / "srt" / "models"
    assert done.output.splitlines()[-1] == (
        f"auxcap: error: {models}: no model file defines a capture hook, so there is nothing "
        "to patch"
    )
