"""The survey's line finder: class texts and ``def`` lines read from the module text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codemods.upstream.family.survey import _LineFinder

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"

SOURCE = """\
import torch


class Stack(nn.Module):
    layers_to_capture = []

    def forward(self, x):
        return x
# a comment at column 0 stays in the class
    @property
    def forward(self):  # the last definition is the one Python keeps
        return (
            1
)


def helper():
    def forward(x):  # still read as Stack's: no class line since
        return x


X = 1


class Model:
    def set_eagle3_layers_to_capture(self, ids):
        pass

class Stack(Other):
    def forward(self):
        pass
"""


def test_class_text_runs_to_the_next_class_or_unindented_code():
    lines = _LineFinder(SOURCE)
    text = lines.class_text("Stack")
    assert text.startswith("class Stack(nn.Module):") and text.endswith("            1\n)\n\n")
    assert "# a comment at column 0" in text and "def helper" not in text
    assert lines.class_text("Model").splitlines() == [
        "class Model:",
        "    def set_eagle3_layers_to_capture(self, ids):",
        "        pass",
    ]
    assert lines.class_text("Missing") == ""
    assert lines.class_text("Stack(nn.Module)") == ""


def test_line_of_is_the_last_def_under_a_class_line_of_that_name():
    lines = _LineFinder(SOURCE)
    numbered = SOURCE.splitlines()
    assert numbered[lines.line_of("Stack", "forward") - 1] == "    def forward(self):"
    assert lines.line_of("Stack", "forward") == len(numbered) - 1
    assert (
        numbered[lines.line_of("Model", "set_eagle3_layers_to_capture") - 1]
        .strip()
        .startswith("def set_eagle3")
    )
    assert lines.line_of("Model", "forward") == 0
    assert lines.line_of("Missing", "forward") == 0


def _class_text_by_scan(lines: list[str], class_name: str) -> str:
    """The same question answered by scanning the lines for it alone."""
    start = None
    for number, text in enumerate(lines):
        if text.startswith("class "):
            if start is not None:
                return "\n".join(lines[start:number])
            if text[6:].startswith((class_name + "(", class_name + ":")):
                start = number
        elif start is not None and text and not text[0].isspace() and text[0] not in ")#@":
            return "\n".join(lines[start:number])
    return "\n".join(lines[start:]) if start is not None else ""


def _line_of_by_scan(lines: list[str], class_name: str, method: str) -> int:
    in_class, found = False, 0
    for number, text in enumerate(lines, start=1):
        if text.startswith("class "):
            in_class = text[6:].startswith((class_name + "(", class_name + ":"))
        elif in_class and text.lstrip().startswith(f"def {method}("):
            found = number
    return found


@pytest.mark.parametrize(
    "path", [None, *sorted((FIXTURES / "upstream").rglob("*.py"))[:60]], ids=str
)
def test_one_pass_answers_as_scanning_per_question(path):
    source = SOURCE if path is None else path.read_text(encoding="utf-8")
    lines = source.splitlines()
    finder = _LineFinder(source)
    classes = set(re.findall(r"^class (\w+)", source, re.M)) | {"Missing"}
    methods = set(re.findall(r"def (\w+)\(", source)) | {"missing"}
    for name in classes:
        assert finder.class_text(name) == _class_text_by_scan(lines, name), name
        for method in methods:
            assert finder.line_of(name, method) == _line_of_by_scan(lines, name, method)
