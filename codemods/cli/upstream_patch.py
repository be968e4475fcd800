"""What ``auxcap upstream-patch`` does, kept out of ``cli/commands.py`` so the CLI stays thin.

The generator asks every part of the patch (``upstream/parts.py``); this module says each
answer that is not a plain "applies": why a part does not apply, what a part left out
leaves broken (a partial patch is never silent), and, in one line, a release auxcap has not
seen.  Progress (the part at work) goes to stderr on a terminal only.

Exit codes: 0 patch written, tree already patched (empty patch) or already supported
upstream (no patch), whatever parts do not apply; 2 not an SGLang tree, no model file any
part rewrites, or a part that applies and cannot be completed (the message names the
release and the file; nothing is written).  With ``--validate`` (the patch and PR description
still written): 1 some model did not match its PP=1 run, 2 the validation could not run
(nothing to validate, an import error such as a missing torch, the test not starting).
"""

from __future__ import annotations

import sys

import click

from codemods.catalog.methods import NATIVE
from codemods.cli.progress import Progress
from codemods.sources.fileio import write_output_atomic
from codemods.upstream.generate import CannotApply, MissingModelFile, generate
from codemods.upstream.output.result_facts import file_summary
from codemods.upstream.part import NEEDS_PATCH, PATCHED, SUPPORTED
from codemods.upstream.result import UpstreamResult
from codemods.upstream.tree.releases import unseen_line
from codemods.upstream.tree.sglang_tree import TreeError


def _say(message: str) -> None:
    click.echo(f"auxcap: {message}", err=True)


class ProgressBar:
    """``generate``'s progress callback: a bar on stderr (a terminal only) per phase,
    ``done/total`` files or parts, labelled with the phase."""

    def __init__(self, stream=None, delay: float = 0.3, interval: float = 0.1) -> None:
        self.bar: Progress | None = None
        self.stream, self.delay, self.interval = stream, delay, interval

    def __call__(self, phase: str, done: int, total: int) -> None:
        bar = self.bar
        if bar is None or bar.label != phase or bar.total != total:
            self.close()
            bar = self.bar = Progress(
                total, phase, self.stream, delay=self.delay, interval=self.interval
            )
        bar.advance(done - bar.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def parse_models(value: str | None) -> list[str] | None:
    """``--models llama,qwen3`` -> ``["llama", "qwen3"]`` (file stems; ``.py`` allowed)."""
    if value is None:
        return None
    names = [name.strip().removesuffix(".py") for name in value.split(",") if name.strip()]
    if not names:
        raise click.BadParameter("expected model names separated by commas", param_hint="--models")
    return names


def report_family(result) -> None:
    """One line per model file with a capture hook: ``patched`` for every file the patch
    changes (what it gets), ``skipped`` with the reason for the others; the count is of the
    former."""
    plan = result.family
    if plan is None:
        return
    decisions = sorted(plan.decisions.values(), key=lambda d: d.file)
    changes = [change for change in result.changes if change.changed]
    lines, patched = [], 0
    for decision in decisions:
        change = next((c for c in changes if c.path.endswith(f"/models/{decision.file}")), None)
        if decision.patched:
            hooks = ", ".join(hook for _, _, hs in decision.cases for hook in hs)
            also = "".join(f"; also {fix}" for fix in decision.fixes)
            what = f"{hooks} (capture in {decision.forward}{also})"
        elif change is not None:
            what = file_summary(result, change)
        else:
            lines.append(f"  skipped  {decision.file}: {decision.reason}")
            continue
        patched += 1
        lines.append(f"  patched  {decision.file}: {what}")
    _say(f"capture-hook family: {patched} of {len(decisions)} model files with a hook patched")
    for line in lines:
        _say(line)


#: A model that supports DSPARK (the method SGLang relays natively) under PP already, in a
#: patch that renames its relay's entry.
RELAY_RENAMED = f"already supports {NATIVE.name} aux capture under PP; only its relay is renamed"
MODEL_STATUS = {
    NEEDS_PATCH: f"patched: {NATIVE.name} captures relayed across PP stages",
    PATCHED: "already patched",
    SUPPORTED: f"already supports {NATIVE.name} aux capture under PP; not patched",
}


def report_parts(result) -> None:
    """One line per part that does not simply apply (why not, or what a part left out
    leaves broken), and one per model file a part of its own rewrites."""
    for answer in result.parts:
        decision = answer.decision
        if decision.model is not None and decision.applies:
            state = decision.model
            status = MODEL_STATUS[state.status]
            if state.status == SUPPORTED and state.path in result.changed:
                status = RELAY_RENAMED
            _say(f"{state.title} ({state.file}): {status}")
        elif not decision.applies and answer not in result.left_out:
            _say(f"part {answer.name}: {decision.describe()}")
    for answer in result.left_out:
        _say(f"warning: partial patch: part {answer.name} {answer.decision.describe()}")


def _why_empty(result) -> str:
    """Why a tree gets an empty patch: it carries the patch already, or no model file of
    the tree needs it."""
    if not result.holds_helpers:
        return "no model file needs the patch"
    return "already patched"


def run_validation(result):
    """``--validate``: run the family test on a patched copy; report each verdict."""
    from codemods.upstream.validation.run_tests import STAND_INS, run_family

    _say(f"validating on a patched copy of the tree, the family test on {STAND_INS}")
    validation = run_family(result)
    if validation.problem:
        _say(f"  not validated: {validation.problem}")
    for model, verdict in sorted(validation.verdicts.items()):
        _say(f"  {model}: {verdict}")
    return validation


def validation_verdict(validation) -> int:
    """The exit code ``--validate`` adds (0 when not asked), said when it is not 0."""
    if validation is None or validation.exit_code == 0:
        return 0
    if validation.exit_code == 2:
        _say(f"error: --validate could not run: {validation.problem or 'nothing ran'}")
    else:
        from codemods.upstream.validation.run_tests import VALIDATED

        failed = sorted(m for m, v in validation.verdicts.items() if v != VALIDATED)
        _say(f"error: --validate: not validated: {', '.join(failed)}")
    return validation.exit_code


def generate_or_say(
    root: str, models: list[str] | None, tests_dir: str | None = None
) -> UpstreamResult | None:
    """The upstream patch of the SGLang tree at ``root``; None, once the reason is said,
    where it cannot be made (not a tree, no model file, a part that cannot be completed).
    Where the shipped tests went, a release auxcap has not seen, the family's decision per
    model file and every part's answer that is not a plain "applies" are said too."""
    progress = ProgressBar()
    try:
        result = generate(root, models=models, tests_dir=tests_dir, progress=progress)
    except (TreeError, MissingModelFile, CannotApply, ValueError, OSError) as err:
        progress.close()
        _say(f"error: {err}")
        return None
    progress.close()
    unseen = unseen_line(result.tree)
    if unseen:
        _say(f"note: {unseen}")
    report_family(result)
    report_parts(result)
    if result.tests_note:
        _say(f"note: {result.tests_note}")
    return result


def run_upstream_patch(
    result: UpstreamResult, output: str | None, pr_body: str | None, validate: bool = False
) -> int:
    """Write the patch of ``result`` (``generate_or_say``) and its PR description."""
    where = result.tree.describe()
    applied = [a.decision.model for a in result.parts if a.decision.applies and a.decision.model]
    supported = [state for state in applied if state.status == SUPPORTED]
    for state in supported:
        if state.path in result.changed:
            done = "its relay's entry is renamed for every capture method"
        else:
            done = "no patch written" if not result.changes else "it is left out of the patch"
        _say(f"{where}: {state.path} already supports {NATIVE.name} aux capture under PP; {done}.")
    if supported:
        for note in result.notes:
            _say(f"  {note}")
        if not result.changes:
            if output:
                write_output_atomic(output, b"")
            return 0
    patch = result.patch
    if not patch:
        _say(f"{where}: nothing to do: {_why_empty(result)}; the patch is empty.")
        if output:
            write_output_atomic(output, b"")
        return 0
    validation = run_validation(result) if validate else None
    if pr_body:
        from codemods.upstream.output.pr_body import render

        write_output_atomic(pr_body, render(result, validation=validation).encode("utf-8"))
    if output:
        write_output_atomic(output, patch.encode("utf-8"))
    else:
        sys.stdout.write(patch)
        sys.stdout.flush()
    for state in applied:
        if state.status == PATCHED:
            _say(f"{where}: {state.file} already patched; refreshing the other files.")
    files = ", ".join(result.changed)
    _say(
        f"{where}: patch touches {len(result.changed)} files: {files}"
        + (f"; written to {output}" if output else "")
    )
    if pr_body:
        _say(f"PR description written to {pr_body}")
    return validation_verdict(validation)
