"""Discovery: every call shape found, classified, and nothing else reported."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from caller_cases import CASES
from libcst.metadata import MetadataWrapper

from codemods.callers.analyse import find_call_sites, find_calls, mentions_hooks
from codemods.callers.records import Action, Risk, Shape
from codemods.catalog.hooks import HookSet

DSPARK = "set_dspark_layers_to_capture"
DFLASH = "set_dflash_layers_to_capture"
EAGLE3 = "set_eagle3_layers_to_capture"
MSD = "set_msd_layers_to_capture"
GF = "guard,fallback"

# (line, hook, shape, actions) for every fixture, reviewed by hand.
EXPECTED = {
    "already_guarded": [
        (11, DSPARK, "direct", "none"),
        (19, DSPARK, "direct", "none"),
        (27, DFLASH, "direct", "none"),
        (36, MSD, "direct", "none"),
        (45, DSPARK, "direct", "none"),
        (53, DSPARK, "direct", "none"),
    ],
    "args_attribute": [(23, DSPARK, "direct", GF)],
    # Capture required: unset ids fail early, no fallback; otherwise left alone.
    "capture_required_assert": [(5, DSPARK, "direct", "guard"), (11, DFLASH, "direct", "guard")],
    "capture_required_flag": [(10, DFLASH, "direct", "guard"), (14, DSPARK, "direct", "guard")],
    "capture_required_runner": [
        (9, DSPARK, "direct", "guard"),
        (15, DSPARK, "direct", "none"),
        (17, DFLASH, "direct", "none"),
        (26, DFLASH, "variable", "guard"),
    ],
    "colorful_logger": [(11, DSPARK, "direct", GF)],
    # Evidence across the module (analyse/evidence.py): required, left loud; conflicting signs
    # for review.
    "required_assert_ids": [(8, DSPARK, "direct", "none")],
    "required_class_reads": [(10, DFLASH, "direct", "none")],
    "required_extraction_loop": [(13, f"{DFLASH}|{DSPARK}", "variable", "none")],
    "required_hook_table_loop": [(23, f"{DFLASH}|{DSPARK}|{EAGLE3}", "variable", "guard")],
    "conflicting_signs": [(10, DSPARK, "direct", "review")],
    # Optional: guarded and wrapped, claims of capture run only when it was set.
    "optional_hasattr_else": [(8, DFLASH, "direct", GF)],
    "optional_capture_claims": [
        (12, f"{DFLASH}|{DSPARK}", "loop", GF),
        (21, DFLASH, "direct", "fallback"),
        (33, f"{DFLASH}|{DSPARK}", "dict-lookup", "fallback"),
    ],
    "custom_hook": [(7, "set_medusa_layers_to_capture", "direct", GF)],
    "definitions_and_strings": [],
    "delegating_wrapper": [],
    "dict_get_default": [(8, DSPARK, "direct", GF), (13, DSPARK, "direct", "fallback")],
    "dict_lookup_get": [(7, f"{DSPARK}|{EAGLE3}", "dict-lookup", "review")],
    "dict_lookup_subscript": [(19, f"{DFLASH}|{DSPARK}|{EAGLE3}", "dict-lookup", GF)],
    "eagle3_table_setter": [(11, f"{DFLASH}|{EAGLE3}", "variable", GF)],
    "specforge_hook_table": [(31, f"{DFLASH}|{DSPARK}|{EAGLE3}", "variable", GF)],
    "offline_capture_table": [
        (23, EAGLE3, "direct", "none"),
        (32, f"{DFLASH}|{DSPARK}|{EAGLE3}", "variable", "guard"),
    ],
    "eagle3": [
        (8, EAGLE3, "direct", "none"),
        (9, EAGLE3, "direct", "none"),
        (10, EAGLE3, "direct", "none"),
    ],
    "eagle3_next_to_dflash": [(11, EAGLE3, "direct", "none"), (13, DFLASH, "direct", "fallback")],
    "eagle3_only_no_logging": [
        (9, EAGLE3, "direct", "none"),
        (10, EAGLE3, "getattr", "none"),
        (12, EAGLE3, "loop", "none"),
    ],
    "expects_error_context": [
        (13, DSPARK, "direct", "none"),
        (15, DFLASH, "direct", "none"),
        (16, DSPARK, "direct", GF),
        (24, DFLASH, "direct", "none"),
    ],
    "existing_logger_alias": [(10, DSPARK, "direct", GF)],
    "expression_call": [
        (7, DSPARK, "direct", "review"),
        (11, DFLASH, "direct", "review"),
        (16, DSPARK, "direct", "review"),
    ],
    "getattr_call": [(8, DSPARK, "getattr", GF)],
    "getattr_variable": [(12, DSPARK, "variable", GF)],
    "guarded_by_else": [(10, DSPARK, "direct", "fallback"), (19, DFLASH, "direct", "fallback")],
    "hasattr_compound": [(8, DSPARK, "direct", "fallback"), (13, DFLASH, "direct", GF)],
    "hasattr_raise": [(9, DSPARK, "direct", "guard")],
    "inline_unset_expression": [(2, DSPARK, "direct", GF), (6, DFLASH, "direct", GF)],
    "instance_attributes": [
        (13, DSPARK, "direct", GF),
        (23, DSPARK, "direct", GF),
        (24, MSD, "direct", "fallback"),
    ],
    "keyword_ids": [(8, DFLASH, "direct", GF), (9, MSD, "direct", GF)],
    "literal_ids": [
        (7, DSPARK, "direct", "fallback"),
        (8, DFLASH, "direct", "fallback"),
        (9, MSD, "direct", "fallback"),
        (10, DSPARK, "direct", "fallback"),
    ],
    "literal_none": [(8, DSPARK, "direct", "review"), (12, DFLASH, "direct", "review")],
    "logger_placement": [(21, DSPARK, "direct", GF)],
    "loop_over_names": [(9, f"{DSPARK}|{EAGLE3}", "loop", GF)],
    "match_statement": [(9, DSPARK, "direct", GF), (11, EAGLE3, "direct", "none")],
    "mock_assertions": [],
    "module_level_script": [(8, DSPARK, "direct", GF)],
    "multiline_kwargs": [(8, DSPARK, "direct", GF), (15, DFLASH, "direct", GF)],
    "one_line_suite": [
        # ``enabled = True`` after the block claims capture, and ``enabled`` is returned: no
        # failure path can say capture is off, so the call is for review
        (7, DSPARK, "direct", "review"),
        (8, EAGLE3, "direct", "none"),
        (9, MSD, "direct", "fallback"),
        (14, DFLASH, "direct", GF),
    ],
    "or_default": [(10, DSPARK, "direct", GF), (15, DSPARK, "direct", "fallback")],
    "receiver_chain": [(21, DSPARK, "direct", GF)],
    "setter_on_self": [
        (17, DSPARK, "variable", GF),
        (21, f"{DFLASH}|{DSPARK}|{EAGLE3}|{MSD}", "variable", "review"),
    ],
    "third_party_imports_only": [(12, DFLASH, "direct", "fallback")],
    "try_other_exception": [(8, DSPARK, "direct", GF)],
    "unbound": [(10, DSPARK, "unbound", GF)],
}


def test_every_fixture_has_expectations():
    assert sorted(EXPECTED) == sorted(case.name for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_fixture_call_sites(case):
    module = cst.parse_module(case.before)
    sites = find_call_sites(module, case.name, case.options().hooks)
    found = [
        (site.line, site.hook, site.shape.value, ",".join(a.value for a in site.actions))
        for site in sites
    ]
    assert found == EXPECTED[case.name]


def sites(code: str, hooks: HookSet | None = None):
    module = cst.parse_module(textwrap.dedent(code))
    return find_call_sites(module, "t.py", hooks or HookSet())


def only(code: str, hooks: HookSet | None = None):
    (site,) = sites(code, hooks)
    return site


def test_position_is_one_based_and_fields_are_filled():
    site = only("""
        def main(model, args):
            model.set_dspark_layers_to_capture(args.capture_layers)
        """)
    assert (site.path, site.line, site.column) == ("t.py", 3, 5)
    assert site.hook == DSPARK and site.shape is Shape.DIRECT
    assert site.ids_source == "args.capture_layers"
    assert site.risks == (Risk.MAYBE_NONE, Risk.PP_UNSUPPORTED, Risk.PP_SILENT)
    assert site.actions == (Action.GUARD, Action.FALLBACK)
    assert not site.guarded and not site.handles_not_implemented


@pytest.mark.parametrize(
    "code",
    [
        "def f(model, ids=None):\n    model.set_dspark_layers_to_capture(ids)\n",
        "from typing import Optional\n"
        "def f(model, ids: Optional[list[int]]):\n    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, ids: list[int] | None):\n    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, ids: 'Union[list[int], None]'):\n    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, ids: typing.Union[list, None]):\n    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, args):\n    model.set_dspark_layers_to_capture(args.layers)\n",
        "def f(model, cfg):\n    model.set_dspark_layers_to_capture(cfg.layers)\n",
        "def f(self):\n    self.model.set_dspark_layers_to_capture(self.server_args.layers)\n",
        "def f(model, a, cfg):\n    ids = a.x or cfg.y\n    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, d):\n    ids = d.get('layers')\n    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, d):\n    ids = getattr(d, 'layers', None)\n"
        "    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, flag):\n    ids = None\n    if flag:\n        ids = [1]\n"
        "    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model):\n    ids: list[int] | None = load()\n    model.set_dspark_layers_to_capture(ids)\n",
        "def f(model, flag):\n    ids = [1] if flag else None\n"
        "    model.set_dspark_layers_to_capture(ids)\n",
        "LAYERS = None\ndef f(model):\n    model.set_dspark_layers_to_capture(LAYERS)\n",
    ],
)
def test_maybe_none_ids_are_guarded(code):
    site = only(code)
    assert Risk.MAYBE_NONE in site.risks
    assert site.actions == (Action.GUARD, Action.FALLBACK)


@pytest.mark.parametrize(
    "ids",
    ["[1, 2]", "(1, 2)", "list(range(3))", "layer_ids", "self.layers", "DEFAULT", "a or [1]"],
)
def test_ids_that_are_not_none_are_not_guarded(ids):
    code = f"DEFAULT = [3]\ndef f(model, layer_ids, a):\n    model.set_dspark_layers_to_capture({ids})\n"
    site = only(code)
    assert Risk.MAYBE_NONE not in site.risks
    assert site.actions == (Action.FALLBACK,)


def test_literal_none_and_missing_ids_are_for_review():
    for call in (
        "set_dspark_layers_to_capture(None)",
        "set_msd_layers_to_capture()",
        "set_dflash_layers_to_capture(layer_ids=None)",
    ):
        site = only(f"def f(model):\n    model.{call}\n")
        assert site.risks[0] is Risk.LITERAL_NONE
        assert site.actions == (Action.REVIEW,)
        assert site.note


def test_eagle3_is_never_guarded_and_never_raises_under_pp():
    # No EAGLE3 setter of SGLang 0.5.18-0.5.23 raises NotImplementedError under PP.
    site = only("def f(model, ids=None):\n    model.set_eagle3_layers_to_capture(None)\n")
    # Its setters return early on non-last PP ranks: a risk reported, nothing to rewrite.
    assert site.risks == (Risk.PP_SILENT,)
    assert site.actions == (Action.NONE,)


def test_expression_level_calls_are_for_review():
    found = sites("""
        def f(model, ids=None):
            ok = model.set_dspark_layers_to_capture(ids)
            flag and model.set_dspark_layers_to_capture([1])
        """)
    assert [site.actions for site in found] == [(Action.REVIEW,)] * 2


def test_calls_sharing_a_line_are_rewritten_on_their_own_line():
    found = sites("""
        def f(model, ids=None):
            x = 1; model.set_dspark_layers_to_capture([2])
            if x: x = 2; model.set_dspark_layers_to_capture(ids); x = 3
        """)
    assert [site.actions for site in found] == [
        (Action.FALLBACK,),
        (Action.GUARD, Action.FALLBACK),
    ]


def test_ids_from_an_expression_with_a_call_are_bound_then_guarded():
    site = only("def f(model, d):\n    model.set_dspark_layers_to_capture(d.get('x'))\n")
    assert site.actions == (Action.GUARD, Action.FALLBACK)


@pytest.mark.parametrize(
    "code, shape",
    [
        ("m.set_dspark_layers_to_capture(ids)", Shape.DIRECT),
        ("self.model_runner.model.set_dspark_layers_to_capture(ids)", Shape.DIRECT),
        ("get_model().set_dspark_layers_to_capture(ids)", Shape.DIRECT),
        ("models[0].set_dspark_layers_to_capture(ids)", Shape.DIRECT),
        ("TARGET_MODEL.set_dspark_layers_to_capture(ids)", Shape.DIRECT),
        ("KimiLinearForCausalLM.set_dspark_layers_to_capture(m, ids)", Shape.UNBOUND),
        ("sglang.models.KimiLinear.set_dspark_layers_to_capture(m, ids)", Shape.UNBOUND),
        ("type(m).set_dspark_layers_to_capture(m, ids)", Shape.UNBOUND),
        ("m.__class__.set_dspark_layers_to_capture(m, ids)", Shape.UNBOUND),
        ("getattr(m, 'set_dspark_layers_to_capture')(ids)", Shape.GETATTR),
        ("getattr(m, '' 'set_dspark_layers_to_capture')(ids)", Shape.GETATTR),
        ("getattr(m, {'dspark': 'set_dspark_layers_to_capture'}[method])(ids)", Shape.DICT_LOOKUP),
        (
            "getattr(m, {'dspark': 'set_dspark_layers_to_capture'}.get(method))(ids)",
            Shape.DICT_LOOKUP,
        ),
    ],
)
def test_call_shapes(code, shape):
    site = only(f"def f(m, ids=None, method='dspark'):\n    {code}\n")
    assert site.shape is shape
    assert site.hook == DSPARK
    assert site.ids_source == "ids"
    assert Action.GUARD in site.actions


@pytest.mark.parametrize(
    "literal",
    ["'set_dspark_' 'layers_to_capture'", "'set_dspark_layers\\x5fto_capture'"],
)
def test_hook_names_count_only_when_spelled_out_in_one_literal(literal):
    # The contract that makes a text search a safe prefilter (codemods.sources.prefilter).
    assert sites(f"def f(m, ids=None):\n    getattr(m, {literal})(ids)\n") == []


def test_variable_shapes():
    found = sites("""
        def f(model, ids=None):
            setter = getattr(model, "set_dspark_layers_to_capture", None)
            bound = model.set_dflash_layers_to_capture
            name = "set_msd_layers_to_capture"
            fetched = getattr(model, name)
            if callable(setter):
                setter(ids)
            bound([1])
            fetched([2])
        """)
    assert [(s.hook, s.shape) for s in found] == [
        (DSPARK, Shape.VARIABLE),
        (DFLASH, Shape.VARIABLE),
        (MSD, Shape.VARIABLE),
    ]


def test_loop_over_a_named_tuple_of_hooks():
    site = only("""
        HOOKS = ("set_eagle3_layers_to_capture", "set_dspark_layers_to_capture")

        def f(model, ids):
            for name in HOOKS:
                getattr(model, name)(ids)
        """)
    assert site.shape is Shape.LOOP
    assert site.hook == f"{DSPARK}|{EAGLE3}"


def test_multiline_call_with_keyword_ids_beside_other_keywords():
    site = only("""
        def f(model, args):
            model.set_dspark_layers_to_capture(
                capture_hc=True,
                layer_ids=args.layers,
            )
        """)
    assert site.ids_source == "args.layers"
    assert site.line == 3


def test_guarded_contexts():
    found = sites("""
        def f(model, args, ok):
            if args.layers:
                model.set_dspark_layers_to_capture(args.layers)
            if ok and args.layers is not None:
                model.set_dspark_layers_to_capture(args.layers)
            if not args.layers:
                pass
            else:
                model.set_dspark_layers_to_capture(args.layers)
            if len(args.layers) > 0:
                model.set_dspark_layers_to_capture(list(args.layers))
            while args.layers:
                model.set_dspark_layers_to_capture(args.layers)
            model.set_dspark_layers_to_capture(args.layers) if args.layers else None

        def g(model, ids=None):
            assert ids
            model.set_dspark_layers_to_capture(ids)

        def h(model, ids=None):
            if ids is None or len(ids) == 0:
                return
            with open("x"):
                model.set_dspark_layers_to_capture(ids)
        """)
    assert len(found) == 8
    assert all(site.guarded for site in found)
    assert all(Risk.MAYBE_NONE not in site.risks for site in found)


def test_checks_that_do_not_guard():
    found = sites("""
        def f(model, args, other):
            if other:
                model.set_dspark_layers_to_capture(args.layers)
            if args.layers or other:
                model.set_dspark_layers_to_capture(args.layers)
            if args.layers:
                pass
            model.set_dspark_layers_to_capture(args.layers)
            if not args.layers:
                print("unset")
            model.set_dspark_layers_to_capture(args.layers)

        def g(model, args):
            if not args.layers:
                return

            def inner():
                model.set_dspark_layers_to_capture(args.layers)
        """)
    assert len(found) == 5
    assert not any(site.guarded for site in found)


def test_calls_behind_hasattr_and_in_try_are_found():
    found = sites("""
        def f(model, args):
            if not hasattr(model, "set_dspark_layers_to_capture"):
                raise TypeError("no hook")
            try:
                model.set_dspark_layers_to_capture(args.layers)
            except NotImplementedError:
                pass
            if hasattr(model, "set_dspark_layers_to_capture") and callable(model.set_dspark_layers_to_capture):
                model.set_dspark_layers_to_capture([1])
        """)
    assert [site.handles_not_implemented for site in found] == [True, False]
    # the code raises without the hook (required) but its handler goes on (optional):
    # conflicting signs, left for review
    assert found[0].actions == (Action.REVIEW,) and "conflicting signs" in found[0].note


def test_try_handler_kinds():
    def handled(handler: str) -> bool:
        code = f"def f(m):\n    try:\n        m.{DSPARK}([1])\n    {handler}\n        pass\n"
        return only(code).handles_not_implemented

    assert handled("except NotImplementedError:")
    assert handled("except (KeyError, NotImplementedError) as e:")
    assert handled("except Exception:")
    assert handled("except:")
    assert handled("except RuntimeError:")
    assert not handled("except ValueError:")
    assert not handled("except (KeyError, AttributeError):")
    code = f"def f(m):\n    try:\n        pass\n    except Exception:\n        m.{DSPARK}([1])\n"
    assert not only(code).handles_not_implemented


def test_excluded_definitions_delegation_strings_and_mocks():
    found = sites("""
        import unittest.mock as mock

        NAMES = ["set_dspark_layers_to_capture"]
        DOC = "call set_dspark_layers_to_capture(ids) first"

        class Wrapper:
            def set_dspark_layers_to_capture(self, layer_ids):
                self.language_model.set_dspark_layers_to_capture(layer_ids)

            def set_eagle3_layers_to_capture(self, layer_ids=None):
                return getattr(self.inner, "set_eagle3_layers_to_capture")(layer_ids)

            def set_msd_layers_to_capture(self, layer_ids):
                super().set_msd_layers_to_capture(layer_ids)

        def test_it():
            target = mock.MagicMock()
            target.set_dspark_layers_to_capture.assert_called_once_with([1])
            assert target.set_dspark_layers_to_capture.called
            target.set_dspark_layers_to_capture.reset_mock()
            hasattr(target, "set_dspark_layers_to_capture")
            mock.patch.object(Wrapper, "set_dspark_layers_to_capture")
            target.assert_has_calls([mock.call.set_dspark_layers_to_capture([1])])
            target.assert_has_calls([call.draft.set_dspark_layers_to_capture([1])])
            print("set_dspark_layers_to_capture")
        """)
    assert found == []


def test_a_hook_forwarding_to_another_hook_is_delegation():
    code = """
        class M:
            def set_dflash_layers_to_capture(self, layer_ids):
                self.set_dspark_layers_to_capture(layer_ids)

            def enable(self, layer_ids=None):
                self.set_dspark_layers_to_capture(layer_ids)
        """
    (site,) = sites(code)
    assert site.line == 7 and site.actions == (Action.GUARD, Action.FALLBACK)


def test_user_added_hooks():
    code = "def f(m, args):\n    m.set_medusa_layers_to_capture(args.heads)\n"
    assert sites(code) == []
    site = only(code, HookSet.with_extra(["set_medusa_layers_to_capture"]))
    assert site.hook == "set_medusa_layers_to_capture"
    assert site.actions == (Action.GUARD, Action.FALLBACK)


def test_python_310_syntax():
    found = sites("""
        def f(model, method: str, ids: list[int] | None = None):
            match method:
                case "dspark" if ids:
                    model.set_dspark_layers_to_capture(ids)
                case {"layers": [*layers]}:
                    model.set_dspark_layers_to_capture(layers)
        """)
    assert len(found) == 2


def test_node_level_api_returns_the_call_nodes():
    wrapper = MetadataWrapper(
        cst.parse_module("def f(m, args):\n    m.set_dspark_layers_to_capture(args.x)\n")
    )
    (found,) = find_calls(wrapper, "t.py")
    assert isinstance(found.call, cst.Call)
    assert found.statement is not None and found.statement.body[0].value is found.call
    assert found.ids_arg is found.call.args[0]
    assert cst.Module([]).code_for_node(found.ids_core) == "args.x"
    assert found.rejects_none
    assert [hook.name for hook in found.hooks] == [DSPARK]


def test_mentions_hooks_text_check():
    assert mentions_hooks(b"x.set_dspark_layers_to_capture(1)")
    assert not mentions_hooks("print('hello')")
    assert mentions_hooks(
        "m.set_medusa_layers_to_capture()", HookSet.with_extra(["set_medusa_layers_to_capture"])
    )


def test_instance_attributes_set_from_optional_values():
    found = sites("""
        class Runner:
            retries: int = 3
            extra: list[int] | None = None

            def __init__(self, model, layer_ids=None, fixed=(1, 2)):
                self.model = model
                self.layer_ids = layer_ids
                self.fixed = list(fixed)
                self.loaded: list[int] | None = load()

            def enable(self):
                self.model.set_dspark_layers_to_capture(self.layer_ids)
                self.model.set_dspark_layers_to_capture(self.fixed)
                self.model.set_dspark_layers_to_capture(self.loaded)
                self.model.set_dspark_layers_to_capture(self.extra)
                self.model.set_dspark_layers_to_capture(other.layer_ids)
        """)
    assert [Risk.MAYBE_NONE in site.risks for site in found] == [True, False, True, True, False]


def test_walrus_check_guards():
    site = only("""
        def f(model, args):
            if layers := args.capture_layers:
                model.set_dspark_layers_to_capture(layers)
        """)
    assert site.guarded
    assert site.actions == (Action.FALLBACK,)


def test_setter_stored_on_self_and_called_in_another_method():
    site = only("""
        class CaptureHook:
            def __init__(self, model):
                self._setter = getattr(model, "set_dspark_layers_to_capture", None)
                self._other = model.forward

            def enable(self, layer_ids=None):
                if self._setter is not None:
                    self._setter(layer_ids)
                self._other(layer_ids)
        """)
    assert (site.line, site.shape, site.hook) == (9, Shape.VARIABLE, DSPARK)
    assert site.actions == (Action.GUARD, Action.FALLBACK)


def test_setter_name_spelled_by_an_f_string():
    site = only(
        """
        def enable(model, method, layer_ids=None):
            getattr(model, f"set_{method}_layers_to_capture")(layer_ids)
        """
    )
    assert site.shape is Shape.GETATTR
    assert site.hook == "|".join(sorted([DFLASH, DSPARK, EAGLE3, MSD]))
    # It may reach EAGLE3 (None: default layers) and no name holds the hook name to test.
    assert site.actions == (Action.REVIEW,)
    assert EAGLE3 in site.note and "default layers" in site.note
    assert sites('def f(m):\n    getattr(m, f"get_{x}_layers")(1)\n') == []
