"""Pick, per SGLang tree, the one form of the shipped tests' code that the tree's release
needs, so that the test a patch adds holds no code for other releases.

A shipped template marks the places where releases differ::

    # @@if FEATURE
    ...the code for a tree that has FEATURE...
    # @@else FEATURE
    ...the code for one that has not...
    # @@end FEATURE

(``@@else`` is optional; the markers may be indented).  :func:`select` keeps the branch
the tree calls for and drops the markers.  :func:`tree_features` says which features a tree
has, read from its source text (never imported): ``FEATURES`` names them.
"""

from __future__ import annotations

import re

from codemods.upstream.tree.sglang_tree import SGLangTree

_MARKER = re.compile(r"^\s*# @@(if|else|end) ([a-z_]+)\s*$")

#: feature -> (module, pattern its source matches when the tree has the feature).
FEATURES = {
    # initialize_model_parallel reads the published topology (0.5.21+) instead of
    # taking the sizes as arguments.
    "published_topology": (
        "sglang.srt.distributed.parallel_state",
        r"^\s+pipeline_model_parallel_size: int",
    ),
    # Server args are published in the runtime context (0.5.20+).
    "published_server_args": (
        "sglang.srt.runtime_context",
        r"^def publish\(",
    ),
    # The activation layers build on any CPU (0.5.9+) instead of taking vllm's off
    # CUDA.
    "native_cpu_activation": (
        "sglang.srt.layers.activation",
        r"^\s*from vllm\.model_executor\.layers\.activation import",
    ),
    # The PP proxy buffers are allocated by a public function (0.5.22+).
    "public_allocate": (
        "sglang.srt.model_executor.runner_utils.buffers",
        r"^def allocate_pp_proxy_tensors\(",
    ),
    # SGLang's own stand-in for sgl_kernel in CPU tests (0.5.10+).
    "stub_sgl_kernel": (
        "sglang.test.test_utils",
        r"^def maybe_stub_sgl_kernel\(",
    ),
    # The server-arg check of speculative decoding with PP (0.5.21+).
    "pp_compat_check": (
        "sglang.srt.arg_groups.validation_hook",
        r"^def check_pipeline_parallel_compat\(",
    ),
    # The runner configures aux capture in a function of its own (0.5.16+), where the
    # runtime guard goes ...
    "setup_guard": (
        "sglang.srt.model_executor.model_runner_components.attention_backend_setup",
        r"^def configure_aux_hidden_state_capture\(",
    ),
    # ... or in a method of ModelRunner (0.5.11-0.5.15).
    "runner_capture_method": (
        "sglang.srt.model_executor.model_runner",
        r"^    def init_aux_hidden_state_capture\(",
    ),
}
#: Features whose pattern tells that the tree LACKS the feature.
_INVERTED = {"published_topology", "native_cpu_activation"}


class VariantError(ValueError):
    """A template's markers do not nest or name no known feature."""


def tree_features(tree: SGLangTree) -> dict[str, bool]:
    """``feature -> whether the tree has it`` for every name of ``FEATURES``."""
    found = {}
    for name, (module, pattern) in FEATURES.items():
        text = tree.read_text(tree.module_path(module)) or ""
        matched = re.search(pattern, text, re.MULTILINE | re.DOTALL) is not None
        found[name] = (not matched) if name in _INVERTED else matched
    return found


def select(template: str, features: dict[str, bool]) -> str:
    """``template`` with, for each marked place, the branch ``features`` calls for."""
    out: list[str] = []
    # Per open marker: (feature, whether its current branch is kept).
    stack: list[tuple[str, bool]] = []
    for line in template.splitlines(keepends=True):
        marker = _MARKER.match(line)
        if marker is None:
            if all(kept for _, kept in stack):
                out.append(line)
            continue
        kind, name = marker.groups()
        if name not in features:
            raise VariantError(f"unknown feature in template marker: {line.strip()}")
        if kind == "if":
            stack.append((name, features[name]))
        elif not stack or stack[-1][0] != name:
            raise VariantError(f"unmatched template marker: {line.strip()}")
        elif kind == "else":
            stack[-1] = (name, not features[name])
        else:
            stack.pop()
    if stack:
        raise VariantError(f"template marker left open: {stack[-1][0]}")
    return "".join(out)
