"""Stand-in for ``vllm.model_executor.layers.activation``: SGLang 0.5.3's
``srt/layers/activation.py`` imports ``GeluAndMul`` and ``SiluAndMul`` from it at module
level on a CPU without AMX.  The CPU tests build no MLP, so neither is ever called."""


class _NotOnThisMachine:
    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__} of vllm is not available on this machine")


class GeluAndMul(_NotOnThisMachine):
    pass


class SiluAndMul(_NotOnThisMachine):
    pass
