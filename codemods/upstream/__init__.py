"""Generate the upstream SGLang patch that makes aux-hidden-state capture work under pipeline
parallelism, and hold the PP transport module that the patch adds to SGLang."""
