"""Rewrite SGLang's Kimi-Linear model file so DSPARK aux capture works under pipeline
parallelism.

The file has two classes that matter, found by what they do rather than by name:

* the causal-LM class with ``set_dspark_layers_to_capture(self, layer_ids)``, which stores the
  ids on ``self.<inner>.dspark_layers_to_capture``;
* the inner model class whose ``forward`` loops over its stage's layers, appends
  ``<materialize expression>`` to an aux list after each requested layer, and returns
  ``PPProxyTensors({"hidden_states": ..., "residual": ...})`` on non-last stages.

Before (SGLang 0.5.18-0.5.20)::

    def set_dspark_layers_to_capture(self, layer_ids: list[int]) -> None:
        if self.pp_group.world_size > 1:
            raise NotImplementedError("DSPARK aux hidden capture requires PP=1.")
        if not self.pp_group.is_last_rank:
            return
        if layer_ids is None:
            raise ValueError(...)
        self.capture_aux_hidden_states = True
        self.model.dspark_layers_to_capture = list(layer_ids)

    # forward: captures of earlier stages are dropped at the stage boundary
        if not self.pp_group.is_last_rank:
            return PPProxyTensors({"hidden_states": ..., "residual": ...})

After::

    def set_dspark_layers_to_capture(self, layer_ids: list[int]) -> None:
        if layer_ids is None:
            raise ValueError(...)                      # unchanged, every rank
        self.capture_aux_hidden_states = True
        self.model.dspark_layers_to_capture = list(layer_ids)
        set_pp_aux_capture(
            self.model,
            self.pp_group,
            ids_attr="dspark_layers_to_capture",
            hidden_size=self.config.hidden_size,
        )

    # forward: each stage records its captures by layer id, non-last stages add them to
    # the handoff after what they received (relay.outgoing), the last stage puts the
    # received ones before its own (relay.collect) and returns them as before.

``set_pp_aux_capture`` is the helper every patched model calls
(``sglang.srt.layers.aux_hidden_states``, ``shipped/pp_aux_capture.py``): under PP it
puts the stage's relay on ``self.model.pp_aux_relay`` (None at PP=1).

Nothing else in the file changes.  The capture expression stays the file's own (in 0.5.x,
``_materialize_residual_stream(hidden_states, residual)``, i.e. ``hidden + residual``).

:func:`analyse` classifies a file as ``needs_patch``, ``patched`` (this rewrite is already
there), or ``supported`` (the file already carries DSPARK captures across PP, as SGLang
0.5.21+ does under ``dspark_hidden_states``); anything else raises :class:`UnrecognisedShape`
listing what was looked for.  :func:`rewrite` returns the new text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import ATTACH, GLUE_MODULE, PP_ERROR, RELAY_ATTR, RELAY_CLASS
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.edit.walk import findall
from codemods.upstream.kimi import syntax
from codemods.upstream.kimi.relay import insert_relay, relay_code

MODULE = "sglang.srt.models.kimi_linear"
SETTER = "set_dspark_layers_to_capture"
CAPTURE_ATTR = "dspark_layers_to_capture"
#: The module and attribute of earlier versions of this rewrite (a tree patched by them
#: is "patched").
LEGACY_TRANSPORT_MODULE = "sglang.srt.distributed.pp_aux_transport"
LEGACY_TRANSPORT_ATTR = "dspark_aux_transport"

NEEDS_PATCH = "needs_patch"
PATCHED = "patched"
SUPPORTED = "supported"


class UnrecognisedShape(ValueError):
    """The file does not have the structure the rewriter knows how to change."""

    def __init__(self, path: str, missing: Sequence[str]) -> None:
        self.path = path
        self.missing = list(missing)
        detail = "; ".join(self.missing)
        super().__init__(f"{path}: unrecognised Kimi-Linear model file: {detail}")


# --------------------------------------------------------------------------- discovery


@dataclass
class SetterShape:
    cls: cst.ClassDef
    func: cst.FunctionDef
    param: str
    store: cst.SimpleStatementLine
    inner: str  # "self.model"
    pp: str | None  # "self.pp_group"
    pp_guards: list[cst.BaseStatement] = field(default_factory=list)
    none_check: cst.BaseStatement | None = None
    has_config: bool = False


@dataclass
class ForwardShape:
    cls: cst.ClassDef
    init: cst.FunctionDef
    init_store: cst.SimpleStatementLine | None
    func: cst.FunctionDef
    proxy_param: str
    aux_name: str
    aux_init: cst.SimpleStatementLine
    loop: cst.For
    loop_var: str
    capture_if: cst.If
    boundary: cst.If | None
    boundary_return: cst.SimpleStatementLine | None
    handoff_entries: list[tuple[str, str]]  # (key source, value source)
    hidden: str | None
    relays: bool


@dataclass
class Analysis:
    path: str
    status: str
    module: cst.Module
    setter: SetterShape | None = None
    forward: ForwardShape | None = None
    notes: list[str] = field(default_factory=list)


def _find_setter(module: cst.Module, missing: list[str]) -> SetterShape | None:
    for cls in module.body:
        if not isinstance(cls, cst.ClassDef):
            continue
        func = syntax.methods_of(cls).get(SETTER)
        if func is None:
            continue
        params = [p.name.value for p in func.params.params]
        if len(params) < 2:
            missing.append(f"{cls.name.value}.{SETTER} taking (self, layer_ids)")
            return None
        param = params[1]
        store = None
        inner = None
        pp = None
        guards: list[cst.BaseStatement] = []
        none_check = None
        for stmt in syntax.statements_of(func):
            target = syntax.assign_target_attr(stmt, CAPTURE_ATTR)
            if target is not None:
                store, inner = stmt, syntax.code(target.value)
                continue
            if not isinstance(stmt, cst.If) or stmt.orelse is not None:
                continue
            test = stmt.test
            world = findall(test, m.Attribute(attr=m.Name("world_size")))
            if world and syntax.raises(stmt.body, "NotImplementedError"):
                guards.append(stmt)
                pp = pp or syntax.code(world[0].value)
                continue
            if m.matches(
                test,
                m.UnaryOperation(
                    operator=m.Not(), expression=m.Attribute(attr=m.Name("is_last_rank"))
                ),
            ) and m.matches(
                stmt.body,
                m.SimpleStatementSuite(body=[m.Return(value=None)])
                | m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(value=None)])]),
            ):
                guards.append(stmt)
                pp = pp or syntax.code(test.expression.value)  # type: ignore[attr-defined]
                continue
            if m.matches(
                test,
                m.Comparison(
                    left=m.Name(param),
                    comparisons=[m.ComparisonTarget(operator=m.Is(), comparator=m.Name("None"))],
                ),
            ):
                none_check = stmt
        if store is None:
            missing.append(
                f"{cls.name.value}.{SETTER} storing the ids on self.<model>.{CAPTURE_ATTR}"
            )
            return None
        init = syntax.methods_of(cls).get("__init__")
        has_config = init is not None and any(
            (t := syntax.assign_target_attr(s, "config")) is not None
            and syntax.code(t.value) == "self"
            for s in syntax.statements_of(init)
        )
        if pp is None and init is not None:
            for stmt in syntax.statements_of(init):
                if m.matches(
                    stmt,
                    m.SimpleStatementLine(
                        body=[
                            m.Assign(
                                targets=[m.AssignTarget(target=m.Attribute(value=m.Name("self")))],
                                value=m.Call(func=m.Name("get_pp_group")),
                            )
                        ]
                    ),
                ):
                    pp = syntax.code(stmt.body[0].targets[0].target)  # type: ignore[attr-defined]
        assert isinstance(store, cst.SimpleStatementLine) and inner is not None  # set together
        return SetterShape(cls, func, param, store, inner, pp, guards, none_check, has_config)
    missing.append(f"a class defining {SETTER}(self, layer_ids)")
    return None


def _find_forward(module: cst.Module, missing: list[str]) -> ForwardShape | None:
    for cls in module.body:
        if not isinstance(cls, cst.ClassDef):
            continue
        methods = syntax.methods_of(cls)
        func = methods.get("forward")
        if func is None:
            continue
        body = syntax.statements_of(func)
        loop = capture = None
        for stmt in body:
            if (
                isinstance(stmt, cst.For)
                and (found := syntax.capture_if(stmt, CAPTURE_ATTR)) is not None
            ):
                loop, capture = stmt, found
                break
        if loop is None or capture is None:
            continue
        capture_if, aux_name = capture
        where = f"{cls.name.value}.forward"
        init = methods.get("__init__")
        if init is None:
            missing.append(f"{cls.name.value}.__init__")
            return None
        init_store = next(
            (
                s
                for s in syntax.statements_of(init)
                if isinstance(s, cst.SimpleStatementLine)
                and syntax.assign_target_attr(s, CAPTURE_ATTR) is not None
            ),
            None,
        )
        proxy_param = None
        for param in func.params.params:
            annotation = syntax.code(param.annotation.annotation) if param.annotation else ""
            if param.name.value == "pp_proxy_tensors" or "PPProxyTensors" in annotation:
                proxy_param = param.name.value
        if proxy_param is None:
            missing.append(f"{where} with a pp_proxy_tensors parameter")
            return None
        if not isinstance(loop.target, cst.Name):
            missing.append(f"{where}: layer loop with a plain loop variable")
            return None
        aux_init = next(
            (
                s
                for s in body
                if isinstance(s, cst.SimpleStatementLine)
                and (
                    m.matches(
                        s,
                        m.SimpleStatementLine(
                            body=[
                                m.Assign(
                                    targets=[m.AssignTarget(target=m.Name(aux_name))],
                                    value=m.List(elements=[]),
                                )
                            ]
                        ),
                    )
                    or m.matches(
                        s,
                        m.SimpleStatementLine(
                            body=[m.AnnAssign(target=m.Name(aux_name), value=m.List(elements=[]))]
                        ),
                    )
                )
            ),
            None,
        )
        if aux_init is None or body.index(aux_init) > body.index(loop):
            missing.append(f"{where}: `{aux_name} = []` before the layer loop")
            return None
        boundary = None
        boundary_return = None
        entries: list[tuple[str, str]] = []
        relays = False
        for stmt in body[body.index(loop) + 1 :]:
            if isinstance(stmt, cst.If) and syntax.is_not_last(stmt.test):
                boundary = stmt
                break
        if boundary is not None:
            assert isinstance(boundary.body, cst.IndentedBlock)
            last = boundary.body.body[-1]
            ret = m.SimpleStatementLine(
                body=[
                    m.Return(
                        value=m.Call(func=m.Name("PPProxyTensors"), args=[m.Arg(value=m.Dict())])
                    )
                ]
            )
            if (
                isinstance(last, cst.SimpleStatementLine)
                and m.matches(last, ret)
                and len(boundary.body.body) == 1
            ):
                boundary_return = last
                handoff = last.body[0].value.args[0].value  # type: ignore[attr-defined]
                for element in handoff.elements:
                    if not isinstance(element, cst.DictElement):
                        continue
                    entries.append((syntax.code(element.key), syntax.code(element.value)))
            keys = set(syntax.strings_in(boundary))
            relays = any(k not in ("hidden_states", "residual") for k in keys) or any(
                syntax.mentions_attr(boundary, attr) for attr in (RELAY_ATTR, LEGACY_TRANSPORT_ATTR)
            )
        hidden = next(
            (value for key, value in entries if key.strip("'\"") == "hidden_states"), None
        )
        return ForwardShape(
            cls,
            init,
            init_store,
            func,
            proxy_param,
            aux_name,
            aux_init,
            loop,
            loop.target.value,
            capture_if,
            boundary,
            boundary_return,
            entries,
            hidden,
            relays,
        )
    missing.append(
        f"a model class whose forward loops over its layers and appends to an aux list "
        f"where `self.{CAPTURE_ATTR}` lists the layer"
    )
    return None


def attaches_transport(setter: cst.FunctionDef, source: str) -> bool:
    """Whether ``setter`` is already patched: it calls ``set_pp_aux_capture`` (this
    rewrite), or builds the PP aux transport of an earlier form of the patch."""
    if GLUE_MODULE in source and findall(setter, m.Call(func=m.Name(ATTACH))):
        return True
    return LEGACY_TRANSPORT_MODULE in source and syntax.mentions_attr(setter, LEGACY_TRANSPORT_ATTR)


def discover(source: str, path: str, unrecognised: type[UnrecognisedShape] = UnrecognisedShape):
    """Parse ``source`` and find the DSPARK setter and the capturing forward:
    ``(module, setter or None, forward or None, what is missing)``; a file LibCST cannot
    parse raises ``unrecognised``."""
    try:
        module = parse_text(source)
    except cst.ParserSyntaxError as err:
        raise unrecognised(path, [f"Python source LibCST can parse ({err.message})"]) from err
    missing: list[str] = []
    setter = _find_setter(module, missing)
    forward = _find_forward(module, missing)
    return module, setter, forward, missing


def analyse(source: str, path: str = MODULE) -> Analysis:
    """Classify ``source``; raises :class:`UnrecognisedShape` naming what is missing."""
    module, setter, forward, missing = discover(source, path)
    if setter is None or forward is None:
        raise UnrecognisedShape(path, missing)
    if attaches_transport(setter.func, source):
        return Analysis(
            path,
            PATCHED,
            module,
            setter,
            forward,
            [f"{path} already carries DSPARK captures across PP with {GLUE_MODULE}"],
        )
    if not setter.pp_guards and forward.relays:
        assert forward.boundary is not None
        extra_keys = sorted(
            set(syntax.strings_in(forward.boundary)) - {"hidden_states", "residual"}
        )
        return Analysis(
            path,
            SUPPORTED,
            module,
            setter,
            forward,
            [
                f"{path} already carries DSPARK captures across PP stages "
                f"(setter has no PP=1 guard; the stage handoff carries aux "
                f"entries: {extra_keys})"
            ],
        )
    problems = []
    # The first missing piece of the forward's stage boundary, in the order they nest.
    missing = next(
        (
            what
            for found, what in (
                (forward.boundary, "`if not <pp>.is_last_rank:` after the layer loop"),
                (
                    forward.boundary_return,
                    "`return PPProxyTensors({...})` as the only statement of "
                    "the non-last-rank branch",
                ),
                (forward.hidden, 'a "hidden_states" entry in the stage handoff'),
            )
            if found is None
        ),
        None,
    )
    if missing is not None:
        problems.append(f"{forward.cls.name.value}.forward: {missing}")
    if setter.pp is None:
        problems.append(
            f"{setter.cls.name.value}: the PP group (self.<pp> = get_pp_group() "
            f"or a world_size/is_last_rank guard in {SETTER})"
        )
    if not setter.has_config:
        problems.append(f"{setter.cls.name.value}.__init__ assigning self.config")
    if problems:
        raise UnrecognisedShape(path, problems)
    notes = []
    if setter.pp_guards:
        notes.append(
            f"{setter.cls.name.value}.{SETTER}: removes the PP=1 guard "
            f"({PP_ERROR!r}) and the non-last-rank early return"
        )
    return Analysis(path, NEEDS_PATCH, module, setter, forward, notes)


# ----------------------------------------------------------------------------- rewrite


def _indent_of(depth: int) -> str:
    return "    " * depth


def _setter_statements(shape: SetterShape) -> tuple[list, list]:
    """(statements after the None check, statements after the store) at method depth 2:
    nothing, and the helper call that prepares the stack's relay on every rank."""
    indent = _indent_of(2)
    args: tuple[str, ...] = (
        shape.inner,
        str(shape.pp),
        f'ids_attr="{CAPTURE_ATTR}"',
        "hidden_size=self.config.hidden_size",  # analyse found ``self.config``
    )
    attach = render_call(indent, "", Call(ATTACH, args))
    return [], parse_statements(lines_to_text(attach), indent)


def _rewrite_setter(func: cst.FunctionDef, shape: SetterShape) -> cst.FunctionDef:
    after_none, after_store = _setter_statements(shape)
    body: list[cst.BaseStatement] = []
    inserted = False
    statements = [
        s for s in syntax.statements_of(func) if not any(s.deep_equals(g) for g in shape.pp_guards)
    ]
    if shape.none_check is None:
        body.extend(after_none)
        inserted = True
    for stmt in statements:
        if stmt.deep_equals(shape.store):
            if not inserted:
                body.extend(after_none)
                inserted = True
            body.append(stmt)
            body.extend(after_store)
            continue
        body.append(stmt)
        if not inserted and shape.none_check is not None and stmt.deep_equals(shape.none_check):
            body.extend(after_none)
            inserted = True
    assert isinstance(func.body, cst.IndentedBlock)
    return func.with_changes(body=func.body.with_changes(body=body))


def _init_statement(shape: ForwardShape) -> list[cst.BaseStatement]:
    indent = _indent_of(2)
    annotation = ""
    if shape.init_store is not None and isinstance(shape.init_store.body[0], cst.AnnAssign):
        existing = syntax.code(shape.init_store.body[0].annotation.annotation)
        annotation = f": {RELAY_CLASS} | None" if "|" in existing else f": Optional[{RELAY_CLASS}]"
    return parse_statements(f"{indent}self.{RELAY_ATTR}{annotation} = None\n", indent)


def _rewrite_init(func: cst.FunctionDef, shape: ForwardShape) -> cst.FunctionDef:
    new = _init_statement(shape)
    body = list(syntax.statements_of(func))
    if shape.init_store is not None:
        index = next(i for i, s in enumerate(body) if s.deep_equals(shape.init_store))
        body[index + 1 : index + 1] = new
    else:
        body.extend(new)
    assert isinstance(func.body, cst.IndentedBlock)
    return func.with_changes(body=func.body.with_changes(body=body))


def _rewrite_forward(func: cst.FunctionDef, shape: ForwardShape) -> cst.FunctionDef:
    taken = syntax.function_locals(func)
    captures = syntax.fresh("dspark_captures", taken)
    incoming = syntax.fresh("dspark_incoming", taken)
    proxy_dict = syntax.fresh("proxy_tensors", taken)
    proxy = shape.proxy_param
    d2 = _indent_of(2)

    init_lines, capture_line, boundary_nodes, collect_node = relay_code(
        f"self.{RELAY_ATTR}",
        captures,
        incoming,
        proxy_dict,
        proxy,
        shape.loop_var,
        shape.aux_name,
        shape.handoff_entries,
        shape.hidden,
    )
    init_nodes = parse_statements(lines_to_text(init_lines), d2)

    class _Forward(cst.CSTTransformer):
        def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
            if original is shape.capture_if:
                assert isinstance(updated.body, cst.IndentedBlock)
                return updated.with_changes(
                    body=updated.body.with_changes(body=[*updated.body.body, *capture_line])
                )
            if original is shape.boundary:
                assert isinstance(updated.body, cst.IndentedBlock)
                leading = shape.boundary_return.leading_lines  # type: ignore[union-attr]
                first = boundary_nodes[0].with_changes(leading_lines=leading)
                return updated.with_changes(
                    body=updated.body.with_changes(body=[first, *boundary_nodes[1:]])
                )
            return updated

    return insert_relay(func, func.visit(_Forward()), shape, init_nodes, collect_node)


def transport_imports(module: cst.Module, forward: ForwardShape) -> cst.Module:
    """``module`` importing what the rewritten setter and ``__init__`` use."""
    names = [ATTACH]
    if RELAY_CLASS in syntax.code(_init_statement(forward)[0]):
        names.append(RELAY_CLASS)
    return add_from_import(module, GLUE_MODULE, tuple(sorted(names)))


def rewrite(source: str, path: str = MODULE) -> tuple[str, Analysis]:
    """The patched text of a Kimi-Linear model file (``source`` itself when nothing to do)."""
    analysis = analyse(source, path)
    if analysis.status != NEEDS_PATCH:
        return source, analysis
    assert analysis.setter is not None and analysis.forward is not None
    setter: SetterShape = analysis.setter
    forward: ForwardShape = analysis.forward

    class _Classes(cst.CSTTransformer):
        def leave_FunctionDef(
            self, original: cst.FunctionDef, updated: cst.FunctionDef
        ) -> cst.FunctionDef:
            if original is setter.func:
                return _rewrite_setter(updated, setter)
            if original is forward.func:
                return _rewrite_forward(original, forward)
            if original is forward.init:
                return _rewrite_init(updated, forward)
            return updated

    module = transport_imports(analysis.module.visit(_Classes()), forward)
    new_source = module.code
    compile(new_source, path, "exec")
    return new_source, analysis
