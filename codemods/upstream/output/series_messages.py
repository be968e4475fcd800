"""Commit messages of the series' patches, each about its own files only.

* the runtime patch names each module it adds and each file of the sizing path it changes;
  the rename patch (0.5.21+) names each file of SGLang's own DSPARK relay and its sizing
  that it renames, and the names it renames, and says what ``base_runner.py`` gets there
  (the aux entry in the dummy-forward buffers, not a rename);
* a model-family patch names, per model file, the hooks it changes, how the file's capture
  forward carries the captures, and any other fix the patch makes in that file; a file
  changed only as another model's capture forward says so;
* the validation patch names the file, the architectures it accepts and for which capture,
  the algorithms it accepts, and any refusal left elsewhere that keeps one of them refused
  (``reachability.py``; DFLASH in ``_handle_dflash`` on 0.5.21-0.5.23).
"""

from __future__ import annotations

import textwrap

from codemods.catalog.methods import ADMITTED, FALLBACK, FALLBACK_TARGET, NATIVE
from codemods.upstream.edit import names
from codemods.upstream.edit.change_kinds import FIX, KIMI, RUNTIME, VALIDATION, Role
from codemods.upstream.family import registry
from codemods.upstream.output.result_facts import (
    DEAD_RETURN,
    GUARD_CALL,
    accepted_algorithms,
    aux_flag_sentence,
    guard_passes,
    guard_where,
    helpers_summary,
    relays_through_helpers,
    rewords_aux_flag,
    subclass_words,
    test_command,
    validation_change,
)
from codemods.upstream.result import UpstreamResult

#: What each runtime file gets, by its role (the helpers' module: ``helpers_summary``).
RUNTIME_FILES = {
    Role.PACKER: "AuxHiddenStatePacker.captured(): the captures taken so "
    "far, for a stage that hands them on",
}
#: The names the rename of SGLang's DSPARK relay replaces, old -> new.
RENAMED_NAMES = (
    ("dspark_hidden_states", "aux_hidden_states"),
    ("get_pp_proxy_dspark_hidden_size", "get_pp_proxy_aux_hidden_size"),
)
#: A file that gains the sizing path (a tree without SGLang's DSPARK one).
SIZING_WORDS = "sizes the aux_hidden_states PP proxy buffer of non-first stages"
#: ``base_runner.py``, whose dummy-forward buffers gain the entry.
WARMUP_WORDS = (
    "the buffers of the dummy forwards at start-up (FlashInfer autotune, DeepGEMM "
    "warm-up) get the aux_hidden_states entry too, sized by "
    "ModelRunner.get_pp_proxy_aux_hidden_size as the graph buffers are"
)


def _wrap(text: str, indent: str = "") -> str:
    return (
        textwrap.fill(
            text, width=72, break_on_hyphens=False, break_long_words=False, subsequent_indent=indent
        )
        + "\n"
    )


#: The group of the rename patch (``series.RENAME``; said here too, series imports this).
RENAME = "runtime-rename"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _command(command: str, indent: str = "  ") -> str:
    """A shell command on lines of at most 72 characters: broken after ``&&``."""
    parts = command.split(" && ")
    return "".join(
        f"{indent}{part}{' &&' if n < len(parts) - 1 else ''}\n" for n, part in enumerate(parts)
    )


def fill_message(patch, result: UpstreamResult) -> None:
    """Fill ``patch.subject`` and ``patch.body`` (a ``series.SeriesPatch``); the subject
    and every body line are at most 72 characters."""
    if patch.key == RUNTIME:
        _runtime(patch, result)
    elif patch.key == RENAME:
        _rename(patch, result)
    elif patch.key.startswith(FIX):
        _fix(patch, result)
    elif patch.key == VALIDATION:
        _validation(patch, result)
    else:
        _family(patch, result, patch.subject)


def _runtime(patch, result: UpstreamResult) -> None:
    changes = [c for c in patch.changes if c.changed]
    sized = any(c.role is Role.SIZING for c in changes)
    patch.subject = "[PP] Carry aux hidden states in the PP handoff" + (
        " and size its proxy buffer" if sized else ""
    )

    def what(change) -> str:
        if change.role is Role.SIZING:
            return SIZING_WORDS
        if change.role is Role.WARMUP_SIZING:
            return WARMUP_WORDS
        if change.role is Role.RUNTIME_MODULE:
            return helpers_summary(change, named=True)
        return RUNTIME_FILES.get(change.role, change.role.value)

    lines = [_wrap(f"- {_name(c.path)}: {what(c)}.", "  ") for c in changes]
    sizing = (
        f"  The CUDA-graph sizing asks {names.WIDTH}(model), which finds the relay "
        "a hook gave the model's decoder stack."
        if sized
        else ""
    )
    patch.body = (
        _wrap(
            "A stage that is not the last hands the captures of every stage up to "
            f"itself to the next one in one {names.AUX_ENTRY} entry of its "
            "PPProxyTensors; the last stage puts them before its own.  A capture "
            f"hook passes {names.ATTACH} the width of its decoder stack's hidden "
            f"states.{sizing}  No model calls the new helpers yet; the model patches "
            "that follow do."
        )
        + "\n"
        + "".join(lines)
    )


def _rename(patch, result: UpstreamResult) -> None:
    """SGLang's own DSPARK relay and its CUDA-graph sizing, renamed for every method."""
    changes = [c for c in patch.changes if c.changed]
    old = "".join(c.old or "" for c in changes)
    pairs = [f"{a} -> {b}" for a, b in RENAMED_NAMES if a in old]
    patch.subject = f"[PP] Rename SGLang's {NATIVE.name} relay entry for every capture method"
    relays = [_name(c.path) for c in changes if c.role is Role.RELAY_RENAME]
    entry = f"a {RENAMED_NAMES[0][0]}" if RENAMED_NAMES[0][0] in old else "its own"
    where = f" ({', '.join(relays)})" if relays else ""
    patch.body = (
        _wrap(
            f"SGLang relays {NATIVE.name} captures across PP stages itself{where}, in "
            f"{entry} entry of the PP handoff sized for CUDA graphs.  The entry and "
            "its sizing are renamed so that every capture method can use them."
        )
        + "\n"
        + "".join(_wrap(f"- {pair}", "  ") for pair in pairs)
        + "\n"
        + "".join(
            _wrap(f"- {_name(c.path)}", "  ") for c in changes if c.role is not Role.WARMUP_SIZING
        )
        + "".join(
            "\n"
            + _wrap(
                f"{_name(c.path)} (not a rename): {WARMUP_WORDS}; SGLang never sized "
                f"its {NATIVE.name} entry there."
            )
            for c in changes
            if c.role is Role.WARMUP_SIZING
        )
        + "".join(
            "\n"
            + _wrap(
                f"{', '.join(moved)} then relay through the helpers of the runtime commit "
                "(set_pp_aux_capture, the handoff and collect calls) instead of their own "
                "concatenation and width methods: one mechanism for every model."
            )
            for moved in [[_name(c.path) for c in changes if relays_through_helpers(c)]]
            if moved
        )
        + "".join(
            "\n"
            + _wrap(
                f"{_name(c.path)}: the resolver asks a model's own "
                "get_pp_proxy_aux_hidden_size, then get_pp_proxy_dspark_hidden_size of "
                "a model that still defines it (out of tree) for one more release, with "
                f"a deprecation warning, else {names.WIDTH}(model), one lookup for "
                "every model."
            )
            for c in changes
            if "get_pp_proxy_dspark_hidden_size" in c.new and "deprecated" in c.new
        )
    )


def _fix(patch, result: UpstreamResult) -> None:
    """A model file's separate fixes: the stack setters it adds, the forwards it repairs."""
    plan = result.family
    (path,) = patch.paths
    file = _name(path)
    assert plan is not None
    added = [f"{a.class_name}.{a.method}" for a in plan.stack_setters.get(file, [])]
    repaired = [f"{f.class_name}.forward" for f in plan.stage_fixes.get(file, [])]
    what = []
    if added:
        what.append(f"add {', '.join(added)}")
    if repaired:
        what.append(f"hand non-last PP stages' output on in {', '.join(repaired)}")
    patch.subject = f"[Fix] {file.removesuffix('.py')}: {'; '.join(what)}"
    if len(patch.subject) > 72:
        patch.subject = f"[Fix] {file.removesuffix('.py')}: " + (
            "add a missing stack setter" if added else "hand non-last PP stages' output on"
        )
    decision = plan.decisions.get(file)
    lines = [_wrap(f"- {fix}.", "  ") for fix in (decision.fixes if decision else ())]
    patch.body = (
        _wrap(
            f"{file} fails without this, with or without aux hidden-state "
            "capture; the capture patch of this file builds on it."
        )
        + "\n"
        + "".join(lines)
    )


def _guard_paragraph(result: UpstreamResult) -> str:
    where = guard_where(result, _name)
    if not where:
        return ""
    passes = guard_passes(result, _name)
    return _wrap(
        f"{GUARD_CALL} now runs after each call of a capture hook in {where}"
        + (f"; {passes} (a caller without it has one stage)" if passes else "")
        + "; with PP it raises NotImplementedError naming the class, the method and why "
        "when the decoder stack the hook set up does not relay that method "
        "(pp_aux_relay_methods, which each model patch declares on the stacks whose "
        "forward it makes relay), so no path that configures the capture loses "
        "captures silently."
    )


def guard_message(patch, result: UpstreamResult) -> None:
    """The message of a patch that holds the runtime guard alone."""
    patch.subject = "[PP] Refuse aux capture under PP for models that do not relay it"
    patch.body = _guard_paragraph(result) or _wrap(
        "The runtime guard of aux capture under PP and its test."
    )


def _validation(patch, result: UpstreamResult) -> None:
    if validation_change(result) is None:
        # Only the runtime guard (and no relaxed validation): a release whose server
        # refuses speculative decoding with PP, or a patched tree.
        guard_message(patch, result)
        return
    found = result.validation.architectures if result.validation is not None else {}
    refused = [kind for kind in ADMITTED if any(kind in kinds for kinds in found.values())] or list(
        ADMITTED
    )
    accepted, left = accepted_algorithms(result)
    if accepted:
        patch.subject = f"[PP] Accept {'/'.join(accepted)} with PP for the patched architectures"
    elif rewords_aux_flag(result):
        patch.subject = "[PP] Say why aux hidden states cannot be returned with PP"
    else:
        patch.subject = "[PP] Name the patched architectures in the PP validation"
    listed = "; ".join(f"{arch} ({', '.join(ks)})" for arch, ks in sorted(found.items()))
    flag = f" {aux_flag_sentence(result, '')}" if rewords_aux_flag(result) else ""
    guards = [c for c in patch.changes if c.role is Role.RUNTIME_GUARD and c.changed]
    files = ", ".join(_name(p) for p in patch.paths if p not in {c.path for c in guards})
    still = "".join(
        "\n"
        + _wrap(
            f"Still refused after this series: {r.algorithm} with PP "
            f"({_name(r.path)}, {r.function}: {r.condition}), so "
            f"check_pipeline_parallel_compat keeps refusing {r.algorithm} too: "
            "accepting it there could not run."
        )
        for r in left
    )
    accepts = f"It now accepts {' and '.join(accepted)} for" if accepted else "It now names"
    patch.body = (
        _wrap(
            f"check_pipeline_parallel_compat ({files}) refused {' and '.join(refused)} "
            f"speculative decoding with PP.  {accepts} a model class, resolved as the "
            "server resolves it (get_model_architecture), that lists the convention in "
            "pp_aux_relay_methods: the causal-LM classes the model patches of this series "
            "rewrote declare it in their own body, and a subclass is covered only where it "
            f"defines none of __init__, forward or the convention's hook"
            f"{subclass_words(result, '')}; in the patched "
            f"files, {len(found)} architecture{'s' if len(found) != 1 else ''} "
            f"(capture conventions in brackets): {listed}.{_via_dflash(found)}{flag}  "
            "These architectures "
            "are answered from a table of them and their conventions in the hook, so the "
            "check imports no model code for them (the model registry imports every "
            "model).  Every other refusal is kept, and any other model class is still "
            "refused, with a message naming the class, the capture method and the "
            "reason: its decoder stack is not patched to relay captures, its constructor "
            "refuses PP, it never splits its layers across stages, or the Transformers "
            "backend has no capture hooks."
        )
        + still
        + ("\n" + _guard_paragraph(result) if guards else "")
    )


def _via_dflash(found: dict[str, tuple[str, ...]]) -> str:
    """The sentence that says why a class lists DSPARK without declaring it, where one
    does: the runner configures DSPARK through the DFLASH hook of a target without a
    DSPARK hook, and such a class relays DSPARK where it relays DFLASH."""
    if not any(FALLBACK.name in ks and FALLBACK_TARGET.name in ks for ks in found.values()):
        return ""
    return (
        f"  A class without a {FALLBACK.name} hook is listed for {FALLBACK.name} where it "
        f"relays {FALLBACK_TARGET.name}: the runner configures {FALLBACK.name}'s capture "
        f"through its {FALLBACK_TARGET.name} hook, which the runtime guard asks about."
    )


def _hooks_of(decision) -> str:
    hooks = [f"{outer}.{hook}" for outer, _, hs in decision.cases for hook in hs]
    return ", ".join(dict.fromkeys(hooks))


def _kimi_line(path: str, result: UpstreamResult) -> str:
    name = _name(path)
    k3 = (
        "; the next stage finishes a stage's last-layer capture (attention residuals)"
        if name == "kimi_k3.py"
        else ""
    )
    old = next((c.old or "" for c in result.changes if c.path == path), "")
    error = f'"{names.PP_ERROR}"' if names.PP_ERROR in old else "an error"
    return (
        f"{NATIVE.hook} no longer raises {error} under "
        "PP: it stores the ids on every rank and calls set_pp_aux_capture; the "
        "forward hands each stage's captures on and the last stage collects them in "
        f"layer order{k3}"
    )


def _family(patch, result: UpstreamResult, title: str) -> None:
    plan = result.family
    decisions = plan.decisions if plan is not None else {}
    patch.subject = f"[PP] {title}: carry aux hidden states across stages"
    if not patch.models:  # only hooks whose early return never runs
        patch.subject = f"[PP] {title}: drop capture-hook returns that never run"
    if len(patch.subject) > 72:
        patch.subject = f"[PP] {title}: aux hidden states across stages"
    lines = []
    for change in patch.changes:
        if not change.changed or change.role is not Role.MODEL:
            continue
        path = change.path
        name = _name(path)
        decision = decisions.get(name)
        if change.group == KIMI and (decision is None or not decision.patched):
            lines.append(_wrap(f"- {name}: {_kimi_line(path, result)}.", "  "))
            continue
        if decision is not None and decision.patched and decision.inherits:
            kinds = "; ".join(map(registry.describe, decision.capture_kinds))
            outer, _stack, _hooks = decision.cases[0]
            text = (
                f"- {name}: {outer} inherits the hooks of {decision.inherits} and builds "
                f"its own stack; forward {decision.forward} ({kinds}) adds its captures "
                "to the PP handoff and the last stage gathers them in PP=1 order; "
                f"{outer} declares pp_aux_relay_methods of its own."
            )
            lines.append(_wrap(text, "  "))
            continue
        if decision is not None and decision.patched:
            kinds = "; ".join(map(registry.describe, decision.capture_kinds))
            text = (
                f"- {name}: {_hooks_of(decision)} store the ids on every rank instead "
                f"of returning off the last one; forward {decision.forward} "
                f"({kinds}) adds its captures to the PP handoff and the last stage "
                "gathers them in PP=1 order."
            )
            fixed = plan.fixes_only() if plan is not None and decision.fixes else {}
            if name in fixed and change.old == fixed[name]:
                # The fix is a commit of its own before this one.
                text += "".join(
                    f"  Builds on the separate fix of this file (its own commit): {fix}."
                    for fix in decision.fixes
                )
            else:
                text += "".join(f"  Separate fix in this file: {fix}." for fix in decision.fixes)
            lines.append(_wrap(text, "  "))
            continue
        if decision is not None and decision.dead_returns:
            hooks = ", ".join(decision.dead_returns)
            lines.append(_wrap(f"- {name}: {hooks}: {DEAD_RETURN}.", "  "))
            continue
        users = sorted(
            d.name
            for d in decisions.values()
            if d.patched and d.forward is not None and d.forward.file == name
        )
        what = (
            f"capture forward of {', '.join(users)}"
            if users
            else "changed for the models of this patch"
        )
        lines.append(_wrap(f"- {name}: {what}.", "  "))
    test = ""
    tests = [c for c in patch.changes if c.role is Role.FAMILY_TEST]
    if tests:
        old, new = tests[0].old or "", tests[0].new or ""
        added = sorted(
            d.name for d in decisions.values() if f'"{d.name}"' in new and f'"{d.name}"' not in old
        )
        test = (
            "\n"
            + _wrap(f"Test (this patch adds {', '.join(added) or 'no model'} to it):")
            + _command(test_command(result, tests[0].path))
        )
    patch.body = (
        _wrap(
            (
                f"Models: {', '.join(sorted(dict.fromkeys(patch.models)))}."
                if patch.models
                else "No model of this patch relays its captures."
            )
            + "  With PP=1 nothing changes."
        )
        + "\n"
        + "".join(lines)
        + test
    )
