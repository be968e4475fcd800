"""Multi-process validation of aux hidden-state capture under pipeline parallelism.

``auxcap validate-pp`` runs a matrix of :class:`Scenario` s in real processes (one per
stage, ``torch.distributed`` with gloo on CPU or NCCL on GPUs): a scheduler-like loop moves
the handoff dict between adjacent stages with real send/recv (metadata first, then
tensors), stage 0 runs ahead with several microbatches in flight, and the last stage sends
each output back to stage 0. The last stage's aux states are compared with a PP=1 run of
the same stages using ``torch.equal``, and the bytes and keys on the wire with their
analytic values. Every run has a timeout; a hang is a failure.

Stage factory interface
-----------------------
The model under test is pluggable. A stage factory is a picklable, module-level callable::

    stage_factory(spec: dict, pp_rank: int, pp_size: int, transport_kwargs: dict) -> stage

* ``spec`` is ``Scenario.spec()``: ``num_layers``, ``layer_ids`` (None: capture off),
  ``layer_ids_by_rank``, ``tokens`` (per microbatch), ``hidden``, ``dtype`` (a torch
  dtype name), ``mode``, ``in_place``, ``fault``, ``light``, ``feature``, plus
  ``Scenario.extra`` merged in (free-form, for your factory).
  ``fault`` is None in the PP=1 reference run.
* ``transport_kwargs`` has ``mode``, ``group`` (the group for the handshake),
  ``direct_group`` (the dedicated direct-mode group), ``ranks`` (global ranks in stage
  order), ``device`` and ``feature``. With ``pp_size == 1`` (the reference run) it only
  has ``mode`` and ``device``. ``toy.make_transport(spec, pp_rank, pp_size,
  transport_kwargs, hidden_size=..., dtype=...)`` builds and handshakes the right
  ``PPAuxTransport`` (or returns None when capture is off); every rank must call it.
* ``stage.forward(mb, hidden_in, proxy)``: ``mb`` is the microbatch id; on stage 0
  ``hidden_in`` is the input and ``proxy`` is None; on other stages ``hidden_in`` is None
  and ``proxy`` is the received handoff dict. Non-last stages return the handoff dict
  (``hidden_states``, ``residual``, plus ``transport.outgoing(...)``); the last stage
  returns ``(hidden_states, aux_list)`` with ``aux_list`` from ``transport.collect(...)``.
* Optional: ``stage.make_input(mb)`` (stage 0's input; default
  :func:`toy.default_input`, ``[tokens, hidden]`` in ``spec["dtype"]``),
  ``stage.flush()`` (called after the last microbatch; complete outstanding direct sends)
  and ``stage.transport`` (its ``stats`` are checked against the analytic bytes), and on
  the last stage ``stage.check(results)`` (the ``(hidden_states, aux_list)`` of every
  microbatch; the dict it returns goes into that rank's report).

Entry points: :func:`run_scenario`, :func:`run_scenarios`, :func:`build_matrix`,
:func:`format_table`. The default factory is :func:`toy.toy_stage_factory`.
"""

from codemods.ppcheck.runner import format_table, run_scenario, run_scenarios, summarize
from codemods.ppcheck.scenario import Scenario, ScenarioResult, build_matrix, expected_wire

__all__ = [
    "Scenario",
    "ScenarioResult",
    "build_matrix",
    "expected_wire",
    "format_table",
    "run_scenario",
    "run_scenarios",
    "summarize",
]
