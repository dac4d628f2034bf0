#!/usr/bin/env bash
# GRPO with the PUM reward (docs/architecture.md "PUM" and "Process advantages"; procrl.rewards.pum_rewards) on SVAMP.
#   launch/grpo_pum.sh                                    # outcome-anchored: outcome + 0.5 U(x, y)
#   VARIANT=process_only launch/grpo_pum.sh               # U(x, y) alone (reward_funcs [pum_min] / [pum_last]: flags)
#   VARIANT=process_adv launch/grpo_pum.sh                # per-step PUM increments as process advantages (mixed)
#   PUM=outputs/my_pum NPROC=2 launch/grpo_pum.sh --max_steps 5   # extra flags override the config
# The PUM comes from train_pum.py (build pairs: launch/build_pum_math.sh; train:
# accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml).
set -euo pipefail
CALLER_DIR=$(pwd)
cd "$(dirname "$0")/.."
# a relative path that exists from the caller's directory is taken from there; otherwise from the repository root
from_caller() { case "$1" in /*) echo "$1" ;; *) if [ -e "$CALLER_DIR/$1" ]; then echo "$CALLER_DIR/$1"; else echo "$1"; fi ;; esac; }

VARIANT=${VARIANT:-outcome_anchored}      # outcome_anchored | process_only | process_adv
PUM=${PUM:-outputs/pum_gsm8k_smollm2}      # train_pum.py output directory (checkpoint or LoRA adapter + score head)
MODEL=${MODEL:-default}                   # policy: "default" (embedded SmolLM2-135M-Instruct), a directory or hub id
NPROC=${NPROC:-1}                         # processes (GPUs, or CPU ranks through torchrun)
export WANDB_MODE=${WANDB_MODE:-offline}
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}

case "$VARIANT" in
  outcome_anchored) CONFIG=${CONFIG:-configs/grpo/svamp_smollm2_pum.yaml} ;;
  process_only) CONFIG=${CONFIG:-configs/grpo/svamp_smollm2_pum_process.yaml} ;;
  process_adv) CONFIG=${CONFIG:-configs/grpo/svamp_smollm2_pum_steps.yaml} ;;
  *) echo "VARIANT must be outcome_anchored, process_only or process_adv, got '$VARIANT'" >&2; exit 2 ;;
esac
PUM=$(from_caller "$PUM"); MODEL=$(from_caller "$MODEL"); CONFIG=$(from_caller "$CONFIG")
if [ ! -e "$PUM" ]; then  # checked here, before a model loads (a hub PUM: download it to a directory first)
  echo "grpo_pum: no PUM at '$PUM'. Train one first (accelerate launch train_pum.py --config" \
       "configs/pum/train_gsm8k_smollm2.yaml) or set PUM=<train_pum.py output directory>." >&2
  exit 2
fi

PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
args=(--config "$CONFIG" --model_name_or_path "$MODEL" --pum_model "$PUM")
echo "grpo_pum ($VARIANT): train_grpo.py ${args[*]} $*" >&2
if [ "$NPROC" -gt 1 ]; then
  if "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    exec "$PY" -m accelerate.commands.launch --num_processes "$NPROC" train_grpo.py "${args[@]}" "$@"
  else
    ACCELERATE_USE_CPU=True exec "$PY" -m torch.distributed.run --nproc_per_node "$NPROC" train_grpo.py -- "${args[@]}" "$@"
  fi
fi
exec "$PY" train_grpo.py "${args[@]}" "$@"
