"""The per-codemod steps a rewrite records are what running the codemods one after the other
gives: the guard's step is the guard alone over the original file, and the fallback's sites
are what discovery reports in the guarded file.  (JSON and CodeTF reports are built from these
steps, so they must match a fresh run.)"""

from __future__ import annotations

import libcst as cst
import pytest
from caller_cases import CASE_IDS, CASES

from codemods.callers.records import Action, Status
from codemods.callers.rewrite.guard import GuardTransformer
from codemods.callers.transform import scan_source, transform_source

POLICIES = ["default", "raise"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_steps_match_the_codemods_run_one_by_one(case, policy):
    options = case.options(policy)
    path = f"{case.name}/before.py"
    result = transform_source(case.before, path, options)
    if result.status is not Status.CHANGED:
        assert result.steps == ()
        return
    guard_sites = tuple(s for s in result.call_sites if Action.GUARD in s.actions)
    guarded = case.before
    if guard_sites:
        guard = GuardTransformer(path, options.guard_policy, options.extra_hooks)
        guarded = guard.transform_module(cst.parse_module(case.before)).bytes
    fallback_sites = tuple(
        site
        for site in scan_source(guarded, path, options).call_sites
        if Action.FALLBACK in site.actions
    )
    steps = {step.action: step for step in result.steps}
    if guard_sites:
        step = steps[Action.GUARD.value]
        assert (step.before, step.after, step.sites) == (case.before, guarded, guard_sites)
    else:
        assert Action.GUARD.value not in steps
    if fallback_sites:
        step = steps[Action.FALLBACK.value]
        assert step.before == guarded
        assert step.after == result.rewritten
        assert step.sites == fallback_sites
    else:
        assert Action.FALLBACK.value not in steps
        assert guarded == result.rewritten
    assert result.steps[-1].after == result.rewritten


def test_a_file_is_analysed_once(monkeypatch):
    """Discovery runs once for a file both codemods rewrite."""
    import codemods.callers.analyse.sites as discover

    calls = []
    real = discover._found_calls
    monkeypatch.setattr(discover, "_found_calls", lambda a: calls.append(a) or real(a))
    source = (
        b"import logging\nlogger = logging.getLogger(__name__)\n\n\n"
        b"def f(model, args):\n    model.set_dspark_layers_to_capture(args.layers)\n"
    )
    result = transform_source(source, "f.py")
    assert result.status is Status.CHANGED
    assert [step.action for step in result.steps] == ["guard", "fallback"]
    assert len(calls) == 1
