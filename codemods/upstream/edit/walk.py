"""Find nodes in a LibCST tree without LibCST's visitor machinery.

``libcst.matchers.findall`` walks a tree with a visitor, which rebuilds every node it passes
(``_visit_and_replace_children``); on multi-thousand-line model files, repeated per class and
per question, that dominates the analysis.  :func:`findall` gives the same nodes in the same
order (pre-order, the tree itself first, children in the order LibCST visits them) by reading
the children straight from each node's fields, and tests a node against the matcher
(:mod:`~codemods.upstream.edit.quick_match`) only when its type is one the matcher names.  A
walk is remembered for the next questions about the same tree or a subtree of it; a question
about statements only (``m.Return()``, ``m.Assign(...)``) walks no expressions.
(``callers/fieldwalk.py`` reads fields too, but skips layout nodes and goes in declaration
order; a matcher may ask for either, so this walk keeps every node in LibCST's order.)

Before::

    calls = m.findall(fn, m.Call(func=m.Name("getattr")))

After::

    calls = findall(fn, m.Call(func=m.Name("getattr")))
"""

from __future__ import annotations

import inspect
import re
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from operator import attrgetter
from typing import Any, overload

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.quick_match import matches, node_types

#: ``visit_required(self, "name", ...)`` and its siblings, in the order a node's
#: ``_visit_and_replace_children`` visits its fields: the order children are visited in.
_VISITED_FIELD = re.compile(r'visit_\w+\(\s*self,\s*"(\w+)"')
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(kind: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        source = inspect.getsource(kind._visit_and_replace_children)  # type: ignore[attr-defined]
        fields = tuple(dict.fromkeys(_VISITED_FIELD.findall(source)))
        _CHILD_FIELDS[kind] = fields
    return fields


def _getter(kind: type) -> Callable[[cst.CSTNode], tuple[Any, ...]]:
    """Reads the child fields of a ``kind`` node as one tuple."""
    getter = _GETTERS.get(kind)
    if getter is None:
        fields = _child_fields(kind)
        if len(fields) == 1:
            one = attrgetter(fields[0])
            getter = _GETTERS[kind] = lambda node: (one(node),)
        else:
            getter = _GETTERS[kind] = attrgetter(*fields) if fields else lambda node: ()
    return getter


_GETTERS: dict[type, Callable[[cst.CSTNode], tuple[Any, ...]]] = {}
_DEFAULT = cst.MaybeSentinel.DEFAULT
_EXPRESSION = cst.BaseExpression


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes of ``node``, in the order LibCST visits them (a visited field holds
    a node, a sequence of nodes, ``None`` or ``MaybeSentinel.DEFAULT``)."""
    children: list[cst.CSTNode] = []
    for value in (_GETTERS.get(type(node)) or _getter(type(node)))(node):
        if type(value) is tuple or type(value) is list:
            children.extend(value)
        elif value is not None and value is not _DEFAULT:
            children.append(value)
    return children


#: Node types that never occur inside an expression (a lambda's body is an expression).
_STATEMENT_LEVEL = (cst.BaseStatement, cst.BaseSmallStatement, cst.BaseSuite)


def _statement_level(kinds: tuple[type, ...] | None) -> bool:
    return kinds is not None and all(issubclass(kind, _STATEMENT_LEVEL) for kind in kinds)


class _Index:
    """One walk of a tree: its nodes in visiting order, where each node's subtree ends, and
    the positions of each node type.  It answers questions about the tree and about any
    subtree of it (a method of an indexed class, a loop of an indexed method).

    ``statements_only``: the walk does not enter expressions, which hold most of a
    method's nodes; such an index answers only questions about statement-level nodes
    (``m.Return()``, ``m.Assign(...)``, ``m.If()``), which it finds all of."""

    def __init__(self, tree: cst.CSTNode, statements_only: bool = False) -> None:
        self.tree = tree  # keeps the ids below from being reused while cached
        self.statements_only = statements_only
        every: list[cst.CSTNode] = []
        parents: list[int] = []
        groups: dict[type, list[int]] = {}
        stack: list[tuple[cst.CSTNode, int]] = [(tree, -1)]
        while stack:
            node, parent = stack.pop()
            here = len(every)
            every.append(node)
            parents.append(parent)
            group = groups.get(type(node))
            if group is None:
                groups[type(node)] = [here]
            else:
                group.append(here)
            children = _children(node)
            if statements_only:
                children = [child for child in children if not isinstance(child, _EXPRESSION)]
            if children:
                children.reverse()
                stack.extend([(child, here) for child in children])
        sizes = [1] * len(every)
        for position in range(len(every) - 1, 0, -1):
            sizes[parents[position]] += sizes[position]
        self.every = every
        self.ends = [position + size for position, size in enumerate(sizes)]
        self.positions = {id(node): position for position, node in enumerate(every)}
        self.groups = groups

    def nodes(self, tree: cst.CSTNode) -> list[cst.CSTNode] | None:
        """The nodes of ``tree`` (None: ``tree`` is not in this index, or not all of it)."""
        position = None if self.statements_only else self.positions.get(id(tree))
        if position is None or self.every[position] is not tree:
            return None
        return self.every[position : self.ends[position]]

    def find(self, tree: cst.CSTNode, matcher) -> list[cst.CSTNode] | None:
        """The matches in ``tree`` (None: ``tree`` is not in this index)."""
        kinds = node_types(matcher)
        if self.statements_only and not _statement_level(kinds):
            return None
        position = self.positions.get(id(tree))
        if position is None or self.every[position] is not tree:
            return None
        end = self.ends[position]
        if kinds is None:
            candidates = self.every[position:end]
        else:
            places: list[int] = []
            for kind in dict.fromkeys(kinds):
                group = self.groups.get(kind, [])
                places += group[bisect_left(group, position) : bisect_left(group, end)]
            if len(kinds) > 1:
                places.sort()
            candidates = [self.every[k] for k in places]
        return [node for node in candidates if matches(node, matcher)]


#: The trees asked about most recently (analysis asks many questions of one class and
#: its methods in a row); bounded, so nothing outlives its use for long.
_RECENT: OrderedDict[int, _Index] = OrderedDict()
_RECENT_SIZE = 16


def forget_walks() -> None:
    """Drop the remembered walks (a run that is over lets go of its trees)."""
    _RECENT.clear()


_Tree = cst.CSTNode | cst.RemovalSentinel | cst.MaybeSentinel
_Matcher = m.BaseMatcherNode | m.MatchIfTrue[cst.CSTNode]


# A matcher of one node type (``m.Call(...)``) only ever matches nodes of that type.
@overload
def findall(tree: _Tree, matcher: m.Arg) -> list[cst.Arg]: ...


@overload
def findall(tree: _Tree, matcher: m.Assert) -> list[cst.Assert]: ...


@overload
def findall(tree: _Tree, matcher: m.Assign) -> list[cst.Assign]: ...


@overload
def findall(tree: _Tree, matcher: m.AssignTarget) -> list[cst.AssignTarget]: ...


@overload
def findall(tree: _Tree, matcher: m.Attribute) -> list[cst.Attribute]: ...


@overload
def findall(tree: _Tree, matcher: m.AugAssign) -> list[cst.AugAssign]: ...


@overload
def findall(tree: _Tree, matcher: m.Call) -> list[cst.Call]: ...


@overload
def findall(tree: _Tree, matcher: m.For) -> list[cst.For]: ...


@overload
def findall(tree: _Tree, matcher: m.FunctionDef) -> list[cst.FunctionDef]: ...


@overload
def findall(tree: _Tree, matcher: m.If) -> list[cst.If]: ...


@overload
def findall(tree: _Tree, matcher: m.IfExp) -> list[cst.IfExp]: ...


@overload
def findall(tree: _Tree, matcher: m.IndentedBlock) -> list[cst.IndentedBlock]: ...


@overload
def findall(tree: _Tree, matcher: m.Name) -> list[cst.Name]: ...


@overload
def findall(tree: _Tree, matcher: m.Raise) -> list[cst.Raise]: ...


@overload
def findall(tree: _Tree, matcher: m.Return) -> list[cst.Return]: ...


@overload
def findall(tree: _Tree, matcher: m.SimpleStatementLine) -> list[cst.SimpleStatementLine]: ...


@overload
def findall(tree: _Tree, matcher: m.SimpleString) -> list[cst.SimpleString]: ...


@overload
def findall(tree: _Tree, matcher: m.Yield) -> list[cst.Yield]: ...


@overload
def findall(tree: _Tree, matcher: _Matcher) -> list[cst.CSTNode]: ...


def findall(tree: _Tree, matcher: _Matcher) -> list[Any]:
    """What ``libcst.matchers.findall(tree, matcher)`` returns, in the same order."""
    if not isinstance(tree, cst.CSTNode):
        return []
    if not isinstance(matcher, m.BaseMatcherNode):
        return list(m.findall(tree, matcher))  # MatchIfTrue and friends: LibCST's own walk
    for key in reversed(_RECENT):
        found = _RECENT[key].find(tree, matcher)
        if found is not None:
            _RECENT.move_to_end(key)
            return found
    index = _Index(tree, statements_only=_statement_level(node_types(matcher)))
    _RECENT.pop(id(tree), None)  # a statements-only index of the same tree, if any
    _RECENT[id(tree)] = index
    if len(_RECENT) > _RECENT_SIZE:
        _RECENT.popitem(last=False)
    found = index.find(tree, matcher)
    assert found is not None
    return found


def subtree(tree: cst.CSTNode) -> list[cst.CSTNode]:
    """``tree`` and every node below it, in the order LibCST visits them (``findall`` of a
    matcher every node matches)."""
    for key in reversed(_RECENT):
        found = _RECENT[key].nodes(tree)
        if found is not None:
            _RECENT.move_to_end(key)
            return found
    return _Index(tree).every


def code_of(node: cst.CSTNode) -> str:
    """The source text of ``node`` (``Module.code_for_node``), read straight off plain
    dotted names (``a``, ``a.b.c``) without generating code."""
    name = dotted(node)
    return name if name is not None else cst.Module(body=[]).code_for_node(node)


def dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a name or attribute chain without parentheses or whitespace."""
    if isinstance(node, cst.Name):
        return None if node.lpar or node.rpar else node.value
    if isinstance(node, cst.Attribute) and not node.lpar and not node.rpar:
        dot = node.dot
        if (
            isinstance(dot.whitespace_before, cst.SimpleWhitespace)
            and isinstance(dot.whitespace_after, cst.SimpleWhitespace)
            and not dot.whitespace_before.value
            and not dot.whitespace_after.value
        ):
            left = dotted(node.value)
            right = dotted(node.attr)
            return None if left is None or right is None else f"{left}.{right}"
    return None
