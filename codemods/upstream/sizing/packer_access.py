"""The ``captured()`` accessor of SGLang's ``AuxHiddenStatePacker``.

A stage that is not the last hands on the captures its packer holds (all of them in one
``pp_aux_seed`` sized for what the stage hands on, the first few of one sized for every
capture id), and the last stage puts the received ones before its own, so the helpers
need the captures taken so far.  The packer keeps them in a private buffer and
``finalize()`` refuses a packer that is not full; the patch adds one public method after ``__len__``
(``srt/layers/aux_hidden_states.py``, the module the helpers are appended to: the change
builds on that one), only when a patched forward packs its captures::

    def __len__(self) -> int:
        return self._idx

    def captured(self) -> torch.Tensor:
        \"\"\"The captures taken so far, side by side: ``[tokens, len(self) * hidden]``.\"\"\"
        ...
"""

from __future__ import annotations

from collections.abc import Iterable

from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.tree.sglang_tree import SGLangTree

MODULE = "sglang.srt.layers.aux_hidden_states"
PACKER = "AuxHiddenStatePacker("
ANCHOR = """    def __len__(self) -> int:
        return self._idx
"""
METHOD = '''
    def captured(self) -> torch.Tensor:
        """The captures taken so far, side by side: ``[tokens, len(self) * hidden]``."""
        if self._idx == 0:
            raise RuntimeError("no aux hidden state captured yet")
        return self._buffer[..., : self._idx * self._feature_size]
'''


def packer_access_changes(
    tree: SGLangTree, model_texts: Iterable[str], source: str | None = None
) -> list[FileChange]:
    """The accessor, when one of ``model_texts`` packs its captures and the tree's packer
    lacks it; raises ``ValueError`` naming the file when the packer has another shape.
    ``source``: the module's text as earlier parts of the patch left it (default: the
    tree's); the change goes from the tree's text to ``source`` with the accessor."""
    if not any(PACKER in text for text in model_texts):
        return []
    path = tree.module_path(MODULE)
    original = tree.read_text(path)
    source = original if source is None else source
    if source is None or "class AuxHiddenStatePacker" not in source:
        raise ValueError(f"{tree.file(path)}: AuxHiddenStatePacker not found")
    if "def captured(self)" in source:
        return []
    if source.count(ANCHOR) != 1:
        raise ValueError(f"{tree.file(path)}: AuxHiddenStatePacker.__len__ not recognised")
    new = source.replace(ANCHOR, ANCHOR + METHOD)
    return [FileChange(path, original, new, RUNTIME, Role.PACKER)]
