"""Judge throughput: client concurrency 8 vs 1 against the embedded `transformers serve` judge.

    python benchmarks/bench_judges.py [--n 16] [--max-tokens 16] [--concurrency 8] [--continuous-batching]
                                      [--num-threads 1] [--model default]

Starts one `JudgeServer` (loopback, CPU), sends one warm-up request, then judges the same N distinct requests
twice with fresh cacheless `OpenAICompatibleJudge`s: first with max_concurrency 1, then with `--concurrency`.
Prints the server startup time, requests/s of each arm, their ratio, the mean latency per request at
concurrency 1, and the unscored counts. Without `--continuous-batching`, `transformers serve` generates one
request at a time (one inference thread per model: transformers/cli/serving/utils.py `InferenceThread`), so
client concurrency can only overlap HTTP and tokenisation with generation. A benchmark, not a test: nothing is
asserted. One run; the CPU here is shared, so expect noise.
"""

from __future__ import annotations

import argparse
import time

from pydantic import BaseModel, Field

from procrl.judges import JudgeServer, OpenAICompatibleJudge


class Score(BaseModel):
    score: int = Field(ge=1, le=5)


def make_requests(n: int) -> list[list[dict]]:
    """N distinct small grading requests (distinct numbers, so no server-side reuse)."""
    return [
        [
            {"role": "system", "content": 'Reply with only a JSON object: {"score": <integer 1-5>}.'},
            {"role": "user", "content": f"Rate this answer to {i} + {i}: it is {2 * i}."},
        ]
        for i in range(n)
    ]


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=16, help="distinct requests per arm")
    parser.add_argument("--max-tokens", type=int, default=16, help="reply token limit")
    parser.add_argument("--concurrency", type=int, default=8, help="client concurrency of the second arm")
    parser.add_argument("--model", default="default", help="model served by transformers serve")
    parser.add_argument("--continuous-batching", action="store_true", help="start the server with batching")
    parser.add_argument("--num-threads", type=int, default=None, help="OMP_NUM_THREADS of the server")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per-request timeout")
    return parser


def run_arm(server, requests, concurrency: int, args) -> tuple[float, dict]:
    judge = OpenAICompatibleJudge(
        server.base_url,
        server.model_id,
        max_concurrency=concurrency,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout_s,
        max_retries=0,
        cache_dir=None,  # every request goes to the server
    )
    start = time.perf_counter()
    judge.judge(requests, Score, desc=f"concurrency {concurrency}")
    return time.perf_counter() - start, judge.stats.as_dict()


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    requests = make_requests(args.n)
    with JudgeServer(args.model, continuous_batching=args.continuous_batching, num_threads=args.num_threads) as server:
        print(f"server: {' '.join(server.command())}")
        print(f"server startup: {server.startup_s:.1f} s")
        warm, _ = run_arm(server, make_requests(1), 1, args)
        print(f"warm-up request: {warm:.2f} s")
        t1, stats1 = run_arm(server, requests, 1, args)
        tc, statsc = run_arm(server, requests, args.concurrency, args)
    rate1, ratec = args.n / t1, args.n / tc
    print(f"N = {args.n} requests, max_tokens = {args.max_tokens}, continuous batching = {args.continuous_batching}")
    print(f"concurrency 1: {t1:.1f} s, {rate1:.3f} req/s, mean latency {t1 / args.n:.2f} s/request; {stats1}")
    print(f"concurrency {args.concurrency}: {tc:.1f} s, {ratec:.3f} req/s; {statsc}")
    print(f"throughput ratio (concurrency {args.concurrency} / 1): {ratec / rate1:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
