#!/usr/bin/env bash
# Run every variant of a sweep file (wandb's sweep format; procrl.scripts.sweep = `procrl sweep`).
#   launch/sweep.sh configs/sweeps/reward_ablation_svamp.yaml               # offline runner, resumable
#   launch/sweep.sh configs/sweeps/stepgap_ablation_2wiki.yaml --dry-run    # print the variants' commands
#   WANDB_MODE=online launch/sweep.sh SWEEP.yaml --wandb on   # wandb sweep + wandb agent (needs an API key and a
#       reachable server; no per-variant folders under the agent). Without --wandb on it is always the offline runner.
#   launch/sweep.sh SWEEP.yaml --output-dir outputs/sweeps/mine --count 4   # extra flags go to procrl sweep
# Variants run from the repository root, each in <output dir>/<variant name> (default outputs/sweeps/<sweep name>);
# run the same command again after an interruption: finished variants (run.json "finished" with the same settings)
# are skipped; a finished variant whose settings changed refuses the sweep unless --rerun.
set -euo pipefail
CALLER_DIR=$(pwd)
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: launch/sweep.sh SWEEP.yaml [procrl sweep flags]" >&2
  exit 2
fi
SWEEP=$1; shift
# a relative path that exists from the caller's directory is taken from there; otherwise from the repository root
case "$SWEEP" in /*) ;; *) if [ -e "$CALLER_DIR/$SWEEP" ]; then SWEEP="$CALLER_DIR/$SWEEP"; fi ;; esac
export WANDB_MODE=${WANDB_MODE:-offline}  # the runs' own wandb logging (report_to) stays offline unless you set it
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
echo "sweep: $PY -m procrl.scripts.sweep $SWEEP $*" >&2
exec "$PY" -m procrl.scripts.sweep "$SWEEP" "$@"
