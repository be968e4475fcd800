"""Which SGLang release a tree is, and whether auxcap has seen it.

Nothing is decided by the version: every part of the patch looks at what the tree holds.
The version only names the release in messages, and :data:`SEEN` (the releases with capture
hooks the generator has been run on, 0.4.10.post2 to 0.5.23) lets ``upstream-patch`` and
``auxcap sglang`` say, in one line, that a release is new to auxcap (a fork, a newer
release).  :data:`VERSION` reads the version a package file declares.
"""

from __future__ import annotations

import re

from codemods.upstream.tree.sglang_tree import SGLangTree

#: Every SGLang release line on the package index with capture hooks, its last build.
LAST_BUILDS = (
    "0.4.10.post2",
    "0.5.0rc2",
    "0.5.1.post3",
    "0.5.2",
    "0.5.3.post3",
    "0.5.4.post3",
    "0.5.5.post3",
    "0.5.6.post2",
    "0.5.7",
    "0.5.8.post1",
    "0.5.9",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12.post1",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
#: Every release auxcap has been tried on, oldest first: the last builds, and the first
#: builds of 0.5.3 and 0.5.10 (the old releases the PP proofs drive).
SEEN = (*LAST_BUILDS[:4], "0.5.3", *LAST_BUILDS[4:11], "0.5.10", *LAST_BUILDS[11:])
VERSION = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)


def release_of(tree: SGLangTree) -> str | None:
    """The version the tree's package declares (``_version.py``, else ``version.py``)."""
    for module in ("sglang._version", "sglang.version"):
        text = tree.read_text(tree.module_path(module))
        found = VERSION.search(text or "")
        if found:
            return found.group(1)
    return None


def unseen_line(tree: SGLangTree) -> str | None:
    """One line saying the release is new to auxcap (None: one it has seen)."""
    release = release_of(tree)
    if release in SEEN:
        return None
    name = f"SGLang {release}" if release else "an SGLang tree without a version"
    return (
        f"{name} is a release auxcap has not seen; every part decided from what the tree "
        "holds, as on every release"
    )
