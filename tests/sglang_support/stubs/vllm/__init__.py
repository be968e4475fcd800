"""Stand-in for ``vllm``: on a CPU-only machine one SGLang model module imports
``vllm._custom_ops.awq_dequantize`` at module level (a kernel the CPU tests never run).
Nothing else is provided, so other optional ``vllm`` imports still fail as without it."""
