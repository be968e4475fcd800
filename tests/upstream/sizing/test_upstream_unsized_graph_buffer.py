"""What a patch without the aux entry's CUDA-graph sizing leaves broken, said once
(``sizing.part.no_graph_buffer``) and true of the shipped relay.

A CUDA-graph runner that does not size the aux entry captures each stage with a handoff
built from its own buffers (``hidden_states``, ``residual``), which holds no aux entry: the
relay of every stage that receives earlier stages' captures raises ``RuntimeError`` naming
the missing layers (a middle stage handing on, the last stage collecting or seeding its
packer); a stage that receives none runs.  The console and the PR description say that
same sentence.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from codemods.upstream.sizing.part import NO_GRAPH_BUFFER, no_graph_buffer

HIDDEN, LAYERS, TOKENS = 8, 6, 3


def _stage(glue, rank, bounds, ids):
    start, end = bounds[rank]
    stack = torch.nn.Module()
    stack.config = SimpleNamespace(hidden_size=HIDDEN, num_hidden_layers=LAYERS)
    stack.layers = torch.nn.ModuleList(torch.nn.Identity() for _ in range(LAYERS))
    stack.start_layer, stack.end_layer, stack.layers_to_capture = start, end, list(ids)
    group = SimpleNamespace(world_size=len(bounds), is_last_rank=rank == len(bounds) - 1)
    glue.set_pp_aux_capture(stack, group, hidden_size=HIDDEN)
    return stack


def _graph_buffers():
    """The handoff a graph runner that does not size the aux entry captures with."""
    zeros = torch.zeros(TOKENS, HIDDEN)
    return SimpleNamespace(tensors={"hidden_states": zeros, "residual": zeros.clone()})


def _own(stack):
    return [
        torch.full((TOKENS, HIDDEN), float(i))
        for i in sorted(stack.layers_to_capture)
        if stack.start_layer <= i < stack.end_layer
    ]


BOUNDS = [(0, 2), (2, 4), (4, 6)]


def test_a_middle_stage_that_receives_captures_raises_naming_them(glue):
    stack = _stage(glue, 1, BOUNDS, [1, 3, 5])
    with pytest.raises(RuntimeError, match=r"aux captures of layers \[1\] are missing"):
        glue.pp_aux_handoff(stack, _graph_buffers(), _own(stack), _graph_buffers())


def test_the_last_stage_that_receives_captures_raises_naming_them(glue):
    stack = _stage(glue, 2, BOUNDS, [1, 3, 5])
    with pytest.raises(RuntimeError, match=r"aux captures of layers \[1, 3\] are missing"):
        glue.pp_aux_collect(stack, _own(stack), _graph_buffers())


def test_a_stage_that_receives_nothing_runs(glue):
    first = _stage(glue, 0, BOUNDS, [1, 5])
    handoff = glue.pp_aux_handoff(first, _graph_buffers(), _own(first), None)
    assert "aux_hidden_states" in handoff.tensors
    last = _stage(glue, 2, BOUNDS, [5])
    assert len(glue.pp_aux_collect(last, _own(last), _graph_buffers())) == 1


def test_the_sentence_says_so_and_nothing_else():
    assert NO_GRAPH_BUFFER == no_graph_buffer()
    assert "raises RuntimeError naming the missing layers" in NO_GRAPH_BUFFER
    assert NO_GRAPH_BUFFER.endswith("serve with --disable-cuda-graph")
    assert "drops" not in NO_GRAPH_BUFFER and "non-first stages" not in NO_GRAPH_BUFFER
    assert no_graph_buffer("`").replace("`", "") == NO_GRAPH_BUFFER
