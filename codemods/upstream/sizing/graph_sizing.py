"""One PP proxy entry for every capture method: rename SGLang's DSPARK relay and sizing.

SGLang 0.5.21+ carries DSPARK captures across pipeline stages in one ``PPProxyTensors``
entry and sizes its CUDA graph buffer along one path::

    model.get_pp_proxy_dspark_hidden_size()
      -> misc_utils.resolve_pp_proxy_dspark_hidden_size (0 on PP=1 and the first stage)
      -> ModelRunner.get_pp_proxy_dspark_hidden_size
      -> runner_utils/buffers.py (allocate_pp_proxy_tensors(pp_proxy_dspark_hidden_size=))
      -> the decode and prefill CUDA graph runners.

Once EAGLE3 and DFLASH captures ride the same entry, the DSPARK names no longer say what it
holds, so the patch renames them in every file of the package that uses them (the sizing
path, ``kimi_linear.py``, ``kimi_k3.py``)::

    "dspark_hidden_states"           ->  "aux_hidden_states"
    *pp_proxy_dspark_hidden_size*    ->  *pp_proxy_aux_hidden_size*
    _SupportsDSparkPPProxy           ->  _SupportsAuxPPProxy

A bracketed header or call the shorter names let fit on one line is joined as black joins
it.  A tree already renamed is left as it is; a tree without the path (before 0.5.21)
gets it from ``graph_sizing_legacy.py``.

The renamed resolver then asks the one width lookup of the shipped helpers,
``pp_aux_proxy_hidden_size(model)``, which finds the relay ``set_pp_aux_capture`` gave the
model's decoder stack (a VL model's language model included), so no model class needs a
width method of its own (:data:`RESOLVED`).  A model that defines
``get_pp_proxy_aux_hidden_size`` (out of tree) is still asked first, and one that still
defines the old ``get_pp_proxy_dspark_hidden_size`` (``SGLANG_EXTERNAL_MODEL_PACKAGE``) is
asked next for one release, with a deprecation warning.  In ``kimi_linear.py`` and
``kimi_k3.py`` the relay itself then goes through the shipped helpers (``native_relay.py``),
and the classes that define the DSPARK hook, and the decoder stacks whose forward relays,
declare that they relay DSPARK (``pp_aux_relay_methods``), which the validation and the
runtime guard ask.
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import GLUE_MODULE, WIDTH
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.proxy_width import add_support_attribute
from codemods.upstream.sizing.native_relay import relay_through_helpers
from codemods.upstream.tree.sglang_tree import SGLangTree

#: The modules of the sizing path (0.5.21+), in the order the value travels backwards.
SIZING_MODULES = (
    "sglang.srt.model_executor.model_runner_components.misc_utils",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_executor.runner_utils.buffers",
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
    "sglang.srt.model_executor.runner.prefill_cuda_graph_runner",
)

#: DSPARK name -> name for every capture method.
RENAMES = (
    ("_SupportsDSparkPPProxy", "_SupportsAuxPPProxy"),
    ("pp_proxy_dspark_hidden_size", "pp_proxy_aux_hidden_size"),
    ('"dspark_hidden_states"', '"aux_hidden_states"'),
)
RENAMED = re.compile("|".join(re.escape(old) for old, _ in RENAMES))
LINE_LENGTH = 88
MARKER = re.compile(r"_SupportsDSparkPPProxy|pp_proxy_dspark_hidden_size")
DONE = "pp_proxy_aux_hidden_size"


class SizingError(ValueError):
    """A file of the sizing path does not have the shape this module mirrors."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def block_end(lines: list[str], head: int) -> int:
    """One past the last line of the block whose header is ``lines[head]``."""
    depth = _indent(lines[head])
    end = head + 1
    while end < len(lines) and _header_open(lines, head, end):
        end += 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and _indent(line) <= depth:
            break
        end += 1
    while end > head + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _header_open(lines: list[str], head: int, end: int) -> bool:
    """Whether the header starting at ``head`` still continues before ``end``."""
    text = "".join(lines[head:end])
    return text.count("(") > text.count(")") or not text.rstrip().endswith(":")


def bracket_end(lines: list[str], start: int) -> int:
    """One past the line that closes the brackets opened from ``lines[start]``."""
    balance = 0
    for index in range(start, len(lines)):
        balance += lines[index].count("(") - lines[index].count(")")
        if balance <= 0:
            return index + 1
    raise SizingError(f"unbalanced brackets from line {start + 1}")


def _renamed(text: str) -> str:
    for old, new in RENAMES:
        text = text.replace(old, new)
    return text


def _joined(lines: list[str], renamed: set[int]) -> list[str]:
    """``lines`` with each renamed bracket ``head(`` / one inner line / ``) tail`` (no magic
    trailing comma) joined where the result fits, as black formats it."""
    out: list[str] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        if (
            k + 2 < len(lines)
            and renamed & {k, k + 1, k + 2}
            and line.rstrip("\n").endswith("(")
            and not lines[k + 1].rstrip("\n").endswith(",")
            and lines[k + 2].lstrip().startswith(")")
            and _indent(lines[k + 2]) == _indent(line)
        ):
            head, inner, tail = line.rstrip("\n"), lines[k + 1].strip(), lines[k + 2].strip()
            if head.endswith("=(") and tail in ("),", ")"):
                # A parenthesized keyword value: black drops the parentheses it no
                # longer needs.
                head, tail = head[:-1], tail[1:]
            joined = head + inner + tail + "\n"
            if len(joined) - 1 <= LINE_LENGTH:
                out.append(joined)
                k += 3
                continue
        out.append(line)
        k += 1
    return out


def rename_dspark_entry(text: str, path: str) -> str:
    """``text`` with the DSPARK relay names renamed (see the module docstring)."""
    lines = text.splitlines(keepends=True)
    renamed = {k for k, line in enumerate(lines) if RENAMED.search(line)}
    result = "".join(_joined([_renamed(line) for line in lines], renamed))
    try:
        compile(result, path, "exec")
    except SyntaxError as err:
        raise SizingError(f"{path}: renamed sizing does not compile: {err}") from err
    return result


def has_dspark_sizing(tree: SGLangTree) -> bool:
    """Whether every module of the sizing path exists and sizes the DSPARK entry."""
    for module in SIZING_MODULES:
        text = tree.read_text(tree.module_path(module))
        if text is None or not MARKER.search(text):
            return False
    return True


#: The model files of 0.5.21+ that relay DSPARK captures under the old names.
RELAY_MODULES = ("sglang.srt.models.kimi_linear", "sglang.srt.models.kimi_k3")


#: The renamed resolver's last lines, and what replaces them: the old method, deprecated,
#: then the helpers' lookup.
_RENAMED_RESOLVER = """\
    if isinstance(model, _SupportsAuxPPProxy):
        return model.get_pp_proxy_aux_hidden_size()
    return 0
"""
RESOLVED = f"""\
    if isinstance(model, _SupportsAuxPPProxy):
        return model.get_pp_proxy_aux_hidden_size()
    if callable(getattr(model, "get_pp_proxy_dspark_hidden_size", None)):
        # Out-of-tree models sized the {NATIVE.name} entry under the old name; kept for one
        # release.
        logger.warning(
            "%s.get_pp_proxy_dspark_hidden_size is deprecated and will be removed in "
            "the next release, with the dspark_hidden_states entry; relay through "
            "set_pp_aux_capture, or define get_pp_proxy_aux_hidden_size and send "
            "aux_hidden_states, instead.",
            type(model).__name__,
        )
        return model.get_pp_proxy_dspark_hidden_size()
    return {WIDTH}(model)
"""


def resolve_through_helpers(text: str, path: str) -> str:
    """The renamed ``misc_utils.py`` whose resolver asks the old width method, deprecated,
    then the helpers' lookup (imported from the helpers' module)."""
    if text.count(_RENAMED_RESOLVER) != 1:
        raise SizingError(f"{path}: the renamed aux width resolver not found once")
    text = text.replace(_RENAMED_RESOLVER, RESOLVED)
    return add_from_import(parse_text(text), GLUE_MODULE, [WIDTH]).code


#: The shipped helpers a decoder stack's forward relays through, ``self`` first.
_RELAY_HELPERS = ("pp_aux_handoff", "pp_aux_outgoing", "pp_aux_seed", "pp_aux_collect")


def _defines_hook(cls: cst.ClassDef) -> bool:
    return any(
        isinstance(s, cst.FunctionDef) and s.name.value == NATIVE.hook for s in cls.body.body
    )


def _relaying_forward(cls: cst.ClassDef) -> bool:
    """Whether ``cls`` defines a ``forward`` that calls a relay helper on ``self``."""
    relay = m.Call(
        func=m.OneOf(*(m.Name(name) for name in _RELAY_HELPERS)),
        args=[m.Arg(value=m.Name("self")), m.ZeroOrMore()],
    )
    return any(
        isinstance(s, cst.FunctionDef) and s.name.value == "forward" and findall(s, relay)
        for s in cls.body.body
    )


def declare_dspark_relay(text: str) -> str:
    """``text`` with ``pp_aux_relay_methods`` naming the method SGLang relays natively
    (:data:`~codemods.catalog.methods.NATIVE`: DSPARK) in each top-level class that defines
    its hook (these files relay its captures themselves), and in each decoder stack whose
    ``forward`` relays through the shipped helpers, which the runtime guard asks."""
    module = parse_text(text)
    body = [
        add_support_attribute(statement, (NATIVE.name,))
        if isinstance(statement, cst.ClassDef)
        and (_defines_hook(statement) or _relaying_forward(statement))
        else statement
        for statement in module.body
    ]
    return module.with_changes(body=body).code


def sizing_changes(tree: SGLangTree) -> list[FileChange]:
    """The sizing path's files and SGLang's DSPARK relays with the entry renamed; none on a
    tree without the DSPARK sizing path (SGLang before 0.5.21)."""
    if not has_dspark_sizing(tree):
        return []
    changes = []
    for module in (*SIZING_MODULES, *RELAY_MODULES):
        path = tree.module_path(module)
        text = tree.read_text(path)
        if text is not None:
            role = Role.RELAY_RENAME if module in RELAY_MODULES else Role.SIZING_RENAME
            new = rename_dspark_entry(text, path)
            if module == SIZING_MODULES[0]:
                new = resolve_through_helpers(new, path)
            elif module in RELAY_MODULES:
                entries = module == RELAY_MODULES[1]
                new = declare_dspark_relay(relay_through_helpers(new, path, entries))
            changes.append(FileChange(path, text, new, RUNTIME, role))
    return [change for change in changes if change.changed]
