"""The family patch for deepseek_v4, whose decoder stack hands off with a literal
``PPProxyTensors({...})`` and captures DSPARK states after the layer, on the real SGLang
0.5.21, 0.5.22 and 0.5.23 releases.

On 0.5.23 the stack's ``forward`` delegates to ``_forward_impl`` and writes each capture
into an ``AuxHiddenStatePacker`` slot (``mhc_stream_mean(..., out=aux.slot(...))``); the
patch rewrites ``_forward_impl``.  The patch passes ``git apply --check`` on the release,
applies to a copy and is empty there.  On 0.5.23 the family test the patch adds to SGLang drives
the real ``DeepseekV4ForCausalLM`` / ``DeepseekV4Model`` of the 0.5.23 copy, imported on CPU, as
2 and 3 pipeline stages in separate processes (gloo; relay, and direct on 3 stages; one
capture on every stage of PP=3; batches of 3, 0 and 1 tokens) and compares the last
stage's aux states with a PP=1 run (``torch.equal``); the release's own file loses them.
"""

from __future__ import annotations

import subprocess

import pytest
from sglang_support.family_check import (
    patched_copy,
    run_family_test,
    unpatched_copy,
    validated_models,
)

from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
MODELS = ["deepseek_v4"]


@pytest.fixture(scope="module", params=RELEASES)
def patched(request, sglang_release, tmp_path_factory):
    version = request.param
    release = sglang_release(version)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("literal") / version,
                                MODELS)
    return version, release, result, copy


def test_patch_applies_and_hands_captures_on_in_the_literal_proxy(patched):
    version, release, result, copy = patched
    decision = result.family.decisions["deepseek_v4.py"]
    assert decision.patched, decision.reason
    assert decision.proxy_arg == "dict"
    text = (copy / "sglang/srt/models/deepseek_v4.py").read_text()
    assert "**aux_outgoing," in text and "pp_aux_collect(" in text
    if version == "0.5.23":
        # The capture method is the one ``forward`` delegates to.
        impl = text[text.index("    def _forward_impl("):]
        assert "pp_aux_outgoing(" in impl and "pp_aux_collect(" in impl
        assert "dspark_aux_hidden_states.finalize()" in impl
    proc = subprocess.run(["git", "apply", "--check"], cwd=release, input=result.patch,
                          text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert generate(copy, models=MODELS).patch == ""


#: The release whose deepseek_v4 the shipped family test builds on CPU (on 0.5.21 and
#: 0.5.22 building the stack fails with the CPU stand-in modules before any forward runs;
#: their patch is checked above).
DRIVEN = "0.5.23"


@pytest.mark.timeout(900)
def test_patched_stages_match_pp1_and_unpatched_lose_captures(sglang_release, tmp_path):
    release = sglang_release(DRIVEN)
    result, copy = patched_copy(release, tmp_path / "patched", MODELS)
    baseline = unpatched_copy(release, tmp_path / "unpatched", result)
    for pp_size in (2, 3):
        records = run_family_test(copy, result, pp_size, MODELS, timeout=600)
        assert validated_models(records) == {"deepseek_v4": True}, records
        assert all(record["reference"] for record in records), records
        lost = run_family_test(baseline, result, pp_size, MODELS, timeout=600)
        assert lost, pp_size
        for record in lost:
            assert record["error"] is not None or any(
                got < want
                for got, want in zip(record["pipelined"], record["reference"], strict=False)
            ), record
            assert not record["equal"], record
