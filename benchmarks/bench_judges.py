"""Judge throughput and valid replies on FRS requests: `transformers serve` vs the vLLM server vs the in-process
constrained judge, on the embedded model.

    python benchmarks/bench_judges.py [--arms serve,vllm,inprocess] [--n 16] [--concurrency 8] [--max-tokens 96]
                                      [--num-threads 1] [--no-continuous-batching] [--model default]

The requests are FRS's own (`procrl.evals.frs.judging.judge_messages`, schema `ReasoningJudgement`: four strict
integers 1-5) on GSM8K-like traces: the first N/2 GSM8K test problems, each with its gold solution as the trace
(calculator annotations removed) and once with the final answer off by one (final_correct false). Arms, one after
the other (one server at a time):

- serve: `JudgeServer(engine="transformers")` (`transformers serve`, `--continuous-batching` unless
  `--no-continuous-batching`, bounded KV cache) + `OpenAICompatibleJudge`; the server ignores the json_schema and
  the log-probs it is sent, so replies are free text (parse-and-extract).
- vllm: `JudgeServer(engine="vllm")` + `OpenAICompatibleJudge` (json_schema + top-5 log-probs: structured outputs,
  probabilities for the four scores).
- inprocess: `TransformersJudge(constrained=True, batch_size=--concurrency)` in this process (llguidance grammar).

Each arm: start (server startup or model load, timed), one warm-up request (a problem outside the N), then the N
requests, cacheless, `--concurrency` in flight (the in-process judge: batches of that size). Printed per arm:
startup s, warm-up s, wall s, judgements/s, valid replies (validated against the schema) / N, replies with
probabilities, unscored reasons; then each arm's throughput as a ratio to the first arm's. A benchmark, not a
test: nothing is asserted. One run; the CPU here is shared, so expect noise and compare ratios within one run.

Measured here (`python benchmarks/bench_judges.py`, defaults: N 16, concurrency 8, max_tokens 96, one server
thread; SmolLM2-135M-Instruct, 2 AVX2 cores shared with other jobs, load average 4-7; one run, 2026-12-01):

| arm | startup | judgements/s | ratio | valid | with probs |
|---|---|---|---|---|---|
| serve (`transformers serve --continuous-batching`) | 12.1 s | 0.102 | 1.00x | 1/16 (*) | 0 |
| vllm (json_schema + top-5 log-probs) | 82.0 s | 0.527 | 5.16x | 16/16 | 16 |
| inprocess (constrained TransformersJudge, batch 8) | 4.8 s (load) | 0.035 | 0.34x | 16/16 | 16 |

(*) 11 invalid_json, 4 schema_mismatch. vLLM's startup is the price (52 s on a quieter CPU, 82-94 s under load:
API server, engine core and worker processes); its replies are constrained JSON of a few dozen tokens where
`transformers serve` writes free text up to the budget. The inprocess arm ran the working-tree
TransformersJudge(constrained=True) before its commit (torch's default threads).
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import time

from procrl.data_builders.datasets import builtin_data_file
from procrl.evals.frs.judging import ReasoningJudgement, judge_messages
from procrl.judges import JudgeServer, OpenAICompatibleJudge, TransformersJudge

ARMS = ("serve", "vllm", "inprocess")


def frs_requests(n: int, offset: int = 0) -> list[list[dict]]:
    """N FRS judge requests on GSM8K test problems offset.. (two traces per problem: gold, and off by one)."""
    with builtin_data_file("gsm8k_test.jsonl").open() as handle:
        records = [json.loads(line) for _, line in zip(range(offset + (n + 1) // 2), handle, strict=False)]
    requests = []
    for record in records[offset:]:
        body, _, gold = record["answer"].rpartition("####")
        steps = re.sub(r"<<[^>]*>>", "", body).strip()
        gold = gold.strip()
        for wrong in (False, True):
            final = _off_by_one(gold) if wrong else gold
            trace = f"{steps}\n\nThe answer is {final}."
            requests.append(judge_messages(record["question"], trace, record["answer"], not wrong))
    return requests[:n]


def _off_by_one(gold: str) -> str:
    value = float(gold.replace(",", "")) + 1
    return str(int(value)) if value.is_integer() else str(value)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, in order, among {ARMS}")
    parser.add_argument("--n", type=int, default=16, help="FRS requests per arm")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (in-process: batch size)")
    parser.add_argument("--max-tokens", type=int, default=96, help="reply token limit (FRS's judge_max_tokens)")
    parser.add_argument("--model", default="default", help="judge model")
    parser.add_argument("--num-threads", type=int, default=1, help="CPU threads of the servers (0: their default)")
    parser.add_argument("--no-continuous-batching", action="store_true", help="serve arm: one request at a time")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per-request timeout (server arms)")
    return parser


def run_judge(judge, requests, label: str) -> tuple[float, dict]:
    start = time.perf_counter()
    judge.judge(requests, ReasoningJudgement, progress=False, desc=label)
    return time.perf_counter() - start, judge.stats.as_dict()


def server_arm(args, engine: str, requests, warmup) -> dict:
    kwargs = {"num_threads": args.num_threads or None, "startup_timeout_s": 900}
    if engine == "transformers":
        kwargs["continuous_batching"] = not args.no_continuous_batching
    with JudgeServer(args.model, engine=engine, **kwargs) as server:
        print(f"  server: {' '.join(server.command())}", flush=True)

        def client():
            return OpenAICompatibleJudge(
                server.base_url,
                server.model_id,
                max_concurrency=args.concurrency,
                max_tokens=args.max_tokens,
                timeout_s=args.timeout_s,
                max_retries=0,
                cache_dir=None,  # every request goes to the server
            )

        warm_s, _ = run_judge(client(), warmup, "warm-up")
        wall_s, stats = run_judge(client(), requests, engine)
        return {"startup_s": server.startup_s, "warmup_s": warm_s, "wall_s": wall_s, "stats": stats}


def inprocess_arm(args, requests, warmup) -> dict:
    if "constrained" not in inspect.signature(TransformersJudge).parameters:
        raise SystemExit("this TransformersJudge has no constrained decoding (inprocess arm)")
    started = time.perf_counter()
    judge = TransformersJudge(args.model, constrained=True, batch_size=args.concurrency, max_new_tokens=args.max_tokens)
    judge._load()  # time the load apart from the judgements
    startup_s = time.perf_counter() - started
    warm_s, _ = run_judge(judge, warmup, "warm-up")
    before = judge.stats.as_dict()
    wall_s, after = run_judge(judge, requests, "inprocess")
    stats = {k: v - before.get(k, 0) for k, v in after.items()}
    return {"startup_s": startup_s, "warmup_s": warm_s, "wall_s": wall_s, "stats": stats}


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        raise SystemExit(f"--arms must name some of {ARMS}, got {args.arms!r}")
    requests = frs_requests(args.n)
    warmup = frs_requests(1, offset=(args.n + 1) // 2)
    print(f"N = {len(requests)} FRS requests, concurrency {args.concurrency}, max_tokens {args.max_tokens}, "
          f"model {args.model}, num_threads {args.num_threads}")  # fmt: skip
    results = {}
    for arm in arms:
        print(f"arm {arm}:", flush=True)
        if arm == "inprocess":
            results[arm] = inprocess_arm(args, requests, warmup)
        else:
            results[arm] = server_arm(args, "transformers" if arm == "serve" else "vllm", requests, warmup)
        r, s = results[arm], results[arm]["stats"]
        reasons = {k.removeprefix("unscored/"): v for k, v in s.items() if k.startswith("unscored/")}
        print(f"  startup {r['startup_s']:.1f} s, warm-up {r['warmup_s']:.1f} s, {len(requests)} requests in "
              f"{r['wall_s']:.1f} s = {len(requests) / r['wall_s']:.3f} judgements/s; valid {s['scored']}/"
              f"{len(requests)}, with probabilities {s['with_probs']}, schema_ignored {s['schema_ignored']}, "
              f"unscored {reasons or 0}", flush=True)  # fmt: skip
    base = arms[0]
    for arm in arms[1:]:
        ratio = results[base]["wall_s"] / results[arm]["wall_s"]
        print(f"throughput {arm} / {base}: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
