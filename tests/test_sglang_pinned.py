"""Each release's code runs under the transformers release that release pins
(``sglang_support.pinned``): 0.5.21 pins the transformers installed here, 0.5.23 pins
5.19.0, which a cached venv provides on top of this interpreter's packages."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sglang_support.pinned import (
    installed_transformers,
    pinned_transformers,
    release_python,
    tree_version,
)

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
        python = release_python(root)
        assert (python == sys.executable) == (pin == installed_transformers())
        got = subprocess.run(
            [python, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300
        ).stdout.split()
        # The pinned transformers, and the very torch of this interpreter.
        assert got == [pin, here[1]], (version, got)
