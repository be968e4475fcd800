"""The shipped runtime with SGLang's own ``AuxHiddenStatePacker``, as the releases ship it.

``srt/layers/aux_hidden_states.py`` needs nothing but torch, so each release's file is run
here as it is: 0.5.17 (the first packer: ``append`` only), 0.5.21 and 0.5.23 (``out=`` and
``for_batch``, which write into the decode CUDA-graph runner's buffer).  Three stages of a
4-layer model relay their captures; the last stage makes its packer, seeds it right after
(``pp_aux_seed``), captures its own (and its output), and ``pp_aux_collect`` hands the
same packer back.  Every capture is copied once, into its final slot of one buffer (the
runner's where there is one): ATen's copy calls are counted.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from codemods.upstream.edit.runtime import render_glue
from tests.upstream.test_upstream_runtime import (
    HIDDEN,
    NUM_LAYERS,
    TOKENS,
    CountCopies,
    _handoffs,
    _own,
    _stages,
)

pytestmark = pytest.mark.sglang

#: 3 stages, captures on each, the last stage's output too (id ``NUM_LAYERS``).
BOUNDS = [(0, 1), (1, 3), (3, 4)]
IDS = [0, 1, 2, 3, NUM_LAYERS]


def _load(text, name):
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(text, f"{name}.py", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def glue():
    name = "auxcap_test_pp_aux_capture_real_packer"
    try:
        yield _load(render_glue(), name)
    finally:
        sys.modules.pop(name, None)


@pytest.fixture
def release_packer(sglang_release):
    """``version -> AuxHiddenStatePacker`` of that release's own file."""
    names = []

    def load(version):
        path = sglang_release(version) / "sglang" / "srt" / "layers" / "aux_hidden_states.py"
        names.append(f"auxcap_release_aux_hidden_states_{version.replace('.', '_')}")
        return _load(path.read_text(encoding="utf-8"), names[-1]).AuxHiddenStatePacker

    yield load
    for name in names:
        sys.modules.pop(name, None)


def _with_captured(packer_class):
    """The class with the ``captured()`` accessor the patch adds (non-last stages hand
    on what their packer holds so far)."""

    def captured(self):
        return self._buffer[..., : self._idx * self._feature_size]

    return type("Packer", (packer_class,), {"captured": captured})


#: (release, how the last stage makes its packer): 0.5.17 and 0.5.21 take no buffer;
#: 0.5.23's decode graphs hand one over (``out=``, or ``for_batch`` reading the batch's).
MADE = [
    ("0.5.17", "constructor"),
    ("0.5.21", "constructor"),
    ("0.5.23", "constructor"),
    ("0.5.23", "out"),
    ("0.5.23", "for_batch"),
]


@pytest.mark.parametrize(("version", "via"), MADE)
def test_the_last_stage_copies_each_capture_once_into_the_packer_it_made(
    glue, release_packer, version, via
):
    cls = release_packer(version)
    packer_cls = _with_captured(cls)
    stacks = _stages(glue, BOUNDS, IDS)
    incoming = _handoffs(glue, stacks, IDS, collector=lambda: packer_cls(len(IDS)))
    last = stacks[-1]
    own = _own(last, IDS)
    out = torch.full((TOKENS, len(IDS) * HIDDEN), -1.0)
    if via == "constructor":
        out, packer = None, cls(len(IDS))
    elif via == "out":
        packer = cls(len(IDS), out=out)
    else:
        packer = cls.for_batch(SimpleNamespace(aux_hidden_states_buffer=out), len(IDS))
    with CountCopies() as counted:
        glue.pp_aux_seed(last, packer, incoming)
        for capture in own:
            packer.append(capture)
        collected = glue.pp_aux_collect(last, packer, incoming)
        packed = collected.finalize()
    assert collected is packer
    assert out is None or packed is out
    assert counted.counts == {"aten::copy_": len(IDS)}, version
    assert [int(packed[0, k * HIDDEN]) for k in range(len(IDS))] == IDS
