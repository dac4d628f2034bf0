#!/usr/bin/env bash
# Build PUM-Math preference pairs (docs/architecture.md "PUM").
#   launch/build_pum_math.sh                      # one process (CPU or one GPU)
#   NPROC=2 launch/build_pum_math.sh              # rollouts sharded over 2 processes
#   CONFIG=configs/pum/build_gsm8k.yaml launch/build_pum_math.sh --end 10   # extra flags override the config
# On CPU several processes run through torchrun (`accelerate launch --cpu` starts only one); on GPUs through
# `accelerate launch`. A killed run resumes from its rollout cache when started again with the same config.
# The command is `python -m procrl.scripts.build_pum_data` (= `procrl build-pum-data`).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-configs/pum/build_gsm8k.yaml}
NPROC=${NPROC:-1}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
if [ "$NPROC" -gt 1 ]; then
  if "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    exec "$PY" -m accelerate.commands.launch --num_processes "$NPROC" -m procrl.scripts.build_pum_data --config "$CONFIG" "$@"
  else
    ACCELERATE_USE_CPU=True exec "$PY" -m torch.distributed.run --nproc_per_node "$NPROC" -m procrl.scripts.build_pum_data -- --config "$CONFIG" "$@"
  fi
fi
exec "$PY" -m procrl.scripts.build_pum_data --config "$CONFIG" "$@"
