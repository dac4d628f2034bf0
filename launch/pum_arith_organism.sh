#!/usr/bin/env bash
# Issue 28 §2 on the arith model organism: PUM-Math pairs from three organism students (300 and 1,000 SFT steps clean,
# 1,000 corrupted), the oracle gain check, then a PUM with the 1,000-step organism as its backbone. The checkpoints
# come from the SFT cache (`procrl sft` trains a missing one, ~6-10 min each, and prints it), so the configs' cache
# paths need not match this machine. Every stage is cached or resumable: a rerun redoes nothing finished.
#   launch/pum_arith_organism.sh                        # configs/pum/build_arith_organism.yaml, then train
#   END=3008 OUT=outputs/pum_math/arith_organism_8 launch/pum_arith_organism.sh   # a small slice
#   STAGES="build check" launch/pum_arith_organism.sh   # without training
#   NPROC=2 launch/pum_arith_organism.sh                # the build's rollouts on 2 processes (launch/build_pum_math.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
PROCRL=${PROCRL:-.venv/bin/procrl}
[ -x "$PROCRL" ] || PROCRL=procrl
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
STAGES=${STAGES:-"build check train"}
BUILD=configs/pum/build_arith_organism.yaml
TRAIN=${TRAIN:-configs/pum/train_arith_organism.yaml}
OUT=${OUT:-outputs/pum_math/arith_organism}
PUM_OUT=${PUM_OUT:-outputs/pum_arith_organism}
EXTRA=()
[ -n "${END:-}" ] && EXTRA+=(--end "$END")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
source launch/lib.sh

if [[ " $STAGES " == *" build "* || " $STAGES " == *" train "* ]]; then  # ~25 s each: procrl sft keys the data
  WEAK=$(sft_checkpoint configs/sft/organism_clean_short.yaml)
  CLEAN=$(sft_checkpoint configs/demo/sft_organism.yaml)
  CORRUPTED=$(sft_checkpoint configs/sft/organism_corrupted.yaml)
fi
for stage in $STAGES; do
  case $stage in
    build) CONFIG="$BUILD" launch/build_pum_math.sh --output_dir "$OUT" --policy_model "$CLEAN" \
             --students "$WEAK" "$CLEAN" "$CORRUPTED" "${EXTRA[@]}" ;;
    check) $PROCRL pum-gain-check "$OUT" ;;
    train) "$PY" train_pum.py --config "$TRAIN" --model_name_or_path "$CLEAN" --dataset_name "$OUT/dataset" \
             --output_dir "$PUM_OUT" ;;
    *) echo "usage: STAGES='build check train' launch/pum_arith_organism.sh (unknown stage $stage)" >&2; exit 2 ;;
  esac
done
