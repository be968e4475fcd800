"""Behaviour preservation of ``migrate``, checked on generated programs.

Each example is a small program (see ``generated_programs``): a hook call on some receiver,
with some argument form, in some statement context, inside a module, function, coroutine or
method.  The program is migrated with the library call ``transform_source`` and then both
versions are executed against a recording fake model, for every ids value in ``VALUES`` and
with the model raising the pipeline-parallel ``NotImplementedError`` or not.

Properties (default policies ``skip``/``warn``):
- the result compiles and a second migration changes nothing;
- neither the hook's ValueError nor its NotImplementedError escapes (EAGLE3 never raises the
  latter: its calls are left without a ``try``);
- the hook is called exactly when the original program would have called it with a usable
  value (non-empty for hooks that reject None; always for EAGLE3), with the same ids, as a list
  when the guard normalised them;
- every other statement runs as before (the ``trace`` list matches the original program's
  trace when the hook does not fail).
Under the ``raise`` policies the documented errors are raised instead.
"""

from __future__ import annotations

import os

import pytest
from generated_programs import (
    HOOKS,
    PP_RAISES,
    VALUES,
    ProgramSpec,
    RecordingModel,
    argument_source,
    execute,
    program_specs,
    render,
)
from hypothesis import HealthCheck, given, settings

from codemods.callers.records import Action, Status
from codemods.callers.transform import TransformOptions, transform_source

EXAMPLES = int(os.environ.get("AUXCAP_PROPERTY_EXAMPLES", "500"))
DEFAULT = TransformOptions()
RAISING = TransformOptions(guard_policy="raise", fallback_policy="raise")

PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def migrate(source: str, options: TransformOptions) -> tuple[str, object]:
    result = transform_source(source.encode(), "program.py", options)
    assert result.status is not Status.FAILED, result.error
    if result.status is Status.CHANGED:
        return result.rewritten.decode(), result
    return source, result


def compiled(source: str):
    return compile(source, "program.py", "exec", dont_inherit=True)


def normalised(value):
    return None if value is None else list(value)


def ids_kept_as_written(spec: ProgramSpec) -> bool:
    """Sites the guard leaves alone by design: literal ids, calls the program already guards,
    and EAGLE3 (``None`` means its default layers)."""
    return (
        not spec.uses_value
        or spec.argument == "or-default"  # never unset: ``layer_ids or [4, 5]``
        or spec.context.startswith("guarded-")
        or HOOKS[spec.hook].accepts_none
    )


def reported_for_review(spec: ProgramSpec) -> bool:
    """A literal ``None`` for a hook that rejects it: always wrong, reported, not rewritten."""
    return spec.argument == "none" and not HOOKS[spec.hook].accepts_none


def usable(spec: ProgramSpec, passed) -> bool:
    """Whether a value the original program passes is still passed after migration."""
    return ids_kept_as_written(spec) or bool(passed)


def expected_calls(spec: ProgramSpec, before_calls: list) -> list:
    """What the migrated program passes to the hook, given what the original one passed."""
    return [(name, normalised(passed)) for name, passed in before_calls if usable(spec, passed)]


def reference_run(spec: ProgramSpec, code, value, pp: bool):
    """The original program against a model that only fails where the program handles it."""
    handled = spec.context == "handles-not-implemented"
    model = RecordingModel(
        pp=pp and handled, permissive=True, pp_raises_for=lambda ids: usable(spec, ids)
    )
    reference = execute(code, spec, value, model)
    assert reference.error is None, reference.error
    return reference


def check_default_policies(spec: ProgramSpec, source: str, after: str) -> None:
    before_code, after_code = compiled(source), compiled(after)
    for value in VALUES:
        for pp in (False, True):
            reference = reference_run(spec, before_code, value, pp)
            outcome = execute(after_code, spec, value, RecordingModel(pp=pp))
            context = f"value={value!r} pp={pp}\n--- before\n{source}\n--- after\n{after}"
            assert outcome.error is None, f"{outcome.error!r} escaped; {context}"
            assert outcome.trace == reference.trace, context
            got = [(name, normalised(ids)) for name, ids in outcome.calls]
            assert got == expected_calls(spec, reference.calls), context
            if not ids_kept_as_written(spec):
                assert all(isinstance(ids, list) for _, ids in outcome.calls), context
            if (
                pp
                and PP_RAISES[spec.hook]
                and outcome.calls
                and (spec.context != "handles-not-implemented")
            ):
                assert any("requires PP=1" in message for message in outcome.warnings), context


def check_raise_policies(spec: ProgramSpec, source: str, raising: str) -> None:
    before_code, after_code = compiled(source), compiled(raising)
    for value in VALUES:
        for pp in (False, True):
            reference = reference_run(spec, before_code, value, pp)
            outcome = execute(after_code, spec, value, RecordingModel(pp=pp))
            context = f"value={value!r} pp={pp}\n--- before\n{source}\n--- after\n{raising}"
            unset = [ids for _, ids in reference.calls if not usable(spec, ids)]
            if unset:
                # The original forwards an unset value: the guard raises a clear ValueError
                # naming the hook and the value, before the hook is called.
                assert isinstance(outcome.error, ValueError), context
                message = str(outcome.error)
                assert spec.hook in message and "is unset" in message, context
                assert argument_source(spec) in message, context
                assert not outcome.calls[len(reference.calls) - len(unset) :], context
            elif (
                pp
                and PP_RAISES[spec.hook]
                and reference.calls
                and spec.context != "handles-not-implemented"
            ):
                assert isinstance(outcome.error, NotImplementedError), context
                message = str(outcome.error)
                assert spec.hook in message and "pipeline parallelism" in message, context
                assert isinstance(outcome.error.__cause__, NotImplementedError), context
            else:
                assert outcome.error is None, f"{outcome.error!r}; {context}"
                assert outcome.trace == reference.trace, context


@pytest.mark.slow
@pytest.mark.timeout(1800)
@PROPERTY_SETTINGS
@given(program_specs())
def test_migrated_programs_keep_behaviour(spec: ProgramSpec) -> None:
    source = render(spec)
    after, result = migrate(source, DEFAULT)
    if reported_for_review(spec):
        assert after == source
        assert [site.actions for site in result.call_sites] == [(Action.REVIEW,)]
        assert "None" in result.call_sites[0].note
        return
    for site in result.call_sites:
        assert Action.REVIEW not in site.actions, (site.note, source)
    compiled(after)
    again, _ = migrate(after, DEFAULT)
    assert again == after, "a second migration changed the program"
    check_default_policies(spec, source, after)

    raising, _ = migrate(source, RAISING)
    compiled(raising)
    check_raise_policies(spec, source, raising)


def test_the_oracle_catches_an_unguarded_program():
    """The properties can fail: the original program itself violates them."""
    spec = ProgramSpec(
        container="function",
        receiver="model",
        hook="set_dspark_layers_to_capture",
        argument="attr",
        context="plain",
        style="positional",
        with_logger=False,
    )
    source = render(spec)
    with pytest.raises(AssertionError, match="escaped"):
        check_default_policies(spec, source, source)


def test_the_oracle_catches_a_dropped_statement():
    spec = ProgramSpec(
        container="module",
        receiver="model",
        hook="set_eagle3_layers_to_capture",
        argument="list",
        context="plain",
        style="positional",
        with_logger=True,
    )
    source = render(spec)
    after, _ = migrate(source, DEFAULT)
    broken = after.replace('trace.append("after")', "pass")
    assert broken != after
    with pytest.raises(AssertionError):
        check_default_policies(spec, source, broken)
