"""Stand-in for ``vllm.model_executor.layers``: only ``activation`` and ``layernorm``."""
