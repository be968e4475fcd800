"""Codemod: guard capture-hook calls whose layer ids may be unset.

A hook that rejects ``None`` (DSPARK, DFLASH, MSD, user-added hooks) raises ``ValueError``
when a caller forwards an unset option.  Policy ``skip`` (the default) calls the hook only
when ids are set::

    # before
    model.set_dspark_layers_to_capture(args.capture_layers)
    # after
    if args.capture_layers:
        model.set_dspark_layers_to_capture(list(args.capture_layers))

Policy ``raise`` fails early with a message naming the unset value and the hook::

    # after
    if not args.capture_layers:
        raise ValueError(
            "set_dspark_layers_to_capture needs layer ids: args.capture_layers is unset"
        )
    model.set_dspark_layers_to_capture(list(args.capture_layers))

A call that may reach EAGLE3 as well as a hook that rejects ``None`` (a table of hook names,
``getattr(model, name)``) keeps EAGLE3's ``None`` ("default layers"): the guard also tests the
hook name held at the call, and the ids are passed as they are::

    # before
    for name in ("set_eagle3_layers_to_capture", "set_dspark_layers_to_capture"):
        getattr(model, name)(layer_ids)
    # after
    for name in ("set_eagle3_layers_to_capture", "set_dspark_layers_to_capture"):
        if layer_ids or name == "set_eagle3_layers_to_capture":
            getattr(model, name)(layer_ids)

When no name holds the hook name at the call (an f-string, an inline dict lookup, a setter
stored on ``self``), such a call is reported for review instead.

Ids passed inline as an expression (``cfg.get("layers")``) are evaluated once: bound to a new
local name (``layers = cfg.get("layers")``), which the guard then tests and passes.

Where the code needs the capture (:mod:`codemods.callers.analyse.required`: an assert or read of
``capture_aux_hidden_states`` / aux outputs after the call, a speculative feature flag around
it, a hook lookup that raises, serving code), skipping the hook would let the run go on
without it: such calls always get the ``raise`` form, whatever the policy.

Statements after the call that claim capture (:mod:`codemods.callers.analyse.claims`: a flag
set true, ``return True``, the hook's name kept) go into the ``if`` with it, and when the ids
are unset the program says capture is off (:mod:`codemods.callers.rewrite.tails`)::

    # before
    model.set_dspark_layers_to_capture(args.capture_layers)
    self.capture_enabled = True
    # after
    if args.capture_layers:
        model.set_dspark_layers_to_capture(list(args.capture_layers))
        self.capture_enabled = True
    else:
        self.capture_enabled = False

(after a tail that ends in ``return True``, the ``return False`` follows the ``if`` instead of
an ``else:``; a claim in an enclosing block gets ``flag = False`` and ``return``).

Left alone: literal ids, calls already behind a check of the ids (``if ids:``, ``if ids is not
None``, an ``and`` including it, an earlier ``if not ids: raise|return``), and EAGLE3 (it
accepts ``None``).  A literal ``None``, and a call used inside an expression, are reported for
review instead of rewritten.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import libcst as cst

from codemods.callers.analyse import Analysis, FoundCall
from codemods.callers.records import Action, CallSite, Risk
from codemods.callers.rewrite.callsite_codemod import CallSiteCodemod
from codemods.callers.rewrite.libcst_command import lazy_command
from codemods.callers.rewrite.registry import GUARD as METADATA
from codemods.callers.rewrite.snippets import (
    fit_call_statement,
    fit_test,
    quoted,
    suite_as_line,
    wrapped_literals,
)
from codemods.callers.rewrite.tails import TailsMixin, off_statements


def unset_message(found: FoundCall) -> str:
    """The ``ValueError`` message of policy ``raise``: names the hook and the unset value."""
    hooks = " / ".join(hook.name for hook in found.hooks if not hook.accepts_none)
    value = cst.Module(body=[]).code_for_node(found.ids_core) if found.ids_core else "ids"
    return f"{hooks} needs layer ids: {value} is unset"


def _normalised(value: cst.BaseExpression) -> cst.BaseExpression:
    """``x`` -> ``list(x)``; an explicit ``list``/``tuple``/``sorted`` call is kept."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        if value.func.value in {"list", "tuple", "sorted"}:
            return value
    return cst.Call(func=cst.Name("list"), args=[cst.Arg(value=value)])


def _operand_of_not(value: cst.BaseExpression) -> cst.BaseExpression:
    """``a or b`` -> ``(a or b)``, so that ``not`` applies to the whole value."""
    loose = (cst.BooleanOperation, cst.IfExp, cst.NamedExpr, cst.Lambda, cst.Comparison)
    if isinstance(value, loose) and not value.lpar:
        return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return value


def _names_literal(names: tuple[str, ...]) -> str:
    if len(names) == 1:
        return quoted(names[0])
    return "(" + ", ".join(quoted(name) for name in names) + ")"


def _lenient_test(found: FoundCall, negated: bool) -> cst.BaseExpression:
    """``name == "set_eagle3_layers_to_capture"`` (``!=`` when ``negated``; ``in`` / ``not
    in`` a tuple for several names): the hook called accepts ``None``."""
    assert found.name_expr is not None
    names = found.lenient_names
    if len(names) == 1:
        operator = "!=" if negated else "=="
    else:
        operator = "not in" if negated else "in"
    name = cst.Module(body=[]).code_for_node(found.name_expr)
    return cst.parse_expression(f"{name} {operator} {_names_literal(names)}")


def _call_line(statements: list[cst.BaseStatement]) -> cst.SimpleStatementLine:
    """The guarded call's own line among what ``_wrap`` returns."""
    last = statements[-1]
    if isinstance(last, cst.If):  # policy skip: the call is the body of the check
        assert isinstance(last.body, cst.IndentedBlock)
        last = last.body.body[0]
    assert isinstance(last, cst.SimpleStatementLine)
    return last


def _take_into_body(
    statement: cst.BaseStatement, taken: list[cst.BaseStatement], after=()
) -> list[cst.BaseStatement]:
    """The guard's ``if`` with the call's tail after the call (claims run only when set),
    then ``after``."""
    assert isinstance(statement, cst.If) and isinstance(statement.body, cst.IndentedBlock)
    body = statement.body.with_changes(body=[*statement.body.body, *taken])
    return [statement.with_changes(body=body), *after]


class GuardTransformer(TailsMixin, CallSiteCodemod):
    """Guards the calls an :class:`~codemods.callers.analyse.Analysis` marks for it.

    ``apply(analysis)`` visits only the paths to those calls and records, for the calls the
    fallback will wrap next, where they ended up (``moved``) and every node it rebuilt
    (``rebuilt``), so the fallback needs no second discovery.
    """

    ACTION = Action.GUARD
    METADATA = METADATA

    @classmethod
    def carried_site(cls, site: CallSite) -> CallSite:
        """A guarded call: behind a check of its ids, which are no longer maybe None."""
        site = super().carried_site(site)
        risks = tuple(risk for risk in site.risks if risk is not Risk.MAYBE_NONE)
        return replace(site, risks=risks or (Risk.SAFE,), guarded=True, note="")

    def apply(self, analysis: Analysis, follow: tuple[FoundCall, ...] = ()) -> cst.Module:
        """Guard ``analysis.module``; ``follow``: calls whose new place to record."""
        mine = self.targets(analysis.found)
        return self.rewrite_calls(
            analysis.module, mine, analysis.paths_to(self.path_nodes(mine)), follow
        )

    def prepare(self, module: cst.Module, found: tuple[FoundCall, ...]) -> None:
        self.module_indent = module.default_indent
        self.module_config = module.config_for_parsing
        self._calls: dict[cst.Call, FoundCall] = {item.call: item for item in found}

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        found = self._calls.get(original_node)
        if found is None or found.ids_arg is None:
            return updated_node
        index = next(i for i, arg in enumerate(original_node.args) if arg is found.ids_arg)
        arg = updated_node.args[index]
        value = arg.value
        if found.bind_name is not None and found.ids_core is not None:
            name = cst.Name(found.bind_name)
            value = name if value is found.ids_core else value.deep_replace(found.ids_core, name)
        if found.name_expr is None:  # (None still goes to a hook that accepts it: no list())
            value = _normalised(value)
        args = list(updated_node.args)
        args[index] = arg.with_changes(value=value)
        return updated_node.with_changes(args=args)

    def _wrap(self, found: FoundCall, line: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
        assert found.ids_core is not None
        value = found.ids_core.deep_clone()
        leading = line.leading_lines
        binding: list[cst.BaseStatement] = []
        if found.bind_name is not None:  # evaluate the expression once, into a new name
            binding = [
                cst.SimpleStatementLine(
                    body=[
                        cst.Assign(
                            targets=[cst.AssignTarget(target=cst.Name(found.bind_name))],
                            value=value,
                        )
                    ],
                    leading_lines=leading,
                )
            ]
            value, leading = cst.Name(found.bind_name), ()
        call_line = line.with_changes(leading_lines=())
        column = found.statement_column
        indent = self.module_indent
        policy = "raise" if found.required else self.policy
        if policy == "skip":
            call_line = fit_call_statement(
                call_line, column + len(indent), indent, self.line_length
            )
            test: cst.BaseExpression = value
            if found.name_expr is not None:  # None still reaches EAGLE3 (default layers)
                test = cst.BooleanOperation(
                    left=_operand_of_not(value),
                    operator=cst.Or(),
                    right=_lenient_test(found, negated=False),
                )
            test = fit_test(test, column, indent, self.line_length)
            orelse = None
            claims = found.claims
            if claims is not None and claims.off and not claims.tail_returns:
                # capture off when skipped (a tail that returns: the failure path follows)
                off = off_statements(claims.off, self.module_config)
                orelse = cst.Else(body=cst.IndentedBlock(body=off))
            return binding + [
                cst.If(
                    test=test,
                    body=cst.IndentedBlock(body=[call_line]),
                    orelse=orelse,
                    leading_lines=leading,
                )
            ]
        call_line = fit_call_statement(call_line, column, indent, self.line_length)
        message = unset_message(found)
        limit = self.line_length
        if column + len(indent) + len(f"raise ValueError({quoted(message)})") <= limit:
            text = f"raise ValueError({quoted(message)})\n"
        else:
            room = max(limit - column - 2 * len(indent), 20)
            lines = "".join(f"{indent}{literal}\n" for literal in wrapped_literals(message, room))
            text = f"raise ValueError(\n{lines})\n"
        raise_line = cst.parse_statement(text, config=self.module_config)
        test = cst.UnaryOperation(operator=cst.Not(), expression=_operand_of_not(value))
        if found.name_expr is not None:  # None still reaches EAGLE3 (default layers)
            test = cst.BooleanOperation(
                left=test, operator=cst.And(), right=_lenient_test(found, negated=True)
            )
        check = cst.If(
            test=fit_test(test, column, indent, self.line_length),
            body=cst.IndentedBlock(body=[raise_line]),
            leading_lines=leading,
        )
        return binding + [check, call_line]

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        found = self._statements.get(original_node)
        if found is None or found.ids_core is None:
            if original_node in self._followed:
                self.moved[original_node] = updated_node
            return updated_node
        statements = self._wrap(found, updated_node)
        self.moved[original_node] = _call_line(statements)
        skipped = (
            isinstance(statements[-1], cst.If)
            and statements[-1].body.body[0] is (self.moved[original_node])
        )
        claims = found.claims
        if skipped and claims is not None and claims.tail:
            after = off_statements(claims.off, self.module_config) if claims.tail_returns else ()
            attach = functools.partial(_take_into_body, after=after)
            self._expect_tail(original_node, statements[-1], claims.tail, attach)
        return cst.FlattenSentinel(statements)

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.BaseSuite:
        found = self._statements.get(original_node)
        if found is None or found.ids_core is None:
            if original_node in self._followed:
                self.moved[original_node] = updated_node
            return updated_node
        statements = self._wrap(found, suite_as_line(updated_node))
        self.moved[original_node] = _call_line(statements)
        return cst.IndentedBlock(body=statements)


__getattr__ = lazy_command(__name__, "GuardCommand", GuardTransformer, METADATA)
