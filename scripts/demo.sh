#!/usr/bin/env bash
# Set up .venv (if needed) and show what auxcap proposes for the bundled demo repository.
# AUXCAP="python -m codemods" bash scripts/demo.sh runs an existing install instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${AUXCAP:-}" ]; then
    bash scripts/setup.sh
    AUXCAP=.venv/bin/auxcap
fi
echo "== auxcap scan fixtures/demo_repo"
$AUXCAP scan fixtures/demo_repo
echo "== auxcap migrate --diff fixtures/demo_repo"
$AUXCAP migrate --diff fixtures/demo_repo
echo "== auxcap migrate --check fixtures/demo_repo"
status=0
$AUXCAP migrate --check fixtures/demo_repo || status=$?
if [ "$status" -ne 1 ]; then
    echo "expected 'migrate --check' to exit 1 (changes needed), got $status" >&2
    exit 1
fi
echo "migrate --check exited 1: the demo repository needs the changes shown above"
