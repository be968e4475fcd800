"""Make SGLang's own DSPARK relay (Kimi-Linear, 0.5.21+) fail loudly.

From 0.5.21 ``KimiLinearModel.forward`` carries DSPARK captures across pipeline stages
itself: a non-last stage concatenates its captures (and those it received) into the
``dspark_hidden_states`` entry of the PP handoff, and the next stage takes the entry if it
is there::

    aux_hidden_states = []
    if (
        self.dspark_layers_to_capture is not None
        and not self.pp_group.is_first_rank
        and "dspark_hidden_states" in pp_proxy_tensors.tensors
    ):
        aux_hidden_states.append(pp_proxy_tensors["dspark_hidden_states"])

When the entry is absent (a handoff built without it, or a preallocated buffer without the
key at CUDA-graph replay) the stage goes on with fewer captures and no error, and the draft
gets fewer aux hidden states than it was trained on.  The rewrite checks the entry against
the layers this stage expects from earlier stages (the capture ids below its
``start_layer``, ``hidden_size`` wide each, the same count
``get_pp_proxy_dspark_hidden_size`` sizes the buffers with)::

    aux_hidden_states = []
    if (
        self.dspark_layers_to_capture is not None
        and not self.pp_group.is_first_rank
    ):
        relayed = self._relayed_dspark_hidden_states(pp_proxy_tensors)
        if relayed is not None:
            aux_hidden_states.append(relayed)

``_relayed_dspark_hidden_states`` (added to the model class) raises ``RuntimeError`` naming
the layers when the entry is missing, has the wrong width (a count mismatch), or is there
although no earlier stage holds a capture layer.  Nothing else changes.

:func:`analyse` says ``needs_patch``, ``patched`` or ``absent`` (no such relay: 0.5.18-0.5.20,
or a file without DSPARK); :func:`rewrite` returns the new text.
"""

from __future__ import annotations

from dataclasses import dataclass

MODULE = "sglang.srt.models.kimi_linear"
NEEDS_PATCH = "needs_patch"
PATCHED = "patched"
ABSENT = "absent"
METHOD = "_relayed_dspark_hidden_states"
MODEL_CLASS = "class KimiLinearModel("
#: What the patch does to the file, for the command's report.
NOTE = "its DSPARK relay now raises on a missing or mismatched handoff entry"

_TAKE = """\
        if (
            self.dspark_layers_to_capture is not None
            and not self.pp_group.is_first_rank
            and "dspark_hidden_states" in pp_proxy_tensors.tensors
        ):
            aux_hidden_states.append(pp_proxy_tensors["dspark_hidden_states"])
"""

_TAKE_NEW = f"""\
        if (
            self.dspark_layers_to_capture is not None
            and not self.pp_group.is_first_rank
        ):
            relayed = self.{METHOD}(pp_proxy_tensors)
            if relayed is not None:
                aux_hidden_states.append(relayed)
"""

_CHECK = f'''\
    def {METHOD}(
        self, pp_proxy_tensors: PPProxyTensors
    ) -> Optional[torch.Tensor]:
        """The DSPARK captures of earlier pipeline stages, from the PP handoff.

        Raises when the handoff does not carry exactly the capture layers below
        this stage's first layer, so the draft never sees fewer aux hidden states.
        """
        layers = sorted(
            layer for layer in self.dspark_layers_to_capture if layer < self.start_layer
        )
        relayed = pp_proxy_tensors.tensors.get("dspark_hidden_states")
        if not layers:
            if relayed is not None and relayed.shape[-1] != 0:
                raise RuntimeError(
                    "The pipeline-parallel handoff carries DSPARK aux hidden states "
                    f"of width {{relayed.shape[-1]}}, but no DSPARK capture layer "
                    f"(layers {{sorted(self.dspark_layers_to_capture)}}) lies before "
                    f"layer {{self.start_layer}}."
                )
            return None
        if relayed is None:
            raise RuntimeError(
                f"DSPARK aux hidden states of layers {{layers}} (captured on earlier "
                "pipeline stages) are missing from the pipeline-parallel handoff "
                f"of the stage starting at layer {{self.start_layer}}."
            )
        width = self.config.hidden_size * len(layers)
        if relayed.shape[-1] != width:
            raise RuntimeError(
                f"DSPARK aux hidden states of layers {{layers}}: the pipeline-parallel "
                f"handoff carries width {{relayed.shape[-1]}}, expected {{width}} "
                f"({{len(layers)}} layers x hidden size {{self.config.hidden_size}})."
            )
        return relayed

'''


class RelayShapeError(ValueError):
    """The file has the DSPARK relay but not in the shape this module rewrites."""


@dataclass(frozen=True)
class RelayAnalysis:
    status: str
    reason: str = ""


def analyse(source: str) -> RelayAnalysis:
    if f"def {METHOD}(" in source:
        return RelayAnalysis(PATCHED, "the DSPARK relay already checks its handoff")
    if '"dspark_hidden_states"' not in source:
        return RelayAnalysis(ABSENT, "no DSPARK relay in the PP handoff")
    if source.count(_TAKE) != 1 or source.count(MODEL_CLASS) != 1:
        return RelayAnalysis(ABSENT, "the DSPARK relay has another shape")
    return RelayAnalysis(NEEDS_PATCH, "the DSPARK relay drops a missing handoff entry")


def rewrite(source: str, filename: str) -> str:
    """``source`` with the relay checked; unchanged unless :func:`analyse` says
    ``needs_patch``.  Raises :class:`RelayShapeError` naming ``filename`` when the model
    class has no ``forward`` to put the check before."""
    if analyse(source).status != NEEDS_PATCH:
        return source
    start = source.index(MODEL_CLASS)
    forward = source.find("\n    def forward(", start)
    if forward < 0:
        raise RelayShapeError(f"{filename}: KimiLinearModel has no forward method")
    at = forward + 1
    text = source[:at] + _CHECK + source[at:]
    return text.replace(_TAKE, _TAKE_NEW)
