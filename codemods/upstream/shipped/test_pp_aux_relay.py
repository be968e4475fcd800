"""The PP relay of aux hidden states, and which model classes may use it.

* relay: decoder stacks of a 6-layer model split over 2 and 3 stages hand their captures
  on with ``pp_aux_outgoing``; the last stage's ``pp_aux_collect`` returns exactly
  the captures of a single-stage run, in layer order, as the collector's own kind: views
  of the received entry in an eager forward, copied out of it once while a CUDA graph is
  captured (its buffer is reused); an ``AuxHiddenStatePacker`` the last stage seeds
  with ``pp_aux_seed`` right after making it holds them all, each copied once, and is
  returned as it is; on a non-last stage ``pp_aux_seed`` returns a packer sized for
  the captures it hands on, seeded the same way, whose buffer is the entry it sends (no
  concatenation); a missing or narrow entry raises naming the layers;
  ``pp_aux_proxy_hidden_size`` is the width each stage receives.
* opt-in: a model class relays a capture method only where it declares it in its own
  body (``pp_aux_relay_methods``), or inherits it without defining ``__init__``,
  ``forward`` or the method's hook (DSPARK, on a class without a DSPARK hook: where it
  relays DFLASH, whose hook the runner calls for it); a registered subclass of a
  declaring class with its own constructor, forward or hook is answered by
  ``check_pipeline_parallel_compat`` (EAGLE3 with PP, resolved as the server resolves
  it; the Transformers backend is refused) by the stack its hook sets up: admitted where
  the hook's table lists it, else refused naming the class, the method and the reason;
  a subclass that builds its own stack is refused by
  ``configure_aux_hidden_state_capture`` under PP, which names the class and the method.
* sizing: the runner finds the relay of a stack nested in the model; a model that still
  defines ``get_pp_proxy_dspark_hidden_size`` (out of tree) is sized by it, with a
  deprecation warning.
* guard: where the runner configures a capture, right after its hook ran under PP, a
  model whose hook gave its decoder stack a relay is admitted by that stack (the class
  that defines its ``forward`` declares the method, and the stack still runs that
  ``forward``), whatever class wraps it, and refused by name with the reason otherwise;
  a model whose hook gave no stack a relay is asked by its own class; with one stage
  every model is configured.
"""

import re
import unittest
from types import SimpleNamespace
from unittest import mock

import torch
from torch import nn

from sglang.test.pp_aux_capture_family_models import (
    pp_server_args,
    stub_gpu_only_packages,
)

stub_gpu_only_packages()

from sglang.srt.layers.aux_hidden_states import (  # noqa: E402
    AuxHiddenStateList,
    AuxHiddenStatePacker,
    pp_aux_collect,
    pp_aux_outgoing,
    pp_aux_proxy_hidden_size,
    pp_aux_seed,
    relays_pp_aux_capture,
    set_pp_aux_capture,
)
from sglang.test.ci.ci_register import register_cpu_ci  # noqa: E402
from sglang.test.test_utils import CustomTestCase  # noqa: E402

register_cpu_ci(est_time=60, suite="base-a-test-cpu")

NUM_LAYERS = 6
HIDDEN = 4
TOKENS = 3
#: Stage bounds of 2 and 3 stages over the 6 layers.
SPLITS = {2: [(0, 3), (3, 6)], 3: [(0, 2), (2, 4), (4, 6)]}
HOOKS = {
    "EAGLE3": "set_eagle3_layers_to_capture",
    "DFLASH": "set_dflash_layers_to_capture",
    "DSPARK": "set_dspark_layers_to_capture",
}


class _Stack(nn.Module):
    """A decoder stack that runs layers ``[start, end)`` and captures at ``ids``."""

    def __init__(self, start, end, ids):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=HIDDEN, num_hidden_layers=NUM_LAYERS)
        self.layers = nn.ModuleList(nn.Identity() for _ in range(NUM_LAYERS))
        self.start_layer, self.end_layer = start, end
        self.layers_to_capture = list(ids)


def _group(rank, size):
    return SimpleNamespace(world_size=size, is_last_rank=rank == size - 1)


def _capture(layer):
    """What layer ``layer`` captures: distinct per layer, token and feature."""
    return (
        torch.arange(TOKENS * HIDDEN, dtype=torch.float32).view(TOKENS, HIDDEN)
        + 100 * layer
    )


def _run(size, ids, drop=False):
    """The last stage's collected captures and each stage's received width."""
    incoming, widths = None, []
    for rank, (start, end) in enumerate(SPLITS[size]):
        stack = _Stack(start, end, ids)
        set_pp_aux_capture(stack, _group(rank, size), hidden_size=HIDDEN)
        widths.append(pp_aux_proxy_hidden_size(stack))
        local = AuxHiddenStateList(_capture(i) for i in sorted(ids) if start <= i < end)
        if rank < size - 1:
            entry = pp_aux_outgoing(stack, local, incoming)
            incoming = (
                {} if drop else {"hidden_states": torch.zeros(TOKENS, HIDDEN), **entry}
            )
        else:
            return pp_aux_collect(stack, local, incoming), incoming, widths


class TestPPAuxRelay(CustomTestCase):
    def test_last_stage_gets_the_single_stage_captures_in_layer_order(self):
        for ids in ([0, 2, 3, 5], [5, 0], [1]):
            reference = [_capture(i) for i in sorted(ids)]
            for size in SPLITS:
                with self.subTest(ids=ids, pp=size):
                    collected, incoming, widths = _run(size, ids)
                    self.assertIsInstance(collected, AuxHiddenStateList)
                    self.assertEqual(len(collected), len(reference))
                    for got, want in zip(collected, reference):
                        self.assertTrue(torch.equal(got, want))
                    received = [
                        sum(i < start for i in ids) * HIDDEN
                        for start, _ in SPLITS[size]
                    ]
                    self.assertEqual(widths, received)
                    # Eager: the received captures are views of the fresh entry.
                    if "aux_hidden_states" in incoming:
                        entry = incoming["aux_hidden_states"]
                        self.assertEqual(collected[0].data_ptr(), entry.data_ptr())

    def test_a_captured_cuda_graph_copies_the_received_captures_out(self):
        ids = [0, 2, 3, 5]
        reference = [_capture(i) for i in ids]
        for size in SPLITS:
            with (
                self.subTest(pp=size),
                mock.patch("torch.cuda.is_available", return_value=True),
                mock.patch("torch.cuda.is_current_stream_capturing", return_value=True),
            ):
                collected, incoming, _ = _run(size, ids)
                entry = incoming["aux_hidden_states"]
                storage = entry.untyped_storage().data_ptr()
                received = sum(i < SPLITS[size][-1][0] for i in ids)
                for got in collected[:received]:
                    self.assertNotEqual(got.untyped_storage().data_ptr(), storage)
                # The runner's static buffer is overwritten by the next replay.
                entry.zero_()
                for got, want in zip(collected, reference):
                    self.assertTrue(torch.equal(got, want))

    def test_a_packing_stage_hands_its_seeded_packer_on_without_a_copy(self):
        ids = [0, 2, 3, 5]
        reference = torch.cat([_capture(i) for i in ids], dim=-1)
        for size in SPLITS:
            with self.subTest(pp=size):
                incoming = None
                for rank, (start, end) in enumerate(SPLITS[size]):
                    stack = _Stack(start, end, ids)
                    set_pp_aux_capture(stack, _group(rank, size), hidden_size=HIDDEN)
                    own = [i for i in ids if start <= i < end]
                    made = AuxHiddenStatePacker(len(ids))
                    packer = pp_aux_seed(stack, made, incoming)
                    for i in own:
                        packer.append(_capture(i))
                    if rank < size - 1:
                        # Sized for what it hands on, not for every capture id.
                        self.assertEqual(len(packer), sum(i < end for i in ids))
                        packer.finalize()
                    else:
                        self.assertIs(packer, made)
                    if rank == size - 1:
                        break
                    entry = pp_aux_outgoing(stack, packer, incoming)[
                        "aux_hidden_states"
                    ]
                    # The packer's buffer is the entry: no concatenation.
                    self.assertEqual(entry.data_ptr(), packer.finalize().data_ptr())
                    self.assertTrue(torch.equal(entry, reference[:, : entry.shape[-1]]))
                    incoming = {
                        "hidden_states": torch.zeros(TOKENS, HIDDEN),
                        "aux_hidden_states": entry,
                    }
                self.assertTrue(torch.equal(packer.finalize(), reference))

    def test_single_stage_leaves_the_captures_alone(self):
        stack = _Stack(0, NUM_LAYERS, [1, 4])
        set_pp_aux_capture(stack, _group(0, 1), hidden_size=HIDDEN)
        captures = [_capture(1), _capture(4)]
        self.assertIs(pp_aux_collect(stack, captures, None), captures)
        self.assertEqual(pp_aux_outgoing(stack, captures, None), {})
        self.assertEqual(pp_aux_proxy_hidden_size(stack), 0)

    def test_a_missing_or_narrow_entry_raises_naming_the_layers(self):
        with self.assertRaisesRegex(
            RuntimeError, r"captures of layers \[0, 2\] are missing"
        ):
            _run(2, [0, 2, 3, 5], drop=True)
        stack = _Stack(3, 6, [0, 2, 3, 5])
        set_pp_aux_capture(stack, _group(1, 2), hidden_size=HIDDEN)
        narrow = {"aux_hidden_states": _capture(0)}
        with self.assertRaisesRegex(RuntimeError, r"layers \[0, 2\] \(8 wide\)"):
            pp_aux_collect(stack, [_capture(3), _capture(5)], narrow)

    def test_the_last_stage_fills_its_own_packer_with_one_copy_per_capture(self):
        ids = [0, 2, 3, 5]
        reference = torch.cat([_capture(i) for i in ids], dim=-1)
        append = AuxHiddenStatePacker.append
        for size in SPLITS:
            with self.subTest(pp=size):
                _, incoming, _ = _run(size, ids)
                stack = _Stack(*SPLITS[size][-1], ids)
                set_pp_aux_capture(stack, _group(size - 1, size), hidden_size=HIDDEN)
                packer = AuxHiddenStatePacker(len(ids))
                with mock.patch.object(
                    AuxHiddenStatePacker, "append", autospec=True, side_effect=append
                ) as copies:
                    # Right after the packer is made, then the stage's own layers.
                    pp_aux_seed(stack, packer, incoming)
                    for i in ids:
                        if i >= stack.start_layer:
                            packer.append(_capture(i))
                    collected = pp_aux_collect(stack, packer, incoming)
                self.assertIs(collected, packer)
                self.assertEqual(copies.call_count, len(ids))
                self.assertTrue(torch.equal(packer.finalize(), reference))


class TestDeprecatedWidthMethod(CustomTestCase):
    def test_the_runner_sizes_from_the_relay_of_a_nested_stack(self):
        from sglang.srt.model_executor.model_runner_components import misc_utils

        # A VL model: its language model holds the stack the hook gave a relay.
        vl_model = nn.Module()
        vl_model.language_model = nn.Module()
        vl_model.language_model.model = _Stack(3, 6, [0, 2, 3, 5])
        set_pp_aux_capture(vl_model.language_model.model, _group(1, 2), hidden_size=5)
        resolve = misc_utils.resolve_pp_proxy_aux_hidden_size
        self.assertEqual(resolve(model=vl_model, pp_size=2, pp_rank=1), 2 * 5)

    def test_the_old_dspark_width_method_still_sizes_with_a_warning(self):
        from sglang.srt.model_executor.model_runner_components import misc_utils

        class OutOfTree(nn.Module):
            """A model loaded from SGLANG_EXTERNAL_MODEL_PACKAGE, written before the
            rename."""

            def get_pp_proxy_dspark_hidden_size(self):
                return 3 * HIDDEN

        resolve = misc_utils.resolve_pp_proxy_aux_hidden_size
        with self.assertLogs(misc_utils.logger, "WARNING") as logs:
            self.assertEqual(
                resolve(model=OutOfTree(), pp_size=2, pp_rank=1), 3 * HIDDEN
            )
        self.assertIn("get_pp_proxy_dspark_hidden_size is deprecated", logs.output[0])
        self.assertEqual(resolve(model=OutOfTree(), pp_size=2, pp_rank=0), 0)
        self.assertEqual(resolve(model=nn.Identity(), pp_size=2, pp_rank=1), 0)


def _registered():
    """Architecture -> class of every model SGLang registers."""
    from sglang.srt.models.registry import ModelRegistry

    return {
        arch: ModelRegistry.models[arch] for arch in ModelRegistry.get_supported_archs()
    }


def _declared(cls):
    """The class in ``cls``'s MRO that declares relay methods, and the methods."""
    for klass in cls.__mro__:
        if "pp_aux_relay_methods" in vars(klass):
            return klass, tuple(vars(klass)["pp_aux_relay_methods"])
    return None, ()


def _own_stack(cls, base, method):
    """``cls`` (below ``base``) defines ``__init__``, ``forward`` or the hook itself."""
    names = ("__init__", "forward", HOOKS[method])
    return any(
        name in vars(klass)
        for klass in cls.__mro__[: cls.__mro__.index(base)]
        for name in names
    )


class TestPPAuxRelayOptIn(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.registered = _registered()
        cls.declaring = {
            arch: model_cls
            for arch, model_cls in cls.registered.items()
            if "pp_aux_relay_methods" in vars(model_cls)
        }
        #: (arch, class, method): a registered subclass of a class that relays the
        #: method, with its own stack or hook and no declaration of its own.
        cls.own_stack = []
        for arch, model_cls in sorted(cls.registered.items()):
            base, methods = _declared(model_cls)
            if base is None or base is model_cls:
                continue
            for method in methods:
                if _own_stack(model_cls, base, method):
                    cls.own_stack.append((arch, model_cls, method))

    def test_the_declaration_covers_its_class_only_while_the_stack_is_the_same(self):
        self.assertTrue(self.declaring)
        for arch, model_cls in sorted(self.declaring.items()):
            for method in HOOKS:
                # The runner configures a DSPARK target without a DSPARK hook through
                # its DFLASH hook: DFLASH's declaration answers for DSPARK there.
                asked = method
                if method == "DSPARK" and not hasattr(model_cls, HOOKS["DSPARK"]):
                    asked = "DFLASH" if hasattr(model_cls, HOOKS["DFLASH"]) else method
                declared = asked in vars(model_cls)["pp_aux_relay_methods"]
                with self.subTest(arch=arch, method=method):
                    self.assertEqual(relays_pp_aux_capture(model_cls, method), declared)
        for arch, model_cls, method in self.own_stack:
            with self.subTest(arch=arch, method=method):
                self.assertFalse(relays_pp_aux_capture(model_cls, method))

    def test_an_inheriting_subclass_is_answered_by_its_stack_at_validation(self):
        from sglang.srt.arg_groups import validation_hook
        from sglang.srt.arg_groups.overrides import resolving_view
        from sglang.srt.arg_groups.validation_hook import check_pipeline_parallel_compat

        eagle3 = sorted(
            a for a, c in self.declaring.items() if relays_pp_aux_capture(c, "EAGLE3")
        )
        self.assertTrue(eagle3)
        for arch in eagle3:
            with self.subTest(arch=arch):
                check_pipeline_parallel_compat(resolving_view(pp_server_args(arch)))
        transformers = pp_server_args(eagle3[0], model_impl="transformers")
        with self.assertRaisesRegex(
            ValueError,
            r"^Transformers\w* cannot capture EAGLE3 aux hidden states with "
            r"--pp-size 2: the Transformers backend has no capture hooks$",
        ):
            check_pipeline_parallel_compat(resolving_view(transformers))
        # A subclass with its own constructor, forward or hook is answered by the
        # stack its hook sets up: listed in the hook's table where the patch resolved
        # that stack to one that relays, refused otherwise.
        table = getattr(validation_hook, "_PP_AUX_RELAY_METHODS", {})
        own = [(a, c) for a, c, m in self.own_stack if m == "EAGLE3"]
        for arch, model_cls in own:
            with self.subTest(arch=arch):
                if "EAGLE3" in table.get(arch, ()):
                    check_pipeline_parallel_compat(resolving_view(pp_server_args(arch)))
                    continue
                with self.assertRaisesRegex(
                    ValueError,
                    f"^{model_cls.__name__} cannot capture EAGLE3 aux hidden states "
                    "with --pp-size 2: its decoder stack is not patched to relay "
                    "captures across pipeline stages$",
                ):
                    check_pipeline_parallel_compat(resolving_view(pp_server_args(arch)))

    def test_an_inheriting_subclass_with_its_own_stack_is_refused_at_runtime(self):
        from sglang.srt.model_executor.model_runner_components import (
            attention_backend_setup as setup,
        )

        method, base = next(
            (m, c)
            for c in self.declaring.values()
            for m in vars(c)["pp_aux_relay_methods"]
            if m in ("EAGLE3", "DFLASH")
        )

        class OwnStack(base):
            """Inherits the relaying class and its declaration, builds its own stack."""

            def __init__(self):
                nn.Module.__init__(self)

        class SameStack(base):
            """Keeps the base's ``__init__``, ``forward`` and hooks."""

        self.assertTrue(relays_pp_aux_capture(SameStack, method))
        eagle3 = method == "EAGLE3"
        configure = dict(
            model=OwnStack(),
            eagle_use_aux_hidden_state=eagle3,
            eagle_aux_hidden_state_layer_ids=[1],
            dflash_use_aux_hidden_state=not eagle3,
            dflash_target_layer_ids=[1],
            is_dspark=False,
        )
        with mock.patch.object(OwnStack, HOOKS[method]):
            # The recorder gives no stack a relay: the class itself is asked.
            with self.assertRaisesRegex(
                NotImplementedError,
                f"^OwnStack's decoder stack does not relay {method}'s ",
            ):
                setup.configure_aux_hidden_state_capture(**configure, pp_size=2)
        with mock.patch.object(OwnStack, HOOKS[method]) as hook:
            # As the runner calls it with one stage, and as callers without pp_size do.
            setup.configure_aux_hidden_state_capture(**configure, pp_size=1)
            setup.configure_aux_hidden_state_capture(**configure)
            self.assertEqual(hook.call_args_list, [mock.call([1])] * 2)


# @@if setup_guard
def _configure_capture(model, method, pp_size):
    """Configure ``method``'s capture of ``model`` the way the runner does."""
    from sglang.srt.model_executor.model_runner_components import (
        attention_backend_setup as setup,
    )

    setup.configure_aux_hidden_state_capture(
        model=model,
        eagle_use_aux_hidden_state=method == "EAGLE3",
        eagle_aux_hidden_state_layer_ids=[1],
        dflash_use_aux_hidden_state=method != "EAGLE3",
        dflash_target_layer_ids=[1],
        is_dspark=method == "DSPARK",
        pp_size=pp_size,
    )


# @@else setup_guard
# @@if runner_capture_method
def _configure_capture(model, method, pp_size):
    """Configure ``method``'s capture of ``model`` the way the runner does."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    runner = SimpleNamespace(
        model=model,
        pp_size=pp_size,
        eagle_use_aux_hidden_state=method == "EAGLE3",
        eagle_aux_hidden_state_layer_ids=[1],
        dflash_use_aux_hidden_state=method == "DFLASH",
        dflash_target_layer_ids=[1],
    )
    ModelRunner.init_aux_hidden_state_capture(runner)


# @@end runner_capture_method
# @@end setup_guard
# @@if setup_guard
GUARDED = ("EAGLE3", "DFLASH", "DSPARK")
# @@else setup_guard
GUARDED = ("EAGLE3", "DFLASH")
# @@end setup_guard


class TestRuntimeGuard(CustomTestCase):
    def test_capture_under_pp_needs_a_class_that_relays_the_method(self):
        for method in GUARDED:
            hook = HOOKS[method]
            relays = type("Relays", (nn.Module,), {"pp_aux_relay_methods": (method,)})
            silent = type("Silent", (nn.Module,), {})
            for cls in (relays, silent):
                with self.subTest(method=method, model=cls.__name__):
                    with mock.patch.object(cls, hook, create=True) as called:
                        _configure_capture(cls(), method, pp_size=1)
                        called.assert_called_once_with([1])
                    with mock.patch.object(cls, hook, create=True) as called:
                        if cls is silent:
                            with self.assertRaisesRegex(
                                NotImplementedError,
                                f"^Silent's decoder stack does not relay {method}'s ",
                            ):
                                _configure_capture(cls(), method, pp_size=2)
                        else:
                            _configure_capture(cls(), method, pp_size=2)
                        called.assert_called_once_with([1])

    def test_capture_under_pp_is_admitted_by_the_stack_the_hook_relays_to(self):
        def forward(self):
            return None

        def hook(self, ids):
            # What a rewritten hook does: it gives its decoder stack a relay.
            self.model.pp_aux_relay = None

        for method in GUARDED:
            relaying = type(
                "RelayingStack",
                (nn.Module,),
                {"pp_aux_relay_methods": (method,), "forward": forward},
            )
            other = type(
                "OtherStack",
                (nn.Module,),
                {"pp_aux_relay_methods": (), "forward": forward},
            )
            plain = type("PlainStack", (nn.Module,), {"forward": forward})
            # A subclass with a forward of its own no longer runs the relaying one.
            overriding = type("OverridingStack", (relaying,), {"forward": forward})
            for stack, reason in (
                (relaying, None),
                (relaying, "its forward is replaced on the instance"),
                (other, "OtherStack.forward relays no capture method"),
                (plain, "PlainStack.forward is not patched to relay captures"),
                (
                    overriding,
                    "OverridingStack.forward is not patched to relay captures",
                ),
            ):
                # The wrapper declares nothing: only its stack is asked.
                wrapper = type("Wrapper", (nn.Module,), {HOOKS[method]: hook})
                model = wrapper()
                model.model = stack()
                if reason == "its forward is replaced on the instance":
                    model.model.forward = lambda: None
                with self.subTest(method=method, stack=stack.__name__, reason=reason):
                    if reason is None:
                        _configure_capture(model, method, pp_size=2)
                        continue
                    with self.assertRaisesRegex(
                        NotImplementedError,
                        f"^Wrapper's decoder stack {stack.__name__} does not relay "
                        f"{method}'s aux hidden states across pipeline stages "
                        rf"\({re.escape(reason)}",
                    ):
                        _configure_capture(model, method, pp_size=2)


if __name__ == "__main__":
    unittest.main()
