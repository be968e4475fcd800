"""Codemod: handle the pipeline-parallel ``NotImplementedError`` of capture hooks.

Models that gather aux hidden states on the last pipeline stage only raise
``NotImplementedError("DSPARK aux hidden capture requires PP=1.")`` under PP.  Policy
``warn`` (the default) logs a warning naming the hook and the reason, and carries on
without capture::

    # before
    model.set_dspark_layers_to_capture([3, 18, 33])
    # after
    try:
        model.set_dspark_layers_to_capture([3, 18, 33])
    except NotImplementedError as exc:
        logger.warning(
            "set_dspark_layers_to_capture unavailable, running without aux hidden capture: %s",
            exc,
        )

Policy ``raise`` re-raises with an actionable hint, chained ``from exc``; the hint names
``auxcap upstream-patch`` only when that patch removes the error for every hook the call can
reach (:func:`codemods.catalog.pp_raise.pp_hint`: DSPARK yes, DFLASH and added hooks
``run with --pp-size 1`` only)::

    except NotImplementedError as exc:
        raise NotImplementedError(
            "set_dspark_layers_to_capture cannot capture aux hidden states "
            "under pipeline parallelism: run with --pp-size 1, "
            "or apply the upstream patch (auxcap upstream-patch)"
        ) from exc

The program stays consistent (:mod:`codemods.callers.analyse.claims`): statements after the
call that claim capture (a flag set true, ``return True``, the hook's name kept) run only when
the hook took the ids, and the handler reports capture off.  A flag goes into the ``try``'s
``else:`` and is set ``False`` in the handler; after a ``return True`` the handler returns
``False`` and the rest stays as it was (the handler leaves the function, so it runs only on
success); a claim in an enclosing block gets ``flag = False`` and ``return`` in the handler::

    # before
    model.set_dflash_layers_to_capture([3, 18])
    self.capture_enabled = True
    # after
    try:
        model.set_dflash_layers_to_capture([3, 18])
    except NotImplementedError as exc:
        logger.warning(...)
        self.capture_enabled = False
    else:
        self.capture_enabled = True

At a call that may reach several hooks, the warning names the one called, through the
expression that holds its name (``getattr(model, name)(ids)``)::

    logger.warning("%s unavailable, running without aux hidden capture: %s", name, exc)

Only calls that can reach a hook the SGLang release facts show raising
``NotImplementedError`` under PP are wrapped (:mod:`codemods.catalog.pp_raise`): DSPARK, DFLASH and
user-added hooks.  A call that can only reach EAGLE3 is left alone (its setters never raise it;
they return early on non-last ranks), and at a dynamic site the warning names only the hooks
that can raise.

Never where the code needs the capture (:mod:`codemods.callers.analyse.required`: an assert or read
of ``capture_aux_hidden_states`` / aux outputs after the call, a speculative feature flag
around it, a hook lookup that raises, serving code): there the hook's error must stop the run,
so such a call gets no ``try`` and is reported with the reason instead.

The module's own logger is used (any module-level name bound to ``logging.getLogger(...)`` or
to another logger factory, ``get_colorful_logger(__name__)``, ``init_logger(__name__)``...: see
:mod:`codemods.callers.rewrite.host_style`); otherwise ``import logging`` (when missing, where isort with the
black profile puts it) and ``logger = logging.getLogger(__name__)`` are added once, after the
imports.  Calls already inside a ``try`` that handles
``NotImplementedError`` (or a bare ``except``, ``Exception``, ``RuntimeError``, or a tuple
with one of them) are left alone.  Composed with the guard, the ``try`` goes inside the
``if``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import libcst as cst

from codemods.callers.analyse import FoundCall
from codemods.callers.records import Action
from codemods.callers.rewrite import host_style
from codemods.callers.rewrite.callsite_codemod import CallSiteCodemod
from codemods.callers.rewrite.libcst_command import lazy_command
from codemods.callers.rewrite.registry import FALLBACK as METADATA
from codemods.callers.rewrite.snippets import (
    fit_call_statement,
    quoted,
    suite_as_line,
    wrapped_literals,
)
from codemods.callers.rewrite.tails import TailsMixin
from codemods.catalog.pp_raise import pp_hint, raising_hooks

_EXCEPTION_NAMES = ("exc", "capture_exc", "capture_error", "capture_exc_")
_LOGGER_NAMES = ("logger", "capture_logger", "aux_capture_logger")


def _hook_label(found: FoundCall) -> str:
    # Name only the hooks that can raise NotImplementedError under PP
    return " / ".join(hook.name for hook in raising_hooks(found.hooks))


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _imports_inside(statement: cst.CSTNode) -> bool:
    """``try: import x`` / ``if TYPE_CHECKING: import x`` blocks count as imports."""
    if isinstance(statement, (cst.Try, cst.If)) and isinstance(statement.body, cst.IndentedBlock):
        return bool(statement.body.body) and _is_import_line(statement.body.body[0])
    return False


@dataclass(frozen=True)
class _LoggingState:
    """What the module already has: a logger name, and the name ``logging`` is bound to."""

    logger: str | None
    logging_alias: str | None
    get_logger_alias: str | None
    taken: frozenset[str]


def _logging_state(module: cst.Module) -> _LoggingState:
    logging_alias = None
    get_logger_alias = None
    taken: set[str] = set()
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if isinstance(alias.name, cst.Name) and alias.name.value == "logging":
                        logging_alias = alias.evaluated_alias or "logging"
            elif (
                isinstance(small, cst.ImportFrom)
                and isinstance(small.module, cst.Name)
                and small.module.value == "logging"
                and not isinstance(small.names, cst.ImportStar)
            ):
                for alias in small.names:
                    if alias.name.value == "getLogger":
                        get_logger_alias = alias.evaluated_alias or "getLogger"
    logger = None
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            taken.add(statement.name.value)
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            targets: list[cst.BaseExpression] = []
            value = None
            if isinstance(small, cst.Assign):
                targets = [target.target for target in small.targets]
                value = small.value
            elif isinstance(small, cst.AnnAssign):
                targets, value = [small.target], small.value
            elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                small.names, cst.ImportStar
            ):
                for alias in small.names:
                    bound = alias.asname.name if alias.asname else alias.name
                    if isinstance(bound, cst.Name):
                        taken.add(bound.value)
            names = [target.value for target in targets if isinstance(target, cst.Name)]
            taken.update(names)
            if names and logger is None and _is_get_logger(value, logging_alias, get_logger_alias):
                logger = names[0]
    return _LoggingState(logger, logging_alias, get_logger_alias, frozenset(taken))


def _is_get_logger(
    value: cst.BaseExpression | None, logging_alias: str | None, get_logger_alias: str | None
) -> bool:
    if not isinstance(value, cst.Call):
        return False
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value == "getLogger":
        return isinstance(func.value, cst.Name) and func.value.value in {logging_alias, "logging"}
    return (
        get_logger_alias is not None
        and isinstance(func, cst.Name)
        and func.value == get_logger_alias
    )


def _take_into_else(
    statement: cst.BaseStatement, taken: list[cst.BaseStatement]
) -> list[cst.BaseStatement]:
    """The fallback's ``try`` with the call's tail in its ``else:`` (claims run only when
    the capture was set)."""
    assert isinstance(statement, cst.Try)
    return [statement.with_changes(orelse=cst.Else(body=cst.IndentedBlock(body=taken)))]


class FallbackTransformer(TailsMixin, CallSiteCodemod):
    ACTION = Action.FALLBACK
    METADATA = METADATA

    def prepare(self, module: cst.Module, found: tuple[FoundCall, ...]) -> None:
        self._wrapped = 0

    # ----------------------------------------------------------------- setup
    def visit_Module(self, node: cst.Module) -> bool:
        if not self._statements:
            return False
        self._first_use = min(found.module_index for found in self._statements.values())
        self._module = node
        self._state = _logging_state(node)
        if self._state.logger is None:  # reuse any module-level logger
            self._state = replace(self._state, logger=host_style.module_logger(node))
        if self._state.logger is not None:
            self._logger = self._state.logger
        else:
            self._logger = next(
                (name for name in _LOGGER_NAMES if name not in self._state.taken),
                "aux_capture_logger_",
            )
        return True

    # -------------------------------------------------------------- handlers
    @staticmethod
    def _exception_name(found: FoundCall) -> str:
        """``exc``, unless the function around the call already uses that name."""
        taken = found.names_in_scope
        return next((name for name in _EXCEPTION_NAMES if name not in taken), "capture_exc_1")

    def _warn_handler(self, found: FoundCall, column: int) -> str:
        indent = self._module.default_indent
        exc = self._exception_name(found)
        arguments = [exc]
        if found.hook_name is not None:  # the hook actually called, held by a name
            label = "%s"
            arguments.insert(0, cst.Module(body=[]).code_for_node(found.hook_name))
        else:
            label = _hook_label(found)
        text = f"{label} unavailable, running without aux hidden capture: %s"
        call = f"{self._logger}.warning({quoted(text)}, {', '.join(arguments)})"
        if column + len(indent) + len(call) <= self.line_length:
            return f"{indent}{call}\n" + self._off_lines(found)
        inner = column + 2 * len(indent)
        joined = ", ".join([quoted(text), *arguments])
        if inner + len(joined) <= self.line_length:  # black: the arguments on one line
            return (
                f"{indent}{self._logger}.warning(\n{indent * 2}{joined}\n{indent})\n"
            ) + self._off_lines(found)
        literals = wrapped_literals(text, self.line_length - inner - 1)
        lines = "".join(f"{indent * 2}{literal}\n" for literal in literals[:-1])
        rest = "".join(f"{indent * 2}{argument},\n" for argument in arguments)
        return (
            f"{indent}{self._logger}.warning(\n"
            f"{lines}"
            f"{indent * 2}{literals[-1]},\n"
            f"{rest}"
            f"{indent})\n"
        ) + self._off_lines(found)

    def _off_lines(self, found: FoundCall) -> str:
        """The failure path after the warning: capture reported off (``claims``)."""
        if found.claims is None:
            return ""
        indent = self._module.default_indent
        return "".join(f"{indent}{line}\n" for line in found.claims.off)

    def _raise_handler(self, found: FoundCall, column: int) -> str:
        indent = self._module.default_indent
        hint = pp_hint(hook.name for hook in raising_hooks(found.hooks))
        text = (
            f"{_hook_label(found)} cannot capture aux hidden states under pipeline "
            f"parallelism: {hint}"
        )
        inner = column + 2 * len(indent)
        literals = wrapped_literals(text, max(self.line_length - inner, 20))
        lines = "".join(f"{indent * 2}{literal}\n" for literal in literals)
        return (
            f"{indent}raise NotImplementedError(\n"
            f"{lines}"
            f"{indent}) from {self._exception_name(found)}\n"
        )

    def _try_statement(self, found: FoundCall, body: cst.SimpleStatementLine) -> cst.Try:
        column = found.statement_column
        handler = (
            self._warn_handler(found, column)
            if self.policy == "warn"
            else self._raise_handler(found, column)
        )
        indent = self._module.default_indent
        exc = self._exception_name(found)
        template = f"try:\n{indent}pass\nexcept NotImplementedError as {exc}:\n{handler}"
        template = template.replace("\n", self._module.default_newline)
        parsed = cst.parse_statement(template, config=self._module.config_for_parsing)
        assert isinstance(parsed, cst.Try)
        body = fit_call_statement(body, column + len(indent), indent, self.line_length)
        return parsed.with_changes(
            body=cst.IndentedBlock(body=[body.with_changes(leading_lines=())]),
            leading_lines=body.leading_lines,
        )

    def _wrapped_statement(
        self, original_node: cst.CSTNode, line: Callable[[], cst.SimpleStatementLine]
    ) -> cst.Try | None:
        """The ``try`` around the statement ``original_node`` is when it holds a call to
        wrap (counted as wrapped; ``line()`` gives that statement as a line); else None."""
        found = self._statements.get(original_node)
        if found is None:
            return None
        self._wrapped += 1
        wrapped = self._try_statement(found, line())
        claims = found.claims
        if self.policy == "warn" and claims is not None and claims.tail and not claims.exits:
            self._expect_tail(original_node, wrapped, claims.tail, _take_into_else)
        if original_node in self._followed:  # a later codemod rewrites the call in the try
            assert isinstance(wrapped.body, cst.IndentedBlock)
            inner = wrapped.body.body[0]
            assert isinstance(inner, cst.SimpleStatementLine)
            self.moved[original_node] = inner
        return wrapped

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement:
        wrapped = self._wrapped_statement(original_node, lambda: updated_node)
        return updated_node if wrapped is None else wrapped

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.BaseSuite:
        wrapped = self._wrapped_statement(original_node, lambda: suite_as_line(updated_node))
        return updated_node if wrapped is None else cst.IndentedBlock(body=[wrapped])

    # ---------------------------------------------------------------- logger
    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        updated_node = super().leave_Module(original_node, updated_node)  # (tails)
        if not self._wrapped or self.policy != "warn" or self._state.logger is not None:
            return updated_node
        body: list[cst.BaseStatement] = list(updated_node.body)
        logging_name = self._state.logging_alias
        insert_logging = logging_name is None
        factory = f"{logging_name or 'logging'}.getLogger"
        if logging_name is None and self._state.get_logger_alias is not None:
            factory, insert_logging = self._state.get_logger_alias, False
        logger_line = cst.parse_statement(
            f"{self._logger} = {factory}(__name__)\n", config=updated_node.config_for_parsing
        ).with_changes(leading_lines=[cst.EmptyLine()])
        # After the imports, but before a module-level statement that uses the logger.
        header_end = self._header_end(body[: self._first_use])
        if header_end < len(body):
            following = body[header_end]
            if isinstance(following, (cst.FunctionDef, cst.ClassDef)) and not any(
                line.comment is None for line in following.leading_lines
            ):
                blank = [cst.EmptyLine(), cst.EmptyLine()]
                body[header_end] = following.with_changes(
                    leading_lines=[*blank, *following.leading_lines]
                )
        body.insert(header_end, logger_line)
        if insert_logging:  # where isort (profile black) puts it
            body = host_style.with_import_logging(body, header_end)
        return updated_node.with_changes(body=body)

    @staticmethod
    def _header_end(body: Sequence[cst.BaseStatement]) -> int:
        """Index just after the module's imports (or its docstring and future imports)."""
        end = 0
        for index, statement in enumerate(body):
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                break
            if index == 0 and _is_docstring(statement):
                end = 1
            elif _is_import_line(statement) or _imports_inside(statement):
                end = index + 1
        return end


__getattr__ = lazy_command(__name__, "FallbackCommand", FallbackTransformer, METADATA)
