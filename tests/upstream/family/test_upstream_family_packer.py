"""The family rewriter on synthetic model files of the packing and delegating shapes
(``fixtures/upstream/packer/``): a stack that packs its captures into an
``AuxHiddenStatePacker``, names its ``to_pp`` handoff and captures its output before the
handoff, under a causal-LM forward that unpacks the named stack output on every rank; and
a stack whose ``forward`` delegates to a method that writes captures into packer slots
and hands off with a literal ``PPProxyTensors``.  The last stage seeds each packer with the
earlier stages' captures right after making it (``pp_aux_seed``); a packer it could not
seed that way is left alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codemods.upstream.family.plan import plan_family

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "upstream"
INPUTS = FIXTURES / "packer"
EXPECTED = FIXTURES / "packer_expected"
NAMES = ["packer_delegated.py", "packer_named.py"]


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    models = tmp_path_factory.mktemp("packer")
    for name in NAMES:
        shutil.copy(INPUTS / name, models / name)
    return plan_family(models)


def test_rewritten_files_match_expected(plan):
    assert sorted(path.name for path in INPUTS.glob("*.py")) == NAMES
    rewritten = plan.rewritten()
    assert sorted(rewritten) == NAMES
    for name in NAMES:
        assert rewritten[name] == (EXPECTED / name).read_text(), name


def test_decisions_name_the_shapes(plan):
    named = plan.decisions["packer_named.py"]
    assert named.patched, named.reason
    assert named.capture_kinds == ("entry-gathered",) and named.final_capture
    assert named.fixes == (
        "`PackForCausalLM.forward` hands non-last stages' `PPProxyTensors` on instead of "
        "`hidden_states, before_norm, aux_hidden_states = model_out` (it failed under PP "
        "with or without capture)",
    )
    delegated = plan.decisions["packer_delegated.py"]
    assert delegated.patched, delegated.reason
    assert delegated.capture_kinds == ("after-layer",) and delegated.proxy_arg == "dict"


def test_rewritten_text_hands_on_and_seeds_the_packer(plan):
    named = plan.rewritten()["packer_named.py"]
    assert "return pp_aux_handoff(self, proxy, packed, pp_proxy_tensors)" in named
    assert 'proxy.tensors["extra"] = extra' in named
    # The last stage's packer takes the earlier stages' captures right after it is made,
    # before the layers and the stage-output capture; nothing is gathered after them.
    made = "packed = AuxHiddenStatePacker(len(self.layers_to_capture))\n"
    assert made + "        packed = pp_aux_seed(self, packed, pp_proxy_tensors)\n" in named
    assert "pp_aux_collect" not in named
    assert named.index("if not self.pp_group.is_last_rank:\n            return model_out") < (
        named.index("hidden_states, before_norm, aux_hidden_states = model_out")
    )
    delegated = plan.rewritten()["packer_delegated.py"]
    impl = delegated[delegated.index("def _forward_impl(") :]
    assert "pp_aux_outgoing(self, slots, pp_proxy_tensors)" in impl
    assert (
        "        )\n        slots = pp_aux_seed(self, slots, pp_proxy_tensors)\n        for i"
        in impl
    )
    assert "pp_aux_collect" not in delegated
    # The delegating forward itself is left as it is.
    forward = delegated[delegated.index("    def forward(") : delegated.index("def _forward_impl(")]
    assert "pp_aux" not in forward


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        # The packed captures are read between the layer loop and the handoff.
        (
            "        if (\n            self.pp_group.is_last_rank\n",
            "        self.inspect(packed)\n        if (\n            self.pp_group.is_last_rank\n",
            "is used between the layer loop and the PP handoff",
        ),
        # The packer is not sized by the capture ids.
        (
            "AuxHiddenStatePacker(len(self.layers_to_capture))",
            "AuxHiddenStatePacker(3)",
            "no `return PPProxyTensors(...)`",
        ),
        # The named handoff is rebound before it is returned.
        (
            '            proxy.tensors["extra"] = extra\n',
            "            proxy = self.wrap(proxy)\n",
            "no `return PPProxyTensors(...)`",
        ),
    ],
)
def test_unrecognised_variants_are_left_alone(tmp_path, old, new, reason):
    text = (INPUTS / "packer_named.py").read_text()
    assert old in text
    (tmp_path / "packer_named.py").write_text(text.replace(old, new))
    decision = plan_family(tmp_path).decisions["packer_named.py"]
    assert not decision.patched
    assert reason in decision.reason, decision.reason


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        # A second packer: the received captures could land in either.
        (
            "        for i in range(self.start_layer, self.end_layer):\n",
            "        spare = AuxHiddenStatePacker(1)\n"
            "        for i in range(self.start_layer, self.end_layer):\n",
            "`slots` is not an `AuxHiddenStatePacker` made once, at the top of the forward",
        ),
        # Made whether or not the captures are taken.
        (
            "AuxHiddenStatePacker(len(self.dspark_layers_to_capture)) if capture else None",
            "AuxHiddenStatePacker(len(self.dspark_layers_to_capture))",
            "not made under the condition the captures are taken under (`capture`)",
        ),
    ],
)
def test_packers_the_last_stage_cannot_seed_are_left_alone(tmp_path, old, new, reason):
    text = (INPUTS / "packer_delegated.py").read_text()
    assert old in text
    (tmp_path / "packer_delegated.py").write_text(text.replace(old, new))
    decision = plan_family(tmp_path).decisions["packer_delegated.py"]
    assert not decision.patched
    assert reason in decision.reason, decision.reason
