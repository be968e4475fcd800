#!/usr/bin/env bash
# Create .venv and install auxcap with everything its tests need.
# torch is pinned to 2.13.0 (CPU build) so that no install step can resolve another torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -c scripts/constraints.txt "torch==2.13.0"
.venv/bin/python -m pip install -q -c scripts/constraints.txt -e ".[test]"
# Light packages that let real SGLang release wheels import on CPU in the upstream-patch tests
# (none of them pulls torch; the constraints keep it that way).
.venv/bin/python -m pip install -q -c scripts/constraints.txt -r tests/requirements-sglang.txt
