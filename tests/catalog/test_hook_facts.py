"""codemods.catalog.hook_facts: the checked-in facts of SGLang 0.5.18-0.5.23 and the query API.

The facts asserted here are the ones the caller codemods rely on; they were read off the
release wheels' model files (see tests/catalog/test_hook_facts_releases.py for the re-derivation).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hook_facts_script import release_view

from codemods.catalog import derive
from codemods.catalog import hook_facts as hf

DSPARK = "set_dspark_layers_to_capture"
DFLASH = "set_dflash_layers_to_capture"
EAGLE3 = "set_eagle3_layers_to_capture"
RELEASES = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_covers_the_release_line_and_the_three_hook_families():
    assert hf.releases() == RELEASES
    assert {DSPARK, DFLASH, EAGLE3} <= set(hf.hooks())
    for hook in hf.hooks():
        assert hook.startswith("set_") and hook.endswith("_layers_to_capture")
    for release in RELEASES:
        assert "LlamaForCausalLM" in hf.models(EAGLE3, release)
        assert "KimiLinearForCausalLM" in hf.models(DSPARK, release)


def test_only_kimi_dspark_and_qwen3_5_text_dflash_raise_not_implemented_under_pp():
    raising = {
        (f.hook, f.file)
        for hook in hf.hooks()
        for f in hf.setters(hook, registered_only=False)
        if f.pp == hf.PP_RAISES and f.pp_raise.type == "NotImplementedError"
    }
    assert raising == {
        (DSPARK, "kimi_linear.py"),
        (DSPARK, "kimi_k3.py"),
        (DFLASH, "qwen3_5_text.py"),
    }
    for f in hf.pp_raises(DSPARK, exc_type="NotImplementedError"):
        assert f.pp_raise.message == "DSPARK aux hidden capture requires PP=1."
    for f in hf.pp_raises(DFLASH, exc_type="NotImplementedError"):
        assert f.pp_raise.message == "DFLASH/DSPARK aux hidden capture requires PP=1."
        assert set(f.models) == {"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}


def test_dspark_raises_up_to_0_5_20_only():
    for release in ("0.5.18", "0.5.19", "0.5.20"):
        assert hf.may_raise_not_implemented(DSPARK, release)
        models = {m for f in hf.pp_raises(DSPARK, release) for m in f.models}
        assert {"KimiLinearForCausalLM", "KimiK3ForConditionalGeneration"} <= models
    for release in ("0.5.21", "0.5.22", "0.5.23"):
        assert not hf.may_raise_not_implemented(DSPARK, release)
    assert hf.may_raise_not_implemented(DSPARK)
    assert not hf.may_raise_not_implemented(DSPARK, ["0.5.21", "0.5.23"])


def test_qwen3_5_text_dflash_raises_from_0_5_19_on():
    assert not hf.may_raise_not_implemented(DFLASH, "0.5.18")
    for release in RELEASES[1:]:
        assert hf.may_raise_not_implemented(DFLASH, release)


def test_no_eagle3_setter_ever_raises_under_pp_and_many_lose_captures():
    assert not hf.may_raise_not_implemented(EAGLE3)
    assert hf.pp_raises(EAGLE3) == ()
    assert not any(f.pp == hf.PP_RAISES for f in hf.setters(EAGLE3, registered_only=False))
    for release in RELEASES:
        assert hf.loses_captures_silently(EAGLE3, release)
        silent = {m for f in hf.setters(EAGLE3, release) if f.pp == hf.PP_SKIPS for m in f.models}
        assert {"LlamaForCausalLM", "Qwen3ForCausalLM"} <= silent


def test_beam_dflash_raises_value_error_under_pp():
    beam = hf.pp_raises(DFLASH, exc_type="ValueError")
    assert [(f.release, f.setter) for f in beam] == [("0.5.23", "beam.py::BeamForCausalLM")]
    assert beam[0].pp_raise.message == "Beam DFlash capture currently requires PP=1"
    assert hf.may_raise_not_implemented(DFLASH, "0.5.23")  # qwen3_5_text, as before


def test_eagle3_none_means_default_layers_and_is_never_rejected():
    assert hf.none_meaning(EAGLE3) == hf.NONE_DEFAULT
    assert not hf.rejects_none(EAGLE3)
    assert hf.none_messages(EAGLE3) == ()
    for release in RELEASES:
        assert hf.none_meaning(EAGLE3, release) == hf.NONE_DEFAULT


def test_dspark_and_dflash_reject_none():
    for hook in (DSPARK, DFLASH):
        assert hf.rejects_none(hook)
        assert hf.none_meaning(hook) == hf.NONE_REJECTED
    assert "DFLASH requires explicit layer_ids for aux hidden capture." in hf.none_messages(DFLASH)
    assert "DSPARK requires explicit layer_ids for aux hidden capture." in hf.none_messages(DSPARK)


def test_dspark_silent_loss_and_registered_only_filter():
    assert hf.loses_captures_silently(DSPARK)  # DeepseekV4 returns early on non-last ranks
    everything = hf.setters(DSPARK, "0.5.18", registered_only=False)
    registered = hf.setters(DSPARK, "0.5.18")
    assert set(registered) < set(everything)
    assert all(f.registered for f in registered)
    assert any(not f.registered for f in everything)


def test_unknown_hook_and_release_are_clear_errors():
    with pytest.raises(hf.UnknownHook, match="set_foo_layers_to_capture"):
        hf.may_raise_not_implemented("set_foo_layers_to_capture")
    assert not hf.is_known("set_foo_layers_to_capture")
    with pytest.raises(ValueError, match=r"unknown SGLang release 0\.4\.0.*0\.5\.18"):
        hf.rejects_none(DFLASH, "0.4.0")


def _minimal(**variant) -> dict:
    facts = {"releases": ["1.0"], "models": ["M"], "pp": "runs", "none": "unchecked"}
    facts.update(variant)
    return {
        "format": 1,
        "releases": ["1.0"],
        "hooks": {"set_x_layers_to_capture": {"m.py::M": [facts]}},
    }


def test_none_meaning_rules_on_small_data():
    def meaning(*nones):
        data = {
            "format": 1,
            "releases": ["1.0"],
            "hooks": {
                "set_x_layers_to_capture": {
                    f"m.py::M{i}": [
                        {"releases": ["1.0"], "models": [f"M{i}"], "pp": "runs", "none": n}
                    ]
                    for i, n in enumerate(nones)
                }
            },
        }
        return hf.HookFacts(data).none_meaning("set_x_layers_to_capture")

    assert meaning("default_layers", "unresolved") == "default_layers"
    assert meaning("rejected", "unchecked") == "rejected"
    assert meaning("unchecked") == "unchecked"
    assert meaning("default_layers", "rejected") == "mixed"
    assert meaning("default_layers", "ignored") == "mixed"
    assert meaning("unresolved") == "unresolved"


def test_malformed_data_names_the_file(tmp_path):
    bad = tmp_path / "facts.json"
    bad.write_text("{not json")
    with pytest.raises(hf.HookFactsError, match=r"facts\.json: not valid JSON"):
        hf.HookFacts.from_file(bad)
    bad.write_text(json.dumps(_minimal(pp="sometimes")))
    with pytest.raises(hf.HookFactsError, match=r"facts\.json: set_x.*pp='sometimes'"):
        hf.HookFacts.from_file(bad)
    bad.write_text(json.dumps(_minimal(releases=["2.0"])))
    with pytest.raises(hf.HookFactsError, match="release '2.0' not listed"):
        hf.HookFacts.from_file(bad)
    with pytest.raises(hf.HookFactsError, match="missing.json: cannot read"):
        hf.HookFacts.from_file(tmp_path / "missing.json")


def test_data_file_is_canonical_and_shipped():
    text = hf.DATA_FILE.read_text(encoding="utf-8")
    assert derive.dumps(json.loads(text)) == text
    data = json.loads(text)
    for release in RELEASES:  # every setter has at most one variant per release
        view = release_view(data, release)
        count = sum(
            len([v for v in vs if release in v["releases"]])
            for setters in data["hooks"].values()
            for vs in setters.values()
        )
        assert count == sum(len(s) for s in view.values())
    pyproject = (PROJECT_ROOT / "pyproject.toml").read_text()
    line = re.search(r'^"codemods.catalog" = \[(.*)\]$', pyproject, re.MULTILINE)
    assert line is not None and '"hook_facts.json"' in line.group(1)


def test_loader_is_torch_free():
    code = (
        "import sys, codemods.catalog.hook_facts as h; h.load(); "
        "assert 'torch' not in sys.modules and 'libcst' not in sys.modules"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_documented_examples_hold():
    doc = (PROJECT_ROOT / "docs" / "hook-facts.md").read_text(encoding="utf-8")
    block = doc.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    checked = 0
    for line in block.splitlines():
        code, sep, comment = line.partition("  # ")
        if not sep:
            exec(code, namespace)  # the import line
            continue
        assert eval(code, namespace) == ast.literal_eval(comment.strip()), line
        checked += 1
    assert checked >= 8
