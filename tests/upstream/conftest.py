"""Fixtures the upstream tests share.

``glue``: the helpers the patch ships (``render_glue()``, the text put into SGLang's
``aux_hidden_states.py``) run as a module of their own, one per test module; it needs
nothing from SGLang.
"""

from __future__ import annotations

import sys
import types

import pytest

from codemods.upstream.edit.runtime import render_glue


@pytest.fixture(scope="module")
def glue(request):
    name = f"auxcap_test_glue_{request.module.__name__.rpartition('.')[2]}"
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up
    try:
        exec(compile(render_glue(), "pp_aux_capture.py", "exec"), module.__dict__)
        yield module
    finally:
        sys.modules.pop(name, None)
