"""The scan report's schema file (``codemods/output/schemas/scan-schema.json``) is a valid JSON
Schema, names exactly the values the records can take, and is what ``report`` serves."""

from __future__ import annotations

import json

import jsonschema

from codemods.callers.records import Action, Risk, Shape, Status
from codemods.output import report

SCHEMA = json.loads(report.SCAN_SCHEMA_FILE.read_text(encoding="utf-8"))
SITE = SCHEMA["properties"]["files"]["items"]["properties"]["call_sites"]["items"]


def test_schema_file_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert report.SCAN_JSON_SCHEMA == SCHEMA


def test_enums_match_the_records():
    assert SITE["properties"]["shape"]["enum"] == [shape.value for shape in Shape]
    assert SITE["properties"]["risks"]["items"]["enum"] == [risk.value for risk in Risk]
    assert SITE["properties"]["actions"]["items"]["enum"] == [a.value for a in Action]
    status = SCHEMA["properties"]["files"]["items"]["properties"]["status"]["enum"]
    assert status == [value.value for value in Status]
    assert SCHEMA["properties"]["version"]["const"] == report.SCAN_JSON_VERSION


def test_call_site_fields_match_the_record():
    from codemods.callers.records import CallSite

    site = CallSite(
        "p.py",
        1,
        1,
        "set_x_layers_to_capture",
        Shape.DIRECT,
        None,
        (Risk.SAFE,),
        False,
        False,
        (Action.NONE,),
    )
    assert sorted(SITE["required"]) == sorted(site.to_dict())


def test_hook_is_a_list_of_names(tmp_path):
    """A call that may reach several hooks lists them, one name each (not ``a|b``)."""
    from click.testing import CliRunner

    from codemods.cli.commands import cli

    source = tmp_path / "table.py"
    source.write_text(
        "def f(model, ids):\n"
        "    for name in ('set_dspark_layers_to_capture', 'set_dflash_layers_to_capture'):\n"
        "        getattr(model, name)(ids)\n"
        "    model.set_eagle3_layers_to_capture(ids)\n"
    )
    result = CliRunner().invoke(cli, ["scan", "--format", "json", str(source)])
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    hooks = [site["hook"] for site in document["files"][0]["call_sites"]]
    assert hooks == [
        ["set_dflash_layers_to_capture", "set_dspark_layers_to_capture"],  # sorted
        ["set_eagle3_layers_to_capture"],
    ]
    document["files"][0]["call_sites"][1]["hook"] = "set_eagle3_layers_to_capture"
    try:
        jsonschema.validate(document, SCHEMA)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the schema accepts a hook given as a string")
