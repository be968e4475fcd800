"""LibCST rewrites that make one model file keep its aux captures under PP.

Capture hook (``set_<x>_layers_to_capture`` on the causal-LM class), before::

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if not self.pp_group.is_last_rank:
            return

        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [val + 1 for val in layer_ids]

after (every rank stores the ids; ``set_pp_aux_capture`` prepares the stack's relay and
keeps the flag that makes ``forward`` unpack ``(hidden_states, aux_hidden_states)`` on
the last stage only)::

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
        set_pp_aux_capture(self.model, self.pp_group, causal_lm=self)

Decoder-stack forward, before::

        if not self.pp_group.is_last_rank:
            return PPProxyTensors({"hidden_states": hidden_states, "residual": residual})
        ...
        if len(aux_hidden_states) == 0:

after (non-last stages add their captures to the handoff; the last stage gathers them
all, so it returns ``(hidden_states, aux_hidden_states)`` even when it owns none)::

        if not self.pp_group.is_last_rank:
            return PPProxyTensors(
                {
                    "hidden_states": hidden_states,
                    "residual": residual,
                    **pp_aux_outgoing(self, aux_hidden_states, pp_proxy_tensors),
                }
            )
        ...
        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)
        if len(aux_hidden_states) == 0:

A forward that captures only under a condition (DSpark targets capture after layer
``i``, raw ids), before::

        capture_aux = (
            self.capture_aux_hidden_states
            and self.pp_group.is_last_rank
            and self.layers_to_capture is not None
        )
        ...
            if capture_aux and i in self.layers_to_capture and hidden_states.shape[0] != 0:
        ...
        if not self.pp_group.is_last_rank:
            return PPProxyTensors({"hidden_states": hidden_states, "residual": residual})
        else:
            ...
            if capture_aux and len(aux) > 0:

after (every stage captures; the handoff and the gathering run under the condition,
which holds on every stage or on none)::

        capture_aux = (
            self.capture_aux_hidden_states and self.layers_to_capture is not None
        )
        ...
        if not self.pp_group.is_last_rank:
            aux_outgoing = {}
            if capture_aux and hidden_states.shape[0] != 0:
                aux_outgoing = pp_aux_outgoing(self, aux, pp_proxy_tensors)
            return PPProxyTensors(
                {
                    "hidden_states": hidden_states,
                    "residual": residual,
                    **aux_outgoing,
                }
            )
        else:
            ...
            if capture_aux and hidden_states.shape[0] != 0:
                aux = pp_aux_collect(self, aux, pp_proxy_tensors)
            if capture_aux and len(aux) > 0:

Repairs some models need first live in ``family_repairs``.  Nothing else in the file
changes; inserted code is black (88) formatted and the import goes where isort puts it.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import ATTACH, GLUE_MODULE
from codemods.upstream.edit.pyformat import (
    LINE_LENGTH,
    Call,
    lines_to_text,
    parse_statements,
    render_call,
)
from codemods.upstream.family.delegated import method_of
from codemods.upstream.family.forward import ForwardShape
from codemods.upstream.family.proxy_width import (
    WIDTH,
    add_proxy_width_method,
    add_support_attribute,
)
from codemods.upstream.family.repairs import (
    FamilyRewriteError,
    StackSetter,
    StageOutputFix,
    add_stack_setters,
    fix_stage_unpacks,
)
from codemods.upstream.family.setter import SetterShape
from codemods.upstream.family.shapes.entry import HANDOFF as ENTRY_HANDOFF
from codemods.upstream.family.shapes.entry import is_entry_shape
from codemods.upstream.family.shapes.entry import rewrite_forward as rewrite_entry_forward
from codemods.upstream.family.shapes.gated import (
    ENTRY_IDS_ATTR,
    GATED_KIND,
    entry_ids_property,
)
from codemods.upstream.family.shapes.gated import rewrite_forward as rewrite_gated_forward
from codemods.upstream.family.stage_output import (
    NamedStageOutputFix,
    fix_named_stage_output,
)
from codemods.upstream.family.syntax import (
    IDS_ATTR,
    LAST_RANK,
    OUTGOING_LOCAL,
    code_of,
    conjuncts_of,
    early_return_of,
    non_last_return_index,
    proxy_return_of,
    split_docstring,
)

OUTGOING = "pp_aux_outgoing"
COLLECT = "pp_aux_collect"

#: Indentation of a method body and of a block directly inside it (black, 4 spaces).
METHOD_INDENT = 8
BLOCK_INDENT = 12

#: The flag that makes a causal LM unpack ``(hidden_states, aux_hidden_states)``;
#: ``set_pp_aux_capture(..., causal_lm=self)`` turns it off on non-last stages.
CAPTURE_FLAG = "capture_aux_hidden_states"


def rewrite_module(
    module: cst.Module,
    setters: list[SetterShape],
    forwards: list[ForwardShape],
    stack_setters: list[StackSetter] = (),
    stage_fixes: list[StageOutputFix] = (),
) -> cst.Module:
    """Rewrite the given hooks and forwards of ``module``, add the missing stack
    setters and fix the causal-LM forwards that unpack non-last stages' output;
    everything else is kept."""
    if any(GATED_KIND in f.capture_kinds for f in forwards):
        # The relay maps each capture to the stage that takes it (layer entry).
        setters = [replace(s, ids_attr=ENTRY_IDS_ATTR) for s in setters]
    transformer = _FamilyTransformer(setters, forwards, stack_setters, stage_fixes)
    updated = module.visit(transformer)
    missing = transformer.expected - transformer.done
    if missing:
        raise FamilyRewriteError(f"did not find {', '.join(sorted(missing))}")
    names = []
    if setters:
        names.extend([ATTACH, WIDTH])
    if any(not is_entry_shape(f.capture_kinds) for f in forwards):
        names.extend([COLLECT, OUTGOING])
    if any(is_entry_shape(f.capture_kinds) for f in forwards):
        names.extend([COLLECT, ENTRY_HANDOFF])
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
        stack_setters: list[StackSetter] = (),
        stage_fixes: list[StageOutputFix] = (),
    ) -> None:
        self.setters = {(s.class_name, s.hook): s for s in setters}
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
            # One width method per rewritten causal-LM class, for the CUDA graph buffers,
            # and the attribute that tells server-arg validation it relays its captures.
            receivers = [s.receiver for (c, _), s in self.setters.items()
                         if c == original.name.value]
            if receivers:
                updated = add_proxy_width_method(updated, receivers[0])
                updated = add_support_attribute(updated)
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
        fix = self.stage_fixes.get(class_name)
        if fix is not None and original.name.value == "forward":
            self.done.add(f"{class_name}.forward (stage output)")
            if isinstance(fix, NamedStageOutputFix):
                return fix_named_stage_output(updated, fix)
            return fix_stage_unpacks(updated, fix)
        forward = self.forwards.get(class_name)
        if forward is not None and original.name.value == method_of(forward):
            self.done.add(f"{class_name}.forward")
            if GATED_KIND in forward.capture_kinds:
                return cst.FlattenSentinel(
                    [rewrite_gated_forward(updated, forward), entry_ids_property(forward.ids_attr)]
                )
            if is_entry_shape(forward.capture_kinds):
                return rewrite_entry_forward(updated, forward)
            return rewrite_forward(updated, forward)
        return updated


def rewrite_setter(fn: cst.FunctionDef, shape: SetterShape) -> cst.FunctionDef:
    """Drop the non-last-rank early return; call ``set_pp_aux_capture`` at the end."""
    early = early_return_of(fn)
    if (early is None and shape.early_return) or shape.receiver is None or (
        shape.pp_group is None
    ):
        raise FamilyRewriteError(f"{shape.class_name}.{shape.hook} has no early return")
    docstring, rest = split_docstring(list(fn.body.body))
    if early is not None:
        rest = rest[1:]
        if not rest:
            raise FamilyRewriteError(
                f"{shape.class_name}.{shape.hook} has nothing after the return"
            )
        # Comments above the removed return describe the hook: keep them.
        leading = list(early.leading_lines) + _comments_only(rest[0].leading_lines)
        rest[0] = rest[0].with_changes(leading_lines=leading)
    pad = " " * METHOD_INDENT
    args = (shape.receiver, shape.pp_group)
    if shape.ids_attr != IDS_ATTR:
        args += (f'ids_attr="{shape.ids_attr}"',)
    if CAPTURE_FLAG in shape.flags:
        # Other flags the hook sets are its own business; this one makes the causal
        # LM unpack (hidden_states, aux_hidden_states), which only the last stage returns.
        args += ("causal_lm=self",)
    lines = render_call(pad, "", Call(ATTACH, args))
    added = parse_statements(lines_to_text(lines), pad)
    return fn.with_changes(body=fn.body.with_changes(body=docstring + rest + added))


def rewrite_forward(fn: cst.FunctionDef, shape: ForwardShape) -> cst.FunctionDef:
    """Add this stage's captures to the handoff; gather all of them on the last stage."""
    body = list(fn.body.body)
    index = non_last_return_index(body)
    if index is None or shape.aux_name is None or shape.proxy_param is None:
        raise FamilyRewriteError(f"{shape.class_name}.forward has no PP handoff")
    for position in shape.gate_assignments:
        body[position] = _every_stage(body[position])
    extra = ("boundaries=True",) if "boundaries" in shape.capture_kinds else ()
    outgoing = Call(OUTGOING, ("self", shape.aux_name, shape.proxy_param, *extra))
    handoff: cst.If = body[index]
    handoff_body = list(handoff.body.body)
    returned = proxy_return_of(handoff)
    argument = returned.value.args[0].value
    block_pad = " " * BLOCK_INDENT
    if shape.gate is not None:
        if isinstance(argument, cst.Dict):
            lines = [f"{block_pad}{OUTGOING_LOCAL} = {{}}", f"{block_pad}if {shape.gate}:"]
            lines += render_call(block_pad + "    ", f"{OUTGOING_LOCAL} = ", outgoing)
            added = parse_statements(lines_to_text(lines), block_pad)
            entry = [f"{block_pad}{' ' * 8}**{OUTGOING_LOCAL},"]
            replaced = parse_statements(_proxy_return_text(argument, entry), block_pad)[0]
        else:
            update = Call(f"{code_of(argument)}.update", (outgoing,))
            lines = [f"{block_pad}if {shape.gate}:"]
            lines += render_call(block_pad + "    ", "", update)
            added = parse_statements(lines_to_text(lines), block_pad)
            replaced = handoff_body[-1]
        # The new statements take the blank lines before the return; comments stay
        # with the return they describe.
        blank, comments = _split_leading(handoff_body[-1].leading_lines)
        added[0] = added[0].with_changes(leading_lines=blank)
        handoff_body[-1:] = [*added, replaced.with_changes(leading_lines=comments)]
    elif isinstance(argument, cst.Dict):
        entry = render_call(block_pad + " " * 8, "**", outgoing, ",")
        replaced = parse_statements(_proxy_return_text(argument, entry), block_pad)[0]
        handoff_body[-1] = replaced.with_changes(leading_lines=handoff_body[-1].leading_lines)
    else:
        update = Call(f"{code_of(argument)}.update", (outgoing,))
        update_text = lines_to_text(render_call(block_pad, "", update))
        (statement,) = parse_statements(update_text, block_pad)
        # The new statement takes the blank lines / comments that preceded the return.
        handoff_body.insert(
            len(handoff_body) - 1,
            statement.with_changes(leading_lines=handoff_body[-1].leading_lines),
        )
        handoff_body[-1] = handoff_body[-1].with_changes(leading_lines=[])
    handoff = handoff.with_changes(body=handoff.body.with_changes(body=handoff_body))
    collect = Call(COLLECT, ("self", shape.aux_name, shape.proxy_param, *extra))
    if shape.collect_in_else is not None:
        if not isinstance(handoff.orelse, cst.Else):
            raise FamilyRewriteError(f"{shape.class_name}.forward handoff has no else block")
        block = list(handoff.orelse.body.body)
        _insert_collect(block, shape.collect_in_else, BLOCK_INDENT, shape, collect)
        orelse = handoff.orelse.with_changes(body=handoff.orelse.body.with_changes(body=block))
        body[index] = handoff.with_changes(orelse=orelse)
        return fn.with_changes(body=fn.body.with_changes(body=body))
    body[index] = handoff

    position = shape.collect_before if shape.collect_before is not None else index + 1
    if position >= len(body):
        raise FamilyRewriteError(f"{shape.class_name}.forward ends at the PP handoff")
    _insert_collect(body, position, METHOD_INDENT, shape, collect)
    return fn.with_changes(body=fn.body.with_changes(body=body))


def _insert_collect(
    block: list, position: int, indent: int, shape: ForwardShape, collect: Call
) -> None:
    """Insert ``aux = pp_aux_collect(...)`` (under the gate, if any) before
    ``block[position]``, taking over its blank lines."""
    pad = " " * indent
    target = f"{shape.aux_name} = "
    following = block[position]
    if shape.gate is not None and _tests_exactly(following, shape.gate):
        # ``if <gate>: ... return ..., aux``: gather first thing inside that block.
        inner = list(following.body.body)
        _insert_collect(inner, 0, indent + 4, replace(shape, gate=None), collect)
        block[position] = following.with_changes(body=following.body.with_changes(body=inner))
        return
    if shape.gate is None:
        lines = render_call(pad, target, collect)
    else:
        lines = [f"{pad}if {shape.gate}:", *render_call(pad + "    ", target, collect)]
    (statement,) = parse_statements(lines_to_text(lines), pad)
    blank, comments = _split_leading(following.leading_lines)
    block.insert(position, statement.with_changes(leading_lines=blank))
    block[position + 1] = following.with_changes(leading_lines=comments)


def _tests_exactly(statement: cst.CSTNode, condition: str) -> bool:
    return (
        isinstance(statement, cst.If)
        and isinstance(statement.body, cst.IndentedBlock)
        and " ".join(code_of(statement.test).split()) == condition
    )


def _every_stage(statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """``gate = a and <pp>.is_last_rank and b`` -> ``gate = a and b``: with the
    relay set up every stage captures its own layers."""
    assign = statement.body[0]
    value = assign.value
    operands = conjuncts_of(value)
    if not isinstance(value, cst.BooleanOperation):
        return statement
    operators = _and_operators(value)
    kept = [k for k, operand in enumerate(operands) if not m.matches(operand, LAST_RANK)]
    if not kept:
        raise FamilyRewriteError("capture condition is only the last-rank test")
    if len(kept) == len(operands):
        return statement
    texts = [code_of(operands[k]) for k in kept]
    if any("\n" in text or "#" in text for text in texts):
        # Keep the layout: each kept operand keeps the operator in front of it.
        new_value: cst.BaseExpression = operands[kept[0]]
        for k in kept[1:]:
            new_value = cst.BooleanOperation(
                left=new_value, operator=operators[k - 1], right=operands[k]
            )
        if isinstance(new_value, cst.BooleanOperation):
            new_value = new_value.with_changes(lpar=value.lpar, rpar=value.rpar)
        return statement.with_changes(body=[assign.with_changes(value=new_value)])
    # Lay the shorter condition out as black does: one line, else the operands on one
    # line inside parentheses, else one operand per line.
    pad = " " * METHOD_INDENT
    head = code_of(statement.body[0]).split("=", 1)[0].rstrip() + " = "
    flat = " and ".join(texts)
    if len(pad + head + flat) <= LINE_LENGTH:
        lines = [pad + head + flat]
    elif len(pad + "    " + flat) <= LINE_LENGTH:
        lines = [pad + head + "(", pad + "    " + flat, pad + ")"]
    else:
        body = [texts[0]] + [f"and {text}" for text in texts[1:]]
        lines = [pad + head + "(", *(pad + "    " + text for text in body), pad + ")"]
    (rendered,) = parse_statements(lines_to_text(lines), pad)
    return rendered.with_changes(leading_lines=statement.leading_lines)


def _and_operators(value: cst.BaseExpression) -> list[cst.And]:
    """The ``and`` operators of a chain, left to right (as :func:`conjuncts_of`)."""
    if isinstance(value, cst.BooleanOperation) and isinstance(value.operator, cst.And):
        return _and_operators(value.left) + [value.operator] + _and_operators(value.right)
    return []


def _proxy_return_text(argument: cst.Dict, entry: list[str]) -> str:
    """``return PPProxyTensors({...})`` with the outgoing-captures ``entry`` lines spliced
    in, laid out as black lays out a dict that no longer fits on one line (one entry per
    line)."""
    pad = " " * BLOCK_INDENT
    entry_pad = pad + " " * 8
    lines = [f"{pad}return PPProxyTensors(", f"{pad}    {{"]
    for element in argument.elements:
        lines.append(f"{entry_pad}{code_of(element.key)}: {code_of(element.value)},")
    lines += entry
    lines += [f"{pad}    }}", f"{pad})"]
    return lines_to_text(lines)


def _comments_only(lines) -> list[cst.EmptyLine]:
    return [line for line in lines if line.comment is not None]


def _split_leading(lines) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    lines = list(lines)
    split = 0
    while split < len(lines) and lines[split].comment is None:
        split += 1
    return lines[:split], lines[split:]
