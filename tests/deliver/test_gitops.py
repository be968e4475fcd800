"""Delivery through git, on real repositories made with the real ``git`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codemods.deliver.git_branch import (
    BranchExists,
    DeliveryFailed,
    DirtyWorkTree,
    GitDeliveryError,
    MissingIdentity,
    NotARepository,
    deliver_on_branch,
    format_patch,
)
from tests.gitrepo import (
    IDENTITY,
    MODEL_A,
    MODEL_B,
    assert_same_state,
    git,
    isolate_git,
    make_repo,
    repo_state,
    work_tree_files,
)

GUARDED_A = MODEL_A.replace(
    b"    model.set_dspark_layers_to_capture(layer_ids)\n",
    b"    if layer_ids is not None:\n        model.set_dspark_layers_to_capture(list(layer_ids))\n",
)
BRANCH = "auxcap/guard-capture"


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    return make_repo(tmp_path / "repo")


def rewrite_model_a(root: Path) -> list[Path]:
    (root / "src" / "model_a.py").write_bytes(GUARDED_A)
    return [root / "src" / "model_a.py"]


def message_for(files) -> str:
    return "Guard capture calls\n\nRewritten:\n" + "".join(f"- {name}\n" for name in files)


def committed_files(root: Path, rev: str = "HEAD") -> list[str]:
    return git(root, "show", "--name-only", "--format=", rev).split()


def current_branch(root: Path) -> str:
    return git(root, "symbolic-ref", "-q", "--short", "HEAD", check=False).strip()


# ----------------------------------------------------------------------------- happy path


def test_commit_holds_exactly_the_rewritten_files_with_a_message_listing_them(repo):
    base = git(repo, "rev-parse", "HEAD").strip()
    result = deliver_on_branch(repo, BRANCH, None, rewrite_model_a, message_for)

    assert current_branch(repo) == BRANCH
    assert result.commit == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "rev-parse", "HEAD^").strip() == base == result.base_commit
    assert committed_files(repo) == ["src/model_a.py"]
    assert result.files == ("src/model_a.py",)
    assert git(repo, "show", "HEAD:src/model_a.py").encode() == GUARDED_A
    assert git(repo, "log", "-1", "--format=%B") == message_for(["src/model_a.py"]) + "\n"
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Test User <test@example.com>"
    # main did not move, and the tree is clean afterwards.
    assert git(repo, "rev-parse", "main").strip() == base
    assert git(repo, "status", "--porcelain", "-uall") == ""
    assert result.started_on_branch == "main"
    assert result.push_command == f"git push -u origin {BRANCH}"
    assert f"git push -u origin {BRANCH}" in result.summary()
    assert BRANCH in result.summary() and "main" in result.summary()


def test_files_the_change_did_not_touch_are_left_alone(repo):
    untouched = [repo / "src" / "model_b.py", repo / "README.md", repo / ".gitignore"]
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in untouched}
    deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard capture calls")
    assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in untouched} == before
    assert git(repo, "diff", "--name-only", "main", BRANCH).split() == ["src/model_a.py"]


def test_new_and_deleted_files_are_committed(repo):
    def change(root: Path) -> list[str]:
        (root / "src" / "model_b.py").unlink()
        (root / "src" / "pkg").mkdir()
        (root / "src" / "pkg" / "transport.py").write_text("X = 1\n")
        return ["src/model_b.py", "src/pkg/transport.py"]

    result = deliver_on_branch(repo, BRANCH, None, change, "Move things")
    assert result.files == ("src/model_b.py", "src/pkg/transport.py")
    status = git(repo, "show", "--name-status", "--format=", "HEAD").split("\n")
    assert "D\tsrc/model_b.py" in status and "A\tsrc/pkg/transport.py" in status
    assert git(repo, "status", "--porcelain", "-uall") == ""


def test_a_change_that_changes_nothing_creates_no_branch(repo):
    before = repo_state(repo)
    result = deliver_on_branch(repo, BRANCH, None, lambda root: [], "nothing")
    assert result.commit is None and result.files == ()
    assert "Nothing to change" in result.summary()
    assert_same_state(before, repo_state(repo))


def test_base_option_branches_from_another_ref(repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text("# demo\nmore\n")
    git(repo, "commit", "-q", "-am", "Second commit")
    result = deliver_on_branch(repo, BRANCH, first, rewrite_model_a, "Guard")
    assert result.base_commit == first
    assert git(repo, "rev-parse", "HEAD^").strip() == first
    assert (repo / "README.md").read_text() == "# demo\n"  # the base's version is checked out
    assert committed_files(repo) == ["src/model_a.py"]


def test_unknown_base_is_refused(repo):
    with pytest.raises(GitDeliveryError, match="--base 'nope'"):
        deliver_on_branch(repo, BRANCH, "nope", rewrite_model_a, "Guard")


def test_works_from_a_subdirectory_of_the_repository(repo):
    result = deliver_on_branch(repo / "src", BRANCH, None, rewrite_model_a, "Guard")
    assert result.repo_root == repo.resolve()
    assert committed_files(repo) == ["src/model_a.py"]


# ----------------------------------------------------------------------------- refusals


def test_dirty_work_tree_is_refused_and_left_alone(repo):
    (repo / "README.md").write_text("# my edit\n")
    before = repo_state(repo)
    with pytest.raises(DirtyWorkTree, match=r"README\.md.*--allow-dirty"):
        deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard")
    assert_same_state(before, repo_state(repo))


def test_untracked_files_count_as_dirty(repo):
    (repo / "notes.txt").write_text("mine\n")
    with pytest.raises(DirtyWorkTree, match=r"notes\.txt"):
        deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard")
    assert git(repo, "branch", "--list", BRANCH) == ""


def test_allow_dirty_commits_only_auxcap_files_and_keeps_the_user_changes(repo):
    # Staged change, staged new file, unstaged change, untracked file, ignored file.
    (repo / "src" / "model_b.py").write_bytes(MODEL_B + b"# staged by the user\n")
    (repo / "staged_new.txt").write_text("new and staged\n")
    git(repo, "add", "src/model_b.py", "staged_new.txt")
    (repo / "src" / "model_b.py").write_bytes(MODEL_B + b"# staged by the user\n# and more\n")
    (repo / "README.md").write_text("# unstaged edit\n")
    (repo / "notes.txt").write_text("untracked\n")
    (repo / "debug.log").write_text("ignored\n")
    status_before = git(repo, "status", "--porcelain=v1", "-uall")
    files_before = work_tree_files(repo)
    staged_b = git(repo, "show", ":src/model_b.py")

    result = deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard", allow_dirty=True)

    assert committed_files(repo) == ["src/model_a.py"] == list(result.files)
    assert git(repo, "status", "--porcelain=v1", "-uall") == status_before
    files_after = work_tree_files(repo)
    assert files_after.pop("src/model_a.py") == GUARDED_A
    files_before.pop("src/model_a.py")
    assert files_after == files_before
    assert git(repo, "show", ":src/model_b.py") == staged_b
    assert git(repo, "diff", "--cached", "--name-only").split() == [
        "src/model_b.py",
        "staged_new.txt",
    ]


def test_allow_dirty_refuses_to_rewrite_a_file_the_user_has_changed(repo):
    (repo / "src" / "model_a.py").write_bytes(MODEL_A + b"# user edit\n")
    before = repo_state(repo)
    with pytest.raises(DeliveryFailed, match=r"src/model_a\.py, which has uncommitted"):
        deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard", allow_dirty=True)
    assert_same_state(before, repo_state(repo))
    assert (repo / "src" / "model_a.py").read_bytes() == MODEL_A + b"# user edit\n"


def test_existing_branch_is_refused(repo):
    git(repo, "branch", BRANCH)
    before = repo_state(repo)
    with pytest.raises(BranchExists, match="already exists"):
        deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard")
    assert_same_state(before, repo_state(repo))


@pytest.mark.parametrize("name", ["bad..name", "-x", "HEAD", "with space", ""])
def test_invalid_branch_names_are_refused(repo, name):
    with pytest.raises(GitDeliveryError, match="not a valid branch name"):
        deliver_on_branch(repo, name, None, rewrite_model_a, "Guard")


def test_outside_a_repository_is_a_clear_error(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    with pytest.raises(NotARepository, match="not inside a git repository"):
        deliver_on_branch(plain, BRANCH, None, rewrite_model_a, "Guard")
    assert list(plain.iterdir()) == []


def test_files_outside_the_repository_are_refused(repo, tmp_path):
    outside = tmp_path / "outside.py"

    def change(root: Path) -> list[Path]:
        outside.write_text("x = 1\n")
        return [outside]

    with pytest.raises(DeliveryFailed, match="outside the repository"):
        deliver_on_branch(repo, BRANCH, None, change, "Guard")
    assert current_branch(repo) == "main"
    assert git(repo, "branch", "--list", BRANCH) == ""


def test_a_change_that_writes_files_it_does_not_report_is_refused(repo):
    before = repo_state(repo)

    def change(root: Path) -> list[Path]:
        (root / "README.md").write_text("sneaky\n")
        return rewrite_model_a(root)

    with pytest.raises(DeliveryFailed, match=r"did not report: README\.md"):
        deliver_on_branch(repo, BRANCH, None, change, "Guard")
    assert_same_state(before, repo_state(repo))


# ----------------------------------------------------------------------------- HEAD shapes


def test_detached_head_works_and_is_recorded(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "--detach", "HEAD")
    result = deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard")
    assert result.started_on_branch is None and result.started_at_commit == head
    assert current_branch(repo) == BRANCH
    assert "detached HEAD" in result.summary()


def test_failure_from_a_detached_head_returns_to_it(repo):
    git(repo, "checkout", "-q", "--detach", "HEAD")
    before = repo_state(repo)

    def failing(root: Path) -> list[Path]:
        rewrite_model_a(root)
        raise RuntimeError("boom")

    with pytest.raises(DeliveryFailed, match="boom"):
        deliver_on_branch(repo, BRANCH, None, failing, "Guard")
    assert_same_state(before, repo_state(repo))
    assert before["head_ref"] == "detached"


def test_default_branch_other_than_main(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    repo = make_repo(tmp_path / "trunk-repo", branch="trunk")
    result = deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard")
    assert result.started_on_branch == "trunk"
    assert git(repo, "rev-parse", f"{BRANCH}^").strip() == git(repo, "rev-parse", "trunk").strip()
    assert "branch trunk" in result.summary()
    assert git(repo, "branch", "--list", "main") == ""


# ----------------------------------------------------------------------------- identity


@pytest.fixture
def anonymous_repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path, identity=False)
    return make_repo(tmp_path / "repo")


def test_missing_identity_is_a_clear_error_naming_the_config_keys(anonymous_repo):
    before = repo_state(anonymous_repo)
    with pytest.raises(MissingIdentity) as caught:
        deliver_on_branch(anonymous_repo, BRANCH, None, rewrite_model_a, "Guard")
    text = str(caught.value)
    assert "git config user.name" in text and "git config user.email" in text
    assert "--author" in text
    assert_same_state(before, repo_state(anonymous_repo))


def test_author_option_commits_without_a_configured_identity(anonymous_repo):
    deliver_on_branch(
        anonymous_repo,
        BRANCH,
        None,
        rewrite_model_a,
        "Guard",
        author="Ada Lovelace <ada@example.org>",
    )
    line = git(anonymous_repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip()
    assert line == "Ada Lovelace <ada@example.org>|Ada Lovelace <ada@example.org>"


def test_author_option_keeps_the_configured_committer(repo):
    deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard", author="Ada <ada@example.org>")
    line = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip()
    assert line == "Ada <ada@example.org>|Test User <test@example.com>"


@pytest.mark.parametrize("text", ["Ada", "<ada@example.org>", "Ada <>", "Ada <a b@c>"])
def test_malformed_author_is_refused(repo, text):
    with pytest.raises(MissingIdentity, match="Name <email>"):
        deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard", author=text)


# ----------------------------------------------------------------------------- rollback


def test_rollback_when_the_change_raises_midway(repo):
    before = repo_state(repo)

    def failing(root: Path) -> list[Path]:
        rewrite_model_a(root)
        (root / "src" / "newdir").mkdir()
        (root / "src" / "newdir" / "created.py").write_text("x = 1\n")
        (root / "src" / "model_b.py").unlink()
        raise RuntimeError("engine crashed")

    with pytest.raises(DeliveryFailed, match="engine crashed") as caught:
        deliver_on_branch(repo, BRANCH, None, failing, "Guard")
    assert "back on main" in str(caught.value)
    assert_same_state(before, repo_state(repo))
    assert not (repo / "src" / "newdir").exists()
    assert not list((repo / ".git").glob("auxcap*/rollback-*"))


def test_rollback_keeps_the_user_changes_with_allow_dirty(repo):
    (repo / "src" / "model_b.py").write_bytes(MODEL_B + b"# staged\n")
    git(repo, "add", "src/model_b.py")
    (repo / "src" / "model_b.py").write_bytes(MODEL_B + b"# staged\n# unstaged\n")
    (repo / "notes.txt").write_text("untracked\n")
    before = repo_state(repo)

    def failing(root: Path) -> list[Path]:
        rewrite_model_a(root)
        (root / "notes.txt").write_text("clobbered\n")  # a misbehaving change
        raise RuntimeError("engine crashed")

    with pytest.raises(DeliveryFailed, match="engine crashed"):
        deliver_on_branch(repo, BRANCH, None, failing, "Guard", allow_dirty=True)
    assert_same_state(before, repo_state(repo))
    assert (repo / "notes.txt").read_text() == "untracked\n"


def test_rollback_when_a_pre_commit_hook_fails(repo):
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'lint failed' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = repo_state(repo)
    with pytest.raises(DeliveryFailed, match="lint failed"):
        deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard")
    assert_same_state(before, repo_state(repo))


def test_rollback_when_a_hook_fails_after_switching_to_another_base(repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text("# demo\nmore\n")
    (repo / "extra.txt").write_text("only on main\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Second commit")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    before = repo_state(repo)
    with pytest.raises(DeliveryFailed):
        deliver_on_branch(repo, BRANCH, first, rewrite_model_a, "Guard")
    assert_same_state(before, repo_state(repo))


def test_hooks_run_with_only_auxcap_files_staged(repo):
    (repo / "README.md").write_text("# staged by the user\n")
    git(repo, "add", "README.md")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(
        '#!/bin/sh\ngit diff --cached --name-only > "$(git rev-parse --git-dir)/seen"\n'
    )
    hook.chmod(0o755)
    deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard", allow_dirty=True)
    assert (repo / ".git" / "seen").read_text().split() == ["src/model_a.py"]


# ----------------------------------------------------------------------------- format-patch


def test_format_patch_applies_with_git_am_on_a_fresh_clone(repo, tmp_path):
    def change(root: Path) -> list[Path]:
        rewrite_model_a(root)
        (root / "src" / "added.py").write_text("ADDED = True\n")
        return [root / "src" / "model_a.py", root / "src" / "added.py"]

    result = deliver_on_branch(repo, BRANCH, None, change, message_for)
    patches = format_patch(repo, result.base_commit, BRANCH, tmp_path / "patches")
    assert len(patches) == 1 and patches[0].name.startswith("0001-Guard-capture-calls")
    assert patches[0].is_file()

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "checkout", "-q", "main")
    git(clone, "am", "-q", *map(str, patches), env=IDENTITY)
    assert git(clone, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", f"{BRANCH}^{{tree}}")
    assert git(clone, "log", "-1", "--format=%B") == git(repo, "log", "-1", "--format=%B", BRANCH)
    assert git(clone, "log", "-1", "--format=%an").strip() == "Test User"


def test_format_patch_refuses_an_unknown_branch(repo, tmp_path):
    with pytest.raises(GitDeliveryError, match="format-patch"):
        format_patch(repo, "main", "no-such-branch", tmp_path / "patches")


def test_internal_backup_folder_is_not_left_behind(repo):
    deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard")
    assert not (repo / ".git" / "auxcap").exists()


# ----------------------------------------------------------------------------- odd shapes


def test_linked_worktree_delivery_and_rollback(repo, tmp_path):
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    before_main = repo_state(repo)

    def failing(root: Path) -> list[Path]:
        rewrite_model_a(root)
        raise RuntimeError("boom")

    before = repo_state(linked)
    with pytest.raises(DeliveryFailed, match="back on feature"):
        deliver_on_branch(linked, BRANCH, None, failing, "Guard")
    assert_same_state(before, repo_state(linked))

    result = deliver_on_branch(linked, BRANCH, None, rewrite_model_a, "Guard")
    assert result.repo_root == linked.resolve() and result.started_on_branch == "feature"
    assert current_branch(linked) == BRANCH
    assert committed_files(linked) == ["src/model_a.py"]
    after_main = repo_state(repo)
    assert (
        after_main["files"] == before_main["files"] and after_main["head_ref"] == "refs/heads/main"
    )


def test_file_names_with_spaces_glob_characters_and_unicode(repo):
    odd = ["src/we ird[1]*.py", "src/ünïcode.py"]
    for name in odd:
        (repo / name).write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "odd names")
    (repo / "src" / "we ird1x.py").write_text("matches the glob\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "glob bait")

    def change(root: Path) -> list[str]:
        for name in odd:
            (root / name).write_text("x = 2\n")
        (root / "src" / "we ird1x.py").write_text("not reported\n")
        return odd

    # The unreported file is caught even though a glob of the first name would match it.
    with pytest.raises(DeliveryFailed, match=r"did not report: src/we ird1x\.py"):
        deliver_on_branch(repo, BRANCH, None, change, "Guard")
    assert (repo / "src" / "we ird1x.py").read_text() == "matches the glob\n"

    def honest(root: Path) -> list[str]:
        for name in odd:
            (root / name).write_text("x = 2\n")
        return odd

    result = deliver_on_branch(repo, BRANCH, None, honest, "Guard")
    assert result.files == tuple(sorted(odd))
    assert git(repo, "status", "--porcelain") == ""


def test_a_reported_directory_is_refused(repo):
    def change(root: Path) -> list[Path]:
        rewrite_model_a(root)
        return [root / "src"]

    with pytest.raises(DeliveryFailed, match="is a directory"):
        deliver_on_branch(repo, BRANCH, None, change, "Guard")
    assert (repo / "src" / "model_a.py").read_bytes() == MODEL_A


def test_ignored_files_are_not_committed(repo):
    def change(root: Path) -> list[Path]:
        (root / "debug.log").write_text("written\n")
        return [root / "debug.log"]

    with pytest.raises(DeliveryFailed, match=r"debug\.log is ignored"):
        deliver_on_branch(repo, BRANCH, None, change, "Guard")
    assert current_branch(repo) == "main"


# ----------------------------------------------------------------------------- pre-commit


def install_pre_commit(repo: Path, tmp_path: Path, monkeypatch, entry: str) -> None:
    """A real `pre-commit` framework hook (a local system hook: no network)."""
    monkeypatch.setenv("PRE_COMMIT_HOME", str(tmp_path / "pre-commit-home"))
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        "  - repo: local\n"
        "    hooks:\n"
        "      - id: check\n"
        "        name: check\n"
        f'        entry: "{entry}"\n'
        "        language: system\n"
        "        files: \\.py$\n"
    )
    git(repo, "add", ".pre-commit-config.yaml")
    git(repo, "commit", "-q", "-m", "pre-commit config")
    done = subprocess.run(
        [sys.executable, "-m", "pre_commit", "install"], cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def dirty_the_tree(repo: Path) -> None:
    (repo / "src" / "model_b.py").write_bytes(MODEL_B + b"# staged\n")
    git(repo, "add", "src/model_b.py")
    (repo / "src" / "model_b.py").write_bytes(MODEL_B + b"# staged\n# unstaged\n")
    (repo / "README.md").write_text("# unstaged edit\n")
    (repo / "notes.txt").write_text("untracked\n")


def test_pre_commit_framework_hook_passing_keeps_the_user_changes(repo, tmp_path, monkeypatch):
    install_pre_commit(repo, tmp_path, monkeypatch, "true")
    dirty_the_tree(repo)
    status_before = git(repo, "status", "--porcelain=v1", "-uall")
    staged_b = git(repo, "show", ":src/model_b.py")
    deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard", allow_dirty=True)
    assert committed_files(repo) == ["src/model_a.py"]
    assert git(repo, "status", "--porcelain=v1", "-uall") == status_before
    assert git(repo, "show", ":src/model_b.py") == staged_b
    assert (repo / "src" / "model_b.py").read_bytes() == MODEL_B + b"# staged\n# unstaged\n"


def test_pre_commit_framework_hook_failing_rolls_back(repo, tmp_path, monkeypatch):
    install_pre_commit(repo, tmp_path, monkeypatch, "false")
    dirty_the_tree(repo)
    before = repo_state(repo)
    with pytest.raises(DeliveryFailed, match=r"(?s)check\.+Failed.*back on main"):
        deliver_on_branch(repo, BRANCH, None, rewrite_model_a, "Guard", allow_dirty=True)
    assert_same_state(before, repo_state(repo))


def test_ctrl_c_midway_rolls_back_and_is_re_raised(repo):
    before = repo_state(repo)

    def interrupted(root: Path) -> list[Path]:
        rewrite_model_a(root)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deliver_on_branch(repo, BRANCH, None, interrupted, "Guard")
    assert_same_state(before, repo_state(repo))


def test_when_restoring_fails_too_the_copies_are_kept_and_named(repo, monkeypatch):
    from codemods.deliver import git_branch

    (repo / "notes.txt").write_text("my untracked notes\n")

    def failing_restore(self, created_branch):
        raise OSError("disk full")

    monkeypatch.setattr(git_branch._Snapshot, "restore", failing_restore)

    def failing(root: Path) -> list[Path]:
        (root / "notes.txt").write_text("clobbered\n")
        raise RuntimeError("engine crashed")

    with pytest.raises(git_branch.RollbackFailed, match="disk full") as caught:
        deliver_on_branch(repo, BRANCH, None, failing, "Guard", allow_dirty=True)
    kept = Path(str(caught.value).rsplit(" ", 1)[1])
    assert kept.is_dir() and (kept / "index").is_file()
    copies = [path.read_text() for path in (kept / "files").iterdir()]
    assert copies == ["my untracked notes\n"]
