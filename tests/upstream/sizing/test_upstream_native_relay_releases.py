"""Kimi-Linear's and Kimi-K3's own DSPARK relay (SGLang 0.5.21+) through the shipped helpers.

On 0.5.21-0.5.23 the patch (with any family model, which brings the renamed sizing path)
replaces the hand-written relay of ``kimi_linear.py`` and ``kimi_k3.py`` with the helpers
every other model calls: no incoming entry appended by hand, no ``torch.cat`` into the
handoff, no width arithmetic and no width method (the sizing asks the helpers' lookup);
the DSPARK hook gives the stack its relay with the width it
knows, and the classes with a DSPARK hook declare that they relay DSPARK.  On 0.5.22 and
0.5.23 the patched ``KimiLinearForCausalLM`` and ``KimiLinearModel``, imported on CPU, run as
2 and 3 pipeline stages (``sglang_support.stage_check``) and hand the logits processor
exactly what a PP=1 run hands it.  A file lacking a piece of the relay is refused by name.
"""

from __future__ import annotations

import pytest
from sglang_support.env import run_check
from sglang_support.family_check import patched_copy

from codemods.upstream.sizing.native_relay import NativeRelayShape, relay_through_helpers

KIMI = "sglang/srt/models/kimi_linear.py"
K3 = "sglang/srt/models/kimi_k3.py"


@pytest.fixture(scope="module", params=("0.5.21", "0.5.22", "0.5.23"))
def patched(request, sglang_release, tmp_path_factory):
    version = request.param
    release = sglang_release(version)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("kimi") / version, ["llama"])
    return version, release, result, copy


@pytest.mark.sglang
@pytest.mark.slow
def test_both_kimi_files_relay_through_the_shipped_helpers(patched):
    version, release, result, copy = patched
    for path in (KIMI, K3):
        assert path in result.changed, (version, path)
        text = (copy / path).read_text()
        old = (release / path).read_text()
        assert "torch.cat(\n                    aux_hidden_states, dim=-1" in old
        assert "aux_hidden_states, dim=-1" not in text
        assert "dspark_hidden_states" not in text
        assert "self.config.hidden_size * sum(" not in text
        # No width method: the sizing asks the helpers' lookup of any model.
        assert "get_pp_proxy_aux_hidden_size" not in text
        assert "get_pp_proxy_dspark_hidden_size" not in text
        assert "pp_aux_collect(" in text
        assert 'pp_aux_relay_methods = ("DSPARK",)' in text
        assert "hidden_size=self.config.hidden_size," in text
        compile(text, path, "exec")
    kimi = (copy / KIMI).read_text()
    assert 'ids_attr="dspark_layers_to_capture"' in kimi
    k3 = (copy / K3).read_text()
    assert 'ids_attr="pp_aux_capture_entries"' in k3 and "final=True" in k3
    assert "return [i + 1 for i in self.dspark_layers_to_capture or ()]" in k3
    # 0.5.21 hands a dict on; 0.5.22+ a PPProxyTensors.
    handoff = "proxy_tensors.update(" if version == "0.5.21" else "proxy = pp_aux_handoff("
    assert handoff in kimi, version


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ("0.5.22", "0.5.23"))
def test_patched_kimi_linear_stages_match_pp1(version, sglang_release, tmp_path):
    _, copy = patched_copy(sglang_release(version), tmp_path / version, ["llama"])
    runs = [
        {"model": "kimi_linear", "hook": "dspark", "layer_ids": ids, "pp": pp}
        for ids in ([6, 0, 3, 2], [0, 1])
        for pp in (2, 3)
    ]
    config = dict(num_layers=7, hidden_size=4, tokens=[3, 0, 2], runs=runs, timeout=120)
    results = run_check("stage_check", config, copy, timeout=900)["runs"]
    assert len(results) == len(runs)
    for record in results:
        assert record["ok"], record
        assert record["aux_counts"] == record["expected_counts"]
    assert results[0]["expected_counts"] == [4, 4, 4]


def test_a_relay_missing_a_piece_is_refused_by_name():
    text = (
        "class KimiLinearModel:\n"
        "    def forward(self):\n"
        "        aux_hidden_states = []\n"
        "        return hidden_states\n"
    )
    with pytest.raises(NativeRelayShape, match=r"^x\.py: the incoming aux entry not found once"):
        relay_through_helpers(text, "x.py", entries=False)
    done = "set_pp_aux_capture(self.model, self.pp_group)\n"
    assert relay_through_helpers(done, "x.py", entries=False) == done
