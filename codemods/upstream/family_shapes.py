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
a file was left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from codemods.hooks import HOOK_NAME_PATTERN

CAPTURE_KWARG = "captured_last_layer_outputs"
LAYER_FLAG = "_is_layer_to_capture"
IDS_ATTR = "layers_to_capture"
CAPTURE_FLAG = "capture_aux_hidden_states"
#: Local the rewrite gives a gated forward's outgoing captures (``{}`` when it captured
#: nothing); a forward that already uses the name is not rewritten.
OUTGOING_LOCAL = "aux_outgoing"

#: ``<pp group>.is_last_rank`` receivers that the hooks use: ``self.pp_group``,
#: ``get_pp_group()`` and (0.5.21+) ``get_parallel().pp_group``.
_PP_GROUP = (
    m.Attribute(value=m.Name("self"), attr=m.Name("pp_group"))
    | m.Call(func=m.Name("get_pp_group"), args=[])
    | m.Attribute(value=m.Call(func=m.Name("get_parallel"), args=[]), attr=m.Name("pp_group"))
)
NOT_LAST_RANK = m.UnaryOperation(
    operator=m.Not(), expression=m.Attribute(value=_PP_GROUP, attr=m.Name("is_last_rank"))
)


def is_ids_attr(name: str) -> bool:
    """``layers_to_capture`` or a per-drafter variant (``dspark_layers_to_capture``)."""
    return name.endswith(IDS_ATTR) and not name.startswith("set_")


#: ``self.layers_to_capture`` (or a per-drafter variant of the name).
SELF_IDS = m.Attribute(value=m.Name("self"), attr=m.Name(value=m.MatchIfTrue(is_ids_attr)))


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


@dataclass(frozen=True)
class SetterShape:
    """One capture hook defined on a class."""

    class_name: str
    hook: str
    line: int
    early_return: bool
    #: ``self.pp_group`` or ``get_pp_group()``, from the early return.
    pp_group: str | None = None
    #: Source of the submodule that receives the ids (``self.model``).
    receiver: str | None = None
    #: ``self.<flag> = True`` attributes the hook sets.
    flags: tuple[str, ...] = ()
    #: Hook methods it calls on the receiver (``self.model.set_x_layers_to_capture``).
    receiver_calls: tuple[str, ...] = ()
    #: The receiver attribute that holds the ids (``layers_to_capture`` unless the hook
    #: stores them under another name, e.g. ``dspark_layers_to_capture``).
    ids_attr: str = IDS_ATTR
    #: Source of the annotation of the hook's ids parameter (``List[int]``), if any.
    ids_annotation: str | None = None
    #: Why the hook cannot be rewritten; ``None`` when it can.
    problem: str | None = None


@dataclass(frozen=True)
class ForwardShape:
    """The forward of a class that reads ``self.layers_to_capture``."""

    class_name: str
    line: int
    aux_name: str | None = None
    capture_kinds: tuple[str, ...] = ()
    proxy_arg: str | None = None  # "dict" or "name"
    proxy_param: str | None = None
    #: The last stage captures the stage output (id == num_layers) after its layers.
    final_capture: bool = False
    #: Index of the top-level statement the gathering must precede (a last-rank capture
    #: placed before the handoff); ``None``: right after the handoff.
    collect_before: int | None = None
    #: The attribute the forward reads the capture ids from.
    ids_attr: str = IDS_ATTR
    #: Source of the condition, besides ``i in ids``, under which the forward captures
    #: (e.g. ``capture_aux and hidden_states.shape[0] != 0``); the same on every stage.
    #: The handoff and the gathering then run only when it holds.
    gate: str | None = None
    #: Top-level statements ``name = ... and <pp>.is_last_rank and ...`` that define a
    #: gate: the last-rank condition is dropped so that every stage captures.
    gate_assignments: tuple[int, ...] = ()
    #: The gathering goes into the handoff's ``else:`` block, before its statement at
    #: this index (the first that reads the captures); ``None``: at the top level.
    collect_in_else: int | None = None
    #: Comments right above a gate assignment that tie capture to the last stage: the
    #: rewrite makes them stale, so they are named for review.
    stale_comments: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def recognised(self) -> bool:
        return self.problem is None


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


def analyse(module: cst.Module) -> ModuleShapes:
    """Find the capture hooks, capture forwards and class wiring of one module."""
    positions = _LineFinder(module)
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
    """Line numbers of top-level classes and their methods, from the module text.

    Cheaper than LibCST position metadata on multi-thousand-line model files.
    """

    def __init__(self, module: cst.Module) -> None:
        self._lines = module.code.splitlines()

    def class_text(self, class_name: str) -> str:
        start = None
        for number, text in enumerate(self._lines):
            if text.startswith("class "):
                if start is not None:
                    return "\n".join(self._lines[start:number])
                if text[6:].startswith((class_name + "(", class_name + ":")):
                    start = number
            elif start is not None and text and not text[0].isspace() and not text.startswith(")"):
                if not text.startswith(("#", "@")):
                    return "\n".join(self._lines[start:number])
        return "\n".join(self._lines[start:]) if start is not None else ""

    def line_of(self, class_name: str, method: str) -> int:
        """Line of the last ``def method`` in the class (the one Python keeps)."""
        in_class = False
        found = 0
        for number, text in enumerate(self._lines, start=1):
            if text.startswith("class "):
                in_class = text[6:].startswith((class_name + "(", class_name + ":"))
            elif in_class and text.lstrip().startswith(f"def {method}("):
                found = number
        return found


def _model_imports(module: cst.Module) -> dict[str, tuple[str, str]]:
    imports: dict[str, tuple[str, str]] = {}
    for statement in module.body:
        if not m.matches(statement, m.SimpleStatementLine(body=[m.ImportFrom()])):
            continue
        node = statement.body[0]
        if node.module is None or isinstance(node.names, cst.ImportStar):
            continue
        source = code_of(node.module)
        for alias in node.names:
            name = code_of(alias.name)
            local = code_of(alias.asname.name) if alias.asname else name
            imports[local] = (source, name)
    return imports


def _methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {
        node.name.value: node for node in cls.body.body if isinstance(node, cst.FunctionDef)
    }


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
        forward = forward_shape(cls.name.value, fn, positions.line_of(cls.name.value, "forward"))
    return info, setters, forward


def _submodules(cls: cst.ClassDef, methods: dict[str, cst.FunctionDef]) -> dict[str, str]:
    """``attr -> class`` for ``self.attr = X(...)`` in ``__init__``; ``X`` may be a class
    name, ``module.Class``, a ``self._factory(...)`` returning one, a class attribute
    (``body_cls = module.Class``) or an ``__init__`` parameter with a class default."""
    submodules: dict[str, str] = {}
    init = methods.get("__init__")
    if init is None:
        return submodules
    factories: dict[str, str] = {}
    for name in _self_calls(init):
        if name in methods and name != "__init__":
            for ret in m.findall(methods[name], m.Return(value=m.Call(func=m.Name()))):
                factories[name] = ret.value.func.value
    class_attributes: dict[str, str] = {}
    for statement in cls.body.body:
        if m.matches(
            statement,
            m.SimpleStatementLine(
                body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Name() | m.Attribute())]
            ),
        ):
            assign = statement.body[0]
            class_attributes[assign.targets[0].target.value] = code_of(assign.value)
    defaults = {
        param.name.value: code_of(param.default)
        for param in (*init.params.params, *init.params.kwonly_params)
        if param.default is not None and m.matches(param.default, m.Name() | m.Attribute())
    }
    pattern = m.Assign(
        targets=[m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name()))],
        value=m.Call(),
    )
    for assign in m.findall(init, pattern):
        attr = assign.targets[0].target.attr.value
        func = assign.value.func
        target = None
        if isinstance(func, cst.Name):
            target = defaults.get(func.value, func.value)
        elif m.matches(func, m.Attribute(value=m.Name("self"))):
            name = func.attr.value
            target = factories.get(name) or class_attributes.get(name)
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
    for node in m.findall(init, m.Assert()):
        test = " ".join(code_of(node.test).split())
        if _SINGLE_STAGE.search(test):
            return f"assert {test}"
    return None


def _self_calls(fn: cst.FunctionDef) -> set[str]:
    calls = m.findall(fn, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name())))
    return {call.func.attr.value for call in calls}


def _mentions_capture(fn: cst.FunctionDef) -> bool:
    return bool(
        m.findall(fn, SELF_IDS)
        or m.findall(fn, m.SimpleString(value=f'"{LAYER_FLAG}"'))
        or m.findall(fn, m.Attribute(attr=m.Name(LAYER_FLAG)))
    )


# ---------------------------------------------------------------------------- setters


def split_docstring(body: list[cst.BaseStatement]) -> tuple[list, list]:
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])):
        return body[:1], body[1:]
    return [], body


def early_return_of(fn: cst.FunctionDef) -> cst.If | None:
    """The leading ``if not <pp>.is_last_rank: return`` of a hook, if present."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return None
    _, rest = split_docstring(list(fn.body.body))
    if not rest:
        return None
    first = rest[0]
    bare_return = m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(value=None)])])
    if m.matches(first, m.If(test=NOT_LAST_RANK, body=bare_return, orelse=None)):
        return first
    return None


def _setter_shape(class_name: str, fn: cst.FunctionDef, line: int) -> SetterShape:
    hook = fn.name.value
    early = early_return_of(fn)
    if early is None:
        return SetterShape(class_name, hook, line, early_return=False)
    pp_group = code_of(early.test.expression.value)
    receivers = _receivers(fn)
    flags = tuple(
        assign.targets[0].target.attr.value
        for assign in m.findall(
            fn,
            m.Assign(
                targets=[m.AssignTarget(target=m.Attribute(value=m.Name("self")))],
                value=m.Name("True"),
            ),
        )
    )
    problem = None
    returns = [node for node in m.findall(fn.body, m.Return()) if not _inside_nested_def(fn, node)]
    if len(returns) > 1:
        problem = "hook returns before its end in more than one place"
    elif not receivers:
        problem = "hook does not store the capture ids on a submodule"
    elif len(receivers) > 1:
        problem = f"hook stores capture ids on several submodules ({', '.join(receivers)})"
    elif m.findall(fn, m.Yield()):
        problem = "hook is a generator"
    receiver = receivers[0] if len(receivers) == 1 else None
    ids_attrs = _ids_attrs(fn)
    if problem is None and len(ids_attrs) > 1:
        problem = f"hook stores capture ids under several names ({', '.join(ids_attrs)})"
    calls = tuple(
        dict.fromkeys(
            call.func.attr.value
            for call in m.findall(fn, m.Call(func=m.Attribute(attr=m.Name())))
            if receiver is not None
            and code_of(call.func.value) == receiver
            and HOOK_NAME_PATTERN.match(call.func.attr.value)
        )
    )
    return SetterShape(
        class_name,
        hook,
        line,
        early_return=True,
        pp_group=pp_group,
        receiver=receiver,
        flags=tuple(dict.fromkeys(flags)),
        receiver_calls=calls,
        ids_attr=ids_attrs[0] if len(ids_attrs) == 1 else IDS_ATTR,
        ids_annotation=_ids_annotation(fn),
        problem=problem,
    )


def _inside_nested_def(fn: cst.FunctionDef, node: cst.CSTNode) -> bool:
    return any(
        id(node) in node_ids(inner) for inner in m.findall(fn.body, m.FunctionDef() | m.Lambda())
    )


class _IdCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.ids: set[int] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.ids.add(id(node))
        return True


def node_ids(container: cst.CSTNode) -> set[int]:
    """Identities of ``container`` and every node below it (one traversal)."""
    collector = _IdCollector()
    container.visit(collector)
    return collector.ids


def _ids_annotation(fn: cst.FunctionDef) -> str | None:
    params = fn.params.params
    if len(params) < 2 or params[1].annotation is None:
        return None
    return code_of(params[1].annotation.annotation)


_IDS_TARGET = m.Attribute(attr=m.Name(value=m.MatchIfTrue(is_ids_attr)))


def _ids_attrs(fn: cst.FunctionDef) -> list[str]:
    """Names of the ids attributes a hook assigns (``self.model.<name> = ...``)."""
    return list(
        dict.fromkeys(
            target.target.attr.value
            for target in m.findall(fn, m.AssignTarget(target=_IDS_TARGET))
        )
    )


def _receivers(fn: cst.FunctionDef) -> list[str]:
    found: list[str] = []
    for target in m.findall(fn, m.AssignTarget(target=_IDS_TARGET)):
        found.append(code_of(target.target.value))
    for call in m.findall(
        fn,
        m.Call(
            func=m.Attribute(
                attr=m.Name(value=m.MatchIfTrue(lambda v: bool(HOOK_NAME_PATTERN.match(v))))
            )
        ),
    ):
        found.append(code_of(call.func.value))
    return [receiver for receiver in dict.fromkeys(found) if receiver != "self"]


# --------------------------------------------------------------------------- forwards


def non_last_return_index(body: list[cst.BaseStatement]) -> int | None:
    """Index of the top-level ``if not <pp>.is_last_rank: ... return PPProxyTensors(..)``."""
    for index, statement in enumerate(body):
        if not m.matches(statement, m.If(test=NOT_LAST_RANK)):
            continue
        last = statement.body.body[-1] if statement.body.body else None
        if m.matches(
            last,
            m.SimpleStatementLine(body=[m.Return(value=m.Call(func=m.Name("PPProxyTensors")))]),
        ):
            return index
    return None


def proxy_return_of(statement: cst.If) -> cst.Return:
    return statement.body.body[-1].body[0]


def _ids_test(loop_var: str) -> m.BaseMatcherNode:
    return m.Comparison(
        left=m.Name(loop_var),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )


_FLAG_TEST = m.Call(
    func=m.Name("getattr"),
    args=[m.Arg(m.Name()), m.Arg(m.SimpleString(f'"{LAYER_FLAG}"')), m.Arg(m.Name("False"))],
) | m.Attribute(value=m.Name(), attr=m.Name(LAYER_FLAG))


def forward_shape(class_name: str, fn: cst.FunctionDef, line: int) -> ForwardShape:
    """Classify a forward that reads the capture ids; ``problem`` says why it is not ours."""

    def reject(problem: str, **known) -> ForwardShape:
        return ForwardShape(class_name, line, problem=problem, **known)

    from codemods.upstream import family_entry  # imports this module

    if family_entry.is_entry_forward(fn):
        return family_entry.analyse_forward(class_name, fn, line)
    from codemods.upstream import family_snapshot

    if family_snapshot.is_snapshot_forward(fn):
        return family_snapshot.analyse_forward(class_name, fn, line)
    if not isinstance(fn.body, cst.IndentedBlock):
        return reject("forward has no block body")
    body = list(fn.body.body)
    proxy_param = next(
        (p.name.value for p in fn.params.params if p.name.value == "pp_proxy_tensors"), None
    )
    if proxy_param is None:
        return reject("forward takes no pp_proxy_tensors (model does not run under PP)")
    handoff = non_last_return_index(body)
    if handoff is None:
        return reject("no `return PPProxyTensors(...)` under `if not ...is_last_rank`")
    proxy_value = proxy_return_of(body[handoff]).value.args
    if len(proxy_value) != 1:
        return reject("PPProxyTensors(...) does not take one dict")
    arg = proxy_value[0].value
    if isinstance(arg, cst.Dict):
        proxy_arg = "dict"
        if any(not isinstance(el, cst.DictElement) for el in arg.elements) or any(
            "\n" in code_of(el.key) + code_of(el.value) or "#" in code_of(el)
            for el in arg.elements
        ):
            return reject("PPProxyTensors dict has multi-line entries or comments")
    elif isinstance(arg, cst.Name):
        proxy_arg = "name"
    else:
        return reject("PPProxyTensors(...) argument is neither a dict literal nor a name")

    ids_attrs = sorted({node.attr.value for node in m.findall(fn, SELF_IDS)})
    if len(ids_attrs) > 1:
        return reject(f"reads capture ids from several attributes ({', '.join(ids_attrs)})")
    ids_attr = ids_attrs[0] if ids_attrs else IDS_ATTR

    kinds: list[str] = []
    aux_names: set[str] = set()
    accounted: list[cst.CSTNode] = []
    gates: set[tuple[str, ...]] = set()
    gate_assignments: set[int] = set()
    for loop in m.findall(fn, m.For()):
        loop_var = _layer_loop_var(loop)
        if loop_var is None:
            continue
        for branch in m.findall(loop, m.If()):
            conjuncts = conjuncts_of(branch.test)
            by_id = [c for c in conjuncts if m.matches(c, _ids_test(loop_var))]
            if not by_id:
                continue
            appended = m.findall(
                branch.body,
                m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append"))),
            )
            if not appended:
                return reject(f"`if {loop_var} in self.{ids_attr}` block appends nothing")
            found = _gate_of(body, loop, [c for c in conjuncts if c is not by_id[0]])
            if isinstance(found, str):
                return reject(found)
            gate, assignments = found
            gates.add(gate)
            gate_assignments.update(assignments)
            accounted.extend(body[k] for k in assignments)
            aux_names.update(call.func.value.value for call in appended)
            # Either way the capture of id i is taken in iteration i, on the stage
            # that owns layer i: before the layer runs (ids stored as layer + 1) or
            # after it (raw layer ids).
            kinds.append("loop-append" if _before_layer_call(loop, branch) else "after-layer")
            accounted.append(branch.test)
        boundary = _boundary_captures(body, loop, loop_var)
        if boundary is not None:
            names, tests = boundary
            aux_names.update(names)
            kinds.append("boundaries")
            accounted.extend(tests)
        for arg_node in m.findall(loop, m.Arg(keyword=m.Name(CAPTURE_KWARG))):
            value = arg_node.value
            if m.matches(
                value,
                m.IfExp(
                    test=_ids_test(loop_var) | _FLAG_TEST,
                    body=m.Name(),
                    orelse=m.Name("None"),
                ),
            ):
                aux_names.add(value.body.value)
                by_id = m.matches(value.test, m.Comparison())
                kinds.append("layer-kwarg" if by_id else "layer-flag")
                accounted.append(value.test)
            elif not m.matches(value, m.Name("None")):
                return reject(f"unrecognised `{CAPTURE_KWARG}=` value: {code_of(value)}")
    if not kinds:
        tests = [
            code_of(node.test)
            for node in m.findall(fn, m.If())
            if m.findall(node.test, SELF_IDS)
        ]
        where = f"; captures under `{' '.join(tests[0].split())}`" if tests else ""
        return reject(f"no capture in iteration i of the layer loop (`i in self.{ids_attr}`){where}")
    if len(aux_names) != 1:
        return reject(f"captures go to several lists: {', '.join(sorted(aux_names))}")
    aux_name = aux_names.pop()
    if len(gates) > 1:
        return reject("captures are taken under different conditions")
    gate_parts = gates.pop() if gates else ()
    gate_names = {part for part in gate_parts if part.isidentifier()}
    init_index = _list_init_index(body[:handoff], aux_name, gate_names)
    if init_index is None:
        return reject(f"`{aux_name}` is not created as `[]` / an accumulator before the loop")
    collect_in_else = None
    gated_collect_before = None
    if gate_parts:
        if m.findall(fn, m.Name(OUTGOING_LOCAL)):
            return reject(f"forward already uses the name `{OUTGOING_LOCAL}`")
        # The gathering goes where the last stage first reads its captures.
        placement = _first_reader(body, handoff, aux_name)
        if placement is None:
            return reject(f"the last stage never reads `{aux_name}`")
        gated_collect_before, collect_in_else = placement

    final_capture = False
    collect_before: int | None = None
    for reference in m.findall(fn, _SIZE_READ):
        accounted.append(reference)  # emptiness / size checks read the same on every rank
    accounted_ids: set[int] = set().union(*(node_ids(node) for node in accounted))
    statement_ids = [node_ids(statement) for statement in body]
    for reference in m.findall(fn, SELF_IDS):
        if id(reference) in accounted_ids:
            continue
        statement_index = next(
            (k for k, ids in enumerate(statement_ids) if id(reference) in ids), -1
        )
        owner = body[statement_index] if statement_index >= 0 else None
        if statement_index == init_index:
            continue  # e.g. AuxHiddenStatePacker(len(self.layers_to_capture))
        if statement_index > handoff:
            final_capture = True  # last stage only: captures the stage output
            continue
        if statement_index > init_index and m.matches(owner, _LAST_RANK_CAPTURE):
            # Captures the stage output on the last rank before the handoff: the
            # gathered captures of all stages must come first.
            final_capture = True
            if collect_before is None:
                collect_before = statement_index
            continue
        snippet = code_of(owner).strip().splitlines()[0] if owner is not None else "?"
        return reject(f"reads capture ids outside the recognised capture point: `{snippet}`")
    if gate_parts and final_capture:
        return reject("captures the stage output as well as under a condition")
    return ForwardShape(
        class_name,
        line,
        aux_name=aux_name,
        capture_kinds=tuple(dict.fromkeys(kinds)),
        proxy_arg=proxy_arg,
        proxy_param=proxy_param,
        final_capture=final_capture,
        collect_before=gated_collect_before if gate_parts else collect_before,
        ids_attr=ids_attr,
        gate=" and ".join(gate_parts) or None,
        gate_assignments=tuple(sorted(gate_assignments)),
        collect_in_else=collect_in_else,
        stale_comments=_last_stage_comments(body, sorted(gate_assignments)),
    )


def conjuncts_of(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an ``a and b and c`` chain (``[test]`` for anything else)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return conjuncts_of(test.left) + conjuncts_of(test.right)
    return [test]


#: ``hidden_states.shape[0] != 0`` / ``> 0``: the batch is not empty.  The token count
#: is the same on every PP stage, so such a condition holds on all stages or on none.
_NON_EMPTY = m.Comparison(
    left=m.Subscript(
        value=m.Attribute(value=m.Name(), attr=m.Name("shape")),
        slice=[m.SubscriptElement(m.Index(m.Integer("0")))],
    ),
    comparisons=[
        m.ComparisonTarget(operator=m.NotEqual() | m.GreaterThan(), comparator=m.Integer("0"))
    ],
)
LAST_RANK = m.Attribute(value=_PP_GROUP, attr=m.Name("is_last_rank"))


def _gate_of(body, loop: cst.For, conditions) -> tuple[tuple[str, ...], list[int]] | str:
    """The capture condition besides ``i in ids``, as source parts, and the indices of
    the top-level statements defining its names; or why it may differ between stages.

    Allowed: ``<x>.shape[0] != 0`` (the token count is the same on every stage) and
    names assigned once, at the top level, before the layer loop (``capture_aux =
    ...``); a ``<pp>.is_last_rank`` operand of such a name is dropped by the rewrite.
    """
    top = next(
        (k for k, statement in enumerate(body) if any(n is loop for n in _loops_in(statement))),
        None,
    )
    parts: list[str] = []
    assignments: list[int] = []
    for condition in conditions:
        text = " ".join(code_of(condition).split())
        if m.matches(condition, _NON_EMPTY):
            parts.append(text)
            continue
        if not isinstance(condition, cst.Name) or top is None:
            return f"captures under `{text}`, which may differ between PP stages"
        index = _single_assignment(body, condition.value)
        if index is None or index >= top:
            return (
                f"capture condition `{text}` is not assigned once before the layer loop"
            )
        parts.append(text)
        assignments.append(index)
    return tuple(parts), assignments


def _loops_in(statement: cst.CSTNode) -> list[cst.CSTNode]:
    return [statement, *m.findall(statement, m.For())]


_LAST_STAGE_WORDS = re.compile(
    r"\b(last|final)\s+(pipeline\s+|PP\s+)?(stage|rank)\b|is_last_rank", re.IGNORECASE
)


def _last_stage_comments(body, indices: list[int]) -> tuple[str, ...]:
    """First lines of the comment blocks right above the gate assignments (or the
    statement before one) that speak of the last PP stage."""
    found = []
    for index in indices:
        for k in (index - 1, index):
            if k < 0:
                continue
            comments = [
                line.comment.value for line in body[k].leading_lines if line.comment is not None
            ]
            if comments and _LAST_STAGE_WORDS.search(" ".join(comments)):
                found.append(comments[0])
    return tuple(dict.fromkeys(found))


def _single_assignment(body, name: str) -> int | None:
    """Index of the one top-level ``name = ...`` / ``name: T = ...`` of ``body``."""
    target = m.Name(name)
    pattern = m.SimpleStatementLine(
        body=[m.Assign(targets=[m.AssignTarget(target)]) | m.AnnAssign(target=target)]
    )
    found = [k for k, statement in enumerate(body) if m.matches(statement, pattern)]
    every = sum(
        len(m.findall(statement, m.AssignTarget(target=target) | m.AnnAssign(target=target)))
        for statement in body
    )
    if len(found) != 1 or every != 1:
        return None
    return found[0]


def _first_reader(body, handoff: int, aux_name: str) -> tuple[int | None, int | None] | None:
    """Where the last stage first reads ``aux_name`` after the handoff: ``(top-level
    index, None)``, or ``(None, index in the handoff's else block)``."""
    reads = m.Name(aux_name)
    branch = body[handoff]
    if isinstance(branch.orelse, cst.Else):
        for k, statement in enumerate(branch.orelse.body.body):
            if m.findall(statement, reads):
                return None, k
    for k in range(handoff + 1, len(body)):
        if m.findall(body[k], reads):
            return k, None
    return None


_SIZE_READ = m.UnaryOperation(operator=m.Not(), expression=SELF_IDS) | m.Call(
    func=m.Name("len"), args=[m.Arg(SELF_IDS)]
)
_LAST_RANK_CAPTURE = m.If(
    test=m.BooleanOperation(
        left=m.Attribute(value=_PP_GROUP, attr=m.Name("is_last_rank")),
        operator=m.And(),
        right=m.Comparison(
            comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)]
        ),
    )
)


def _appended_names(node: cst.CSTNode) -> list[str]:
    calls = m.findall(node, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append"))))
    return [call.func.value.value for call in calls]


def _boundary_captures(body, loop: cst.For, loop_var: str):
    """Captures at layer boundaries: ``if self.start_layer in ids`` before a top-level
    loop, and ``if i + 1 in ids`` after the layer call inside it (boundary ``i + 1`` is
    the output of layer ``i``).  Returns (aux names, the tests) or ``None``."""
    if loop not in body:
        return None
    start_test = m.Comparison(
        left=m.Attribute(value=m.Name("self"), attr=m.Name("start_layer")),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )
    after_test = m.Comparison(
        left=m.BinaryOperation(left=m.Name(loop_var), operator=m.Add(), right=m.Integer("1")),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )
    before = body[: body.index(loop)]
    starts = [stmt for stmt in before if m.matches(stmt, m.If(test=start_test))]
    afters = m.findall(loop, m.If(test=after_test))
    if len(starts) != 1 or len(afters) != 1:
        return None
    names = _appended_names(starts[0]) + _appended_names(afters[0])
    if not names or _before_layer_call(loop, afters[0]):
        return None
    return names, [starts[0].test, afters[0].test]


def _layer_loop_var(loop: cst.For) -> str | None:
    """The global layer index of a layer loop: ``for i in range(...)``, or
    ``for i, layer in enumerate(...)`` whose body starts with ``i = i + self.start_layer``."""
    if m.matches(loop, m.For(target=m.Name(), iter=m.Call(func=m.Name("range")))):
        return loop.target.value
    if not m.matches(
        loop,
        m.For(
            target=m.Tuple(elements=[m.Element(m.Name()), m.Element(m.Name())]),
            iter=m.Call(func=m.Name("enumerate")),
        ),
    ):
        return None
    name = loop.target.elements[0].value.value
    offset = m.BinaryOperation(
        left=m.Name(name),
        operator=m.Add(),
        right=m.Attribute(value=m.Name("self"), attr=m.Name("start_layer")),
    )
    first = loop.body.body[0] if loop.body.body else None
    if m.matches(
        first,
        m.SimpleStatementLine(
            body=[m.Assign(targets=[m.AssignTarget(target=m.Name(name))], value=offset)]
        ),
    ):
        return name
    return None


def _list_init_index(
    body: list[cst.BaseStatement], name: str, gate_names: set[str] = frozenset()
) -> int | None:
    """Index of the top-level ``name = []`` (or ``name: T = []``, or an accumulator
    call), possibly inside ``if <gate name>:``."""
    value = m.List(elements=[]) | m.Call(func=m.Name())
    pattern = m.SimpleStatementLine(
        body=[
            m.Assign(targets=[m.AssignTarget(target=m.Name(name))], value=value)
            | m.AnnAssign(target=m.Name(name), value=value)
        ]
    )
    gated = m.If(
        test=m.Name(value=m.MatchIfTrue(lambda v: v in gate_names)),
        body=m.IndentedBlock(body=[pattern]),
        orelse=None,
    )
    for index, statement in enumerate(body):
        if m.matches(statement, pattern) or m.matches(statement, gated):
            return index
    return None


def _before_layer_call(loop: cst.For, branch: cst.If) -> bool:
    """``branch`` runs before anything in its block assigns ``hidden_states``."""
    for block in m.findall(loop, m.IndentedBlock()):
        statements = list(block.body)
        if branch not in statements:
            continue
        for statement in statements[: statements.index(branch)]:
            if m.findall(statement, m.AssignTarget(target=m.Name("hidden_states"))) or m.findall(
                statement,
                m.AssignTarget(
                    target=m.Tuple(
                        elements=[m.Element(m.Name("hidden_states")), m.ZeroOrMore()]
                    )
                ),
            ):
                return False
        return True
    return False


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
    for branch in m.findall(forward, m.If()):
        test = code_of(branch.test)
        if CAPTURE_FLAG in test or "is_last_rank" in test:
            guarded |= node_ids(branch.body)
    pattern = m.SimpleStatementLine(
        body=[m.Assign(targets=[m.AssignTarget(target=m.Tuple())], value=m.Call())]
    )
    found = []
    for statement in m.findall(forward, pattern):
        call = statement.body[0].value
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
    assign = found[0].body[0]
    return f"{code_of(assign.targets[0].target)} = {code_of(assign.value.func)}(...)"
