"""Stand-in for ``vllm.model_executor.layers.layernorm``: SGLang 0.5.3's
``srt/layers/layernorm.py`` imports ``RMSNorm`` and ``GemmaRMSNorm`` from it at module level
on a CPU without AMX.  The CPU tests use their own norm, so neither is ever built."""

from vllm.model_executor.layers.activation import _NotOnThisMachine


class RMSNorm(_NotOnThisMachine):
    pass


class GemmaRMSNorm(_NotOnThisMachine):
    pass
