"""LibCST rewrites that make one model file keep its aux captures under PP.

Capture hook (``set_<x>_layers_to_capture`` on the causal-LM class), before::

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if not self.pp_group.is_last_rank:
            return

        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [val + 1 for val in layer_ids]

after (every rank stores the ids; ``set_pp_aux_capture`` prepares the stack's relay, with
the width of its hidden states from the config the class built it with
(:func:`~codemods.upstream.family.proxy_width.hook_width`); the flag that makes
``forward`` unpack ``(hidden_states, aux_hidden_states)`` is set on the last stage only,
the one stage whose stack returns them)::

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = self.pp_group.is_last_rank
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
        set_pp_aux_capture(
            self.model, self.pp_group, hidden_size=self.config.hidden_size
        )

The class also declares the capture methods it relays (``pp_aux_relay_methods``,
:mod:`~codemods.upstream.family.proxy_width`).

The decoder-stack forward is rewritten by its shape (``family/shapes/``, through
:mod:`~codemods.upstream.family.registry`); a forward with a gate gets the gate's
last-rank operand dropped (:mod:`~codemods.upstream.family.gate`).

Repairs some models need first live in :mod:`~codemods.upstream.family.repairs`.  Nothing
else in the file changes; inserted code is black (88) formatted and the import goes where
isort puts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import ATTACH, GLUE_MODULE
from codemods.upstream.edit.pyformat import (
    Call,
    lines_to_text,
    parse_statements,
    render_call,
)
from codemods.upstream.family import registry
from codemods.upstream.family.delegated import method_of
from codemods.upstream.family.forward import FamilyRewriteError, ForwardShape
from codemods.upstream.family.proxy_width import (
    WIDTH_KEYWORD,
    add_support_attribute,
    relay_methods,
)
from codemods.upstream.family.repairs import (
    StackSetter,
    StageOutputFix,
    add_stack_setters,
    fix_stage_unpacks,
)
from codemods.upstream.family.setter import SetterShape
from codemods.upstream.family.stage_output import (
    NamedStageOutputFix,
    fix_named_stage_output,
)
from codemods.upstream.family.syntax import IDS_ATTR, early_return_of, split_docstring

#: Indentation of a method body (black, 4 spaces).
METHOD_INDENT = 8

#: The flag that makes a causal LM unpack ``(hidden_states, aux_hidden_states)``; the
#: rewritten hook sets it on the last stage only (``= self.pp_group.is_last_rank``).
CAPTURE_FLAG = "capture_aux_hidden_states"


def rewrite_module(
    module: cst.Module,
    setters: list[SetterShape],
    forwards: list[ForwardShape],
    stack_setters: Sequence[StackSetter] = (),
    stage_fixes: Sequence[StageOutputFix] = (),
    dead_returns: Sequence[tuple[str, str]] = (),
    declarations: Sequence[tuple[str, tuple[str, ...]]] = (),
) -> cst.Module:
    """Rewrite the given hooks and forwards of ``module``, add the missing stack
    setters, fix the causal-LM forwards that unpack non-last stages' output and drop the
    early return of the ``(class, hook)`` pairs of ``dead_returns`` (hooks of a model that
    refuses PP in its constructor: nothing else changes in them) and declare the relay
    of the ``(class, methods)`` of ``declarations`` (subclasses whose inherited hooks
    relay through a stack of their own); everything else is kept."""
    ids_attrs = [
        attr for attr in (registry.setter_ids_attr(f) for f in forwards) if attr is not None
    ]
    if ids_attrs:
        # The relay reads the capture layers from the attribute the forward's shape names.
        setters = [replace(s, ids_attr=ids_attrs[0]) for s in setters]
    transformer = _FamilyTransformer(
        setters, forwards, stack_setters, stage_fixes, dead_returns, declarations
    )
    updated = module.visit(transformer)
    missing = transformer.expected - transformer.done
    if missing:
        raise FamilyRewriteError(f"did not find {', '.join(sorted(missing))}")
    names = []
    if setters:
        names.append(ATTACH)
    for forward in forwards:
        names.extend(registry.glue(forward))
    names = list(dict.fromkeys(names))
    return add_from_import(updated, GLUE_MODULE, names) if names else updated


#: The nodes that can contain statements (and so a class or a method to rewrite).
_HOLDS_STATEMENTS = (
    cst.Module,
    cst.IndentedBlock,
    cst.BaseCompoundStatement,
    cst.Else,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
    cst.MatchCase,
)


class _FamilyTransformer(cst.CSTTransformer):
    def __init__(
        self,
        setters: list[SetterShape],
        forwards: list[ForwardShape],
        stack_setters: Sequence[StackSetter] = (),
        stage_fixes: Sequence[StageOutputFix] = (),
        dead_returns: Sequence[tuple[str, str]] = (),
        declarations: Sequence[tuple[str, tuple[str, ...]]] = (),
    ) -> None:
        self.setters = {(s.class_name, s.hook): s for s in setters}
        self.dead_returns = set(dead_returns)
        self.declarations = dict(declarations)
        self.stage_fixes = {f.class_name: f for f in stage_fixes}
        self.forwards = {f.class_name: f for f in forwards}
        self.additions: dict[str, list[StackSetter]] = {}
        for addition in stack_setters:
            self.additions.setdefault(addition.class_name, []).append(addition)
        self.expected = (
            {f"{c}.{h}" for c, h in self.setters}
            | {f"{c}.forward" for c in self.forwards}
            | {f"{a.class_name}.{a.method}" for a in stack_setters}
            | {f"{f.class_name}.forward (stage output)" for f in stage_fixes}
            | {f"{c}.{h} (dead return)" for c, h in self.dead_returns}
            | {f"{c} (relay declaration)" for c in self.declarations}
        )
        self.done: set[str] = set()
        self._classes: list[str] = []
        self._effective: dict[str, cst.FunctionDef] = {}
        self._depth = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only what can hold statements is walked: every other node stays the object it
        # was, so the unchanged text is kept as it is (``module_code``).
        if not isinstance(node, _HOLDS_STATEMENTS):
            return False
        return super().on_visit(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._classes.append(node.name.value)
        # A name defined twice in a class body: the last definition is the method.
        self._effective = {
            statement.name.value: statement
            for statement in node.body.body
            if isinstance(statement, cst.FunctionDef)
        }
        return True

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._classes.pop()
        if not self._classes:
            # The attribute that tells server-arg validation the class relays its captures.
            mine = [h for (c, h) in self.setters if c == original.name.value]
            if mine:
                updated = add_support_attribute(updated, relay_methods(mine))
            declared = self.declarations.get(original.name.value)
            if declared is not None:
                self.done.add(f"{original.name.value} (relay declaration)")
                updated = add_support_attribute(updated, declared)
        additions = self.additions.get(original.name.value) if not self._classes else None
        if not additions:
            return updated
        self.done.update(f"{a.class_name}.{a.method}" for a in additions)
        return add_stack_setters(updated, additions)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._depth += 1
        return False  # nothing nested needs visiting

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef | cst.FlattenSentinel:
        self._depth -= 1
        if len(self._classes) != 1 or self._depth != 0:
            return updated
        if self._effective.get(original.name.value) is not original:
            return updated
        class_name = self._classes[0]
        setter = self.setters.get((class_name, original.name.value))
        if setter is not None:
            self.done.add(f"{class_name}.{setter.hook}")
            return rewrite_setter(updated, setter)
        if (class_name, original.name.value) in self.dead_returns:
            self.done.add(f"{class_name}.{original.name.value} (dead return)")
            return drop_early_return(updated, f"{class_name}.{original.name.value}")
        fix = self.stage_fixes.get(class_name)
        if fix is not None and original.name.value == "forward":
            self.done.add(f"{class_name}.forward (stage output)")
            if isinstance(fix, NamedStageOutputFix):
                return fix_named_stage_output(updated, fix)
            return fix_stage_unpacks(updated, fix)
        forward = self.forwards.get(class_name)
        if forward is not None and original.name.value == method_of(forward):
            self.done.add(f"{class_name}.forward")
            return registry.rewrite(updated, forward)
        return updated


def rewrite_setter(fn: cst.FunctionDef, shape: SetterShape) -> cst.FunctionDef:
    """Drop the non-last-rank early return; call ``set_pp_aux_capture`` at the end."""
    name = f"{shape.class_name}.{shape.hook}"
    if (early_return_of(fn) is None and shape.early_return) or shape.receiver is None:
        raise FamilyRewriteError(f"{name} has no early return")
    if shape.pp_group is None:
        raise FamilyRewriteError(f"{name} has no early return")
    if shape.hidden_size is None:
        raise FamilyRewriteError(f"{name}: the width is not known")
    docstring, rest = _without_early_return(fn, name)
    pad = " " * METHOD_INDENT
    args: tuple[str, ...] = (shape.receiver, shape.pp_group)
    if shape.ids_attr != IDS_ATTR:
        args += (f'ids_attr="{shape.ids_attr}"',)
    args += (f"{WIDTH_KEYWORD}={shape.hidden_size}",)
    lines = render_call(pad, "", Call(ATTACH, args))
    added = parse_statements(lines_to_text(lines), pad)
    fn = fn.with_changes(body=fn.body.with_changes(body=docstring + rest + added))
    if CAPTURE_FLAG in shape.flags:
        # Other flags the hook sets are its own business; this one makes the causal
        # LM unpack (hidden_states, aux_hidden_states), which only the last stage returns.
        last_rank = cst.parse_expression(f"{shape.pp_group}.is_last_rank")
        flagged = fn.visit(_FlagOnLastRank(last_rank))
        assert isinstance(flagged, cst.FunctionDef)  # only assignments are replaced
        fn = flagged
    return fn


def drop_early_return(fn: cst.FunctionDef, name: str) -> cst.FunctionDef:
    """``fn`` without its ``if not <pp>.is_last_rank: return`` and the blank lines after it
    (black keeps none at the top of a body); comments above the return and the rest of the
    hook stay as they are, so the diff only removes lines."""
    if early_return_of(fn) is None:
        raise FamilyRewriteError(f"{name} has no early return")
    docstring, rest = _without_early_return(fn, name)
    return fn.with_changes(body=fn.body.with_changes(body=docstring + rest))


def _without_early_return(fn: cst.FunctionDef, name: str) -> tuple[list, list]:
    """(docstring, the statements after it) of ``fn``'s body, the early return dropped
    when it has one."""
    if not isinstance(fn.body, cst.IndentedBlock):
        raise FamilyRewriteError(f"{name} has no block body")
    early = early_return_of(fn)
    docstring, rest = split_docstring(list(fn.body.body))
    if early is not None:
        rest = rest[1:]
        if not rest:
            raise FamilyRewriteError(f"{name} has nothing after the return")
        # Comments above the removed return describe the hook: keep them.
        first = rest[0]
        # a statement of the hook's block: a simple line or a compound statement
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        leading = list(early.leading_lines) + _comments_only(first.leading_lines)
        rest[0] = first.with_changes(leading_lines=leading)
    return docstring, rest


class _FlagOnLastRank(cst.CSTTransformer):
    """``self.capture_aux_hidden_states = True`` -> ``= <pp group>.is_last_rank``."""

    def __init__(self, last_rank: cst.BaseExpression) -> None:
        self.last_rank = last_rank

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if m.matches(
            updated,
            m.Assign(
                targets=[m.AssignTarget(m.Attribute(m.Name("self"), m.Name(CAPTURE_FLAG)))],
                value=m.Name("True"),
            ),
        ):
            return updated.with_changes(value=self.last_rank)
        return updated


def _comments_only(lines) -> list[cst.EmptyLine]:
    return [line for line in lines if line.comment is not None]
