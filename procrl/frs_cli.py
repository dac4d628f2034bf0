"""`procrl frs`: the Filtered Reasoning Score of a model on a benchmark, offline (DESIGN §4 "FRS").

    procrl frs --model default --dataset gsm8k --start 0 --end 50 --n 16 --k 10 --judge local
    procrl frs --model <name|path> --dataset gsm8k --n 16 --k 10 --judge http://127.0.0.1:8000/v1 --output-dir out/frs

Samples `--n` traces per problem (temperature 0.7, no top-p/top-k by default) with procrl's batched generation,
takes each trace's tail confidence from the generation's own raw logits, judges the traces FRS needs
(`procrl.rewards.frs.plan_judging`) and writes into `--output-dir`:

- `frs.json`: the report (FRS@K, accuracies, selection gain, counts, judge statistics), the settings, wall times
  and every trace (text, confidence, correctness, scores);
- `traces.jsonl`: the sampled traces, written chunk by chunk; an interrupted run started again with the same
  settings resumes from it, and a rerun (e.g. with another judge) generates nothing;
- `frs.png`: the FRS@K curve (with the accuracy of the kept traces) and histograms of the confidence of correct and
  incorrect traces.

`--judge local` starts the embedded judge server (`transformers serve` on the default model, 127.0.0.1) for the run
and stops it afterwards; `--judge none` skips judging (accuracies and confidences only).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path

from procrl.utils import add_generation_cli_args, get_logger

logger = get_logger(__name__)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="procrl frs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_generation_cli_args(
        parser,
        dataset="gsm8k",
        end=50,
        unit="trace",
        batch_help="traces per generate call",
        seed_help="sampling seed and FRS hash seed",
    )
    parser.add_argument("--n", type=int, default=16, help="traces per problem")
    parser.add_argument("--k", type=float, default=10, help="K of the headline FRS (top K%% most confident traces)")
    parser.add_argument("--k-values", default="10,20,30,40,50", help="K values of the FRS@K curve (comma-separated)")
    parser.add_argument(
        "--judge", default="local", help="'local', 'local:<model>', 'transformers:<model>', a URL, or 'none'"
    )
    parser.add_argument("--judge-concurrency", type=int, default=8, help="judge requests in flight at once")
    parser.add_argument(
        "--judge-max-tokens", type=int, default=96,
        help="token budget of one judge reply (the JSON of four scores is ~30 tokens)",
    )  # fmt: skip
    parser.add_argument(
        "--judge-timeout", type=float, default=600,
        help="seconds one judge request may take, queueing in the server included (a CPU server runs one at a time)",
    )  # fmt: skip
    parser.add_argument(
        "--judge-cache-dir", default=None, help="on-disk judge cache (default: <output-dir>/judge_cache)"
    )
    parser.add_argument(
        "--estimator", choices=["topk", "bins"], default="topk", help="exact top-K, or the paper's bins"
    )
    parser.add_argument("--n-bins", type=int, default=10, help="bins of the bin estimator")
    parser.add_argument("--max-per-bin", type=int, default=50, help="judged traces per bin (bin estimator)")
    parser.add_argument(
        "--random-baseline", choices=["sample", "mean"], default="sample",
        help="selection gain's RS(random): one seeded random trace, or the mean over the question's traces",
    )  # fmt: skip
    parser.add_argument("--top-k", type=int, default=0, help="top-k sampling (0 = off)")
    parser.add_argument("--output-dir", default="outputs/frs", help="where frs.json and frs.png go")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `procrl frs`; returns the exit status (0 on success, 2 on bad arguments)."""
    args = make_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    try:
        k_values = tuple(float(k) for k in args.k_values.split(",") if k.strip())
    except ValueError:
        print(f"--k-values must be comma-separated numbers, got {args.k_values!r}", file=sys.stderr)
        return 2
    if args.n < 1 or args.batch_size < 1 or args.max_new_tokens < 1 or args.temperature <= 0:
        print("--n, --batch-size and --max-new-tokens must be >= 1 and --temperature > 0", file=sys.stderr)
        return 2
    from procrl.rewards.frs import FRSConfig

    try:
        config = FRSConfig(
            k_percent=args.k,
            k_values=k_values,
            estimator=args.estimator,
            n_bins=args.n_bins,
            max_per_bin=args.max_per_bin,
            random_baseline=args.random_baseline,
            seed=args.seed,
        )
    except ValueError as err:
        print(f"procrl frs: {err}", file=sys.stderr)
        return 2
    result = run(args, config)
    print_summary(result)
    return 0


def run(args: argparse.Namespace, config) -> dict:
    """Generate, judge, write frs.json and frs.png; returns what frs.json holds."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from procrl.data_builders.datasets import load_math_dataset
    from procrl.models import resolve_model
    from procrl.rewards.frs import compute_frs
    from procrl.train_grpo import resolve_template
    from procrl.trainers.callbacks import judge_options
    from procrl.trainers.rollout import eos_token_ids

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dataset = load_math_dataset(
        args.dataset,
        split=args.split,
        start=args.start,
        end=None if args.end is not None and args.end < 0 else args.end,
        prompt_template=resolve_template(args.prompt_template),
    )
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = resolve_model(args.model)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos_ids = eos_token_ids(tokenizer, model.generation_config)
    generation_config = GenerationConfig(
        do_sample=True,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_new_tokens=args.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=eos_ids,
    )
    t_gen = time.perf_counter()
    traces = _generate_resumable(
        args, config, model, tokenizer, [dict(row) for row in dataset], generation_config, eos_ids, device, out
    )
    generation_s = time.perf_counter() - t_gen
    del model  # free the memory before a local judge server loads its own copy

    t_judge = time.perf_counter()
    with contextlib.ExitStack() as stack:
        judge = None
        if args.judge.lower() != "none":
            from procrl.rewards.judges import open_judge

            cache_dir = args.judge_cache_dir or str(out / "judge_cache")
            options = judge_options(args.judge, max_tokens=args.judge_max_tokens, timeout_s=args.judge_timeout)
            judge = stack.enter_context(
                open_judge(args.judge, cache_dir=cache_dir, max_concurrency=args.judge_concurrency, **options)
            )
        report = compute_frs(traces, judge, config, progress=not args.no_progress)
    judge_s = time.perf_counter() - t_judge

    result = {
        "model": args.model,
        "dataset": f"{args.dataset}[{args.start}:{args.start + len(dataset)}]",
        "settings": {
            "n_traces": args.n,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "max_new_tokens": args.max_new_tokens,
            "seed": args.seed,
            "judge": args.judge,
            "judge_max_tokens": args.judge_max_tokens,
            "judge_timeout_s": args.judge_timeout,
            "batch_size": args.batch_size,
            "prompt_template": args.prompt_template,
            "frs": _config_dict(config),
        },
        "report": report.to_dict(),
        "wall_time_s": {"generation": generation_s, "judging": judge_s, "total": time.perf_counter() - t0},
        "mean_trace_tokens": sum(t.num_tokens for t in traces) / len(traces) if traces else None,
        "truncated_frac": (
            sum(1 for t in traces if t.num_tokens >= args.max_new_tokens) / len(traces) if traces else None
        ),
        "traces": [t.to_dict() for t in traces],
    }
    (out / "frs.json").write_text(json.dumps(_json_ready(result), indent=2))
    plot_frs(report, traces, out / "frs.png", title=f"{args.model} on {result['dataset']}, {args.n} traces/problem")
    result["paths"] = {"json": str(out / "frs.json"), "plot": str(out / "frs.png")}
    return result


def _generate_resumable(args, config, model, tokenizer, rows, generation_config, eos_ids, device, out: Path) -> list:
    """Sample the traces in chunks of problems, appending each chunk to `<output-dir>/traces.jsonl`.

    Each chunk (batch_size // n problems, at least one) is seeded with `seed + chunk index`, so a run interrupted and
    started again with the same settings reuses the finished chunks and produces exactly the traces of an
    uninterrupted run; a rerun with the same settings (e.g. with another judge) generates nothing. The first line
    of the file holds the settings; a file with other settings is replaced.
    """
    import torch
    from tqdm.auto import tqdm

    from procrl.rewards.frs import Trace
    from procrl.trainers.callbacks import generate_traces

    path = out / "traces.jsonl"
    settings = {
        key: getattr(args, key)
        for key in ("model", "dataset", "split", "start", "prompt_template", "n", "temperature", "top_p", "top_k",
                    "max_new_tokens", "batch_size", "seed")
    }  # fmt: skip
    settings.update(problems=len(rows), tail_fraction=config.tail_fraction)
    per_chunk = max(1, args.batch_size // args.n)  # problems per chunk
    traces: list[Trace] = []
    if path.is_file():
        lines = path.read_text().splitlines()
        if lines and json.loads(lines[0]).get("settings") == _json_ready(settings):
            traces = [Trace(**{k: v for k, v in json.loads(line).items() if k != "rs"}) for line in lines[1:]]
            logger.info("reusing %d traces from %s", len(traces), path)
    if not traces:
        path.write_text(json.dumps({"settings": _json_ready(settings)}) + "\n")
    done = len(rows) if len(traces) == len(rows) * args.n else len(traces) // args.n // per_chunk * per_chunk
    if len(traces) != done * args.n:  # a chunk cut mid-write: drop its lines from the file too
        traces = traces[: done * args.n]
        lines = [json.dumps({"settings": _json_ready(settings)})] + [
            json.dumps(_json_ready(t.to_dict())) for t in traces
        ]
        path.write_text("\n".join(lines) + "\n")
    bar = tqdm(
        total=len(rows) * args.n, initial=len(traces), desc="FRS generate", unit="trace", disable=args.no_progress
    )
    for chunk, lo in enumerate(range(0, len(rows), per_chunk)):
        if lo < done:
            continue
        torch.manual_seed(args.seed + chunk)
        new = generate_traces(
            model,
            tokenizer,
            rows[lo : lo + per_chunk],
            n_traces=args.n,
            generation_config=generation_config,
            eos_ids=eos_ids,
            batch_size=args.batch_size,
            tail_fraction=config.tail_fraction,
            device=device,
            progress=False,
        )
        with path.open("a") as handle:
            handle.writelines(json.dumps(_json_ready(t.to_dict())) + "\n" for t in new)
        traces.extend(new)
        bar.update(len(new))
    bar.close()
    return traces


def plot_frs(report, traces, path: str | Path, title: str = "") -> Path:
    """Two panels: FRS@K (and the accuracy of the kept traces, in %) against K; confidence histograms of correct
    and incorrect traces (traces with an unparseable gold or no confidence left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_curve, ax_hist) = plt.subplots(1, 2, figsize=(11, 4))
    ks = sorted(report.at_k)
    frs_points = [(k, report.at_k[k]) for k in ks if report.at_k[k] is not None]
    if frs_points:
        ax_curve.plot(*zip(*frs_points, strict=True), marker="o", label="FRS@K (RS, 0-100)")
    acc_points = [(k, 100 * report.accuracy_at_k[k]) for k in ks if report.accuracy_at_k.get(k) is not None]
    if acc_points:
        ax_curve.plot(*zip(*acc_points, strict=True), marker="s", linestyle="--", label="accuracy of kept traces (%)")
    if report.accuracy is not None:
        ax_curve.axhline(100 * report.accuracy, color="grey", linewidth=0.8, label="accuracy, all traces (%)")
    if not frs_points and not acc_points:
        ax_curve.text(0.5, 0.5, "nothing scored", ha="center", va="center", transform=ax_curve.transAxes)
    ax_curve.set_xlabel("K (% most confident traces kept)")
    ax_curve.set_ylim(0, 100)
    ax_curve.set_title("FRS@K", fontsize=10)
    ax_curve.grid(alpha=0.3)
    ax_curve.legend(fontsize=8)

    for label, flag, color in (("correct", True, "tab:green"), ("incorrect", False, "tab:red")):
        values = [t.confidence for t in traces if t.correct is flag and t.confidence is not None]
        if values:
            ax_hist.hist(values, bins=20, range=(0, 1), alpha=0.55, color=color, label=f"{label} (n={len(values)})")
    ax_hist.set_xlabel("tail confidence (mean of the lowest 10% token probabilities)")
    ax_hist.set_ylabel("traces")
    ax_hist.set_title("confidence by final-answer correctness", fontsize=10)
    ax_hist.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_summary(result: dict) -> None:
    report = result["report"]

    def fmt(v, scale=1.0):
        return "n/a" if v is None else f"{v * scale:.1f}"

    print()
    print(f"procrl frs: {result['model']} on {result['dataset']}, {report['n_traces']} traces")
    print(
        f"FRS@{report['k_percent']:g}: {fmt(report['score'])}   (RS 0-100; {report['kept_at_k'][report['k_percent']]} kept)"
    )
    print("FRS@K: " + ", ".join(f"{k:g}: {fmt(v)}" for k, v in report["at_k"].items()))
    print(f"accuracy: all {fmt(report['accuracy'], 100)}%, kept {fmt(report['accuracy_kept'], 100)}%")
    print(
        f"selection gain: {fmt(report['selection_gain'])} over {report['selection_gain_questions']} questions "
        f"({report['selection_gain_dropped']} dropped)"
    )
    print(f"judged {report['n_judged']}, scored {report['n_scored']}, unscored {report['unscored']}")
    wall = result["wall_time_s"]
    print(
        f"wall time: generation {wall['generation']:.0f} s, judging {wall['judging']:.0f} s, total {wall['total']:.0f} s"
    )
    for key, label in (("json", "report"), ("plot", "plot")):
        print(f"{label}: {result['paths'][key]}")


def _config_dict(config) -> dict:
    from dataclasses import asdict

    return asdict(config)


def _json_ready(value):
    """String keys and no NaN/inf (JSON has neither numeric keys nor NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


if __name__ == "__main__":
    raise SystemExit(main())
