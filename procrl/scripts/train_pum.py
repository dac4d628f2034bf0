"""`train_pum.py` / `procrl train-pum`: train a Prefix Utility Model (PUM) on PUM-Math pairs with TRL's RewardTrainer.

    accelerate launch train_pum.py            # the shipped GSM8K pairs, the embedded model: a few minutes on CPU
    accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml
    python train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml --max_steps 20
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml
    accelerate launch --config_file configs/accelerate/zero2.yaml train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml --bf16 true
    python train_pum.py --config configs/pum/train_gsm8k_smollm2_lora.yaml         # LoRA (lora_task_type: SEQ_CLS)
    procrl train-pum --config configs/pum/train_gsm8k_smollm2.yaml                  # the same command

(On CPU, `accelerate launch --num_processes 2 --cpu` starts only ONE process; use torchrun as above for two ranks.)

The flags are the fields of `PUMScriptArguments` and `PUMTrainingConfig` (`procrl.trainers.pum_training`) and of
TRL's `ModelConfig`; `--config x.yaml` sets them from a file and flags override it. The job itself (split by
problem, render, Bradley-Terry with margin, held-out evaluation, outputs) is `procrl.trainers.pum_training.train`;
this command prints its held-out table on rank 0, or one error line (exit status 2) for a missing pair set. The
results file is the run record `run.json` in `output_dir` (`procrl.experiment.tracking`; also to wandb with
`report_to: [wandb]`): the job's summary as `result`, the files beside it as `files` (`checkpoint`: the model in
`output_dir`, `pum_config`: pum_config.json), as `metrics` the last logged value of every `eval_*` key (eval_loss,
eval_pairwise_accuracy[_<type>], ...) and the held-out summary as `pum/heldout_accuracy`,
`pum/heldout_accuracy_before`, `pum/heldout_n`, `pum/heldout/<type>/accuracy`, `pum/length_baseline_accuracy`,
`pum/vs_length` (held-out accuracy minus the length baseline's), `pum/train_loss`, `pum/steps`, and the trainer's
log history as `history`.
"""

from __future__ import annotations

from pathlib import Path

from trl import ModelConfig, TrlParser

from procrl.experiment.tracking import history_from_log, track_run
from procrl.rewards.pum import PUM_CONFIG_NAME
from procrl.scripts._common import (
    EXIT_USAGE,
    ConfigParser,
    HelpFormatter,
    configure_logging,
    parse_or_exit,
    usage_error,
)
from procrl.trainers.pum_data import PairsNotFoundError
from procrl.trainers.pum_training import PUMScriptArguments, PUMTrainingConfig, train

PROG = "train_pum.py"  # the name in --help and in the error line, also as `procrl train-pum`


def make_parser() -> TrlParser:
    """The parser of `train_pum.py`: `PUMScriptArguments`, `PUMTrainingConfig`, `ModelConfig` (+ `--config`)."""
    return ConfigParser(
        (PUMScriptArguments, PUMTrainingConfig, ModelConfig),
        prog=PROG,
        description=__doc__,
        formatter_class=HelpFormatter,
    )


def format_summary(summary: dict, files: dict[str, str]) -> str:
    """The held-out table people read: PUM pairwise accuracy before/after training and the length baseline, then
    the files ({role: path}, in order: the run record, the checkpoint, ...)."""
    data, train_info, heldout = summary["data"], summary["train"], summary["heldout"]
    lines = [
        f"procrl PUM: {summary['model']}{' (LoRA)' if summary['lora'] else ''} on {data['dataset']}, "
        f"{train_info['steps']} steps in {train_info['wall_time_s']:.0f} s, {summary['world_size']} process(es)",
        f"pairs: train {data['train']['pairs_kept']} of {data['train']['pairs_in']} ({data['train_problems']} problems), "
        f"held out {data['eval']['pairs_kept']} of {data['eval']['pairs_in']} ({data['eval_problems']} problems); "
        f"truncated inputs {data['train']['truncated_sequences'] + data['eval']['truncated_sequences']}, "
        f"dropped identical after truncation "
        f"{data['train']['dropped_identical_after_truncation'] + data['eval']['dropped_identical_after_truncation']}",
    ]
    if heldout["after"] is not None:
        header = f"{'pair type':<12} {'n':>5} {'PUM before':>10} {'PUM after':>10} {'longer wins':>11}"
        lines += ["", header, "-" * len(header)]
        rows = [("all", heldout["after"], heldout["before"], heldout["length_baseline"])]
        for kind in heldout["after"]["by_type"]:
            rows.append(
                (
                    kind,
                    heldout["after"]["by_type"][kind],
                    (heldout["before"] or {}).get("by_type", {}).get(kind),
                    heldout["length_baseline"]["by_type"].get(kind),
                )
            )

        def fmt(row):
            return f"{row['accuracy']:.3f}" if row and row.get("accuracy") is not None else "-"

        for name, after, before, base in rows:
            lines.append(f"{name:<12} {after['n']:>5} {fmt(before):>10} {fmt(after):>10} {fmt(base):>11}")
        versus = heldout["after"].get("vs_length") or {}
        if versus.get("difference") is not None:
            interval = versus["interval"]
            spread = f" [{interval[0]:+.3f}, {interval[1]:+.3f}]" if interval else ""
            lines.append(
                f"PUM after - longer wins: {versus['difference']:+.3f}{spread} "
                f"(paired, 95% bootstrap over {versus['n_problems']} held-out problems)"
            )
    if files:
        lines += ["", *(f"{role}: {path}" for role, path in files.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse `--config x.yaml` plus flag overrides, train, and print the held-out table (rank 0).

    Returns 0, or 2 after one `train_pum.py: error: ...` line on stderr for a bad argument (an unknown flag, a value
    a dataclass refuses) or a missing pair set.
    """
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    script_args, training_args, model_args = parsed
    configure_logging()
    try:
        with track_run(
            training_args.output_dir,
            command="train-pum",
            argv=argv,
            configs=parsed,
            report_to=training_args.report_to,
            name=training_args.run_name,
        ) as record:
            summary = train(script_args, training_args, model_args)
            out = Path(training_args.output_dir)
            record.result = summary
            record.files = {"checkpoint": str(out), "pum_config": str(out / PUM_CONFIG_NAME)}
            record.metrics = run_metrics(summary)
            record.history = history_from_log(summary["log_history"])
    except PairsNotFoundError as error:  # the record says failed, with this error
        return usage_error(PROG, error)
    if training_args.process_index == 0:
        print(format_summary(summary, {"results": str(record.path), **record.files}))
    return 0


def run_metrics(summary: dict) -> dict[str, float]:
    """The run record's headline metrics of a PUM training summary (module docstring); a value that was not
    measured (no held-out pairs, no evaluation before training) is left out."""
    metrics: dict[str, float] = {}
    for entry in summary["log_history"]:  # the last logged value of each eval key
        metrics.update({k: v for k, v in entry.items() if k.startswith("eval_") and isinstance(v, int | float)})
    heldout = summary["heldout"]
    after, before, baseline = heldout["after"] or {}, heldout["before"] or {}, heldout["length_baseline"] or {}
    values = {
        "pum/heldout_accuracy": after.get("accuracy"),
        "pum/heldout_accuracy_before": before.get("accuracy"),
        "pum/heldout_n": after.get("n"),
        "pum/length_baseline_accuracy": baseline.get("accuracy"),
        "pum/vs_length": (after.get("vs_length") or {}).get("difference"),
        **{f"pum/heldout/{kind}/accuracy": row.get("accuracy") for kind, row in after.get("by_type", {}).items()},
        "pum/train_loss": summary["train"]["train_loss"],
        "pum/steps": summary["train"]["steps"],
    }
    return metrics | {k: v for k, v in values.items() if v is not None}


if __name__ == "__main__":
    raise SystemExit(main())
