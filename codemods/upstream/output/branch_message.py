"""The commit message of ``upstream-patch --branch``: built from the same result as the PR
description (:mod:`codemods.upstream.output.pr_body`), through the same facts
(:mod:`codemods.upstream.output.result_facts`), so the two agree.

before: a fixed paragraph ("models that raised NotImplementedError(...) now capture ...",
        whatever the release says) and a file list where most files read "changed".
after:  a subject of at most 72 characters, then what the patch does on this release: the
        model files whose hooks returned early (counted from the family's findings), the
        Kimi setters that refused PP (quoting the error only when the release has it),
        SGLang's own DSPARK relay when it is only renamed, the validation change, where
        the runtime guard went (file and function, from the guard part's result), the CPU
        tests; then every changed file under what it gets.  Every line is at most 72
        characters; every path it names is a path of the patch (read from the result, never
        assumed).
"""

from __future__ import annotations

import textwrap

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit import names
from codemods.upstream.edit.change_kinds import RENAME_ROLES, Role
from codemods.upstream.output import result_facts as facts
from codemods.upstream.output.pr_body import title_of
from codemods.upstream.result import UpstreamResult

#: Longest line of the message.
WIDTH = 72
#: The names the rename of SGLang's DSPARK relay replaces, old -> new.
RENAMED = (
    ("dspark_hidden_states", "aux_hidden_states"),
    ("get_pp_proxy_dspark_hidden_size", "get_pp_proxy_aux_hidden_size"),
)


def _wrap(text: str, indent: str = "", subsequent: str | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent if subsequent is None else subsequent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def subject(result: UpstreamResult) -> str:
    """The PR title, said in at most 72 characters."""
    title = title_of(result).removeprefix("# ")
    if len(title) > WIDTH:
        title = title.replace(" pipeline stages", " PP stages")
    return title


def _base(result: UpstreamResult) -> str:
    """The folder that most changed files share (``python/sglang/srt/``), or ""."""
    roots = {
        change.path[: change.path.index("/srt/") + 5]
        for change in result.changes
        if change.changed and "/srt/" in change.path
    }
    return roots.pop() if len(roots) == 1 else ""


def _short(path: str, base: str) -> str:
    return path[len(base) :] if base and path.startswith(base) else path


def _paths(result: UpstreamResult, *roles: Role) -> list[str]:
    return [c.path for c in result.changes if c.changed and c.role in roles]


def _family(result: UpstreamResult, base: str) -> list[str]:
    patched = facts.family_models(result)
    if not patched:
        return []
    early = facts.early_return_files(result)
    runtime = ", ".join(_short(p, base) for p in _paths(result, Role.RUNTIME_MODULE))
    helpers = f" through the helpers in {runtime}" if runtime else ""
    text = (
        f"{len(patched)} model files now capture aux hidden states on the stage "
        f"that owns each layer and hand them to the last stage in the "
        f"{names.AUX_ENTRY} entry of the PP handoff{helpers}."
    )
    if early:
        some = "Their" if len(early) == len(patched) else f"In {len(early)} of them the"
        text += (
            f" {some} capture hooks returned early off the last PP rank, so only the "
            "last stage captured."
        )
    text += (
        f" Each hook passes {names.ATTACH} the width of its decoder stack's hidden "
        "states (hidden_size=, from the config its __init__ builds the stack from)"
    )
    if _paths(result, Role.SIZING, Role.SIZING_RENAME):
        text += (
            f"; the CUDA-graph sizing asks one lookup, {names.WIDTH}(model), which "
            f"finds the relay {names.ATTACH} gave a decoder stack of the model"
        )
    return _wrap(text + ".")


def _kimi(result: UpstreamResult) -> list[str]:
    models = [
        name
        for rewritten, name in (
            (facts.kimi_rewritten(result), "Kimi-Linear"),
            (facts.k3_rewritten(result), "Kimi-K3"),
        )
        if rewritten
    ]
    if not models:
        return []
    error = (
        f' NotImplementedError("{names.PP_ERROR}")'
        if facts.in_release(result, names.PP_ERROR)
        else " an error"
    )
    return _wrap(
        f"{' and '.join(models)}: {NATIVE.hook} raised{error} "
        "under PP; it now captures on every stage the same way."
    )


def _rename(result: UpstreamResult, base: str) -> list[str]:
    renamed = _paths(result, *RENAME_ROLES)
    if not renamed:
        return []
    pairs = [f"{old} -> {new}" for old, new in RENAMED if facts.in_release(result, old)]
    relays = [_short(p, base) for p in _paths(result, Role.RELAY_RENAME)]
    own = f" ({', '.join(relays)})" if relays else ""
    return _wrap(
        f"SGLang's own {NATIVE.name} relay{own} and its CUDA-graph sizing are "
        f"renamed so that every capture method uses them"
        + (f": {', '.join(pairs)}." if pairs else ".")
    )


def _validation(result: UpstreamResult, base: str) -> list[str]:
    change = facts.validation_change(result)
    if change is None:
        return []
    accepted, left = facts.accepted_algorithms(result)
    text = (
        f"Validation ({_short(change.path, base)}): "
        f"{' and '.join(accepted) or 'nothing new'} accepted with PP for the "
        "patched model classes; every other refusal is kept."
    )
    for refusal in left:
        text += f" {refusal.algorithm} with PP stays refused ({refusal.function})."
    if facts.rewords_aux_flag(result):
        text += f" {facts.aux_flag_sentence(result, '')}"
    return _wrap(text)


def _guard(result: UpstreamResult, base: str) -> list[str]:
    where = facts.guard_where(result, lambda path: _short(path, base))
    if not where:
        return []
    passes = facts.guard_passes(result, lambda path: _short(path, base))
    return _wrap(
        f"Runtime guard: {facts.GUARD_CALL} after each capture hook call in "
        f"{where}{f'; {passes}' if passes else ''}; with PP it raises "
        "NotImplementedError naming the class, the method and why when the decoder "
        "stack the hook set up does not relay that method."
    )


def _tests(result: UpstreamResult) -> list[str]:
    tests = [p.rsplit("/", 1)[-1] for p in facts.added_tests(result)]
    if tests:
        return _wrap(f"CPU tests (new, not run when the patch was made): {', '.join(tests)}.")
    left_out = facts.tests_left_out_line(result)
    return _wrap(left_out.replace("`", "")) if left_out else []


def _files(result: UpstreamResult, base: str) -> list[str]:
    groups: dict[str, list[str]] = {}
    for change in result.changes:
        if not change.changed:
            continue
        mark = "A" if change.is_new_file else "M"
        groups.setdefault(facts.file_summary(result, change), []).append(
            f"  {mark} {_short(change.path, base)}"
        )
    lines = _wrap(f"Files (paths from {base}):" if base else "Files:")
    for summary, entries in groups.items():
        lines += ["", *_wrap(summary + ":"), *entries]
    return lines


def commit_message(result: UpstreamResult) -> str:
    """The ``--branch`` commit message of ``result``."""
    base = _base(result)
    paragraphs = [
        _family(result, base),
        _kimi(result),
        _rename(result, base),
        _validation(result, base),
        _guard(result, base),
        _tests(result),
        _files(result, base),
    ]
    lines = [subject(result)]
    for paragraph in paragraphs:
        if paragraph:
            lines += ["", *paragraph]
    return "\n".join(lines) + "\n"
