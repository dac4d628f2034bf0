# Shared by the launch scripts (source it after `cd` to the repository root and setting PROCRL).
# sft_checkpoint SFT_CONFIG: train with `procrl sft` (or read procrl's content-addressed SFT cache: a second call
# trains nothing) and print the checkpoint directory, `result.checkpoint` of the run's run.json.
sft_checkpoint() {
  $PROCRL sft --config "$1" >&2
  local out
  out=$("${PY:-.venv/bin/python}" -c "import sys; from procrl.scripts.sft import make_parser; print(make_parser().parse_args_and_config(['--config', sys.argv[1]])[1].output_dir)" "$1")
  "${PY:-.venv/bin/python}" -c "import json, sys; print(json.load(open(sys.argv[1]))['result']['checkpoint'])" "$out/run.json"
}
