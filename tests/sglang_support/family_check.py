"""Build a patched copy of an SGLang release and run the family test the patch adds.

``patched_copy(release, dest, models)`` generates the upstream patch (``generate``; the
whole patch of a release once per session, ``generated.release_result``), checks
it with ``git apply --check`` on the release, applies it to a hard-linked copy (the files
it touches are private copies, so the cached release never changes), writes the tests the
patch ships into ``copy/SHIPPED_TESTS`` (a release is a package tree: its patch leaves
them out) and returns ``(result, copy)``.

``run_family_test(copy, result, pp_size, models)`` runs the generated
``test_pp_aux_capture_family.py`` of the copy in ``--json`` mode (one set of worker
processes for all models at that PP size) and returns its per-case records.

``run_family_tests(copy, result, pp_sizes, models)`` gives the same records for several PP
sizes from one process (forked stages, one SGLang import per tree).  Both take the capture
id sets and microbatch token counts to run with (``layer_id_sets``, ``batches``; default:
the shipped test's own) and hand them to the test as arguments.

``stand_in_ci_register(copy)`` gives a copy of a release older than SGLang's CI registry
(before 0.5.4) a stand-in for the one function the shipped test calls from it.

``unpatched_copy(release, dest, result)`` is the release with only the patch's new files
added (transport, glue, family test) and every model file as released: the same drive
then shows what the unpatched models do under PP.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codemods.upstream.edit.change_kinds import Role
from codemods.upstream.generate import generate
from codemods.upstream.result import UpstreamResult, write_tests
from codemods.upstream.validation.shipped_tests import TEST_FILE
from sglang_support import warm
from sglang_support.env import STUBS_DIR, git_apply, linked_copy, sglang_env
from sglang_support.generated import release_result


class PatchFailed(RuntimeError):
    pass


#: Where ``patched_copy`` writes the shipped tests, relative to the copy.
SHIPPED_TESTS = "shipped_tests"


def patched_copy(
    release: Path, dest: Path, models: list[str] | None = None
) -> tuple[UpstreamResult, Path]:
    result = release_result(release) if models is None else generate(release, models=models)
    check = git_apply(release, result.patch, check=True)
    if check.returncode != 0:
        raise PatchFailed(f"git apply --check on {release}: {check.stderr}")
    if dest.exists():
        shutil.rmtree(dest)
    linked_copy(release, dest, result.changed)
    applied = git_apply(dest, result.patch)
    if applied.returncode != 0:
        raise PatchFailed(f"git apply in {dest}: {applied.stderr}")
    write_tests(result.tests, dest / SHIPPED_TESTS)
    return result, dest


#: The one name the shipped family test imports from SGLang's CI registry, which releases
#: before 0.5.4 do not have.
CI_REGISTER = "sglang/test/ci/ci_register.py"
CI_STAND_IN = (
    '"""Stands in for SGLang\'s CI registry, which this release does not have."""\n\n\n'
    "def register_cpu_ci(**kwargs):\n    pass\n"
)


def stand_in_ci_register(copy: Path) -> bool:
    """Give a copy of a release without SGLang's CI registry a stand-in for the one
    function the shipped family test calls; whether it needed one."""
    target = copy / CI_REGISTER
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    init = target.parent / "__init__.py"
    if not init.exists():
        init.write_text("")
    target.write_text(CI_STAND_IN)
    return True


def unpatched_copy(release: Path, dest: Path, result: UpstreamResult) -> Path:
    """The release plus the patch's new files and the helpers (appended to SGLang's
    ``aux_hidden_states.py`` on 0.5.17+); model files and the rest as released."""
    if dest.exists():
        shutil.rmtree(dest)
    new_files = [
        change
        for change in result.changes
        if change.is_new_file or change.role is Role.RUNTIME_MODULE
    ]
    linked_copy(release, dest, [change.path for change in new_files])
    for change in new_files:
        target = dest.joinpath(*change.path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(change.new, encoding="utf-8")
    write_tests(result.tests, dest / SHIPPED_TESTS)
    return dest


def family_test_path(tree_root: Path, result: UpstreamResult | None = None) -> Path:
    return tree_root / SHIPPED_TESTS / TEST_FILE


def shipped_test_env(
    tree_root: Path, stubs: Path | None = None, extra_paths: Sequence[Path] = ()
) -> dict[str, str]:
    """Environment for running a shipped test of ``tree_root``: ``sglang_env``, without
    an empty ``CUDA_VISIBLE_DEVICES`` (``sglang.test.test_utils`` reads its first
    character at import); ``stubs`` replaces the stand-in folder on ``PYTHONPATH``;
    ``extra_paths`` go first (a release's own transformers, ``release_deps``)."""
    env = sglang_env(tree_root, extra_paths)
    if not env.get("CUDA_VISIBLE_DEVICES"):
        env.pop("CUDA_VISIBLE_DEVICES", None)
    if stubs is not None:
        paths = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(
            str(stubs) if path == str(STUBS_DIR) else path for path in paths
        )
    return env


def _last_json(args: list[str], env: dict[str, str], cwd: Path, timeout: float, what: str):
    """What the warm run of ``args`` printed last, read as JSON; it must succeed."""
    proc = warm.run(args, env=env, cwd=cwd, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def _id_options(
    layer_id_sets: Sequence[Sequence[int]] | None, batches: Sequence[int] | None
) -> list[str]:
    """``--layer-ids`` and ``--batches`` as the family test and its runner read them."""
    options = []
    if layer_id_sets is not None:
        text = ";".join(",".join(str(i) for i in ids) for ids in layer_id_sets)
        options += ["--layer-ids", text]
    if batches is not None:
        options += ["--batches", ",".join(str(tokens) for tokens in batches)]
    return options


def run_family_test(
    tree_root: Path,
    result: UpstreamResult,
    pp_size: int,
    models: list[str] | None = None,
    timeout: float = 1500.0,
    layer_id_sets: Sequence[Sequence[int]] | None = None,
    batches: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Per-case records of the family test's ``--json`` mode on ``tree_root``."""
    args = [str(family_test_path(tree_root, result)), "--json", str(pp_size), *(models or [])]
    args += _id_options(layer_id_sets, batches)
    env = shipped_test_env(tree_root)
    return _last_json(args, env, tree_root, timeout, f"family test --json {pp_size}")


def run_family_tests(
    tree_root: Path,
    result: UpstreamResult,
    pp_sizes=(2, 3),
    models: list[str] | None = None,
    timeout: float = 1500.0,
    extra_paths: Sequence[Path] = (),
    server_defaults: bool = False,
    layer_id_sets: Sequence[Sequence[int]] | None = None,
    batches: Sequence[int] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """``pp_size -> records`` as :func:`run_family_test` gives them, from one process
    that imports the tree once and forks the stages of every PP size
    (``sglang_support.family_runner``); ``extra_paths`` first on its ``PYTHONPATH``;
    ``server_defaults``: the runner's ``--server-defaults`` (releases before 0.5.18);
    ``layer_id_sets``, ``batches``: its ``--layer-ids``, ``--batches``."""
    sizes = ",".join(str(size) for size in pp_sizes)
    args = ["-m", "sglang_support.family_runner"]
    args += ["--server-defaults"] if server_defaults else []
    args += _id_options(layer_id_sets, batches)
    args += [str(family_test_path(tree_root, result)), sizes, *(models or [])]
    env = shipped_test_env(tree_root, extra_paths=extra_paths)
    out = _last_json(args, env, tree_root, timeout, f"family test, PP sizes {sizes},")
    return {int(size): records for size, records in out.items()}


def validated_models(records: list[dict[str, Any]]) -> dict[str, bool]:
    """``model -> every case of it matched PP=1``."""
    verdict: dict[str, bool] = {}
    for record in records:
        ok = record["equal"] and record["error"] is None
        verdict[record["model"]] = verdict.get(record["model"], True) and ok
    return verdict
