"""Aux hidden-state capture under pipeline parallelism, on CPU with real processes.

For every model of the PP aux-capture family (``FAMILY``), each PP stage is built
from the real model classes with tiny stand-in decoder layers (no weights to load, no
attention kernels), the real capture hook is called on every rank, and the real
causal-LM ``forward`` runs on 2 and 3 gloo processes; the ``PPProxyTensors`` move
between stages as the scheduler moves them.  The last stage's aux hidden states must
equal (``torch.equal``) those of a single-stage run of the same model.

All models run in one set of worker processes per PP size, so the SGLang import is
paid once.  Run directly (``python test_pp_aux_capture_family.py``) or with pytest.
"""

import json
import os
import socket
import sys
import tempfile
import traceback
import unittest
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

try:
    from sglang.test.ci.ci_register import register_cpu_ci
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # sglang does not import (a CPU-only machine without triton)
    CustomTestCase = unittest.TestCase

    def register_cpu_ci(*args, **kwargs):
        return None


register_cpu_ci(est_time=300, suite="base-a-test-cpu")

# module, causal-LM class, decoder-stack class, capture hooks
FAMILY = [
    # @@FAMILY_CASES@@
]

NUM_LAYERS = 9
HIDDEN_SIZE = 16
#: Capture ids passed to every hook.  Stored as [2, 4, 5, 7] by hooks that capture
#: before layer id + 1, kept as they are by those that capture after the layer: either
#: way, on 3 stages ([0, 3), [3, 6), [6, 9)) every stage owns one; on 2 stages
#: ([0, 4), [4, 9)) the last stage owns most.  EAGLE3 hooks also run with None (the
#: model's default layers).
LAYER_IDS = [1, 3, 4, 6]
#: Token counts of the batches each case runs (0: an empty microbatch, which some
#: models capture nothing for; every stage must agree on that).
BATCHES = (3, 0, 1)
WORKER_TIMEOUT_S = float(os.environ.get("SGLANG_TEST_PP_AUX_TIMEOUT", "900"))
OP_TIMEOUT_S = float(os.environ.get("SGLANG_TEST_PP_AUX_OP_TIMEOUT", "300"))


# ------------------------------------------------------------------ stand-ins


class StandInBoundary:
    """``layer.attn_boundary`` of stacks that restore the residual stream from the PP
    handoff (``layers[start].attn_boundary.from_pp``): the stand-in layers keep no
    separate residual, so the stream starts afresh from the hidden states sent."""

    def from_pp(self, tensors, forward_batch, **kwargs):
        from sglang.srt.layers.layer_boundary.residual import batch as residual_batch

        residual_batch.start(forward_batch)
        return tensors["hidden_states"]

    def capture_output(self, hidden_states, forward_batch):
        """``layer.boundary.capture_output`` of stacks that snapshot the stream at
        layer entry: the handle goes on, the snapshot is captured."""
        from sglang.srt.layers.layer_boundary.residual import batch as residual_batch

        return hidden_states, residual_batch.snapshot(hidden_states, forward_batch)


class StandInLayer(nn.Module):
    """A decoder layer with SGLang's calling convention and deterministic math."""

    def __init__(
        self, layer_id: int, returns: int, entry: bool = False, pair: bool = False
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1000 + layer_id)
        weight = torch.randn(HIDDEN_SIZE, HIDDEN_SIZE, generator=generator)
        self.weight = nn.Parameter(weight / HIDDEN_SIZE**0.5, requires_grad=False)
        self.returns = returns
        self.attn_boundary = StandInBoundary()
        self.boundary = self.attn_boundary
        self.entry = entry
        self.pair = pair

    def forward(
        self,
        positions=None,
        hidden_states=None,
        forward_batch=None,
        residual=None,
        *args,
        captured_last_layer_outputs=None,
        **kwargs,
    ):
        if self.entry or "capture_output" in kwargs:
            # Layers of stacks that keep the residual stream in forward_batch: the input
            # is captured as a whole at entry, through the callback or into the list.
            if kwargs.get("capture_output") is not None:
                kwargs["capture_output"](hidden_states)
            if captured_last_layer_outputs is not None:
                captured_last_layer_outputs.capture(hidden_states)
            hidden_states = torch.tanh(hidden_states @ self.weight)
            return (hidden_states, None) if self.pair else hidden_states
        residual = hidden_states if residual is None else hidden_states + residual
        if captured_last_layer_outputs is not None:
            captured_last_layer_outputs.append(residual)
        hidden_states = torch.tanh(residual @ self.weight)
        if self.returns == 4:  # mHC layers: (hidden_states, residual, post, comb)
            return hidden_states, None, None, None
        if self.returns == 3:
            return hidden_states, residual, None
        return hidden_states, residual


class StandInEmbedding(nn.Module):
    """Token ids -> deterministic hidden states (first stage)."""

    def forward(self, input_ids):
        base = input_ids.to(torch.float32).unsqueeze(-1) / HIDDEN_SIZE
        return torch.sin(base + torch.arange(HIDDEN_SIZE, dtype=torch.float32))


class StandInNorm(nn.Module):
    def forward(self, hidden_states, residual=None, **kwargs):
        if residual is None:
            return hidden_states * 0.5
        return (hidden_states + residual) * 0.5, residual


class RecordingLogitsProcessor:
    """Stands in for LogitsProcessor: returns what the last stage hands it."""

    def __call__(self, input_ids, hidden_states, lm_head, forward_batch, *args, **kw):
        aux = kw.get("aux_hidden_states", args[0] if args else None)
        return SimpleNamespace(hidden_states=hidden_states, aux_hidden_states=aux)


class StandInPPGroup:
    """The attributes of SGLang's GroupCoordinator that model code reads."""

    def __init__(self, rank: int, size: int, group=None) -> None:
        self.rank_in_group = rank
        self.world_size = size
        self.ranks = list(range(size))
        self.rank = rank
        self.is_first_rank = rank == 0
        self.is_last_rank = rank == size - 1
        self.cpu_group = group
        self.device_group = group
        self.local_rank = 0
        self.first_rank = 0
        self.last_rank = size - 1


def _forward_batch(tokens: int):
    mode = SimpleNamespace(
        is_idle=lambda: tokens == 0,
        is_extend=lambda: True,
        is_decode=lambda: False,
        is_target_verify=lambda: False,
    )
    return SimpleNamespace(
        capture_hidden_mode=SimpleNamespace(need_capture=lambda: True),
        can_run_tbo=False,
        contains_mm_inputs=lambda: False,
        contains_image_inputs=lambda: False,
        input_embeds=None,
        forward_mode=mode,
        return_hidden_states_before_norm=False,
        batch_size=1,
        seq_lens=torch.tensor([tokens]),
        residual_stream=None,
        extend_seq_lens=torch.tensor([tokens]),
    )


#: Extra decoder-stack attributes a model's forward reads (its __init__ is skipped).
STACK_ATTRIBUTES = {
    "DeepseekV2Model": dict(
        use_dsa=False,
        first_k_dense_replace=0,
        llama_4_scaling_config=None,
        next_full_attention_layer_id={},
        enable_a2a_moe=False,
        gemm_output_zero_allocator_size=0,
    ),
    "NemotronHModel": dict(norm_f=StandInNorm()),
    "Glm5NextModel": dict(
        dflash_capture=False, enable_a2a_moe=False, first_k_dense_replace=0
    ),
    "Qwen3_5ForCausalLM": dict(
        flashinfer_mnnvl_cutedsl_fusion=None, hidden_size=HIDDEN_SIZE
    ),
    "BailingMoELinearModel": dict(capture_aux_hidden_states=False),
    # No per-layer embeddings (PLE): the real helpers return None.
    "Gemma4TextModel": dict(
        embed_tokens_per_layer=None, per_layer_model_projection=None
    ),
    "MiniMaxM3Model": dict(finalize_norm=None),
    "Qwen3LLMModel": dict(
        use_hf_deepstack_order=False,
        deepstack_embed_to_decoder_layer=range(0),
        hidden_size=HIDDEN_SIZE,
    ),
    "DeepseekV4Model": dict(
        dspark_layers_to_capture=None,
        hc_mult=2,
        hidden_size=HIDDEN_SIZE,
        use_fused_mhc_post_pre=False,
        hc_pre_from_prev_sublayer=False,
        late_layer_start=None,
        _can_run_tbo=lambda forward_batch: False,
        # Folds the mHC copies back into one hidden state, as the real head does.
        hc_head=lambda hidden_states, *weights: hidden_states.mean(dim=1),
        hc_head_fn=None,
        hc_head_scale=None,
        hc_head_base=None,
    ),
}
#: Decoder stacks that check their layers' types against a module-level tuple.
LAYER_TYPE_TUPLES = {"NemotronHModel": "Layers"}
#: Causal-LM attributes some forwards read (their __init__ is skipped).
OUTER_ATTRIBUTES = dict(
    is_mrope_enabled=False,
    _is_multimodal=False,
    language_model_only=True,
    lm_head_is_tied=False,
)
#: Causal-LM classes that hold the decoder stack as ``language_model``.
LANGUAGE_MODEL_OUTERS = {"Gemma4ForConditionalGeneration"}
#: Causal-LM classes that take exactly one of input_ids and input_embeds.
IDS_ONLY_OUTERS = {"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"}
#: Modules whose decoder layers return (hidden_states, residual, extra).
THREE_OUTPUT_LAYERS = {"DeepseekV2Model", "Glm5NextModel"}
#: Modules whose layer-entry decoder layers return (hidden_states, topk_indices).
PAIR_ENTRY_LAYERS = {"DeepseekV2Model"}
#: Modules whose decoder layers return four values (mHC).
FOUR_OUTPUT_LAYERS = {"DeepseekV4Model"}


def _single_device_widths() -> None:
    """Parallel widths a forward reads that a launched server would have published
    (one rank per attention-DP / TP group here)."""
    from sglang.srt.runtime_context import get_parallel

    override = getattr(get_parallel(), "override_permanently", None)
    if override is not None:  # releases that derive the width publish it this way
        override(attn_dp_size=1)


def _deepseek_v4_state() -> None:
    """Widths, and the forward context whose attention backend the stack reads (on
    releases that have one; the stand-in layers never use it)."""
    _single_device_widths()
    try:
        from sglang.srt.model_executor import forward_context
    except ImportError:
        return
    forward_context.set_forward_context(
        forward_context.ForwardContext(attn_backend=SimpleNamespace())
    )


#: Per decoder stack: process state its forward reads that a server would have set up.
STACK_SETUP = {"DeepseekV4Model": _deepseek_v4_state}


def _set_pp_group(group: StandInPPGroup) -> None:
    from sglang.srt.distributed import parallel_state

    parallel_state._PP = group
    # Hooks that ask ``get_parallel().pp_group`` read the runtime context; where it
    # does not resolve to the group just set, state the group there too.
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        return
    try:
        if get_parallel().pp_group is group:
            return
    except (AssertionError, AttributeError, RuntimeError, ValueError):
        pass  # not published in this process
    override = getattr(get_parallel(), "override_permanently", None)
    if override is not None:
        override(pp_group=group, pp_size=group.world_size, pp_rank=group.rank_in_group)


def build_model(case, pp_rank: int, pp_size: int, group):
    """The causal-LM object of ``case`` for one PP stage, with stand-in layers."""
    import importlib
    import inspect

    from sglang.srt.distributed import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer

    module_name, outer_name, inner_name, _ = case
    module = importlib.import_module(f"sglang.srt.models.{module_name}")
    outer_cls = getattr(module, outer_name)
    inner_cls = module
    for part in inner_name.split("."):  # "Qwen2Model" or "qwen3_5.Qwen3_5ForCausalLM"
        inner_cls = getattr(inner_cls, part)
    pp_group = StandInPPGroup(pp_rank, pp_size, group)
    _set_pp_group(pp_group)
    config = SimpleNamespace(
        num_hidden_layers=NUM_LAYERS,
        hidden_size=HIDDEN_SIZE,
        torch_dtype=torch.float32,
        vocab_size=32,
        tie_word_embeddings=False,
        encoder_only=False,
        mhc=False,
        pad_token_id=0,
        image_token_id=-1,  # multimodal token ids no stand-in input holds
        video_token_id=-2,
        audio_token_id=-3,
    )
    config.text_config = config

    start, end = get_pp_indices(NUM_LAYERS, pp_rank, pp_size)
    returns = 3 if inner_cls.__name__ in THREE_OUTPUT_LAYERS else 2
    if inner_cls.__name__ in FOUR_OUTPUT_LAYERS:
        returns = 4
    inner = inner_cls.__new__(inner_cls)
    nn.Module.__init__(inner)
    inner.config = config
    inner.pp_group = pp_group
    if isinstance(getattr(inner_cls, "start_layer", None), property):
        inner._start_layer, inner._end_layer = start, end
    else:
        inner.start_layer, inner.end_layer = start, end
    # Stacks that hand off with residual_batch keep the residual stream out of the
    # layers' return value.
    # (mHC layers keep their four-value convention either way.)
    entry = returns != 4 and "residual_batch." in inspect.getsource(inner_cls.forward)
    pair = entry and inner_cls.__name__ in PAIR_ENTRY_LAYERS
    inner.layers = nn.ModuleList(
        StandInLayer(i, returns, entry, pair) if start <= i < end else PPMissingLayer()
        for i in range(NUM_LAYERS)
    )
    inner.layers_to_capture = []
    inner.norm = StandInNorm()
    inner.embed_tokens = StandInEmbedding()
    inner.word_embeddings = StandInEmbedding()
    setup = STACK_SETUP.get(inner_cls.__name__)
    if setup is not None:
        setup()
    for attribute, value in STACK_ATTRIBUTES.get(inner_cls.__name__, {}).items():
        setattr(inner, attribute, value)
    tuple_name = LAYER_TYPE_TUPLES.get(inner_cls.__name__)
    if tuple_name is not None:
        stack_module = sys.modules[inner_cls.__module__]
        known = getattr(stack_module, tuple_name)
        if StandInLayer not in known:
            setattr(stack_module, tuple_name, (*known, StandInLayer))

    outer = outer_cls.__new__(outer_cls)
    nn.Module.__init__(outer)
    outer.config = config
    outer.pp_group = pp_group
    outer.model = inner
    if outer_cls.__name__ in LANGUAGE_MODEL_OUTERS:
        outer.language_model = inner
    outer.capture_aux_hidden_states = False
    outer.logits_processor = RecordingLogitsProcessor()
    outer.lm_head = nn.Identity()
    for attribute, value in OUTER_ATTRIBUTES.items():
        if not hasattr(outer_cls, attribute):
            setattr(outer, attribute, value)
    return outer


def run_forward(model, tokens: int, proxy):
    """One causal-LM forward: PPProxyTensors (non-last stage) or the recorded output."""
    import inspect

    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    kwargs = {}
    parameters = inspect.signature(model.forward).parameters
    if "pp_proxy_tensors" in parameters:
        kwargs["pp_proxy_tensors"] = None if proxy is None else PPProxyTensors(proxy)
    # The first stage gets these ids embedded by the stand-in embedding, either from
    # input_embeds or by its own embedding layer: the same values both ways.
    input_ids = torch.arange(tokens, dtype=torch.long) + 7 * tokens
    for name in ("input_embeds", "inputs_embeds"):
        ids_only = type(model).__name__ in IDS_ONLY_OUTERS
        if name in parameters and model.pp_group.is_first_rank and not ids_only:
            kwargs[name] = StandInEmbedding()(input_ids)
    positions = torch.arange(tokens)
    with torch.no_grad():
        return model.forward(input_ids, positions, _forward_batch(tokens), **kwargs)


def _aux_list(aux):
    if aux is None:
        return []
    if isinstance(aux, torch.Tensor):
        return [aux]
    return list(aux)


def _call_hook(model, hook, layer_ids):
    getattr(model, hook)(None if layer_ids is None else list(layer_ids))


def reference_aux(case, hook, layer_ids, tokens):
    """Aux states of a single-stage run (PP=1) of the same model."""
    model = build_model(case, 0, 1, None)
    _call_hook(model, hook, layer_ids)
    return _aux_list(run_forward(model, tokens, None).aux_hidden_states)


# ----------------------------------------------------------- PP handoff (p2p)


def _send_dict(tensors, dst, error=None):
    """Send a handoff dict (metadata first, then tensors), or only an error marker."""
    tensors = {} if error is not None else tensors
    meta = {
        k: (tuple(v.shape), str(v.dtype)) for k, v in tensors.items() if v is not None
    }
    none_keys = [k for k, v in tensors.items() if v is None]
    dist.send_object_list([(meta, none_keys, error)], dst=dst)
    for key in sorted(meta):
        dist.send(tensors[key].contiguous(), dst=dst)


def _recv_dict(src):
    """(tensors, error) from the previous stage."""
    holder = [None]
    dist.recv_object_list(holder, src=src)
    meta, none_keys, error = holder[0]
    tensors = {}
    for key in sorted(meta):
        shape, dtype = meta[key]
        buffer = torch.empty(shape, dtype=getattr(torch, dtype.split(".")[-1]))
        dist.recv(buffer, src=src)
        tensors[key] = buffer
    tensors.update({key: None for key in none_keys})
    return tensors, error


def _describe(error):
    return f"{type(error).__name__}: {error}"


def _create_direct_group(rank, size, group, fresh=False):
    """Create the direct-mode group up front, where SGLang creates its groups, not in
    the middle of the run; every rank does it at the same point.  ``fresh``: replace
    the group (after a failed case left direct sends unmatched in the old one)."""
    try:
        from sglang.srt.distributed import pp_aux_capture
    except ImportError:  # the release without the patch's new files
        return
    if fresh:
        pp_aux_capture._DIRECT_GROUPS.clear()
    pp_aux_capture._direct_group(StandInPPGroup(rank, size, group))


def _run_case(case, hook, layer_ids, mode, rank, size, group):
    """Runs one case on this rank: (result, transport).  The last rank's result holds
    its comparison.

    Every rank does every receive and send of every batch, also after an error (an
    error travels downstream as a marker), so a failing model never leaves a handoff
    in flight for the next case.  Direct-mode sends are left to the caller.
    """
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    os.environ["SGLANG_PP_AUX_TRANSPORT"] = mode
    result = {"equal": True, "reference": [], "pipelined": [], "error": None}
    model = None
    try:
        model = build_model(case, rank, size, group)
        _call_hook(model, hook, layer_ids)
    except Exception as error:
        result["error"] = _describe(error)
        result["traceback"] = traceback.format_exc()[-4000:]
    for tokens in BATCHES:
        proxy, upstream_error = _recv_dict(rank - 1) if rank > 0 else (None, None)
        error = result["error"] or upstream_error
        output = None
        if error is None:
            try:
                _set_pp_group(model.pp_group)
                output = run_forward(model, tokens, proxy)
                if rank < size - 1 and not isinstance(output, PPProxyTensors):
                    raise TypeError(f"stage {rank} returned {type(output).__name__}")
            except Exception as exc:
                error = _describe(exc)
                result["traceback"] = traceback.format_exc()[-4000:]
        if error is not None:
            result["error"] = result["error"] or error
        if rank < size - 1:
            _send_dict(output.tensors if error is None else {}, rank + 1, error)
            continue
        if error is not None:
            result["equal"] = False
            continue
        pipelined = _aux_list(output.aux_hidden_states)
        try:
            reference = reference_aux(case, hook, layer_ids, tokens)
        except Exception as exc:
            result.update(equal=False, error=f"PP=1 reference: {_describe(exc)}")
            continue
        result["reference"].append(len(reference))
        result["pipelined"].append(len(pipelined))
        result["equal"] &= len(reference) == len(pipelined) and all(
            torch.equal(a, b) for a, b in zip(reference, pipelined)
        )
    return result, getattr(getattr(model, "model", None), "pp_aux_transport", None)


def _worker(rank, size, port, jobs, out_dir):
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=size,
        # Per operation: a stage may wait while the last one runs its PP=1 reference.
        timeout=timedelta(seconds=OP_TIMEOUT_S),
    )
    group = dist.new_group(list(range(size)), backend="gloo")
    status_group = dist.new_group(list(range(size)), backend="gloo")
    _create_direct_group(rank, size, group)
    path = os.path.join(out_dir, f"rank{rank}.jsonl")
    for case, hook, layer_ids, mode in jobs:
        entry = {"model": case[0], "hook": hook, "layer_ids": layer_ids}
        entry.update(pp=size, mode=mode)
        with open(path, "a") as handle:  # what this rank is on, should it never return
            handle.write(json.dumps(dict(entry, started=True)) + "\n")
        result, transport = _run_case(case, hook, layer_ids, mode, rank, size, group)
        entry.update(result)
        statuses = [None] * size
        dist.all_gather_object(statuses, entry["error"], group=status_group)
        entry["errors"] = statuses
        if any(status is not None for status in statuses):
            if mode == "direct":
                # A failed stage may never receive this case's direct sends: leave
                # them, and give later cases a group of their own.
                _create_direct_group(rank, size, group, fresh=True)
        elif transport is not None:
            # The forward does not wait for direct sends; complete them while the
            # model (which holds them) is alive, as a running server would.
            transport.flush()
        with open(path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
    with open(path, "a") as handle:
        handle.write(json.dumps({"done": True}) + "\n")
    # Every rank has finished every case.  Leave without tearing the groups down one
    # rank at a time: a peer that closes its connections first can abort gloo's
    # teardown, and sends left unmatched by a failed case would hold it up.
    dist.barrier(group=status_group)
    os._exit(0)


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_family(pp_size, jobs, timeout=WORKER_TIMEOUT_S):
    """Run ``jobs`` ((case, hook, layer ids, mode), ...) on ``pp_size`` processes;
    returns the last rank's results."""
    context = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as out_dir:
        port = _free_port()
        workers = [
            context.Process(target=_worker, args=(r, pp_size, port, jobs, out_dir))
            for r in range(pp_size)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout)
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
        records = {}
        for rank in range(pp_size):
            path = os.path.join(out_dir, f"rank{rank}.jsonl")
            if os.path.exists(path):
                with open(path) as handle:
                    records[rank] = [json.loads(line) for line in handle]
        codes = [worker.exitcode for worker in workers]
        # A rank that wrote its "done" line finished every case; how its process
        # ended after that does not change the results.
        finished = [
            bool(records.get(r)) and records[r][-1].get("done") for r in range(pp_size)
        ]
        if not all(finished):
            keys = ("model", "hook", "mode", "layer_ids")
            where = {
                rank: {key: lines[-1].get(key) for key in keys}
                for rank, lines in records.items()
                if lines and not lines[-1].get("done")
            }
            raise RuntimeError(
                f"PP workers failed (exit codes {codes}); last case: {where}"
            )
        return [
            r
            for r in records.get(pp_size - 1, [])
            if not r.get("started") and not r.get("done")
        ]


def _layer_id_sets(hook):
    if hook == "set_eagle3_layers_to_capture":
        return (LAYER_IDS, None)
    return (LAYER_IDS,)


def family_jobs(pp_size, cases=None):
    modes = ("relay", "direct") if pp_size >= 3 else ("relay",)
    return [
        (case, hook, layer_ids, mode)
        for case in (FAMILY if cases is None else cases)
        for hook in case[3]
        for layer_ids in _layer_id_sets(hook)
        for mode in modes
    ]


class TestPPAuxCaptureFamily(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        # The models are SGLang's own: where the package does not import (its
        # ``__init__`` pulls in triton), there is nothing to drive.
        import importlib

        try:
            importlib.import_module("sglang.srt.distributed.pp_aux_capture")
        except (ImportError, KeyError) as error:  # KeyError: failed half-way earlier
            raise unittest.SkipTest(f"sglang does not import here: {error}")

    def test_hooks_no_longer_return_early(self):
        import importlib
        import inspect

        for module_name, outer_name, _, hooks in FAMILY:
            module = importlib.import_module(f"sglang.srt.models.{module_name}")
            for hook in hooks:
                source = inspect.getsource(getattr(getattr(module, outer_name), hook))
                with self.subTest(model=module_name, hook=hook):
                    self.assertIn("attach_pp_aux_transport", source)

    def _check(self, pp_size):
        for entry in run_family(pp_size, family_jobs(pp_size)):
            label = (
                f"{entry['model']}.{entry['hook']}({entry['layer_ids']}) "
                f"pp={pp_size} {entry['mode']}"
            )
            with self.subTest(label):
                self.assertIsNone(entry["error"], entry.get("traceback"))
                self.assertTrue(entry["equal"], entry)
                self.assertEqual(entry["reference"], entry["pipelined"])

    def test_two_stages(self):
        self._check(2)

    def test_three_stages(self):
        self._check(3)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--json":
        # python test_pp_aux_capture_family.py --json PP [MODEL ...]: raw results.
        size = int(sys.argv[2])
        chosen = [c for c in FAMILY if not sys.argv[3:] or c[0] in sys.argv[3:]]
        print(json.dumps(run_family(size, family_jobs(size, chosen))))
    else:
        unittest.main()
