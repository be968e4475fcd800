"""The family patch: every SGLang model whose capture hooks drop aux captures under PP.

Most SGLang causal-LM classes define ``set_eagle3_layers_to_capture`` /
``set_dflash_layers_to_capture`` / ... as ``if not self.pp_group.is_last_rank: return``
followed by storing the capture ids on the decoder stack.  Under PP only the last stage
then captures, so the drafter silently gets fewer aux states than it was trained on (or
the last stage crashes unpacking a tuple when it owns none of the captures).

``plan_family(models_dir)`` looks at every model file with a capture hook, follows each
hook to the decoder-stack forward that does the capturing (possibly in another file,
e.g. ``qwen3.py`` -> ``Qwen2Model.forward`` in ``qwen2.py``), and decides per file
whether it can be patched, and why not when it cannot.  ``FamilyPlan.rewritten()`` gives
the new text of every touched file: hooks call ``set_pp_aux_capture`` instead of returning
early, forwards hand captures on in the PP handoff and gather them on the last stage, with
the same ids, default layers, order (ascending layer id) and capture point.

A model that refuses PP in its constructor is not patched: only the early return of its
hooks, which never runs, is dropped (``FileDecision.dead_returns``).  A class that inherits
a patched class's hooks but builds its own decoder stack is decided by
:mod:`~codemods.upstream.family.planning.subclass`; the parsed files and the cross-file lookups are
:mod:`~codemods.upstream.family.planning.corpus`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from codemods.catalog.hooks import HOOK_NAME_FORM
from codemods.catalog.methods import NATIVE
from codemods.catalog.pp_raise import UPSTREAM_REWRITES
from codemods.upstream.edit.forked import forked_map
from codemods.upstream.edit.splice import module_code
from codemods.upstream.edit.walk import findall
from codemods.upstream.family import registry
from codemods.upstream.family.forward import ForwardShape
from codemods.upstream.family.planning.corpus import Corpus, asks_hasattr, defines, find_forward
from codemods.upstream.family.planning.decision import FileDecision, ForwardRef
from codemods.upstream.family.planning.subclass import plan_subclasses
from codemods.upstream.family.proxy_width import WidthUnknown, hook_width, relay_methods
from codemods.upstream.family.repairs import STAGE_OUTPUT, StackSetter, StageOutputFix
from codemods.upstream.family.rewrite import rewrite_module
from codemods.upstream.family.setter import SetterShape
from codemods.upstream.family.split_stack import sibling_setters, split_stack_setters
from codemods.upstream.family.stage_output import NamedStageOutputFix, named_stage_unpack
from codemods.upstream.family.survey import ModuleShapes, unpacks_stack_output
from codemods.upstream.family.syntax import IDS_ATTR, class_node

#: Text every file with a capture hook or a capture forward contains.
#: ``def set_<method>_layers_to_capture(``: the capture hooks the plan is about.
_HOOK_DEF = re.compile(rb"\bdef\s+" + HOOK_NAME_FORM.encode() + rb"\s*\(")


@dataclass
class FamilyPlan:
    models_dir: Path
    decisions: dict[str, FileDecision]
    #: file -> hooks to rewrite / forwards to rewrite in that file
    setter_edits: dict[str, list[SetterShape]] = field(default_factory=dict)
    forward_edits: dict[str, list[ForwardShape]] = field(default_factory=dict)
    #: file -> stack setters to add (a hook calls them, the stack class lacks them)
    stack_setters: dict[str, list[StackSetter]] = field(default_factory=dict)
    #: file -> causal-LM forwards that unpack the stack output on every rank
    stage_fixes: dict[str, list[StageOutputFix]] = field(default_factory=dict)
    modules: dict[str, cst.Module] = field(default_factory=dict, repr=False)
    #: file -> (class, hook) of the early returns that never run (``FileDecision.dead_returns``)
    dead_returns: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: file -> (class, methods) of the relay declarations of subclasses that inherit hooks
    relay_declarations: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)
    _rewritten: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)
    _fixed: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def patched(self) -> list[str]:
        return sorted(f for f, d in self.decisions.items() if d.patched)

    @property
    def touched_files(self) -> list[str]:
        return sorted(
            set(self.setter_edits)
            | set(self.forward_edits)
            | set(self.stack_setters)
            | set(self.stage_fixes)
            | set(self.dead_returns)
            | set(self.relay_declarations)
        )

    def select(self, names: list[str] | None) -> FamilyPlan:
        """The plan restricted to the given model names (file stems); forwards they
        depend on stay in, since the hooks need them."""
        if not names:
            return self
        wanted = {name.removesuffix(".py") for name in names}
        unknown = wanted - {d.name for d in self.decisions.values()}
        if unknown:
            raise ValueError(
                f"no model file with a capture hook named: {', '.join(sorted(unknown))}"
            )

        def chosen(edits: dict[str, list]) -> dict[str, list]:
            return {f: e for f, e in edits.items() if f.removesuffix(".py") in wanted}

        decisions = {f: d for f, d in self.decisions.items() if d.name in wanted}
        needed = {
            (d.forward.file, d.forward.class_name)
            for d in decisions.values()
            if d.patched and d.forward is not None
        }
        forward_edits: dict[str, list[ForwardShape]] = {}
        for file, shapes in self.forward_edits.items():
            kept = [shape for shape in shapes if (file, shape.class_name) in needed]
            if kept:
                forward_edits[file] = kept
        return FamilyPlan(
            self.models_dir,
            decisions,
            chosen(self.setter_edits),
            forward_edits,
            chosen(self.stack_setters),
            chosen(self.stage_fixes),
            self.modules,
            chosen(self.dead_returns),
            chosen(self.relay_declarations),
        )

    def rewritten(self) -> dict[str, str]:
        """``file -> new text`` for every file the patch touches (computed once)."""
        if self._rewritten is None:
            self._rewritten = self._rewrite()
        return dict(self._rewritten)

    def _rewrite(self) -> dict[str, str]:
        # The files are independent: the rewrite of some runs in a second process.
        files = self.touched_files
        texts = forked_map(
            self._rewrite_file, files, weight=lambda file: len(self.modules[file].body)
        )
        return dict(zip(files, texts, strict=True))

    def _rewrite_file(self, file: str) -> str:
        module = self.modules[file]
        updated = rewrite_module(
            module,
            self.setter_edits.get(file, []),
            self.forward_edits.get(file, []),
            self.stack_setters.get(file, []),
            self.stage_fixes.get(file, []),
            self.dead_returns.get(file, []),
            [*self.relay_declarations.get(file, []), *self.stack_declarations(file)],
        )
        return module_code(module, updated)

    def stack_declarations(self, file: str) -> list[tuple[str, tuple[str, ...]]]:
        """``(class, methods)`` of each decoder stack of ``file`` whose forward the patch
        rewrites: what relays is that forward, so its class declares the methods of the
        rewritten hooks that set its relay up (``pp_aux_relay_methods``, which the runtime
        guard asks of the stack a hook gave a relay to)."""
        found = []
        for shape in self.forward_edits.get(file, []):
            ref = ForwardRef(file, shape.class_name)
            hooks = [
                hook
                for decision in self.decisions.values()
                if decision.patched and decision.forward == ref
                for _outer, _stack, case_hooks in decision.cases
                for hook in case_hooks
            ]
            methods = relay_methods(hooks)
            if methods:
                found.append((shape.class_name, methods))
        return found

    def fixes_only(self) -> dict[str, str]:
        """``file -> text`` with only the separate fixes applied (missing stack setters,
        causal-LM forwards that unpack non-last stages' output), for the files that have
        them: the state between a fix's own patch and the capture patch of its file
        (computed once)."""
        if self._fixed is None:
            self._fixed = self._fix()
        return dict(self._fixed)

    def release_trees(self) -> None:
        """Work out every text the plan gives (:meth:`rewritten`, :meth:`fixes_only`), then
        let go of the parsed model files: about a million nodes for SGLang's models, which
        the rest of a run has no use for and which would slow every garbage collection."""
        self.rewritten()
        self.fixes_only()
        self.modules = {}

    def _fix(self) -> dict[str, str]:
        result = {}
        for file in sorted(set(self.stack_setters) | set(self.stage_fixes)):
            module = self.modules[file]
            updated = rewrite_module(
                module,
                [],
                [],
                self.stack_setters.get(file, []),
                self.stage_fixes.get(file, []),
            )
            result[file] = module_code(module, updated)
        return result


def candidate_files(models_dir: Path) -> list[str]:
    """Model files that define a capture hook (a byte-level filter: only these are parsed;
    files they build on are parsed when a decision needs them)."""
    return sorted(
        path.name for path in models_dir.glob("*.py") if _HOOK_DEF.search(path.read_bytes())
    )


#: The reason of a file whose hooks refuse PP themselves (they lose nothing under PP).
RAISES_PP = "the capture hook raises under PP in its own code"

#: The reason of a file whose model refuses PP outright (it loses nothing under PP).
REFUSES_PP = "the model refuses PP in its constructor"

#: Model files another rewriter owns: reported, never rewritten by the family patch.
OWNED_ELSEWHERE = {
    file: f"rewritten by the {model} rewriter ({NATIVE.name}, raises under PP)"
    for file, model in UPSTREAM_REWRITES.items()
}


def plan_family(
    models_dir: Path | str,
    only: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FamilyPlan:
    """Decide, for every model file with a capture hook (or those named in ``only``, as
    file stems), whether and how to patch it.  Files the decisions depend on (a base
    class's forward in another file) are read as needed.  ``progress(done, total)`` is
    called before each file."""
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        raise FileNotFoundError(f"{models_dir}: not a directory")
    corpus = Corpus(models_dir)
    plan = FamilyPlan(models_dir, {}, modules=corpus.modules)
    files = candidate_files(models_dir)
    if only is not None:
        wanted = {name.removesuffix(".py") for name in only}
        files = [file for file in files if file.removesuffix(".py") in wanted]
    for done, file in enumerate(files):
        if progress is not None:
            progress(done, len(files))
        shapes = corpus.get(file)
        if file in corpus.errors:
            plan.decisions[file] = FileDecision(file, (), (), False, corpus.errors[file])
            continue
        if shapes is None or not shapes.setters:
            continue
        if file in OWNED_ELSEWHERE:
            hooks = tuple(f"{s.class_name}.{s.hook}" for s in shapes.setters)
            early = tuple(f"{s.class_name}.{s.hook}" for s in shapes.setters if s.early_return)
            plan.decisions[file] = FileDecision(file, hooks, early, False, OWNED_ELSEWHERE[file])
            continue
        plan.decisions[file] = _decide(file, shapes, corpus, plan)
    plan_subclasses(corpus, plan, only)
    return plan


def _kept(
    file: str,
    hooks: tuple[str, ...],
    early: tuple[str, ...],
    reason: str,
    forward: ForwardRef | None = None,
    shape: ForwardShape | None = None,
) -> FileDecision:
    """The decision to leave ``file`` as it is, for ``reason``."""
    if shape is None:
        return FileDecision(file, hooks, early, False, reason, forward)
    return FileDecision(
        file,
        hooks,
        early,
        False,
        reason,
        forward,
        shape.capture_kinds,
        proxy_arg=shape.proxy_arg,
        final_capture=shape.final_capture,
    )


def _decide(file: str, shapes: ModuleShapes, corpus: Corpus, plan: FamilyPlan) -> FileDecision:
    hooks = tuple(f"{s.class_name}.{s.hook}" for s in shapes.setters)
    early = tuple(f"{s.class_name}.{s.hook}" for s in shapes.setters if s.early_return)

    keep = partial(_kept, file, hooks, early)

    if not early:
        # Hooks that store the ids on every rank of a split stack: patched only when
        # the whole file can be; otherwise reported as before.
        split = split_stack_setters(corpus.modules[file], shapes)
        if split:
            decision = _decide_setters(
                file, shapes, corpus, plan, split, hooks, early, entry_only=True
            )
            if decision.patched:
                return decision
        raising = [s for s in shapes.setters if s.pp_raise]
        if raising:
            named = "; ".join(f"`{s.hook}` (`{s.pp_raise}`)" for s in raising)
            others = (
                ""
                if len(raising) == len(shapes.setters)
                else ("; the other hooks do not return early")
            )
            return keep(
                f"{RAISES_PP}: {named}: it fails loudly under PP, so no capture "
                f"is lost silently{others}"
            )
        return keep("no hook returns early on non-last PP ranks")
    candidates = [s for s in shapes.setters if s.early_return]
    candidates += sibling_setters(corpus.modules[file], shapes, candidates)
    return _decide_setters(file, shapes, corpus, plan, candidates, hooks, early)


def _decide_setters(
    file: str,
    shapes: ModuleShapes,
    corpus: Corpus,
    plan: FamilyPlan,
    candidates: list[SetterShape],
    hooks: tuple[str, ...],
    early: tuple[str, ...],
    entry_only: bool = False,
) -> FileDecision:
    """``entry_only``: patch only when the stack forward is one of the 0.5.21+
    layer-entry shapes (``Shape.layer_entry``)."""
    keep = partial(_kept, file, hooks, early)

    problems = [f"{s.hook}: {s.problem}" for s in candidates if s.problem]
    if problems:
        return keep("; ".join(problems))
    targets: dict[tuple[str, str], ForwardShape] = {}
    stacks: dict[str, str] = {}
    additions: list[StackSetter] = []
    stage_fixes: list[StageOutputFix] = []
    sized: list[SetterShape] = []
    for setter in candidates:
        found = _resolve_forward(file, shapes, setter, corpus)
        if isinstance(found, str):
            return keep(f"{setter.hook}: {found}")
        stack_class, ref_file, forward = found
        # _resolve_forward found the receiver; a hook read with one has its PP group
        receiver, pp_group = setter.receiver, setter.pp_group
        assert receiver is not None and pp_group is not None
        refusal = _refuses_pp(shapes, setter.class_name, stack_class)
        if refusal is not None:
            return _dead_returns(file, hooks, setter.class_name, early, refusal, plan)
        stacks[setter.class_name] = stack_class
        outer = class_node(corpus.modules[file], setter.class_name)
        unpacked = unpacks_stack_output(outer, receiver) if outer else None
        if outer is not None and unpacked is not None:
            if findall(outer, m.Name(STAGE_OUTPUT)):
                return keep(
                    f"{setter.class_name}.forward does `{unpacked}` with capture off, "
                    f"which fails on non-last PP ranks (PPProxyTensors)"
                )
            stage_fixes.append(StageOutputFix(setter.class_name, receiver, pp_group, unpacked))
        named = named_stage_unpack(outer, receiver) if outer and not unpacked else None
        if named is not None:
            stage_fixes.append(
                NamedStageOutputFix(setter.class_name, receiver, pp_group, named[1], named[0])
            )
        for method in setter.receiver_calls:
            if defines(file, stack_class, method, corpus, depth=0):
                continue
            if asks_hasattr(corpus.modules[file], setter, method):
                continue  # the hook stores the ids itself when the stack lacks it
            if not _can_add_stack_setter(file, stack_class, ref_file, forward):
                return keep(
                    f"{setter.hook}: calls {setter.receiver}.{method}, which "
                    f"{stack_class} does not define (fails with PP=1 too)"
                )
            additions.append(StackSetter(stack_class, method, setter.ids_annotation))
        if not forward.recognised:
            return keep(
                f"{ref_file}:{forward.class_name}.forward: {forward.problem}",
                ForwardRef(ref_file, forward.class_name),
                forward,
            )
        if not setter.receiver_calls and setter.ids_attr != forward.ids_attr:
            return keep(
                f"{setter.hook} stores the ids in `{setter.ids_attr}` but "
                f"{forward.class_name}.forward reads `{forward.ids_attr}`"
            )
        try:  # the width the rewritten hook passes on
            sized.append(replace(setter, hidden_size=hook_width(outer, receiver)))
        except WidthUnknown as unknown:
            return keep(f"{setter.hook}: {unknown}")
        targets[(ref_file, forward.class_name)] = forward
    if len(targets) != 1:
        return keep("hooks of this file reach different decoder stacks")
    (ref_file, class_name), forward = next(iter(targets.items()))
    if entry_only and not registry.is_layer_entry(forward.capture_kinds):
        return keep(f"{ref_file}:{class_name}.forward is not a layer-entry forward")
    plan.setter_edits.setdefault(file, []).extend(sized)
    additions = list(dict.fromkeys(additions))
    if additions:
        plan.stack_setters.setdefault(file, []).extend(additions)
    stage_fixes = list(dict.fromkeys(stage_fixes))
    if stage_fixes:
        plan.stage_fixes.setdefault(file, []).extend(stage_fixes)
    edits = plan.forward_edits.setdefault(ref_file, [])
    if all(shape.class_name != class_name for shape in edits):
        edits.append(forward)
    cases = tuple(
        (
            outer,
            stacks[outer],
            tuple(s.hook for s in candidates if s.class_name == outer),
        )
        for outer in dict.fromkeys(s.class_name for s in candidates)
    )
    return FileDecision(
        file,
        hooks,
        early,
        True,
        "patched",
        ForwardRef(ref_file, class_name),
        forward.capture_kinds,
        cases,
        proxy_arg=forward.proxy_arg,
        final_capture=forward.final_capture,
        fixes=tuple(
            f"adds `{a.class_name}.{a.method}`, which the hook calls but was missing "
            f"(the hook failed even with PP=1)"
            for a in additions
        )
        + tuple(
            f"`{f.class_name}.forward` hands non-last stages' `PPProxyTensors` on instead "
            f"of `{f.unpacked}` (it failed under PP with or without capture)"
            for f in stage_fixes
        ),
        stale_comments=forward.stale_comments,
    )


def _dead_returns(
    file: str,
    hooks: tuple[str, ...],
    refusing: str,
    early: tuple[str, ...],
    refusal: str,
    plan: FamilyPlan,
) -> FileDecision:
    """The decision for a file whose model refuses PP in its constructor: not patched (it
    relays nothing and declares no relay, so validation and the runtime guard refuse aux
    capture under PP for it), and the early returns of its hooks, which never run, are
    dropped so that no capture hook decides by PP rank by itself."""
    dead = tuple(hook for hook in early if hook.split(".", 1)[0] == refusing)
    plan.dead_returns[file] = [(refusing, hook.split(".", 1)[1]) for hook in dead]
    return FileDecision(
        file,
        hooks,
        early,
        False,
        f"{REFUSES_PP} (`{refusal}`): the early return never runs and no capture is lost; "
        f"the patch drops it and declares no relay",
        dead_returns=dead,
    )


def _refuses_pp(shapes: ModuleShapes, outer: str, stack_class: str) -> str | None:
    """The single-stage ``assert`` of the causal-LM class or its decoder stack, if any."""
    for name in (outer, stack_class):
        info = shapes.classes.get(name)
        if info is not None and info.pp_assert:
            return info.pp_assert
    return None


def _can_add_stack_setter(
    file: str, stack_class: str, ref_file: str, forward: ForwardShape
) -> bool:
    """A stack setter the hook calls can be added when the stack class is defined in
    the hook's file with its own capture forward, which reads the ids directly."""
    return (
        forward.recognised
        and ref_file == file
        and forward.class_name == stack_class
        and registry.adds_stack_setter(forward.capture_kinds)
        and forward.ids_attr == IDS_ATTR
    )


def _resolve_forward(
    file: str, shapes: ModuleShapes, setter: SetterShape, corpus: Corpus
) -> tuple[str, str, ForwardShape] | str:
    """(decoder-stack class, file of its capture forward, that forward) for ``setter``'s
    receiver, or why it was not found."""
    receiver = setter.receiver or ""
    if not receiver.startswith("self.") or receiver.count(".") != 1:
        return f"capture ids go to `{receiver}`, not a direct submodule"
    attribute = receiver.split(".", 1)[1]
    owner = shapes.classes.get(setter.class_name)
    class_name = owner.submodules.get(attribute) if owner else None
    if class_name is None:
        local = [f for f in shapes.forwards]
        if len(local) == 1:
            return local[0].class_name, file, local[0]
        return f"cannot tell which class `{receiver}` is"
    found = find_forward(file, class_name, corpus, depth=0)
    return found if isinstance(found, str) else (class_name, *found)
