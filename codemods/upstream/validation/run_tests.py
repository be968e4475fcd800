"""``upstream-patch --validate``: run the family test the patch adds, on a patched scratch copy.

The SGLang package of the tree is copied to a scratch directory (hard links where the file
system allows; the files the patch changes are written fresh, so the tree itself is never
touched), the patched files are written there, the tests the patch ships are written next
to it (also for a package tree, whose patch leaves them out), and the generated
``test_pp_aux_capture_family.py`` runs in ``--json`` mode on 2 and 3 stages (gloo, CPU)
with this Python.  A model counts as validated when every case of it, at both sizes,
matched the PP=1 run.  These are CPU stand-in results (:data:`STAND_INS`: tiny configs,
stand-in decoder layers without attention kernels), and every verdict and report says so;
they do not cover real weights, attention kernels or a GPU.  The result feeds the PR body's "validated" column: only runs made
here are claimed.

A validation that could not run (nothing to validate, the test not starting, an import error
such as "No module named 'torch'", no result) is a ``problem``; the command then exits 2
(:attr:`Validation.exit_code`), and 1 when it ran and some model did not match.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from codemods.upstream.result import UpstreamResult, write_tests
from codemods.upstream.validation.shipped_tests import TEST_FILE

PP_SIZES = (2, 3)
#: What the family test runs, in words: stand-ins on CPU, not the models as served.
STAND_INS = (
    "CPU stand-ins: each patched model built through its real `__init__` at a tiny config "
    "(one the test has no config for, as Kimi-Linear and Kimi-K3, assembled from its classes), "
    "with stand-in decoder layers (no attention kernels) and weights filled by name, on 2 "
    "and 3 gloo stages, `torch.equal` with PP=1"
)
VALIDATED = "yes on CPU stand-ins: 2 and 3 stages, `torch.equal` with PP=1 (run by this invocation)"
FAILED = "FAILED on CPU stand-ins in this invocation"


@dataclass
class Validation:
    """What a ``--validate`` run found: model stem -> verdict, and why nothing ran."""

    verdicts: dict[str, str] = field(default_factory=dict)
    problem: str | None = None

    @property
    def all_passed(self) -> bool:
        return bool(self.verdicts) and all(v == VALIDATED for v in self.verdicts.values())

    @property
    def exit_code(self) -> int:
        """0 every model validated; 1 some model failed; 2 the validation could not run."""
        if self.problem or not self.verdicts:
            return 2
        return 0 if self.all_passed else 1


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def patched_scratch(result: UpstreamResult, scratch: Path) -> Path:
    """The package of ``result.tree`` under ``scratch`` with the patch applied; the
    directory to put on ``PYTHONPATH``."""
    tree = result.tree
    package = tree.file(tree.package)
    parent_rel = package.parent.relative_to(tree.root)
    target = scratch / parent_rel / package.name
    shutil.copytree(package, target, copy_function=_link_or_copy)
    for change in result.changes:
        if not change.changed:
            continue
        path = scratch.joinpath(*change.path.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()  # a hard link to the tree's file: never write through it
        path.write_text(change.new, encoding="utf-8")
    return scratch / parent_rel


def run_python(
    args: list[str], env: dict[str, str], cwd: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with this interpreter, its output captured as text."""
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def run_family(result: UpstreamResult, timeout: float = 1800.0) -> Validation:
    """Run the family test on a patched scratch copy; verdicts for every model it ran."""
    plan = result.family
    if plan is None or not plan.patched:
        return Validation(problem="the patch rewrites no model of the capture-hook family")
    if TEST_FILE not in result.tests:
        return Validation(problem="the patch ships no family test")
    passed: dict[str, list[bool]] = {}
    with tempfile.TemporaryDirectory(prefix="auxcap-validate-") as scratch:
        path_root = patched_scratch(result, Path(scratch))
        test = write_tests(result.tests, Path(scratch) / "shipped-tests") / TEST_FILE
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(path_root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        if not env.get("CUDA_VISIBLE_DEVICES"):
            # sglang.test.test_utils, which the test imports, reads its first
            # character: unset rather than empty (the test runs on CPU either way).
            env.pop("CUDA_VISIBLE_DEVICES", None)
        for pp_size in PP_SIZES:
            try:
                proc = run_python([str(test), "--json", str(pp_size)], env, scratch, timeout)
            except subprocess.TimeoutExpired:
                return Validation(
                    problem=f"the family test ran past {timeout:.0f} s on {pp_size} stages"
                )
            except OSError as error:  # the interpreter could not be started
                return Validation(problem=f"the family test could not be started: {error}")
            lines = proc.stdout.strip().splitlines()
            if proc.returncode != 0 or not lines:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                return Validation(
                    problem=f"the family test did not run on {pp_size} "
                    f"stages (exit {proc.returncode}): {tail}"
                )
            try:
                records = json.loads(lines[-1])
            except ValueError:
                return Validation(
                    problem=f"the family test gave no result on {pp_size} stages: {lines[-1][:200]}"
                )
            for record in records:
                ok = record.get("error") is None and bool(record.get("equal"))
                passed.setdefault(record["model"], []).append(ok)
    verdicts = {
        model: VALIDATED if all(oks) and len(oks) >= len(PP_SIZES) else FAILED
        for model, oks in passed.items()
    }
    return Validation(verdicts)
