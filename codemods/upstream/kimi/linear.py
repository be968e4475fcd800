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

``k3.py`` builds on this module: the discovery (:func:`discover`), the handoff's parts
(:func:`handoff_return`, :func:`hidden_entry`), the ``patched``/``supported`` verdicts
(:func:`already_relayed`), the setter's checks and notes, and the module rewrite
(:func:`rewrite_text`, given the forward's rewrite, ``relay.relay_forward``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import libcst as cst
import libcst.matchers as m

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import ATTACH, GLUE_MODULE, PP_ERROR, RELAY_ATTR, RELAY_CLASS
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.edit.walk import findall
from codemods.upstream.kimi import syntax
from codemods.upstream.kimi.relay import relay_forward

MODULE = "sglang.srt.models.kimi_linear"
SETTER = NATIVE.hook
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


_A = TypeVar("_A", bound=Analysis)


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
        return SetterShape(cls, func, param, store, inner, pp, guards, has_config)
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
            handoff = handoff_return(boundary)
            assert isinstance(boundary.body, cst.IndentedBlock)
            if handoff is not None and len(boundary.body.body) == 1:
                boundary_return, entries = handoff
            keys = set(syntax.strings_in(boundary))
            relays = any(k not in ("hidden_states", "residual") for k in keys) or any(
                syntax.mentions_attr(boundary, attr) for attr in (RELAY_ATTR, LEGACY_TRANSPORT_ATTR)
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
            hidden_entry(entries),
            relays,
        )
    missing.append(
        f"a model class whose forward loops over its layers and appends to an aux list "
        f"where `self.{CAPTURE_ATTR}` lists the layer"
    )
    return None


def handoff_return(
    boundary: cst.If,
) -> tuple[cst.SimpleStatementLine, list[tuple[str, str]]] | None:
    """The ``return PPProxyTensors({...})`` ending the non-last-rank branch ``boundary`` and
    its dict's entries (key source, value source); None when the branch ends otherwise."""
    assert isinstance(boundary.body, cst.IndentedBlock)
    last = boundary.body.body[-1]
    ret = m.SimpleStatementLine(
        body=[m.Return(value=m.Call(func=m.Name("PPProxyTensors"), args=[m.Arg(value=m.Dict())]))]
    )
    if not m.matches(last, ret):
        return None
    assert isinstance(last, cst.SimpleStatementLine)
    handoff = last.body[0].value.args[0].value  # type: ignore[attr-defined]
    entries = [
        (syntax.code(e.key), syntax.code(e.value))
        for e in handoff.elements
        if isinstance(e, cst.DictElement)
    ]
    return last, entries


def hidden_entry(entries: list[tuple[str, str]]) -> str | None:
    """The value source of the handoff's ``"hidden_states"`` entry, if any."""
    return next((value for key, value in entries if key.strip("'\"") == "hidden_states"), None)


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


def already_relayed(
    found: tuple[cst.Module, SetterShape, ForwardShape],
    source: str,
    path: str,
    analysis: type[_A],
) -> _A | None:
    """The ``patched`` or ``supported`` analysis of a file whose setter and forward were
    ``found``; None when it needs the rewrite."""
    module, setter, forward = found
    if attaches_transport(setter.func, source):
        return analysis(
            path,
            PATCHED,
            module,
            setter,
            forward,
            [f"{path} already carries {NATIVE.name} captures across PP with {GLUE_MODULE}"],
        )
    if not setter.pp_guards and forward.relays:
        assert forward.boundary is not None
        extra_keys = sorted(
            set(syntax.strings_in(forward.boundary)) - {"hidden_states", "residual"}
        )
        return analysis(
            path,
            SUPPORTED,
            module,
            setter,
            forward,
            [
                f"{path} already carries {NATIVE.name} captures across PP stages "
                f"(setter has no PP=1 guard; the stage handoff carries aux "
                f"entries: {extra_keys})"
            ],
        )
    return None


def setter_problems(setter: SetterShape) -> list[str]:
    """What the setter's class lacks for the rewrite: its PP group, ``self.config``."""
    problems = []
    if setter.pp is None:
        problems.append(
            f"{setter.cls.name.value}: the PP group (self.<pp> = get_pp_group() "
            f"or a world_size/is_last_rank guard in {SETTER})"
        )
    if not setter.has_config:
        problems.append(f"{setter.cls.name.value}.__init__ assigning self.config")
    return problems


def setter_notes(setter: SetterShape) -> list[str]:
    """The note on the guards the setter's rewrite removes (none when it has none)."""
    if not setter.pp_guards:
        return []
    return [
        f"{setter.cls.name.value}.{SETTER}: removes the PP=1 guard "
        f"({PP_ERROR!r}) and the non-last-rank early return"
    ]


def analyse(source: str, path: str = MODULE) -> Analysis:
    """Classify ``source``; raises :class:`UnrecognisedShape` naming what is missing."""
    module, setter, forward, missing = discover(source, path)
    if setter is None or forward is None:
        raise UnrecognisedShape(path, missing)
    known = already_relayed((module, setter, forward), source, path, Analysis)
    if known is not None:
        return known
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
    problems += setter_problems(setter)
    if problems:
        raise UnrecognisedShape(path, problems)
    return Analysis(path, NEEDS_PATCH, module, setter, forward, setter_notes(setter))


# ----------------------------------------------------------------------------- rewrite


_D2 = "    " * 2


def _rewrite_setter(func: cst.FunctionDef, shape: SetterShape) -> cst.FunctionDef:
    """``func`` without its PP guards, preparing the stack's relay on every rank with the
    shipped helper right after it stores the ids."""
    args: tuple[str, ...] = (
        shape.inner,
        str(shape.pp),
        f'ids_attr="{CAPTURE_ATTR}"',
        "hidden_size=self.config.hidden_size",  # analyse found ``self.config``
    )
    attach = parse_statements(lines_to_text(render_call(_D2, "", Call(ATTACH, args))), _D2)
    body: list[cst.BaseStatement] = []
    for stmt in syntax.statements_of(func):
        if any(stmt.deep_equals(g) for g in shape.pp_guards):
            continue
        body.append(stmt)
        if stmt.deep_equals(shape.store):
            body.extend(attach)
    assert isinstance(func.body, cst.IndentedBlock)
    return func.with_changes(body=func.body.with_changes(body=body))


def _init_statement(shape: ForwardShape) -> list[cst.BaseStatement]:
    annotation = ""
    if shape.init_store is not None and isinstance(shape.init_store.body[0], cst.AnnAssign):
        existing = syntax.code(shape.init_store.body[0].annotation.annotation)
        annotation = f": {RELAY_CLASS} | None" if "|" in existing else f": Optional[{RELAY_CLASS}]"
    return parse_statements(f"{_D2}self.{RELAY_ATTR}{annotation} = None\n", _D2)


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


def transport_imports(module: cst.Module, forward: ForwardShape) -> cst.Module:
    """``module`` importing what the rewritten setter and ``__init__`` use."""
    names = [ATTACH]
    if RELAY_CLASS in syntax.code(_init_statement(forward)[0]):
        names.append(RELAY_CLASS)
    return add_from_import(module, GLUE_MODULE, tuple(sorted(names)))


def rewrite_text(
    analysis: Analysis,
    path: str,
    rewrite_forward: Callable[[cst.FunctionDef], cst.FunctionDef],
    more: Sequence[tuple[cst.FunctionDef, Callable[[cst.FunctionDef], cst.FunctionDef]]] = (),
    more_imports: tuple[str, ...] = (),
) -> str:
    """The text of ``analysis.module`` (a file that needs the rewrite) with its setter and
    its stack's ``__init__`` rewritten, its stack's forward replaced by
    ``rewrite_forward(forward)``, each function of ``more`` by its rewrite, and the imports
    they use (``more_imports`` from the shipped helpers); checked to compile."""
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
                return rewrite_forward(original)
            if original is forward.init:
                return _rewrite_init(updated, forward)
            return next((change(updated) for func, change in more if original is func), updated)

    module = transport_imports(analysis.module.visit(_Classes()), forward)
    if more_imports:
        module = add_from_import(module, GLUE_MODULE, more_imports)
    new_source = module.code
    compile(new_source, path, "exec")
    return new_source


def rewrite(source: str, path: str = MODULE) -> tuple[str, Analysis]:
    """The patched text of a Kimi-Linear model file (``source`` itself when nothing to do)."""
    analysis = analyse(source, path)
    if analysis.status != NEEDS_PATCH:
        return source, analysis
    forward = analysis.forward
    assert forward is not None and forward.boundary_return is not None
    boundary_return = forward.boundary_return

    def rewrite_forward(func: cst.FunctionDef) -> cst.FunctionDef:
        return relay_forward(
            func, forward, forward.handoff_entries, forward.hidden, boundary_return
        )

    return rewrite_text(analysis, path, rewrite_forward), analysis
