"""Single-process tests of the PP aux transport: validation, partition, plans, the aux
entry, relay packing and last-stage assembly. Multi-process runs live in
test_ppcheck_*.py."""

from __future__ import annotations

import pytest
import torch

from codemods.ppcheck import pp_aux_transport as t

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------- validate_layer_ids
def test_none_gives_the_feature_message():
    with pytest.raises(ValueError) as err:
        t.validate_layer_ids(None, 8)
    assert str(err.value) == "DSPARK requires explicit layer_ids for aux hidden capture."
    with pytest.raises(ValueError, match="^EAGLE3 requires explicit layer_ids"):
        t.validate_layer_ids(None, 8, feature="EAGLE3")


@pytest.mark.parametrize(
    "layer_ids, needle",
    [
        ("1,2", "list or tuple"),
        ({1, 2}, "list or tuple"),
        (3, "list or tuple"),
        ([], "must not be empty"),
        ((), "must not be empty"),
        ([True, 2], r"layer_ids\[0\] must be an int"),
        ([1, False], r"layer_ids\[1\] must be an int"),
        ([1.0], r"must be an int"),
        (["1"], r"must be an int"),
        ([None], r"must be an int"),
        ([-1], "out of range"),
        ([8], "out of range"),
        ([0, 100], "out of range"),
        ([1, 2, 1], "duplicate layer id 1"),
    ],
)
def test_each_validation_rule(layer_ids, needle):
    with pytest.raises(ValueError, match=needle):
        t.validate_layer_ids(layer_ids, 8)


@pytest.mark.parametrize("num_layers", [0, -3, True, 2.0])
def test_num_layers_must_be_a_positive_int(num_layers):
    with pytest.raises(ValueError, match="num_layers"):
        t.validate_layer_ids([0], num_layers)


def test_valid_ids_keep_requested_order_in_a_new_list():
    requested = [7, 0, 3]
    result = t.validate_layer_ids(requested, 8)
    assert result == [7, 0, 3]
    assert result is not requested
    assert t.validate_layer_ids((0, 7), 8) == [0, 7]
    assert all(type(i) is int for i in t.validate_layer_ids([torch.tensor(2).item()], 8))


# ----------------------------------------------------------------------- partition
EXPECTED_RANGES = [
    # (num_layers, pp_size, env override, expected ranges)
    (8, 1, None, [(0, 8)]),
    (8, 2, None, [(0, 4), (4, 8)]),
    (8, 4, None, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    (10, 4, None, [(0, 2), (2, 4), (4, 7), (7, 10)]),
    (7, 3, None, [(0, 2), (2, 4), (4, 7)]),
    (11, 3, None, [(0, 3), (3, 7), (7, 11)]),
    (61, 4, None, [(0, 15), (15, 30), (30, 45), (45, 61)]),
    (3, 4, None, [(0, 0), (0, 1), (1, 2), (2, 3)]),
    (10, 4, "1,4,2,3", [(0, 1), (1, 5), (5, 7), (7, 10)]),
    (6, 2, "5,1", [(0, 5), (5, 6)]),
    (9, 3, "0,4,5", [(0, 0), (0, 4), (4, 9)]),
    (10, 1, "3,7", [(0, 10)]),  # a single stage ignores the override
]


@pytest.mark.parametrize("num_layers, pp_size, env, expected", EXPECTED_RANGES)
def test_partition_table(monkeypatch, num_layers, pp_size, env, expected):
    if env is None:
        monkeypatch.delenv(t.PP_LAYER_PARTITION_ENV, raising=False)
    else:
        monkeypatch.setenv(t.PP_LAYER_PARTITION_ENV, env)
    got = [t.pp_layer_range(num_layers, rank, pp_size) for rank in range(pp_size)]
    assert got == expected
    assert t.layer_partition(num_layers, pp_size) == expected
    for layer_id in range(num_layers):
        owner = t.owner_stage(layer_id, num_layers, pp_size)
        start, end = expected[owner]
        assert start <= layer_id < end


@pytest.mark.parametrize(
    "env, needle",
    [
        ("1,2", "does not match pp_size"),
        ("2,2,2,2", "does not match"),
        ("a,b,c,d", "Invalid partition"),
        ("1,-1,5,5", "Invalid partition"),
    ],
)
def test_bad_partition_override(monkeypatch, env, needle):
    monkeypatch.setenv(t.PP_LAYER_PARTITION_ENV, env)
    with pytest.raises(ValueError, match=needle):
        t.pp_layer_range(10, 0, 4)


def test_bad_rank_or_size():
    with pytest.raises(ValueError, match="pp_rank"):
        t.pp_layer_range(8, 4, 4)
    with pytest.raises(ValueError, match="pp_size"):
        t.pp_layer_range(8, 0, 0)


def test_owner_skips_empty_stages(monkeypatch):
    monkeypatch.delenv(t.PP_LAYER_PARTITION_ENV, raising=False)
    assert [t.owner_stage(i, 3, 4) for i in range(3)] == [1, 2, 3]


# ---------------------------------------------------------------------- aux entry
def test_one_aux_entry_whose_width_each_stage_knows_ahead(monkeypatch):
    monkeypatch.delenv(t.PP_LAYER_PARTITION_ENV, raising=False)
    assert t.AUX_ENTRY == "aux_hidden_states"
    plan = t.AuxCapturePlan.build([9, 0, 5, 3, 2], 10, pp_rank=3, pp_size=4)
    assert [plan.incoming_ids(s) for s in range(4)] == [[], [0], [0, 2, 3], [0, 2, 3, 5]]
    assert [plan.proxy_hidden_size(16, s) for s in range(4)] == [0, 16, 48, 64]
    assert plan.proxy_hidden_size(16) == 64
    direct = t.AuxCapturePlan.build([9, 0, 5, 3, 2], 10, 3, 4, mode="direct")
    assert [direct.proxy_hidden_size(16, s) for s in range(4)] == [0, 0, 0, 16]


# --------------------------------------------------------------------------- plans
def test_plan_properties(monkeypatch):
    monkeypatch.delenv(t.PP_LAYER_PARTITION_ENV, raising=False)
    plan = t.AuxCapturePlan.build([9, 0, 5, 3, 2], 10, pp_rank=1, pp_size=4)
    assert plan.partition == ((0, 2), (2, 4), (4, 7), (7, 10))
    assert (plan.start_layer, plan.end_layer) == (2, 4)
    assert plan.local_layer_ids == [3, 2]
    assert plan.owns(2) and plan.owns(3) and not plan.owns(4) and not plan.owns(0)
    plan_gap = t.AuxCapturePlan.build([3], 10, pp_rank=1, pp_size=4)
    assert not plan_gap.owns(2) and plan_gap.in_stage(2) and not plan_gap.in_stage(4)
    assert plan.hops_to_last == 2 and not plan.is_last_stage
    assert plan.handoff_ids_after(0) == [0]
    assert plan.handoff_ids_after(2) == [0, 2, 3, 5]
    direct = t.AuxCapturePlan.build([9, 0, 5, 3, 2], 10, 3, 4, mode="direct")
    assert direct.handoff_ids_after(0) == [] and direct.handoff_ids_after(1) == []
    assert direct.handoff_ids_after(2) == [5]
    assert direct.direct_ids() == [(0, 0), (1, 2), (1, 3)]


def test_plan_freezes_env_partition(monkeypatch):
    monkeypatch.setenv(t.PP_LAYER_PARTITION_ENV, "1,4,2,3")
    plan = t.AuxCapturePlan.build([0], 10, 0, 4)
    monkeypatch.delenv(t.PP_LAYER_PARTITION_ENV)
    assert plan.end_layer == 1


def test_plan_rejects_bad_mode_and_ids():
    with pytest.raises(ValueError, match="mode"):
        t.AuxCapturePlan.build([0], 4, 0, 2, mode="teleport")
    with pytest.raises(ValueError, match="^MSD requires explicit"):
        t.AuxCapturePlan.build(None, 4, 0, 2, feature="MSD")


def test_direct_mode_needs_a_dedicated_group():
    plan = t.AuxCapturePlan.build([0, 5], 8, 0, 4, mode="direct")
    with pytest.raises(ValueError, match="direct_group"):
        t.PPAuxTransport(plan)
    t.PPAuxTransport(t.AuxCapturePlan.build([0, 5], 8, 0, 2, mode="direct"))  # no far stage


# ------------------------------------------------------------- relay and collect
def _tensor(value, tokens=3, hidden=4):
    return torch.full((tokens, hidden), float(value))


def _packed(ids, tokens=3, hidden=4):
    return torch.cat([_tensor(i, tokens, hidden) for i in ids], dim=-1)


def test_relay_packs_earlier_and_own_captures_in_numeric_order():
    # stage 1 of 3 over 24 layers: capture 2 comes from stage 0; 9, 10, 13 are local
    plan = t.AuxCapturePlan.build([13, 10, 2, 9], 24, pp_rank=1, pp_size=3)
    assert plan.partition[1] == (8, 16)
    incoming = {"hidden_states": _tensor(0), "residual": _tensor(0), t.AUX_ENTRY: _tensor(2)}
    transport = t.PPAuxTransport(plan)
    captures = {13: _tensor(13), 10: _tensor(10), 9: _tensor(9)}
    out = transport.outgoing(captures, incoming)
    assert list(out) == [t.AUX_ENTRY]
    assert torch.equal(out[t.AUX_ENTRY], _packed([2, 9, 10, 13]))
    assert out[t.AUX_ENTRY].shape == (3, plan.proxy_hidden_size(4, 2))


def test_a_stage_without_captures_passes_the_entry_on_by_reference():
    plan = t.AuxCapturePlan.build([0, 1, 7], 8, pp_rank=1, pp_size=4)
    entry = _packed([0, 1])
    out = t.PPAuxTransport(plan).outgoing({}, {t.AUX_ENTRY: entry})
    assert out[t.AUX_ENTRY] is entry
    first = t.AuxCapturePlan.build([7], 8, pp_rank=0, pp_size=4)
    assert t.PPAuxTransport(first).outgoing({}, None) == {}


def test_outgoing_rejects_missing_unexpected_or_misshapen_entries():
    plan = t.AuxCapturePlan.build([1, 5], 8, pp_rank=1, pp_size=4)
    transport = t.PPAuxTransport(plan)
    with pytest.raises(RuntimeError, match=r"no 'aux_hidden_states' entry.*layers \[1\]"):
        transport.outgoing({}, {"hidden_states": _tensor(0)})
    with pytest.raises(RuntimeError, match="captured layers"):
        transport.outgoing({3: _tensor(3)}, {t.AUX_ENTRY: _tensor(1)})
    local = t.AuxCapturePlan.build([3, 5], 8, pp_rank=1, pp_size=4)
    with pytest.raises(RuntimeError, match=r"none of the requested layers \[3, 5\] reaches"):
        t.PPAuxTransport(local).outgoing({3: _tensor(3)}, {t.AUX_ENTRY: _tensor(1)})
    with pytest.raises(RuntimeError, match=r"width 1 x 4 .*layers \[1\]"):
        t.PPAuxTransport(t.AuxCapturePlan.build([1, 3], 8, pp_rank=1, pp_size=4)).outgoing(
            {3: _tensor(3)}, {t.AUX_ENTRY: _packed([1, 1])}
        )


def _last_stage(layer_ids, num_layers=8, pp_size=2):
    plan = t.AuxCapturePlan.build(layer_ids, num_layers, pp_size - 1, pp_size)
    return t.PPAuxTransport(plan)


def test_collect_returns_requested_order():
    transport = _last_stage([6, 1, 5, 0])
    incoming = {t.AUX_ENTRY: _packed([0, 1]), "residual": None}
    local = {6: _tensor(6), 5: _tensor(5)}
    result = transport.collect(local, incoming, like=_tensor(-1))
    assert [int(x[0, 0]) for x in result] == [6, 1, 5, 0]
    assert all(x.shape == (3, 4) for x in result)


def test_collect_fails_loudly_naming_the_layers():
    transport = _last_stage([6, 1, 0])
    with pytest.raises(RuntimeError, match=r"no 'aux_hidden_states' entry.*\[0, 1\]"):
        transport.collect({6: _tensor(6)}, {"hidden_states": _tensor(0)}, like=_tensor(0))
    with pytest.raises(RuntimeError, match=r"width 2 x 4 .*layers \[0, 1\]"):
        transport.collect({6: _tensor(6)}, {t.AUX_ENTRY: _tensor(1)}, like=_tensor(0))
    with pytest.raises(RuntimeError, match=r"width 2 x 4 .*layers \[0, 1\]"):
        transport.collect({6: _tensor(6)}, {t.AUX_ENTRY: _packed([0, 1, 2])}, _tensor(0))
    with pytest.raises(RuntimeError, match=r"expected rows \(3,\)"):
        transport.collect(
            {6: _tensor(6)}, {t.AUX_ENTRY: _packed([0, 1], tokens=2)}, like=_tensor(0)
        )
    with pytest.raises(RuntimeError, match="captured layers"):
        transport.collect({}, {t.AUX_ENTRY: _packed([0, 1])}, like=_tensor(0))
    with pytest.raises(RuntimeError, match="shape"):
        transport.collect({6: _tensor(6, tokens=2)}, {t.AUX_ENTRY: _packed([0, 1])}, _tensor(0))
    alone = _last_stage([6, 7])
    with pytest.raises(RuntimeError, match=r"none of the requested layers \[6, 7\] reaches"):
        alone.collect({6: _tensor(6), 7: _tensor(7)}, {t.AUX_ENTRY: _tensor(0)}, _tensor(0))


def test_collect_of_a_zero_token_batch():
    transport = _last_stage([0, 6])
    result = transport.collect(
        {6: _tensor(6, tokens=0)}, {t.AUX_ENTRY: _packed([0], tokens=0)}, _tensor(0, tokens=0)
    )
    assert [x.shape for x in result] == [(0, 4), (0, 4)]


def test_collect_with_a_single_stage():
    plan = t.AuxCapturePlan.build([3, 1], 4, 0, 1)
    result = t.PPAuxTransport(plan).collect({1: _tensor(1), 3: _tensor(3)}, None, _tensor(0))
    assert [int(x[0, 0]) for x in result] == [3, 1]


def test_direct_stage_next_to_last_rides_the_handoff():
    plan = t.AuxCapturePlan.build([0, 5], 8, pp_rank=2, pp_size=4, mode="direct")
    transport = t.PPAuxTransport(plan, direct_group=object())
    capture = _tensor(5)
    assert transport.outgoing({5: capture}, {"hidden_states": _tensor(0)}) == {t.AUX_ENTRY: capture}
    with pytest.raises(RuntimeError, match="none of the requested layers"):
        transport.outgoing({5: capture}, {t.AUX_ENTRY: _tensor(0)})


def test_a_direct_sender_refuses_an_aux_entry_it_should_not_get():
    plan = t.AuxCapturePlan.build([0, 3], 8, pp_rank=1, pp_size=4, mode="direct")
    transport = t.PPAuxTransport(plan, direct_group=object())
    with pytest.raises(RuntimeError, match=r"none of the requested layers \[0, 3\] reaches"):
        transport.outgoing({3: _tensor(3)}, {t.AUX_ENTRY: _tensor(0)})


def test_handshake_without_a_process_group_checks_itself():
    plan = t.AuxCapturePlan.build([0, 5], 8, 0, 1)
    transport = t.PPAuxTransport(plan)
    transport.handshake(4, torch.float32)
    assert (transport.hidden_size, transport.dtype) == (4, torch.float32)
    with pytest.raises(ValueError, match="out of range"):
        t.PPAuxTransport.create([9], 8, pp_rank=0, pp_size=1, hidden_size=4, dtype=torch.float32)


def test_disagreement_messages():
    base = {"pp_rank": 0, "layer_ids": [1, 2], "mode": "relay", "hidden_size": 8}
    other = dict(base, pp_rank=1, layer_ids=[2, 1])
    message = t._describe_disagreement([base, other])
    assert "layer_ids: rank 0 has [1, 2], rank 1 has [2, 1]" in message
    assert t._describe_disagreement([base, dict(base, pp_rank=1)]) == ""
    assert "rank 1: boom" in t._describe_disagreement([base, {"pp_rank": 1, "error": "boom"}])
