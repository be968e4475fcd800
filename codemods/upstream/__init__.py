"""Generate the upstream SGLang patch that makes aux-hidden-state capture work under pipeline
parallelism, and hold the module that the patch adds to SGLang (``shipped/pp_aux_capture.py``)."""
