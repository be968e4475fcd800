"""Which sglang an interpreter imports, found without running any of sglang's code.

``locate(python)`` asks ``python`` (see :mod:`codemods.installed.interpreter`) for
``importlib.util.find_spec("sglang")`` (a top-level package's spec is found on ``sys.path``
without executing it) and ``importlib.metadata.distribution("sglang")``.  The release is the distribution's version
when that distribution is the one installed at the package's place (a wheel), else the
``__version__`` written in ``sglang/_version.py`` (a checkout whose ``python/`` is on the
path, e.g. through a ``.pth`` file).

Layouts: a wheel install (``site-packages/sglang``, tree root ``site-packages``) and an
editable checkout (``ROOT/python/sglang``, tree root ``ROOT``), each an
:class:`~codemods.upstream.tree.sglang_tree.SGLangTree` so the generator names files the way the
upstream patch does.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from codemods.installed.errors import InstalledError
from codemods.installed.interpreter import probe
from codemods.upstream.tree.releases import SEEN, VERSION
from codemods.upstream.tree.sglang_tree import SGLangTree, TreeError, detect_tree

#: The releases with capture hooks the upstream generator has been tried on, oldest first.
#: The change is generated from the files of whatever tree it is given; a release outside
#: this list gets one line saying so, never a refusal.
TRIED_RELEASES = SEEN
WHEEL, CHECKOUT, UNPACKED = "wheel", "editable checkout", "package tree"


@dataclass(frozen=True)
class Installation:
    """The sglang ``python`` imports: ``package`` (the ``sglang`` directory), ``tree`` (as
    the generator sees it), ``release``, ``kind`` (wheel, editable checkout or package tree)
    and, for a wheel, its ``dist_info`` directory (whose ``RECORD`` has the release's
    hashes)."""

    python: str
    python_version: str
    package: Path
    tree: SGLangTree
    release: str
    kind: str
    dist_info: Path | None

    @property
    def tried(self) -> bool:
        """Whether the release is one auxcap's generator has been tried on."""
        return self.release in TRIED_RELEASES

    def untried_note(self) -> str | None:
        """One line for a release outside ``TRIED_RELEASES`` (a fork, a newer release)."""
        if self.tried:
            return None
        return (
            f"release {self.release}: not one auxcap has been tried on "
            f"({TRIED_RELEASES[0]} to {TRIED_RELEASES[-1]}); the change is generated from "
            f"this tree's files the same way"
        )

    def describe(self) -> str:
        return f"sglang {self.release} ({self.kind}) at {self.package}"


def default_python() -> str:
    """The interpreter on PATH named ``python``."""
    found = shutil.which("python")
    if found is None:
        raise InstalledError("no interpreter named `python` on PATH; name one with --python")
    return found


def release_from_source(package: Path) -> str | None:
    """The ``__version__`` written in ``sglang/_version.py`` (or ``version.py``), unread by
    Python."""
    for name in ("_version.py", "version.py"):
        try:
            text = (package / name).read_text(encoding="utf-8")
        except OSError:
            continue
        match = VERSION.search(text)
        if match:
            return match.group(1)
    return None


def _tree_of(package: Path) -> SGLangTree:
    if package.parent.name == "python":
        try:
            tree = detect_tree(package.parent.parent)
        except TreeError:
            tree = None
        if tree is not None and tree.kind == "checkout":
            return tree
    return detect_tree(package.parent)


def locate(python: str) -> Installation:
    """The sglang ``python`` imports; ``InstalledError`` when it has none or it is not an
    SGLang tree auxcap can read."""
    facts = probe(python)
    if facts["origin"] is None:
        raise InstalledError(
            f"{facts['executable']}: sglang is not installed for this "
            f"interpreter (importlib.util.find_spec('sglang') is None)"
        )
    if not facts["origin"] or not facts["origin"].endswith("__init__.py"):
        where = facts["origin"] or ", ".join(facts["locations"] or [])
        raise InstalledError(f"{where}: sglang is not a regular package here")
    package = Path(facts["origin"]).resolve().parent
    try:
        tree = _tree_of(package)
    except TreeError as err:
        raise InstalledError(str(err)) from err
    dist_info = Path(facts["dist_info"]) if facts["dist_info"] else None
    base = Path(facts["dist_base"]).resolve() if facts["dist_base"] else None
    editable = '"editable": true' in (facts["direct_url"] or "").replace("\n", " ")
    is_wheel = (
        base is not None
        and base / "sglang" == package
        and not editable
        and dist_info is not None
        and (dist_info / "RECORD").is_file()
    )
    if is_wheel:
        release, kind = facts["dist_version"], WHEEL
    else:
        release = release_from_source(package) or "unknown"
        kind = CHECKOUT if tree.kind == "checkout" else UNPACKED
        dist_info = None
    return Installation(
        python=facts["executable"],
        python_version=facts["python"],
        package=package,
        tree=tree,
        release=release,
        kind=kind,
        dist_info=dist_info,
    )
