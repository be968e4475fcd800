"""What ``auxcap upstream-patch`` does, kept out of ``cli.py`` so the CLI stays thin.

Exit codes: 0 patch written, tree already patched (empty patch) or already supported
upstream (no patch); 2 not an SGLang tree, model file missing or of a shape the rewriter
does not recognise (nothing is written).
"""

from __future__ import annotations

import sys

import click

from codemods.upstream import kimi
from codemods.upstream.generate import MissingModelFile, generate
from codemods.upstream.output import write_text_atomic
from codemods.upstream.tree import TreeError


def _say(message: str) -> None:
    click.echo(f"auxcap: {message}", err=True)


def run_upstream_patch(root: str, output: str | None, pr_body: str | None, mode: str) -> int:
    try:
        result = generate(root, mode=mode)
    except (TreeError, MissingModelFile, kimi.UnrecognisedShape) as err:
        _say(f"error: {err}")
        return 2
    where = result.tree.describe()
    if result.status == kimi.SUPPORTED:
        _say(f"{where}: {result.model_path} already supports DSPARK aux capture under PP; "
             f"no patch written.")
        for note in result.notes:
            _say(f"  {note}")
        return 0
    patch = result.patch
    if not patch:
        _say(f"{where}: already patched; the patch is empty.")
        if output:
            write_text_atomic(output, "")
        return 0
    if pr_body:
        from codemods.upstream.pr_body import render

        write_text_atomic(pr_body, render(result))
    if output:
        write_text_atomic(output, patch)
    else:
        sys.stdout.write(patch)
        sys.stdout.flush()
    if result.status == kimi.PATCHED:
        _say(f"{where}: model file already patched; refreshing the other files.")
    files = ", ".join(result.changed)
    _say(f"{where}: patch ({mode} mode) touches {len(result.changed)} files: {files}"
         + (f"; written to {output}" if output else ""))
    if pr_body:
        _say(f"PR description written to {pr_body}")
    return 0
