"""The shipped tests' utilities module (``sglang.test.pp_aux_capture_family_models``) as
the patch ships it, for this project's own checks.

``shipped_test_utils()`` renders it from ``codemods/upstream/shipped/`` (the newest
release's form) and loads it once, by its text: an unpatched release has no such module
and a process without SGLang can load it all the same (it needs torch only, SGLang and
transformers only when a tiny config is built).  The checks that build the records of the
server-argument validation (``validation_check``) and the tiny configs of the patched
causal LMs (``width_check``) take them from here, so they are those of the shipped tests.
"""

from __future__ import annotations

import functools
from types import ModuleType

from codemods.upstream.validation.shipped_tests import TEST_MODELS_SOURCE, render_test_utils


@functools.cache
def shipped_test_utils() -> ModuleType:
    module = ModuleType("pp_aux_capture_family_models")
    exec(compile(render_test_utils(), str(TEST_MODELS_SOURCE), "exec"), module.__dict__)
    return module
