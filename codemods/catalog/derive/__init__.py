"""Derive the capture-hook facts of SGLang releases from their model files (static analysis).

For every capture-hook setter (``set_<name>_layers_to_capture``) defined on a class in
``sglang/srt/models/**/*.py`` the analysis walks the setter body twice, the way it would run:

* **under PP** (pipeline world size 2, once as a non-last and once as the last rank, with a
  list of layer ids): the first ``raise`` reached (or ``assert`` that fails) gives
  ``pp: "raises"`` with the exception type and message; a ``return`` reached, or work skipped
  by a rank test, on a non-last rank gives ``pp: "skips_non_last_ranks"`` (the captures of
  that rank are silently lost); a setter that runs the same on every rank gives
  ``pp: "runs"``;
* **with ``None``** (no PP, last rank): the first ``raise`` reached gives ``none: "rejected"``
  with type and message; a completed branch taken because the ids are ``None`` gives
  ``none: "default_layers"``; a ``return`` there gives ``none: "ignored"``; no test of the ids
  at all gives ``none: "unchecked"`` (``None`` is used as a list).

Tests the walk cannot decide (``if self.language_model is None``, a config flag) are taken as
false, so only the ordinary path of the setter counts. A call of a setter on ``self`` or on
``self.<attr>`` (where a method assigns ``self.<attr>`` an instance of a model class, directly,
through a factory method or from a module-level table of classes) is followed into the
delegate's setter, across files; a delegate that cannot be resolved gives ``"unresolved"``.
``models`` lists the ``EntryClass`` classes (the architectures SGLang registers) whose method
resolution reaches the setter, or whose ``__getattr__`` forwards to an instance that has it.

The modules, in the order they build on each other: :mod:`~.index` (the model modules of a
tree, class lookup), :mod:`~.walk` (one setter walked), :mod:`~.facts` (every setter's facts,
delegation followed), :mod:`~.datafile` (the releases merged into the data file, its text) and
:mod:`~.cli` (the command line of ``scripts/derive_hook_facts.py``).  Only the standard library
is used.
"""

from __future__ import annotations

from codemods.catalog.derive.datafile import DATA_FILE, FORMAT, RELEASES, build, dumps, merge
from codemods.catalog.derive.facts import Analyser, derive, derive_release
from codemods.catalog.derive.index import MODELS_DIR, ClassKey, HookFactsError, ModelIndex
from codemods.catalog.derive.walk import HOOK_RE

__all__ = [
    "DATA_FILE",
    "FORMAT",
    "HOOK_RE",
    "MODELS_DIR",
    "RELEASES",
    "Analyser",
    "ClassKey",
    "HookFactsError",
    "ModelIndex",
    "build",
    "derive",
    "derive_release",
    "dumps",
    "merge",
]
