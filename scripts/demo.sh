#!/usr/bin/env bash
# Install auxcap with its base dependencies only (LibCST, click, GitPython; no torch) into
# .venv-demo, show what it proposes for the bundled demo repository, and what to do next.
#   AUXCAP="python -m codemods" bash scripts/demo.sh   runs an existing install instead
#   AUXCAP_DEMO_VENV=DIR bash scripts/demo.sh          installs into DIR
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${AUXCAP_DEMO_VENV:-.venv-demo}
DEMO=fixtures/demo_repo
if [ -z "${AUXCAP:-}" ]; then
    PY=${PYTHON:-python3.11}
    command -v "$PY" >/dev/null 2>&1 || PY=python3
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV"
    fi
    echo "== pip install . into $VENV (the base package: LibCST, click, GitPython)"
    # The constraints keep any torch pin of this project; the base package pulls no torch.
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install -q \
        -c scripts/constraints.txt .
    AUXCAP="$VENV/bin/auxcap"
fi

echo "== auxcap scan $DEMO"
$AUXCAP scan "$DEMO"
echo
echo "== auxcap migrate $DEMO    (the diff auxcap proposes; nothing is written)"
$AUXCAP migrate --diff "$DEMO"
echo
echo "== auxcap migrate --check $DEMO"
status=0
$AUXCAP migrate --check "$DEMO" || status=$?
echo "exit code of --check: $status (0 nothing to do, 1 changes needed, 2 a file could not be processed)"
if [ "$status" -ne 1 ]; then
    echo "expected 'migrate --check' to exit 1 (changes needed), got $status" >&2
    exit 1
fi
cat <<EOF

== next steps
# Put auxcap on PATH:
source $VENV/bin/activate
# Rewrite the demo in place (git checkout -- $DEMO undoes it):
auxcap migrate --write $DEMO
# In your own git repository: commit the rewrite on a new branch, with a PR description:
auxcap migrate PATH --branch auxcap/guard-capture --pr-body PR.md
# The SGLang patch that makes capture work under pipeline parallelism:
auxcap upstream-patch /path/to/sglang -o pp.patch --pr-body pp.md
# Or patch the SGLang that \`python\` imports, reversibly (status, apply, revert):
auxcap sglang status && auxcap sglang apply
# Validate the PP transport in real processes (adds torch):
pip install '.[pp]' && auxcap validate-pp --world-size 2
# Everything the tests need (.venv), and the test suite:
bash scripts/test.sh
EOF
