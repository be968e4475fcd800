"""The CPU tests the patch ships for the capture-hook family, rendered from its plan.

The family part (``family/part.py``) patches the model files of the plan; the tests part
ships two test files (``TEST_FILES``): the family test, which runs every patched model's
forward with stand-in layers on 2 and 3 stages, and ``test_pp_aux_capture.py``, which builds every patched causal LM through its
real ``__init__`` on 2 stages and checks the handoff, the buffer sizing and the
validation.  Their shared test utilities (stand-in models, the stand-ins for GPU-only
packages, the server-args record the validation tests read) are a module of the package, where SGLang keeps its test utilities
(``TEST_UTILS_MODULE``, ``sglang/test/``), in the patch of either layout.  The helpers
and the test files are kept under ``codemods/upstream/shipped/``; the tests' model lists
are generated from the plan, and where releases differ the init test takes the one form
the tree's release needs (``tree/test_variants.py``), so it holds no code for other releases.

In a checkout the tests go to ``test/registered/unit/models/``; a package tree has no
test folder, so they are left out of its patch (``shipped_tests`` still renders them,
for ``--tests-dir`` and ``--validate``).
"""

from __future__ import annotations

from codemods.upstream.edit.change_kinds import Role
from codemods.upstream.edit.runtime import SHIPPED_DIR
from codemods.upstream.family.plan import FamilyPlan
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.tree.test_variants import FEATURES, select, tree_features

TEST_TEMPLATE = SHIPPED_DIR / "test_pp_aux_capture_family.py"
#: The tests' shared utilities (stand-in models and builders, GPU-only package stand-ins,
#: the server-args record ``pp_server_args``).
TEST_MODELS_SOURCE = SHIPPED_DIR / "pp_aux_capture_family_models.py"
#: Where the patch puts them: beside SGLang's own test utilities, in the package.
TEST_UTILS_MODULE = "sglang.test.pp_aux_capture_family_models"

#: The test that builds the patched causal LMs through their real ``__init__``.
INIT_TEST_TEMPLATE = SHIPPED_DIR / "test_pp_aux_capture.py"

TEST_FILE = "test_pp_aux_capture_family.py"
TEST_MODELS_FILE = "pp_aux_capture_family_models.py"
INIT_TEST_FILE = "test_pp_aux_capture.py"
#: The test files the patch ships (each registers for SGLang's CPU CI), in order.
TEST_FILES = (TEST_FILE, INIT_TEST_FILE)
TEST_ROLES = {
    TEST_MODELS_FILE: Role.TEST_MODELS,
    TEST_FILE: Role.FAMILY_TEST,
    INIT_TEST_FILE: Role.INIT_TEST,
}
CASES_MARKER = "    # @@FAMILY_CASES@@\n"
#: The features of the newest release the tests are written for (a tree given no tree).
CURRENT = dict.fromkeys(FEATURES, True)
PATCHED_MARKER = "    # @@PATCHED_MODELS@@\n"


#: Model files a part of their own rewrites to relay DSPARK captures (the Kimi parts):
#: stem -> (causal-LM class, decoder-stack class, capture hooks), driven by the family
#: test like the family's files where the patch rewrites them.
KIMI_CASES = {
    "kimi_linear": ("KimiLinearForCausalLM", "KimiLinearModel", ("set_dspark_layers_to_capture",)),
    "kimi_k3": ("KimiK3LinearForCausalLM", "KimiK3LinearModel", ("set_dspark_layers_to_capture",)),
}


def render_cases(plan: FamilyPlan, kimi: tuple[str, ...] = ()) -> str:
    """The ``FAMILY`` entries of the test file, black-formatted; ``kimi``: the stems of
    ``KIMI_CASES`` the patch rewrites."""
    lines = []
    cases = [
        (decision.name, case)
        for decision in sorted(plan.decisions.values(), key=lambda d: d.file)
        if decision.patched
        for case in decision.cases
    ]
    cases += [(stem, KIMI_CASES[stem]) for stem in sorted(kimi)]
    for name, (outer, stack, hooks) in cases:
        hook_text = ", ".join(f'"{hook}"' for hook in hooks)
        if len(hooks) == 1:
            hook_text += ","
        lines += [
            "    (",
            f'        "{name}",',
            f'        "{outer}",',
            f'        "{stack}",',
            f"        ({hook_text}),",
            "    ),",
        ]
    return "".join(line + "\n" for line in lines)


def render_test(plan: FamilyPlan, kimi: tuple[str, ...] = ()) -> str:
    template = TEST_TEMPLATE.read_text(encoding="utf-8")
    if CASES_MARKER not in template:
        raise RuntimeError(f"{TEST_TEMPLATE}: marker {CASES_MARKER.strip()!r} missing")
    return template.replace(CASES_MARKER, render_cases(plan, kimi))


def render_init_test(plan: FamilyPlan, features: dict[str, bool] | None = None) -> str:
    """``test_pp_aux_capture.py`` with the model files the plan patches, in the form the
    tree's release needs (``features``: ``test_variants.tree_features``; by default the
    current release's)."""
    template = select(INIT_TEST_TEMPLATE.read_text(encoding="utf-8"), features or CURRENT)
    if PATCHED_MARKER not in template:
        raise RuntimeError(f"{INIT_TEST_TEMPLATE}: marker {PATCHED_MARKER.strip()!r} missing")
    names = sorted(d.name for d in plan.decisions.values() if d.patched)
    return template.replace(PATCHED_MARKER, "".join(f'    "{n}",\n' for n in names))


def shipped_tests(
    plan: FamilyPlan, tree: SGLangTree | None = None, kimi: tuple[str, ...] = ()
) -> dict[str, str]:
    """File name -> text of every test file the patch ships for ``plan`` (empty when it
    patches no model of the family), in the form ``tree``'s release needs; the family
    test also drives the Kimi files of ``kimi`` (``KIMI_CASES``)."""
    if not plan.patched:
        return {}
    features = tree_features(tree) if tree is not None else None
    return {
        TEST_FILE: render_test(plan, kimi),
        INIT_TEST_FILE: render_init_test(plan, features),
    }


def render_test_utils(features: dict[str, bool] | None = None) -> str:
    """The tests' shared utilities module as shipped, in the form the tree's release
    needs (``features`` as for :func:`render_init_test`)."""
    return select(TEST_MODELS_SOURCE.read_text(encoding="utf-8"), features or CURRENT)
