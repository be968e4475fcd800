"""The texts of a guard that exempts a hook by name say so, and a call left alone gets the
reason the decision was made on: ``fixtures/callers/offline_capture_table`` picks its setter
from a table that includes EAGLE3, passes ``Optional[List[int]] = None`` ids, and needs the
capture, so the guard raises for DFLASH and DSPARK only; its direct EAGLE3 call is left alone
because that setter takes None to mean its default layers, not because the ids are set."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.callers.records import Action, CallSite, Risk, Shape
from codemods.catalog.hooks import DEFAULT_HOOKS
from codemods.cli.commands import cli
from codemods.output import site_changes
from tests.gitrepo import IDENTITY, git, isolate_git

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "callers" / "offline_capture_table"
STRICT = {"set_dflash_layers_to_capture", "set_dspark_layers_to_capture"}
EAGLE3 = "set_eagle3_layers_to_capture"
#: Words of changes this run did not make (its only change is a raise).
NOT_DONE = ("skip", "warn", "try/except", "is called only when", "ids always set")


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    root = tmp_path / "proj"
    (root / "extract").mkdir(parents=True)
    shutil.copy(FIXTURE / "before.py", root / "extract" / "capture.py")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init", env=IDENTITY)
    monkeypatch.chdir(root)
    return root


def _hooks_named(text: str) -> set[str]:
    return set(re.findall(r"set_[a-z0-9]+_layers_to_capture", text))


def _exempt_by_the_diff(diff: str) -> set[str]:
    """The hook names the added guard compares the setter name against (``!= "..."``)."""
    tests = [line for line in diff.splitlines() if line.startswith("+") and " if not " in line]
    assert len(tests) == 1, diff
    return set(re.findall(r'!= "(set_[a-z0-9]+_layers_to_capture)"', tests[0]))


def _raised_before(text: str) -> set[str]:
    """The hooks a text says the ValueError is raised before."""
    flat = " ".join(text.split())
    match = re.search(r"is raised before (.*?) when the ids are unset", flat)
    assert match, text
    return _hooks_named(match.group(1))


def test_branch_texts_name_the_hooks_the_raise_precedes_and_no_other_policy(repo):
    result = CliRunner().invoke(
        cli, ["migrate", ".", "--branch", "auxcap/fix", "--pr-body", "PR.md"]
    )
    assert result.exit_code == 0, result.output
    diff = git(repo, "show", "--format=", "HEAD")
    exempt = _exempt_by_the_diff(diff)
    assert exempt == {EAGLE3}
    message = git(repo, "log", "-1", "--format=%B")
    body = (repo / "PR.md").read_text()
    for text in (message, body):
        assert _raised_before(text) == STRICT, text
        flat = " ".join(text.replace("`", "").split())
        assert f"{EAGLE3} is exempt: it takes None to mean its default layers" in flat
        for words in NOT_DONE:
            assert words not in flat, (words, text)
        assert "guard policy: raise where the code needs the capture" in flat
    assert all(len(line) <= 72 for line in message.splitlines()), message


def test_the_call_left_alone_gets_the_reason_it_was_left(repo):
    CliRunner().invoke(cli, ["migrate", ".", "--branch", "auxcap/fix", "--pr-body", "PR.md"])
    body = (repo / "PR.md").read_text()
    section = body.split("### Not rewritten, and why", 1)[1].split("Re-check from", 1)[0]
    (line,) = [line for line in section.splitlines() if line.startswith("- ")]
    source = (FIXTURE / "before.py").read_text().splitlines()
    number = int(re.search(r"capture\.py:(\d+)", line).group(1))
    assert f"{EAGLE3}(layer_ids)" in source[number - 1]
    assert "Optional[List[int]] = None" in source[number - 2]  # the ids may be None there
    assert f"`{EAGLE3}` takes None to mean its default layers" in line
    assert "never None" not in line and "always set" not in line
    # The module pins pp_size to 1: the silent loss under PP is not what this call risks.
    assert "pins pp_size to 1" in line and "upstream-patch" not in line


def test_codetf_report_says_the_policy_applied_and_what_it_covers(repo):
    result = CliRunner().invoke(cli, ["migrate", "--format", "json", "."])
    report = json.loads(result.stdout)
    guard, fallback = report["results"]
    (entry,) = guard["changeset"]
    (change,) = entry["changes"]
    assert _raised_before(change["description"]) == STRICT
    assert _exempt_by_the_diff(entry["diff"]) == {EAGLE3}
    assert f"{EAGLE3} is exempt" in change["description"]
    assert guard["properties"]["policy"] == "skip"  # the option the run had
    assert guard["properties"]["appliedPolicies"] == ["raise"]
    assert "skip" not in guard["properties"]["reviewGuidance"]
    assert fallback["changeset"] == [] and fallback["properties"]["appliedPolicies"] == []


def _site(hook: str, risks, guarded=False, handles=False, ids="cfg.layers") -> CallSite:
    return CallSite(
        "/r/a.py", 3, 5, hook, Shape.DIRECT, ids, tuple(risks), guarded, handles, (Action.NONE,)
    )


@pytest.mark.parametrize(
    ("site", "says", "not_says"),
    [
        (
            _site(EAGLE3, [Risk.PP_SILENT]),
            ["takes None to mean its default layers", "lost silently", "upstream-patch"],
            ["never None", "pins pp_size"],
        ),
        (
            _site("set_dspark_layers_to_capture", [Risk.SAFE], guarded=True, handles=True),
            ["already behind a check of the ids", "handles NotImplementedError"],
            ["default layers", "never None"],
        ),
        (
            _site("set_dspark_layers_to_capture", [Risk.SAFE], ids="[3, 9]", handles=True),
            ["`[3, 9]` is never None here"],
            ["default layers", "check of the ids"],
        ),
    ],
    ids=["eagle3-pp-silent", "guarded-and-handled", "literal-ids"],
)
def test_left_alone_says_the_facts_the_decision_was_made_on(site, says, not_says):
    text = site_changes.left_alone(site, lambda value: f"`{value}`")
    for words in says:
        assert words in text, (words, text)
    for words in not_says:
        assert words not in text, (words, text)


def test_a_guard_covers_the_hooks_that_reject_none_and_exempts_the_others():
    site = _site(f"set_dspark_layers_to_capture|{EAGLE3}", [Risk.MAYBE_NONE])
    guard = next(m for m in site_changes.registry.CODEMODS if m.action == "guard")
    covered, exempt = site_changes.covered(guard, site)
    assert [hook.name for hook in covered] == ["set_dspark_layers_to_capture"]
    assert exempt == [DEFAULT_HOOKS.get(EAGLE3)]
    fallback = next(m for m in site_changes.registry.CODEMODS if m.action == "fallback")
    assert site_changes.covered(fallback, site) == (site_changes.hooks_of(site), [])


def test_the_policy_line_names_each_policy_where_it_was_applied():
    from pathlib import Path

    from codemods.callers.records import REQUIRED_PREFIX, FileResult, Status
    from codemods.deliver.messages import migrate_commit_message

    def guarded(line: int, note: str = "") -> CallSite:
        return CallSite(
            "/r/a.py", line, 5, "set_dspark_layers_to_capture", Shape.DIRECT, "ids",
            (Risk.MAYBE_NONE,), False, False, (Action.GUARD,), note,
        )  # fmt: skip

    required = guarded(9, REQUIRED_PREFIX + "the capture is read after the call")
    policies = {"guard policy": "skip", "fallback policy": "warn"}

    def header(*sites: CallSite) -> str:
        message = migrate_commit_message(
            [FileResult("/r/a.py", Status.CHANGED, sites)], policies, Path("/r")
        )
        return " ".join(
            message.split("Rewritten by `auxcap migrate`", 1)[1].split(":\n")[0].split()
        )

    assert header(guarded(3)) == "(guard policy: skip)"
    assert header(required) == "(guard policy: raise where the code needs the capture)"
    assert header(guarded(3), required) == (
        "(guard policy: skip, raise where the code needs the capture)"
    )


def test_the_scan_note_of_the_guarded_call_names_the_exempt_hook(repo):
    result = CliRunner().invoke(cli, ["scan", "--format", "json", "."])
    (entry,) = json.loads(result.stdout)["files"]
    notes = {site["line"]: site["note"] for site in entry["call_sites"]}
    guarded = next(note for note in notes.values() if note.startswith("capture required"))
    assert "unset ids raise ValueError early" in guarded
    assert guarded.endswith(f"{EAGLE3} takes None (default layers): exempt")
