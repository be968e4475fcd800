"""Refuse aux capture under PP where the runner configures it, for a model that does not relay it.

The patch declares ``pp_aux_relay_methods`` on each decoder stack whose forward it makes
relay captures across pipeline stages, and on the causal-LM classes whose hooks set that
relay up; the server-argument validation (``relax.py``) reads the latter on 0.5.21+,
and older releases refuse speculative decoding with PP outright.  Neither stops a model
that does not relay from reaching the capture by another path (``ModelRunner`` driven
directly, an architecture override, a model loaded by another entry point), and its
non-last stages would drop their captures without an error.  This module puts the question
where the runner calls a capture hook: every call ``<model>.<hook>(...)`` of a hook whose
rewrite relays a method (:data:`~codemods.catalog.methods.RELAY_HOOKS`) under
``sglang/srt/model_executor/`` (found with LibCST, whatever
the release: ``ModelRunner`` and ``CudaGraphRunner`` up to 0.5.15,
``configure_aux_hidden_state_capture`` in ``model_runner_components/attention_backend_setup.py``
from 0.5.16) gets, right after it, the shipped ``check_pp_aux_capture``, which raises
``NotImplementedError`` (as the capture hooks do for a PP they do not support) naming the
class, the method and why when the PP world size is above 1 and the decoder stack the hook
gave a relay to (``set_pp_aux_capture``) does not relay that method (the class that defines
its ``forward`` does not declare it, or the stack no longer runs that ``forward``), so a
class that keeps a relaying stack is admitted whatever class holds it (a wrapper, a
subclass, a class that delegates to another causal LM); the method is given as its
registry name (``<METHOD>`` below: the method of the hook called,
DFLASH for ``set_dflash_layers_to_capture``, EAGLE3 for ``set_eagle3_layers_to_capture``).

The PP world size is the runner's.  In a method of a runner class (first parameter
``self``) it is ``self.pp_size`` where the class's ``__init__`` sets it (before the call
when the call is in ``__init__``: ``ModelRunner``'s ``pp_size`` argument up to 0.5.15,
``CudaGraphRunner``'s), else the one ``pp_size=self...`` value the class passes elsewhere.
Before (``model_runner.py``, 0.5.14)::

    if self.dflash_use_aux_hidden_state:
        ...
        self.model.set_dflash_layers_to_capture(self.dflash_target_layer_ids)

after::

    if self.dflash_use_aux_hidden_state:
        ...
        self.model.set_dflash_layers_to_capture(self.dflash_target_layer_ids)
        check_pp_aux_capture(self.model, "<METHOD>", self.pp_size)

A module-level function gets a last parameter ``pp_size: int = 1`` (keyword-only where the
function is; laid out as black would), its checks read it, and every call of it in the
runner package passes the calling runner's PP world size by keyword (``ModelRunner``:
``self.ps.pp_size`` on 0.5.16-0.5.20, ``self.pp_size`` on 0.5.21,
``self.pp_group.world_size`` from 0.5.22).  A caller without it, such as SGLang's own tests
of the function (one stage, no PP group), keeps working.  Before
(``attention_backend_setup.py`` and ``model_runner.py``, 0.5.23)::

    def configure_aux_hidden_state_capture(
        *,
        model,
        ...
        is_dspark: bool,
    ) -> None:
        ...
        if eagle_use_aux_hidden_state:
            ...
            model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)

        configure_aux_hidden_state_capture(
            model=self.model,
            ...
            is_dspark=self.spec_aux_config.is_dspark,
        )

after::

    def configure_aux_hidden_state_capture(
        *,
        model,
        ...
        is_dspark: bool,
        pp_size: int = 1,
    ) -> None:
        ...
        if eagle_use_aux_hidden_state:
            ...
            model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)
            check_pp_aux_capture(model, "<METHOD>", pp_size)
        ...

        configure_aux_hidden_state_capture(
            model=self.model,
            ...
            is_dspark=self.spec_aux_config.is_dspark,
            pp_size=self.pp_group.world_size,
        )

Elsewhere (a nested function, a class without a PP size of its own; no release) the check
reads ``get_pp_group().world_size``, imported from ``sglang.srt.distributed.parallel_state``
where the file does not import it already, and so does a call whose runner has no PP size
of its own.  A call already followed by its check, or already passing ``pp_size``, is left
alone, so a patched tree regenerates to nothing.  A hook call this module cannot place a
check after (not a statement of its own, outside a function), a call of such a function
that cannot pass ``pp_size`` (``**kwargs``, in a statement's header), or such a function
with no call in the runner package, is reported by file, function and line, and nothing
is guarded then.  A runner file an earlier part changed is built on (``base``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from codemods.catalog.methods import RELAY_HOOKS
from codemods.upstream.edit.arguments import has_parameter, with_parameter
from codemods.upstream.edit.change_kinds import VALIDATION, Role
from codemods.upstream.edit.imports import add_from_import, imported_names
from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.edit.pyformat import INDENT, Call, parse_statements, render_call
from codemods.upstream.edit.walk import code_of, findall
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.tree.test_variants import FEATURES, select, tree_features

CHECK = "check_pp_aux_capture"
#: The runner's package: every file under it that calls a capture hook is guarded.
RUNNER_PACKAGE = "sglang.srt.model_executor"
#: Capture hook -> its capture method.
HOOKS = RELAY_HOOKS
PP_GROUP_MODULE = "sglang.srt.distributed.parallel_state"
PP_GROUP = "get_pp_group"
GROUP_SIZE = f"{PP_GROUP}().world_size"
SELF_SIZE = "self.pp_size"
#: The parameter a module-level function with a hook call gets, and what its callers pass.
PARAM = "pp_size"
PARAM_DEF = f"{PARAM}: int = 1"


@dataclass(frozen=True)
class GuardSite:
    """One runner call of a capture hook, and the check after it."""

    path: str  # patch path of the file
    line: int
    function: str  # ``Class.method`` or ``function``
    method: str  # the method of the hook called (:data:`HOOKS`)
    model: str  # the receiver, as written
    pp_size: str  # the PP world size the check is given
    guarded: bool  # the check was there already

    @property
    def file(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Unguarded:
    """A runner call of a capture hook this module cannot put a check after."""

    path: str
    line: int
    function: str
    why: str

    def describe(self) -> str:
        where = f" in {self.function}" if self.function else ""
        return f"{self.path}:{self.line}{where}: {self.why}"


@dataclass(frozen=True)
class SizeCall:
    """A runner call of a module-level function whose check reads ``pp_size``, and the
    PP world size it passes."""

    path: str
    line: int
    function: str  # the caller: ``Class.method`` or ``function``
    callee: str
    pp_size: str
    passed: bool  # it passed ``pp_size`` already

    @property
    def file(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class GuardResult:
    """What the runtime guard found in a tree: every runner call of a hook, those no check
    can precede, and the changed runner files (none when a call cannot be guarded)."""

    sites: tuple[GuardSite, ...] = ()
    unguarded: tuple[Unguarded, ...] = ()
    changes: tuple[FileChange, ...] = ()
    #: Patch path of the runner package (for messages).
    package: str = ""
    #: The runner's calls that pass ``pp_size`` to a function whose check reads it.
    callers: tuple[SizeCall, ...] = ()


@dataclass(frozen=True)
class Scope:
    names: tuple[str, ...] = ()
    #: The class whose method holds the call, that method, the depth of its body, and
    #: the index in that body of the statement that holds the call.
    cls: cst.ClassDef | None = None
    method: cst.FunctionDef | None = None
    method_depth: int = -1
    top: int = -1
    #: The module-level function that holds the call (not in a class).
    function: cst.FunctionDef | None = None

    def entered(self, definition: cst.ClassDef | cst.FunctionDef, depth: int) -> Scope:
        """The scope of ``definition``'s body, ``definition`` a statement of this scope at
        block depth ``depth``."""
        names = (*self.names, definition.name.value)
        if isinstance(definition, cst.ClassDef):
            return Scope(names, definition)
        if self.cls is not None and self.method is None:
            return Scope(names, self.cls, definition, depth + 1)
        if not self.names:
            return Scope(names, function=definition)
        return replace(self, names=names)


def _hook_of(node: cst.CSTNode) -> str | None:
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in HOOKS
    ):
        return node.func.attr.value
    return None


def _hook_calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    """Every hook call in ``node``, in source order."""
    if isinstance(node, cst.Call) and _hook_of(node) is not None:
        yield node
    for child in node.children:
        yield from _hook_calls(child)


def _sets_pp_size(statement: cst.CSTNode) -> bool:
    """``self.pp_size = ...`` (or annotated) on one statement line."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Assign):
            if any(code_of(t.target) == SELF_SIZE for t in small.targets):
                return True
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            if code_of(small.target) == SELF_SIZE:
                return True
    return False


def runner_pp_size(scope: Scope) -> str | None:
    """The PP world size the runner holds, in a method (first parameter ``self``) of its
    class: ``self.pp_size`` where ``__init__`` sets it at its top level (before the call
    when the call is in ``__init__``), else the one ``pp_size=self...`` value the class
    passes elsewhere (``self.ps.pp_size``, ``self.pp_group.world_size``); None without
    one."""
    if scope.cls is None or scope.method is None:
        return None
    params = scope.method.params.params
    if not params or params[0].name.value != "self":
        return None
    init = next(
        (
            s
            for s in scope.cls.body.body
            if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"
        ),
        None,
    )
    if init is not None and isinstance(init.body, cst.IndentedBlock):
        body = list(init.body.body)
        end = scope.top if scope.method is init else len(body)
        if any(_sets_pp_size(s) for s in body[:end]):
            return SELF_SIZE
    passed = _passed_pp_sizes(scope.cls)
    return passed[0] if len(passed) == 1 else None


def _passed_pp_sizes(cls: cst.ClassDef) -> list[str]:
    """The distinct ``self...`` values the class passes as ``pp_size=``, in source order."""
    found: dict[str, None] = {}
    for arg in findall(cls, m.Arg(keyword=m.Name(PARAM))):
        value = code_of(arg.value)
        if value.startswith("self."):
            found[value] = None
    return list(found)


def pp_size_expression(scope: Scope) -> str:
    """The runner's PP world size where the scope has it (:func:`runner_pp_size`); in a
    module-level function the parameter ``pp_size`` its callers pass (the guard adds it);
    else ``get_pp_group().world_size``."""
    size = runner_pp_size(scope)
    if size is not None:
        return size
    if scope.cls is None and scope.function is not None:
        return PARAM
    return GROUP_SIZE


def _is_check(statement: cst.CSTNode, model: str, method: str) -> bool:
    """``check_pp_aux_capture(<model>, "<method>", ...)`` on a statement line."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    expr = statement.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
        return False
    args = expr.value.args
    return (
        code_of(expr.value.func) == CHECK
        and len(args) >= 2
        and code_of(args[0].value) == model
        and isinstance(args[1].value, cst.SimpleString)
        and args[1].value.evaluated_value == method
    )


class _Finder:
    """One walk over a module's blocks: each hook call, where it is, the check it needs."""

    def __init__(self, module: cst.Module, text: str, path: str) -> None:
        self.path = path
        #: Line of each hook call, in source order (for messages).
        self.lines = [text.count("\n", 0, found.start()) + 1 for found in CALL_TEXT.finditer(text)]
        self.order = {id(call): n for n, call in enumerate(_hook_calls(module))}
        self.sites: list[GuardSite] = []
        self.unguarded: list[Unguarded] = []
        #: id of a hook call's statement -> the check to put after it.
        self.inserts: dict[int, cst.SimpleStatementLine] = {}
        #: Module-level functions whose checks read their parameter ``pp_size``.
        self.parameters: dict[int, cst.FunctionDef] = {}
        self.seen: set[int] = set()
        self.block(module.body, Scope(), 0)
        for call in _hook_calls(module):
            if id(call) not in self.seen:
                self.refuse(call, "", "outside a function body")

    def line(self, call: cst.Call) -> int:
        n = self.order.get(id(call), -1)
        return self.lines[n] if 0 <= n < len(self.lines) else 0

    def refuse(self, call: cst.Call, function: str, why: str) -> None:
        self.seen.add(id(call))
        self.unguarded.append(Unguarded(self.path, self.line(call), function, why))

    def refuse_all(self, node: cst.CSTNode, scope: Scope, why: str) -> None:
        for call in _hook_calls(node):
            if id(call) not in self.seen:
                self.refuse(call, ".".join(scope.names), why)

    def block(self, body: Sequence[cst.BaseStatement], scope: Scope, depth: int) -> None:
        for index, statement in enumerate(body):
            inner = scope
            if scope.method is not None and depth == scope.method_depth:
                inner = replace(scope, top=index)
            if isinstance(statement, cst.SimpleStatementLine):
                if scope.names:
                    self.statement(statement, body, index, inner, depth)
            elif isinstance(statement, (cst.ClassDef, cst.FunctionDef)):
                self.suite(statement.body, inner.entered(statement, depth), depth)
            else:
                self.compound(statement, inner, depth)

    def compound(self, node: cst.CSTNode, scope: Scope, depth: int) -> None:
        """``if``/``for``/``while``/``with``/``try`` and their ``else``/``except``/``finally``:
        their blocks are walked; a hook call in a header cannot be guarded."""
        for child in node.children:
            if isinstance(child, cst.BaseSuite):
                self.suite(child, scope, depth)
            elif isinstance(child, (cst.If, cst.Else, cst.ExceptHandler, cst.Finally)):
                self.compound(child, scope, depth)
            elif isinstance(child, cst.BaseCompoundStatement):
                self.compound(child, scope, depth)
            else:
                self.refuse_all(child, scope, "the call is part of a statement's header")

    def suite(self, suite: cst.BaseSuite, scope: Scope, depth: int) -> None:
        if not isinstance(suite, cst.IndentedBlock):
            self.refuse_all(suite, scope, "on the line of its block's header")
        elif suite.indent is not None and suite.indent != INDENT:
            self.refuse_all(suite, scope, "in a block not indented by 4 spaces")
        else:
            self.block(suite.body, scope, depth + 1)

    def statement(
        self,
        statement: cst.SimpleStatementLine,
        body: Sequence[cst.BaseStatement],
        index: int,
        scope: Scope,
        depth: int,
    ) -> None:
        calls = list(_hook_calls(statement))
        if not calls:
            return
        function = ".".join(scope.names)
        small = statement.body[0] if len(statement.body) == 1 else None
        call = small.value if isinstance(small, cst.Expr) else None
        if len(calls) != 1 or call is not calls[0]:
            self.refuse_all(statement, scope, "the call is not a statement of its own")
            return
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        self.seen.add(id(call))
        method = HOOKS[call.func.attr.value]
        model = code_of(call.func.value)
        guarded = index + 1 < len(body) and _is_check(body[index + 1], model, method)
        size = pp_size_expression(scope)
        if size == PARAM and scope.function is not None:
            self.parameters[id(scope.function)] = scope.function
        site = GuardSite(self.path, self.line(call), function, method, model, size, guarded)
        self.sites.append(site)
        if guarded:
            return
        indent = INDENT * depth
        lines = render_call(indent, "", Call(CHECK, (model, f'"{method}"', size)))
        (check,) = parse_statements("".join(f"{line}\n" for line in lines), indent)
        assert isinstance(check, cst.SimpleStatementLine)
        self.inserts[id(statement)] = check.with_changes(leading_lines=())


CALL_TEXT = re.compile(r"\.\s*(?:" + "|".join(map(re.escape, HOOKS)) + r")\s*\(")


class _Insert(cst.CSTTransformer):
    """Puts each check right after its call's statement, and gives each function in
    ``parameters`` its new parameter list."""

    def __init__(
        self,
        inserts: dict[int, cst.SimpleStatementLine],
        parameters: dict[int, cst.FunctionDef] | None = None,
    ) -> None:
        self.inserts = inserts
        self.parameters = parameters or {}

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if not any(id(s) in self.inserts for s in original_node.body):
            return updated_node
        body: list[cst.BaseStatement] = []
        for old, new in zip(original_node.body, updated_node.body, strict=True):
            check = self.inserts.get(id(old))
            if check is not None and isinstance(new, cst.SimpleStatementLine):
                body += [new, check]
            else:
                body.append(new)
        return updated_node.with_changes(body=body)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        header = self.parameters.get(id(original_node))
        if header is None:
            return updated_node
        return updated_node.with_changes(
            params=header.params, whitespace_before_params=header.whitespace_before_params
        )


@dataclass(frozen=True)
class GuardedFile:
    text: str
    sites: tuple[GuardSite, ...]
    unguarded: tuple[Unguarded, ...]
    #: The module-level functions whose checks read their parameter ``pp_size``.
    functions: tuple[str, ...] = ()


def guard(source: str, path: str) -> GuardedFile:
    """``source`` with the check after each hook call (unchanged when every call has it,
    or when a call cannot have it: ``unguarded`` says which and why); a module-level
    function whose check reads ``pp_size`` gets that parameter (``PARAM_DEF``)."""
    module = parse_text(source)
    found = _Finder(module, source, path)
    sites, unguarded = tuple(found.sites), tuple(found.unguarded)
    functions = tuple(fn.name.value for fn in found.parameters.values())
    headers = {
        key: with_parameter(fn, PARAM_DEF, "")
        for key, fn in found.parameters.items()
        if not has_parameter(fn, PARAM)
    }
    if unguarded or not (found.inserts or headers):
        return GuardedFile(source, sites, unguarded, functions)
    module = module.visit(_Insert(found.inserts, headers))
    if any(s.pp_size == GROUP_SIZE and not s.guarded for s in sites):
        bound = any(PP_GROUP in imported_names(module, name) for name in from_modules(module))
        if not bound:
            module = add_from_import(module, PP_GROUP_MODULE, [PP_GROUP])
    if found.inserts:
        module = add_from_import(module, GLUE_MODULE, [CHECK])
    return GuardedFile(module.code, sites, unguarded, functions)


def from_modules(module: cst.Module) -> set[str]:
    """The modules the module's top-level ``from ... import`` statements name."""
    names = set()
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.ImportFrom) and small.module is not None:
                    names.add(code_of(small.module))
    return names


#: The shipped test of the relay, the opt-in, this guard and the relaxed validation.
RELAY_TEST_FILE = "test_pp_aux_relay.py"
RELAY_TEST_SOURCE = Path(__file__).resolve().parent.parent / "shipped" / RELAY_TEST_FILE


def relay_test(tree: SGLangTree | None = None) -> dict[str, str]:
    """File name -> text of the shipped relay test, in the form ``tree``'s release needs
    (``test_variants``: where the runner configures the capture; by default the newest)."""
    features = tree_features(tree) if tree is not None else dict.fromkeys(FEATURES, True)
    return {RELAY_TEST_FILE: select(RELAY_TEST_SOURCE.read_text(encoding="utf-8"), features)}


def relay_test_changes(tree: SGLangTree, tests: dict[str, str]) -> list[FileChange]:
    """The shipped relay test, in a tree with a test folder (a package tree has none)."""
    if tree.tests is None:
        return []
    changes = []
    for name, text in tests.items():
        path = tree.test_path(name)
        changes.append(FileChange(path, tree.read_text(path), text, VALIDATION, Role.RELAY_TEST))
    return [c for c in changes if c.changed]
