"""What ``auxcap upstream-patch`` does, kept out of ``cli.py`` so the CLI stays thin.

Exit codes: 0 patch written, tree already patched (empty patch) or already supported
upstream (no patch); 2 not an SGLang tree, model file missing or of a shape the rewriter
does not recognise (nothing is written).  With ``--validate`` (the patch and PR description
still written): 1 some model did not match its PP=1 run, 2 the validation could not run
(nothing to validate, an import error such as a missing torch, the test not starting).
"""

from __future__ import annotations

import sys

import click

from codemods.sources.fileio import write_output_atomic
from codemods.upstream.generate import FAMILY_ONLY, MissingModelFile, UpstreamResult, generate
from codemods.upstream.kimi import linear as kimi
from codemods.upstream.tree.sglang_tree import TreeError


def _say(message: str) -> None:
    click.echo(f"auxcap: {message}", err=True)


def parse_models(value: str | None) -> list[str] | None:
    """``--models llama,qwen3`` -> ``["llama", "qwen3"]`` (file stems; ``.py`` allowed)."""
    if value is None:
        return None
    names = [name.strip().removesuffix(".py") for name in value.split(",") if name.strip()]
    if not names:
        raise click.BadParameter("expected model names separated by commas", param_hint="--models")
    return names


def report_family(result) -> None:
    """One line per model file with a capture hook: patched or not, and why."""
    plan = result.family
    if plan is None:
        return
    decisions = sorted(plan.decisions.values(), key=lambda d: d.file)
    patched = [d for d in decisions if d.patched]
    _say(f"capture-hook family: {len(patched)} of {len(decisions)} model files with a hook patched")
    for decision in decisions:
        if decision.patched:
            hooks = ", ".join(hook for _, _, hs in decision.cases for hook in hs)
            also = "".join(f"; also {fix}" for fix in decision.fixes)
            _say(f"  patched  {decision.file}: {hooks} (capture in {decision.forward}{also})")
        else:
            _say(f"  skipped  {decision.file}: {decision.reason}")


K3_STATUS = {
    kimi.NEEDS_PATCH: "patched: DSPARK captures relayed across PP stages",
    kimi.PATCHED: "already patched",
    kimi.SUPPORTED: "already supports DSPARK aux capture under PP; not patched",
}


def report_kimi_k3(result) -> None:
    if result.k3_status is not None:
        _say(f"Kimi-K3 (kimi_k3.py): {K3_STATUS[result.k3_status]}")


def _why_empty(result) -> str:
    """Why a tree gets an empty patch: it carries the patch already, or (with no Kimi-Linear
    file) no model file of the tree needs it."""
    if result.kimi_status == FAMILY_ONLY and result.tree.read_text(result.glue_path) is None:
        return "no model file needs the patch"
    return "already patched"


def run_validation(result):
    """``--validate``: run the family test on a patched copy; report each verdict."""
    from codemods.upstream.validation.run_tests import run_family

    _say("validating: the family test on a patched copy of the tree (2 and 3 stages)")
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
    where it cannot be made (not a tree, a model file missing, a shape not understood).
    Where the shipped tests went, when not only into the patch, is said too."""
    try:
        result = generate(root, models=models, tests_dir=tests_dir)
    except (TreeError, MissingModelFile, kimi.UnrecognisedShape, ValueError, OSError) as err:
        _say(f"error: {err}")
        return None
    if result.tests_note:
        _say(f"note: {result.tests_note}")
    return result


def run_upstream_patch(
    root: str,
    output: str | None,
    pr_body: str | None,
    models: list[str] | None = None,
    validate: bool = False,
    tests_dir: str | None = None,
) -> int:
    result = generate_or_say(root, models, tests_dir)
    if result is None:
        return 2
    where = result.tree.describe()
    report_family(result)
    report_kimi_k3(result)
    if result.kimi_status == kimi.SUPPORTED:
        if result.model_path in result.changed:
            done = "its relay's entry is renamed for every capture method"
        else:
            done = "no patch written" if not result.changes else "it is left out of the patch"
        _say(f"{where}: {result.model_path} already supports DSPARK aux capture under PP; {done}.")
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
    if result.kimi_status == kimi.PATCHED:
        _say(f"{where}: model file already patched; refreshing the other files.")
    files = ", ".join(result.changed)
    _say(
        f"{where}: patch touches {len(result.changed)} files: {files}"
        + (f"; written to {output}" if output else "")
    )
    if pr_body:
        _say(f"PR description written to {pr_body}")
    return validation_verdict(validation)
