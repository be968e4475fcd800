"""Each release's code runs under the transformers release that release pins
(``sglang_support.release_deps``, put first by ``env.sglang_env``): 0.5.21 pins the
transformers installed here, 0.5.23 pins 5.19.0, which a cached site directory provides
on top of this interpreter's packages (the same torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sglang_support.env import run_python
from sglang_support.release_deps import pinned_transformers, tree_paths, tree_version

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

PROBE = "import torch, transformers; print(transformers.__version__, torch.__file__)"


@pytest.mark.timeout(900)
def test_each_release_runs_under_the_transformers_it_pins(sglang_release):
    here = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    for version, pin in (("0.5.21", "5.12.1"), ("0.5.23", "5.19.0")):
        root = sglang_release(version)
        assert tree_version(root) == version
        assert pinned_transformers(version) == pin
        assert bool(tree_paths(root)) == (pin != here[0])
        proc = run_python(["-c", PROBE], root, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        # The pinned transformers, and the very torch of this interpreter.
        assert proc.stdout.split() == [pin, here[1]], version
