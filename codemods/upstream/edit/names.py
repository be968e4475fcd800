"""The names the upstream patch writes into SGLang and the errors it recognises, said once.

The module that holds the shipped helpers in a patched tree, the function the rewritten
setters call, the helpers the rewritten decoder-stack forwards call, the one width lookup
the CUDA-graph sizing asks, the attribute of the decoder stack the relay lives on, the
``PPProxyTensors`` entry the captures travel in, and the DSPARK errors of the released Kimi
files (from the hook catalog).
"""

from __future__ import annotations

from codemods.catalog.hooks import NONE_ERROR_DSPARK, PP_ERROR_DSPARK

__all__ = [
    "ATTACH",
    "AUX_ENTRY",
    "COLLECT",
    "ENTRY_IDS_ATTR",
    "GLUE_MODULE",
    "HANDOFF",
    "NONE_ERROR",
    "OUTGOING",
    "PP_ERROR",
    "RELAY_ATTR",
    "RELAY_CLASS",
    "SEED",
    "WIDTH",
]

#: The module of the helpers every rewritten model calls (``set_pp_aux_capture``, ...):
#: SGLang's own aux-capture module, beside ``AuxHiddenStatePacker``.
GLUE_MODULE = "sglang.srt.layers.aux_hidden_states"
#: The helper a rewritten setter calls on every rank once the capture ids are stored,
#: with the width of the stack's hidden states (``hidden_size=``).
ATTACH = "set_pp_aux_capture"
#: The width of the aux entry a stage of a model receives, found from the relay
#: ``ATTACH`` gave its decoder stack: what the CUDA-graph sizing asks of any model.
WIDTH = "pp_aux_proxy_hidden_size"
#: The helpers a rewritten decoder-stack forward calls: a non-last stage adds its captures
#: to the ``PPProxyTensors`` dict it builds (``OUTGOING``) or to the handoff it returns
#: (``HANDOFF``); the last stage gathers every stage's captures into its list (``COLLECT``);
#: a stack that packs its captures rebinds its ``AuxHiddenStatePacker`` to ``SEED``'s
#: result, which holds the earlier stages' captures before its layers capture (on a
#: non-last stage a packer sized for what the stage hands on).
OUTGOING = "pp_aux_outgoing"
HANDOFF = "pp_aux_handoff"
COLLECT = "pp_aux_collect"
SEED = "pp_aux_seed"
#: The attribute of the decoder stack the relay lives on, and the relay's class.
RELAY_ATTR = "pp_aux_relay"
RELAY_CLASS = "PPAuxRelay"
#: The decoder-stack property naming the layer on whose stage each capture id is taken,
#: where capture ``i`` is taken at the entry of layer ``i + 1``.
ENTRY_IDS_ATTR = "pp_aux_capture_entries"
#: The ``PPProxyTensors`` entry that carries earlier stages' captures (SGLang's DSPARK
#: relay used ``dspark_hidden_states``; the patch renames it for every capture method).
AUX_ENTRY = "aux_hidden_states"
#: What a released Kimi setter raises under PP, and on ``None`` ids.
PP_ERROR = PP_ERROR_DSPARK
NONE_ERROR = NONE_ERROR_DSPARK
