"""Small caller programs built from a grammar, and a recording fake model to run them against.

A program is described by a :class:`ProgramSpec` (where the hook call lives, on which receiver,
with which argument, in which guard context) and rendered to source by :func:`render`.  Every
program appends to a ``trace`` list before and after the hook call, so any change to a statement
other than the call shows up when the programs are executed by :func:`execute`.
"""

from __future__ import annotations

import asyncio
import logging
import textwrap
from dataclasses import dataclass, replace
from types import SimpleNamespace

from hypothesis import strategies as st

from codemods.catalog import hook_facts
from codemods.catalog.hooks import CATALOG

HOOKS = {hook.name: hook for hook in CATALOG}
HOOK_NAMES = tuple(HOOKS)
#: Whether the hook raises NotImplementedError under PP, as the SGLang release facts say (a hook
#: the facts do not cover, MSD, is taken to raise like DSPARK). EAGLE3 never does: its setters
#: return early on non-last ranks.
PP_RAISES = {
    name: not hook_facts.is_known(name) or hook_facts.may_raise_not_implemented(name)
    for name in HOOKS
}

#: Values the ids take at run time (literal arguments aside).
VALUES = (None, [], [1, 2], (3,))

# Argument forms.  ``{v}`` is where the run-time value is reached (a parameter, an attribute);
# literal forms ignore it.  Keys name the form; values are (template, needs_value).
ARGUMENT_FORMS = {
    "param": ("{param}", True),
    "attr": ("{args}.layers", True),
    "deep-attr": ("{cfg}.capture.layer_ids", True),
    "or-none": ("{args}.layers or None", True),
    "or-default": ("{param} or [4, 5]", True),
    "or-attr": ("{args}.layers or {args}.fallback_layers", True),
    "none": ("None", False),
    "list": ("[1, 2]", False),
    "tuple": ("(3,)", False),
    "empty-tuple": ("()", False),
}

# Receivers, per container kind.
RECEIVERS = {
    "module": ("model", "runner.model", "runner.worker.model_runner.model", "models[0]"),
    "function": ("model", "runner.model", "runner.worker.model_runner.model", "get_model()"),
    "method": ("self.model", "self.runner.model", "self.runner.worker.model_runner.model"),
    "async": ("model", "runner.model"),
}

CONTAINERS = tuple(RECEIVERS)

# Guard contexts: how the statement holding the call is nested.  ``{call}`` is the statement.
CONTEXTS = (
    "plain",
    "if-flag",
    "if-else",
    "for-loop",
    "while-once",
    "with",
    "try-finally",
    "guarded-is-not-none",
    "guarded-truthy",
    "handles-not-implemented",
    "inline-if",
    "semicolons",
    "trailing-comment",
)

STYLES = ("positional", "keyword")

#: How the ``layer_ids`` parameter (or module variable) says it may be None.
DECLARATIONS = ("default-none", "pep604", "optional")


@dataclass(frozen=True)
class ProgramSpec:
    container: str
    receiver: str
    hook: str
    argument: str  # key of ARGUMENT_FORMS
    context: str
    style: str
    with_logger: bool  # the module defines its own ``logger``
    declaration: str = "default-none"

    @property
    def uses_value(self) -> bool:
        return ARGUMENT_FORMS[self.argument][1]

    @property
    def valid(self) -> bool:
        """Existing guards only make sense around a value known at run time."""
        return self.uses_value or not self.context.startswith("guarded-")


@st.composite
def program_specs(draw) -> ProgramSpec:
    container = draw(st.sampled_from(CONTAINERS))
    spec = ProgramSpec(
        container=container,
        receiver=draw(st.sampled_from(RECEIVERS[container])),
        hook=draw(st.sampled_from(HOOK_NAMES)),
        argument=draw(st.sampled_from(tuple(ARGUMENT_FORMS))),
        context=draw(st.sampled_from(CONTEXTS)),
        style=draw(st.sampled_from(STYLES)),
        with_logger=draw(st.booleans()),
        declaration=draw(st.sampled_from(DECLARATIONS)),
    )
    if not spec.valid:
        spec = replace(spec, context="plain")
    return spec


def _names(container: str) -> dict[str, str]:
    if container == "method":
        return {"param": "layer_ids", "args": "self.args", "cfg": "self.cfg"}
    return {"param": "layer_ids", "args": "args", "cfg": "cfg"}


def _parameter(spec: ProgramSpec) -> str:
    return {
        "default-none": "layer_ids=None",
        "pep604": "layer_ids: list[int] | None",
        "optional": "layer_ids: Optional[list[int]] = None",
    }[spec.declaration]


def _module_variable(spec: ProgramSpec) -> str:
    return {
        "default-none": "layer_ids = None\nlayer_ids = LAYER_IDS\n",
        "pep604": "layer_ids: list[int] | None = LAYER_IDS\n",
        "optional": "layer_ids: Optional[list[int]] = LAYER_IDS\n",
    }[spec.declaration]


def argument_source(spec: ProgramSpec) -> str:
    return ARGUMENT_FORMS[spec.argument][0].format(**_names(spec.container))


def call_source(spec: ProgramSpec) -> str:
    arg = argument_source(spec)
    if spec.style == "keyword":
        arg = f"layer_ids={arg}"
    return f"{spec.receiver}.{spec.hook}({arg})"


def _statement_block(spec: ProgramSpec) -> str:
    """The lines around and including the call, at indentation 0."""
    call = call_source(spec)
    arg = argument_source(spec)
    if " or " in arg:
        arg = f"({arg})"  # the existing guard checks the whole value
    flag = "self.args.enabled" if spec.container == "method" else "args.enabled"
    before, after = 'trace.append("before")', 'trace.append("after")'
    body = {
        "plain": f"{call}",
        "if-flag": f"if {flag}:\n    {call}\n    trace.append('in-if')",
        "if-else": f"if not {flag}:\n    trace.append('off')\nelse:\n    {call}",
        "for-loop": f"for step in range(2):\n    trace.append(('step', step))\n    {call}",
        "while-once": f"count = 0\nwhile count < 1:\n    {call}\n    count += 1",
        "with": f"with contextlib.nullcontext():\n    {call}\n    trace.append('in-with')",
        "try-finally": f"try:\n    {call}\nfinally:\n    trace.append('finally')",
        "guarded-is-not-none": f"if {arg} is not None:\n    {call}",
        "guarded-truthy": f"if {arg}:\n    {call}",
        "handles-not-implemented": (
            f"try:\n    {call}\nexcept NotImplementedError:\n    trace.append('pp-handled')"
        ),
        "inline-if": f"if {flag}: {call}",
        "semicolons": f"trace.append('semi-a'); {call}; trace.append('semi-b')",
        "trailing-comment": f"{call}  # capture aux layers",
    }[spec.context]
    return f"{before}\n{body}\n{after}\n"


def render(spec: ProgramSpec) -> str:
    """The program's source text."""
    block = _statement_block(spec)
    head = "import contextlib\nimport logging\nfrom typing import Optional\n\n"
    if spec.with_logger:
        head += "logger = logging.getLogger('generated.program')\n\n"
    param = _parameter(spec)
    if spec.container == "module":
        start, end = "trace.append('start')\n", "trace.append('end')\n"
        return head + _module_variable(spec) + start + block + end
    if spec.container in ("function", "async"):
        body = textwrap.indent(block, "    ")
        helper = "\ndef get_model():\n    return model\n\n\n"
        if spec.container == "async":
            helper = ""
        keyword = "async def" if spec.container == "async" else "def"
        return (
            head
            + helper
            + f"{keyword} setup(model, args, cfg, runner, trace, {param}):\n"
            + "    trace.append('start')\n"
            + body
            + "    return 'done'\n"
        )
    body = textwrap.indent(block, "        ")
    return (
        head
        + "class Runner:\n"
        + "    def __init__(self, model, args, cfg, runner):\n"
        + "        self.model = model\n"
        + "        self.args = args\n"
        + "        self.cfg = cfg\n"
        + "        self.runner = runner\n"
        + "\n"
        + f"    def setup(self, trace, {param}):\n"
        + "        trace.append('start')\n"
        + body
        + "        return 'done'\n"
    )


# ---- the recording fake model ------------------------------------------------------------


class RecordingModel:
    """Stands in for an SGLang model: records every hook call and raises what the real one does.

    ``pp=True`` behaves like Kimi-Linear under pipeline parallelism (NotImplementedError first)
    for the hooks that raise it (``PP_RAISES``), and returns early for EAGLE3;
    ``permissive=True`` never raises ValueError for None, and raises the PP error only when
    ``pp_raises_for`` accepts the ids (used to learn what a program does around the call).
    """

    def __init__(self, pp: bool = False, permissive: bool = False, pp_raises_for=None) -> None:
        self.pp = pp
        self.permissive = permissive
        self.pp_raises_for = pp_raises_for
        self.calls: list[tuple[str, object]] = []

    def _hook(self, name: str, layer_ids) -> None:
        self.calls.append((name, layer_ids))
        hook = HOOKS[name]
        pp_raises = self.pp and PP_RAISES[name]
        if self.permissive:
            if pp_raises and self.pp_raises_for is not None and self.pp_raises_for(layer_ids):
                raise NotImplementedError(hook.pp_error[1])
            return
        if pp_raises:
            raise NotImplementedError(hook.pp_error[1])
        if self.pp:
            return  # EAGLE3 under PP: returns early, the capture is silently lost
        if layer_ids is None and not hook.accepts_none:
            raise ValueError(hook.none_error[1])
        if layer_ids is not None:
            list(layer_ids)

    def set_dspark_layers_to_capture(self, layer_ids=None):
        self._hook("set_dspark_layers_to_capture", layer_ids)

    def set_dflash_layers_to_capture(self, layer_ids=None):
        self._hook("set_dflash_layers_to_capture", layer_ids)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self._hook("set_eagle3_layers_to_capture", layer_ids)

    def set_msd_layers_to_capture(self, layer_ids=None):
        self._hook("set_msd_layers_to_capture", layer_ids)


@dataclass
class Outcome:
    trace: list
    calls: list
    error: BaseException | None
    warnings: list[str]


#: The loggers a generated program can log to: its own, or one named after its module.
PROGRAM_LOGGERS = ("generated.program", "generated_program")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())


def execute(code, spec: ProgramSpec, value, model: RecordingModel) -> Outcome:
    """Run compiled program ``code`` with the ids set to ``value`` against ``model``."""
    trace: list = []
    args = SimpleNamespace(layers=value, fallback_layers=value, enabled=True)
    cfg = SimpleNamespace(capture=SimpleNamespace(layer_ids=value))
    runner = SimpleNamespace(
        model=model, worker=SimpleNamespace(model_runner=SimpleNamespace(model=model))
    )
    namespace = {
        "__name__": "generated_program",
        "model": model,
        "models": [model],
        "args": args,
        "cfg": cfg,
        "LAYER_IDS": value,
        "runner": runner,
        "trace": trace,
    }
    handler = _Collect()
    loggers = [logging.getLogger(name) for name in PROGRAM_LOGGERS]
    saved = [(logger.propagate, logger.level) for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
    error = None
    try:
        exec(code, namespace)
        if spec.container == "function":
            trace.append(namespace["setup"](model, args, cfg, runner, trace, value))
        elif spec.container == "async":
            coroutine = namespace["setup"](model, args, cfg, runner, trace, value)
            trace.append(asyncio.run(coroutine))
        elif spec.container == "method":
            instance = namespace["Runner"](model, args, cfg, runner)
            trace.append(instance.setup(trace, value))
    except Exception as exc:  # the property checks which errors escape
        error = exc
    finally:
        for logger, (propagate, level) in zip(loggers, saved, strict=False):
            logger.removeHandler(handler)
            logger.propagate = propagate
            logger.setLevel(level)
    return Outcome(trace=trace, calls=list(model.calls), error=error, warnings=handler.messages)
