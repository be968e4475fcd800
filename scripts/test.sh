#!/usr/bin/env bash
# Set up .venv (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two workers (or as many cores as there are, up to 4); each test file stays on one worker,
# so module fixtures that drive real pipeline stages run once.
WORKERS=$(.venv/bin/python -c 'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')
exec .venv/bin/python -m pytest -n "$WORKERS" --dist loadfile --durations=20 "$@"
