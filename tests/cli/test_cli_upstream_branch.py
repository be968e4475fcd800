"""``auxcap upstream-patch --branch`` on SGLang checkouts built from real release files."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from tests.gitrepo import IDENTITY, assert_same_state, git, isolate_git, repo_state

pytestmark = pytest.mark.sglang

BRANCH = "auxcap/pp-capture"
MODEL = "python/sglang/srt/models/kimi_linear.py"
GLUE = "python/sglang/srt/layers/aux_hidden_states.py"
TESTS = "test/registered/unit/models"
#: The release files a checkout needs for the patch: package marker, model, distributed pkg.
RELEASE_FILES = ("__init__.py", "srt/models/kimi_linear.py", "srt/distributed/__init__.py")


def make_checkout(release: Path, path: Path, files=RELEASE_FILES) -> Path:
    """A git checkout laid out like SGLang's repository, holding a few files of a release."""
    for name in files:
        target = path / "python" / "sglang" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(release / "sglang" / name, target)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "SGLang release files", env=IDENTITY)
    return path


def auxcap(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def checkout(tmp_path, monkeypatch, sglang_release) -> Path:
    isolate_git(monkeypatch, tmp_path)
    return make_checkout(sglang_release("0.5.20"), tmp_path / "sglang")


def test_upstream_patch_branch_commits_the_patched_model_files(checkout, tmp_path):
    result = auxcap(
        "upstream-patch",
        str(checkout),
        "--branch",
        BRANCH,
        "--pr-body",
        str(tmp_path / "PR.md"),
        "--format-patch",
        str(tmp_path / "patches"),
        "-o",
        str(tmp_path / "pp.patch"),
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "pp.patch").read_text().startswith(f"diff --git a/{MODEL} b/{MODEL}\n")
    assert f"git push -u origin {BRANCH}" in result.output
    assert sorted(git(checkout, "show", "--name-only", "--format=", "HEAD").split()) == sorted(
        [MODEL, GLUE]
    )
    message = git(checkout, "log", "-1", "--format=%B")
    assert message.startswith("[PP] Kimi-Linear: carry DSPARK aux hidden states across")
    base = "python/sglang/srt/"
    assert f"\n  M {MODEL.removeprefix(base)}\n" in message
    assert f"\n  A {GLUE.removeprefix(base)}\n" in message
    assert all(len(line) <= 72 for line in message.splitlines())
    assert git(checkout, "status", "--porcelain", "-uall") == ""

    body = (tmp_path / "PR.md").read_text()
    assert "## Motivation" in body  # the generator's own description
    assert "Idempotent: running `auxcap upstream-patch` again" in body
    assert "git revert" in body

    again = auxcap("upstream-patch", str(checkout))
    assert again.exit_code == 0 and "already patched" in again.output

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(checkout), str(clone))
    git(clone, "checkout", "-q", "main")
    patches = sorted((tmp_path / "patches").glob("*.patch"))
    git(clone, "am", "-q", *map(str, patches), env=IDENTITY)
    assert git(clone, "rev-parse", "HEAD^{tree}") == git(checkout, "rev-parse", "HEAD^{tree}")


def test_upstream_patch_branch_commits_the_tests_under_test_registered_unit_models(
    tmp_path, monkeypatch, sglang_release
):
    isolate_git(monkeypatch, tmp_path)
    files = (*RELEASE_FILES, "srt/models/llama.py")
    checkout = make_checkout(sglang_release("0.5.23"), tmp_path / "sglang", files)
    result = auxcap("upstream-patch", str(checkout), "--models", "llama", "--branch", BRANCH)
    assert result.exit_code == 0, result.output
    committed = git(checkout, "diff", "--name-only", "main", "HEAD").split()
    # A checkout's patch carries the tests, where SGLang keeps the unit tests of
    # srt/models/, and their utilities where it keeps test utilities.
    assert sorted(p for p in committed if "test/" in p) == [
        "python/sglang/test/pp_aux_capture_family_models.py",
        f"{TESTS}/test_pp_aux_capture.py",
        f"{TESTS}/test_pp_aux_capture_family.py",
    ]
    assert "python/sglang/srt/models/llama.py" in committed
    assert "tests left out" not in result.output
    assert git(checkout, "status", "--porcelain", "-uall") == ""


def test_upstream_patch_branch_rolls_back_when_the_commit_hook_fails(checkout):
    hook = checkout / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'style check failed' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = repo_state(checkout)
    result = auxcap("upstream-patch", str(checkout), "--branch", BRANCH)
    assert result.exit_code == 2
    assert "style check failed" in result.output and "back on main" in result.output
    assert_same_state(before, repo_state(checkout))


def test_already_supported_release_creates_no_branch(tmp_path, monkeypatch, sglang_release):
    isolate_git(monkeypatch, tmp_path)
    checkout = make_checkout(sglang_release("0.5.21"), tmp_path / "sglang")
    # 0.5.21 relays DSPARK captures itself: Kimi-Linear alone needs nothing.
    result = auxcap("upstream-patch", str(checkout), "--models", "kimi_linear", "--branch", BRANCH)
    assert result.exit_code == 0, result.output
    assert "Nothing to change" in result.output
    assert git(checkout, "branch", "--list", BRANCH) == ""


def test_upstream_branch_outside_a_repository_is_exit_2(tmp_path, monkeypatch, sglang_release):
    isolate_git(monkeypatch, tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    tree = tmp_path / "tree"
    for name in RELEASE_FILES:
        target = tree / "python" / "sglang" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sglang_release("0.5.20") / "sglang" / name, target)
    result = auxcap("upstream-patch", str(tree), "--branch", BRANCH)
    assert result.exit_code == 2 and "not inside a git repository" in result.output


def test_branch_commits_the_runs_one_generation(checkout, monkeypatch):
    """The run generates the tree once and commits that result; the only other generation
    is the check that the committed tree regenerates to nothing."""
    import codemods.cli.upstream_patch as upstream_patch
    import codemods.upstream.generate as generator

    real, calls = generator.generate, []

    def counted(name):
        def generate(root, **options):
            calls.append(name)
            return real(root, **options)

        return generate

    monkeypatch.setattr(upstream_patch, "generate", counted("run"))
    monkeypatch.setattr(generator, "generate", counted("recheck"))
    result = auxcap("upstream-patch", str(checkout), "--branch", BRANCH)
    assert result.exit_code == 0, result.output
    assert calls == ["run", "recheck"]
    # The run's own report of the generation comes with --branch too.
    assert "Kimi-Linear (kimi_linear.py): patched" in result.output
    bad = auxcap("upstream-patch", str(checkout), "--branch", "bad..name")
    assert bad.exit_code == 2 and "not a valid branch name" in bad.output
    assert calls == ["run", "recheck"]  # refused before generating


def test_branch_companions_need_branch(checkout):
    result = auxcap("upstream-patch", str(checkout), "--allow-dirty")
    assert result.exit_code == 2 and "only works together with --branch" in result.output


def _python_only(folder: str, names: list[str]) -> list[str]:
    """``shutil.copytree``'s ignore: everything but folders and Python files."""
    return [n for n in names if not n.endswith(".py") and not (Path(folder) / n).is_dir()]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_branch_message_and_pr_body_of_a_whole_release_agree(tmp_path, monkeypatch, sglang_release):
    """On a whole 0.5.23 checkout the commit message and the PR description come from one
    result: the same early-return count and validation file, nothing quoted that the release
    lacks, every file named a file of the commit, lines of at most 72 characters."""
    from tests.upstream.output.release_texts import quoted, release_text

    isolate_git(monkeypatch, tmp_path)
    checkout = tmp_path / "sglang"
    shutil.copytree(
        sglang_release("0.5.23") / "sglang", checkout / "python" / "sglang", ignore=_python_only
    )
    (checkout / TESTS).mkdir(parents=True)
    (checkout / TESTS / "__init__.py").write_text("")
    git(checkout, "init", "-q", "-b", "main")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "SGLang 0.5.23", env=IDENTITY)
    source = release_text(checkout / "python")
    pr = str(tmp_path / "PR.md")
    result = auxcap("upstream-patch", str(checkout), "--branch", BRANCH, "--pr-body", pr)
    assert result.exit_code == 0, result.output
    message = git(checkout, "log", "-1", "--format=%B")
    body = (tmp_path / "PR.md").read_text()
    committed = git(checkout, "show", "--name-only", "--format=", "HEAD").split()

    assert all(len(line) <= 72 for line in message.splitlines()), message
    flat = " ".join(message.split())
    # NotImplementedError is named once: as what the shipped runtime guard raises, never
    # as an error the release raised.
    assert flat.count("NotImplementedError") == 1, message
    assert "with PP it raises NotImplementedError naming the class, the method and why" in flat
    for phrase in quoted(message) + quoted(body):
        assert phrase in source, phrase
    listed = re.findall(r"^  [AM] (\S+)$", message, flags=re.M)
    assert len(listed) == len(committed)
    assert all(any(path.endswith(short) for path in committed) for short in listed)
    early = int(re.search(r"the capture hooks of (\d+) model files return early", body).group(1))
    assert f"In {early} of them the capture hooks returned early" in flat
    validation = next(path for path in committed if path.endswith("validation_hook.py"))
    assert f"Validation ({validation.split('/srt/', 1)[1]})" in flat
    assert f"`{validation}`" in body
    # The tests the commit adds are named where the PR body says how they were (not) run.
    accuracy = body.split("## Accuracy Tests\n", 1)[1].split("\n## ", 1)[0]
    for path in committed:
        if path.startswith(TESTS) and path.rsplit("/", 1)[1].startswith("test_"):
            assert path.rsplit("/", 1)[1] in accuracy and path.rsplit("/", 1)[1] in flat
    assert "Not run" in body.split("## Benchmarking and Profiling\n", 1)[1]
