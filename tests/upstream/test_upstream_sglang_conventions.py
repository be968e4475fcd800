"""The test files the upstream patch ships follow SGLang's conventions and run without
GPU packages.

SGLang 0.5.23 is laid out as a checkout and patched.  SGLang's CI collects every file under
``test/registered/`` with ``collect_tests`` (``ci_register.py``), which refuses a file
without a ``register_*_ci(...)`` call or without a ``__main__`` entry: the release's own
collector takes every file there.  The tests derive from ``CustomTestCase``, their shared
utilities are a module of the package (``sglang/test/``), and GPU-only packages are stood
in for before the models are imported, never skipped around: sgl_kernel by SGLang's own
``maybe_stub_sgl_kernel``, the other modules by empty modules put in ``sys.modules``
under their exact names for the test module's run (no import hook of the utilities'
own).  The tests then run from the checkout in a process where sgl_kernel, flashinfer,
tvm_ffi and vllm do not import: only the shipped stand-ins can make the models import
there.  The packages SGLang needs and this machine lacks (triton, which
``import sglang`` itself needs, torchvision, IPython, ...; SGLang's CPU CI installs them)
come from ``sglang_support/stubs``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_support import warm
from sglang_support.env import STUBS_DIR
from sglang_support.lint_tools import lay_out_checkout, write_file
from sglang_support.release_deps import tree_paths

from codemods.upstream.generate import generate
from codemods.upstream.validation.runtime_guard import RELAY_TEST_FILE
from codemods.upstream.validation.shipped_tests import INIT_TEST_FILE, TEST_FILE

pytestmark = pytest.mark.sglang

RELEASE = "0.5.23"
GPU_ONLY = ("sgl_kernel", "flashinfer", "tvm_ffi", "vllm")
UTILS = "python/sglang/test/pp_aux_capture_family_models.py"
TESTS = "test/registered/unit/models"

#: Makes the GPU-only packages fail to import in the process, as on a CPU machine.
NO_GPU_PACKAGES = f"""\
import importlib.abc
import sys

GPU_ONLY = {GPU_ONLY!r}


class _NoGpuPackages(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in GPU_ONLY:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None


sys.meta_path.insert(0, _NoGpuPackages())
"""


def _ci_register(release: Path):
    spec = importlib.util.spec_from_file_location(
        "release_ci_register", release / "sglang" / "test" / "ci" / "ci_register.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _patched(release: Path, tmp_path: Path):
    """A patched checkout of ``release``."""
    root = lay_out_checkout(release, tmp_path / "sglang")
    result = generate(root)
    for change in result.changes:
        write_file(root, change.path, change.new)
    assert sorted(p for p in result.changed if "test/" in p) == [
        UTILS,
        f"{TESTS}/{INIT_TEST_FILE}",
        f"{TESTS}/{TEST_FILE}",
        f"{TESTS}/{RELAY_TEST_FILE}",
    ]
    return root


def _cpu_stubs(tmp_path: Path) -> Path:
    """The stand-ins of ``sglang_support/stubs`` for packages that are not GPU-only."""
    folder = tmp_path / "cpu-stubs"
    folder.mkdir(exist_ok=True)
    for entry in STUBS_DIR.iterdir():
        if entry.name.removesuffix(".py") not in GPU_ONLY + ("__pycache__",):
            (folder / entry.name).symlink_to(entry)
    return folder


def _run_without_gpu_packages(
    root: Path, tmp_path: Path, cwd: Path, *args: str
) -> subprocess.CompletedProcess:
    """``python ARGS`` with the checkout ``root``'s package on the path and no GPU-only
    package importable."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NO_GPU_PACKAGES)
    stubs = (
        _cpu_stubs(tmp_path) if not (tmp_path / "cpu-stubs").exists() else tmp_path / "cpu-stubs"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        # The transformers the release pins first, where this interpreter has another.
        "PYTHONPATH": os.pathsep.join(
            [*map(str, tree_paths(root / "python")), str(site), str(root / "python"), str(stubs)]
        ),
        "OMP_NUM_THREADS": "1",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return warm.run(args, env=env, cwd=cwd, timeout=900)


def _environment_reads(path: Path) -> list[str]:
    """Where the file at ``path`` reads an environment variable (``os.environ[...]``,
    ``os.environ.get``, ``os.getenv``): a shipped test takes no settings that way."""
    reads = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "environ":
                reads.append(f"os.environ[...] at line {node.lineno}")
        elif isinstance(node, ast.Attribute) and node.attr in ("get", "getenv"):
            inner = node.value
            if (node.attr == "getenv" and isinstance(inner, ast.Name) and inner.id == "os") or (
                node.attr == "get" and isinstance(inner, ast.Attribute) and inner.attr == "environ"
            ):
                reads.append(f"{node.attr} at line {node.lineno}")
    return reads


def _module_level_problems(path: Path) -> list[str]:
    """What SGLang's reviewers refuse in a test file: skips, ``inspect.getsource``,
    ``sys.modules`` mutated at module level, an ``ImportError`` fallback."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in (
            "SkipTest",
            "skip",
            "skipIf",
            "skipUnless",
            "skipTest",
            "getsource",
        ):
            problems.append(f"{node.attr} at line {node.lineno}")
        if (
            isinstance(node, ast.ExceptHandler)
            and isinstance(node.type, ast.Name)
            and node.type.id in ("ImportError", "ModuleNotFoundError")
        ):
            problems.append(f"except {node.type.id} at line {node.lineno}")
    for node in tree.body:  # module level
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
            if (
                isinstance(sub, ast.Attribute)
                and sub.attr == "modules"
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "sys"
            ):
                problems.append(f"sys.modules at module level, line {sub.lineno}")
    return problems


@pytest.fixture(scope="module")
def patched(sglang_release, tmp_path_factory):
    release = sglang_release(RELEASE)
    tmp_path = tmp_path_factory.mktemp("conventions")
    return release, _patched(release, tmp_path), tmp_path


def test_sglang_ci_collects_every_file_under_test_registered(patched):
    release, root, _ = patched
    ci = _ci_register(release)
    files = sorted(str(p) for p in (root / "test" / "registered").rglob("*.py"))
    assert len(files) == 3
    registries = ci.collect_tests(files, sanity_check=True)
    assert sorted((Path(r.filename).name, r.backend, r.suite) for r in registries) == [
        (INIT_TEST_FILE, ci.HWBackend.CPU, "base-a-test-cpu"),
        (TEST_FILE, ci.HWBackend.CPU, "base-a-test-cpu"),
        (RELAY_TEST_FILE, ci.HWBackend.CPU, "base-a-test-cpu"),
    ]
    assert all(r.est_time > 0 and r.disabled is None for r in registries)


def test_shipped_tests_keep_to_sglang_conventions(patched):
    _, root, _ = patched
    for name in (TEST_FILE, INIT_TEST_FILE, RELAY_TEST_FILE):
        source = (root / TESTS / name).read_text()
        assert "(CustomTestCase):" in source, name
        assert "from sglang.test.ci.ci_register import register_cpu_ci" in source
        assert "from sglang.test.test_utils import CustomTestCase" in source
        # Their utilities come from the package, not from a path of their own.
        assert "from sglang.test.pp_aux_capture_family_models import" in source, name
        assert "sys.path" not in source, name
        # The stand-ins go in before anything else of SGLang is imported.
        call = source.index("stub_gpu_only_packages()\n")
        assert call < source.index("from sglang.test.test_utils"), name
        assert source[:call].count("from sglang.") == 1, name
    for path in (
        f"{TESTS}/{TEST_FILE}",
        f"{TESTS}/{INIT_TEST_FILE}",
        f"{TESTS}/{RELAY_TEST_FILE}",
        UTILS,
    ):
        assert _module_level_problems(root / path) == [], path
        # No environment variable of their own: settings are constants or arguments.
        assert _environment_reads(root / path) == [], path
        assert "SGLANG_TEST_" not in (root / path).read_text(), path
    # No import hook of their own: SGLang's maybe_stub_sgl_kernel is the only finder.
    assert "meta_path" not in (root / UTILS).read_text()


def _test_count(path: Path) -> int:
    """The ``test_*`` methods of the ``unittest.TestCase`` classes in the file at ``path``:
    every one of them must run (none skipped, none lost to an import error)."""
    tree = ast.parse(path.read_text())
    return sum(
        isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
    )


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_shipped_test_passes_on_the_real_models_without_gpu_packages(patched):
    _, root, tmp_path = patched
    tests_dir = root / TESTS
    # The models do not import without the GPU-only packages ...
    probe = _run_without_gpu_packages(
        root, tmp_path, tmp_path, "-c", "import sglang.srt.models.llama"
    )
    missing = [name for name in GPU_ONLY if f"No module named '{name}'" in probe.stderr]
    assert missing, probe.stderr[-2000:]
    # ... yet the shipped test, run as SGLang's CI runs a test file, imports and passes,
    # every test run, none skipped.
    run = _run_without_gpu_packages(
        root, tmp_path, tests_dir, "-m", "unittest", "-v", INIT_TEST_FILE[:-3]
    )
    assert run.returncode == 0, run.stderr[-6000:]
    assert f"Ran {_test_count(tests_dir / INIT_TEST_FILE)} tests" in run.stderr, run.stderr[-3000:]
    assert run.stderr.rstrip().endswith("OK"), run.stderr[-3000:]
    assert "skipped" not in run.stderr
    # So does the relay test (the relay, the opt-in, the runtime guard, the width lookup
    # of a nested stack, the old width method).
    relay = _run_without_gpu_packages(
        root, tmp_path, tests_dir, "-m", "unittest", "-v", RELAY_TEST_FILE[:-3]
    )
    assert relay.returncode == 0, relay.stderr[-6000:]
    assert f"Ran {_test_count(tests_dir / RELAY_TEST_FILE)} tests" in relay.stderr, relay.stderr[
        -3000:
    ]
    assert relay.stderr.rstrip().endswith("OK") and "skipped" not in relay.stderr
    # The family test imports the same way (its --json mode, one model on 2 stages), with
    # the capture ids and microbatches given as arguments.
    family = _run_without_gpu_packages(
        root,
        tmp_path,
        tests_dir,
        TEST_FILE,
        "--json",
        "2",
        "llama",
        "--layer-ids",
        "0,1,2;5,6",
        "--batches",
        "2,0",
    )
    assert family.returncode == 0, family.stderr[-4000:]
    records = json.loads(family.stdout.strip().splitlines()[-1])
    assert records and all(r["error"] is None and r["equal"] for r in records), records
    assert {str(r["layer_ids"]) for r in records} <= {"[0, 1, 2]", "[5, 6]", "None"}, records
    assert {str(r["layer_ids"]) for r in records} >= {"[0, 1, 2]", "[5, 6]"}, records
    assert all(len(r["reference"]) == 2 for r in records), records
