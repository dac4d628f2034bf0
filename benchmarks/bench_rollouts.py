"""Rollout throughput: batched generation (batch 16) vs one prompt at a time (target ratio >= 5x).

    python benchmarks/bench_rollouts.py [--prompts 16] [--max_new_tokens 128] [--device cpu] [--threads 1]

Same engine code (`procrl.generation.TransformersEngine`), default model (SmolLM2-135M-Instruct), the
first GSM8K test problems as one-shot chat prompts, greedy decoding with `min_new_tokens = max_new_tokens`, so
every completion has exactly `max_new_tokens` tokens in both arms (EOS is suppressed, log-probs are still computed).
A short warm-up call precedes each arm and is not timed. Prints tokens/s of both arms and their ratio, and how many
completions the two arms agree on (greedy: they should, up to padding numerics), plus the ratio of the process's
CPU time, which a machine shared with other jobs disturbs less than wall time. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # before transformers and tokenizers are imported

import torch  # noqa: E402

from procrl.data_builders.datasets import load_math_dataset  # noqa: E402
from procrl.generation import SamplingParams, TransformersEngine, render_prompts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16, help="number of prompts (= the batch size)")
    parser.add_argument("--max_new_tokens", type=int, default=128, help="tokens generated per prompt (forced)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ...; default: cuda if available, else cpu")
    parser.add_argument("--dataset", default="gsm8k", help="load_math_dataset name")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)

    batched = TransformersEngine("default", device=args.device, batch_size=args.prompts)
    single = TransformersEngine(
        "default", device=str(batched.device), batch_size=1, model=batched.model, tokenizer=batched.tokenizer
    )
    data = load_math_dataset(args.dataset, end=args.prompts)
    rows = render_prompts(batched.tokenizer, data["prompt"])
    params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens)
    warmup = SamplingParams(temperature=0, max_new_tokens=4, min_new_tokens=4)

    results, times, cpu = {}, {}, {}
    for name, engine in (("batched", batched), ("one-by-one", single)):
        engine.generate(rows[:2], warmup, seed=0)
        if engine.device.type == "cuda":
            torch.cuda.synchronize()
        start, cpu_start = time.perf_counter(), time.process_time()
        results[name] = engine.generate(rows, params, seed=0)
        if engine.device.type == "cuda":
            torch.cuda.synchronize()
        times[name], cpu[name] = time.perf_counter() - start, time.process_time() - cpu_start
        print(f"  {name}: {times[name]:.1f} s wall, {cpu[name]:.1f} s CPU", flush=True)

    tokens = {name: sum(len(r.token_ids) for r in out) for name, out in results.items()}
    assert tokens["batched"] == tokens["one-by-one"] == args.prompts * args.max_new_tokens, tokens
    lengths = [len(r) for r in rows]
    print(
        f"\nRollout throughput, default model ({batched.model_id.split(':')[2]}) on {batched.device}, "
        f"torch threads {torch.get_num_threads()}, {args.prompts} {args.dataset} prompts "
        f"({min(lengths)}-{max(lengths)} prompt tokens) x {args.max_new_tokens} new tokens, greedy"
    )
    rates = {}
    for name in ("batched", "one-by-one"):
        rates[name] = tokens[name] / times[name]
        print(
            f"  {name:<11} {times[name]:8.2f} s  {rates[name]:9.1f} tokens/s  "
            f"(per CPU second of this process: {tokens[name] / cpu[name]:.1f} tokens)"
        )
    same = sum(a.token_ids == b.token_ids for a, b in zip(results["batched"], results["one-by-one"], strict=True))
    print(f"  ratio (batched / one-by-one): {rates['batched'] / rates['one-by-one']:.2f}x  (target >= 5x)")
    print(f"  ratio in CPU time:            {cpu['one-by-one'] / cpu['batched']:.2f}x  (less sensitive to other load)")
    print(f"  identical completions in both arms: {same}/{args.prompts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
