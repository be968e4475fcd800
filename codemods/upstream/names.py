"""The names the upstream patch writes into SGLang and the errors it recognises, said once.

The shipped modules (their import paths in a patched tree), the glue function the rewritten
setters call, the attribute the transport lives on, the transport modes, and the DSPARK
errors of the released Kimi files (from the hook catalog).
"""

from __future__ import annotations

from codemods.catalog.hooks import NONE_ERROR_DSPARK, PP_ERROR_DSPARK
from codemods.upstream.pp_aux_plan import AUX_ENTRY, MODES

__all__ = [
    "ATTACH",
    "AUX_ENTRY",
    "GLUE_MODULE",
    "MODES",
    "NONE_ERROR",
    "PLAN_MODULE",
    "PP_ERROR",
    "TRANSPORT_ATTR",
    "TRANSPORT_MODULE",
]

#: The transport shipped into SGLang.
TRANSPORT_MODULE = "sglang.srt.distributed.pp_aux_transport"
#: The transport's torch-free half, shipped next to it (the transport imports it).
PLAN_MODULE = "sglang.srt.distributed.pp_aux_plan"
#: The glue every rewritten model calls (``attach_pp_aux_transport``, ...).
GLUE_MODULE = "sglang.srt.distributed.pp_aux_capture"
#: The glue function a rewritten setter calls to attach the transport to its stack.
ATTACH = "attach_pp_aux_transport"
#: The attribute of the decoder stack the transport lives on.
TRANSPORT_ATTR = "pp_aux_transport"
#: What a released Kimi setter raises under PP, and on ``None`` ids.
PP_ERROR = PP_ERROR_DSPARK
NONE_ERROR = NONE_ERROR_DSPARK
