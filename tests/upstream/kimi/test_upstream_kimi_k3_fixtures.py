"""The Kimi-K3 rewriter on a synthetic K3-shaped file (``fixtures/upstream/kimi_k3_shape.py``):
what changes, idempotence, refusals naming the file, and the rewritten code run as an
in-process pipeline (handoff dicts, the shipped helpers) against its PP=1 run.
The real-wheel drives across processes are in ``test_upstream_kimi_k3_releases.py``."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner
from sglang_support.env import PROJECT_ROOT, git_apply

from codemods.cli.commands import cli
from codemods.ppcheck import pp_aux_transport
from codemods.upstream.edit.runtime import render_glue
from codemods.upstream.generate import generate
from codemods.upstream.kimi import k3 as kimi_k3
from codemods.upstream.kimi import linear as kimi

FIXTURE = PROJECT_ROOT / "fixtures" / "upstream" / "kimi_k3_shape.py"
MINI_SGLANG = PROJECT_ROOT / "fixtures" / "upstream" / "mini_sglang"
SOURCE = FIXTURE.read_text()
K3_PATH = "sglang/srt/models/kimi_k3.py"


def _tree(tmp_path: Path, text: str = SOURCE) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(MINI_SGLANG / "sglang", root / "sglang")
    (root / K3_PATH).write_text(text)
    return root


def test_rewrite_changes_setter_forward_and_capture_method():
    new, analysis = kimi_k3.rewrite(SOURCE, "k3.py")
    assert analysis.status == kimi.NEEDS_PATCH
    assert analysis.stream is not None and analysis.stream.name == "_capture_after"
    assert "requires PP=1" not in new.split("def set_dspark_layers_to_capture", 1)[1]
    assert "dspark_incoming[AUX_ENTRY] = torch.cat(" in new
    assert "dspark_captures[layer_id] = aux_states[-1]" in new
    # The statements before the handoff stay; only its return changes.
    assert "                r = bank.bank\n            proxy_tensors = {" in new
    assert 'return PPProxyTensors({"hidden_states": h, "residual": r})' not in new
    method = new.split("def _capture_after", 1)[1]
    early = method.index("if idx + 1 == self.end_layer and not self.pp_group.is_last_rank:")
    assert early < method.index("if idx + 1 < self.end_layer:")
    setter = new.split("def set_dspark_layers_to_capture", 1)[1]
    assert (
        "set_pp_aux_capture(\n            self.model,\n            self.pp_group,\n"
        '            ids_attr="dspark_layers_to_capture",\n'
        "            hidden_size=self.config.hidden_size,\n        )"
    ) in setter
    assert "mode=" not in new and '"direct"' not in new and "relay_only" not in new
    again, second = kimi_k3.rewrite(new, "k3.py")
    assert second.status == kimi.PATCHED and again == new


def test_sglang_own_relay_is_supported():
    relayed = SOURCE.replace(
        """        if self.pp_group.world_size > 1:
            raise NotImplementedError("DSPARK aux hidden capture requires PP=1.")
        if not self.pp_group.is_last_rank:
            return
""",
        "",
    ).replace(
        'return PPProxyTensors({"hidden_states": h, "residual": r})',
        'return PPProxyTensors({"hidden_states": h, "residual": r, '
        '"dspark_hidden_states": torch.cat(aux_states, dim=-1)})',
    )
    new, analysis = kimi_k3.rewrite(relayed, "k3.py")
    assert analysis.status == kimi.SUPPORTED and new == relayed


@pytest.mark.parametrize(
    "old, new, looked_for",
    [
        (
            "aux_states.append(self._capture_after(layer_id, h, r, bank))",
            "aux_states.append(h + r)",
            "self.<method>(layer_id, hidden_states, residual",
        ),
        (
            '            return PPProxyTensors({"hidden_states": h, "residual": r})\n',
            '            h = PPProxyTensors({"hidden_states": h, "residual": r})\n',
            "ending in `return PPProxyTensors({...})`",
        ),
        (
            "        if idx + 1 < self.end_layer:\n            scale = self.layers[idx + 1].scale\n"
            "        else:\n            scale = self.out_scale\n",
            "        scale = self.out_scale\n",
            "choosing the mixing weights",
        ),
    ],
)
def test_unrecognised_shapes_name_the_file_and_leave_it_untouched(tmp_path, old, new, looked_for):
    text = SOURCE.replace(old, new)
    assert text != SOURCE
    with pytest.raises(kimi.UnrecognisedShape) as err:
        kimi_k3.analyse(text, "k3.py")
    assert "k3.py: unrecognised Kimi-K3 model file" in str(err.value)
    assert looked_for in str(err.value)
    root = _tree(tmp_path, text)
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(root), "--models", "kimi_k3"])
    assert outcome.exit_code == 2
    assert "kimi_k3.py: unrecognised Kimi-K3 model file" in outcome.output
    assert (root / K3_PATH).read_text() == text


def test_generate_patches_k3_with_the_helpers_and_applies(tmp_path):
    root = _tree(tmp_path)
    result = generate(root, models=["kimi_k3"])
    assert result.model("kimi_k3").status == kimi.NEEDS_PATCH
    assert result.changed == [
        K3_PATH,
        "sglang/srt/layers/aux_hidden_states.py",
    ]
    assert git_apply(root, result.patch, check=True).returncode == 0
    assert git_apply(root, result.patch).returncode == 0
    again = generate(root, models=["kimi_k3"])
    assert again.model("kimi_k3").status == kimi.PATCHED and again.patch == ""


def test_missing_k3_file_named_is_an_error(tmp_path):
    root = _tree(tmp_path)
    (root / K3_PATH).unlink()
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(root), "--models", "kimi_k3"])
    assert outcome.exit_code == 2 and "Kimi-K3 model file not found" in outcome.output


# ------------------------------------------------------------- the rewritten code, run


class _Group:
    def __init__(self, rank: int, size: int) -> None:
        self.rank_in_group, self.world_size = rank, size
        self.is_first_rank, self.is_last_rank = rank == 0, rank == size - 1
        self.cpu_group, self.ranks = None, list(range(size))


class _Proxy:
    def __init__(self, tensors):
        self.tensors = tensors

    def __getitem__(self, key):
        return self.tensors[key]


class _Layer(torch.nn.Module):
    def __init__(self, layer_id: int) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.scale = 0.25 * (layer_id + 2)

    def forward(self, positions, h, forward_batch, r, bank):
        head = h if r is None else r + h
        if bank is not None:
            bank.bank[:, self.layer_id // 2] += head.sum(dim=-1, keepdim=True)
        return head * 0.5 + self.layer_id + 1, head, False


@pytest.fixture
def rewritten(monkeypatch):
    """The rewritten fixture as a module, its imports served by stand-ins and the shipped
    helpers (``render_glue()``); the stages share one process."""
    new, _ = kimi_k3.rewrite(SOURCE, "k3.py")
    distributed = types.ModuleType("sglang.srt.distributed")
    batch_info = types.ModuleType("sglang.srt.model_executor.forward_batch_info")
    batch_info.PPProxyTensors = _Proxy
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.model_executor"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.distributed", distributed)
    monkeypatch.setitem(sys.modules, batch_info.__name__, batch_info)
    glue = types.ModuleType("sglang.srt.layers.aux_hidden_states")
    monkeypatch.setitem(sys.modules, glue.__name__, glue)
    exec(compile(render_glue(), "pp_aux_capture.py", "exec"), glue.__dict__)
    module = types.ModuleType("k3_rewritten")
    module.__dict__["get_pp_group"] = None
    distributed.get_pp_group = lambda: module.current_group
    exec(compile(new, "k3_rewritten.py", "exec"), module.__dict__)
    return module


def _stage(module, rank, size, block_size, layer_ids, num_layers=6):
    module.current_group = _Group(rank, size)
    config = SimpleNamespace(num_hidden_layers=num_layers, hidden_size=3, block_size=block_size)
    lm = module.K3ForCausalLM(config)
    model = lm.model
    # The stages own the layers SGLang's partition assigns them.
    model.start_layer, model.end_layer = pp_aux_transport.layer_partition(num_layers, size)[rank]
    model.layers = torch.nn.ModuleList(_Layer(i) for i in range(num_layers))
    if rank == size - 1:
        model.out_scale = 3.0
    lm.set_dspark_layers_to_capture(layer_ids)
    return lm


def _run(module, size, block_size, layer_ids, tokens):
    stages = [_stage(module, rank, size, block_size, layer_ids) for rank in range(size)]
    h = torch.arange(tokens * 3, dtype=torch.float64).view(tokens, 3)
    proxy = None
    for rank, lm in enumerate(stages):
        module.current_group = lm.pp_group
        out = lm(None, None, None, proxy) if rank else lm.model(None, None, None, h, None)
        proxy = out
    return out


@pytest.mark.parametrize("block_size", [None, 2])
@pytest.mark.parametrize("size", [2, 3])
def test_rewritten_fixture_matches_pp1(rewritten, block_size, size):
    layer_ids = [5, 0, 1, 3, 2]
    want_h, want_aux = _run(rewritten, 1, block_size, layer_ids, tokens=2)
    got_h, got_aux = _run(rewritten, size, block_size, layer_ids, tokens=2)
    assert torch.equal(got_h, want_h)
    assert len(got_aux) == len(want_aux) == 5
    for got, want in zip(got_aux, want_aux, strict=True):
        assert torch.equal(got, want)


def test_pr_body_covers_kimi_k3(tmp_path):
    from codemods.upstream.output.pr_body import render, title_of, touched_hooks, touched_models

    result = generate(_tree(tmp_path), models=["kimi_k3"])
    assert touched_models(result) == ["kimi_k3"]
    assert touched_hooks(result) == ["set_dspark_layers_to_capture"]
    assert title_of(result) == "# [PP] Carry aux hidden states across pipeline stages (DSPARK)"
    body = render(result)
    assert "Kimi-K3 refuses PP outright" in body
    assert "- `kimi_k3.py`: the same setter and relay" in body
    assert "direct" not in body
    assert "`set_dspark_layers_to_capture` validates" not in body  # Kimi-Linear's line


def test_series_puts_kimi_k3_in_the_kimi_relay_patch(tmp_path):
    from codemods.upstream.output import series

    patches = series.build_series(generate(_tree(tmp_path), models=["kimi_k3"]))
    assert [p.key for p in patches] == [series.RUNTIME, series.KIMI]
    assert patches[1].models == ["kimi_k3"]
    assert [c.path for c in patches[1].changes] == [K3_PATH]
    assert "- kimi_k3.py: set_dspark_layers_to_capture no longer raises" in patches[1].body
