"""`procrl sft` / `train_sft.py`: warm-start a policy on gold traces with TRL's SFTTrainer; checkpoints cached by content.

    procrl sft --config configs/sft/gsm8k_smollm2.yaml                      # SmolLM2-135M-Instruct on GSM8K traces
    procrl sft --config configs/sft/scratch_llama_gsm8k.yaml                # a from-scratch Llama organism
    accelerate launch train_sft.py --config configs/sft/gsm8k_smollm2.yaml  # the same command
    python train_sft.py --config configs/sft/gsm8k_smollm2.yaml --max_steps 20 --force true
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_sft.py --config configs/sft/gsm8k_smollm2.yaml

The flags are the fields of `SFTScriptArguments` and `SFTTrainingConfig` (`procrl.trainers.sft`) and of TRL's
`ModelConfig`; `--config x.yaml` sets them from a file and flags override it. `model_name_or_path` is a model
directory or hub id ("default" = the embedded SmolLM2-135M-Instruct) or a randomly initialised organism,
`scratch:llama,hidden=128,layers=4,heads=4,intermediate=512[,kv_heads=K][,positions=P][,tie=true][,seed=S]
[,tokenizer=PATH|default]` (procrl.scratch_models). Each row's chat prompt is the prompt and its `solution` the
completion (loss on the completion only); a set with empty solutions (svamp) is refused.

The trained model goes to `$PROCRL_CACHE/sft/<key>/` (`cache_dir`), `key` a hash of the base model's content, the
rows used and the settings that change the weights (procrl.trainers.sft_cache); a second run with the same content
prints `cached: <path>` and trains nothing (`--force true` retrains). The checkpoint directory (model, tokenizer,
sft.json) is what train_grpo.py's `model_name_or_path` takes. The run record `run.json` in `output_dir` holds the
summary as `result` (status trained | cached, key, checkpoint, data and token counts, steps, wall and step time,
loss, bf16, the key's inputs), the checkpoint as `files.checkpoint`, `sft/*` metrics and the log history. The exit
status is 0, or 2 after one `<prog>: error: ...` line for a bad setting or data set.
"""

from __future__ import annotations

from trl import ModelConfig

from procrl.experiment.tracking import history_from_log, track_run
from procrl.scripts._common import (
    EXIT_USAGE,
    ConfigParser,
    HelpFormatter,
    configure_logging,
    parse_or_exit,
    usage_error,
)
from procrl.trainers.sft import (
    SFTInputError,
    SFTResult,
    SFTScriptArguments,
    SFTTrainingConfig,
    check_model_args,
    prepare_sft,
    train_sft,
)

PROG = "procrl sft"  # also `train_sft.py`


class SFTParser(ConfigParser):
    """`TrlParser` of the three dataclasses that also checks the policy (`check_model_args`: no LoRA, a valid
    `scratch:` spec), so `parse_or_exit` reports it in one line like any other bad setting."""

    def parse_args_and_config(self, args=None, *rest, **kwargs) -> tuple:
        parsed = super().parse_args_and_config(args, *rest, **kwargs)
        check_model_args(parsed[2])  # raises ValueError with the fix
        return parsed


def make_parser() -> SFTParser:
    """The parser of `procrl sft`: `SFTScriptArguments`, `SFTTrainingConfig`, `ModelConfig` (+ `--config`)."""
    return SFTParser(
        (SFTScriptArguments, SFTTrainingConfig, ModelConfig),
        prog=PROG,
        description=__doc__,
        formatter_class=HelpFormatter,
    )


def format_summary(result: SFTResult, run_file: str) -> str:
    """What `main` prints: one line on the run (or the cache hit), then the checkpoint and the run record."""
    summary = result.summary
    head = f"procrl SFT: {summary['model']} on {summary['dataset']}, {summary['data']['rows']} examples"
    train = summary.get("train") or {}
    if result.status == "cached":
        lines = [f"{head}; cached (key {result.key}, trained {train.get('steps', '?')} steps before)"]
        lines.append(f"cached: {result.checkpoint}")
    else:
        step = f"{train['step_time_s']:.2f} s/step" if train.get("step_time_s") else "no step"
        lines = [
            f"{head}; {train['steps']} steps in {train['wall_time_s']:.0f} s ({step}), loss {train['train_loss']:.4f}, "
            f"bf16 {'on' if train['bf16'] else 'off'}",
            f"checkpoint: {result.checkpoint}",
        ]
    lines.append(f"results: {run_file}")
    return "\n".join(lines)


def run_metrics(result: SFTResult) -> dict[str, float]:
    """The run record's headline metrics: `sft/cached` (1 for a cache hit), `sft/examples`, and from the training
    (this run's, or for a hit the cached checkpoint's): `sft/steps`, `sft/train_loss`, `sft/step_time_s`,
    `sft/wall_time_s`; a value that is missing is left out."""
    train = result.summary.get("train") or {}
    values = {
        "sft/cached": int(result.status == "cached"),
        "sft/examples": result.summary["data"]["rows"],
        "sft/steps": train.get("steps"),
        "sft/train_loss": train.get("train_loss"),
        "sft/step_time_s": train.get("step_time_s"),
        "sft/wall_time_s": train.get("wall_time_s"),
    }
    return {key: value for key, value in values.items() if value is not None}


def main(argv: list[str] | None = None) -> int:
    """Parse `--config x.yaml` plus flag overrides, train or reuse the cached checkpoint, record the run and print
    the checkpoint's path (main process). Returns 0, or 2 after one error line for a bad setting or data set."""
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    script, training, model_args = parsed
    configure_logging()
    try:
        with track_run(
            training.output_dir,
            command="sft",
            argv=argv,
            configs=parsed,
            report_to=training.report_to,
            name=training.run_name,
        ) as record:
            result = train_sft(prepare_sft(script, training, model_args), script, training, model_args)
            record.result = result.summary
            record.files = {"checkpoint": str(result.checkpoint)}
            record.metrics = run_metrics(result)
            record.history = history_from_log(result.summary["log_history"])
    except SFTInputError as error:  # the record says failed, with this error
        return usage_error(PROG, error)
    if training.process_index == 0:
        print(format_summary(result, str(record.path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
