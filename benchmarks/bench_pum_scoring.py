"""One-pass vs per-prefix PUM scoring on GSM8K reference solutions cut into K steps (issue 4 benchmark).

    python benchmarks/bench_pum_scoring.py                         # default model, random score head (timing only)
    python benchmarks/bench_pum_scoring.py --checkpoint outputs/pum_gsm8k_smollm2
    python benchmarks/bench_pum_scoring.py --cut words --problems 64

Data: the GSM8K test split shipped with procrl (`load_math_dataset("gsm8k")`, `solution` column) with the "####"
answer line removed. `--cut lines` (default) keeps the solutions with at least K non-empty lines (23 of 1319 for
K = 8; most have 2-5) and makes each of the first K - 1 lines a step, the remaining lines the last step. `--cut
words` uses any solution with at least K words and cuts it into K pieces of about equal character length at word
starts. Each step keeps its trailing newline/space, so the steps tile the solution.

Both paths score U after every step of every trajectory with the same model, one trajectory (or prefix) per
forward pass:
  one-pass:   `PrefixUtilityModel.score_prefixes(problem, steps)` (render once, one forward, head at K positions);
  per-prefix: render `steps[:k]` alone and run plain transformers `model(input_ids).logits`, K forwards.
Printed: the speed ratio t(per-prefix) / t(one-pass), the token ratio Σ_k len(prefix_k) / len(full) summed over
all trajectories (the ideal speed-up if time were linear in tokens; lengths include the rendered prompt, which
every forward processes), and max |ΔU| between the two paths. Target: speed ratio >= 0.8 x token ratio. Without
`--checkpoint` the default model gets a seeded random score head: the scores mean nothing, the timing is the same.
"""

from __future__ import annotations

import argparse
import sys
import time


def cut_by_lines(solution: str, k: int) -> list[str] | None:
    """K steps from the lines of a solution (first K-1 lines, then the rest), or None with fewer than K lines."""
    lines = [line for line in solution.split("\n") if line.strip()]
    if len(lines) < k:
        return None
    return [line + "\n" for line in lines[: k - 1]] + ["\n".join(lines[k - 1 :])]


def cut_by_words(solution: str, k: int) -> list[str] | None:
    """K pieces of about equal length, cut where a word starts; None with fewer than K words."""
    text = solution.strip()
    starts = [i for i in range(1, len(text)) if text[i - 1].isspace() and not text[i].isspace()]
    if len(starts) < k - 1:
        return None
    cuts: list[int] = []
    for j in range(1, k):
        target = j * len(text) / k
        free = [s for s in starts if (not cuts or s > cuts[-1]) and len([t for t in starts if t > s]) >= k - 1 - j]
        cuts.append(min(free, key=lambda s: abs(s - target)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def strip_answer_line(solution: str) -> str:
    return "\n".join(line for line in solution.split("\n") if not line.lstrip().startswith("####"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=None, help="a trained PUM (default: the default model, random head)")
    parser.add_argument("--steps", type=int, default=8, help="K, steps per trajectory (default 8)")
    parser.add_argument("--problems", type=int, default=None, help="at most this many trajectories (default: all)")
    parser.add_argument("--cut", choices=["lines", "words"], default="lines", help="how solutions become K steps")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    args = parser.parse_args(argv)

    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from procrl.data_builders.datasets import load_math_dataset
    from procrl.models import resolve_model
    from procrl.rewards.pum import PrefixUtilityModel, render_prefix

    data = load_math_dataset("gsm8k")
    cut = cut_by_lines if args.cut == "lines" else cut_by_words
    items = []
    for row in data:
        steps = cut(strip_answer_line(row["solution"]), args.steps)
        if steps is not None:
            items.append((row["question"], steps))
        if args.problems is not None and len(items) >= args.problems:
            break
    if not items:
        print(f"no GSM8K solution can be cut into {args.steps} steps with --cut {args.cut}", file=sys.stderr)
        return 1

    if args.checkpoint:
        scorer = PrefixUtilityModel.from_pretrained(args.checkpoint, device=args.device)
        label = args.checkpoint
    else:
        path = resolve_model("default")
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model.config.pad_token_id = tokenizer.pad_token_id
        scorer = PrefixUtilityModel(model.to(args.device).eval(), tokenizer)
        label = "default model (SmolLM2-135M-Instruct) + random score head"
    model, tokenizer = scorer.model, scorer.tokenizer

    def per_prefix(problem, steps):
        values = []
        for k in range(1, len(steps) + 1):
            ids = render_prefix(tokenizer, problem, steps[:k], scorer.max_length, separator=scorer.separator).input_ids
            values.append(model(torch.tensor([ids], device=args.device)).logits[0, 0].item())
        return values

    rendered = [scorer.render(problem, steps) for problem, steps in items]
    prefix_tokens = sum(sum(r.boundaries) for r in rendered)
    full_tokens = sum(len(r.input_ids) for r in rendered)
    with torch.no_grad():
        scorer.score_prefixes(*items[0])  # warm-up (allocator, kernels) for both paths
        per_prefix(*items[0])
        t0 = time.perf_counter()
        one = [scorer.score_prefixes(p, s) for p, s in tqdm(items, desc="one-pass")]
        t_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = [per_prefix(p, s) for p, s in tqdm(items, desc="per-prefix")]
        t_ref = time.perf_counter() - t0

    max_diff = max(abs(a - b) for x, y in zip(one, ref, strict=True) for a, b in zip(x, y, strict=True))
    speed, tokens = t_ref / t_one, prefix_tokens / full_tokens
    print(f"PUM scoring: {label} on {args.device}, torch threads {torch.get_num_threads()}")
    print(
        f"{len(items)} GSM8K reference solutions cut into K = {args.steps} steps by {args.cut}; "
        f"mean input {full_tokens / len(items):.0f} tokens (prompt included)"
    )
    print(f"one-pass   {t_one:8.2f} s  ({len(items)} forwards)")
    print(f"per-prefix {t_ref:8.2f} s  ({len(items) * args.steps} forwards)")
    print(
        f"speed ratio {speed:.2f}  token ratio {tokens:.2f}  speed / token {speed / tokens:.2f} "
        f"(target >= 0.80: {'met' if speed >= 0.8 * tokens else 'NOT met'})"
    )
    print(f"max |dU| one-pass vs per-prefix: {max_diff:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
