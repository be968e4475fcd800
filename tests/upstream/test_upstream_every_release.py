"""Every SGLang release with capture hooks (0.4.10.post2 to 0.5.23) gets a patch.

Each release's tree is unpacked once, sources only (``sglang_support.hook_trees``).  Every
part that does not apply says why; every file the patch touches compiles; at least 90% of
the model files whose capture hooks look at the PP rank (return early off the last rank),
every one of them counted, are rewritten: patched to relay (by the family or by a part of
their own), or, for a model that refuses PP in its constructor, rid of the early return
that never runs (``dead_returns``: no capture hook decides by PP rank by itself) and
nothing else.  A release whose whole wheel is unpacked shares its generation with the other
tests of the session (``sglang_support.generated``).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sglang_support.generated import release_result
from sglang_support.hook_trees import hook_tree

from codemods.cli.commands import cli
from codemods.upstream.output.family_report import REFUSES_PP
from codemods.upstream.part import SUPPORTED, Verdict
from codemods.upstream.tree.releases import LAST_BUILDS, release_of

pytestmark = [pytest.mark.slow, pytest.mark.sglang]
#: Releases whose kimi_linear.py has no DSPARK hook.
KIMI_WITHOUT_HOOK = LAST_BUILDS[LAST_BUILDS.index("0.5.4.post3") : LAST_BUILDS.index("0.5.17")]


@pytest.mark.parametrize("version", LAST_BUILDS)
def test_every_release_gets_a_patch(version):
    root = hook_tree(version)
    result = release_result(root)
    assert release_of(result.tree) == version
    assert result.patch, version
    for answer in result.parts:
        if answer.decision.verdict is not Verdict.APPLIES:
            assert answer.decision.reason, (version, answer.name)
    for change in result.changes:
        if change.changed and change.path.endswith(".py"):
            compile(change.new, change.path, "exec")
    own = {s.file for s in result.models if s.status != SUPPORTED or s.path in result.changed}
    changed = {path.rsplit("/", 1)[-1] for path in result.changed}
    early = [d for d in result.family.decisions.values() if d.early_return]
    covered = [d for d in early if d.patched or d.file in own or d.dead_returns]
    assert early and len(covered) >= 0.9 * len(early), (version, len(covered), len(early))
    for decision in covered:
        assert decision.file in changed, (version, decision.file)
    # A model that refuses PP in its constructor relays nothing: its early return is
    # dropped, and it declares no relay (validation and the runtime guard refuse it).
    for decision in early:
        if decision.reason.startswith(REFUSES_PP):
            assert decision.dead_returns and not decision.patched, (version, decision)
            new = next(c.new for c in result.changes if c.path.endswith("/" + decision.file))
            assert "pp_aux_relay_methods" not in new and "set_pp_aux_capture(" not in new
    # Every release sizes CUDA-graph buffers for the PP handoff: the sizing part applies or
    # says what leaving it out breaks.
    sizing = result.decision("sizing")
    assert sizing.verdict in (Verdict.APPLIES, Verdict.LEFT_OUT), (version, sizing)
    kimi = result.decision("kimi_linear")
    if version in KIMI_WITHOUT_HOOK:
        assert kimi.verdict is Verdict.NOT_APPLICABLE
        assert kimi.reason == "kimi_linear.py has no DSPARK hook in this release"


def test_a_partial_patch_says_what_it_leaves_out():
    """0.5.14 (the release SpecForge pins): the family is patched, Kimi-Linear has no DSPARK
    hook, and the CUDA-graph sizing of the PP proxy buffers is left out, said aloud."""
    root = hook_tree("0.5.14")
    done = CliRunner().invoke(cli, ["upstream-patch", str(root), "--models", "llama"])
    assert done.exit_code == 0, done.output
    assert "diff --git a/sglang/srt/models/llama.py" in done.stdout
    assert "kimi_linear.py has no DSPARK hook in this release" in done.stderr
    assert "warning: partial patch: part sizing left out: " in done.stderr
    assert "--disable-cuda-graph" in done.stderr


@pytest.mark.parametrize("version", ("0.5.14", "0.5.23"))
def test_every_model_file_the_patch_changes_is_counted_patched(version, tmp_path):
    """0.5.14's qwen3_next.py (a dead early return dropped), 0.5.23's qwen3_5.py (the
    capture forward of another file's hooks) and kimi files (their relay renamed): changed by
    the patch, so never "skipped", and counted."""
    out = tmp_path / "p.patch"
    done = CliRunner().invoke(cli, ["upstream-patch", str(hook_tree(version)), "-o", str(out)])
    assert done.exit_code == 0, done.output
    prefix = "diff --git a/sglang/srt/models/"
    changed = {
        line.split(" b/")[0].removeprefix(prefix)
        for line in out.read_text().splitlines()
        if line.startswith(prefix)
    }
    lines = [line.removeprefix("auxcap: ") for line in done.stderr.splitlines()]
    patched = {line.split()[1].rstrip(":") for line in lines if line.startswith("  patched  ")}
    skipped = {line.split()[1].rstrip(":") for line in lines if line.startswith("  skipped  ")}
    assert "qwen3_next.py" in patched and not skipped & changed
    hooked = len(patched) + len(skipped)
    assert f"capture-hook family: {len(patched)} of {hooked} model files with a hook patched" in (
        lines
    )
    assert patched == changed & (patched | skipped)
    for line in lines:
        if line.startswith("Kimi-") and line.split("(", 1)[1].split(")")[0] in changed:
            assert line.endswith("only its relay is renamed"), line
