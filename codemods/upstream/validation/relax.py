"""Relax SGLang's server-argument validation where the patch makes PP capture safe.

SGLang refuses speculative decoding with pipeline parallelism before any model code runs
(``srt/arg_groups/validation_hook.py``).  From 0.5.21 its ``check_pipeline_parallel_compat``
lets EAGLE (not multi-layer) through on two paths: the aggregate PP relay under
``SGLANG_ENABLE_PP_SPEC`` (the EAGLE worker tail-drafts on the last stage) and PD prefill
(``disaggregation-mode=prefill``); DSPARK only on PD prefill.  EAGLE3 and DFLASH are refused,
and 0.5.23's ``handle_aux_hidden_state_capture`` refuses ``--enable-return-aux-hidden-states``
with PP, saying that the capture hooks only see the last stage's layers.

Once a model file carries its captures across stages (the capture-hook family patch), the
speculative refusals are no longer needed for that model.  This module edits the hook so
that:

* EAGLE3 follows EAGLE's paths (same EAGLE worker, same multi-layer and relay conditions),
  for the architectures whose EAGLE3 hook the patch rewrote;
* DFLASH follows DSPARK's path (PD prefill, not ``SGLANG_ENABLE_PP_SPEC``: the aggregate relay
  carries an EAGLE-shaped tree only), for the architectures whose DFLASH hook it rewrote,
  but only where the release itself lets DFLASH run with PP: :func:`dflash_refusal` reads
  the tree's PP refusals (``reachability.py``).  0.5.21-0.5.23 refuse it in
  ``speculative_hook._handle_dflash`` (``if cfg.pp_size != 1: raise ValueError(...)``; the
  DFLASH worker drafts on the last stage only), so there DFLASH stays refused here too: a
  branch that accepted it could never run;
* ``--enable-return-aux-hidden-states`` with PP stays refused for every model, relaying or
  not, and only its message changes: the captures now reach the last stage, but only the
  first pipeline rank returns output to the detokenizer, and what the last rank relays
  back to it (``scheduler_pp_mixin._pp_prepare_tensor_dict``: token ids, logprobs,
  sampling-mask and speculative fields) carries no hidden states (``managers/utils.py``'s
  ``get_logprob_from_pp_outputs`` rebuilds the output with ``hidden_states=None``), so the
  states could not reach the client: accepting the flag would turn a startup error into
  silently empty output.  The old reason (the hooks only see the last stage's layers) is
  no longer true of a relaying model, so the message gives this one (:data:`AUX_FLAG_MESSAGE`).

On 0.5.21-0.5.23 the rewritten DFLASH hooks are still reached by the server, through DSPARK:
``configure_aux_hidden_state_capture`` calls ``set_dflash_layers_to_capture`` on a DSPARK
target without ``set_dspark_layers_to_capture``, and DSPARK passes with PP on PD prefill
(``reachability.dspark_dflash_fallback``).

Every other refusal stays as it is.  Before, the hook had no notion of a model that
relays its captures.  After, a check asks whether the model class the server will load
relays ``method``, and refuses otherwise with a ``ValueError`` that names the class, the
method and why (:mod:`.refusals`)::

    def _check_pp_aux_capture_supported(cfg: Any, method: str) -> None:
        ...
        if arch in _PP_AUX_RELAY_METHODS and ...:
            name, relays = arch, method in _PP_AUX_RELAY_METHODS[arch]
        else:
            ...
            model_cls, arch = get_model_architecture(model_config)
            name, relays = model_cls.__name__, relays_pp_aux_capture(model_cls, method)
        if relays:
            return
        ...
        raise ValueError(
            f"{name} cannot capture {method} aux hidden states with "
            f"--pp-size {cfg.pp_size}: {reason}"
        )

for instance ``Qwen3NextForCausalLM cannot capture EAGLE3 aux hidden states with --pp-size
2: its constructor refuses pipeline parallelism``.  The reason is the Transformers
backend's where the loader resolves to it, else the one the generator wrote into the hook
for that architecture (``_PP_AUX_CAPTURE_REFUSALS``: the constructor refuses PP, or the
model never splits its layers, from the family plan: :func:`.refusals.refusal_reasons`),
else that its decoder stack is not patched to relay captures.  The check needs no model
code for the architectures the patch makes relay: the hook holds them with the methods
each relays (``_PP_AUX_RELAY_METHODS``: :func:`patched_architectures`, the answer
``relays_pp_aux_capture`` gives on the patched tree, which
``test_upstream_validation_architectures.py`` checks), and answers from it for the served
architecture (``architectures[0]`` of the HF config) with ``--model-impl`` ``auto`` or
``sglang``, no external model package and no disabled model module.  Any other
architecture is resolved the way the model loader resolves it (``get_model_architecture``:
``--model-impl`` and the architecture overrides included, so a model served through the
Transformers backend is refused) and its class asked, which imports the model registry,
and with it every model (several seconds at launch).

The family patch declares ``pp_aux_relay_methods`` in the body of each decoder-stack class
whose ``forward`` it rewrites, and of each causal-LM class whose hooks it rewrites
(``family/proxy_width.py``).  The runtime guard (``runtime_guard.py``) asks, right after a
hook ran, the stack the hook gave a relay to, so a wrapper that keeps a patched stack
passes and a class that inherits a patched hook but builds another stack does not; where
the hook gave no stack a relay it asks the class (``relays_pp_aux_capture``).  The table
gives the same answers without building the model: the architectures it lists
(:func:`patched_architectures`) are the ``EntryClass`` members of every model file whose
hook, read in the files as the patch leaves them, sets up stacks whose ``forward`` is a
declaring class's (:mod:`.stacks` resolves the class each ``self.<attr>`` holds from the
constructors the member runs, and follows hooks that delegate to another causal LM:
``KimiK25ForConditionalGeneration`` to ``DeepseekV3ForCausalLM``); a member whose hook
sets up no stack counts by the class rule.  A member whose stack cannot be resolved is
refused with its own reason (:data:`.refusals.UNRESOLVED`).  Where the runner configures
a DSPARK target without a DSPARK hook through its DFLASH hook (0.5.16+), such a class
counts for DSPARK where it counts for DFLASH, as the runtime guard (which asks about
DFLASH there) says.

Every release before 0.5.21 refuses every speculative algorithm with PP (``server_args.py``'s
``assert ... self.speculative_algorithm is None`` up to 0.5.18, ``validation_hook.py`` from
0.5.19, on GPU only in 0.5.20): there is no EAGLE path to follow, so their validation is left alone, and
:func:`validation_changes` returns only a note naming that refusal (:func:`unrelaxed_note`).
The runtime guard still refuses a model that does not relay wherever the runner configures
the capture, the paths that bypass the server (``ModelRunner`` driven directly) included.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field

from codemods.catalog.derive.index import ClassKey
from codemods.catalog.methods import (
    ADMITTED,
    EAGLE_PATH,
    FALLBACK,
    FALLBACK_TARGET,
    NATIVE,
    PD_PREFILL,
    RELAYED,
    either,
)
from codemods.upstream.edit.change_kinds import VALIDATION, Role
from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.family.plan import FamilyPlan
from codemods.upstream.family.proxy_width import HOOK_METHODS
from codemods.upstream.tree.reachability import (
    Refusal,
    dspark_dflash_fallback,
    refusal_of,
    refuses_every_algorithm,
    tree_refusals,
)
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.validation import refusals, stacks
from codemods.upstream.validation.model_classes import ModelClasses

MODULE = "sglang.srt.arg_groups.validation_hook"
HELPER_NAME = "_check_pp_aux_capture_supported"
#: The hook's tables: relaying architecture -> its methods, architecture -> reason.
METHODS_TABLE = "_PP_AUX_RELAY_METHODS"
REASONS_TABLE = "_PP_AUX_CAPTURE_REFUSALS"


class ValidationShapeError(ValueError):
    """The validation hook does not have the shape this module edits."""


@dataclass(frozen=True)
class ValidationResult:
    change: FileChange | None
    #: architecture -> the capture conventions it relays once patched (reported, by
    #: :func:`patched_architectures`; which of them the server accepts with PP is the
    #: release's and the hook's business: the hook itself asks the model class)
    architectures: dict[str, tuple[str, ...]]
    notes: tuple[str, ...] = ()
    #: The release's refusal of DFLASH with PP that keeps DFLASH refused (None: DFLASH is
    #: relaxed like EAGLE3, or no patched architecture relays DFLASH captures).
    dflash_refused: Refusal | None = None
    #: File name -> text of the shipped relay test, where the patch relaxes the validation
    #: and guards the runtime (``part.py``).
    tests: dict[str, str] = field(default_factory=dict)


_EAGLE_CHECK = """\
    elif cfg.speculative_algorithm is not None:
        assert (
            cfg.speculative_algorithm.upper() == "EAGLE"
            and not cfg.enable_multi_layer_eagle
        ), (
"""

#: The branch of a method admitted on PD prefill (:data:`~codemods.catalog.methods.PD_PREFILL`),
#: before EAGLE's; ``{method}``: its name, ``{native}``: the natively relayed method's.
_PD_PREFILL_BRANCH = """\
    elif (
        cfg.speculative_algorithm is not None
        and cfg.speculative_algorithm.upper() == "{method}"
    ):
        # The target relays {method}'s aux hidden states to the last stage; like {native},
        # the draft runs there on PD prefill.
        {helper}(cfg, "{method}")
        assert cfg.disaggregation_mode == "prefill", (
            "Pipeline parallel {method} requires disaggregation-mode=prefill"
        )
        assert not envs.SGLANG_ENABLE_PP_SPEC.get(), (
            "SGLANG_ENABLE_PP_SPEC does not support {method} PD prefill"
        )
"""

#: ``{eagle}``: the method admitted on EAGLE's path (:data:`~codemods.catalog.methods.EAGLE_PATH`).
_EAGLE_CHECK_NEW = """\
    elif cfg.speculative_algorithm is not None:
        # {eagle} runs on the EAGLE worker; it needs the aux hidden states of every
        # stage, which the target model relays to the last stage.
        algorithm = cfg.speculative_algorithm.upper()
        if algorithm == "{eagle}":
            {helper}(cfg, "{eagle}")
        assert algorithm in ("EAGLE", "{eagle}") and not cfg.enable_multi_layer_eagle, (
"""

_EAGLE_MESSAGE = """\
            "Pipeline parallelism currently only supports EAGLE "
            "(non-multi-layer) speculative decoding"
"""

#: ``{admitted}``: the methods admitted, on EAGLE's path and on PD prefill.
_EAGLE_MESSAGE_NEW = """\
            "Pipeline parallelism currently only supports EAGLE "
            "(non-multi-layer) speculative decoding, and {admitted} for "
            "models that relay aux hidden states across pipeline stages"
"""

#: The message where the methods of PD prefill stay refused with PP.
_EAGLE_MESSAGE_EAGLE_ONLY = """\
            "Pipeline parallelism currently only supports EAGLE "
            "(non-multi-layer) speculative decoding, and {eagle} for models that "
            "relay aux hidden states across pipeline stages"
"""

_AUX_FLAG_CHECK = """\
    if cfg.pp_size != 1:
        raise ValueError(
            "--enable-return-aux-hidden-states only supports pp_size == 1: the "
            "capture hooks only see the layers on the last pipeline rank."
        )
"""

#: The same refusal, for every model, with the reason that holds once the patch relays
#: captures to the last stage: the states never reach the client from there.
_AUX_FLAG_CHECK_NEW = """\
    if cfg.pp_size != 1:
        # The PP output relay (_pp_prepare_tensor_dict) carries no hidden states:
        # get_logprob_from_pp_outputs rebuilds the first rank's output with
        # hidden_states=None.
        raise ValueError(
            "--enable-return-aux-hidden-states only supports pp_size == 1: only "
            "the first pipeline rank returns output to the detokenizer, and the "
            "outputs the last rank relays back to it carry no hidden states, so "
            "the captured aux hidden states cannot reach the client."
        )
"""


def _message_of(check: str) -> str:
    """The message of the ``raise`` in ``check`` (its string literals joined)."""
    statement = ast.parse(textwrap.dedent(check)).body[0]
    assert isinstance(statement, ast.If) and isinstance(statement.body[-1], ast.Raise)
    call = statement.body[-1].exc
    assert isinstance(call, ast.Call) and isinstance(call.args[0], ast.Constant)
    return str(call.args[0].value)


#: The reworded refusal, and its reason (what follows ``only supports pp_size == 1:``).
AUX_FLAG_MESSAGE = _message_of(_AUX_FLAG_CHECK_NEW)
AUX_FLAG_REASON = AUX_FLAG_MESSAGE.split(": ", 1)[1].removesuffix(".")


def rewords_aux_flag(old: str | None, new: str) -> bool:
    """``new`` keeps the refusal of ``--enable-return-aux-hidden-states`` with PP that
    ``old`` has, with :data:`AUX_FLAG_MESSAGE` (the change :func:`relax` makes on 0.5.23+)."""
    return _AUX_FLAG_CHECK in (old or "") and _AUX_FLAG_CHECK_NEW in new


_ANCHOR = "def check_pipeline_parallel_compat(cfg: Any) -> None:\n"


def _table(name: str, rows: dict[str, str]) -> str:
    """``name = {...}``, one row a line (black); ``rows``: key -> value's source."""
    if not rows:
        return f"{name} = {{}}\n"
    lines = "".join(f'    "{key}": {value},\n' for key, value in rows.items())
    return f"{name} = {{\n{lines}}}\n"


def _constant(name: str, text: str) -> str:
    """``name = "text"``, in parentheses on a line of its own where too long (black)."""
    line = f'{name} = "{text}"'
    return f"{line}\n" if len(line) <= 88 else f'{name} = (\n    "{text}"\n)\n'


def render_helper(relaying: dict[str, tuple[str, ...]], reasons: dict[str, str]) -> str:
    """The helpers inserted before ``check_pipeline_parallel_compat`` (black): the
    architectures that relay and their methods (``relaying``), the reasons of those that
    cannot for a reason of their own (``reasons``: values of :mod:`.refusals`), and the
    check that reads them."""
    names = {
        refusals.REFUSES_PP: "_REFUSES_PP",
        refusals.NO_PP_SPLIT: "_NO_PP_SPLIT",
        refusals.UNRESOLVED: "_UNRESOLVED",
    }
    unresolved = (
        _constant("_UNRESOLVED", refusals.UNRESOLVED)
        if refusals.UNRESOLVED in reasons.values()
        else ""
    )
    methods = {
        arch: "(" + ", ".join(f'"{m}"' for m in found) + ("," if len(found) == 1 else "") + ")"
        for arch, found in relaying.items()
    }
    return f'''\
# Aux hidden state capture under pipeline parallelism ({", ".join(RELAYED)}).
# The architectures whose model class relays the captures of every stage to the last
# one, and the methods it relays, as check_pp_aux_capture answers once its hook ran
# (the pp_aux_relay_methods of the decoder stack the hook sets up, else of the class;
# {FALLBACK.name} also where it has no {FALLBACK.name} hook and relays
# {FALLBACK_TARGET.name}, whose hook the runner calls for {FALLBACK.name} then): the check reads them here rather than import
# the model registry, which imports every model.
{_table(METHODS_TABLE, methods)}
# Why a model class cannot capture aux hidden states under pipeline parallelism.
{_constant("_NOT_RELAYED", refusals.NOT_RELAYED)}\
{_constant("_TRANSFORMERS", refusals.TRANSFORMERS)}\
{_constant("_REFUSES_PP", refusals.REFUSES_PP)}\
{_constant("_NO_PP_SPLIT", refusals.NO_PP_SPLIT)}\
{unresolved}\
# The architectures with a reason of their own; every other one that does not relay
# gets _NOT_RELAYED.
{_table(REASONS_TABLE, {a: names[r] for a, r in reasons.items()})}

def {HELPER_NAME}(cfg: Any, method: str) -> None:
    """Refuse ``method`` ({either(RELAYED)}) under pipeline parallelism, naming
    the model class and why, unless the class the server loads relays its aux hidden
    states from every pipeline stage to the last one.  An architecture of
    {METHODS_TABLE} served by SGLang's own model class is answered from the table;
    any other is resolved as the model loader resolves it (--model-impl and the
    architecture overrides included)."""
    from sglang.srt.arg_groups.model_override_base import model_config_of

    model_config = model_config_of(cfg)
    architectures = getattr(model_config.hf_config, "architectures", None) or []
    arch = architectures[0] if architectures else None
    if (
        arch in {METHODS_TABLE}
        and model_config.model_impl in ("auto", "sglang")
        and not envs.SGLANG_EXTERNAL_MODEL_PACKAGE.get()
        and not envs.SGLANG_DISABLED_MODEL_ARCHS.get()
    ):
        name, relays = arch, method in {METHODS_TABLE}[arch]
    else:
        from {GLUE_MODULE} import relays_pp_aux_capture
        from sglang.srt.model_loader.utils import get_model_architecture

        model_cls, arch = get_model_architecture(model_config)
        name, relays = model_cls.__name__, relays_pp_aux_capture(model_cls, method)
    if relays:
        return
    if arch.startswith("Transformers"):
        reason = _TRANSFORMERS
    else:
        reason = {REASONS_TABLE}.get(arch, _NOT_RELAYED)
    raise ValueError(
        f"{{name}} cannot capture {{method}} aux hidden states with "
        f"--pp-size {{cfg.pp_size}}: {{reason}}"
    )


'''


def relax(
    source: str,
    filename: str,
    dflash: bool = True,
    relaying: dict[str, tuple[str, ...]] | None = None,
    reasons: dict[str, str] | None = None,
) -> str:
    """``validation_hook.py`` text with the refusals relaxed for the models that declare
    ``pp_aux_relay_methods``.

    ``relaying``: architecture -> the methods it relays (:func:`patched_architectures`),
    which the hook reads instead of importing the model registry; ``reasons``: architecture -> why it cannot capture
    under PP, where not :data:`.refusals.NOT_RELAYED` (:func:`.refusals.refusal_reasons`).
    ``dflash``: add the branch of each method admitted on PD prefill (DFLASH,
    :data:`~codemods.catalog.methods.PD_PREFILL`) to ``check_pipeline_parallel_compat``
    (False where the release refuses it with PP elsewhere: it then stays refused there).  Raises
    :class:`ValidationShapeError` (naming ``filename``) when the hook lacks the
    EAGLE branch of ``check_pipeline_parallel_compat``.  The refusal of
    ``--enable-return-aux-hidden-states`` with PP (0.5.23+) stays for every model; only its
    message changes, to the reason that still holds (:data:`AUX_FLAG_REASON`).
    """
    if f"def {HELPER_NAME}(" in source:
        return source
    for needle, what in (
        (_ANCHOR, "check_pipeline_parallel_compat"),
        (_EAGLE_CHECK, "its EAGLE-only speculative check"),
        (_EAGLE_MESSAGE, "its EAGLE-only message"),
    ):
        if source.count(needle) != 1:
            raise ValidationShapeError(
                f"{filename}: cannot relax PP validation: {what} not found once"
            )
    helpers = render_helper(relaying or {}, reasons or {})
    text = source.replace(_ANCHOR, helpers + _ANCHOR)
    names = {"helper": HELPER_NAME, "eagle": EAGLE_PATH.name, "native": NATIVE.name}
    prefill = PD_PREFILL if dflash else ()
    branches = "".join(_PD_PREFILL_BRANCH.format(**names, method=m.name) for m in prefill)
    text = text.replace(_EAGLE_CHECK, branches + _EAGLE_CHECK_NEW.format(**names))
    admitted = either([EAGLE_PATH.name, *(m.name for m in prefill)])
    message = _EAGLE_MESSAGE_NEW if prefill else _EAGLE_MESSAGE_EAGLE_ONLY
    text = text.replace(_EAGLE_MESSAGE, message.format(**names, admitted=admitted))
    if text.count(_AUX_FLAG_CHECK) == 1:
        text = text.replace(_AUX_FLAG_CHECK, _AUX_FLAG_CHECK_NEW)
    return text


#: What a class that does not declare the relay may not define, besides the method's hook,
#: for its declaration to be inherited (``relays_pp_aux_capture``).
_KEPT = ("__init__", "forward")


def _defines(node: ast.ClassDef) -> set[str]:
    """The names a class body binds: its methods and assigned attributes."""
    names = set()
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign):
            names.update(t.id for t in statement.targets if isinstance(t, ast.Name))
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            names.add(statement.target.id)
    return names


def _has_hook(classes: ModelClasses, key: ClassKey, hook: str) -> bool:
    """Whether the class ``key`` defines ``hook`` or inherits it from a model file."""
    return any(
        (node := classes.classdef(cls)) is not None and hook in _defines(node)
        for cls in classes.mro(key) or []
    )


def _relays(
    classes: ModelClasses,
    key: ClassKey,
    method: str,
    declared: dict[ClassKey, set[str]],
    fallback: bool = False,
) -> bool:
    """What the runtime guard answers for the class ``key`` once the patch is applied, right
    after ``method``'s hook ran under PP.  Where the hook (through the hooks it delegates
    to) gives decoder stacks a relay, the class relays where each stack's ``forward`` is
    that of a class declaring ``method`` (:mod:`.stacks`); where the stacks cannot be told
    from the source, it does not.  Where it gives none, the class itself is asked, as
    ``relays_pp_aux_capture`` does: along its method resolution order, the first class that
    declares the relay decides; one that defines ``__init__``, ``forward`` or the method's
    hook before it, or a base outside the model files (whose body is not read), means no.
    ``fallback``: the runner configures a DSPARK target without a DSPARK hook through its
    DFLASH hook, so such a class is asked about DFLASH for DSPARK."""
    if (
        fallback
        and method == FALLBACK.name
        and not _has_hook(classes, key, FALLBACK.hook)
        and _has_hook(classes, key, FALLBACK_TARGET.hook)
    ):
        method = FALLBACK_TARGET.name
    hook = f"set_{method.lower()}_layers_to_capture"
    if not _has_hook(classes, key, hook):
        return False
    found = stacks.hook_stacks(classes, key, hook)
    if found is None:
        return False
    if found:
        return all(stacks.stack_relays(classes, stack, method) for stack in found)
    for cls in classes.mro(key) or []:
        if cls in declared:
            return method in declared[cls]
        node = classes.classdef(cls)
        if node is None or _defines(node) & {*_KEPT, hook}:
            return False
    return False


def patched_architectures(
    plan: FamilyPlan, classes: ModelClasses | None = None, fallback: bool = False
) -> dict[str, tuple[str, ...]]:
    """architecture -> conventions, over the ``EntryClass`` members of every model file of
    ``plan``'s tree, read as the patch leaves them (``classes``: its model files, parsed
    with the patched texts, where already at hand).

    An ``EntryClass`` member counts for a method when the runtime guard would admit it
    right after the method's hook ran (:func:`_relays`): the decoder stack its hook sets up
    is one whose ``forward`` the patch declares for the method (the patch declares
    ``pp_aux_relay_methods`` on each stack class whose forward it rewrites), resolved from
    the constructors the class runs (:mod:`.stacks`); a class whose hook sets up no stack
    is asked by the declaration of the causal-LM classes with rewritten hooks, as
    ``relays_pp_aux_capture`` does.  With ``fallback`` (the tree's runner configures a
    DSPARK target without a DSPARK hook through its DFLASH hook:
    ``reachability.dspark_dflash_fallback``), a member without a DSPARK hook counts for
    DSPARK where it counts for DFLASH, as the shipped rule says.
    """
    declared: dict[ClassKey, set[str]] = {}
    for decision in plan.decisions.values():
        if decision.patched:
            for outer, _stack, hooks in decision.cases:
                methods = {HOOK_METHODS[hook] for hook in hooks if hook in HOOK_METHODS}
                declared.setdefault((decision.file, outer), set()).update(methods)
    classes = classes or ModelClasses(plan.models_dir, plan.rewritten())
    every = {m for methods in declared.values() for m in methods}
    for file in plan.forward_edits:
        for _stack, stack_methods in plan.stack_declarations(file):
            every.update(stack_methods)
    if fallback and FALLBACK_TARGET.name in every:
        every.add(FALLBACK.name)
    result: dict[str, set[str]] = {}
    for file in classes.entry_files():
        module = classes.module(file)
        for entry in module.entry if module is not None else []:
            key = classes.resolve(file, entry)
            methods = {
                m
                for m in sorted(every)
                if key is not None and _relays(classes, key, m, declared, fallback)
            }
            if key is not None and methods:
                # The registry names an architecture by its class's ``__name__``.
                result.setdefault(key[1], set()).update(methods)
    return {arch: tuple(sorted(methods)) for arch, methods in sorted(result.items())}


def validation_changes(tree: SGLangTree, plan: FamilyPlan | None) -> ValidationResult:
    """The change to ``validation_hook.py`` for the models ``plan`` patches (none when it
    patches none with an EAGLE3/DFLASH/DSPARK hook, or the release has no PP EAGLE path)."""
    if plan is None:
        return ValidationResult(None, {})
    classes = ModelClasses(plan.models_dir, plan.rewritten())
    fallback = dspark_dflash_fallback(tree) is not None
    architectures = patched_architectures(plan, classes, fallback)
    if not architectures:
        return ValidationResult(None, {})
    refusal_reasons = refusals.refusal_reasons(plan, classes)
    path = tree.module_path(MODULE)
    source = tree.read_text(path)
    if source is None or _ANCHOR not in source:
        return ValidationResult(None, architectures, (unrelaxed_note(tree, path),))
    prefill = {m.name for m in PD_PREFILL}
    refused = (
        dflash_refusal(tree)
        if any(prefill & set(methods) for methods in architectures.values())
        else None
    )
    new = relax(
        source,
        str(tree.file(path)),
        dflash=refused is None,
        relaying=architectures,
        reasons=dict(sorted({**stacks.unresolved(classes), **refusal_reasons}.items())),
    )
    return ValidationResult(
        FileChange(path, source, new, VALIDATION, Role.VALIDATION),
        architectures,
        dflash_refused=refused,
    )


def unrelaxed_note(tree: SGLangTree, path: str) -> str:
    """Why the validation of a release without ``check_pipeline_parallel_compat`` is left
    as is: where it refuses every speculative algorithm with PP (0.4.10-0.5.20)."""
    refusal = refuses_every_algorithm(tree_refusals(tree))
    if refusal is None:
        return f"{path}: no check_pipeline_parallel_compat; server-arg validation left as is"
    where = " on GPU" if refusal.except_npu else ""
    return (
        f"{refusal.path}:{refusal.line}: {refusal.function} refuses every speculative "
        f"algorithm with PP{where} ({refusal.message!r}); server-arg validation left as "
        f"is: this release has no speculative path under PP to admit {either(ADMITTED)} on"
    )


def dflash_refusal(tree: SGLangTree) -> Refusal | None:
    """Where ``tree`` refuses a method admitted on PD prefill (DFLASH) with PP outside
    ``check_pipeline_parallel_compat`` (0.5.21-0.5.23: ``speculative_hook._handle_dflash``);
    None when nothing does."""
    found = [r for r in tree_refusals(tree) if not r.path.endswith("/validation_hook.py")]
    refused = (refusal_of(found, method.name) for method in PD_PREFILL)
    return next((refusal for refusal in refused if refusal is not None), None)
