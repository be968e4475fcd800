#!/usr/bin/env bash
# Validate PP aux-capture transport under torchrun with NCCL and CUDA tensors, one GPU per
# rank, for every world size from 2 to min(GPU count, MAX_WORLD_SIZE).
#
#   bash scripts/validate_multigpu.sh                 # NCCL on all visible GPUs (2+)
#   MODE=direct MAX_WORLD_SIZE=8 bash scripts/validate_multigpu.sh
#   BACKEND=gloo NPROC=4 bash scripts/validate_multigpu.sh   # same path on CPU (smoke test)
#
# Environment: PYTHON (default .venv/bin/python, else python3), BACKEND (nccl), MODE
# (both), MAX_WORLD_SIZE (4), NPROC (ranks available; default: number of GPUs),
# TIMEOUT (seconds per world size, default 900; a hang is a failure).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
BACKEND=${BACKEND:-nccl}
MODE=${MODE:-both}
MAX_WORLD_SIZE=${MAX_WORLD_SIZE:-4}
TIMEOUT=${TIMEOUT:-900}
if [ -z "${NPROC:-}" ]; then
  NPROC=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")
fi
if [ "$NPROC" -lt 2 ]; then
  echo "validate_multigpu: needs 2+ GPUs (found $NPROC); use 'auxcap validate-pp' on CPU" >&2
  exit 2
fi
top=$(( NPROC < MAX_WORLD_SIZE ? NPROC : MAX_WORLD_SIZE ))
status=0
for world in $(seq 2 "$top"); do
  echo "== world size $world ($BACKEND, mode $MODE)"
  if ! timeout --kill-after=30 "$TIMEOUT" "$PYTHON" -m torch.distributed.run --standalone \
      --nproc-per-node "$world" -m codemods.ppcheck.torchrun \
      --backend "$BACKEND" --mode "$MODE"; then
    echo "== world size $world FAILED (or timed out after ${TIMEOUT}s)" >&2
    status=1
  fi
done
exit $status
