#!/usr/bin/env bash
# Set up .venv (if needed) and show what auxcap proposes for the bundled demo repository.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/auxcap scan fixtures/demo_repo
.venv/bin/auxcap migrate --diff fixtures/demo_repo || [ $? -eq 1 ]
