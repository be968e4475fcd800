"""Commit messages, PR descriptions and the re-check of committed files."""

from __future__ import annotations

from pathlib import Path

from codemods.callers.records import Action, CallSite, FileResult, Risk, Shape, Status
from codemods.deliver.git_branch import DeliveryResult, deliver_on_branch
from codemods.deliver.messages import (
    PP_ERROR,
    VALUE_ERROR,
    PatchedFile,
    Verification,
    migrate_commit_message,
    migrate_pr_body,
    upstream_commit_message,
    upstream_pr_body,
)
from codemods.deliver.recheck import recheck_python_files
from tests.gitrepo import git, isolate_git, make_repo

POLICIES = {"guard policy": "skip", "fallback policy": "warn"}


def site(path: str, line: int, hook: str, actions, risks=(Risk.MAYBE_NONE,), note="") -> CallSite:
    return CallSite(
        path=path,
        line=line,
        column=4,
        hook=hook,
        shape=Shape.DIRECT,
        ids_source="layer_ids",
        risks=tuple(risks),
        guarded=False,
        handles_not_implemented=False,
        actions=tuple(actions),
        note=note,
    )


def migrate_results(root: Path) -> list[FileResult]:
    a = str(root / "src" / "model_a.py")
    b = str(root / "src" / "model_b.py")
    return [
        FileResult(
            a,
            Status.CHANGED,
            (
                site(a, 2, "set_dspark_layers_to_capture", [Action.GUARD]),
                site(
                    a, 9, "set_eagle3_layers_to_capture", [Action.FALLBACK], [Risk.PP_UNSUPPORTED]
                ),
                site(a, 14, "set_dflash_layers_to_capture", [Action.NONE], [Risk.SAFE]),
            ),
        ),
        FileResult(
            b,
            Status.UNCHANGED,
            (
                site(
                    b,
                    5,
                    "set_dspark_layers_to_capture|set_msd_layers_to_capture",
                    [Action.REVIEW],
                    note="hook chosen at run time",
                ),
            ),
        ),
    ]


def delivery(root: Path, commit: str | None = "a" * 40) -> DeliveryResult:
    return DeliveryResult(
        root, "auxcap/guard-capture", "b" * 40, commit, ("src/model_a.py",), "main", "b" * 40
    )


def test_migrate_commit_message_says_what_was_done_at_each_site(tmp_path):
    message = migrate_commit_message(migrate_results(tmp_path), POLICIES, tmp_path)
    title, blank, *body = message.splitlines()
    assert title == "Guard aux hidden-state capture calls (2 call sites in 1 file)"
    assert len(title) <= 72 and blank == ""
    assert all(len(line) <= 72 for line in body)
    text = " ".join(line.strip() for line in body)
    assert (
        "src/model_a.py:2 set_dspark_layers_to_capture is called only when layer_ids is set "
        "(with the ids as a list); when unset it is skipped" in text
    )
    assert (
        "src/model_a.py:9 set_eagle3_layers_to_capture is wrapped in try/except "
        "NotImplementedError that logs a warning and continues without aux hidden capture" in text
    )
    assert "set_dflash" not in text  # not rewritten, not listed as a change
    assert "src/model_b.py:5 set_dspark_layers_to_capture|set_msd_layers_to_capture" in text
    assert "guard policy: skip, fallback policy: warn" in text
    assert "Re-check: auxcap migrate --check src/model_a.py" in text
    assert VALUE_ERROR not in text and PP_ERROR not in text  # no generic paragraphs


def test_migrate_pr_body_has_every_section(tmp_path):
    body = migrate_pr_body(
        migrate_results(tmp_path),
        delivery(tmp_path),
        POLICIES,
        Verification(rechecked=("src/model_a.py",), idempotent=True),
    )
    assert body.startswith("# Guard aux hidden-state capture calls\n")
    assert "`auxcap migrate` changed 2 call sites in 1 file (commit `aaaaaaaaaaaa`)" in body
    assert "| File | Line | Change | Why |" in body
    assert (
        "| `src/model_a.py` | 2 | `set_dspark_layers_to_capture` is called only when "
        "`layer_ids` is set (with the ids as a list); when unset it is skipped "
        "| `layer_ids` may be unset: the hook rejects None |" in body
    )
    assert (
        "| `src/model_a.py` | 9 | `set_eagle3_layers_to_capture` is wrapped in try/except "
        "NotImplementedError that logs a warning and continues without aux hidden capture "
        "| can raise NotImplementedError under pipeline parallelism |" in body
    )
    # What a reviewer checks, for the two changes made.
    assert "- where the ids are unset the hook is skipped" in body
    assert "- under pipeline parallelism the run now goes on without aux hidden capture" in body
    # The call site left as it is, and why.
    assert "### Not rewritten, and why" in body
    assert (
        "- `src/model_a.py:14` `set_dflash_layers_to_capture`: nothing to change: `layer_ids` "
        "is never None here; no model's `set_dflash_layers_to_capture` raises "
        "NotImplementedError under pipeline parallelism" in body
    )
    assert (
        "`src/model_b.py:5` `set_dspark_layers_to_capture|set_msd_layers_to_capture`: "
        "hook chosen at run time" in body
    )
    assert "`auxcap migrate --check src/model_a.py` (exit 0: nothing left to change)" in body
    assert "Policies: guard policy: skip, fallback policy: warn." in body
    assert "github.com" not in body  # no SGLang line ranges: no site needed them
    assert "re-parsed with LibCST and compiled with `compile()`" in body
    assert "Idempotent: running `auxcap migrate --check` again" in body
    assert f"`git revert {'a' * 12}`" in body
    assert "`git branch -D auxcap/guard-capture`" in body
    assert "`git push origin --delete auxcap/guard-capture`" in body


def test_pr_body_reports_failed_checks_honestly(tmp_path):
    body = migrate_pr_body(
        migrate_results(tmp_path),
        delivery(tmp_path),
        POLICIES,
        Verification(
            rechecked=("src/model_a.py",),
            failures=(("src/model_a.py", "bad | thing"),),
            idempotent=False,
        ),
    )
    assert "**1 file failed**" in body and "bad \\| thing" in body
    assert "**Not idempotent**" in body


def test_upstream_message_and_body_list_the_patched_files(tmp_path):
    patched = [
        PatchedFile("python/sglang/srt/models/kimi_linear.py", "capture aux states under PP"),
        PatchedFile(
            "python/sglang/srt/distributed/pp_aux_transport.py", "PP transport", added=True
        ),
    ]
    message = upstream_commit_message(patched)
    assert message.splitlines()[0] == "Support aux hidden-state capture under pipeline parallelism"
    assert "  M python/sglang/srt/models/kimi_linear.py: capture aux states under PP" in message
    assert "  A python/sglang/srt/distributed/pp_aux_transport.py: PP transport" in message
    assert PP_ERROR not in message  # no facts of the release: nothing of it is quoted
    body = upstream_pr_body(patched, delivery(tmp_path), Verification(("x.py",), (), True))
    assert "| `python/sglang/srt/models/kimi_linear.py` | capture aux states under PP |" in body
    assert "| `python/sglang/srt/distributed/pp_aux_transport.py` | added: PP transport |" in body
    assert PP_ERROR not in body and VALUE_ERROR not in body
    assert "`auxcap upstream-patch` again" in body
    assert "git revert" in body


def test_recheck_parses_and_compiles_python_files_only(tmp_path):
    (tmp_path / "good.py").write_text("x = 1\n")
    (tmp_path / "bad.py").write_text("def f(:\n")
    (tmp_path / "notes.md").write_text("def f(:\n")
    (tmp_path / "stub.pyi").write_text("def f() -> int: ...\n")
    result = recheck_python_files(
        tmp_path, ["good.py", "bad.py", "notes.md", "stub.pyi", "gone.py"]
    )
    assert result.rechecked == ("good.py", "bad.py", "stub.pyi")
    assert [path for path, _ in result.failures] == ["bad.py"]
    assert not result.ok


def test_recheck_catches_code_that_parses_but_does_not_compile(tmp_path):
    (tmp_path / "late.py").write_text("def f():\n    return 1\nreturn 2\n")
    result = recheck_python_files(tmp_path, ["late.py"])
    assert result.failures and "does not compile" in result.failures[0][1]


def test_commit_message_built_from_records_lands_in_the_commit(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    repo = make_repo(tmp_path / "repo")
    results = migrate_results(repo)

    def change(root: Path) -> list[Path]:
        target = root / "src" / "model_a.py"
        target.write_text(target.read_text() + "# guarded\n")
        return [target]

    deliver_on_branch(
        repo,
        "auxcap/x",
        None,
        change,
        lambda files: migrate_commit_message(results, POLICIES, repo),
    )
    logged = git(repo, "log", "-1", "--format=%B")
    assert logged.splitlines()[0] == "Guard aux hidden-state capture calls (2 call sites in 1 file)"
    assert "  src/model_a.py:2 set_dspark_layers_to_capture is called only when" in logged


def test_revert_section_without_a_commit_uses_a_placeholder(tmp_path):
    body = migrate_pr_body([], delivery(tmp_path, None), {}, Verification())
    assert "`git revert <sha>`" in body and "| - | - | - | - |" in body
