# Shared by the launch scripts (source it after `cd` to the repository root and setting PROCRL).
# sft_checkpoint SFT_CONFIG: train with `procrl sft` (or read procrl's content-addressed SFT cache: a second call
# trains nothing) and print the checkpoint directory, `result.checkpoint` of the run's run.json.
# Flags after the config go to procrl sft too (sft_checkpoint B.yaml --model_name_or_path CKPT).
sft_checkpoint() {
  $PROCRL sft --config "$@" >&2
  local out
  out=$("${PY:-.venv/bin/python}" -c "import sys; from procrl.scripts.sft import make_parser; print(make_parser().parse_args_and_config(['--config', *sys.argv[1:]])[1].output_dir)" "$@")
  "${PY:-.venv/bin/python}" -c "import json, sys; print(json.load(open(sys.argv[1]))['result']['checkpoint'])" "$out/run.json"
}

# sft_chain A.yaml[+B.yaml...]: A's checkpoint, then B trained from it (its model_name_or_path replaced), ...; prints
# the last stage's checkpoint directory.
sft_chain() {
  local ckpt="" config stages
  IFS=+ read -ra stages <<< "$1"
  for config in "${stages[@]}"; do
    if [ -z "$ckpt" ]; then ckpt=$(sft_checkpoint "$config"); else ckpt=$(sft_checkpoint "$config" --model_name_or_path "$ckpt"); fi
  done
  echo "$ckpt"
}
