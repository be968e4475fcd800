"""Release trees for generating the upstream patch only: the Python sources of ``srt/``.

Generation reads model files, the sizing path, the packer and the validation hook, all
Python under ``sglang/srt/``, and the package's version.  ``hook_tree(version)`` unpacks
just those from the cached wheel (``env.download_wheel``) once, into
``$AUXCAP_CACHE/unpacked-py/sglang-<ver>/`` (about a tenth of the wheel's files); where the
whole wheel is unpacked already (``env.sglang_tree``), that tree is used instead.
"""

from __future__ import annotations

from pathlib import Path

from sglang_support.env import cache_root, unpacked

TOP_FILES = ("sglang/__init__.py", "sglang/version.py", "sglang/_version.py")


def _wanted(name: str) -> bool:
    return name in TOP_FILES or (name.startswith("sglang/srt/") and name.endswith(".py"))


def hook_tree(version: str) -> Path:
    """Root (holding ``sglang/``) of a tree with the release's sources generation reads."""
    full = cache_root() / "unpacked" / f"sglang-{version}"
    if (full / "sglang" / "__init__.py").is_file():
        return full
    return unpacked(version, "unpacked-py", _wanted)
