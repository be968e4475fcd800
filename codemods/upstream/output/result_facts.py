"""Facts about one generated patch, read from its result only.

The PR description and the series' commit messages both say what the patch touches; they
ask these functions, so their names and counts come from one source (the
:class:`~codemods.upstream.result.UpstreamResult`) and agree.
"""

from __future__ import annotations

from codemods.catalog.methods import ADMITTED, FALLBACK, FALLBACK_TARGET, NATIVE
from codemods.upstream.edit import names
from codemods.upstream.edit.change_kinds import Role
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.facts import GUARD
from codemods.upstream.part import SUPPORTED, ModelState
from codemods.upstream.result import UpstreamResult
from codemods.upstream.tree.reachability import (
    Fallback,
    Refusal,
    dspark_dflash_fallback,
    refusal_of,
    tree_refusals,
)
from codemods.upstream.validation.relax import AUX_FLAG_REASON
from codemods.upstream.validation.relax import rewords_aux_flag as rewords_aux_flag_in

#: The parts that rewrite Kimi-Linear's and Kimi-K3's model files (``parts.PARTS``).
KIMI_PART, K3_PART = "kimi_linear", "kimi_k3"
#: Kimi-Linear's model file stem (its part's name).
KIMI_STEM = KIMI_PART
AUX_FLAG = "--enable-return-aux-hidden-states"


def refusals(result: UpstreamResult) -> list[Refusal]:
    """The PP refusals of speculative decoding left once the patch is applied, in
    ``reachability.FILES`` order: as ``generate`` found them, or found here for a result
    made otherwise."""
    if result.refusals is not None:
        return result.refusals
    return tree_refusals(result.tree, {change.path: change.new for change in result.changes})


def _touched(result: UpstreamResult, part: str) -> ModelState | None:
    """What part ``part`` found in its model file, when the patch changes that file."""
    state = result.model(part)
    return state if state is not None and state.path in result.changed else None


def kimi_touched(result: UpstreamResult) -> bool:
    return _touched(result, KIMI_PART) is not None


def kimi_relay_renamed(result: UpstreamResult) -> bool:
    """Kimi-Linear relays DSPARK captures itself (0.5.21+) and the patch only renames its
    entry for every capture method (and moves the relay onto the helpers)."""
    state = _touched(result, KIMI_PART)
    return state is not None and state.status == SUPPORTED


def kimi_rewritten(result: UpstreamResult) -> bool:
    """Kimi-Linear's hook and forward are rewritten (0.5.18-0.5.20)."""
    return kimi_touched(result) and not kimi_relay_renamed(result)


def k3_touched(result: UpstreamResult) -> bool:
    return _touched(result, K3_PART) is not None


def k3_rewritten(result: UpstreamResult) -> bool:
    """Kimi-K3's hook and forward are rewritten (0.5.18-0.5.20), not only renamed."""
    state = _touched(result, K3_PART)
    return state is not None and state.status != SUPPORTED


def family_models(result: UpstreamResult) -> list[str]:
    """Stems of the model files the capture-hook family patch rewrites."""
    if result.family is None:
        return []
    return [file.removesuffix(".py") for file in result.family.patched]


def touched_models(result: UpstreamResult) -> list[str]:
    """Every model file the patch rewrites, by stem."""
    names = [state.stem for state in result.models if state.path in result.changed]
    return sorted(dict.fromkeys(names + family_models(result)))


def touched_hooks(result: UpstreamResult) -> list[str]:
    """Every capture hook the patch changes."""
    hooks = [
        hook
        for state in result.models
        if state.path in result.changed and state.status != SUPPORTED
        for hook in state.hooks
    ]
    if result.family is not None:
        for decision in result.family.decisions.values():
            if decision.patched:
                hooks += [hook for _, _, names in decision.cases for hook in names]
    return sorted(dict.fromkeys(hooks))


def validation_change(result: UpstreamResult):
    """The patch's change to SGLang's server-arg validation (None: it has none)."""
    return next(
        (change for change in result.changes if change.role is Role.VALIDATION and change.changed),
        None,
    )


#: The runtime guard part (``validation/part.py``) and the check it puts after each call.
GUARD_CALL = "check_pp_aux_capture(model, METHOD, pp_size)"


def guard_places(result: UpstreamResult) -> list[tuple[str, list[str]]]:
    """(patch path, functions) where the patch puts the runtime guard after a capture
    hook call, in patch order: the runner files it changes and, from the guard part's
    facts, the functions whose calls it guards there (a file it changes only to pass
    ``pp_size`` is not one)."""
    found = result.facts(GUARD)
    sites = found.sites if found is not None else ()
    places = []
    for change in result.changes:
        if change.role is Role.RUNTIME_GUARD and change.changed:
            functions = [s.function for s in sites if s.path == change.path]
            if functions:  # not a file whose calls only pass ``pp_size`` (guard_passes)
                places.append((change.path, list(dict.fromkeys(functions))))
    return places


def guard_where(result: UpstreamResult, name=lambda path: path, function=lambda name: name) -> str:
    """``file (Class.method, ...)`` for each guarded runner file, joined with "and"
    (``name`` writes the path, ``function`` a function); "" when the patch guards
    nothing."""
    parts = [
        f"{name(path)} ({', '.join(function(f) for f in functions)})" if functions else name(path)
        for path, functions in guard_places(result)
    ]
    return " and ".join(parts)


def guard_passes(result: UpstreamResult, name=lambda path: path, function=lambda name: name) -> str:
    """Where the check reads a function's new ``pp_size`` parameter: ``f takes pp_size: int
    = 1, which caller (file) passes as value``, one clause per function, joined with
    "and" (``name`` writes a path, ``function`` a function or value); "" where none."""
    found = result.facts(GUARD)
    calls = [c for c in (found.callers if found is not None else ()) if not c.passed]
    if not guard_places(result) or not calls:
        return ""
    clauses = []
    for callee in dict.fromkeys(c.callee for c in calls):
        passes = " and ".join(
            f"{function(c.function)} ({name(c.path)}) passes as {function(c.pp_size)}"
            for c in calls
            if c.callee == callee
        )
        clauses.append(f"{function(callee)} takes {function('pp_size: int = 1')}, which {passes}")
    return " and ".join(clauses)


def rewords_aux_flag(result: UpstreamResult) -> bool:
    """The validation change keeps the release's refusal of
    ``--enable-return-aux-hidden-states`` with PP (0.5.23) for every model and replaces its
    message with :data:`AUX_FLAG_REASON`."""
    change = validation_change(result)
    return change is not None and rewords_aux_flag_in(change.old, change.new)


def aux_flag_sentence(result: UpstreamResult, code: str = "`") -> str:
    """What the validation change does to the flag's refusal, in one sentence ("" when it
    leaves it alone)."""
    if not rewords_aux_flag(result):
        return ""
    return (
        f"{code}{AUX_FLAG}{code} with PP stays refused for every model, the relaying ones "
        f"included; its message now gives the reason that holds: {AUX_FLAG_REASON}."
    )


def dflash_via_dspark(result: UpstreamResult) -> Fallback | None:
    """Where a DSPARK target reaches a patched DFLASH hook: the runner's fallback to
    ``set_dflash_layers_to_capture`` (``reachability.dspark_dflash_fallback``), when some
    patched architecture relays DFLASH and the server lets DSPARK through with PP; None
    otherwise."""
    found = result.validation.architectures if result.validation is not None else {}
    if not any(FALLBACK_TARGET.name in methods for methods in found.values()):
        return None
    if refusal_of(refusals(result), FALLBACK.name) is not None:
        return None
    return dspark_dflash_fallback(result.tree)


#: The roles of the test files the patch adds (each registers for SGLang's CPU CI).
SHIPPED_TEST_ROLES = (Role.FAMILY_TEST, Role.INIT_TEST, Role.RELAY_TEST)


def added_tests(result: UpstreamResult) -> list[str]:
    """Paths of the test files (``test_*.py``) the patch adds or changes."""
    return [
        change.path
        for change in result.changes
        if change.changed and change.role in SHIPPED_TEST_ROLES
    ]


def shipped_test_commands(result: UpstreamResult) -> list[str]:
    """How a reviewer runs each shipped test: from the patch, else from the folder
    ``--tests-dir`` wrote them to (none when they were left out and not written)."""
    in_patch = added_tests(result)
    if in_patch:
        return [test_command(result, path) for path in in_patch]
    if result.tests_dir is None:
        return []
    return [
        f"cd {result.tests_dir} && python3 -m unittest {name.removesuffix('.py')}"
        for name in sorted(result.tests)
        if name.startswith("test_")
    ]


def tests_left_out_line(result: UpstreamResult) -> str | None:
    """Says that the shipped tests are not in the patch (a package tree), and where they
    are instead; None when the patch carries them."""
    if not result.tests_left_out:
        return None
    names = ", ".join(f"`{n}`" for n in sorted(result.tests) if n.startswith("test_"))
    text = (
        f"The CPU tests ({names}) are left out of this patch: it was generated on "
        "an installed or unpacked package, which has no test folder, and tests are "
        "not written into the package. In a checkout they go to "
        "`test/registered/unit/models/`."
    )
    if result.tests_dir is not None:
        text += f" They were written to `{result.tests_dir}`."
    else:
        text += " `auxcap upstream-patch --tests-dir DIR` writes them to a folder."
    return text


def test_command(result: UpstreamResult, path: str) -> str:
    """How a reviewer runs the test file at ``path`` (a path of the patch)."""
    name = path.rsplit("/", 1)[-1].removesuffix(".py")
    if result.tree.kind == "checkout":
        return f"cd {result.tree.tests} && python3 -m unittest {name}"
    module = path.removesuffix(".py").replace("/", ".")
    return f"python3 -m unittest {module}"


def accepted_algorithms(result: UpstreamResult) -> tuple[list[str], list]:
    """(the speculative algorithms the validation change accepts with PP, the refusals left
    elsewhere that keep the others of EAGLE3/DFLASH refused), from the patched architectures
    and the checks left after the patch (``reachability.py``)."""
    found = result.validation.architectures if result.validation is not None else {}
    kinds = [kind for kind in ADMITTED if any(kind in methods for methods in found.values())]
    left = refusals(result)
    kept = [(kind, refusal_of(left, kind)) for kind in kinds]
    return (
        [kind for kind, refusal in kept if refusal is None],
        [refusal for _kind, refusal in kept if refusal is not None],
    )


#: What the patch does to a model file whose model refuses PP in its constructor.
DEAD_RETURN = (
    "drops the early return off the last rank, which never runs: the model refuses PP in "
    "its constructor; declares no relay, so aux capture under PP stays refused for it"
)


def own_stack_subclasses(result: UpstreamResult) -> list[str]:
    """The classes that inherit patched hooks and declare their own relay because the patch
    rewrote the decoder stack they build (``family/planning/subclass.py``)."""
    if result.family is None:
        return []
    return sorted(
        outer
        for decision in result.family.decisions.values()
        if decision.patched and decision.inherits
        for outer, _stack, _hooks in decision.cases
    )


def subclass_words(result: UpstreamResult, code: str = "`") -> str:
    """`` , or declares its own ... (X)`` for :func:`own_stack_subclasses`; empty when none."""
    found = own_stack_subclasses(result)
    if not found:
        return ""
    names = ", ".join(f"{code}{name}{code}" for name in found)
    return f", or declares its own where this patch rewrote the stack it builds ({names})"


def dead_return_files(result: UpstreamResult) -> list[str]:
    """The model files whose hooks' early return the patch drops although it does not
    patch them (``FileDecision.dead_returns``), by file name."""
    if result.family is None:
        return []
    return sorted(f for f, d in result.family.decisions.items() if d.dead_returns)


def early_return_files(result: UpstreamResult) -> list[str]:
    """The patched model files whose capture hooks return early off the last PP rank in the
    release's own text (the family survey's finding), by file name."""
    if result.family is None:
        return []
    plan = result.family
    return [file for file in plan.patched if plan.decisions[file].early_return]


def in_release(result: UpstreamResult, text: str) -> bool:
    """``text`` occurs in the release's text of some file the patch changes: a string may be
    quoted as something the release says only then."""
    return any(text in (change.old or "") for change in result.changes if change.changed)


def forward_users(result: UpstreamResult, file: str) -> list[str]:
    """The patched models whose capture forward lives in ``file`` while their hook does
    not (``qwen3_5.py`` for ``qwen3_5_text``)."""
    if result.family is None:
        return []
    return sorted(
        decision.name
        for decision in result.family.decisions.values()
        if decision.patched
        and decision.forward is not None
        and decision.forward.file == file
        and decision.file != file
    )


#: The helpers, by name.
HELPER_NAMES = (
    f"set_pp_aux_capture, pp_aux_outgoing / pp_aux_handoff, pp_aux_collect / "
    f"{names.SEED}, {names.WIDTH}"
)


def adds_packer_accessor(change: FileChange) -> bool:
    """``change`` gives ``AuxHiddenStatePacker`` its ``captured()`` accessor."""
    method = "def captured(self)"
    return method in change.new and method not in (change.old or "")


def helpers_summary(change: FileChange, named: bool = False) -> str:
    """What the module that holds the helpers gets: created with them, or the helpers
    after SGLang's own code (and the packer's accessor where the patch adds it);
    ``named``: list the helpers."""
    what = "the helpers the patched hooks and forwards call"
    if named:
        what += f" ({HELPER_NAMES})"
    if change.old is None:
        return f"new: {what}"
    what += ", appended after AuxHiddenStatePacker"
    if adds_packer_accessor(change):
        what += ", which gains captured() for stages that hand captures on"
    return what


#: What a file of the patch gets, by the role of its change, for file lists.
ROLE_SUMMARIES = {
    Role.PACKER: "AuxHiddenStatePacker.captured() for stages that hand captures on",
    Role.SIZING: "sizes the aux_hidden_states PP proxy buffer of non-first stages",
    Role.SIZING_RENAME: f"CUDA-graph sizing renamed from {NATIVE.name} to every capture method",
    Role.WARMUP_SIZING: "sizes the aux_hidden_states entry of the dummy-forward buffers "
    "(FlashInfer autotune, DeepGEMM warm-up)",
    Role.RELAY_RENAME: f"{NATIVE.name} relay renamed: dspark_hidden_states -> aux_hidden_states",
    Role.TEST_MODELS: "new: the small models the family test builds",
    Role.FAMILY_TEST: "new CPU test: each patched model under PP (gloo, 2 and 3 stages) "
    "equals PP=1",
    Role.INIT_TEST: "new CPU test: the patched models built through __init__ hand "
    "captures on, size the buffer, pass validation",
    Role.FIX: "separate fix (not about aux capture)",
    Role.RUNTIME_GUARD: "refuses aux capture under PP for a model class that does not "
    "relay that method",
    Role.RELAY_TEST: "new CPU test: the relay, the per-method opt-in, the runtime guard, "
    "the width lookup and the deprecated width method",
}
#: A relay file whose own DSPARK relay the patch also moves onto the shared helpers.
RELAY_THROUGH_HELPERS = f"{NATIVE.name} relay renamed to aux_hidden_states, run through the helpers"


def relays_through_helpers(change: FileChange) -> bool:
    """``change`` moves a model file's own relay onto the shipped helpers."""
    attach = f"{names.ATTACH}("
    return attach in change.new and attach not in (change.old or "")


def file_summary(result: UpstreamResult, change: FileChange) -> str:
    """What one changed file of ``result`` gets, from its role and the family's decision."""
    name = change.path.rsplit("/", 1)[-1]
    if change.role is Role.VALIDATION:
        accepted, _left = accepted_algorithms(result)
        what = " and ".join(accepted)
        words = f"accepts {what or 'nothing new'} with PP for the patched models"
        if rewords_aux_flag(result):
            words += f"; {AUX_FLAG} stays refused with PP, with the reason that holds"
        return words
    if change.role is Role.RELAY_RENAME and relays_through_helpers(change):
        return RELAY_THROUGH_HELPERS
    if change.role is Role.RUNTIME_MODULE:
        return helpers_summary(change)
    if change.role is not Role.MODEL:
        return ROLE_SUMMARIES.get(change.role, change.role.value)
    decision = result.family.decisions.get(name) if result.family is not None else None
    if decision is not None and decision.patched and decision.inherits:
        return (
            f"own decoder stack of a subclass of {decision.inherits}: relays the captures "
            "of the inherited hooks; the subclass declares its own relay"
        )
    if decision is not None and decision.patched:
        if decision.early_return:
            return "hooks no longer return early off the last rank; captures relayed"
        return "captures taken on every stage and relayed to the last"
    if decision is not None and decision.dead_returns:
        return DEAD_RETURN
    users = forward_users(result, name)
    if users:
        return f"capture forward of {', '.join(users)}"
    rewritten = next(
        (s for s in result.models if s.path == change.path and s.status != SUPPORTED), None
    )
    if rewritten is not None:
        return f"{', '.join(rewritten.hooks)} captures under PP instead of raising"
    return change.role.value
