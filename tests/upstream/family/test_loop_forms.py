"""The loop-form table (``family/loops/forms.py``) against its fixtures
(``fixtures/upstream/loop_forms/``, one per form, named after it): each form matches its
own fixture's layer loop and no other form does, finds the layer index the fixture names,
shows its fixture's loop as its example, and says whether the loop runs exactly the
stage's layers.  A form added without a fixture, or a fixture without a form, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest

from codemods.upstream.edit.walk import findall
from codemods.upstream.family.loops import forms as loop_forms
from codemods.upstream.family.loops.forms import (
    ENUMERATED_SLICE,
    FORMS,
    STAGE_RANGES,
    LoopSite,
    form_of,
    layer_index,
    stage_loop_problem,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "upstream" / "loop_forms"
BY_NAME = {form.name: form for form in FORMS}
#: The forms whose loops run exactly the stage's layers by their global index.
STAGE_FORMS = {*STAGE_RANGES, ENUMERATED_SLICE}


def _fixture(name: str) -> Path:
    return FIXTURES / f"{name.replace('-', '_')}.py"


def _loop_site(source: str) -> LoopSite:
    """The first top-level loop of the fixture's one ``forward``."""
    (fn,) = findall(cst.parse_module(source), m.FunctionDef(name=m.Name("forward")))
    body = list(fn.body.body)
    index = next(k for k, statement in enumerate(body) if isinstance(statement, cst.For))
    loop = body[index]
    assert isinstance(loop, cst.For)
    return LoopSite(body, index, loop)


def _stripped_lines(text: str) -> list[str]:
    """The code lines of ``text``, stripped (comments and blank lines left out)."""
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_every_form_has_a_fixture_and_every_fixture_a_form():
    named = {_fixture(form.name).name for form in FORMS}
    assert len(named) == len(FORMS)
    assert named == {path.name for path in FIXTURES.glob("*.py")}


def test_the_table_is_every_form_the_module_defines():
    defined = [v for v in vars(loop_forms).values() if isinstance(v, loop_forms.LoopForm)]
    assert set(defined) == set(FORMS)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_form_matches_its_fixture_alone(name):
    site = _loop_site(_fixture(name).read_text())
    matching = [form.name for form in FORMS if m.matches(site.loop, form.head)]
    assert matching == [name]
    assert form_of(site.loop) is BY_NAME[name]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_form_finds_the_layer_index_the_fixture_names(name):
    source = _fixture(name).read_text()
    (expected,) = re.findall(r"# layer index: (\w+)", source)
    site = _loop_site(source)
    assert BY_NAME[name].index(site.loop) == expected
    assert layer_index(site.loop) == expected


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_example_is_the_fixture_loop(name):
    """The example in the table is the fixture's text, line for line."""
    fixture = _stripped_lines(_fixture(name).read_text())
    example = _stripped_lines(BY_NAME[name].example)
    starts = [k for k, line in enumerate(fixture) if line == example[0]]
    assert any(fixture[k : k + len(example)] == example for k in starts), example


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_stage_forms_run_the_stage_layers_and_the_others_do_not(name):
    form = BY_NAME[name]
    site = _loop_site(_fixture(name).read_text())
    problem = form.problem(site)
    if form in STAGE_FORMS:
        assert problem is None
        assert stage_loop_problem(site, STAGE_FORMS) is None
    else:
        assert problem is not None
        assert stage_loop_problem(site, STAGE_FORMS) is not None


def test_offset_missing_leaves_no_layer_index():
    """An enumerated loop whose first statement does not offset the index to the global
    layer id has no layer index, and the layer-entry shapes say so."""
    source = _fixture(ENUMERATED_SLICE.name).read_text()
    offset = "layer_idx = layer_idx + self.start_layer\n"
    assert source.count(offset) == 1
    source = source.replace(offset, "layer_idx = layer_idx + 1\n")
    site = _loop_site(source)
    assert form_of(site.loop) is ENUMERATED_SLICE
    assert layer_index(site.loop) is None
    assert stage_loop_problem(site, STAGE_FORMS) == (
        "the loop does not start with `layer_idx = layer_idx + self.start_layer`"
    )


def test_a_loop_of_no_form():
    head = "for i in range(self.start_layer, self.end_layer):"
    source = _fixture("stage-range").read_text()
    assert source.count(head) == 1
    source = source.replace(head, "for i in self.layers:")
    site = _loop_site(source)
    assert form_of(site.loop) is None
    assert layer_index(site.loop) is None
    assert stage_loop_problem(site, STAGE_FORMS, " nor X") == (
        "the capturing loop is not `for i in range(self.start_layer, self.end_layer)` "
        "nor X (the loop does not run over `range(<start>, <end>)`)"
    )


def test_a_form_left_out_of_the_accepted_is_refused():
    """The callback-free layer-entry shapes take the stage ranges only."""
    site = _loop_site(_fixture(ENUMERATED_SLICE.name).read_text())
    assert stage_loop_problem(site) == "the capturing loop does not bind one loop variable"
