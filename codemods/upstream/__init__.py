"""The upstream SGLang patch: model-file rewriters and the PP aux transport they use."""
