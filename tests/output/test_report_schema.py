"""``auxcap migrate --format json``: real output validated against docs/report-schema.json,
and checked for what the schema cannot say (the diffs apply in order, line numbers point at
the change, the metadata is the codemods' own, the command line re-creates the run)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from caller_cases import DEMO_REPO
from click.testing import CliRunner

from codemods import __version__
from codemods.callers.rewrite.registry import CODEMODS
from codemods.cli.commands import cli

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "report-schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture()
def project(tmp_path, monkeypatch):
    """A copy of the demo repository as the working directory."""
    target = tmp_path / "project"
    shutil.copytree(DEMO_REPO, target)
    monkeypatch.chdir(target)
    return target


def _migrate(*args: str) -> tuple[int, dict, str]:
    result = CliRunner().invoke(cli, ["migrate", "--format", "json", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout), result.stderr


def test_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_check_report_validates_and_describes_the_run(project):
    code, report, _ = _migrate("--check", ".")
    assert code == 1
    VALIDATOR.validate(report)
    run = report["run"]
    assert run["version"] == __version__
    assert run["directory"] == str(project)
    assert run["commandLine"] == "auxcap migrate --check --format json ."
    assert isinstance(run["elapsed"], int) and run["elapsed"] >= 0
    assert run["sarifs"] == []
    assert run["properties"]["mode"] == "check"
    assert run["properties"]["summary"]["changed"] == 3
    assert [result["codemod"] for result in report["results"]] == [m.id for m in CODEMODS]
    for result, metadata in zip(report["results"], CODEMODS, strict=False):
        assert result["summary"] == metadata.summary
        assert result["description"] == metadata.description
        # What a reviewer checks for the policies the changes applied, and only those.
        applied = result["properties"]["appliedPolicies"]
        assert applied and set(applied) <= set(metadata.policy.names)
        guidance = result["properties"]["reviewGuidance"]
        for choice in metadata.policy.choices:
            assert (choice.review in guidance) is (choice.name in applied), choice.name
        assert result["references"] == [ref.to_dict() for ref in metadata.references]
    guard, fallback = report["results"]
    assert {entry["path"] for entry in guard["changeset"]} == {
        "serving/capture_runner.py",
        "train_distill.py",
        "utils/capture.py",
    }
    assert {entry["path"] for entry in fallback["changeset"]} == {
        "serving/capture_runner.py",
        "train_distill.py",
        "utils/capture.py",
    }
    descriptions = [c["description"] for entry in guard["changeset"] for c in entry["changes"]]
    assert any("args.capture_layers is set" in text for text in descriptions)
    assert [(entry["path"], entry["lineNumber"]) for entry in guard["unfixed"]] == [
        ("eval_features.py", 8)
    ]
    assert "None passed to a hook that rejects it" in guard["unfixed"][0]["reason"]
    references = " ".join(ref["description"] for ref in guard["references"])
    assert "DSPARK requires explicit layer_ids for aux hidden capture." in references
    assert "DSPARK aux hidden capture requires PP=1." in references


def test_changesets_apply_in_order_and_lines_point_at_the_change(project, tmp_path):
    _, report, _ = _migrate("--check", ".")
    originals = {
        path.relative_to(project).as_posix(): path.read_bytes() for path in project.rglob("*.py")
    }
    replay = tmp_path / "replay"
    shutil.copytree(project, replay)
    for result in report["results"]:
        for entry in result["changeset"]:
            subprocess.run(
                ["git", "apply", "-p1", "-"], input=entry["diff"].encode(), cwd=replay, check=True
            )
            lines = (replay / entry["path"]).read_text().splitlines()
            added = {
                line[1:]
                for line in entry["diff"].splitlines()
                if line.startswith("+") and not line.startswith("+++")
            }
            for change in entry["changes"]:
                assert lines[change["lineNumber"] - 1] in added, (entry["path"], change)
    code, _, _ = _migrate("--write", ".")
    assert code == 0
    for path in originals:
        assert (replay / path).read_bytes() == (project / path).read_bytes(), path
    assert any((project / p).read_bytes() != data for p, data in originals.items())


def test_policies_and_command_line_are_reported(project):
    args = ["--check", "--guard-policy", "raise", "--fallback-policy", "raise", "train_distill.py"]
    _, report, _ = _migrate(*args)
    VALIDATOR.validate(report)
    assert [r["properties"]["policy"] for r in report["results"]] == ["raise", "raise"]
    guard_change = report["results"][0]["changeset"][0]["changes"][0]
    assert "ValueError naming args.capture_layers" in guard_change["description"]
    # The command line re-creates the run: the same report, give or take the time taken.
    words = shlex.split(report["run"]["commandLine"])
    assert words[:2] == ["auxcap", "migrate"]
    again = CliRunner().invoke(cli, words[1:])
    rerun = json.loads(again.stdout)
    for document in (report, rerun):
        document["run"]["elapsed"] = 0
    assert rerun == report


def test_failed_files_are_listed_and_report_stays_valid(project):
    (project / "broken.py").write_text("model.set_dspark_layers_to_capture(args.ids\n")
    code, report, stderr = _migrate("--check", ".")
    assert code == 2
    VALIDATOR.validate(report)
    for result in report["results"]:
        assert result["failedFiles"] == ["broken.py"]
    failures = report["run"]["properties"]["failures"]
    assert [failure["path"] for failure in failures] == ["broken.py"]
    assert "syntax error" in failures[0]["reason"]
    assert "broken.py" in stderr


def test_nothing_to_do_gives_empty_changesets(project):
    code, report, _ = _migrate("--check", "config.py")
    assert code == 0
    VALIDATOR.validate(report)
    assert all(result["changeset"] == [] for result in report["results"])


def test_schema_rejects_what_the_report_must_not_be(project):
    _, report, _ = _migrate("--check", ".")
    broken = json.loads(json.dumps(report))
    del broken["results"][0]["changeset"][0]["changes"]
    assert not VALIDATOR.is_valid(broken)
    broken = json.loads(json.dumps(report))
    broken["run"]["elapsed"] = "12s"
    assert not VALIDATOR.is_valid(broken)
    broken = json.loads(json.dumps(report))
    broken["results"][1]["codemod"] = "fallback"
    assert not VALIDATOR.is_valid(broken)


def test_command_line_reconstruction_covers_every_option_kind():
    import click

    from codemods.cli.commandline import command_line

    seen = {}

    @click.group()
    def group():
        pass

    @group.command()
    @click.argument("paths", nargs=-1)
    @click.option("--diff", "mode", flag_value="diff", default=True)
    @click.option("--check", "mode", flag_value="check")
    @click.option("--quiet", is_flag=True)
    @click.option("--color/--no-color", default=True)
    @click.option("--exclude", multiple=True)
    @click.option("--policy", default="skip")
    @click.pass_context
    def run(ctx, **_):
        seen["line"] = command_line(ctx)

    args = ["run", "--check", "--no-color", "--exclude", "a b/", "--exclude", "c", "x y.py"]
    assert CliRunner().invoke(group, args).exit_code == 0
    assert seen["line"] == "auxcap run --check --no-color --exclude 'a b/' --exclude c 'x y.py'"
    assert shlex.split(seen["line"])[1:] == [args[0], *args[1:]]


def test_pr_body_reads_the_same_metadata(tmp_path):
    """The PR description of ``migrate --branch`` says what each codemod did at each site in
    the words of its metadata (the policy choice's change and review, its why), and nothing
    about a codemod that changed nothing."""
    from codemods.callers.records import Action, CallSite, FileResult, Risk, Shape, Status
    from codemods.callers.rewrite.registry import GUARD
    from codemods.deliver.git_branch import DeliveryResult
    from codemods.deliver.messages import Verification, migrate_pr_body

    path = str(tmp_path / "train.py")
    guarded = CallSite(
        path,
        3,
        5,
        "set_dspark_layers_to_capture",
        Shape.DIRECT,
        "args.capture_layers",
        (Risk.MAYBE_NONE,),
        False,
        False,
        (Action.GUARD,),
    )
    delivery = DeliveryResult(
        tmp_path, "auxcap/guard", "b" * 40, "a" * 40, ("train.py",), "main", "b" * 40
    )
    policies = {"guard policy": "raise", "fallback policy": "warn"}
    body = migrate_pr_body(
        [FileResult(path, Status.CHANGED, (guarded,))], delivery, policies, Verification()
    )
    choice = GUARD.policy.choice("raise")
    hook, ids = "`set_dspark_layers_to_capture`", "`args.capture_layers`"
    assert choice.change.format(hook=hook, ids=ids, hint="") in body
    assert f"Review: {choice.review}." in body
    assert GUARD.why.format(ids=ids) in body
    fallback = CODEMODS[1]
    assert fallback.id not in body and fallback.policy.label not in body  # not applied
    assert GUARD.policy.choice("skip").review not in body
