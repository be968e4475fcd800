"""Causal-LM classes that inherit a patched class's capture hooks but build a decoder stack
of their own (``Qwen3VLMoeForConditionalGeneration(Qwen3VLForConditionalGeneration)``).

The relay opt-in (``pp_aux_relay_methods``) covers the class that declares it, and a
subclass only while it keeps that class's ``__init__``, ``forward`` and hooks (the rule of
the shipped ``relays_pp_aux_capture``).  A subclass whose ``__init__`` builds another stack
inherits the rewritten hooks, but its stack's forward is not the one the patch rewrote::

    class Qwen3VLMoeForConditionalGeneration(Qwen3VLForConditionalGeneration):
        def __init__(self, config, quant_config=None, prefix="",
                     language_model_cls=Qwen3MoeLLMModel):
            super().__init__(config, quant_config, prefix, language_model_cls)

The planner (``plan.py``) patches such a stack where its forward is one the family
rewrites, and gives the subclass its own declaration naming the methods whose hooks then
relay; otherwise the subclass declares nothing (validation and the runtime guard refuse aux
capture under PP for it) and the report says why.  This module finds them: which model
files to read (:func:`subclass_files`: a file without hooks of its own that subclasses a
patched class and mentions the capture ids), which class a subclass's stack is
(:func:`own_stack`), and, for the report, a forward that returns without the captures
(:func:`returns_without`).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall
from codemods.upstream.family import registry
from codemods.upstream.family.planning.corpus import (
    MODELS_PACKAGE,
    Corpus,
    asks_hasattr,
    class_node,
    defines,
    find_forward,
)
from codemods.upstream.family.planning.decision import FileDecision, ForwardRef
from codemods.upstream.family.proxy_width import relay_methods
from codemods.upstream.family.survey import ClassInfo, ModuleShapes
from codemods.upstream.family.syntax import IDS_ATTR, LAYER_FLAG, _methods, code_of, name_value


class FamilyPlan(Protocol):
    """What the subclass decisions read and add to of the planner's ``FamilyPlan``."""

    decisions: dict[str, FileDecision]
    setter_edits: dict[str, list]
    forward_edits: dict[str, list]
    relay_declarations: dict[str, list[tuple[str, tuple[str, ...]]]]


#: Text a file with a decoder stack that captures contains.
_CAPTURE_TEXT = (IDS_ATTR.encode(), LAYER_FLAG.encode())


def subclass_files(models_dir: Path, bases: Collection[str], skip: Collection[str]) -> list[str]:
    """Model files (not in ``skip``) with a class whose first base is one of ``bases``
    (class names, bare or ``module.Name``) that mention the capture ids or flag."""
    if not bases:
        return []
    names = b"|".join(re.escape(name.encode()) for name in sorted(bases))
    head = re.compile(rb"^class\s+\w+\s*\(\s*(?:\w+\.)?(?:" + names + rb")\s*[,)]", re.M)
    found = []
    for path in sorted(models_dir.glob("*.py")):
        if path.name in skip:
            continue
        data = path.read_bytes()
        if head.search(data) and any(text in data for text in _CAPTURE_TEXT):
            found.append(path.name)
    return found


def _init_params(init: cst.FunctionDef) -> dict[str, str | None]:
    """Parameter name -> source of its default (``None``: no default)."""
    params = (*init.params.params, *init.params.kwonly_params)
    return {p.name.value: code_of(p.default) if p.default is not None else None for p in params}


def _built_from(base_init: cst.FunctionDef, attr: str) -> tuple[str | None, str | None]:
    """(the ``__init__`` parameter, the ``self.<factory>`` method) the base builds
    ``self.<attr>`` from: ``self.<attr> = <param>(...)`` / ``self.<factory>(...)``."""
    pattern = m.Assign(
        targets=[m.AssignTarget(m.Attribute(value=m.Name("self"), attr=m.Name(attr)))],
        value=m.Call(),
    )
    params = _init_params(base_init)
    for assign in findall(base_init, pattern):
        assert isinstance(assign.value, cst.Call)
        func = assign.value.func
        if isinstance(func, cst.Name) and func.value in params:
            return func.value, None
        if m.matches(func, m.Attribute(value=m.Name("self"), attr=m.Name())):
            assert isinstance(func, cst.Attribute)
            return None, func.attr.value
    return None, None


def own_stack(sub: cst.ClassDef, base: cst.ClassDef, attr: str) -> str | None:
    """The decoder-stack class ``sub`` builds for ``self.<attr>`` where it is not the base's:
    the default of the ``__init__`` parameter the base builds it from (or the value ``sub``
    passes for it by keyword to ``super().__init__``), or what ``sub``'s override of the
    base's factory method returns; ``None`` when ``sub`` builds the base's stack."""
    sub_methods, base_methods = _methods(sub), _methods(base)
    base_init = base_methods.get("__init__")
    if base_init is None:
        return None
    param, factory = _built_from(base_init, attr)
    if factory is not None and factory in sub_methods:
        returns = findall(sub_methods[factory], m.Return(value=m.Call(func=m.Name())))
        if returns:
            value = returns[-1].value
            assert isinstance(value, cst.Call)
            return name_value(value.func)
        return None
    init = sub_methods.get("__init__")
    if param is None or init is None:
        return None
    default = _init_params(init).get(param)
    if default is not None:
        return default
    for call in findall(init, m.Call(func=m.Attribute(attr=m.Name("__init__")))):
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == param:
                return code_of(arg.value)
    return None


def returns_without(fn: cst.FunctionDef, aux_name: str) -> str | None:
    """Source of a ``return a, b`` of ``fn`` that leaves ``aux_name`` out while another
    return hands it on: the forward drops the captures on some batches."""
    tuples = [r for r in findall(fn, m.Return(value=m.Tuple())) if r.value is not None]
    names = [{code_of(e.value) for e in r.value.elements} for r in tuples]  # type: ignore[union-attr]
    if not any(aux_name in found for found in names):
        return None
    for ret, found in zip(tuples, names, strict=True):
        if aux_name not in found:
            assert ret.value is not None
            return f"return {code_of(ret.value)}"
    return None


def plan_subclasses(corpus: Corpus, plan: FamilyPlan, only: list[str] | None) -> None:
    """Decide for the causal-LM classes that inherit a patched class's hooks and build a
    decoder stack of their own, one per model file without hooks (``only``: file stems)."""
    bases = {
        outer: decision
        for decision in plan.decisions.values()
        if decision.patched and decision.inherits is None
        for outer, _stack, _hooks in decision.cases
    }
    wanted = None if only is None else {name.removesuffix(".py") for name in only}
    for file in subclass_files(corpus.models_dir, bases, plan.decisions):
        if wanted is not None and file.removesuffix(".py") not in wanted:
            continue
        shapes = corpus.get(file)
        if shapes is None:
            continue
        for info in shapes.classes.values():
            base = _patched_base(info.bases[:1], shapes, bases)
            decision = _decide(file, info, base, corpus, plan) if base else None
            if decision is not None:
                plan.decisions[file] = decision
                break


def _patched_base(
    bases: tuple[str, ...], shapes: ModuleShapes, patched: dict[str, FileDecision]
) -> tuple[FileDecision, str] | None:
    """(decision, class) of the patched causal-LM class ``bases`` names, imported from its
    model file (``Name`` or ``module.Name``)."""
    for base in bases:
        alias, _, name = base.rpartition(".")
        source = shapes.imports.get(alias or name)
        if source is None or name not in patched:
            continue
        if alias:
            file = f"{source[1]}.py" if source[0] == MODELS_PACKAGE else None
        else:
            module = source[0]
            file = f"{module.rsplit('.', 1)[1]}.py" if module.startswith(MODELS_PACKAGE) else None
        if file == patched[name].file:
            return patched[name], name
    return None


def _decide(
    file: str, info: ClassInfo, base: tuple[FileDecision, str], corpus: Corpus, plan: FamilyPlan
) -> FileDecision | None:
    """Patch the stack of ``info``'s class, which inherits ``base``'s hooks and builds its
    own stack, or say why it stays refused; ``None`` when it builds the base's stack or
    defines hooks of its own."""
    decision, outer = base
    hook_names = {hook for case in decision.cases for hook in case[2]}
    if hook_names & set(info.methods):
        return None
    setters = [s for s in plan.setter_edits.get(decision.file, []) if s.class_name == outer]
    sub = class_node(corpus.modules[file], info.name)
    parent = class_node(corpus.modules[decision.file], outer)
    receiver = setters[0].receiver if setters else None
    if sub is None or parent is None or receiver is None or decision.forward is None:
        return None
    stack = own_stack(sub, parent, receiver.split(".", 1)[1])
    if stack is None:
        return None
    inherits = f"{decision.file}:{outer}"
    head = f"{info.name} inherits the hooks of {inherits} but builds its stack from {stack}"

    def keep(why: str, forward: ForwardRef | None = None) -> FileDecision:
        reason = f"{head}: {why}; {NOT_DECLARED}"
        return FileDecision(file, (), (), False, reason, forward, inherits=inherits)

    found = find_forward(file, stack, corpus, depth=0)
    if isinstance(found, str):
        return keep(found + _dropping(file, stack, corpus))
    ref_file, forward = found
    ref = ForwardRef(ref_file, forward.class_name)
    if not forward.recognised:
        return keep(f"{ref}: {forward.problem}", ref)
    if "forward" in info.methods:
        return keep(f"{info.name} defines its own forward", ref)
    base_forward = next(
        f
        for f in plan.forward_edits.get(decision.forward.file, [])
        if f.class_name == decision.forward.class_name
    )
    if registry.setter_ids_attr(forward) != registry.setter_ids_attr(base_forward):
        return keep(f"{ref} keeps the capture ids where the inherited hooks do not", ref)
    module = corpus.modules[decision.file]
    relaying = tuple(
        s.hook
        for s in setters
        if all(
            defines(file, stack, call, corpus, depth=0) or asks_hasattr(module, s, call)
            for call in s.receiver_calls
        )
        and (s.receiver_calls or s.ids_attr == forward.ids_attr)
    )
    if not relaying:
        return keep(f"no inherited hook stores the ids where {ref} reads them", ref)
    edits = plan.forward_edits.setdefault(ref_file, [])
    if all(shape.class_name != forward.class_name for shape in edits):
        edits.append(forward)
    plan.relay_declarations[file] = [(info.name, relay_methods(relaying))]
    return FileDecision(
        file,
        (),
        (),
        True,
        "patched",
        ref,
        forward.capture_kinds,
        ((info.name, stack, relaying),),
        proxy_arg=forward.proxy_arg,
        final_capture=forward.final_capture,
        stale_comments=forward.stale_comments,
        inherits=inherits,
    )


#: The end of the reason of a subclass whose stack is not patched.
NOT_DECLARED = "it declares no relay, so aux capture under PP stays refused for it"


def _dropping(file: str, stack: str, corpus: Corpus) -> str:
    """`` (it calls <Base>.forward, which does `return a, b` ...)`` when a base of
    ``stack`` in ``file`` has a capture forward that returns without the captures on some
    batches; empty otherwise."""
    shapes = corpus.get(file)
    info = shapes.classes.get(stack) if shapes is not None else None
    if shapes is None or info is None:
        return ""
    for base in info.bases:
        node = class_node(corpus.modules[file], base)
        method = _methods(node).get("forward") if node is not None else None
        captured = [f for f in shapes.forwards if f.class_name == base]
        if method is None or not captured:
            continue
        dropped = returns_without(method, captured[0].aux_name or "aux_hidden_states")
        if dropped is not None:
            return (
                f" (it calls {base}.forward, which does `{dropped}` in place of the "
                "captures outside idle batches: aux capture is lost even with PP=1)"
            )
    return ""
