"""The `procrl` command: one subcommand per module of `procrl.scripts` (each `main(argv) -> int`, `--help` for its
flags, `--config x.yaml` for a file of them). Examples, by group:

train
procrl demo [flags]          the mission in small: SFT warm start of a model organism (cached), then GRPO
                             with the oracle process reward on the edge level; paired before/after
                             (configs/demo/; GRPO flags override stage 2, e.g. --max_steps 5)
procrl train-grpo --config configs/grpo/svamp_smollm2_pum.yaml [flags]
                             GRPO with process rewards (= python train_grpo.py ...)
procrl build-pum-data --config configs/pum/build_gsm8k.yaml [flags]
                             PUM-Math preference pairs from student rollouts
procrl train-pum --config configs/pum/train_gsm8k_smollm2.yaml
                             Prefix Utility Model with TRL's RewardTrainer (= python train_pum.py ...)
procrl sft --config configs/sft/gsm8k_smollm2.yaml [--force true]
                             warm start on gold traces with TRL's SFTTrainer (= python train_sft.py ...);
                             prints the checkpoint, cached by content under $PROCRL_CACHE/sft/<key>

evaluate
procrl select --scorer pum,picsar,majority,random --n 8 --dataset svamp --pum PATH [--ks 1,2,4,8] [--output-dir D]
                             best-of-N on a dataset: accuracy table; with --ks the best-of-k curves of every
                             selection method from the same samples (run.json, problems.jsonl, table.md, curves.png)
procrl beam --beams 4 --expand 2 --scorer pum --pum PATH --dataset svamp [--output-dir D]
                             PUM-guided step beam search: accuracy table (run.json, problems.jsonl)
procrl pum-gain-check outputs/pum_math/arith_organism [--resamples 0]
                             a PUM-Math build of an arith set: mean gain of prefixes ending in an oracle-correct
                             step vs at the first wrong step, with intervals; pair counts (gain_check.json)
procrl pum-oracle outputs/results/select_arith_organism_pum --pum outputs/pum_arith_organism
                             a PUM against the step oracle on a select run's samples: first-error F1 (cross-
                             fitted threshold), within-problem AUROC beside the run's scores (pum_oracle.json)
procrl frs --model default --dataset gsm8k --frs-traces 16 --frs-k-percent 10 --judge local
                             offline Filtered Reasoning Score of a model on a benchmark (run.json, frs.png)
procrl frs compare RUN_DIR RUN_DIR... --output-dir D
                             models ranked by accuracy and by FRS@K per benchmark, with intervals and inversions
procrl calibrate --model default --levels arith-ops1-d2-test arith-ops2-d2-test [--n-problems 64] [--output-dir D]
                             per level: per-sample / greedy accuracy, pass@8, mixed-group share, ProcessAcc; names
                             the edge level(s) (run.json, calibration.md, calibration.png)
procrl calibrate --combine outputs/calib/* --out docs/results/calibration.md [--labels A B ...]
                             one table (and plot) over finished calibrate runs, a row per (policy, level)
procrl stepgap-eval --data annotated.jsonl --judge local
                             StepGap verifier metrics and stage ablations on an annotated set
procrl world-eval --model CKPT --world data/world0 --split test --n 100
                             a search policy's EM, format violations, searches and oracle label shares
procrl nli pairs|train|eval --world data/world0 --out DIR [--pairs DIR] [--model DIR]
                             StepGap's trained stage D: world-labelled NLI pairs, a MiniLM cross-encoder
                             fine-tuned on them (make_nli(DIR) loads it), its test metrics vs baselines

experiments
procrl sweep configs/sweeps/reward_ablation_svamp.yaml [--dry-run]
                             a sweep file's variants: wandb sweep + agent, or offline one after another (resumable)
procrl report SWEEP_DIR | RUN_DIR... [--output-dir D] [--title T] [--finished-only] [--metrics 'bestofn/*/acc@16']
                             markdown table + plots (report.md, curves.png) from run.json files

setup
procrl model prepare [--all] convert the embedded SmolLM2-135M-Instruct GGUF to safetensors (once);
                             --all also the Gemma 3 270M student of the PUM-Math builder
procrl model path            print the converted default model's directory
procrl serve-retriever --index 2wiki_corpus_sample --host 127.0.0.1 --port 8001
                             Search-R1-style retrieval server (POST /retrieve) over a bm25s index
procrl world build --out data/world0 [--seed 0] [--n-train 1000] [--n-dev 200] [--n-test 500] [--hops 2 3]
                             the synthetic multi-hop world of StepGap: disjoint train/dev/test questions and
                             passage corpora (<out>/<split>/questions.jsonl, corpus.jsonl; world.json)
procrl world episodes --out data/world0 [--gap_rate 0.5]
                             the world, then SFT episodes of its train and dev splits (gold + gap-and-repair,
                             checked by the StepGap oracle): <out>/{train,dev}/episodes.jsonl
"""

from __future__ import annotations

import argparse
import importlib
import sys

from procrl.scripts._common import configure_logging

# subcommand -> (module, one-line help); the module's `main(argv) -> int` parses the rest of the command line. Each
# is imported only when its subcommand runs, so one missing or broken command never breaks the others.
COMMANDS = {
    "demo": (
        "procrl.scripts.demo",
        "run the main job (SFT warm start, then GRPO with the oracle process reward); flags go to the GRPO stage",
    ),
    "train-grpo": ("procrl.scripts.train_grpo", "GRPO with process rewards (same flags as train_grpo.py)"),
    "model": ("procrl.scripts.model", "the embedded default model: prepare | path"),
    "build-pum-data": (
        "procrl.scripts.build_pum_data",
        "build PUM-Math pairs; flags as in configs/pum/build_gsm8k.yaml",
    ),
    "train-pum": ("procrl.scripts.train_pum", "train a Prefix Utility Model (same flags as train_pum.py)"),
    "sft": (
        "procrl.scripts.sft",
        "SFT warm start on gold traces (or a scratch: organism); checkpoints cached by content",
    ),
    "frs": ("procrl.scripts.frs", "offline FRS of a model on a benchmark (procrl frs --help)"),
    "select": (
        "procrl.scripts.select",
        "best-of-N selection (pum, picsar, majority, random) -> accuracy table; --ks: best-of-k curves",
    ),
    "beam": ("procrl.scripts.beam", "PUM-guided step-level beam search -> accuracy table"),
    "pum-gain-check": (
        "procrl.scripts.pum_gain_check",
        "a PUM-Math build of an arith set: gain of oracle-correct vs first-wrong-step prefixes; pair counts",
    ),
    "pum-oracle": (
        "procrl.scripts.pum_oracle",
        "a PUM against the step oracle on a select run's samples: first-error F1, within-problem AUROC",
    ),
    "calibrate": (
        "procrl.scripts.calibrate",
        "a policy's accuracy, pass@8, mixed groups and ProcessAcc per difficulty level; its edge level(s)",
    ),
    "stepgap-eval": (
        "procrl.scripts.stepgap_eval",
        "StepGap verifier metrics (sF1, Q-F1, balanced accuracy, ablations)",
    ),
    "serve-retriever": ("procrl.scripts.serve_retriever", "serve a bm25s index with the Search-R1 /retrieve API"),
    "world": (
        "procrl.scripts.world",
        "build the synthetic multi-hop world of StepGap: questions + passage corpus per split; its SFT episodes",
    ),
    "world-eval": (
        "procrl.scripts.world_eval",
        "a search policy in the synthetic world: EM, format violations, searches, oracle label shares",
    ),
    "nli": (
        "procrl.scripts.nli",
        "StepGap's trained stage D: world-labelled NLI pairs | train a small cross-encoder | eval vs baselines",
    ),
    "sweep": ("procrl.scripts.sweep", "run a sweep file's variants: wandb sweep + agent, or offline and resumable"),
    "report": ("procrl.scripts.report", "markdown table + plots from the runs' run.json files (no server)"),
}

# `procrl --help` lists the subcommands in these groups, in this order (every subcommand in exactly one)
GROUPS = {
    "train": ("demo", "train-grpo", "build-pum-data", "train-pum", "sft"),
    "evaluate": (
        "select", "beam", "pum-gain-check", "pum-oracle", "calibrate", "frs", "stepgap-eval", "world-eval", "nli",
    ),  # fmt: skip
    "experiments": ("sweep", "report"),
    "setup": ("model", "serve-retriever", "world"),
}


def command_groups() -> str:
    """The subcommands by `GROUPS`, each with its one-line help: the body of `procrl --help`."""
    width = max(map(len, COMMANDS)) + 2
    lines = []
    for group, names in GROUPS.items():
        lines += ["", f"{group}:"] + [f"  {name:<{width}}{COMMANDS[name][1]}" for name in names]
    return "\n".join(lines[1:])


def make_parser() -> argparse.ArgumentParser:
    """The dispatcher's own parser: only the subcommand (each subcommand's flags belong to its module's parser);
    its help lists the subcommands by group, then the examples (the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="procrl",
        description="RL of language models with process rewards; `procrl COMMAND --help` gives a command's flags."
        "\n\n" + command_groups(),
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of the commands above")
    for name in COMMANDS:
        sub.add_parser(name, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `procrl <subcommand> [flags]`; returns the subcommand's exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    configure_logging()
    if not argv or argv[0] not in COMMANDS:
        make_parser().parse_args(argv)  # --help, or the usage error of an unknown subcommand (SystemExit)
        return 2
    command, rest = argv[0], argv[1:]
    return importlib.import_module(COMMANDS[command][0]).main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
