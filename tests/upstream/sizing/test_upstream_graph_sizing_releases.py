"""CUDA-graph sizing of the aux entry on the real SGLang 0.5.18-0.5.23 releases.

The family patch of each release also sizes the PP proxy buffers for the aux entry: on
0.5.21+ by mirroring SGLang's DSPARK sizing path (``graph_sizing.py``), on 0.5.18-0.5.20
by adding the path next to the residual bank's, with the pre-planned decode load's
refresh (``graph_sizing_legacy.py``); the resolver asks the helpers' one lookup,
``pp_aux_proxy_hidden_size(model)``, so no patched class gets a width method.  The
patched tree is imported on CPU; for every stage
of 2- and 3-stage splits the real allocation functions allocate the aux entry with
exactly the width the previous stage sends, and the real replay loads (full and
pre-planned) copy the incoming entry into it (``sglang_support/sizing_check.py sizing``).  The
release with only the patch's new files added allocates no aux buffer, so the same
drive fails there.

The buffers of the runner's dummy forwards (FlashInfer autotune, DeepGEMM warm-up) get the
entry too (``warmup_buffers.py``): SGLang's own ``_alloc_dummy_decode_buffers`` builds
them for every later stage of the same splits, and llama stages driven on them run (the
dummy forward on zeros) and, with the previous stage's handoff copied in, equal PP=1
(``sglang_support/sizing_check.py warmup``); with ``base_runner.py`` as released the dummy
forward raises that the handoff has no ``aux_hidden_states`` entry.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import linked_copy, run_python
from sglang_support.family_check import patched_copy, unpatched_copy

from codemods.upstream.generate import generate
from codemods.upstream.output.pr_body import render
from codemods.upstream.sizing.graph_sizing import SIZING_MODULES

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
MODEL = ("sglang.srt.models.llama", "LlamaForCausalLM")
DECODE_RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
BASE_RUNNER = "sglang/srt/model_executor/runner/base_runner.py"


def _path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def _sizing_report(tree) -> dict:
    proc = run_python(["-m", "sglang_support.sizing_check", "sizing", *MODEL], tree, timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=RELEASES)
def patched(request, sglang_release, tmp_path_factory):
    release = sglang_release(request.param)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("sizing"), ["llama"])
    return release, result, copy


def test_the_patch_sizes_the_aux_entry_along_the_sizing_path(patched):
    release, result, copy = patched
    for module in SIZING_MODULES:
        path = _path(module)
        released = (release / path).read_text()
        # 0.5.18's prefill runner keeps no PP proxy buffers for any key.
        if module.endswith("prefill_cuda_graph_runner") and (
            "pp_proxy_residual_num_blocks" not in released
        ):
            assert path not in result.changed
            continue
        assert path in result.changed
        assert "pp_proxy_aux_hidden_size" in (copy / path).read_text()
        assert "pp_proxy_aux_hidden_size" not in released
    llama = (copy / "sglang/srt/models/llama.py").read_text()
    assert "get_pp_proxy_aux_hidden_size" not in llama
    assert "hidden_size=self.config.hidden_size" in llama
    misc = (copy / _path(SIZING_MODULES[0])).read_text()
    assert "return pp_aux_proxy_hidden_size(model)\n" in misc
    assert "from sglang.srt.layers.aux_hidden_states import pp_aux_proxy_hidden_size\n" in misc
    body = render(result)
    # 0.5.21+ size DSPARK's entry already: it is renamed; older releases get the path.
    renamed = "dspark" in (release / _path(SIZING_MODULES[2])).read_text()
    assert (
        "- SGLang's DSPARK entry and CUDA-graph sizing now serve every capture method"
        if renamed
        else "- CUDA-graph sizing of the `aux_hidden_states` proxy entry along a new path"
    ) in body
    assert "CUDA graphs disabled" not in body


@pytest.mark.timeout(600)
def test_buffers_are_sized_and_loaded_with_what_the_previous_stage_sends(patched):
    _, _, copy = patched
    report = _sizing_report(copy)
    assert report["errors"] == []
    # 2 + 3 stages, 3 capture sets, 3 batches; stages past the first receive captures.
    assert len(report["checks"]) == (2 + 3) * 3 * 3
    widths = {
        (label.split(" stage=")[0], label.endswith("stage=0"), width)
        for label, width, _, _ in report["checks"]
    }
    assert any(width > 0 for _, _, width in widths)
    assert all(width == 0 for _, first, width in widths if first)
    assert report["aux_buffers"] > 0


@pytest.mark.timeout(600)
def test_the_release_as_shipped_allocates_no_aux_buffer(patched, tmp_path):
    release, result, _ = patched
    report = _sizing_report(unpatched_copy(release, tmp_path / "unpatched", result))
    assert report["aux_buffers"] == 0
    assert "misc_utils has no resolve_pp_proxy_aux_hidden_size" in report["errors"]
    assert any("previous stage sent" in error for error in report["errors"])


@pytest.mark.timeout(600)
def test_without_the_pre_planned_refresh_the_entry_is_stale(patched, tmp_path):
    release, _, copy = patched
    released = (release / DECODE_RUNNER).read_text()
    assert "needs_forward_metadata_init" in released  # the pre-planned branch
    if "self.buffers.pp_proxy_tensors.get(" in released:
        pytest.skip("the release refreshes the proxy buffers there itself (0.5.21+)")
    mutant = linked_copy(copy, tmp_path / "mutant", [DECODE_RUNNER])
    runner = mutant / DECODE_RUNNER
    text = runner.read_text()
    start = text.index("            if (\n                pp_proxy_tensors is not None")
    last = "buf[: src.shape[0]].copy_(src)\n"
    runner.write_text(text[:start] + text[text.index(last, start) + len(last) :])
    report = _sizing_report(mutant)
    assert report["errors"]
    assert all("pre-planned load did not copy" in error for error in report["errors"])


def _warmup_report(tree) -> dict:
    proc = run_python(["-m", "sglang_support.sizing_check", "warmup"], tree, timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_later_stages_run_on_the_dummy_forward_buffers_and_equal_pp1(patched, tmp_path):
    release, result, copy = patched
    assert BASE_RUNNER in result.changed
    report = _warmup_report(copy)
    assert report["errors"] == []
    # Later stages of 2 + 3 stages, 3 capture sets, 3 batches.
    later = (1 + 2) * 3 * 3
    assert len(report["checks"]) == later
    # Each holds the entry as wide as what the previous stage sends, one row per token.
    assert all(width == sent > 0 for _, width, sent, _ in report["checks"])
    assert all(rows[0] == rows[1] for *_, rows in report["checks"])
    assert report["aux_buffers"] == report["dummy_forwards"] == later
    # Every run (2 and 3 stages, 3 capture sets, 3 batches).
    assert report["equal_runs"] == 2 * 3 * 3
    # base_runner.py as released: the reviewer's start-up failure.
    mutant = linked_copy(copy, tmp_path / "released-base-runner", [BASE_RUNNER])
    (mutant / BASE_RUNNER).write_text((release / BASE_RUNNER).read_text())
    released = _warmup_report(mutant)
    assert released["aux_buffers"] == released["dummy_forwards"] == released["equal_runs"] == 0
    assert any(
        "dummy forward raised the PP handoff has no 'aux_hidden_states' entry" in error
        for error in released["errors"]
    )


def test_generating_again_on_the_patched_tree_changes_nothing(patched):
    _, _, copy = patched
    again = generate(copy, models=["llama"])
    assert again.changed == []
