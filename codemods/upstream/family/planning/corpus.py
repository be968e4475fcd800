"""The model files the family planner reads, parsed on demand, and what it asks of them
across files: which forward of a decoder-stack class (or of a base, possibly in another
model file) captures, whether a class or a base defines a method, a top-level class's node.

Parsing is the cost of planning: :class:`Corpus` parses a file the first time a decision
needs it and keeps its tree and its survey (:func:`~codemods.upstream.family.survey.analyse`).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.delegated import delegated_forwards
from codemods.upstream.family.forward import ForwardShape
from codemods.upstream.family.setter import SetterShape
from codemods.upstream.family.survey import ModuleShapes, analyse
from codemods.upstream.family.syntax import class_node, code_of

MODELS_PACKAGE = "sglang.srt.models"


class Corpus:
    """Parsed model files, loaded on demand (parsing is the expensive part)."""

    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir
        self.modules: dict[str, cst.Module] = {}
        self.shapes: dict[str, ModuleShapes] = {}

        self.errors: dict[str, str] = {}

    def get(self, file: str) -> ModuleShapes | None:
        if file not in self.shapes:
            path = self.models_dir / file
            if file in self.errors or not path.is_file():
                return None
            data = path.read_bytes()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            try:
                # Shared with the Kimi rewriters within one generate run.
                module = cst.parse_module(data) if text is None else parse_text(text)
            except cst.ParserSyntaxError as error:
                self.errors[file] = f"cannot parse: line {error.raw_line}: {error.message}"
                return None
            self.modules[file] = module
            shapes = analyse(module, module.code if text is None else text)
            self.shapes[file] = delegated_forwards(module, shapes)
        return self.shapes[file]


def find_forward(
    file: str, class_name: str, corpus: Corpus, depth: int
) -> tuple[str, ForwardShape] | str:
    if depth > 6:
        return f"{class_name}: base classes nest too deeply"
    shapes = corpus.get(file)
    if shapes is None:
        return f"{file} not found"
    if "." in class_name:
        # ``module.Class`` with ``from sglang.srt.models import module``
        alias, name = class_name.rsplit(".", 1)
        source = shapes.imports.get(alias)
        if source is None or source[0] != MODELS_PACKAGE:
            return f"`{class_name}` is not a class of a model file"
        return find_forward(source[1] + ".py", name, corpus, depth + 1)
    info = shapes.classes.get(class_name)
    if info is None:
        source = shapes.imports.get(class_name)
        if source is None or not source[0].startswith(MODELS_PACKAGE + "."):
            return f"`{class_name}` is not defined in a model file"
        return find_forward(source[0].rsplit(".", 1)[1] + ".py", source[1], corpus, depth + 1)
    for forward in shapes.forwards:
        if forward.class_name == class_name:
            return file, forward
    if info.has_forward:
        return f"{file}:{class_name}.forward does not read the capture ids"
    for base in info.bases:
        found = find_forward(file, base.split(".")[-1], corpus, depth + 1)
        if not isinstance(found, str):
            return found
    return f"{file}:{class_name} has no forward that captures"


def defines(file: str, class_name: str, method: str, corpus: Corpus, depth: int) -> bool:
    """Whether ``class_name`` (as named in ``file``) or a base defines ``method``.

    Classes outside the model files (e.g. ``nn.Module``) are taken not to."""
    if depth > 6:
        return False
    shapes = corpus.get(file)
    if shapes is None:
        return False
    if "." in class_name:
        alias, name = class_name.rsplit(".", 1)
        source = shapes.imports.get(alias)
        if source is None or source[0] != MODELS_PACKAGE:
            return False
        return defines(source[1] + ".py", name, method, corpus, depth + 1)
    info = shapes.classes.get(class_name)
    if info is None:
        source = shapes.imports.get(class_name)
        if source is None or not source[0].startswith(MODELS_PACKAGE + "."):
            return False
        return defines(source[0].rsplit(".", 1)[1] + ".py", source[1], method, corpus, depth + 1)
    if method in info.methods:
        return True
    return any(
        defines(file, base.split(".")[-1] if "." not in base else base, method, corpus, depth + 1)
        for base in info.bases
    )


def asks_hasattr(module: cst.Module, setter: SetterShape, method: str) -> bool:
    """The hook tests ``hasattr(<receiver>, "<method>")`` before calling it."""
    outer = class_node(module, setter.class_name)
    if outer is None:
        return False
    hooks = [
        s for s in outer.body.body if isinstance(s, cst.FunctionDef) and s.name.value == setter.hook
    ]
    test = m.Call(
        func=m.Name("hasattr"),
        args=[m.Arg(), m.Arg(m.SimpleString(f'"{method}"') | m.SimpleString(f"'{method}'"))],
    )
    return bool(hooks) and any(
        code_of(call.args[0].value) == setter.receiver for call in findall(hooks[-1], test)
    )
