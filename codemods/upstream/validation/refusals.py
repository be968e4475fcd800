"""Why a served model class cannot capture aux hidden states under PP, for the validation.

The relaxed server-argument validation (``relax.py``) refuses EAGLE3 (and DFLASH, where the
release lets DFLASH run with PP) under PP for a model class that does not relay its
captures across pipeline stages, naming the class, the capture method and one of these
reasons:

* :data:`NOT_RELAYED`: its decoder stack is not patched to relay captures (the default,
  true of every class ``relays_pp_aux_capture`` refuses);
* :data:`TRANSFORMERS`: the server loads the Transformers backend's class, which has no
  capture hooks (decided where the hook resolves the class, from the architecture the
  model loader returns: ``--model-impl transformers``, or an architecture SGLang has no
  model for);
* :data:`REFUSES_PP`: its constructor refuses PP, so no capture hook of it ever runs with
  PP (the family plan's decision for the file: ``FileDecision.dead_returns`` names the
  causal-LM class whose construction asserts a single stage);
* :data:`NO_PP_SPLIT`: it never splits its layers across pipeline stages: no line of its
  model file, of the model files of its bases, or of the model files its file imports
  reads a PP rank, group, size or a stage's layer range;
* :data:`UNRESOLVED`: the decoder stack its capture hook sets up cannot be told from its
  source (``stacks.py``: a builder outside the model files, two different classes), so the
  validation cannot check that it relays and refuses it (``relax.py``).

The last two are facts of the tree, written into the hook as a table keyed by
architecture (:func:`refusal_reasons`), for the ``EntryClass`` members of the model files
with a capture hook that the family plan leaves alone; a member that inherits another
class's ``__init__`` decides by the first class along its method resolution order that
either refuses PP or defines its own ``__init__``.  A class the table does not name gets
:data:`NOT_RELAYED`, which is true of it, so an architecture the plan did not look at (a
model file the patch was not asked to cover) is never given a reason it may not have.
"""

from __future__ import annotations

import re
from pathlib import Path

from codemods.catalog.derive.index import ClassKey
from codemods.upstream.family.plan import OWNED_ELSEWHERE, FamilyPlan
from codemods.upstream.family.planning.decision import FileDecision
from codemods.upstream.validation.model_classes import MODELS_PACKAGE, ModelClasses

#: The reason of every class that does not relay a method's captures, unless it has one of
#: the others.
NOT_RELAYED = "its decoder stack is not patched to relay captures across pipeline stages"
#: The reason of the Transformers backend's classes.
TRANSFORMERS = "the Transformers backend has no capture hooks"
#: The reason of a class whose construction asserts a single pipeline stage.
REFUSES_PP = "its constructor refuses pipeline parallelism"
#: The reason of a class none of whose model code knows of pipeline stages.
NO_PP_SPLIT = "it never splits its layers across pipeline stages"
#: The reason of a class whose hook's decoder stack cannot be resolved from the source.
UNRESOLVED = "its capture hook's decoder stack cannot be resolved from its constructor"

#: Model code that reads a PP rank, group or size, or a stage's share of the layers.
_PP_SPLIT = re.compile(
    r"\b(?:start_layer|end_layer|pp_group|get_pp_group|PPMissingLayer|PPProxyTensors"
    r"|pp_rank|pp_size)\b"
)
#: Model code loaded by name at run time (another package's models): unknown.
_DYNAMIC = re.compile(r"\b(?:import_model_classes|import_module|__import__)\b")
_ABSOLUTE = re.compile(rf"\b({re.escape(MODELS_PACKAGE)}(?:\.\w+)+)")
_FROM_PACKAGE = re.compile(rf"\bfrom {re.escape(MODELS_PACKAGE)} import \(?([\w, ]+)")
_RELATIVE = re.compile(r"^\s*from \.(\w+)", re.MULTILINE)


def refusal_reasons(plan: FamilyPlan, classes: ModelClasses) -> dict[str, str]:
    """architecture -> :data:`REFUSES_PP` or :data:`NO_PP_SPLIT`, over the ``EntryClass``
    members of the files of ``plan`` it leaves alone (none of a patched file, or of a file
    another rewriter owns); ``classes``: the model files of ``plan``'s tree, parsed."""
    splits: dict[str, bool] = {}
    reasons: dict[str, str] = {}
    for decision in sorted(plan.decisions.values(), key=lambda d: d.file):
        if decision.patched or decision.file in OWNED_ELSEWHERE:
            continue
        module = classes.module(decision.file)
        for entry in module.entry if module is not None else []:
            key = classes.resolve(decision.file, entry)
            if key is None:
                continue
            reason = _reason(classes, key, decision, splits)
            if reason is not None:
                # The registry names an architecture by its class's ``__name__``.
                reasons.setdefault(key[1], reason)
    return dict(sorted(reasons.items()))


def _reason(
    classes: ModelClasses, key: ClassKey, decision: FileDecision, splits: dict[str, bool]
) -> str | None:
    refusing = {(decision.file, hook.split(".", 1)[0]) for hook in decision.dead_returns}
    order = classes.mro(key) or []
    for cls in order:
        if cls in refusing:
            return REFUSES_PP
        node = classes.classdef(cls)
        if node is None or any(
            getattr(statement, "name", None) == "__init__" for statement in node.body
        ):
            break
    files = {cls[0] for cls in order if classes.classdef(cls) is not None}
    if files and not any(_splits(classes, file, splits) for file in files):
        return NO_PP_SPLIT
    return None


def _splits(classes: ModelClasses, file: str, splits: dict[str, bool]) -> bool:
    """Whether the model file ``file``, or a model file it names, directly or through the
    files it names, reads a PP rank, group or size, or a stage's layer range, or loads
    model code dynamically (memoised in ``splits``)."""
    if file not in splits:
        seen: set[str] = set()
        pending = [file]
        found = False
        while pending and not found:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            text = _text(classes.models_dir / current)
            found = text is None or _PP_SPLIT.search(text) is not None
            found = found or _DYNAMIC.search(text or "") is not None
            pending += [f for f in _named_files(classes, current, text or "") if f not in seen]
        splits[file] = found
    return splits[file]


def _named_files(classes: ModelClasses, file: str, text: str) -> list[str]:
    """The model files ``file`` imports from, wherever in it (a function may import the
    language model it builds)."""
    package = f"{MODELS_PACKAGE}.{file.removesuffix('.py').replace('/', '.')}".rsplit(".", 1)[0]
    dotted = [m.group(1) for m in _ABSOLUTE.finditer(text)]
    for m in _FROM_PACKAGE.finditer(text):
        dotted += [f"{MODELS_PACKAGE}.{name.strip()}" for name in m.group(1).split(",")]
    for m in _RELATIVE.finditer(text):
        dotted.append(f"{package}.{m.group(1)}")
    found = []
    for name in dotted:
        parts = name.split(".")
        # The longest prefix that is a model file: ``models.x.Class`` names ``x.py``.
        for end in range(len(parts), len(MODELS_PACKAGE.split(".")), -1):
            target = classes._file_of(".".join(parts[:end]))
            if target is not None:
                found.append(target)
                break
    return found


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None  # unknown: do not claim the model never splits
