"""Stand-in for ``vllm.model_executor``: only the two ``layers`` modules SGLang 0.5.3 imports."""
