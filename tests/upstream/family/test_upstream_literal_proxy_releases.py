"""The family patch for deepseek_v4, whose decoder stack hands off with a literal
``PPProxyTensors({...})`` and captures DSPARK states after the layer, on the real SGLang
0.5.21, 0.5.22 and 0.5.23 releases.

On 0.5.23 the stack's ``forward`` delegates to ``_forward_impl`` and writes each capture
into an ``AuxHiddenStatePacker`` slot (``mhc_stream_mean(..., out=aux.slot(...))``); the
patch rewrites ``_forward_impl``.  The patch passes ``git apply --check`` on the release,
applies to a copy and is empty there.  On each of the three releases the family test the
patch adds to SGLang drives the real ``DeepseekV4ForCausalLM`` / ``DeepseekV4Model`` of the
patched copy, imported on CPU, as 2 and 3 pipeline stages in separate processes (gloo;
the stages of both sizes forked from one process per tree; captures on every stage, and
all on stage 0; microbatches of 3, 0 and 2 tokens) and compares the last stage's aux states with a PP=1 run
(``torch.equal``); the release's own file loses them.

0.5.21 and 0.5.22 import ``sglang.kernels.ops.attention.dsv4.fp4_indexer``, which adds two
``triton.language.constexpr`` values at import: the CPU triton stand-in
(``sglang_support/stubs/triton``) keeps their values for that.  Their
``DeepseekV4ForCausalLM.forward`` reads ``self.vision`` (None for a text-only checkpoint,
set in ``__init__``, which the family test skips): the test's stand-in table sets it.
"""

from __future__ import annotations

import subprocess

import pytest
from sglang_support.family_check import (
    patched_copy,
    run_family_tests,
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
    result, copy = patched_copy(release, tmp_path_factory.mktemp("literal") / version, MODELS)
    return version, release, result, copy


def test_patch_applies_and_hands_captures_on_in_the_literal_proxy(patched):
    version, release, result, copy = patched
    decision = result.family.decisions["deepseek_v4.py"]
    assert decision.patched, decision.reason
    assert decision.proxy_arg == "dict"
    text = (copy / "sglang/srt/models/deepseek_v4.py").read_text()
    assert "**aux_outgoing," in text
    if version == "0.5.23":
        # The capture method is the one ``forward`` delegates to; its packer takes the
        # earlier stages' captures right after it is made, and nothing is gathered later.
        impl = text[text.index("    def _forward_impl(") :]
        assert "pp_aux_outgoing(" in impl and "pp_aux_collect(" not in text
        made = "            else None\n        )\n"
        seed = (
            "        dspark_aux_hidden_states = pp_aux_seed(\n"
            "            self, dspark_aux_hidden_states, pp_proxy_tensors\n"
            "        )\n"
        )
        assert made + seed in impl
        assert "dspark_aux_hidden_states.finalize()" in impl
    else:
        assert "pp_aux_collect(" in text  # a list
    proc = subprocess.run(
        ["git", "apply", "--check"],
        cwd=release,
        input=result.patch,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert generate(copy, models=MODELS).patch == ""


#: Capture id sets and microbatch token counts the family test runs with here (passed
#: as its runner's ``--layer-ids`` and ``--batches``).  deepseek_v4 captures after the layer (raw ids), and the 9 stand-in layers
#: split [0, 4) [4, 9) on 2 stages and [0, 3) [3, 6) [6, 9) on 3: 1,3,4,6 puts captures on
#: every stage, 0,1,2 puts all of them on stage 0.
LAYER_ID_SETS = {(1, 3, 4, 6): "every stage", (0, 1, 2): "all on stage 0"}
BATCHES = (3, 0, 2)


@pytest.mark.timeout(1800)
def test_patched_stages_match_pp1_and_unpatched_lose_captures(patched, tmp_path):
    _, release, result, copy = patched
    baseline = unpatched_copy(release, tmp_path / "unpatched", result)
    chosen = {"layer_id_sets": list(LAYER_ID_SETS), "batches": BATCHES}
    runs = run_family_tests(copy, result, (2, 3), MODELS, timeout=900, **chosen)
    # The release's file, on 3 stages (where every stage owns captures), loses them.
    losses = run_family_tests(baseline, result, (3,), MODELS, timeout=900, **chosen)
    assert sorted(runs) == [2, 3] and sorted(losses) == [3]
    for pp_size in (2, 3):
        records = runs[pp_size]
        assert validated_models(records) == {"deepseek_v4": True}, records
        assert sorted(tuple(r["layer_ids"]) for r in records) == sorted(
            tuple(ids) for ids in LAYER_ID_SETS
        ), records
        for record in records:
            assert record["pp"] == pp_size, record
            # One comparison per microbatch, the empty one included.
            assert len(record["reference"]) == len(BATCHES), record
            assert record["reference"] == record["pipelined"], record
            assert any(record["reference"]), record
    lost = losses[3]
    assert len(lost) == len(runs[3]), lost
    for record in lost:
        assert record["error"] is not None or any(
            got < want for got, want in zip(record["pipelined"], record["reference"], strict=False)
        ), record
        assert not record["equal"], record
