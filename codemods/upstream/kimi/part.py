"""Kimi-Linear and Kimi-K3 as parts of the upstream patch (``part.Part``).

Each looks at its model file (``kimi_linear.py``, ``kimi_k3.py``) and answers:

* not applicable: the file is absent (and not asked for by name), or has no DSPARK hook
  (SGLang 0.5.4-0.5.16 ship ``kimi_linear.py`` without one);
* left out: the file needs the rewrite but ``--models`` did not ask for it;
* applies: the rewritten file (its class with the DSPARK hook declaring that it relays
  DSPARK in ``pp_aux_relay_methods``, which the runtime guard asks) and the helpers
  module (``linear.py``, ``k3.py``), nothing
  when the file already carries the rewrite or SGLang relays the captures itself, under
  its DSPARK entry or the one the patch renamed it to, or through the shipped helpers the
  patch moved that relay onto (``ModelState.status``);
* cannot apply: asked for by name and absent, or a DSPARK hook in a shape the rewriter
  does not recognise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from codemods.catalog.methods import NATIVE
from codemods.upstream import part
from codemods.upstream.edit.change_kinds import KIMI, Role
from codemods.upstream.edit.names import ATTACH, AUX_ENTRY, GLUE_MODULE
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.edit.runtime import runtime_change
from codemods.upstream.kimi import k3, linear
from codemods.upstream.sizing.graph_sizing import declare_dspark_relay
from codemods.upstream.tree.sglang_tree import SGLangTree

HOOK = NATIVE.hook
#: The handoff entry SGLang's own DSPARK relay uses (0.5.21+), before the patch renames it.
DSPARK_ENTRY = "dspark_hidden_states"


def _renamed_relay(rewriter: ModuleType, source: str, path: str):
    """The analysis of a file that relays DSPARK captures itself under the entry the patch
    renamed for every capture method (``"aux_hidden_states"``, the sizing part's rename
    already applied); None when it is not one."""
    if f'"{AUX_ENTRY}"' not in source:
        return None
    try:
        analysis = rewriter.analyse(source.replace(f'"{AUX_ENTRY}"', f'"{DSPARK_ENTRY}"'), path)
    except linear.UnrecognisedShape:
        return None
    return analysis if analysis.status == part.SUPPORTED else None


@dataclass(frozen=True)
class _Relayed:
    """What a file that already relays through the shipped helpers needs: nothing."""

    status: str = part.SUPPORTED
    notes: tuple[str, ...] = ()


def _helpers_relay(source: str) -> _Relayed | None:
    """A file whose own DSPARK relay the patch already moved onto the shipped helpers
    (the sizing part's native-relay rewrite, 0.5.21+); None when it is not one."""
    return _Relayed() if f"{ATTACH}(" in source else None


def _decider(
    rewriter: ModuleType, stem: str, title: str
) -> Callable[[SGLangTree, part.Plan], part.Decision]:
    def decide(tree: SGLangTree, plan: part.Plan) -> part.Decision:
        path = tree.module_path(rewriter.MODULE)
        file = f"{stem}.py"
        source = tree.read_text(path)
        asked = plan.models is not None and stem in plan.models
        if source is None:
            if asked:
                return part.cannot_apply(str(tree.file(path)), f"{title} model file not found")
            return part.not_applicable(f"{file} is not in this release")
        if f"def {HOOK}(" not in source:
            return part.not_applicable(f"{file} has no {NATIVE.name} hook in this release")
        try:
            new_source, analysis = rewriter.rewrite(source, str(tree.file(path)))
        except linear.UnrecognisedShape as err:
            analysis = _renamed_relay(rewriter, source, str(tree.file(path))) or _helpers_relay(
                source
            )
            if analysis is None:
                reason = str(err).removeprefix(f"{err.path}: ")
                return part.cannot_apply(str(tree.file(path)), reason)
            new_source = source
        state = part.ModelState(path, analysis.status, (HOOK,), title)
        if not plan.asked(stem):
            if analysis.status != part.NEEDS_PATCH:
                return part.not_applicable(
                    f"not asked for (--models); {file} needs no rewrite", model=state
                )
            return part.left_out(
                f"{file} not asked for (--models)",
                f"{title} keeps refusing {NATIVE.name} aux capture under PP",
                model=state,
            )
        changes: list[FileChange] = []
        if analysis.status != part.SUPPORTED:
            # The class declares that it relays DSPARK: the runtime guard asks it.
            new_source = declare_dspark_relay(new_source)
            changes = [
                FileChange(path, source, new_source, KIMI, Role.MODEL),
                runtime_change(tree, plan.text(tree.module_path(GLUE_MODULE))),
            ]
        return part.applies(changes, analysis.notes, model=state)

    return decide


LINEAR = part.Part(
    "kimi_linear", _decider(linear, "kimi_linear", "Kimi-Linear"), models=("kimi_linear",)
)
K3 = part.Part("kimi_k3", _decider(k3, k3.NAME, "Kimi-K3"), models=(k3.NAME,))
#: The modules the two parts rewrite.
MODULES = (linear.MODULE, k3.MODULE)
