"""A codemod is one module, one registry entry and one fixture folder: a codemod written
outside the package (``pp_silent_note_codemod.py``, fixtures in ``fixtures/pp_silent_note``)
and registered here is applied by ``migrate`` after the built-in ones, on their output, and
shows in ``--help``, in the options and in the JSON (CodeTF) report, with no other file
touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from codemods.callers.options import TransformOptions
from codemods.callers.records import Action, Status
from codemods.callers.rewrite import registry
from codemods.callers.transform import transform_source
from codemods.cli.commands import cli

HERE = Path(__file__).resolve().parents[1]
FIXTURE = HERE / "fixtures" / "pp_silent_note"
SCHEMA = json.loads((HERE.parent / "docs" / "report-schema.json").read_text())


@pytest.fixture
def entry():
    import pp_silent_note_codemod as codemod

    entry = registry.Entry(
        codemod.METADATA, "pp_silent_note_codemod:PPSilentNoteTransformer", codemod.applies
    )
    with registry.registered(entry):
        yield entry
    assert entry not in registry.ENTRIES


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(FIXTURE / "before.py", tmp_path / "setup_model.py")
    return tmp_path / "setup_model.py"


def test_migrate_write_applies_it_after_the_built_in_codemods(entry, project):
    result = CliRunner().invoke(cli, ["migrate", "--write", str(project)])
    assert result.exit_code == 0, result.output
    assert project.read_bytes() == (FIXTURE / "after.py").read_bytes()


def test_its_policy_option_reaches_the_transformer(entry, project):
    result = CliRunner().invoke(
        cli, ["migrate", "--write", "--pp-note-policy", "todo", str(project)]
    )
    assert result.exit_code == 0, result.output
    text = project.read_text()
    assert text.count("# TODO: captures are lost") == 3
    assert "# NOTE:" not in text
    bad = CliRunner().invoke(cli, ["migrate", "--pp-note-policy", "maybe", str(project)])
    assert bad.exit_code == 2


def test_steps_are_recorded_in_registry_order(entry):
    before = (FIXTURE / "before.py").read_bytes()
    result = transform_source(before, "setup_model.py", TransformOptions())
    assert result.status is Status.CHANGED
    assert [step.action for step in result.steps] == ["guard", "fallback", "pp-note"]
    note = result.steps[-1]
    assert note.before == result.steps[1].after and note.after == result.rewritten
    # described against the fallback's output: the DFLASH call now sits inside the try
    assert [(site.line, site.hook) for site in note.sites] == [
        (7, "set_eagle3_layers_to_capture"),
        (10, "set_dflash_layers_to_capture"),
        (18, "set_eagle3_layers_to_capture"),
    ]
    assert Action(entry.action) in result.call_sites[0].actions


def test_json_report_has_a_result_for_it(entry, project):
    result = CliRunner().invoke(cli, ["migrate", "--format", "json", str(project)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    ids = [item["codemod"] for item in report["results"]]
    assert ids == [*(m.id for m in registry.CODEMODS)]
    assert ids[-1] == entry.metadata.id
    mine = report["results"][-1]
    assert mine["properties"]["policy"] == "note"
    (changeset,) = mine["changeset"]
    assert changeset["path"].endswith("setup_model.py")
    assert [change["lineNumber"] for change in changeset["changes"]] == [7, 11, 20]
    assert "+    # NOTE: captures are lost" in changeset["diff"]


def test_help_lists_it_only_while_registered(entry):
    shown = CliRunner().invoke(cli, ["migrate", "--help"]).output
    assert "--pp-note-policy [note|todo]" in shown
    assert entry.metadata.id in shown
    registry.unregister(entry)
    try:
        hidden = CliRunner().invoke(cli, ["migrate", "--help"]).output
    finally:
        registry.register(entry)
    assert "--pp-note-policy" not in hidden and entry.metadata.id not in hidden
    assert "--guard-policy" in hidden


def test_a_clashing_entry_is_refused(entry):
    with pytest.raises(ValueError, match="clashes"):
        registry.register(entry)


def test_its_unfixed_sites_and_reasons_come_from_its_metadata(entry, tmp_path):
    """The sites it answers (``addresses``) but left for review are its CodeTF ``unfixed``;
    the PR table's "Why" for a site it rewrote is its ``why``."""
    from codemods.deliver import messages

    path = tmp_path / "setup_model.py"
    path.write_text(
        "def setup(model, ids):\n"
        "    model.set_eagle3_layers_to_capture(ids)\n"
        "    return model.set_eagle3_layers_to_capture(ids) or model\n"
    )
    result = CliRunner().invoke(cli, ["migrate", "--format", "json", str(path)])
    assert result.exit_code == 0, result.output
    mine = json.loads(result.stdout)["results"][-1]
    (unfixed,) = mine["unfixed"]
    assert unfixed["lineNumber"] == 3 and "note it by hand" in unfixed["reason"]
    others = json.loads(result.stdout)["results"][:-1]
    assert all(not item.get("unfixed") for item in others)

    done = transform_source(path.read_bytes(), str(path), TransformOptions())
    noted = next(site for site in done.call_sites if Action(entry.action) in site.actions)
    assert messages._why_rewritten(noted) == (
        "captures of `ids` are lost silently on non-last PP ranks: noted"
    )
