"""Refuse aux capture under PP where it is configured, for a model that does not relay it.

The server-argument validation (``relax.py``) admits EAGLE3, DFLASH or
``--enable-return-aux-hidden-states`` with PP only for a model class that declares it relays
that method (``pp_aux_relay_methods``).  Nothing stops a model that does not from reaching
the capture by another path (an architecture override, a model loaded by another entry
point), and its non-last stages would drop their captures without an error.  SGLang
configures the capture in one place, ``configure_aux_hidden_state_capture``
(``model_executor/model_runner_components/attention_backend_setup.py``, 0.5.18+); this
module puts the same question there, before each hook is called.  Before::

    if eagle_use_aux_hidden_state:
        ...
        model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)

after::

    if eagle_use_aux_hidden_state:
        ...
        check_pp_aux_capture(model, "EAGLE3", get_pp_group().world_size)
        model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)

(and ``"DSPARK"`` / ``"DFLASH"`` before the DFLASH branch's two hooks).
``check_pp_aux_capture`` (the shipped module) raises naming the class and the method when
``pp_size > 1`` and the class does not relay it; with one stage it does nothing.
"""

from __future__ import annotations

from pathlib import Path

from codemods.upstream.edit.change_kinds import VALIDATION, Role
from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.tree.sglang_tree import SGLangTree

MODULE = "sglang.srt.model_executor.model_runner_components.attention_backend_setup"
CHECK = "check_pp_aux_capture"
#: Each hook call of ``configure_aux_hidden_state_capture`` and its capture method.
_CALLS = (
    ("        ", "EAGLE3", "model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)"),
    ("            ", "DSPARK", "model.set_dspark_layers_to_capture(dflash_target_layer_ids)"),
    ("            ", "DFLASH", "model.set_dflash_layers_to_capture(dflash_target_layer_ids)"),
)


class GuardShapeError(ValueError):
    """``configure_aux_hidden_state_capture`` does not have the shape this module edits."""


def guard(source: str, filename: str) -> str:
    """``attention_backend_setup.py`` text with the check before each hook call; the text
    itself when it already has it.  Raises :class:`GuardShapeError` (naming ``filename``)
    when a hook call is not found once."""
    if f"{CHECK}(" in source:
        return source
    text = source
    for indent, method, call in _CALLS:
        line = f"{indent}{call}\n"
        if text.count(line) != 1:
            raise GuardShapeError(
                f"{filename}: cannot guard aux capture under PP: {call!r} not found once"
            )
        check = f'{indent}{CHECK}(model, "{method}", get_pp_group().world_size)\n'
        text = text.replace(line, check + line)
    module = add_from_import(
        parse_text(text), "sglang.srt.distributed.parallel_state", ["get_pp_group"]
    )
    return add_from_import(module, GLUE_MODULE, [CHECK]).code


#: The shipped test of the relay, the opt-in, this guard and the relaxed validation.
RELAY_TEST_FILE = "test_pp_aux_relay.py"
RELAY_TEST_SOURCE = Path(__file__).resolve().parent.parent / "shipped" / RELAY_TEST_FILE


def relay_test() -> dict[str, str]:
    """File name -> text of the shipped relay test."""
    return {RELAY_TEST_FILE: RELAY_TEST_SOURCE.read_text(encoding="utf-8")}


def guard_changes(tree: SGLangTree) -> list[FileChange]:
    """The change to ``attention_backend_setup.py`` and, in a tree with a test folder, the
    relay test (none: the tree has no such file)."""
    change = guard_change(tree)
    if change is None or not change.changed:
        return []
    changes = [change]
    if tree.tests is not None:  # a package tree has no test folder: left out
        for name, text in relay_test().items():
            path = tree.test_path(name)
            changes.append(
                FileChange(path, tree.read_text(path), text, VALIDATION, Role.RELAY_TEST)
            )
    return [c for c in changes if c.changed]


def guard_change(tree: SGLangTree) -> FileChange | None:
    """The change to ``attention_backend_setup.py`` (None: the tree has no such file)."""
    path = tree.module_path(MODULE)
    source = tree.read_text(path)
    if source is None:
        return None
    return FileChange(
        path, source, guard(source, str(tree.file(path))), VALIDATION, Role.RUNTIME_GUARD
    )
