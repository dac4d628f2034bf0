#!/usr/bin/env bash
# Issue 27's calibration table (docs/results/calibration.md): where each policy stands on the arith ladder and which
# level is its edge of competence (per-sample accuracy in [0.2, 0.6], pass@8 >= 0.7). Every stage is cached (SFT
# checkpoints by content, samples in each run's store), so a rerun or a resumed run redoes nothing finished.
#   launch/calibration.sh                 # all policies below, then the combined table
#   POLICIES="organism" launch/calibration.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PROCRL=${PROCRL:-.venv/bin/procrl}
[ -x "$PROCRL" ] || PROCRL=procrl
source launch/lib.sh
OUT=outputs/calib
POLICIES=${POLICIES:-"organism organism_300 organism_corrupted smollm2 gemma smollm2_sft smollm2_sft_corrupted smollm2_sft_20"}
N=${N:-64}                                # problems per level (the test split) for the organisms
N_LM=${N_LM:-32}                          # ... for the 135M/270M models (vLLM on 2 CPU cores: ~100 tokens/s)
D1="arith-ops2-d1-test arith-ops3-d1-test arith-ops4-d1-test arith-ops5-d1-test arith-ops6-d1-test"  # ops1-d1 has ~10 test problems
D2=${D2:-"arith-ops1-d2-test arith-ops2-d2-test arith-ops3-d2-test"}  # 135M/270M ladder: 3 levels fit 2 cores
D2_SFT=${D2_SFT:-"arith-ops2-d2-test arith-ops3-d2-test arith-ops4-d2-test"}  # warm-started 135M: one step harder

calibrate() {  # calibrate LABEL MODEL TEMPLATE BACKEND N LEVELS...
  local label=$1 model=$2 template=$3 backend=$4 n=$5; shift 5
  $PROCRL calibrate --model "$model" --label "$label" --levels "$@" --n-problems "$n" --prompt-template "$template" \
    --generation-backend "$backend" --max-new-tokens 96 --output-dir "$OUT/$label"
}

for policy in $POLICIES; do
  case $policy in
    organism) calibrate organism "$(sft_checkpoint configs/demo/sft_organism.yaml)" "{question}" transformers "$N" $D1 ;;
    organism_300) calibrate organism_300 "$(sft_checkpoint configs/sft/organism_clean_short.yaml)" "{question}" transformers "$N" $D1 ;;
    organism_corrupted) calibrate organism_corrupted "$(sft_checkpoint configs/sft/organism_corrupted.yaml)" "{question}" transformers "$N" $D1 ;;
    smollm2) calibrate smollm2 default one_shot vllm "$N_LM" $D2 ;;
    gemma) calibrate gemma gemma3-270m one_shot vllm "${N_GEMMA:-16}" arith-ops1-d2-test arith-ops2-d2-test ;;  # 270M: ~2x the 135M's time
    smollm2_sft) calibrate smollm2_sft "$(sft_checkpoint configs/sft/smollm2_clean.yaml)" "{question}" vllm "$N_LM" $D2_SFT ;;
    smollm2_sft_corrupted) calibrate smollm2_sft_corrupted "$(sft_checkpoint configs/sft/smollm2_corrupted.yaml)" "{question}" vllm "$N_LM" arith-ops2-d2-test arith-ops3-d2-test ;;  # the clean row's ops4 is at 0.08
    smollm2_sft_20) calibrate smollm2_sft_20 "$(sft_checkpoint configs/sft/smollm2_clean_short.yaml)" "{question}" vllm "$N_LM" $D2_SFT ;;
    *) echo "unknown policy $policy" >&2; exit 2 ;;
  esac
done
runs=()
for policy in $POLICIES; do [ -f "$OUT/$policy/run.json" ] && runs+=("$OUT/$policy"); done
$PROCRL calibrate --combine "${runs[@]}" --out docs/results/calibration.md --title "Calibration on the arith ladder"
