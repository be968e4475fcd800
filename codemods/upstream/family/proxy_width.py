"""The per-model width of the aux entry: ``get_pp_proxy_aux_hidden_size``.

SGLang's CUDA graph runners ask the model how wide each extra ``PPProxyTensors`` entry
of a non-first stage is (``get_pp_proxy_dspark_hidden_size`` for DSPARK) and
preallocate it. Every causal-LM class whose capture hook the family patch rewrites gets
the same question answered for the aux entry, after its last capture hook::

    def get_pp_proxy_aux_hidden_size(self) -> int:
        return pp_aux_proxy_hidden_size(self.model)

``pp_aux_proxy_hidden_size`` (shipped ``pp_aux_capture.py``) reads the width from the
relay ``set_pp_aux_capture`` gave the decoder stack: 0 on PP=1, on the first stage and
before a hook is called.

The same classes also declare, in their own body, the capture methods whose hooks the
patch rewrote, for the server-argument validation and the runtime guard
(``relays_pp_aux_capture`` of the shipped module): a subclass that defines its own
``__init__``, ``forward`` or hook is not covered by its base's declaration.  Before::

    class LlamaForCausalLM(nn.Module):
        # BitandBytes specific attributes
        default_bitsandbytes_target_modules = [

after (at the top of the class body, after a docstring if any)::

    class LlamaForCausalLM(nn.Module):
        pp_aux_relay_methods = ("EAGLE3", "DFLASH")

        # BitandBytes specific attributes
        default_bitsandbytes_target_modules = [
"""

from __future__ import annotations

import libcst as cst

from codemods.upstream.edit.pyformat import parse_statements

METHOD = "get_pp_proxy_aux_hidden_size"
#: The class attribute that declares the capture methods a class relays across PP stages.
SUPPORT_ATTR = "pp_aux_relay_methods"
#: The capture hooks whose rewrite relays a capture method, and the method.
HOOK_METHODS = {
    "set_eagle3_layers_to_capture": "EAGLE3",
    "set_dflash_layers_to_capture": "DFLASH",
    "set_dspark_layers_to_capture": "DSPARK",
}
#: The relay helper whose value the method returns.
WIDTH = "pp_aux_proxy_hidden_size"
HOOK_PREFIX = "set_"
HOOK_SUFFIX = "_layers_to_capture"


def proxy_width_source(receiver: str) -> str:
    """The method, written at class-body indentation."""
    return f"    def {METHOD}(self) -> int:\n        return {WIDTH}({receiver})\n"


def _is_hook(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.FunctionDef)
        and statement.name.value.startswith(HOOK_PREFIX)
        and statement.name.value.endswith(HOOK_SUFFIX)
    )


def add_proxy_width_method(cls: cst.ClassDef, receiver: str) -> cst.ClassDef:
    """``cls`` with ``get_pp_proxy_aux_hidden_size`` after its last capture hook (or at
    the end of the class); unchanged when the class already defines the method."""
    body = list(cls.body.body)
    names = {s.name.value for s in body if isinstance(s, cst.FunctionDef)}
    if METHOD in names:
        return cls
    hooks = [k for k, statement in enumerate(body) if _is_hook(statement)]
    position = hooks[-1] + 1 if hooks else len(body)
    return _inserted(cls, body, position, proxy_width_source(receiver), blank_before=True)


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
    return tuple(m for m in HOOK_METHODS.values() if m in methods)


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
