"""What a file change of the upstream patch is: its series group and its role.

Every :class:`~codemods.upstream.edit.patchfile.FileChange` is made by the part of the
generator that knows why the file changes, and that part says so:

* the **group** is the patch of the series (:mod:`codemods.upstream.output.series`) the
  change belongs to: :data:`RUNTIME` (what the models build on), a model family's key
  (:mod:`codemods.upstream.output.model_families`; :data:`KIMI` for Kimi-Linear and
  Kimi-K3), :data:`VALIDATION` (server arguments), ``fix-<model>`` (:func:`fix_group`: one
  model file's separate fixes, cut off by the series), or :data:`TESTS` (the shipped tests,
  which the series spreads over the patches whose models they check);
* the **role** (:class:`Role`) says what the change does, for the commit messages, the PR
  description and the ``--branch`` file list.
"""

from __future__ import annotations

from enum import Enum

from codemods.catalog.methods import NATIVE
from codemods.upstream.output.model_families import family_of

RUNTIME = "runtime"
VALIDATION = "validation"
KIMI = "kimi"
TESTS = "tests"
#: Key prefix of the group holding one model file's separate fixes.
FIX = "fix-"


class Role(Enum):
    #: A model file whose capture hooks and forward are rewritten.
    MODEL = "model rewrite"
    #: A model file's separate fix (not about capture), cut off by the series.
    FIX = "separate fix"
    #: The helpers the patch ships, in SGLang's ``srt/layers/aux_hidden_states.py``.
    RUNTIME_MODULE = "shipped runtime module"
    #: ``AuxHiddenStatePacker.captured()``.
    PACKER = "packer accessor"
    #: A file of the CUDA-graph sizing path, which gains the aux entry (before 0.5.21).
    SIZING = "CUDA-graph sizing"
    #: A file of SGLang's own DSPARK sizing path, renamed for every capture method.
    SIZING_RENAME = "CUDA-graph sizing rename"
    #: ``runner/base_runner.py``, whose buffers for the dummy forwards of start-up (warm-up,
    #: autotune) gain the aux entry, sized by the same lookup as the graph buffers.
    WARMUP_SIZING = "dummy-forward buffer sizing"
    #: A model file relaying DSPARK captures itself, its entry renamed along the sizing path.
    RELAY_RENAME = f"{NATIVE.name} relay rename"
    #: The family test's stand-in models and builders.
    TEST_MODELS = "shipped test models"
    #: The family test (every patched forward on 2 and 3 stages).
    FAMILY_TEST = "shipped family test"
    #: The test that builds every patched causal LM through its real ``__init__``.
    INIT_TEST = "shipped init test"
    #: SGLang's server-argument validation.
    VALIDATION = "validation"
    #: ``configure_aux_hidden_state_capture``'s refusal of aux capture under PP for a
    #: model class that does not relay it.
    RUNTIME_GUARD = "runtime guard"
    #: The shipped test of the relay and of which model classes may use it.
    RELAY_TEST = "shipped relay test"


#: Roles of the shipped test files.
TEST_ROLES = (Role.TEST_MODELS, Role.FAMILY_TEST, Role.INIT_TEST)
#: Roles of the sizing path's changes that rename SGLang's DSPARK entry.
RENAME_ROLES = (Role.SIZING_RENAME, Role.RELAY_RENAME)


def model_group(stem: str) -> str:
    """The group of a rewritten model file ``<stem>.py``: its family's key."""
    return family_of(stem)[0]


def fix_group(stem: str) -> str:
    """The group of model file ``<stem>.py``'s separate fixes."""
    return f"{FIX}{stem}"


def is_model_group(group: str) -> bool:
    """``group`` is a model family's (not the runtime, validation, tests or a fix)."""
    return group not in (RUNTIME, VALIDATION, TESTS) and not group.startswith(FIX)
