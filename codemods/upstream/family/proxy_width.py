"""The width of the aux entry and the relay declaration, as the family patch writes them.

**Width.**  SGLang's CUDA graph runners preallocate each extra ``PPProxyTensors`` entry of
a non-first stage; the aux entry is as wide as the hidden states of the captures an earlier
stage hands on.  The rewritten hook passes that width to ``set_pp_aux_capture``, from the
config the class builds its decoder stack with, derived here from the class's
``__init__`` (:func:`hook_width`)::

    self.config = config
    self.model = LlamaModel(config, ...)                  ->  self.config.hidden_size
    self.config = config
    self.language_model = Gemma4TextModel(config.text_config, ...)
                                                 ->  self.config.text_config.hidden_size
    text_config = config.text_config
    self.config = text_config
    self.model = Glm5NextModel(text_config, ...)         ->  self.config.hidden_size

The stack's config is the constructor's ``config=`` argument, else its first positional one
(through a factory method of the class, ``self._init_model(config, ...)``, to the argument
the factory builds the stack with); a local name is followed to its one assignment, and the
result is reached from an attribute ``__init__`` sets on ``self``.  A class whose stack's
config cannot be reached this way is not patched, for the reason :class:`WidthUnknown`
gives.  The CUDA-graph sizing asks the one lookup ``pp_aux_proxy_hidden_size(model)``
(shipped module), which finds the relay ``set_pp_aux_capture`` gave the decoder stack, so
a rewritten class gets no width method of its own.

**Relay declaration.**  The same classes declare, in their own body, the capture methods
whose hooks the patch rewrote, for the server-argument validation and the runtime guard
(``relays_pp_aux_capture`` of the shipped module): a subclass that defines its own
``__init__``, ``forward`` or hook is not covered by its base's declaration.  Before::

    class LlamaForCausalLM(nn.Module):
        # BitandBytes specific attributes
        default_bitsandbytes_target_modules = [

after (at the top of the class body, after a docstring if any; the names of the methods of
its rewritten hooks, in the registry's relay order: :func:`relay_methods`, here EAGLE3 then
DFLASH)::

    class LlamaForCausalLM(nn.Module):
        pp_aux_relay_methods = (<method>, <method>)

        # BitandBytes specific attributes
        default_bitsandbytes_target_modules = [
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
import libcst.matchers as m

from codemods.catalog.methods import RELAY_HOOKS
from codemods.upstream.edit.pyformat import parse_statements
from codemods.upstream.edit.walk import dotted, findall

#: The class attribute that declares the capture methods a class relays across PP stages.
SUPPORT_ATTR = "pp_aux_relay_methods"
#: The capture hooks whose rewrite relays a capture method, and the method.
HOOK_METHODS = RELAY_HOOKS


#: How the hook names the width: ``hidden_size=<the stack's config>.hidden_size``.
WIDTH_KEYWORD = "hidden_size"
#: How many local names a config is followed through.
_HOPS = 4


class WidthUnknown(ValueError):
    """Why the width of a class's captures cannot be read off its ``__init__``."""


def _config_arg(call: cst.Call) -> cst.BaseExpression | None:
    """The constructor's config: its ``config=`` argument, else its first positional one."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "config":
            return arg.value
    first = call.args[0] if call.args else None
    return first.value if first is not None and first.keyword is None and not first.star else None


def _through_factory(
    call: cst.Call, config: cst.BaseExpression, methods: Mapping[str, cst.FunctionDef]
) -> cst.BaseExpression | None:
    """For ``self.<factory>(...)``, a method of the class that returns ``Stack(<param>,
    ...)``: the argument the call passes for that parameter (None: not such a call)."""
    func = call.func
    if not m.matches(func, m.Attribute(value=m.Name("self"))):
        return config
    assert isinstance(func, cst.Attribute)
    factory = methods.get(func.attr.value)
    if factory is None:
        return config
    built = [r.value for r in findall(factory, m.Return(value=m.Call()))]
    if len(built) != 1:
        return None
    assert isinstance(built[0], cst.Call)
    inner = _config_arg(built[0])
    params = [p.name.value for p in factory.params.params][1:]
    if not isinstance(inner, cst.Name) or inner.value not in params:
        return None
    position = params.index(inner.value)
    for index, arg in enumerate(call.args):
        if (arg.keyword is None and index == position) or (
            arg.keyword is not None and arg.keyword.value == inner.value
        ):
            return arg.value
    return None


def _bindings(init: cst.FunctionDef) -> dict[str, list[str | None]]:
    """Local name -> what ``__init__`` binds it to, each time: the dotted name assigned,
    or None (a parameter, another value, another kind of binding)."""
    found: dict[str, list[str | None]] = {}
    params = init.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        found.setdefault(param.name.value, []).append(None)
    kinds = m.Assign() | m.AnnAssign() | m.AugAssign() | m.NamedExpr() | m.For() | m.AsName()
    for node in findall(init, kinds):
        pairs: list[tuple[cst.CSTNode, str | None]]
        if isinstance(node, cst.Assign):
            pairs = [(t.target, dotted(node.value)) for t in node.targets]
        elif isinstance(node, cst.AnnAssign):
            pairs = [(node.target, None if node.value is None else dotted(node.value))]
        elif isinstance(node, cst.AsName):
            pairs = [(node.name, None)]
        else:
            assert isinstance(node, (cst.AugAssign, cst.NamedExpr, cst.For))
            pairs = [(node.target, None)]
        for target, value in pairs:
            if isinstance(target, cst.Name):
                found.setdefault(target.value, []).append(value)
    return found


def _self_attributes(init: cst.FunctionDef) -> list[tuple[str, str]]:
    """``(attribute, value)`` for each ``self.<attribute> = <dotted value>`` of ``__init__``
    whose attribute it sets to that one value only, in source order."""
    values: dict[str, set[str | None]] = {}
    pattern = m.Assign(targets=[m.AssignTarget(m.Attribute(value=m.Name("self")))])
    for assign in findall(init, pattern):
        target = assign.targets[0].target
        assert isinstance(target, cst.Attribute)
        values.setdefault(target.attr.value, set()).add(dotted(assign.value))
    return [
        (attr, value)
        for attr, found in values.items()
        if len(found) == 1 and (value := next(iter(found))) is not None
    ]


def _reached_from_self(init: cst.FunctionDef, config: str) -> str:
    """``config`` (a dotted name of ``__init__``) as an expression on ``self``: through
    the attribute of ``self`` set to it or to the object it is an attribute of, following a
    local name to the one value ``__init__`` assigns it."""
    bindings = _bindings(init)
    attributes = _self_attributes(init)
    for _ in range(_HOPS):
        root = config.split(".")[0]
        if root == "self":
            return config
        bound = bindings.get(root, [])
        if len(bound) != 1:
            how = "more than once" if bound else "nowhere"
            raise WidthUnknown(f"`__init__` binds `{root}` {how}")
        reached = [
            (value == config, len(value), attr == "config", attr, value)
            for attr, value in attributes
            if config == value or config.startswith(f"{value}.")
        ]
        if reached:
            *_, attr, value = max(reached, key=lambda found: found[:3])
            return f"self.{attr}{config[len(value) :]}"
        if bound[0] is None:
            break
        config = bound[0] + config[len(root) :]
    raise WidthUnknown(f"no attribute `__init__` sets on `self` reaches `{config}`")


def hook_width(cls: cst.ClassDef | None, receiver: str) -> str:
    """The expression for the width of the captures of ``cls``'s decoder stack at
    ``receiver`` (``self.model``): ``<the config it is built from>.hidden_size``, on
    ``self``; raises :class:`WidthUnknown` naming what is missing."""
    if cls is None:
        raise WidthUnknown("the hook's class is not a class of the module")
    methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}
    init = methods.get("__init__")
    attr = receiver.removeprefix("self.")
    if init is None:
        raise WidthUnknown(f"{cls.name.value} defines no `__init__` that builds `{receiver}`")
    target = m.AssignTarget(m.Attribute(value=m.Name("self"), attr=m.Name(attr)))
    configs = set()
    for assign in findall(init, m.Assign(targets=[target], value=m.Call())):
        assert isinstance(assign.value, cst.Call)
        config = _config_arg(assign.value)
        config = None if config is None else _through_factory(assign.value, config, methods)
        configs.add(None if config is None else dotted(config))
    if not configs:
        raise WidthUnknown(f"`{cls.name.value}.__init__` does not build `{receiver}`")
    if len(configs) != 1 or None in configs:
        raise WidthUnknown(
            f"`{cls.name.value}.__init__` builds `{receiver}` from no one config it names"
        )
    return f"{_reached_from_self(init, configs.pop() or '')}.hidden_size"


def _inserted(
    cls: cst.ClassDef, body: list, position: int, source: str, blank_before: bool
) -> cst.ClassDef:
    """``cls`` with the statement of ``source`` at ``position`` of its ``body``, a blank line
    before it where ``blank_before``, and one between it and the statement it moves down
    (whose comments stay with it)."""
    blank = cst.EmptyLine(indent=False)
    (statement,) = parse_statements(source, " " * 4)
    body.insert(position, statement.with_changes(leading_lines=[blank] if blank_before else []))
    if position + 1 < len(body):
        following = body[position + 1]
        # a statement of the class block: a simple line or a compound statement
        assert isinstance(following, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        comments = [line for line in following.leading_lines if line.comment is not None]
        body[position + 1] = following.with_changes(leading_lines=[blank, *comments])
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _assigns(statement: cst.CSTNode, name: str) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        targets = (
            [t.target for t in small.targets]
            if isinstance(small, cst.Assign)
            else ([small.target] if isinstance(small, cst.AnnAssign) else [])
        )
        if any(isinstance(t, cst.Name) and t.value == name for t in targets):
            return True
    return False


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def relay_methods(hooks) -> tuple[str, ...]:
    """The capture methods of the rewritten ``hooks`` (names), in a fixed order."""
    methods = {HOOK_METHODS[h] for h in hooks if h in HOOK_METHODS}
    return tuple(method for method in HOOK_METHODS.values() if method in methods)


def add_support_attribute(cls: cst.ClassDef, methods: tuple[str, ...]) -> cst.ClassDef:
    """``cls`` with ``pp_aux_relay_methods = (<methods>)`` first in its body (after a
    docstring) and a blank line after it; unchanged when the class already assigns it."""
    body = list(cls.body.body)
    if not methods or any(_assigns(statement, SUPPORT_ATTR) for statement in body):
        return cls
    position = 1 if body and _is_docstring(body[0]) else 0
    value = ", ".join(f'"{method}"' for method in methods) + ("," if len(methods) == 1 else "")
    source = f"    {SUPPORT_ATTR} = ({value})\n"
    return _inserted(cls, body, position, source, blank_before=bool(position))
