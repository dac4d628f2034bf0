#!/usr/bin/env bash
# GRPO with the StepGap reward on 2WikiMultihopQA questions (docs/architecture.md "StepGap"; procrl.trainers.tasks.search):
# search episodes over the bm25s index, typed step labels from the judge, R = EM + λ Σ [base + shaping].
# Logs stepgap/label_{NONE,CC,IE,MB,ERROR}, stepgap/searches_per_completion, rewards/em_reward/mean and
# task/accuracy (EM) to wandb (offline unless WANDB_MODE says otherwise) and writes run.json (the results) + curves.png.
#   launch/grpo_stepgap.sh                                   # default model, local judge, builtin index, 2 CPU steps
#   JUDGE=http://127.0.0.1:8000/v1 RETRIEVER=http://127.0.0.1:8001 LAMBDA=0.5 SHAPING=off launch/grpo_stepgap.sh
#   CONFIG=configs/grpo/stepgap_2wiki_smollm2_zero_cc.yaml launch/grpo_stepgap.sh --max_steps 5   # flags override
#   WORLD=data/world0 MODEL=<world SFT checkpoint> launch/grpo_stepgap.sh   # the synthetic world (procrl world episodes):
#       configs/grpo/stepgap_world_organism.yaml, its train questions and corpus, the oracle's labels (JUDGE=oracle)
set -euo pipefail
cd "$(dirname "$0")/.."

WORLD=${WORLD:-}                          # a generated world's folder: its config, questions, corpus and oracle
if [ -n "$WORLD" ]; then
  [ -f "$WORLD/train/questions.jsonl" ] || { echo "WORLD=$WORLD has no train/questions.jsonl: procrl world episodes --out $WORLD" >&2; exit 2; }
  CONFIG=${CONFIG:-configs/grpo/stepgap_world_organism.yaml}
  MODEL=${MODEL:-outputs/sft/world_organism}
  JUDGE=${JUDGE:-oracle}
  RETRIEVER=${RETRIEVER:-$WORLD/train/corpus.jsonl}
fi
CONFIG=${CONFIG:-configs/grpo/stepgap_2wiki_smollm2.yaml}
MODEL=${MODEL:-default}                   # policy: "default" (embedded SmolLM2-135M-Instruct), a directory or hub id
JUDGE=${JUDGE:-local}                     # "local" (vLLM's OpenAI server, started and stopped by the job), a URL, or oracle (a world)
RETRIEVER=${RETRIEVER:-2wiki_corpus_sample}  # builtin bm25s corpus, JSONL / index dir, or a retrieval-server URL
NLI=${NLI:-judge}                         # "judge" (LLM NLI prompt) or a cross-encoder path / hub id
LAMBDA=${LAMBDA:-}                        # λ; empty = the config's (1.0)
SHAPING=${SHAPING:-}                      # on | off; empty = the config's (on; off in the no_shaping control)
export WANDB_MODE=${WANDB_MODE:-offline}
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}

PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python

args=(--config "$CONFIG" --model_name_or_path "$MODEL" --judge "$JUDGE" --retriever "$RETRIEVER" --nli "$NLI")
if [ -n "$WORLD" ]; then args+=(--dataset_name "$WORLD/train/questions.jsonl"); fi
if [ -n "$LAMBDA" ]; then args+=(--stepgap_lambda "$LAMBDA"); fi
case "$SHAPING" in
  "") ;;
  on|true) args+=(--stepgap_shaping true) ;;
  off|false) args+=(--stepgap_shaping false) ;;
  *) echo "SHAPING must be on or off, got '$SHAPING'" >&2; exit 2 ;;
esac

echo "grpo_stepgap: $PY train_grpo.py ${args[*]} $*" >&2
exec "$PY" train_grpo.py "${args[@]}" "$@"
