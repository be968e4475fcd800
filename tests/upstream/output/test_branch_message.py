"""The ``upstream-patch --branch`` commit message is built from the generator's result, like
the PR description, and is true of the release: checked on real releases against their own
text (:mod:`tests.upstream.output.release_texts`)."""

from __future__ import annotations

import re

import pytest
from sglang_support.generated import release_result

from codemods.upstream.edit import names
from codemods.upstream.output.branch_message import commit_message
from codemods.upstream.output.pr_body import render
from codemods.upstream.output.result_facts import early_return_files
from tests.upstream.output.release_texts import (
    assert_quotes_in_release,
    check_branch_message,
    early_return_by_text,
)
from tests.upstream.output.test_upstream_pr_body import section


def _heading_of(message: str, short: str) -> str:
    """The summary line a file of the message's list stands under."""
    heading = ""
    for line in message.splitlines():
        if line.strip() and not line.startswith("  "):
            heading = line
        if re.fullmatch(rf"  [AM] \S*{re.escape(short)}", line):
            return heading
    raise AssertionError(short)


@pytest.mark.sglang
@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", ["0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_branch_message_is_true_of_the_release(version, sglang_release):
    result = release_result(sglang_release(version))
    message = commit_message(result)
    check_branch_message(result, message)
    body = render(result)
    assert_quotes_in_release(result, body)
    # One result, one count: the files whose hooks return early, as a reading gives them.
    early = early_return_by_text(result)
    assert set(early_return_files(result)) == early and early
    assert f"the capture hooks of {len(early)} model files return early" in body
    title, subject = body.splitlines()[0].removeprefix("# "), message.splitlines()[0]
    assert subject == title or (len(title) > 72 and subject == title.replace("pipeline", "PP"))
    # The helpers' module, the width the hooks pass and the one lookup, as the diff has
    # them: no class sizes the entry itself.
    added = [line[1:] for line in result.patch.splitlines() if line.startswith("+")]
    assert result.glue_path.endswith("srt/layers/aux_hidden_states.py")
    assert "layers/aux_hidden_states.py" in message
    models = [c for c in result.changes if "/srt/models/" in c.path]
    assert models and not any("def get_pp_proxy_aux_hidden_size" in c.new for c in models)
    assert sum("hidden_size=self.config" in line for line in added) >= len(early)
    assert "hidden_size=" in " ".join(message.split())
    assert "pp_aux_proxy_hidden_size(model)" in " ".join(message.split())
    relay = "models/kimi_linear.py"
    if version >= "0.5.21":
        # SGLang relays DSPARK itself: Kimi-Linear's diff is a rename, said as one.
        # (The runtime guard's check raises NotImplementedError; no other paragraph
        # names it.)
        raising = [p for p in message.split("\n\n") if "NotImplementedError" in p]
        assert names.PP_ERROR not in message
        assert raising and all(p.startswith("Runtime guard: ") for p in raising), raising
        assert "renamed" in _heading_of(message, relay)
        assert "every stage" not in _heading_of(message, relay)
    else:
        assert f'NotImplementedError("{names.PP_ERROR}")' in " ".join(message.split())
        assert "instead of raising" in _heading_of(message, relay)


@pytest.mark.sglang
@pytest.mark.timeout(600)
def test_pr_body_names_the_tests_and_states_the_gpu_check_as_not_run(sglang_release):
    result = release_result(sglang_release("0.5.23"))
    body = render(result)
    accuracy = section(body, "## Accuracy Tests")
    for name in sorted(result.tests):
        if name.startswith("test_"):
            assert f"`{name}`" in accuracy, name
    bench = section(body, "## Benchmarking and Profiling")
    assert bench.startswith("Not run")
    launch = [line for line in bench.splitlines() if "sglang.launch_server" in line]
    assert len(launch) == 1 and "--pp-size 2" in launch[0]
    assert "--speculative-algorithm EAGLE3" in launch[0]  # the algorithm validation accepts
