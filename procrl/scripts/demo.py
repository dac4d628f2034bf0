"""`procrl demo` / `make demo`: the mission in small. A model organism is warm-started by SFT on gold arithmetic
traces (cached by content after the first run), then trained by GRPO with the step oracle's process reward on
the edge-of-competence level; greedy accuracy and ProcessAcc before and after, on held-out problems, with paired
95% intervals, and the learning curves.

    procrl demo                          # both stages with configs/demo/sft_organism.yaml, configs/demo/grpo_organism.yaml
    procrl demo --max_steps 20           # flags go to the GRPO stage (train_grpo.py's flags)
    procrl demo --sft_config my_sft.yaml --config my_grpo.yaml

Stage 1 is `procrl sft --config <sft config>` (`procrl.scripts.sft`): a second run with the same content reads the
checkpoint back. Stage 2 is `train_grpo.py --config <grpo config> --model_name_or_path <checkpoint> [flags]`
(`procrl.scripts.train_grpo`). Each stage writes its own run record (`run.json` in its `output_dir`). The exit
status is the first non-zero stage's, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from procrl.scripts import sft, train_grpo
from procrl.scripts._common import EXIT_USAGE, parse_or_exit

SFT_CONFIG = Path("configs") / "demo" / "sft_organism.yaml"
GRPO_CONFIG = Path("configs") / "demo" / "grpo_organism.yaml"


def find_config(relative: Path) -> Path:
    """A shipped config: ./<relative> first, then the source checkout procrl is installed from (editable).

    Raises:
        FileNotFoundError: in neither place (the message says where to run from).
    """
    candidates = [Path.cwd() / relative, Path(__file__).resolve().parents[2] / relative]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{relative} not found in {Path.cwd()} or the procrl source tree; run `procrl demo` from the repository root, "
        "or pass --sft_config and --config."
    )


def make_parser() -> argparse.ArgumentParser:
    """The demo's own flags (the two configs); every other flag goes to the GRPO stage."""
    parser = argparse.ArgumentParser(
        prog="procrl demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sft_config", "--sft-config", default=None, help=f"stage 1 config (default {SFT_CONFIG})")
    parser.add_argument("--config", default=None, help=f"stage 2 config (default {GRPO_CONFIG})")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the two stages (module docstring); returns the exit status."""
    args, rest = make_parser().parse_known_args(argv)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    sft_config = Path(args.sft_config) if args.sft_config else find_config(SFT_CONFIG)
    grpo_config = Path(args.config) if args.config else find_config(GRPO_CONFIG)
    # a bad stage-2 flag fails now, in one line (train_grpo.py: error: ...), not after the warm start
    stage2 = ["--config", str(grpo_config), "--model_name_or_path", "stage-1-checkpoint", *rest]
    if parse_or_exit(train_grpo.make_parser(), stage2) is None:
        return EXIT_USAGE
    print(f"== stage 1: warm start (procrl sft --config {sft_config}) ==", flush=True)
    status = sft.main(["--config", str(sft_config)])
    if status:
        return status
    record = sft.make_parser().parse_args_and_config(["--config", str(sft_config)])[1].output_dir
    checkpoint = json.loads((Path(record) / "run.json").read_text())["result"]["checkpoint"]
    print(f"\n== stage 2: GRPO with the oracle process reward (train_grpo.py --config {grpo_config}) ==", flush=True)
    return train_grpo.main(["--config", str(grpo_config), "--model_name_or_path", str(checkpoint), *rest])
