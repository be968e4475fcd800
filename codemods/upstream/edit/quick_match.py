"""Decide the plain matchers the analysis asks with most, without LibCST's general engine.

``libcst.matchers.matches`` handles every kind of matcher (wildcards, captures, metadata,
predicates) and pays for that on each node it is asked about.  Most questions the model
analysis asks are plain: a node type with some fields given as strings, other plain
matchers, or fixed-length lists of them (``m.Call(func=m.Attribute(value=m.Name("self")))``,
``m.Name() | m.Attribute()``).  :func:`matches` answers those by comparing fields directly
and hands anything else to LibCST, so its answer is always LibCST's.

Before::

    hits = [node for node in candidates if m.matches(node, matcher)]

After::

    hits = [node for node in candidates if matches(node, matcher)]
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

_ANY = m.DoNotCare()
#: matcher class -> the fields it compares, in LibCST's order.
_FIELDS: dict[type, tuple[str, ...]] = {}


def node_type(matcher: object) -> type[cst.CSTNode] | None:
    """The node type a plain matcher such as ``m.Call(...)`` requires (matchers compare
    class names); ``None`` for combinators such as ``m.OneOf`` or ``~m.Name()``."""
    kind = getattr(cst, type(matcher).__name__, None)
    if isinstance(kind, type) and issubclass(kind, cst.CSTNode):
        return kind
    return None


def node_types(matcher: object) -> tuple[type[cst.CSTNode], ...] | None:
    """The node types ``matcher`` can match: one for a plain matcher, one per option of
    ``a | b`` made of plain matchers; ``None`` when any node may match."""
    if isinstance(matcher, m.OneOf):
        kinds = tuple(node_type(option) for option in matcher.options)
        return None if any(kind is None for kind in kinds) else kinds  # type: ignore[return-value]
    kind = node_type(matcher)
    return None if kind is None else (kind,)


def matches(node: cst.CSTNode, matcher: m.BaseMatcherNode) -> bool:
    """``libcst.matchers.matches(node, matcher)``."""
    if isinstance(matcher, m.OneOf):
        for option in matcher.options:
            decided = _plain(node, option) if node_type(option) else None
            if decided is None:
                break
            if decided:
                return True
        else:
            return False
    elif node_type(matcher) is not None:
        decided = _plain(node, matcher)
        if decided is not None:
            return decided
    return m.matches(node, matcher)


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(
            field.name for field in dataclasses.fields(kind) if field.name != "_metadata"
        )
    return names


def _plain(node: object, matcher: object) -> bool | None:
    """Whether ``node`` matches the plain ``matcher``; None when a field asks for something
    other than a string, a plain matcher, a list of those, or nothing (don't care)."""
    if type(node).__name__ != type(matcher).__name__:
        return False  # also a sentinel, None, a string or a list where a node is wanted
    for name in _fields(type(matcher)):
        wanted = getattr(matcher, name)
        if wanted is _ANY:
            continue
        if name == "metadata":
            return None
        decided = _field(getattr(node, name), wanted)
        if decided is not True:
            return decided
    return True


def _field(actual: object, wanted: object) -> bool | None:
    if type(wanted) is str:
        return actual == wanted
    if node_type(wanted) is not None:
        return _plain(actual, wanted)
    if not isinstance(wanted, (list, tuple)) or not isinstance(actual, (list, tuple)):
        return None
    if not all(item is _ANY or node_type(item) is not None for item in wanted):
        return None  # wildcards (``m.ZeroOrMore()``) and the like
    if len(actual) != len(wanted):
        return False
    for item, want in zip(actual, wanted, strict=True):
        if want is not _ANY:
            decided = _plain(item, want)
            if decided is not True:
                return decided
    return True
