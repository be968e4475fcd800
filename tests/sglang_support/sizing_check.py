"""Drive the PP proxy buffers of an SGLang tree on CPU, one process, with the tree's own
allocation and copy functions (:class:`Buffers`).  Run with the tree on ``PYTHONPATH``
(see ``env.sglang_env``); each command prints one JSON line.

``sizing MODULE CLASS``: for 2- and 3-stage splits and several capture sets, every stage
of the real causal-LM class ``CLASS`` over a stand-in stack gets the relay the patched
capture hooks set up (``set_pp_aux_capture``); its width comes from
``misc_utils.resolve_pp_proxy_aux_hidden_size``; the real allocations
(``DecodeInputBuffers.create``, ``PrefillInputBuffers.create`` where it keeps proxy
buffers, the shared ``allocate_pp_proxy_tensors``) must hold the ``aux_hidden_states``
buffer as wide as the entry the previous stage really sends (``PPAuxRelay.outgoing``),
both replay loads (the registry's ``fill_from``, ``DecodeCudaGraphRunner.load_batch``'s
pre-planned branch) must copy the entry in, and the last stage's captures must equal
those made.  A tree without ``resolve_pp_proxy_aux_hidden_size`` is sized 0 and each
receiving stage is an error.  ``{"checks": [...], "errors": [...], "aux_buffers": N}``.

``warmup``: llama stages (``stages.stage_factory``; layers capturing at entry where the
stack's forward does, 0.5.22+) get their proxy buffers from
``BaseRunner._alloc_dummy_decode_buffers`` over a stand-in model runner whose width and
entry getters are the real ``ModelRunner`` ones: (a) the set must hold the entry with the
rows of ``hidden_states`` and the width the previous stage sends; (b) the stage runs on
the zero buffers as ``_dummy_run`` hands them over (sliced, cloned) and the last stage
hands on as many aux states as PP=1; (c) with the previous stage's handoff copied in, the
last stage equals PP=1.  ``{"checks", "errors", "aux_buffers", "dummy_forwards",
"equal_runs"}``.

``legacy``: an out-of-tree model written for the release's DSPARK relay (Kimi-Linear's
contract: ``get_pp_proxy_dspark_hidden_size``, the ``dspark_hidden_states`` entry):
``configure_aux_hidden_state_capture(..., is_dspark=True, pp_size=2)`` admits it
(``admitted``) and refuses it without the width method (``refused``); the runner's width
and entry getters for stage 1 of 2 (``width``, ``entry``; ``new_entry`` for a model sized
under the new name); the buffers of every allocation and of the dummy forward
(``buffers``, ``dummy``), the replay loads of what stage 0 sends (``refreshed``); the old
resolver and keyword (``old_resolver``, ``old_keyword``); SGLang's log records per call
(``warnings``).
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import sys
import types
from types import SimpleNamespace
from unittest import mock

import torch

NUM_LAYERS = 9
HIDDEN = 4
MAX_TOKENS = 16
AUX = "aux_hidden_states"
MODULES = dict(
    misc="sglang.srt.model_executor.model_runner_components.misc_utils",
    buffers="sglang.srt.model_executor.runner_utils.buffers",
    registry="sglang.srt.model_executor.cuda_graph_buffer_registry",
    base="sglang.srt.model_executor.runner.base_runner",
)


#: The keywords the allocations and the decode registry take that this check sets, with
#: the values of a CPU process with one rank per group; each call passes those its
#: release's signature has (:func:`_call`), those it does not set keep their defaults.
ARGS = dict(
    device=torch.device("cpu"),
    max_bs=MAX_TOKENS,
    max_num_token=MAX_TOKENS,
    max_num_tokens=MAX_TOKENS,
    max_hidden_tokens=MAX_TOKENS,
    hidden_size=HIDDEN,
    dtype=torch.float32,
    dp_size=1,
    num_dp_ranks=1,
    is_encoder_decoder=False,
    is_multimodal=False,
    require_mlp_tp_gather=False,
    seq_len_fill_value=1,
    encoder_len_fill_value=0,
    num_tokens_per_req=1,
    cache_loc_dtype=torch.int64,
    enable_mamba_track=False,
)


def _call(function, **overrides):
    """``function`` called with the keywords of :data:`ARGS` and ``overrides`` it takes
    (the signatures differ by release)."""
    parameters = inspect.signature(function).parameters
    return function(**{k: v for k, v in {**ARGS, **overrides}.items() if k in parameters})


class Buffers:
    """The real allocation and copy functions of the tree under test."""

    def __init__(self):
        for name, module in MODULES.items():
            setattr(self, name, importlib.import_module(module))
        self.decode_runner = importlib.import_module(
            "sglang.srt.model_executor.runner.decode_cuda_graph_runner"
        ).DecodeCudaGraphRunner
        self.proxy = importlib.import_module(
            "sglang.srt.model_executor.forward_batch_info"
        ).PPProxyTensors
        self.model_runner = importlib.import_module(
            "sglang.srt.model_executor.model_runner"
        ).ModelRunner
        # 0.5.21 keeps the shared allocation private; 0.5.18 has none.
        self.allocate = getattr(self.buffers, "allocate_pp_proxy_tensors", None) or getattr(
            self.buffers, "_allocate_pp_proxy_tensors", None
        )
        self.resolve = getattr(self.misc, "resolve_pp_proxy_aux_hidden_size", None)
        # What a CPU process has no server for: no DP/TP gather, no padding count.
        self.base.require_mlp_tp_gather = lambda *args: False
        for module in (self.buffers, self.base):
            if hasattr(module, "enable_num_token_non_padded"):
                module.enable_num_token_non_padded = lambda *args: False
        self.prefill_has_proxy = (
            "pp_size" in inspect.signature(self.buffers.PrefillInputBuffers.create).parameters
        )

    def width(self, outer, pp_size, pp_rank):
        if self.resolve is None:
            return 0
        return self.resolve(model=outer, pp_size=pp_size, pp_rank=pp_rank)

    def decode(self, pp_size, **sized):
        logits = torch.zeros(MAX_TOKENS, 8)
        create = self.buffers.DecodeInputBuffers.create
        return _call(create, next_token_logits_buffer=logits, pp_size=pp_size, **sized)

    def allocations(self, pp_size, pp_rank, **sized):
        """Proxy buffers (or None) of every allocation the graph runners use."""
        found = {"decode": self.decode(pp_size, **sized).pp_proxy_tensors}
        if self.prefill_has_proxy:
            create = self.buffers.PrefillInputBuffers.create
            first = pp_rank == 0
            prefill = _call(create, max_bs=4, pp_size=pp_size, is_first_pp_rank=first, **sized)
            found["prefill"] = prefill.pp_proxy_tensors
        if self.allocate is not None:
            found["shared"] = _call(self.allocate, **sized)
        return found

    def full_load(self, buffers, tokens, incoming):
        """The decode buffers after the registry's ``fill_from`` (a full replay load)."""
        registry = _call(self.registry.build_decode_registry, source=buffers)
        registry.fill_from(
            SimpleNamespace(),
            raw_bs=tokens,
            padded_bs=tokens,
            raw_num_tokens=tokens,
            padded_num_tokens=tokens,
            pp_proxy_tensors=self.proxy(dict(incoming)),
        )
        return buffers.pp_proxy_tensors

    def pre_planned_load(self, buffers, tokens, incoming):
        """The decode buffers after ``load_batch``'s pre-planned branch."""
        runner = mock.MagicMock()
        runner.buffers = buffers
        runner.raw_num_token = tokens
        runner.ragged_verify_mode = False
        runner.dllm_uses_input_embeds = False
        runner.dllm_input_preparation = None
        runner.enable_pdmux = False
        batch = SimpleNamespace(
            needs_forward_metadata_init=lambda: False,
            input_ids=torch.zeros(tokens, dtype=torch.int64),
            positions=torch.zeros(tokens, dtype=torch.int64),
            input_embeds=None,
        )
        self.decode_runner.load_batch(runner, batch, self.proxy(dict(incoming)))
        return buffers.pp_proxy_tensors

    def runner(self, model, pp_rank, pp_size):
        """A stand-in ``ModelRunner`` holding ``model`` whose width and entry getters are
        the real ones (0.5.21+ also name the entry the buffers are kept under)."""
        ps = SimpleNamespace(
            pp_size=pp_size, pp_rank=pp_rank, dp_size=1, num_dp_ranks=1, attn_dp_size=1
        )
        mr = SimpleNamespace(
            model=model,
            device=torch.device("cpu"),
            model_config=SimpleNamespace(
                hidden_size=HIDDEN,
                vocab_size=32,
                dtype=torch.float32,
                is_encoder_decoder=False,
                hf_config=SimpleNamespace(),
            ),
            server_args=SimpleNamespace(pp_size=pp_size),
            pp_size=pp_size,
            pp_rank=pp_rank,
            ps=ps,
            pp_group=SimpleNamespace(world_size=pp_size, rank_in_group=pp_rank),
            attn_backend=SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1),
            ngram_embedding_manager=SimpleNamespace(enabled=False, table=None),
            get_pp_proxy_topk_size=lambda: None,
            get_pp_proxy_residual_num_blocks=lambda: None,
        )
        for name in ("get_pp_proxy_aux_hidden_size", "get_pp_proxy_aux_entry"):
            getter = getattr(self.model_runner, name, None)
            if getter is not None:
                setattr(mr, name, types.MethodType(getter, mr))
        return mr

    def dummy(self, model, pp_rank, pp_size, max_bs=8):
        """``BaseRunner._alloc_dummy_decode_buffers`` (the buffers of the FlashInfer
        autotune and the DeepGEMM warm-up) over :meth:`runner`: the proxy buffers."""
        if hasattr(self.base, "get_parallel"):
            self.base.get_parallel = lambda: self.runner(model, pp_rank, pp_size).ps
        runner = SimpleNamespace(model_runner=self.runner(model, pp_rank, pp_size))
        return self.base.BaseRunner._alloc_dummy_decode_buffers(runner, max_bs).pp_proxy_tensors


def _widths(tensors):
    return None if tensors is None else {key: t.shape[-1] for key, t in tensors.items()}


# ------------------------------------------------------------------------- sizing
def _sizing_stage(glue, outer_cls, layer_ids, pp_rank, pp_size):
    """The real causal-LM class (no weights loaded) over a stand-in decoder stack the
    capture hooks' ``set_pp_aux_capture`` set up (with the shipped stand-in PP group);
    the stack's relay."""
    from sglang.srt.distributed import get_pp_indices

    from sglang_support.stages import FakePPGroup, bare

    decoder = torch.nn.Module()
    decoder.config = SimpleNamespace(num_hidden_layers=NUM_LAYERS, hidden_size=HIDDEN)
    decoder.layers = [None] * NUM_LAYERS
    decoder.start_layer, decoder.end_layer = get_pp_indices(NUM_LAYERS, pp_rank, pp_size)
    decoder.layers_to_capture = list(layer_ids)
    glue.set_pp_aux_capture(decoder, FakePPGroup(pp_rank, pp_size), hidden_size=HIDDEN)
    outer = bare(outer_cls)
    outer.model = decoder
    return outer, decoder.pp_aux_relay


def _copied(label, how, tensors, sent, errors):
    got = None if tensors is None else tensors.get(AUX)
    if got is None or not torch.equal(got[: sent.shape[0]], sent):
        errors.append(f"{label}: the {how} load did not copy the incoming {AUX}")
        return None
    return got[: sent.shape[0]]


def sizing(module_name, class_name) -> dict:
    outer_cls = getattr(importlib.import_module(module_name), class_name)
    glue = importlib.import_module("sglang.srt.layers.aux_hidden_states")
    sizing = Buffers()
    checks, errors, aux_buffers = [], [], 0
    if sizing.resolve is None:
        errors.append("misc_utils has no resolve_pp_proxy_aux_hidden_size")
    generator = torch.Generator().manual_seed(0)
    for pp_size in (2, 3):
        for layer_ids in ([7, 0, 4], [1, 0], [8, 2, 5]):
            for tokens in (3, 0, 2):
                made = {i: torch.randn(tokens, HIDDEN, generator=generator) for i in layer_ids}
                handoff = {}
                for pp_rank in range(pp_size):
                    outer, relay = _sizing_stage(glue, outer_cls, layer_ids, pp_rank, pp_size)
                    width = sizing.width(outer, pp_size, pp_rank)
                    sent = handoff.get(AUX)
                    sent_width = 0 if sent is None else sent.shape[-1]
                    found = sizing.allocations(pp_size, pp_rank, pp_proxy_aux_hidden_size=width)
                    label = f"pp={pp_size} ids={layer_ids} tokens={tokens} stage={pp_rank}"
                    widths = {
                        name: tensors[AUX].shape[-1] if tensors and AUX in tensors else 0
                        for name, tensors in found.items()
                    }
                    aux_buffers += sum(1 for w in widths.values() if w)
                    checks.append([label, width, sent_width, widths])
                    if set(widths.values()) != {sent_width} or width != sent_width:
                        errors.append(
                            f"{label}: allocated {widths}, resolved {width}, "
                            f"previous stage sent {sent_width}"
                        )
                        break
                    incoming = {}
                    if sent is not None:
                        full = dict(handoff)
                        full["hidden_states"] = torch.randn(tokens, HIDDEN, generator=generator)
                        full["residual"] = torch.randn(tokens, HIDDEN, generator=generator)
                        for how, load in (
                            ("pre-planned", sizing.pre_planned_load),
                            ("full", sizing.full_load),
                        ):
                            buffers = sizing.decode(pp_size, pp_proxy_aux_hidden_size=width)
                            copied = _copied(label, how, load(buffers, tokens, full), sent, errors)
                        if copied is None:
                            break
                        incoming[AUX] = copied  # what the replayed graph reads
                    if relay is None:  # no capture taken on any stage
                        continue
                    own = {i: made[i] for i in relay.local_layer_ids}
                    if relay.is_last_stage:
                        got = relay.collect(own, incoming)
                        want = [made[i] for i in sorted(layer_ids)]
                        same = len(got) == len(want) and all(
                            torch.equal(a, b) for a, b in zip(got, want, strict=True)
                        )
                        if not same:
                            errors.append(f"{label}: captures differ from those made")
                    else:
                        handoff = relay.outgoing(own, incoming)
    return {"checks": checks, "errors": errors, "aux_buffers": aux_buffers}


# ------------------------------------------------------------------------- warmup
def warmup() -> dict:
    from sglang_support.stage_check import compare
    from sglang_support.stages import make_input, stage_factory

    torch.set_num_threads(1)
    sizing = Buffers()
    stack = importlib.import_module("sglang.srt.models.llama").LlamaModel
    layers = "entry" if "capture_output" in inspect.getsource(stack.forward) else "classic"
    checks, errors = [], []
    counts = dict(aux_buffers=0, dummy_forwards=0, equal_runs=0)
    for pp_size in (2, 3):
        for layer_ids in ([1, 3, 4, 6], [7, 0, 4], [0, 1]):
            spec = dict(model="llama", hook="eagle3", layer_ids=layer_ids, layers=layers)
            spec.update(num_layers=NUM_LAYERS, hidden_size=HIDDEN)
            stages = [stage_factory(spec, rank, pp_size) for rank in range(pp_size)]
            reference_stage = stage_factory(spec, 0, 1)
            for mb, tokens in enumerate((3, 1, 5)):
                label = f"pp={pp_size} ids={layer_ids} tokens={tokens}"
                hidden_in = make_input(tokens, mb, HIDDEN)
                reference = [reference_stage.forward(mb, hidden_in, None)]
                handoff = stages[0].forward(mb, hidden_in, None)
                for rank in range(1, pp_size):
                    where = f"{label} stage={rank}"
                    buffers = sizing.dummy(stages[rank].lm, rank, pp_size)
                    sent, entry = handoff.get(AUX), buffers.get(AUX)
                    sent_width = 0 if sent is None else sent.shape[-1]
                    width = 0 if entry is None else entry.shape[-1]
                    rows = [buffers["hidden_states"].shape[0], 0 if entry is None else len(entry)]
                    checks.append([where, width, sent_width, rows])
                    counts["aux_buffers"] += entry is not None
                    if width != sent_width or (entry is not None and len(set(rows)) != 1):
                        errors.append(
                            f"{where}: dummy buffers hold {AUX} {width} wide ({rows} rows), "
                            f"the previous stage sent {sent_width}"
                        )
                    # What ``_dummy_run`` hands the model: each buffer sliced, then cloned.
                    proxy = {k: v[:tokens].clone() for k, v in buffers.items()}
                    try:  # (b) the dummy forward of warm-up / autotune
                        out = stages[rank].forward(mb, None, proxy)
                        counts["dummy_forwards"] += 1
                        if rank == pp_size - 1 and len(out[1]) != len(reference[0][1]):
                            errors.append(
                                f"{where}: the dummy forward hands on {len(out[1])} aux "
                                f"states, PP=1 {len(reference[0][1])}"
                            )
                    except Exception as err:  # noqa: BLE001 - reported, the run goes on
                        errors.append(f"{where}: dummy forward raised {err}")
                    # (c) the real handoff through the same buffers
                    missing = sorted(set(handoff) - set(buffers))
                    if missing:
                        errors.append(f"{where}: dummy buffers have no room for {missing}")
                        break
                    for key, tensor in handoff.items():
                        buffers[key][:tokens].copy_(tensor)
                    try:
                        proxy = {k: v[:tokens].clone() for k, v in buffers.items()}
                        handoff = stages[rank].forward(mb, None, proxy)
                    except Exception as err:  # noqa: BLE001
                        errors.append(f"{where}: forward on the filled buffers raised {err}")
                        break
                else:
                    same, detail = compare([handoff], reference)
                    if same:
                        counts["equal_runs"] += 1
                    else:
                        errors.append(f"{label}: {detail}")
    return {"checks": checks, "errors": errors, **counts}


# ------------------------------------------------------------------------- legacy
LEGACY_LAYERS = 4
LEGACY_IDS = [0, 1, 3]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def take(self) -> list[str]:
        taken, self.messages = self.messages, []
        return taken


class _Stack(torch.nn.Module):
    """The decoder stack of the release's DSPARK relay (Kimi-Linear's shape)."""

    def __init__(self, pp_rank, pp_size):
        super().__init__()
        self.pp_rank, self.pp_size = pp_rank, pp_size
        per = LEGACY_LAYERS // pp_size
        self.start_layer, self.end_layer = pp_rank * per, (pp_rank + 1) * per
        self.dspark_layers_to_capture = None

    def forward(self, hidden_states, pp_proxy_tensors):
        ids = self.dspark_layers_to_capture
        aux = []
        if ids is not None and self.pp_rank > 0:
            aux.append(pp_proxy_tensors["dspark_hidden_states"])
        for i in range(self.start_layer, self.end_layer):
            hidden_states = hidden_states + 1
            if ids is not None and i in ids:
                aux.append(hidden_states)
        if self.pp_rank < self.pp_size - 1:
            tensors = {"hidden_states": hidden_states}
            if aux:
                tensors["dspark_hidden_states"] = torch.cat(aux, dim=-1)
            return tensors
        return hidden_states, aux


class OutOfTreeDSpark(torch.nn.Module):
    """A causal LM written against the release's DSPARK relay contract."""

    def __init__(self, pp_rank=1, pp_size=2):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=HIDDEN)
        self.model = _Stack(pp_rank, pp_size)
        self.capture_aux_hidden_states = False

    def get_pp_proxy_dspark_hidden_size(self) -> int:
        layers = self.model.dspark_layers_to_capture or []
        return self.config.hidden_size * sum(layer < self.model.start_layer for layer in layers)

    def set_dspark_layers_to_capture(self, layer_ids):
        self.capture_aux_hidden_states = True
        self.model.dspark_layers_to_capture = list(layer_ids)

    def forward(self, hidden_states, pp_proxy_tensors=None):
        return self.model(hidden_states, pp_proxy_tensors)


class WithoutOldWidth(OutOfTreeDSpark):
    """The same model without the release's width method (it relays nothing it declares)."""

    get_pp_proxy_dspark_hidden_size = None  # type: ignore[assignment]


class WithNewWidth(OutOfTreeDSpark):
    """A model sized under the renamed method."""

    def get_pp_proxy_aux_hidden_size(self) -> int:
        return OutOfTreeDSpark.get_pp_proxy_dspark_hidden_size(self)


def _configure(setup, model):
    """The error text ``configure_aux_hidden_state_capture`` raised, or None."""
    try:
        setup.configure_aux_hidden_state_capture(
            model=model,
            eagle_use_aux_hidden_state=False,
            eagle_aux_hidden_state_layer_ids=None,
            dflash_use_aux_hidden_state=True,
            dflash_target_layer_ids=LEGACY_IDS,
            is_dspark=True,
            pp_size=2,
        )
    except NotImplementedError as err:
        return str(err)
    return None


def legacy() -> dict:
    records = _Records()
    logging.getLogger("sglang").addHandler(records)
    logging.getLogger("sglang").setLevel(logging.WARNING)
    setup = importlib.import_module(
        "sglang.srt.model_executor.model_runner_components.attention_backend_setup"
    )
    sizing = Buffers()
    report: dict = {"warnings": {}}
    model = OutOfTreeDSpark()
    report["admitted"] = _configure(setup, model) is None and (
        model.model.dspark_layers_to_capture == LEGACY_IDS
    )
    report["refused"] = _configure(setup, WithoutOldWidth())
    if not report["admitted"]:
        # Size it all the same: the buffers are checked on their own.
        model.set_dspark_layers_to_capture(LEGACY_IDS)
    records.take()

    width = sizing.model_runner.get_pp_proxy_aux_hidden_size(sizing.runner(model, 1, 2))
    report["warnings"]["width"] = records.take()
    # A tree without the entry lookup keys the buffers as the glue's entry.
    entry_of = getattr(sizing.model_runner, "get_pp_proxy_aux_entry", None)
    entry = AUX if entry_of is None else entry_of(sizing.runner(model, 1, 2))
    report["width"], report["entry"] = width, None if entry_of is None else entry
    new_model = WithNewWidth()
    new_model.set_dspark_layers_to_capture(LEGACY_IDS)
    report["new_entry"] = None if entry_of is None else entry_of(sizing.runner(new_model, 1, 2))

    common = dict(pp_proxy_aux_hidden_size=width, pp_proxy_aux_entry=entry)
    found = sizing.allocations(2, 1, **common)
    report["buffers"] = {name: _widths(tensors) for name, tensors in found.items()}
    report["dummy"] = _widths(sizing.dummy(model, 1, 2, MAX_TOKENS))

    # What stage 0 of the same model really sends, copied in by the replay loads.
    first = OutOfTreeDSpark(pp_rank=0)
    first.set_dspark_layers_to_capture(LEGACY_IDS)
    sent = first(torch.randn(3, HIDDEN))
    report["sent"] = _widths(sent)
    report["refreshed"] = {}
    for how, load in (("pre-planned", sizing.pre_planned_load), ("full", sizing.full_load)):
        got = (load(sizing.decode(2, **common), 3, sent) or {}).get(entry)
        report["refreshed"][how] = got is not None and torch.equal(
            got[:3], sent["dspark_hidden_states"]
        )
    records.take()

    old = getattr(sizing.misc, "resolve_pp_proxy_dspark_hidden_size", None)
    report["old_resolver"] = None if old is None else old(model=model, pp_size=2, pp_rank=1)
    report["warnings"]["old_resolver"] = records.take()
    try:
        # Passed as is: a release without the old keyword raises TypeError.
        sized = {
            k: ARGS[k] for k in ("max_num_tokens", "max_hidden_tokens", "hidden_size", "dtype")
        }
        report["old_keyword"] = _widths(sizing.allocate(**sized, pp_proxy_dspark_hidden_size=width))
    except TypeError as err:
        report["old_keyword"] = f"raised {err}"
    report["warnings"]["old_keyword"] = records.take()
    return report


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    print(json.dumps({"sizing": sizing, "warmup": warmup, "legacy": legacy}[command](*args)))
