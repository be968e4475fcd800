"""Stand-in for ``vllm``: on a CPU-only machine one SGLang model module imports
``vllm._custom_ops.awq_dequantize`` at module level (a kernel the CPU tests never run), and
SGLang 0.5.3 imports vllm's ``SiluAndMul``/``GeluAndMul`` and ``RMSNorm``/``GemmaRMSNorm``
(``model_executor.layers.activation``, ``.layernorm``) at module level on a CPU without AMX
(classes the CPU tests never build).  Nothing else is provided, so other optional ``vllm``
imports (0.5.3's quantization methods among them) still fail as without it."""
