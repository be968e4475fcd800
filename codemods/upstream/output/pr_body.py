"""The Markdown pull-request description that goes with the upstream patch.

It follows SGLang's current pull-request template: a short title, then ``## Motivation``
(the failures users hit, counted from the family's findings, and which server
configurations reach the change on this release, read from the release's own checks by
:mod:`codemods.upstream.tree.reachability`), ``## Modifications`` (runtime files, one line
per model family with its files, separate fixes, sizing, validation, tests, and the series
when ``--series`` wrote one), ``## Accuracy Tests`` (the CPU tests by file: what
``--validate`` ran and its verdicts, else the commands a reviewer runs, said to be not run),
``## Benchmarking and Profiling`` (the GPU check as commands, said to be not run; nothing is
claimed that this run did not do) and ``## Checklist`` (SGLang's items, unchecked except what
the patch itself shows).  Every file it names is a file of the patch, and every count comes
from the result (:mod:`codemods.upstream.output.result_facts`).
The bytes the relay moves between stages, measured against a direct transport, are in
auxcap's reference (``docs/validate-pp.md``), not in the description.
"""

from __future__ import annotations

from codemods.catalog.methods import ADMITTED, FALLBACK, FALLBACK_TARGET, HOOK_TITLES, NATIVE
from codemods.upstream.edit import names
from codemods.upstream.edit.change_kinds import KIMI, Role
from codemods.upstream.output.model_families import family_rank, family_title
from codemods.upstream.output.pr_sizing import (
    changed_by,
    code_span,
    deprecated_section,
    sizing_line,
)
from codemods.upstream.output.result_facts import (
    DEAD_RETURN,
    GUARD_CALL,
    KIMI_STEM,
    SHIPPED_TEST_ROLES,
    accepted_algorithms,
    added_tests,
    adds_packer_accessor,
    aux_flag_sentence,
    dead_return_files,
    dflash_via_dspark,
    early_return_files,
    family_models,
    file_summary,
    guard_passes,
    guard_where,
    helpers_summary,
    in_release,
    k3_rewritten,
    kimi_relay_renamed,
    kimi_rewritten,
    kimi_touched,
    refusals,
    shipped_test_commands,
    subclass_words,
    test_command,
    tests_left_out_line,
    touched_hooks,
    touched_models,
    validation_change,
)
from codemods.upstream.result import UpstreamResult
from codemods.upstream.tree.reachability import EVERY, refusal_of
from codemods.upstream.validation.run_tests import STAND_INS
from codemods.upstream.validation.shipped_tests import TEST_FILE as FAMILY_TEST_FILE

__all__ = [
    "render",
    "title_of",
    "touched_hooks",
    "touched_models",
    "kimi_touched",
    "MAX_LINES",
    "SECTIONS",
]

#: SGLang's pull-request template sections, in order.
SECTIONS = (
    "## Motivation",
    "## Modifications",
    "## Accuracy Tests",
    "## Benchmarking and Profiling",
    "## Checklist",
)
#: The longest description this renders (lines).
MAX_LINES = 150

#: Short names of the capture hooks, as the title lists them.
HOOK_NAMES = HOOK_TITLES
KIMI_TITLE = f"# [PP] Kimi-Linear: carry {NATIVE.name} aux hidden states across pipeline stages"

#: SGLang's checklist items.
CHECKLIST = (
    "Format code with pre-commit",
    "Add unit tests",
    "Update documentation",
    "Provide accuracy and speed benchmark results",
    "Follow the SGLang code style guidance",
)


def title_of(result: UpstreamResult) -> str:
    models = touched_models(result)
    if models == [KIMI_STEM]:
        return KIMI_TITLE
    kinds = "/".join(HOOK_NAMES.get(hook, hook) for hook in touched_hooks(result))
    return f"# [PP] Carry aux hidden states across pipeline stages ({kinds})"


def _reach(result: UpstreamResult) -> list[str]:
    """Which server configurations reach the change, from the checks left after it."""
    found = refusals(result)
    lines = []
    every = next((r for r in found if r.algorithm == EVERY), None)
    if every is not None:
        npu = " on non-NPU platforms" if every.except_npu else ""
        lines.append(
            f"**Reach on this release:** the server refuses speculative decoding with "
            f"`--pp-size > 1`{npu} (`{every.path}`, `{every.function}`: "
            f"`assert ... speculative_algorithm is None` under `{every.condition}`), so no "
            "server configuration reaches the change there; it takes effect only where code "
            "drives the patched model classes directly (as the added tests do)."
        )
    others = [r for r in found if r.algorithm != EVERY]
    if every is not None and others:
        lines.append(
            "Also refused with PP there: "
            + "; ".join(f"{r.algorithm} (`{r.function}`: `{r.condition}`)" for r in others)
            + "."
        )
        return lines
    for refusal in others:
        check = (
            f'`{refusal.path}`, `{refusal.function}`: `{refusal.condition}` -> "{refusal.message}"'
        )
        if refusal.conditional:
            lines.append(
                f"**Still checked:** {refusal.algorithm} with PP is accepted only "
                f"where this check lets it through ({check})."
            )
        else:
            fallback = (
                dflash_via_dspark(result) if refusal.algorithm == FALLBACK_TARGET.name else None
            )
            where = (
                "only outside the server"
                if fallback is None
                else f"by the server only through {FALLBACK.name} with PP (`"
                f"{fallback.function}` calls `{FALLBACK_TARGET.hook}` for a {FALLBACK.name} "
                f"target that has no `{FALLBACK.hook}`)"
            )
            lines.append(
                f"**Still refused:** {refusal.algorithm} with PP ({check}); the "
                f"{refusal.algorithm} capture change is reached {where} on this "
                "release."
            )
    return lines


def _motivation(result: UpstreamResult) -> str:
    lines = [
        f"Speculative decoding ({', '.join(HOOK_TITLES.values())}) reads aux hidden states "
        "captured "
        "after a few target layers; under pipeline parallelism those layers live on "
        "different stages, and today:",
        "",
    ]
    family = family_models(result)
    early = early_return_files(result)
    if early:
        lines.append(
            f"1. the capture hooks of {len(early)} model files return early off the last "
            "PP rank (`if not self.pp_group.is_last_rank: return`), so only the last stage "
            "captures: the drafter silently gets fewer aux states, or the last stage fails "
            "unpacking its output when it owns none of the capture layers;"
        )
    dead = dead_return_files(result)
    if dead:
        lines.append(
            f"1. the hooks of {len(dead)} more ({', '.join(code_span(f) for f in dead)}) return "
            "early the same way, but their model refuses PP in its constructor, so the "
            "return never runs and nothing is lost; the patch drops it (no capture hook "
            "decides by PP rank by itself) and declares no relay for them;"
        )
    plan = result.family
    patched = plan.patched if plan is not None else []
    decisions = plan.decisions if plan is not None else {}
    inheriting = [f for f in patched if decisions[f].inherits]
    others = [file for file in patched if file not in early and file not in inheriting]
    if others:
        lines.append(
            f"1. in {len(others)} more model files ({', '.join(code_span(f) for f in others)}) "
            "the hooks do not return early, but no stage hands its captures on to the "
            "last, so under PP the captures of earlier stages are lost the same way;"
        )
    for file in inheriting:
        decision = decisions[file]
        outer, stack, _hooks = decision.cases[0]
        lines.append(
            f"1. `{outer}` ({code_span(file)}) inherits the hooks of `{decision.inherits}` but "
            f"builds its own decoder stack (`{stack}`), which hands nothing on: its stack "
            "is patched the same way, and it declares the relay itself (a declaration "
            "covers subclasses only while they keep the declaring class's stack);"
        )
    if kimi_rewritten(result) or k3_rewritten(result):
        models = [
            name
            for touched, name in (
                (kimi_rewritten(result), "Kimi-Linear"),
                (k3_rewritten(result), "Kimi-K3"),
            )
            if touched
        ]
        verb = "refuse" if len(models) > 1 else "refuses"
        error = (
            f': `NotImplementedError("{names.PP_ERROR}")`'
            if in_release(result, names.PP_ERROR)
            else ""
        )
        lines.append(f"1. {' and '.join(models)} {verb} PP outright{error};")
    if kimi_relay_renamed(result) and family:
        lines.append(
            f"1. `kimi_linear.py` and `kimi_k3.py` already relay {NATIVE.name} captures in "
            "the handoff (`dspark_hidden_states`, sized for CUDA graphs through "
            "`get_pp_proxy_dspark_hidden_size`), but no other model or capture "
            "method uses that path;"
        )
    change = validation_change(result)
    if change is not None:
        lines.append(
            f"1. `check_pipeline_parallel_compat` (`{change.path}`) rejects "
            f"{' and '.join(ADMITTED)} speculative decoding with PP."
        )
    reach = _reach(result)
    return "\n".join(lines) + "\n" + "".join(f"\n{line}\n" for line in reach)


def _family_lines(result: UpstreamResult) -> list[str]:
    """One line per model family: its changed model files (a file changed only as another
    model's capture forward says whose)."""
    plan = result.family
    decisions = plan.decisions if plan is not None else {}
    groups: dict[str, tuple[str, list[str]]] = {}
    # Model rewrites only: a renamed relay is listed with the sizing path.
    for change in changed_by(result, Role.MODEL):
        name = change.path.rsplit("/", 1)[-1]
        key, title = change.group, family_title(change.group)
        entry = code_span(name)
        own = decisions.get(name)
        if own is not None and own.dead_returns:
            entry += f" ({DEAD_RETURN})"
        elif key != KIMI and (own is None or not own.patched):
            users = sorted(
                d.name
                for d in decisions.values()
                if d.patched and d.forward is not None and d.forward.file == name
            )
            entry += f" (capture forward of {', '.join(users) or 'another model'})"
        groups.setdefault(key, (title, []))[1].append(entry)
    return [
        f"  - {groups[key][0]}: {', '.join(groups[key][1])}"
        for key in sorted(groups, key=family_rank)
    ]


def _kimi_lines(result: UpstreamResult) -> list[str]:
    lines = []
    if kimi_rewritten(result):
        lines.append(
            f"- `kimi_linear.py`: `{NATIVE.hook}` stores the ids on "
            "every rank and calls `set_pp_aux_capture`; each stage records its "
            "captures, the last collects them in layer order."
        )
    if k3_rewritten(result):
        lines.append(
            "- `kimi_k3.py`: the same setter and relay; a stage's last-layer "
            "capture is finished on the next stage (attention residuals)."
        )
    return lines


def _validation_line(result: UpstreamResult) -> str:
    change = validation_change(result)
    if change is None:
        return ""
    found = result.validation.architectures if result.validation is not None else {}
    accepted, kept = accepted_algorithms(result)
    count = f"{len(found)} architecture{'' if len(found) == 1 else 's'} in the patched files"
    if accepted:
        line = (
            f"- Validation (`{change.path}`): {'/'.join(accepted)} accepted with PP where "
            "the served model class (resolved as the server does, `get_model_architecture`, "
            "so `--model-impl transformers` is refused) relays that method: it is listed in "
            "`pp_aux_relay_methods`, declared in the body of each causal-LM class whose "
            f"hooks this patch rewrote ({count}), and a subclass is covered only where it "
            "defines none of `__init__`, `forward` or the method's "
            f"hook{subclass_words(result)}.  These architectures are answered from a table "
            "of them and their methods in the hook, so the check imports no model code "
            "for them (the model registry imports every model).  Any other class is "
            "refused with a message naming the class, the method and the reason (its "
            "decoder stack is not patched to relay captures, its constructor refuses PP, "
            "it never splits its layers across stages, or the Transformers backend has no "
            "capture hooks); every other refusal kept."
        )
    else:
        line = (
            f"- Validation (`{change.path}`): no speculative algorithm is newly accepted "
            "with PP for the patched model classes (`pp_aux_relay_methods`, declared in "
            f"the body of each causal-LM class whose hooks this patch rewrote: {count}); "
            "every other refusal kept."
        )
    for refusal in kept:
        line += (
            f" {refusal.algorithm} with PP stays refused: `{refusal.function}` "
            f"(`{refusal.condition}`, named above) refuses it before its worker starts, "
            "so accepting it in `check_pipeline_parallel_compat` could not run."
        )
    flag = aux_flag_sentence(result)
    return line + (f" {flag}" if flag else "") + "\n"


def _guard_line(result: UpstreamResult) -> str:
    where = guard_where(result, code_span, code_span)
    if not where:
        return ""
    passes = guard_passes(result, code_span, code_span)
    return (
        f"- Runtime guard: `{GUARD_CALL}` after each call of a capture hook in {where}"
        + (f"; {passes} (a caller without it has one stage)" if passes else "")
        + "; with PP it raises `NotImplementedError` naming the class, the method and why "
        "when the decoder stack the hook set up does not relay that method (a wrapper "
        "that keeps a relaying stack is admitted), so no path that configures the capture "
        "(the server's, or `ModelRunner` driven directly) loses captures silently.\n"
    )


def _fixes(result: UpstreamResult, series) -> str:
    plan = result.family
    if plan is None:
        return ""
    patched = [plan.decisions[f] for f in plan.patched]
    fixes = [f"  - `{d.file}`: {fix}" for d in patched for fix in d.fixes]
    stale = sorted({d.file for d in patched if d.stale_comments})
    out = ""
    if fixes:
        where = "each is its own patch of the series" if series else "also in these files"
        out += f"- Separate fixes (not about aux capture; {where}):\n" + "\n".join(fixes) + "\n"
    if stale:
        out += (
            f"- Comments that still tie capture to the last stage (reword in review): "
            f"{', '.join(code_span(f) for f in stale)}.\n"
        )
    return out


def _modifications(result: UpstreamResult, series) -> str:
    runtime = [
        c.path for role in (Role.RUNTIME_MODULE, Role.PACKER) for c in changed_by(result, role)
    ]
    lines = []
    if runtime:
        lines.append(
            f"- Runtime: {', '.join(code_span(p) for p in runtime)}{_helpers_where(result)}."
            " Each patched hook stores its ids on every rank and calls "
            "`set_pp_aux_capture` with the width of its decoder stack's hidden states "
            "(`hidden_size=`, read off the config its `__init__` builds the stack from); a "
            "non-last "
            "stage adds "
            "what it received and its own captures to the `aux_hidden_states` entry of its "
            "`PPProxyTensors` handoff; the last stage puts them before its own (PP=1 order) "
            "and raises naming the layers when the entry is missing or of another width. "
            "The entry cannot grow in place, so a stage that adds captures copies what it "
            "received once, beside its own, into the tensor it sends"
            + (
                ": a stack that packs its captures packs both into an "
                "`AuxHiddenStatePacker` sized for them and sends its buffer, a list is "
                "concatenated once. "
                if _packs(result)
                else " (one concatenation). "
            )
            + "The last stage returns views of the entry, copied out only while a CUDA "
            "graph is captured or `torch.compile` traces the forward (the runner's "
            "static buffer, overwritten by the next replay)."
        )
    lines += _kimi_lines(result)
    family = _family_lines(result)
    if family:
        lines.append("- Model files, by family:")
        lines += family
    text = "\n".join(lines) + "\n" + _fixes(result, series)
    if runtime:
        text += sizing_line(result) + "\n"
    text += _validation_line(result)
    text += _guard_line(result)
    tests = added_tests(result)
    if tests:
        text += f"- Tests (new, CPU): {', '.join(code_span(p) for p in tests)}.\n"
    elif tests_left_out_line(result):
        text += f"- Tests: {TESTS_LEFT_OUT}\n"
    text += deprecated_section(result)
    if series:
        text += f"\nSeries: {len(series)} patches, one commit each, in review order:\n\n"
        text += "".join(
            f"{n}. `{name}`: {patch.subject}\n" for n, (name, patch) in enumerate(series, start=1)
        )
    return text


#: The Modifications bullet of a patch without its tests (``## Accuracy Tests`` says why
#: and where they are).
TESTS_LEFT_OUT = "none in this patch (see Accuracy Tests)."


def _packs(result: UpstreamResult) -> bool:
    """A patched forward packs its captures (the packer gains ``captured()``)."""
    return any(
        adds_packer_accessor(c)
        for role in (Role.RUNTIME_MODULE, Role.PACKER)
        for c in changed_by(result, role)
    )


def _helpers_where(result: UpstreamResult) -> str:
    """Where the helpers go, in words (in parentheses; "" without them)."""
    change = next(iter(changed_by(result, Role.RUNTIME_MODULE)), None)
    if change is None:
        return ""
    words = helpers_summary(change).replace("captured()", "`captured()`")
    return " (" + words.replace("AuxHiddenStatePacker", "`AuxHiddenStatePacker`") + ")"


def _accuracy(result: UpstreamResult, validation) -> str:
    """The CPU tests by file: what ``--validate`` ran and its verdicts, else the commands a
    reviewer runs, said to be not run."""
    family_test = next((c.path for c in changed_by(result, Role.FAMILY_TEST)), None)
    ran = (
        f"`{test_command(result, family_test)}`"
        if family_test is not None
        else f"`{FAMILY_TEST_FILE}` (written into the copy)"
    )
    lines = []
    if validation is not None and validation.problem:
        lines.append(f"`--validate` ran nothing: {validation.problem}.")
    elif validation is not None and (family_test is not None or result.tests):
        passed = sorted(m for m, v in validation.verdicts.items() if v.startswith("yes"))
        failed = sorted(m for m in validation.verdicts if m not in passed)
        lines.append(
            f"CPU stand-in results: `auxcap upstream-patch --validate` ran {ran} "
            f"on a patched copy of this tree ({STAND_INS}). They do not exercise real "
            "weights, attention kernels or a GPU."
        )
        lines.append(f"- passed on CPU stand-ins ({len(passed)}): {', '.join(passed) or '-'}")
        if failed:
            lines.append(f"- failed on CPU stand-ins ({len(failed)}): {', '.join(failed)}")
    commands = shipped_test_commands(result)
    left_out = tests_left_out_line(result)
    if left_out:
        lines.append(left_out)
    if (not lines or validation is None or validation.problem) and not commands:
        if not left_out:
            lines.append("Not run by the generator; this patch adds no test to run.")
    elif not lines or validation is None or validation.problem:
        lines.append("Not run by the generator. The CPU tests this patch adds:")
        lines += [
            f"- `{change.path.rsplit('/', 1)[-1]}`: "
            + file_summary(result, change).removeprefix("new CPU test: ")
            for change in changed_by(result, *SHIPPED_TEST_ROLES)
        ]
        lines += ["", "To run them:"]
    if commands:
        lines += ["", "```bash", *commands, "```"]
    return "\n".join(lines) + "\n"


def _launch_words(result: UpstreamResult) -> str | None:
    """The speculative algorithm a server check runs with PP on this release (None: the
    server reaches the change with none)."""
    if any(refusal.algorithm == EVERY for refusal in refusals(result)):
        return None
    accepted, _left = accepted_algorithms(result)
    if accepted:
        return f"--speculative-algorithm {accepted[0]} --speculative-draft-model-path DRAFT"
    return None


def _reached_through_dspark(result: UpstreamResult) -> bool:
    """The server lets DSPARK through with PP and a DSPARK target reaches the change: a
    patched architecture relays DSPARK, or a DFLASH one is configured through the runner's
    fallback (:func:`dflash_via_dspark`)."""
    if refusal_of(refusals(result), FALLBACK.name) is not None:
        return False
    found = result.validation.architectures if result.validation is not None else {}
    dspark = any(FALLBACK.name in methods for methods in found.values())
    return dspark or dflash_via_dspark(result) is not None


def _has_module(result: UpstreamResult, dotted: str) -> bool:
    return result.tree.file(result.tree.module_path(dotted)).exists()


def _benchmarking(result: UpstreamResult) -> str:
    """The GPU check as commands, said to be not run."""
    words = _launch_words(result)
    if words is None and _reached_through_dspark(result):
        return (
            "Not run: on this release the server reaches the change with PP only through "
            f"{FALLBACK.name}, where its own PP check lets {FALLBACK.name} through (see "
            "Motivation), so there "
            "is no single-server command to give here.\n"
        )
    if words is None or not _has_module(result, "sglang.launch_server"):
        return (
            "Not run: no server configuration of this release reaches the change with PP "
            "(see Motivation), so there is no server run to benchmark.\n"
        )
    lines = [
        "Not run (no GPU was used to generate this patch). GPU check to run, with a "
        "target model (`MODEL`) whose architecture is patched and a matching draft "
        "(`DRAFT`), comparing PP=2 with PP=1:",
        "",
        "```bash",
        f"python3 -m sglang.launch_server --model-path MODEL {words} --pp-size 2",
    ]
    if _has_module(result, "sglang.bench_serving"):
        lines.append("python3 -m sglang.bench_serving --backend sglang --num-prompts 200")
    lines += ["```", ""]
    lines.append(
        "Then the same with `--pp-size 1`: the outputs and the acceptance length should "
        "match, and the throughput shows the cost of the handoff."
    )
    return "\n".join(lines) + "\n"


def _checklist(result: UpstreamResult) -> str:
    has_tests = bool(added_tests(result))
    boxes = []
    for item in CHECKLIST:
        ticked = item == "Add unit tests" and has_tests
        boxes.append(
            f"- [{'x' if ticked else ' '}] {item}"
            + (" (the CPU tests named above)" if ticked else "")
        )
    return "\n".join(boxes) + "\n"


def render(
    result: UpstreamResult, patch_name: str | None = None, series=None, validation=None
) -> str:
    """``series``: ``[(file name, SeriesPatch)]`` of ``--series``; ``validation``: what
    ``--validate`` ran (``validate_run.Validation``), None when it was not asked for."""
    return (
        f"{title_of(result)}\n\n"
        f"## Motivation\n\n{_motivation(result)}\n"
        f"## Modifications\n\n{_modifications(result, series)}\n"
        f"## Accuracy Tests\n\n{_accuracy(result, validation)}\n"
        f"## Benchmarking and Profiling\n\n{_benchmarking(result)}\n"
        f"## Checklist\n\n{_checklist(result)}"
    )
