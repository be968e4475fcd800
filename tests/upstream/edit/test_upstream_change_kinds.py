"""Every file change of the upstream patch carries its series group and its role, set by the
part of the generator that made it (``codemods.upstream.edit.change_kinds``).

A fixture checkout (the mini ``sglang`` package with Kimi-Linear, Kimi-K3 and family model
files, two of them under the names of model families, and a packer) gives model rewrites,
the shipped module, the packer accessor and the shipped tests; the release check
(:func:`check_release_kinds`, run by the series' release test) gives the sizing path, the
renamed DSPARK relays and the validation.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from codemods.upstream.edit.change_kinds import (
    KIMI,
    RUNTIME,
    TEST_ROLES,
    TESTS,
    VALIDATION,
    Role,
    fix_group,
    is_model_group,
    model_group,
)
from codemods.upstream.generate import generate
from codemods.upstream.output import series
from codemods.upstream.output.model_families import FAMILIES, OTHER
from codemods.upstream.output.result_facts import file_summary

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "upstream"
#: Fixture -> the model file it becomes in the checkout.
MODEL_FILES = {
    "kimi_reformatted.py": "kimi_linear.py",
    "kimi_k3_shape.py": "kimi_k3.py",
    "family_llama_like.py": "llama.py",
    "family_deepseek_like.py": "deepseek_like.py",
    "family_missing_setter.py": "family_missing_setter.py",
}
PACKER = (
    "import torch\n\n\n"
    "class AuxHiddenStatePacker:\n    def __len__(self) -> int:\n        return self._idx\n"
)

EXPECTED = {
    "kimi_linear.py": (KIMI, Role.MODEL),
    "kimi_k3.py": (KIMI, Role.MODEL),
    "llama.py": ("llama-qwen-dense", Role.MODEL),
    "deepseek_like.py": ("deepseek", Role.MODEL),
    "family_missing_setter.py": (OTHER[0], Role.MODEL),
    # The helpers, appended to the packer's module, with the packer's accessor.
    "aux_hidden_states.py": (RUNTIME, Role.RUNTIME_MODULE),
    "pp_aux_capture_family_models.py": (TESTS, Role.TEST_MODELS),
    "test_pp_aux_capture_family.py": (TESTS, Role.FAMILY_TEST),
    "test_pp_aux_capture.py": (TESTS, Role.INIT_TEST),
}


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    package = root / "python" / "sglang"
    shutil.copytree(FIXTURES / "mini_sglang" / "sglang", package)
    for fixture, name in MODEL_FILES.items():
        shutil.copyfile(FIXTURES / fixture, package / "srt" / "models" / name)
    (package / "srt" / "layers" / "aux_hidden_states.py").write_text(PACKER)
    return root


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def test_the_kimi_group_is_the_kimi_family():
    assert model_group("kimi_linear") == model_group("kimi_k3") == KIMI
    assert KIMI in [key for _, key, _ in FAMILIES]
    for key in (RUNTIME, VALIDATION, TESTS, fix_group("llama")):
        assert not is_model_group(key)
    assert is_model_group(KIMI) and is_model_group(OTHER[0])


def test_fixture_checkout_changes_say_their_group_and_role(tmp_path):
    result = generate(_checkout(tmp_path))
    kinds = {_name(c.path): (c.group, c.role) for c in result.changes if c.changed}
    assert kinds == EXPECTED


def test_series_patches_hold_the_changes_of_their_group(tmp_path):
    result = generate(_checkout(tmp_path))
    patches = series.build_series(result)
    assert [p.key for p in patches] == [
        RUNTIME,
        fix_group("family_missing_setter"),
        KIMI,
        "llama-qwen-dense",
        "deepseek",
        OTHER[0],
    ]
    for patch in patches:
        own = [c for c in patch.changes if c.role not in TEST_ROLES]
        assert own and all(c.group == patch.key for c in own), patch.key
    (fix,) = patches[1].changes
    assert (fix.role, _name(fix.path)) == (Role.FIX, "family_missing_setter.py")
    # The family patch starts from the fixed file and keeps its group and role.
    (rest,) = [c for c in patches[-1].changes if c.path == fix.path]
    assert (rest.old, rest.group, rest.role) == (fix.new, OTHER[0], Role.MODEL)
    # The family test grows with the model patches; the init test comes last.
    spread = [(p.key, c.role) for p in patches for c in p.changes if c.group == TESTS]
    assert [role for _, role in spread].count(Role.FAMILY_TEST) >= 2
    assert spread[-1] == (OTHER[0], Role.INIT_TEST)


def test_branch_file_list_reads_the_roles(tmp_path):
    result = generate(_checkout(tmp_path))
    summaries = {_name(c.path): file_summary(result, c) for c in result.changes if c.changed}
    assert "changed" not in summaries.values()
    assert summaries["aux_hidden_states.py"] == (
        "the helpers the patched hooks and forwards call, appended after "
        "AuxHiddenStatePacker, which gains captured() for stages that hand captures on"
    )
    assert summaries["test_pp_aux_capture.py"].startswith("new CPU test")


def check_release_kinds(result, version: str) -> None:
    """The group and role of every change of a release's patch: the sizing path gains the
    aux entry before 0.5.21 and is renamed from 0.5.21, where the Kimi files are only
    renamed with it and the validation is relaxed; the runtime guard is everywhere."""
    renamed = version >= "0.5.21"
    for change in (c for c in result.changes if c.changed):
        name, kind = _name(change.path), (change.group, change.role)
        if name == "attention_backend_setup.py" or change.role is Role.RUNTIME_GUARD:
            # The runtime guard goes with the validation it backs, on every release.
            assert kind == (VALIDATION, Role.RUNTIME_GUARD), name
            assert "/model_executor/" in change.path, name
        elif name == "test_pp_aux_relay.py":
            assert kind == (VALIDATION, Role.RELAY_TEST), name
        elif name == "pp_aux_capture_family_models.py":
            # The tests' utilities: package code, in the tests' group in either layout.
            assert "/test/" in change.path and kind == (TESTS, Role.TEST_MODELS), name
        elif name == "base_runner.py":
            # The dummy-forward buffers gain the entry on every release with sizing.
            assert kind == (RUNTIME, Role.WARMUP_SIZING), name
        elif "/model_executor/" in change.path:
            assert kind == (RUNTIME, Role.SIZING_RENAME if renamed else Role.SIZING), name
        elif name.startswith("kimi") and renamed:
            assert kind == (RUNTIME, Role.RELAY_RENAME), name
        elif "/srt/models/" in change.path:
            assert kind == (model_group(name.removesuffix(".py")), Role.MODEL), name
        elif name == "validation_hook.py":
            assert kind == (VALIDATION, Role.VALIDATION), name
        else:
            assert kind in {(RUNTIME, Role.RUNTIME_MODULE), (RUNTIME, Role.PACKER)}, name
    roles = {c.role for c in result.changes if c.changed}
    assert (Role.VALIDATION in roles) is renamed, version
    assert Role.RUNTIME_GUARD in roles, version
    assert (Role.RELAY_RENAME in roles) is renamed, version
