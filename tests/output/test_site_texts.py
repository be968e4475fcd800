"""The texts of a change say what was done, site by site: the commit message, the PR
description and the CodeTF change descriptions are built from the codemods that rewrote each
call site and the policy applied there; a one-site change gets a short text that mentions
only what its diff does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.callers.records import (
    REQUIRED_PREFIX,
    Action,
    CallSite,
    FileResult,
    Risk,
    Shape,
    Status,
)
from codemods.cli.commands import cli
from codemods.deliver.git_branch import DeliveryResult
from codemods.deliver.messages import Verification, migrate_commit_message, migrate_pr_body
from tests.gitrepo import IDENTITY, git, isolate_git

#: Words that belong to changes a guard-raise-only site did not get.
NOT_A_RAISE = (
    "skipped",
    "without aux hidden capture",
    "try/except",
    "NotImplementedError",
    "warning",
    "when unset it is",
)
REQUIRED = """def prepare_target(model, aux_layer_ids=None):
    model.set_dspark_layers_to_capture(aux_layer_ids)
    assert model.capture_aux_hidden_states
"""
HANDLED = """def prepare(model, args):
    try:
        model.set_dspark_layers_to_capture(args.capture_layers)
    except NotImplementedError:
        pass
"""


def site(
    hook="set_dspark_layers_to_capture",
    actions=(Action.GUARD,),
    note="",
    risks=(Risk.MAYBE_NONE,),
    ids="args.capture_layers",
) -> CallSite:
    return CallSite(
        "/r/train.py", 42, 5, hook, Shape.DIRECT, ids, risks, False, False, tuple(actions), note
    )


def texts(one: CallSite, policies: dict[str, str]) -> tuple[str, str]:
    results = [FileResult(one.path, Status.CHANGED, (one,))]
    delivery = DeliveryResult(
        Path("/r"), "auxcap/fix", "b" * 40, "a" * 40, ("train.py",), "main", "b" * 40
    )
    message = migrate_commit_message(results, policies, Path("/r"))
    body = migrate_pr_body(results, delivery, policies, Verification(("train.py",), (), True))
    return message, body


def test_one_guard_raise_site_says_only_that():
    message, body = texts(site(), {"guard policy": "raise", "fallback policy": "warn"})
    done = (
        "a ValueError naming `args.capture_layers` is raised before "
        "`set_dspark_layers_to_capture` when the ids are unset"
    )
    assert f"- `train.py:42`: {done}. Why:" in body
    assert "train.py:42 a ValueError naming args.capture_layers is raised before" in message
    for words in NOT_A_RAISE:
        assert words not in body and words not in message, words
    assert "fallback policy" not in body and "fallback policy" not in message
    assert "github.com" not in body and "#L" not in body  # no SGLang line ranges
    assert len(body) < 1300 and len(body.splitlines()) <= 20, body
    assert len(message.splitlines()) <= 9, message
    assert "auxcap migrate --check --guard-policy raise train.py" in message
    assert "`auxcap migrate --check --guard-policy raise train.py`" in body


def test_where_the_code_needs_the_capture_the_guard_raises_whatever_the_policy():
    required = site(
        note=REQUIRED_PREFIX + "the capture is read after the call; unset ids "
        "raise ValueError early, PP errors are not caught"
    )
    message, body = texts(required, {"guard policy": "skip", "fallback policy": "warn"})
    assert "is raised before `set_dspark_layers_to_capture` when the ids are unset" in body
    assert "skipped" not in body and "skipped" not in message
    assert "a run without layer ids now stops early" in body


def test_one_fallback_site_says_warn_and_not_guard():
    one = site(actions=(Action.FALLBACK,), risks=(Risk.PP_UNSUPPORTED,), ids="[3, 18]")
    _, body = texts(one, {"guard policy": "skip", "fallback policy": "warn"})
    assert "wrapped in try/except NotImplementedError that logs a warning" in body
    assert "ValueError" not in body and "skipped" not in body and "guard policy" not in body


@pytest.mark.parametrize(
    ("hook", "upstream"),
    [("set_dspark_layers_to_capture", True), ("set_dflash_layers_to_capture", False)],
)
def test_fallback_raise_names_the_hint_the_code_got(hook, upstream):
    one = site(hook=hook, actions=(Action.FALLBACK,), risks=(Risk.PP_UNSUPPORTED,))
    _, body = texts(one, {"guard policy": "skip", "fallback policy": "raise"})
    assert 're-raises it with the hint "run with --pp-size 1' in body
    assert ("upstream-patch" in body.split("Why:")[0]) is upstream


# ----------------------------------------------------------------------- end to end


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    monkeypatch.chdir(root)
    return root


def commit_all(root: Path) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init", env=IDENTITY)


@pytest.mark.parametrize(
    ("source", "args"),
    [(REQUIRED, ()), (HANDLED, ("--guard-policy", "raise"))],
    ids=["capture-required", "guard-raise"],
)
def test_pr_text_of_a_one_site_change_matches_its_diff(repo, source, args):
    (repo / "train.py").write_text(source)
    commit_all(repo)
    result = CliRunner().invoke(
        cli, ["migrate", ".", *args, "--branch", "auxcap/fix", "--pr-body", "PR.md"]
    )
    assert result.exit_code == 0, result.output
    diff = git(repo, "show", "--format=", "HEAD")
    added = "\n".join(line for line in diff.splitlines() if line.startswith("+"))
    assert "raise ValueError(" in added and "try:" not in added  # the diff: a raise only
    body = (repo / "PR.md").read_text()
    message = git(repo, "log", "-1", "--format=%B")
    for text in (body, message):
        assert "ValueError" in text
        for words in NOT_A_RAISE:
            assert words not in text, (words, text)
    assert len(body) < 1300, body
    assert len(message.strip().splitlines()) <= 9, message


def test_codetf_description_follows_the_policy_applied_at_the_site(repo):
    (repo / "train.py").write_text(REQUIRED)
    result = CliRunner().invoke(cli, ["migrate", "--format", "json", "train.py"])
    report = json.loads(result.stdout)
    (change,) = report["results"][0]["changeset"][0]["changes"]
    assert change["description"] == (
        "a ValueError naming aux_layer_ids is raised before set_dspark_layers_to_capture when "
        "the ids are unset"
    )
    assert report["results"][0]["properties"]["policy"] == "skip"  # the run's policy
