"""SGLang tree detection: checkout vs package tree, and patch paths relative to the root."""

from __future__ import annotations

import pytest

from codemods.upstream.tree.sglang_tree import TreeError, detect_tree


def _package(at):
    (at / "srt" / "models").mkdir(parents=True)
    (at / "__init__.py").write_text("")


def test_checkout_layout(tmp_path):
    _package(tmp_path / "python" / "sglang")
    tree = detect_tree(tmp_path)
    assert (tree.kind, tree.package) == ("checkout", "python/sglang")
    assert tree.module_path("sglang.srt.models.kimi_linear") == (
        "python/sglang/srt/models/kimi_linear.py"
    )
    # CPU unit tests mirror srt/: those of srt/models/ go to test/registered/unit/models/.
    assert tree.tests == "test/registered/unit/models"
    assert tree.test_path("test_x.py") == "test/registered/unit/models/test_x.py"
    assert tree.read_text("python/sglang/__init__.py") == ""
    assert tree.read_text("python/sglang/missing.py") is None


def test_package_tree_and_package_dir_share_a_root(tmp_path):
    _package(tmp_path / "sglang")
    for given in (tmp_path, tmp_path / "sglang"):
        tree = detect_tree(given)
        assert tree.root == tmp_path.resolve()
        assert tree.kind == "package"
        assert tree.module_path("sglang.srt.distributed.x") == "sglang/srt/distributed/x.py"
        # No test folder: tests are never written into the package.
        assert tree.tests is None
        with pytest.raises(ValueError, match="no test folder"):
            tree.test_path("t.py")


def test_not_a_tree_names_what_it_looked_for(tmp_path):
    with pytest.raises(TreeError, match="python/sglang/srt/"):
        detect_tree(tmp_path)
    with pytest.raises(TreeError, match="not a directory"):
        detect_tree(tmp_path / "nope")


def test_module_path_rejects_foreign_modules(tmp_path):
    _package(tmp_path / "sglang")
    with pytest.raises(ValueError):
        detect_tree(tmp_path).module_path("vllm.model")
