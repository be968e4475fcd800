"""The --branch delivery of migrate and upstream-patch, on real repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemods.callers.records import Action, CallSite, FileResult, Risk, Shape, Status
from codemods.deliver.git_branch import DeliveryFailed, GitDeliveryError
from codemods.deliver.messages import PatchedFile
from codemods.deliver.on_branch import (
    BranchRequest,
    migrate_on_branch,
    patch_paths,
    upstream_on_branch,
)
from tests.gitrepo import IDENTITY, assert_same_state, git, isolate_git, make_repo, repo_state

CALL = b"model.set_dspark_layers_to_capture(layer_ids)"
GUARDED = b"model.set_dspark_layers_to_capture(list(layer_ids)) if layer_ids else None"
KIMI = "python/sglang/srt/models/kimi_linear.py"
TRANSPORT = "python/sglang/srt/distributed/pp_aux_transport.py"
KIMI_SOURCE = """class KimiLinearForCausalLM:
    def set_dspark_layers_to_capture(self, layer_ids):
        if self.pp_group.world_size > 1:
            raise NotImplementedError("DSPARK aux hidden capture requires PP=1.")
        self.layers_to_capture = list(layer_ids)
"""


def textual_engine(paths, options, write):
    """A small stand-in for the codemod engine: guards one call spelling, textually."""
    files = []
    for raw in paths:
        path = Path(raw)
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for path in files:
        source = path.read_bytes()
        if b"SYNTAX ERROR" in source:
            yield FileResult(str(path), Status.FAILED, error="syntax error at line 1")
            continue
        if CALL not in source:
            yield FileResult(str(path), Status.UNCHANGED, original=source)
            continue
        line = source[: source.index(CALL)].count(b"\n") + 1
        site = CallSite(
            str(path),
            line,
            4,
            "set_dspark_layers_to_capture",
            Shape.DIRECT,
            "layer_ids",
            (Risk.MAYBE_NONE,),
            False,
            False,
            (Action.GUARD,),
        )
        rewritten = source.replace(CALL, GUARDED)
        if write:
            path.write_bytes(rewritten)
        yield FileResult(str(path), Status.CHANGED, (site,), source, rewritten)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    return make_repo(tmp_path / "repo")


def test_migrate_on_branch_commits_writes_the_pr_body_and_patches(repo, tmp_path):
    request = BranchRequest(
        "auxcap/guard", pr_body=tmp_path / "PR.md", patch_dir=tmp_path / "patches"
    )
    done = migrate_on_branch(
        [str(repo)], None, request, {"guard policy": "skip"}, run=textual_engine
    )
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["src/model_a.py"]
    assert done.verification.rechecked == ("src/model_a.py",)
    assert done.verification.idempotent is True and done.verification.ok
    body = (tmp_path / "PR.md").read_text()
    assert (
        "- `src/model_a.py:2`: `set_dspark_layers_to_capture` is called only when `layer_ids` "
        "is set" in body
    )
    assert "Policies: guard policy: skip." in body
    assert f"git revert {done.delivery.commit[:12]}" in body
    assert [path.name for path in done.patches] == [
        "0001-Guard-aux-hidden-state-capture-calls-1-call-site-in-.patch"
    ]
    assert "PR description: " in done.summary() and "git am" in done.summary()


def test_migrate_on_branch_fails_whole_when_a_file_cannot_be_processed(repo, tmp_path):
    (repo / "src" / "broken.py").write_text("SYNTAX ERROR\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "broken file")
    before = repo_state(repo)
    with pytest.raises(DeliveryFailed, match=r"broken\.py: syntax error"):
        migrate_on_branch(
            [str(repo)],
            None,
            BranchRequest("auxcap/guard", pr_body=tmp_path / "PR.md"),
            {},
            run=textual_engine,
        )
    assert_same_state(before, repo_state(repo))
    assert not (tmp_path / "PR.md").exists()


def test_migrate_on_branch_with_nothing_to_change_makes_no_branch(repo, tmp_path):
    (repo / "src" / "model_a.py").write_bytes(b"x = 1\n")
    git(repo, "commit", "-q", "-am", "no calls")
    done = migrate_on_branch(
        [str(repo)],
        None,
        BranchRequest("auxcap/guard", pr_body=tmp_path / "PR.md"),
        {},
        run=textual_engine,
    )
    assert done.delivery.commit is None and done.pr_body is None
    assert git(repo, "branch", "--list", "auxcap/guard") == ""


def test_migrate_paths_must_be_in_one_repository(repo, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    with pytest.raises(GitDeliveryError, match="not inside the repository"):
        migrate_on_branch(
            [str(repo), str(other)], None, BranchRequest("auxcap/guard"), {}, run=textual_engine
        )


# ----------------------------------------------------------------------------- upstream


def make_sglang(path: Path) -> tuple[Path, str]:
    """A tiny SGLang-shaped repository, and a git patch for it (one change, one new file)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    kimi = path / KIMI
    kimi.parent.mkdir(parents=True)
    kimi.write_text(KIMI_SOURCE)
    (path / "python" / "sglang" / "srt" / "distributed").mkdir()
    (path / "python" / "sglang" / "srt" / "distributed" / "__init__.py").write_text("")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "sglang", env=IDENTITY)
    kimi.write_text(
        KIMI_SOURCE.replace(
            '            raise NotImplementedError("DSPARK aux hidden capture requires PP=1.")\n',
            "            self.aux_transport = make_transport(self.pp_group)\n",
        )
    )
    (path / TRANSPORT).write_text("def make_transport(group):\n    return group\n")
    git(path, "add", "-N", TRANSPORT)
    patch = git(path, "diff")
    git(path, "reset", "-q", "--", TRANSPORT)
    (path / TRANSPORT).unlink()
    git(path, "checkout", "-q", "--", KIMI)
    assert git(path, "status", "--porcelain") == ""
    return path, patch


PATCHED = [
    PatchedFile(KIMI, "capture aux states on every PP stage"),
    PatchedFile(TRANSPORT, "the PP transport", added=True),
]


def test_patch_paths_lists_changed_and_added_files(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root, patch = make_sglang(tmp_path / "sglang")
    assert sorted(patch_paths(root, patch)) == sorted([KIMI, TRANSPORT])


def test_upstream_on_branch_applies_and_commits_the_patch(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root, patch = make_sglang(tmp_path / "sglang")
    request = BranchRequest(
        "auxcap/pp-capture", pr_body=tmp_path / "PR.md", patch_dir=tmp_path / "patches"
    )
    done = upstream_on_branch(root, patch, PATCHED, request, regenerate=lambda tree: "")
    assert sorted(git(root, "show", "--name-only", "--format=", "HEAD").split()) == sorted(
        [KIMI, TRANSPORT]
    )
    message = git(root, "log", "-1", "--format=%B")
    assert message.startswith("Support aux hidden-state capture under pipeline parallelism\n")
    assert f"  A {TRANSPORT}: the PP transport" in message
    assert "make_transport" in (root / KIMI).read_text()
    assert done.verification.idempotent is True
    assert set(done.verification.rechecked) == {KIMI, TRANSPORT}
    body = (tmp_path / "PR.md").read_text()
    assert f"| `{KIMI}` | capture aux states on every PP stage |" in body
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    git(clone, "checkout", "-q", "main")
    git(clone, "am", "-q", *map(str, done.patches), env=IDENTITY)
    assert git(clone, "rev-parse", "HEAD^{tree}") == git(
        root, "rev-parse", "auxcap/pp-capture^{tree}"
    )


def test_upstream_patch_that_does_not_apply_leaves_the_checkout_as_it_was(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root, patch = make_sglang(tmp_path / "sglang")
    (root / KIMI).write_text(KIMI_SOURCE.replace("requires PP=1", "needs one stage"))
    git(root, "commit", "-q", "-am", "diverged")
    before = repo_state(root)
    with pytest.raises(DeliveryFailed, match="does not apply"):
        upstream_on_branch(root, patch, PATCHED, BranchRequest("auxcap/pp-capture"))
    assert_same_state(before, repo_state(root))


def test_upstream_root_inside_a_bigger_repository(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    _, patch = make_sglang(tmp_path / "source")
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q", "-b", "main")
    (outer / "vendor").mkdir()
    (outer / "vendor" / "sglang" / KIMI).parent.mkdir(parents=True)
    (outer / "vendor" / "sglang" / KIMI).write_text(KIMI_SOURCE)
    (outer / "vendor" / "sglang" / TRANSPORT).parent.mkdir(parents=True, exist_ok=True)
    git(outer, "add", "-A")
    git(outer, "commit", "-q", "-m", "vendored", env=IDENTITY)
    upstream_on_branch(outer / "vendor" / "sglang", patch, PATCHED, BranchRequest("auxcap/pp"))
    assert sorted(git(outer, "show", "--name-only", "--format=", "HEAD").split()) == sorted(
        [f"vendor/sglang/{KIMI}", f"vendor/sglang/{TRANSPORT}"]
    )
