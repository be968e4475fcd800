"""Generate the upstream SGLang patch that makes aux-hidden-state capture work under pipeline
parallelism, and hold the helpers the patch puts into SGLang (``shipped/pp_aux_capture.py``)."""
