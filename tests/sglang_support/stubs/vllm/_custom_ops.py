"""Stand-in for ``vllm._custom_ops`` (see ``vllm/__init__.py``): names only, no kernels."""


def awq_dequantize(*args, **kwargs):
    raise NotImplementedError("vllm kernels are not available in the CPU tests")


def rotary_embedding(*args, **kwargs):
    # Named by RotaryEmbedding.__init__ off CUDA; building a model needs the name only.
    raise NotImplementedError("vllm kernels are not available in the CPU tests")
