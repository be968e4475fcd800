"""The test files the upstream patch adds follow SGLang's conventions and run without triton.

SGLang's CI finds tests by parsing ``register_cpu_ci(...)`` calls (``ci_register.py``,
``collect_tests``), and its tests derive from ``CustomTestCase``.  The generated files are
checked with the release's own parser, then imported and run from a patched copy of a
release in a process where ``import triton`` fails (no stand-in modules on the path).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_support.env import git_apply, linked_copy

from codemods.upstream.generate import generate

pytestmark = pytest.mark.sglang

#: Makes ``import triton`` fail in the process, as on a machine without it.
NO_TRITON = """\
import importlib.abc
import sys


class _NoTriton(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _NoTriton())
"""


def _ci_register(release: Path):
    spec = importlib.util.spec_from_file_location(
        "release_ci_register", release / "sglang" / "test" / "ci" / "ci_register.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _patched(release: Path, tmp_path: Path, models: list[str]) -> tuple[Path, list[str]]:
    result = generate(release, models=models)
    root = linked_copy(release, tmp_path / "tree",
                       writable=[c.path for c in result.changes if c.old is not None])
    done = git_apply(root, result.patch)
    assert done.returncode == 0, done.stderr
    shipped = [c.path for c in result.changes if c.path.startswith("sglang/test/")]
    # The family test's stand-in models ship next to it; every other file there is a test.
    assert "sglang/test/pp_aux_capture_family_models.py" in shipped
    tests = [p for p in shipped if Path(p).name.startswith("test_")]
    return root, tests


def _run_without_triton(root: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` with ``root`` on the path and triton unimportable."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NO_TRITON)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{root}",
           "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=600,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_generated_tests_register_for_cpu_ci_and_run_without_triton(sglang_release, tmp_path):
    release = sglang_release("0.5.20")
    root, tests = _patched(release, tmp_path, ["kimi_linear", "llama"])
    assert sorted(Path(t).name for t in tests) == [
        "test_pp_aux_capture.py", "test_pp_aux_capture_family.py"]
    ci = _ci_register(release)
    for test in tests:
        source = (root / test).read_text()
        assert "(CustomTestCase):" in source, test
        registries, has_main = ci.ut_parse_one_file(str(root / test))
        assert has_main, test
        assert [r.backend for r in registries] == [ci.HWBackend.CPU], test
        assert registries[0].est_time > 0 and registries[0].suite, test

    # The package itself does not import without triton ...
    probe = _run_without_triton(root, tmp_path, "-c", "import sglang")
    assert "No module named 'triton'" in probe.stderr, probe.stderr[-2000:]
    # ... yet the transport test, run as SGLang's CI runs a test file, imports and passes,
    # every case run.
    transport = _run_without_triton(
        root, tmp_path, str(root / "sglang/test/test_pp_aux_capture.py"), "-v")
    assert transport.returncode == 0, transport.stderr[-4000:]
    assert "Ran 4 tests" in transport.stderr and "skipped" not in transport.stderr
    # The family test drives SGLang's own model classes: it imports, and says why it
    # cannot drive them here instead of failing at import.
    family = _run_without_triton(
        root, tmp_path, str(root / "sglang/test/test_pp_aux_capture_family.py"), "-v")
    assert family.returncode == 0, family.stderr[-4000:]
    assert "sglang does not import here" in family.stderr, family.stderr[-4000:]
