"""The `procrl` command.

procrl demo [flags]          GRPO on SVAMP with outcome + PiCSAR rewards, before/after evaluation
                             (configs/grpo/svamp_smollm2_picsar.yaml; any GRPO flag overrides it,
                             e.g. --max_steps 5 --eval_sets svamp:700:720:96)
procrl model prepare [--all] convert the embedded SmolLM2-135M-Instruct GGUF to safetensors (once);
                             --all also the Gemma 3 270M student of the PUM-Math builder
procrl model path            print the converted default model's directory
procrl build-pum-data --config configs/pum/build_gsm8k.yaml [flags]
                             PUM-Math preference pairs from student rollouts (data_builders/pum_math.py)
procrl train-pum --config configs/pum/train_gsm8k_smollm2.yaml
                             Prefix Utility Model with TRL's RewardTrainer (= python train_pum.py ...)
procrl frs --model default --dataset gsm8k --n 16 --k 10 --judge local
                             offline Filtered Reasoning Score of a model on a benchmark (frs.json, frs.png)
procrl select --scorer pum,picsar,majority,random --n 8 --dataset svamp --pum PATH
                             best-of-N on a dataset: accuracy table (stdout) and JSON
procrl beam --beams 4 --expand 2 --scorer pum --pum PATH --dataset svamp
                             PUM-guided step beam search: accuracy table and JSON
procrl stepgap-eval --data annotated.jsonl --judge local
                             StepGap verifier metrics and stage ablations on an annotated set
procrl serve-retriever --index 2wiki_corpus_sample --host 127.0.0.1 --port 8001
                             Search-R1-style retrieval server (POST /retrieve) over a bm25s index
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path

DEMO_CONFIG = Path("configs") / "grpo" / "svamp_smollm2_picsar.yaml"
# subcommand -> (module, function(argv) -> exit code); each parses its own flags
PASS_THROUGH = {
    "build-pum-data": ("procrl.data_builders.pum_math", "main"),
    "frs": ("procrl.frs_cli", "main"),
    "serve-retriever": ("procrl.data_builders.corpus", "main"),
    "train-pum": ("procrl.trainers.pum_training", "main"),
    "select": ("procrl.selection", "main_select"),
    "beam": ("procrl.selection", "main_beam"),
    "stepgap-eval": ("procrl.rewards.stepgap.evaluate", "main"),
}


def find_demo_config() -> Path:
    """The demo config: ./configs/... first, then the source checkout procrl is installed from (editable)."""
    candidates = [Path.cwd() / DEMO_CONFIG, Path(__file__).resolve().parent.parent / DEMO_CONFIG]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{DEMO_CONFIG} not found in {candidates[0].parent.parent.parent} or the procrl source tree; run `procrl demo` "
        "from the repository root, or run `python train_grpo.py --config <your.yaml>`."
    )


def print_summary(summary: dict) -> None:
    from procrl.reporting import format_table

    train = summary["train"]
    print()
    print(
        f"procrl GRPO: {summary['model']} on {train['dataset']}, {train['steps']} steps in {train['wall_time_s']:.0f} s"
    )
    print(f"rewards: {', '.join(train['reward_funcs'])} with weights {train['reward_weights']}")
    if summary["before"] or summary["after"]:
        print()
        print(format_table(summary["before"], summary["after"]))
    print()
    for key, label in (("summary_path", "summary"), ("curves", "curves"), ("wandb_dir", "wandb run (offline)")):
        if summary.get(key):
            print(f"{label}: {summary[key]}")
    print(f"total wall time: {summary['total_wall_time_s'] / 60:.1f} min")
    if summary.get("wandb_dir"):
        print(f"sync later with: wandb sync {summary['wandb_dir']}")


def _demo(rest: list[str]) -> int:
    from procrl.train_grpo import cli_main

    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    summary = cli_main(["--config", str(find_demo_config()), *rest])
    print_summary(summary)
    return 0


def _model(args: argparse.Namespace) -> int:
    from procrl.models import default_model_dir, prepare_default_model, prepare_gemma_model

    if args.action == "prepare":
        print(prepare_default_model(force=args.force))
        if args.all:
            print(prepare_gemma_model(force=args.force))
    else:
        print(default_model_dir())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    parser = argparse.ArgumentParser(
        prog="procrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the main job (GRPO on SVAMP, outcome + PiCSAR); extra flags override the config")
    model = sub.add_parser("model", help="the embedded default model")
    model.add_argument("action", choices=["prepare", "path"])
    model.add_argument("--force", action="store_true", help="convert again even if a converted copy exists")
    model.add_argument("--all", action="store_true", help="also prepare the Gemma 3 270M student (PUM-Math builder)")
    sub.add_parser("build-pum-data", help="build PUM-Math pairs; flags as in configs/pum/build_gsm8k.yaml")
    sub.add_parser("frs", help="offline FRS of a model on a benchmark (procrl frs --help)")
    sub.add_parser("train-pum", help="train a Prefix Utility Model (same flags as train_pum.py)")
    sub.add_parser("select", help="best-of-N selection (pum, picsar, majority, random) -> accuracy table")
    sub.add_parser("beam", help="PUM-guided step-level beam search -> accuracy table")
    sub.add_parser("stepgap-eval", help="StepGap verifier metrics (sF1, Q-F1, balanced accuracy, ablations)")
    sub.add_parser("serve-retriever", help="serve a bm25s index with the Search-R1 /retrieve API on loopback")
    if argv and argv[0] == "demo":  # everything after `demo` belongs to the GRPO parser
        return _demo(argv[1:])
    if argv and argv[0] in PASS_THROUGH:  # subcommands with their own parser
        module, function = PASS_THROUGH[argv[0]]
        return getattr(importlib.import_module(module), function)(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "model":
        return _model(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
