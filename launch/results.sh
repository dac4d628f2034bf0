#!/usr/bin/env bash
# Issue 17's comparisons (docs/results/README.md): each section samples or judges into outputs/results/ (cached, so
# a rerun or a resumed run redoes nothing finished) and copies its table, plot and run.json into docs/results/<name>/.
#   launch/results.sh bestofn   # PiCSAR and PUM best-of-N: procrl select --ks once per policy (selection + curves)
#   launch/results.sh frs       # FRS on the same samples (procrl frs --traces-from), then procrl frs compare
#   launch/results.sh stepgap   # StepGap decomposability: procrl stepgap-eval --llm-only on the shipped 2Wiki steps
#   launch/results.sh all       # the three, in this order (frs needs bestofn's samples)
# Issue 28's re-runs where the signal exists (the arith organism at its edge level; docs/results/README.md, top):
#   launch/results.sh picsar_arith  # §1: procrl select on both organisms (16 samples x 400 problems) + decoupled
#   launch/results.sh frs_arith     # §4: procrl frs --judge oracle on the clean and corrupted organisms + compare
#   launch/results.sh frs_arith_judges  # §4 with the SmolLM2 and Gemma judges (ARITH_JUDGES), 100 problems, + agreement
#   launch/results.sh frs_arith_grpo    # §4's second pairs (oracle judge): before/after GRPO, GRPO arms (after grpo*)
#   launch/results.sh pum_arith     # §2: launch/pum_arith_organism.sh (PUM-Math from 3 students on 400 problems,
#                                   # gain check, the two PUM recipes)
#   launch/results.sh pum_oracle_arith  # §2, descriptive: procrl pum-oracle of PUM_MODEL on 32 samples x 400 problems
#   launch/results.sh pum_bestofn   # §2 with PUM_MODEL: best-of-N at N <= 32 (procrl select), procrl pum-oracle,
#                                   # beam search against best-of-16 (docs/results/pum_arith/{bestofn,beam})
#   launch/results.sh grpo          # §3: GRPO arms x seeds 0-2 (configs/sweeps/process_rewards_organism.yaml;
#                                   # resumable), then the paired report (PUM_CLEAN=1 adds the PUM arms, PUM_MODEL)
#   launch/results.sh grpo_corrupted  # §3's oracle arms x seeds 0-2 from the corrupted-step organism (ProcessAcc)
#   launch/results.sh grpo_pum_corrupted  # §3's PUM arms (PUM_MODEL) x seeds 0-2 from the corrupted-step organism,
#                                   # with outcome only; ARMS="a b" runs some arms, REPORT=0 skips the report
#   launch/results.sh arith         # the issue 28 sections above, in this order
# Issue 29's StepGap in the synthetic world (docs/results/README.md, "StepGap where the gaps are known"):
#   launch/results.sh world_policy    # data/world0 + its tokenizer, the world policies (SFT, cached: WORLD_POLICIES),
#                                     # world-eval on the 500 test questions: greedy (calibration row) and T = 1.0
#                                     # (annotated steps)
#   launch/results.sh world_nli       # trained stage D: procrl nli pairs / train (1,500 steps) / eval
#   launch/results.sh world_verifier  # procrl stepgap-eval --llm-only on the annotated policy steps (after the two)
# Needs the PUM of configs/pum/train_gsm8k_smollm2_cpu.yaml in outputs/pum_gsm8k_smollm2_cpu (docs/results/README.md, "Reward ablation on SVAMP").
# What docs/results/README.md publishes is the default: SmolLM2 as the policy. The issue's second policy and the
# decoupled evaluator are one variable away (not run here: too slow for 2 CPU cores, see the page):
#   POLICIES="smollm2=default gemma3-270m=gemma3-270m" DECOUPLED=1 FRS_JUDGES="local local:gemma3-270m" \
#     launch/results.sh all
set -euo pipefail
cd "$(dirname "$0")/.."
PROCRL=${PROCRL:-.venv/bin/procrl}
[ -x "$PROCRL" ] || PROCRL=procrl
source launch/lib.sh
OUT=outputs/results
DOCS=docs/results
POLICIES=${POLICIES:-"smollm2=default"}   # name=model (procrl's model names), space-separated
DECOUPLED=${DECOUPLED:-0}                 # 1: also PiCSAR with the other model as the answer evaluator
FRS_JUDGES=${FRS_JUDGES:-local}           # judges of the SVAMP FRS runs (GSM8K: always both embedded judges)
PUM_MODEL=${PUM_MODEL:-outputs/pum_arith_organism}  # the organism PUM (launch/pum_arith_organism.sh writes it) of pum_bestofn, grpo_pum_corrupted

other_of() { if [ "$1" = default ]; then echo gemma3-270m; else echo default; fi; }
name_of() { if [ "$1" = default ]; then echo smollm2; else echo "$1"; fi; }

keep() {  # keep DIR FILE...: copy the small outputs into docs/results/DIR
  local dir=$DOCS/$1; shift
  mkdir -p "$dir"
  cp "$@" "$dir/"
}

bestofn() {
  for entry in $POLICIES; do
    name=${entry%%=*}; model=${entry#*=}; other=$(other_of "$model"); oname=$(name_of "$other")
    run=$OUT/bestofn/svamp_$name
    # every selector and the best-of-k curves (ks 1,2,4,6,8,16 of the config) from one sample set
    $PROCRL select --config configs/results/select_svamp.yaml --model "$model" --output-dir "$run"
    keep bestofn/$name $run/{table.md,curves.png,run.json}
    if [ "$DECOUPLED" = 1 ]; then
      # PiCSAR's decoupling: the other model teacher-forces the answer term over the SAME samples (the samples key
      # ignores the evaluator, so a copy of the sample store is read, not resampled)
      decoupled=${run}_answer_by_$oname
      mkdir -p "$decoupled"
      cp -r "$run/cache" "$decoupled/"
      $PROCRL select --config configs/results/select_svamp.yaml --model "$model" --greedy false \
        --scorer picsar,picsar_reasoning,picsar_answer --picsar_evaluator "$other" --output-dir "$decoupled"
      keep bestofn/${name}_answer_by_$oname $decoupled/{table.md,curves.png,run.json}
    fi
  done
}

frs() {
  mkdir -p $OUT/frs
  for judge in local local:gemma3-270m; do
    jname=$([ "$judge" = local ] && echo smollm2 || echo gemma3-270m)
    runs=()
    case " $FRS_JUDGES " in
      *" $judge "*)
        for entry in $POLICIES; do
          name=${entry%%=*}
          $PROCRL frs --traces-from $OUT/bestofn/svamp_$name --judge "$judge" --frs_k_values 10 20 30 \
            --output-dir $OUT/frs/svamp_${name}_judge_$jname
          runs+=($OUT/frs/svamp_${name}_judge_$jname)
        done ;;
    esac
    # GSM8K test 0-50, 16 traces of 256 tokens (the sample store cache/ resumes; ~47 min of sampling here when absent)
    $PROCRL frs --model default --dataset gsm8k --start 0 --end 50 --frs_traces 16 --judge "$judge" \
      --frs_k_values 10 20 30 --output-dir $OUT/frs/gsm8k_smollm2_judge_$jname
    runs+=($OUT/frs/gsm8k_smollm2_judge_$jname)
    $PROCRL frs compare "${runs[@]}" --k 10 --output-dir $OUT/frs/compare_judge_$jname
    keep frs/judge_$jname $OUT/frs/compare_judge_$jname/*
    for run_dir in "${runs[@]}"; do  # each run's FRS@K curve, named after its folder
      run=$(basename "$run_dir")
      cp "$run_dir/frs.png" "$DOCS/frs/judge_$jname/${run%_judge_*}.png"
    done
  done
}

grpo() {  # the organism's SFT checkpoint comes from the cache, as a fixed sweep parameter (procrl sweep --set)
  local organism status=0 placebo=oracle_shuffled sweeps=(outputs/sweeps/process_rewards_organism) stable=()
  organism=$(sft_checkpoint configs/demo/sft_organism.yaml)
  launch/sweep.sh configs/sweeps/process_rewards_organism.yaml --set "model_name_or_path=$organism" || status=$?
  # the PUM arms moved to the corrupted-step start (grpo_pum_corrupted, §2's fourth amendment); PUM_CLEAN=1 adds them
  # here too, from the clean start
  if [ "${PUM_CLEAN:-0}" = 1 ] && [ -e "$PUM_MODEL" ]; then
    launch/sweep.sh configs/sweeps/process_rewards_organism_pum.yaml \
      --set "model_name_or_path=$organism" "pum_model=$PUM_MODEL" || status=$?
    sweeps+=(outputs/sweeps/process_rewards_organism_pum)
    placebo="$placebo,pum_anchored=pum_shuffled,pum_mixed=pum_shuffled"
    stable=(--stable pum_process)  # process-only: judged by its own after - before and the alarm (pre-registered)
  else
    echo "grpo: the oracle arms only (the PUM arms: grpo_pum_corrupted, or PUM_CLEAN=1 with PUM_MODEL)" >&2
  fi
  # a failed variant is recorded and left out of the means; the report still runs, the exit status says it
  $PROCRL report "${sweeps[@]}" --reference outcome --placebo "$placebo" "${stable[@]}" --output-dir $OUT/process_rewards_organism \
    --title "Process rewards in GRPO on the arith organism (issue 28 §3)"
  keep process_rewards_organism $OUT/process_rewards_organism/{report.md,curves.png}
  return $status
}

grpo_corrupted() {  # §3's oracle arms from the corrupted-step organism (pre-registered: decided on ProcessAcc, with
  # the clause "outcome only within 0.03 of the oracle arm: not supported" as --margin 0.03)
  local sweep=outputs/sweeps/process_rewards_organism_corrupted status=0
  launch/sweep.sh configs/sweeps/process_rewards_organism.yaml --output-dir $sweep \
    --set "model_name_or_path=$(sft_checkpoint configs/sft/organism_corrupted.yaml)" || status=$?
  $PROCRL report $sweep --reference outcome --placebo oracle_shuffled --decide-on process --margin 0.03 \
    --output-dir $OUT/process_rewards_organism_corrupted \
    --title "Process rewards in GRPO from the corrupted-step organism (issue 28 §3)"
  keep process_rewards_organism_corrupted $OUT/process_rewards_organism_corrupted/{report.md,curves.png}
  return $status
}

grpo_pum_corrupted() {  # §3's PUM arms from the corrupted-step organism (§2's fourth amendment; decided on ProcessAcc)
  # one sweep folder per arm (ARMS, in the pre-registered order), so two shells can run different ARMS side by side;
  # REPORT=0 skips the report (the other shell writes it)
  local root=outputs/sweeps/pum_corrupted corrupted arm status=0 dirs=()
  corrupted=$(sft_checkpoint configs/sft/organism_corrupted.yaml)
  for arm in ${ARMS:-outcome pum_mixed pum_shuffled pum_anchored pum_process}; do
    local sweep=configs/sweeps/process_rewards_organism_pum.yaml extra=("pum_model=$PUM_MODEL")
    [ "$arm" = outcome ] && { sweep=configs/sweeps/process_rewards_organism.yaml; extra=(); }
    launch/sweep.sh $sweep --output-dir $root/$arm \
      --set "model_name_or_path=$corrupted" "config=configs/grpo/arith_organism_$arm.yaml" "${extra[@]}" || status=$?
  done
  [ "${REPORT:-1}" = 0 ] && return $status
  for arm in outcome pum_mixed pum_shuffled pum_anchored pum_process; do [ -d $root/$arm ] && dirs+=($root/$arm); done
  $PROCRL report "${dirs[@]}" --reference outcome --placebo pum_shuffled --stable pum_process --decide-on process \
    --margin 0.03 \
    --output-dir $OUT/process_rewards_organism_corrupted_pum \
    --title "PUM rewards in GRPO from the corrupted-step organism (issue 28 §3)"
  keep process_rewards_organism_corrupted_pum $OUT/process_rewards_organism_corrupted_pum/{report.md,curves.png}
  return $status
}

stepgap() {
  $PROCRL stepgap-eval --llm-only --bootstrap-resamples 1000 --output-dir $OUT/stepgap_decomposability
  keep stepgap_decomposability $OUT/stepgap_decomposability/{table.md,metrics.png,run.json}
}

ORGANISMS="clean=configs/demo/sft_organism.yaml corrupted=configs/sft/organism_corrupted.yaml"

picsar_arith() {
  local sel=$OUT/select_arith
  declare -A ckpt
  for entry in $ORGANISMS; do ckpt[${entry%%=*}]=$(sft_checkpoint "${entry#*=}"); done
  for name in clean corrupted; do
    OMP_NUM_THREADS=1 $PROCRL select --config configs/results/select_arith_organism.yaml --model "${ckpt[$name]}" \
      --output-dir "$sel/organism_$name"
    keep picsar_arith/organism_$name "$sel/organism_$name"/{table.md,curves.png,run.json}
  done
  # the decoupled evaluator: each organism's samples (a copy of its sample store: nothing resampled), the answer
  # term teacher-forced by the other organism
  for pair in clean:corrupted corrupted:clean; do
    local policy=${pair%%:*} evaluator=${pair#*:} dir=$sel/organism_${pair%%:*}_answer_by_${pair#*:}
    mkdir -p "$dir" && cp -r "$sel/organism_$policy/cache" "$dir/"
    OMP_NUM_THREADS=1 $PROCRL select --config configs/results/select_arith_organism.yaml --model "${ckpt[$policy]}" \
      --greedy false --scorer picsar,picsar_reasoning,picsar_answer,majority --picsar-evaluator "${ckpt[$evaluator]}" \
      --contrasts picsar@6-majority@16 --output-dir "$dir"
    keep "picsar_arith/$(basename "$dir")" "$dir"/{table.md,curves.png,run.json}
  done
}

frs_arith() {
  local frs=$OUT/frs_arith runs=()
  for entry in $ORGANISMS; do
    name=${entry%%=*}
    OMP_NUM_THREADS=1 $PROCRL frs --model "$(sft_checkpoint "${entry#*=}")" --dataset arith-ops4-d1-test-n400 --start 0 \
      --end -1 --frs_traces 16 --judge oracle --frs_k_values 10 20 30 40 50 --generation_backend transformers \
      --max_new_tokens 64 --temperature 0.7 --prompt_template "{question}" --no_progress \
      --output_dir "$frs/organism_${name}_judge_oracle"
    runs+=("$frs/organism_${name}_judge_oracle")
  done
  for k in 10 50; do
    $PROCRL frs compare "${runs[@]}" --k $k --output_dir "$frs/compare_k$k"
    keep frs_arith/judge_oracle_k$k "$frs/compare_k$k"/{table.md,frs_compare.png,run.json}
  done
}

frs_arith_judges() {  # §4 with the embedded LLM judges on the first 100 problems, and their agreement with the oracle
  local frs=$OUT/frs_arith judge jname
  for judge in ${ARITH_JUDGES:-local local:gemma3-270m}; do
    jname=$([ "$judge" = local ] && echo smollm2 || echo "${judge#local:}")
    local runs=()
    for entry in $ORGANISMS; do
      name=${entry%%=*}
      $PROCRL frs --model "$(sft_checkpoint "${entry#*=}")" --dataset arith-ops4-d1-test-n400 --start 0 --end 100 \
        --frs_traces 16 --judge "$judge" --frs_k_values 10 --generation_backend transformers --max_new_tokens 64 \
        --temperature 0.7 --prompt_template "{question}" --no_progress --output_dir "$frs/organism_${name}_judge_$jname"
      runs+=("$frs/organism_${name}_judge_$jname")
    done
    $PROCRL frs compare "${runs[@]}" --k 10 --output_dir "$frs/compare_judge_$jname"
    $PROCRL frs agreement "${runs[@]}" --output_dir "$frs/agreement_judge_$jname"
    keep frs_arith/judge_$jname "$frs/compare_judge_$jname"/{table.md,frs_compare.png,run.json}
    cp "$frs/agreement_judge_$jname/agreement.md" "$DOCS/frs_arith/judge_$jname/"
    cp "$frs/agreement_judge_$jname/run.json" "$DOCS/frs_arith/judge_$jname/agreement_run.json"
  done
}

frs_arith_grpo() {  # §4's second pairs: before vs after GRPO, and outcome-only vs oracle GRPO from the corrupted start
  local frs=$OUT/frs_arith sweeps=outputs/sweeps model name
  for entry in "clean_first100=$(sft_checkpoint configs/demo/sft_organism.yaml)" \
      "clean_grpo_outcome=$sweeps/process_rewards_organism/config=arith_organism_outcome,seed=0" \
      "corrupted_grpo_outcome=$sweeps/process_rewards_organism_corrupted/config=arith_organism_outcome,seed=0" \
      "corrupted_grpo_oracle=$sweeps/process_rewards_organism_corrupted/config=arith_organism_oracle,seed=0"; do
    name=${entry%%=*}; model=${entry#*=}
    OMP_NUM_THREADS=1 $PROCRL frs --model "$model" --dataset arith-ops4-d1-test-n400 --start 0 --end 100 \
      --frs_traces 16 --judge oracle --frs_k_values 10 20 30 40 50 --generation_backend transformers \
      --max_new_tokens 64 --temperature 0.7 --prompt_template "{question}" --no_progress \
      --output_dir "$frs/organism_${name}_judge_oracle"
  done
  $PROCRL frs compare "$frs/organism_clean_first100_judge_oracle" "$frs/organism_clean_grpo_outcome_judge_oracle" \
    --k 10 --output_dir "$frs/compare_before_after_grpo"
  $PROCRL frs compare "$frs/organism_corrupted_grpo_outcome_judge_oracle" "$frs/organism_corrupted_grpo_oracle_judge_oracle" \
    --k 10 --output_dir "$frs/compare_corrupted_grpo_arms"
  $PROCRL frs compare "$frs/organism_corrupted_grpo_outcome_judge_oracle" "$frs/organism_corrupted_grpo_oracle_judge_oracle" \
    --k 50 --output_dir "$frs/compare_corrupted_grpo_arms_k50"  # not pre-registered: FRS@10 sits at its ceiling
  for dir in compare_before_after_grpo compare_corrupted_grpo_arms compare_corrupted_grpo_arms_k50; do
    keep "frs_arith/$dir" "$frs/$dir"/{table.md,frs_compare.png,run.json}
  done
}

pum_arith() {  # the build (rollouts on NPROC processes), the gain check, the three PUM recipes, the wide backbone
  NPROC=${NPROC:-2} STAGES="build check" OUT=outputs/pum_math/arith_organism launch/pum_arith_organism.sh
  keep pum_arith outputs/pum_math/arith_organism/{gain_check.json,gains.png,stats.json}
  local recipe
  for recipe in train_arith_organism train_arith_organism_lowlr train_arith_organism_mid; do
    STAGES=train TRAIN=configs/pum/$recipe.yaml PUM_OUT=outputs/pum_${recipe#train_} launch/pum_arith_organism.sh
    mkdir -p $DOCS/pum_arith/${recipe#train_}
    cp outputs/pum_${recipe#train_}/{run.json,pum_config.json} $DOCS/pum_arith/${recipe#train_}/
  done
  # the third amendment: recipe 2 on a wider organism's backbone (its SFT ~21 min here)
  local wide
  wide=$(sft_checkpoint configs/sft/organism_wide.yaml)
  "${PY:-.venv/bin/python}" train_pum.py --config configs/pum/train_arith_organism_wide.yaml --model_name_or_path "$wide" \
    --dataset_name outputs/pum_math/arith_organism/dataset
  mkdir -p $DOCS/pum_arith/arith_organism_wide
  cp outputs/pum_arith_organism_wide/{run.json,pum_config.json} $DOCS/pum_arith/arith_organism_wide/
}

pum_oracle_arith() {  # §2, descriptive: PUM_MODEL against the step oracle on the organism's 32 samples per problem
  local organism sel=$OUT/select_arith_organism_pum
  organism=$(sft_checkpoint configs/demo/sft_organism.yaml)
  # the samples and the baselines' scores (no PUM scorer: best-of-N with a PUM waits for one that beats length)
  OMP_NUM_THREADS=1 $PROCRL select --config configs/results/select_arith_organism_pum.yaml --model "$organism" \
    --scorer majority,random,picsar --ks "" --contrasts "" --output-dir $sel
  OMP_NUM_THREADS=1 $PROCRL pum-oracle $sel --pum "$PUM_MODEL" --out $OUT/pum_oracle_arith/$(basename "$PUM_MODEL").json
  keep pum_arith/oracle $OUT/pum_oracle_arith/$(basename "$PUM_MODEL").json
}

pum_bestofn() {  # §2 with a PUM (PUM_MODEL): best-of-N on 32 samples, the PUM against the oracle, beam search
  local organism sel=$OUT/select_arith_organism_pum
  organism=$(sft_checkpoint configs/demo/sft_organism.yaml)
  OMP_NUM_THREADS=1 $PROCRL select --config configs/results/select_arith_organism_pum.yaml --model "$organism" \
    --pum "$PUM_MODEL" --output-dir $sel
  OMP_NUM_THREADS=1 $PROCRL pum-oracle $sel --pum "$PUM_MODEL"
  keep pum_arith/bestofn $sel/{table.md,curves.png,run.json,pum_oracle.json}
  OMP_NUM_THREADS=1 $PROCRL beam --config configs/results/beam_arith_organism.yaml --model "$organism" \
    --pum "$PUM_MODEL" --versus $sel
  keep pum_arith/beam $OUT/beam_arith_organism/run.json
}

WORLD=data/world0
WORLD_NLI=outputs/nli/minilm_world0

# name=SFT config, or name=A.yaml+B.yaml: B's SFT starts from A's checkpoint (sft_chain in launch/lib.sh)
WORLD_POLICIES=${WORLD_POLICIES:-"organism=configs/sft/world_organism.yaml smollm2_60=configs/sft/world_smollm2_cpu.yaml+configs/sft/world_smollm2_cpu_more.yaml"}
WORLD_N=${WORLD_N:-500}            # test questions per world-eval run
WORLD_VERIFIER_POLICY=${WORLD_VERIFIER_POLICY:-smollm2_60}

world_policy() {
  local out=$OUT/world ckpt name
  [ -f $WORLD/tokenizer/tokenizer.json ] || $PROCRL world episodes --out $WORLD --n_train 4000
  for entry in $WORLD_POLICIES; do
    name=${entry%%=*}; ckpt=$(sft_chain "${entry#*=}")
    for run in "greedy --temperature 0" "t1_seed0 --temperature 1.0 --seed 0"; do
      set -- $run
      local tag=$1 dir=$out/eval_${name}_$1; shift
      # on vLLM (auto) where it runs: 64 episodes' turns together, KV cache for all of them (~1,200 tokens each)
      [ -f "$dir/world_eval.json" ] || OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} $PROCRL world-eval --model "$ckpt" \
        --world $WORLD --split test --n "$WORLD_N" --max_completion_length 1024 "$@" --output_dir "$dir" \
        --batch_size 64 --vllm_kv_cache_gib 4
      keep "world/$(basename "$dir")" "$dir/world_eval.json"
      # the verifier's data (the T = 1.0 sample's oracle-labelled steps) is kept too: the verifier table reruns from
      # the repository without the policy (its SFT and sampling take about 1.5 h on 2 cores)
      if [ "$name" = "$WORLD_VERIFIER_POLICY" ] && [ "$tag" = t1_seed0 ]; then keep "world/$(basename "$dir")" "$dir/annotated.jsonl"; fi
    done
  done
}

world_nli() {
  [ -f $WORLD/test/questions.jsonl ] || $PROCRL world episodes --out $WORLD --n_train 4000
  [ -f ${WORLD}_nli/test/nli.jsonl ] || $PROCRL nli pairs --world $WORLD --out ${WORLD}_nli
  [ -f $WORLD_NLI/config.json ] || $PROCRL nli train --pairs ${WORLD}_nli --out $WORLD_NLI --max_steps 1500
  $PROCRL nli eval --pairs ${WORLD}_nli --model $WORLD_NLI --out $WORLD_NLI/eval
  keep world/nli $WORLD_NLI/eval/nli_eval.json $WORLD_NLI/nli_train.json
}

world_verifier() {
  # the first 260 episodes are the first 1,000 annotated steps (the issue's >= 1,000; all 1,901 take ~3.8 h at
  # ~7 s a step here); the judge cache sits beside the run, so a stopped run resumes on the same machine
  $PROCRL stepgap-eval --data $DOCS/world/eval_${WORLD_VERIFIER_POLICY}_t1_seed0/annotated.jsonl --nli $WORLD_NLI --llm-only \
    --limit ${WORLD_VERIFIER_LIMIT:-260} --bootstrap-resamples 1000 --judge-num-threads 2 --judge-concurrency 16 \
    --judge-cache-dir $OUT/world/judge_cache --output-dir $OUT/world/verifier
  keep world/verifier $OUT/world/verifier/{table.md,metrics.png,run.json}
}

case "${1:-}" in
  bestofn|frs|stepgap|picsar_arith|frs_arith|frs_arith_judges|frs_arith_grpo|pum_arith|pum_bestofn|grpo) "$1" ;;
  pum_oracle_arith) "$1" ;;
  grpo_corrupted|grpo_pum_corrupted) "$1" ;;
  world_policy|world_nli|world_verifier) "$1" ;;
  all) bestofn; frs; stepgap ;;
  arith) picsar_arith; frs_arith; frs_arith_judges; pum_arith; pum_bestofn; grpo; grpo_corrupted; grpo_pum_corrupted; frs_arith_grpo ;;
  world) world_policy; world_nli; world_verifier ;;
  *) echo "usage: launch/results.sh bestofn|frs|stepgap|all|picsar_arith|frs_arith|frs_arith_judges|frs_arith_grpo|pum_arith|pum_oracle_arith|pum_bestofn|grpo|grpo_corrupted|grpo_pum_corrupted|arith|world_policy|world_nli|world_verifier|world" >&2; exit 2 ;;
esac
