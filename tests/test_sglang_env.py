"""The CPU SGLang environment: a real release wheel imports its model module on CPU with the
stand-in modules of ``tests/sglang_support/stubs``."""

from __future__ import annotations

import pytest
from sglang_support.env import run_python

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_kimi_linear_imports_on_cpu(sglang_release):
    root = sglang_release("0.5.20")
    assert (root / "sglang" / "srt" / "models" / "kimi_linear.py").is_file()
    probe = (
        "import torch, sglang.srt.models.kimi_linear as m\n"
        "assert not torch.cuda.is_available()\n"
        "print(m.__file__)\n"
        "print(hasattr(m.KimiLinearForCausalLM, 'set_dspark_layers_to_capture'))\n"
    )
    proc = run_python(["-c", probe], root, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    file_line, has_setter = proc.stdout.split()[-2:]
    assert file_line.startswith(str(root))
    assert has_setter == "True"
