"""Recognise the shapes of SGLang model code that drop aux captures under PP.

Read-only analysis of one parsed model file.  Two shapes matter:

* a **capture hook** (``set_<x>_layers_to_capture``) on the causal-LM class that starts
  with ``if not <pp group>.is_last_rank: return`` and then stores the capture ids on a
  submodule (``self.model.layers_to_capture = ...`` or
  ``self.model.set_<x>_layers_to_capture(...)``);
* a **decoder-stack forward** that collects ``aux_hidden_states`` at the start of layer
  ``i`` for ``i in self.layers_to_capture`` (appended in the loop, or handed to the layer
  as ``captured_last_layer_outputs``) and returns ``PPProxyTensors({...})`` on non-last
  ranks.

Each finding carries the reason when a shape is not recognised, so reports can say why
a file was left alone.  This module walks the classes of a module and records what it finds;
the hook's shape is :mod:`codemods.upstream.family.setter`'s, the forward's
:mod:`codemods.upstream.family.registry`'s (one module per shape), and what they share
:mod:`codemods.upstream.family.syntax`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from codemods.catalog.hooks import HOOK_NAME_PATTERN
from codemods.upstream.edit.walk import findall
from codemods.upstream.family import registry
from codemods.upstream.family.forward import ForwardShape
from codemods.upstream.family.setter import SetterShape, _setter_shape
from codemods.upstream.family.syntax import (
    CAPTURE_FLAG,
    IDS_ATTR,
    LAYER_FLAG,
    SELF_IDS,
    _methods,
    attribute_of,
    code_of,
    name_value,
    node_ids,
    only_assign,
)


@dataclass(frozen=True)
class ClassInfo:
    name: str
    bases: tuple[str, ...]
    has_forward: bool
    methods: tuple[str, ...] = ()
    #: ``attr -> class name`` for ``self.attr = ClassName(...)`` in ``__init__`` (or a
    #: ``self.attr = self._init_model(...)`` helper returning ``ClassName(...)``).
    submodules: dict[str, str] = field(default_factory=dict)
    #: Source of an ``assert`` in ``__init__`` that refuses pipeline parallelism.
    pp_assert: str | None = None


@dataclass(frozen=True)
class ModuleShapes:
    setters: tuple[SetterShape, ...]
    forwards: tuple[ForwardShape, ...]
    classes: dict[str, ClassInfo]
    #: ``local name -> (module, name)`` for ``from sglang.srt.models.X import Name``.
    imports: dict[str, tuple[str, str]]


def analyse(module: cst.Module, source: str | None = None) -> ModuleShapes:
    """Find the capture hooks, capture forwards and class wiring of one module; ``source``:
    its text, when at hand (else it is generated from ``module``)."""
    positions = _LineFinder(module.code if source is None else source)
    setters: list[SetterShape] = []
    forwards: list[ForwardShape] = []
    classes: dict[str, ClassInfo] = {}
    for statement in module.body:
        if isinstance(statement, cst.ClassDef):
            info, class_setters, forward = _analyse_class(statement, positions)
            classes[info.name] = info
            setters.extend(class_setters)
            if forward is not None:
                forwards.append(forward)
    return ModuleShapes(tuple(setters), tuple(forwards), classes, _model_imports(module))


class _LineFinder:
    """Line numbers of top-level classes and their methods, from the module text, read in
    one pass.

    Cheaper than LibCST position metadata on multi-thousand-line model files.
    """

    def __init__(self, source: str) -> None:
        lines = source.splitlines()
        #: class name -> its text (the first class of that name): from its ``class`` line
        #: to the next ``class`` line or unindented code line (comments, decorators and
        #: closing brackets at column 0 do not end it).
        self._texts: dict[str, str] = {}
        #: (class name, method) -> line of the last ``def method(`` under such a class line
        self._defs: dict[tuple[str, str], int] = {}
        start: int | None = None
        name: str | None = None  # of the last ``class`` line
        for number, text in enumerate(lines):
            if text.startswith("class "):
                if start is not None and name is not None:
                    self._texts.setdefault(name, "\n".join(lines[start:number]))
                name, start = _class_name(text), number
            elif start is not None and text and not text[0].isspace():
                if not text.startswith((")", "#", "@")):
                    if name is not None:
                        self._texts.setdefault(name, "\n".join(lines[start:number]))
                    start = None
            if name is not None and text.lstrip().startswith("def "):
                method = text.lstrip()[4:].partition("(")
                if method[1]:
                    self._defs[(name, method[0])] = number + 1
        if start is not None and name is not None:
            self._texts.setdefault(name, "\n".join(lines[start:]))

    def class_text(self, class_name: str) -> str:
        return self._texts.get(class_name, "")

    def line_of(self, class_name: str, method: str) -> int:
        """Line of the last ``def method`` in the class (the one Python keeps)."""
        return self._defs.get((class_name, method), 0)


def _class_name(line: str) -> str | None:
    """``Name`` of a ``class Name(...)`` / ``class Name:`` line."""
    head = line[6:]
    cut = min((k for k in (head.find("("), head.find(":")) if k >= 0), default=-1)
    return head[:cut] if cut > 0 else None


def _model_imports(module: cst.Module) -> dict[str, tuple[str, str]]:
    imports: dict[str, tuple[str, str]] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine) or not m.matches(
            statement, m.SimpleStatementLine(body=[m.ImportFrom()])
        ):
            continue
        node = statement.body[0]
        assert isinstance(node, cst.ImportFrom)
        if node.module is None or isinstance(node.names, cst.ImportStar):
            continue
        source = code_of(node.module)
        for alias in node.names:
            name = code_of(alias.name)
            local = code_of(alias.asname.name) if alias.asname else name
            imports[local] = (source, name)
    return imports


def _analyse_class(cls: cst.ClassDef, positions) -> tuple[ClassInfo, list, ForwardShape | None]:
    methods = _methods(cls)
    bases = tuple(code_of(arg.value) for arg in cls.bases)
    relevant = any(word in positions.class_text(cls.name.value) for word in (IDS_ATTR, LAYER_FLAG))
    info = ClassInfo(
        name=cls.name.value,
        bases=bases,
        has_forward="forward" in methods,
        methods=tuple(methods),
        submodules=_submodules(cls, methods) if relevant else {},
        pp_assert=_pp_assert(methods.get("__init__")) if relevant else None,
    )
    if not relevant:
        return info, [], None
    setters = [
        _setter_shape(cls.name.value, fn, positions.line_of(cls.name.value, name))
        for name, fn in methods.items()
        if HOOK_NAME_PATTERN.match(name)
    ]
    forward = None
    if "forward" in methods and _mentions_capture(methods["forward"]):
        fn = methods["forward"]
        forward = registry.analyse_forward(
            cls.name.value, fn, positions.line_of(cls.name.value, "forward")
        )
    return info, setters, forward


def _submodules(cls: cst.ClassDef, methods: dict[str, cst.FunctionDef]) -> dict[str, str]:
    """``attr -> class`` for ``self.attr = X(...)`` in ``__init__``; ``X`` may be a class
    name, ``module.Class``, a ``self._factory(...)`` returning one, a class attribute
    (``body_cls = module.Class``) or an ``__init__`` parameter with a class default."""
    submodules: dict[str, str] = {}
    init = methods.get("__init__")
    if init is None:
        return submodules

    def factory(name: str) -> str | None:
        """What ``self.<name>(...)`` returns: ``return X(...)`` (the last such) in a method
        of the class."""
        found = None
        if name in methods and name != "__init__":
            for ret in findall(methods[name], m.Return(value=m.Call(func=m.Name()))):
                assert isinstance(ret.value, cst.Call)
                found = name_value(ret.value.func)
        return found

    class_attributes: dict[str, str] = {}
    for statement in cls.body.body:
        if m.matches(
            statement,
            m.SimpleStatementLine(
                body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Name() | m.Attribute())]
            ),
        ):
            assign = only_assign(statement)
            class_attributes[name_value(assign.targets[0].target)] = code_of(assign.value)
    defaults = {
        param.name.value: code_of(param.default)
        for param in (*init.params.params, *init.params.kwonly_params)
        if param.default is not None and m.matches(param.default, m.Name() | m.Attribute())
    }
    pattern = m.Assign(
        targets=[m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name()))],
        value=m.Call(),
    )
    for assign in findall(init, pattern):
        attr = attribute_of(assign.targets[0].target).attr.value
        assert isinstance(assign.value, cst.Call)
        func = assign.value.func
        target = None
        if isinstance(func, cst.Name):
            target = defaults.get(func.value, func.value)
        elif isinstance(func, cst.Attribute) and m.matches(func, m.Attribute(value=m.Name("self"))):
            name = func.attr.value
            target = factory(name) or class_attributes.get(name)
        elif m.matches(func, m.Attribute(value=m.Name(), attr=m.Name())):
            target = code_of(func)
        if target is not None:
            submodules.setdefault(attr, target)
    return submodules


#: Assert conditions that only hold with one PP stage.
_SINGLE_STAGE = re.compile(
    r"\b(pp_size|world_size)\s*==\s*1\b|is_first_rank\s+and\s+.*\bis_last_rank\b"
)


def _pp_assert(init: cst.FunctionDef | None) -> str | None:
    """``assert <one PP stage>`` in a constructor: the model refuses PP outright."""
    if init is None:
        return None
    for node in findall(init, m.Assert()):
        test = " ".join(code_of(node.test).split())
        if _SINGLE_STAGE.search(test):
            return f"assert {test}"
    return None


def _mentions_capture(fn: cst.FunctionDef) -> bool:
    return bool(
        findall(fn, SELF_IDS)
        or findall(fn, m.SimpleString(value=f'"{LAYER_FLAG}"'))
        or findall(fn, m.Attribute(attr=m.Name(LAYER_FLAG)))
    )


def stack_unpacks(cls: cst.ClassDef, receiver: str) -> list[cst.SimpleStatementLine]:
    """The ``a, b = <receiver>(...)`` statements (or ``a, b = f(..., language_model=
    <receiver>)``) of the class's ``forward`` that run even when capture is off and
    before any rank check: on non-last PP ranks the stack returns ``PPProxyTensors``,
    which cannot be unpacked, so such a forward does not run under PP at all."""
    forward = _methods(cls).get("forward")
    return [] if forward is None else forward_stack_unpacks(forward, receiver)


def forward_stack_unpacks(forward: cst.FunctionDef, receiver: str) -> list:
    """:func:`stack_unpacks` of one ``forward``."""
    guarded: set[int] = set()
    for branch in findall(forward, m.If()):
        test = code_of(branch.test)
        if CAPTURE_FLAG in test or "is_last_rank" in test:
            guarded |= node_ids(branch.body)
    pattern = m.SimpleStatementLine(
        body=[m.Assign(targets=[m.AssignTarget(target=m.Tuple())], value=m.Call())]
    )
    found = []
    for statement in findall(forward, pattern):
        call = only_assign(statement).value
        assert isinstance(call, cst.Call)
        language_model = any(
            arg.keyword is not None
            and arg.keyword.value == "language_model"
            and code_of(arg.value) == receiver
            for arg in call.args
        )
        if (code_of(call.func) == receiver or language_model) and id(statement) not in guarded:
            found.append(statement)
    return found


def unpacks_stack_output(cls: cst.ClassDef, receiver: str) -> str | None:
    """Source of the first of :func:`stack_unpacks`, shortened, or ``None``."""
    found = stack_unpacks(cls, receiver)
    if not found:
        return None
    assign = only_assign(found[0])
    assert isinstance(assign.value, cst.Call)
    return f"{code_of(assign.targets[0].target)} = {code_of(assign.value.func)}(...)"
