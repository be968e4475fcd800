"""The shipped family test builds its stages through the models' real ``__init__``.

On the patched SGLang 0.5.23 tree, every model of the family test is built as a
single stage the way the test builds its stages (``build_model`` after the utilities'
``init_parallel``; ``sglang_support/family_runner.py --probe``): the stage holds the layers
its constructor builds, the stand-in decoder layers are as wide as the tiny config, the
stand-in logits processor is an ``nn.Module``, and two builds hold the same weights
(filled by parameter name).  Only a class without a tiny config is assembled without
``__init__``.
"""

from __future__ import annotations

import json

import pytest
from sglang_support import warm
from sglang_support.family_check import family_test_path, patched_copy, shipped_test_env

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
#: Family classes ``TINY_MODELS`` holds no config of: Kimi-Linear and Kimi-K3, which the
#: family test drives on stand-in layers only (the relay their patched forwards run).
ASSEMBLED = {"kimi_linear", "kimi_k3"}


@pytest.fixture(scope="module")
def report(sglang_release, tmp_path_factory):
    result, copy = patched_copy(sglang_release(RELEASE), tmp_path_factory.mktemp("build"))
    test = family_test_path(copy, result)
    proc = warm.run(
        ["-m", "sglang_support.family_runner", "--probe", str(test)],
        env=shipped_test_env(copy),
        cwd=copy,
        timeout=600,
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1])


def test_every_stage_with_a_tiny_config_is_built_through_init(report):
    assert len(report) >= 25
    for model, record in sorted(report.items()):
        assert "error" not in record, (model, record)
        assert record["constructed"] == (model not in ASSEMBLED), (model, record)


def test_stand_ins_take_their_width_from_the_config(report):
    for model, record in sorted(report.items()):
        if model in ASSEMBLED:
            continue
        assert record["hidden_size"] == 64, (model, record)
        assert record["widths"] == [record["hidden_size"]], (model, record)
        assert record["logits_module"], (model, record)


def test_weights_are_the_same_build_after_build(report):
    for model, record in sorted(report.items()):
        assert record["same_weights"], (model, record)
