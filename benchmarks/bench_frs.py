"""FRS costs: (1) tail confidence from the generation's own logits vs a second forward pass; (2) judge throughput.

    python benchmarks/bench_frs.py [--problems 8] [--traces 4] [--max-new-tokens 128] [--judge-requests 16] [--skip-judge]
                                   [--engine vllm|transformers] [--no-continuous-batching] [--judge-threads 1]
    python benchmarks/bench_frs.py --problems 1 --traces 2 --max-new-tokens 32 --repeats 1 --no-fp64-reference \\
        --judge-requests 4          # a smoke run of both parts

(1) Confidence. The default model samples `problems x traces` GSM8K traces once with
`procrl.generation.generate_completions` (T = 0.7), whose `generate` output (with `output_logits=True`) is
kept. Arm A is what FRS does: gather each chosen token's log-probability from those stored raw logits
(`log_softmax` + `gather`, the computation inside `generate_completions`) and take the tail confidence. Arm B
recomputes the log-probabilities with a teacher-forced forward pass over prompt + completion
(`procrl.generation.sequence_logps`, fastest of batch sizes 8 and 32) and takes the tail confidence. Reported: the
median time of each arm, their ratio B / A (target >= 1.5), the max difference of the chosen-token probabilities
(target <= 1e-5), of the log-probabilities (<= 1e-4) and of the confidences, and how far each arm's log-probabilities
are from a float64 forward pass. Also, for context, the end-to-end
cost of keeping the logits: `generate_completions` with and without log-probs, same seed, one run each.

(2) Judge throughput against a local judge server on the default model (127.0.0.1): `JudgeServer(engine=--engine)`,
by default vLLM's OpenAI server (`--engine vllm`: the json_schema of `ReasoningJudgement` enforced, top log-probs
read into probabilities, always batching), or `transformers serve` (`--engine transformers`: it ignores the schema;
`--continuous-batching` with JudgeServer's bounded KV cache unless `--no-continuous-batching`, which makes it
generate one request at a time); `--judge-threads` CPU threads (default 1: the CPU here is shared).
`--judge-requests` real FRS judge requests built from the traces of (1), sent with `max_concurrency` 1 and 8, no
cache; requests per second of each, their ratio, valid replies, replies with probabilities and unscored reasons.
`benchmarks/bench_judges.py` compares the engines side by side on FRS requests built from gold solutions; here the
traces are sampled by the model. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def timed(fn, repeats: int):
    """(median seconds, last result) of `repeats` calls."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bench_confidence(args) -> tuple[dict, list]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from procrl.data_builders.datasets import load_math_dataset
    from procrl.evals.frs import Trace, tail_confidence_from_logps
    from procrl.generation import eos_token_ids, generate_completions, render_prompts, sequence_logps
    from procrl.models import resolve_model
    from procrl.rewards.outcome import is_correct

    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_model("default")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    eos_ids = eos_token_ids(tokenizer, model.generation_config)
    rows = list(load_math_dataset("gsm8k", start=0, end=args.problems))
    prompts = [row["prompt"] for row in rows for _ in range(args.traces)]
    prompt_ids = render_prompts(tokenizer, prompts)
    config = GenerationConfig(
        do_sample=True, temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=args.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_ids,
    )  # fmt: skip

    # Keep the raw `generate` output (its per-step logits) from the production call.
    kept = {}
    original_generate = model.generate

    def keeping_generate(*a, **kw):
        kept["out"] = original_generate(*a, **kw)
        return kept["out"]

    model.generate = keeping_generate
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    gen = generate_completions(model, prompt_ids, config, pad_token_id=tokenizer.pad_token_id, eos_ids=eos_ids)
    generation_s = time.perf_counter() - start
    model.generate = original_generate
    out = kept["out"]
    sampled = out.sequences[:, max(len(p) for p in prompt_ids) :]  # (B, T_new): prompts are left-padded
    lengths = [len(ids) for ids in gen.completion_ids]

    def from_generation_logits():
        # what generate_completions does with the logits it keeps, then the tail confidence per trace
        per_step = [
            torch.log_softmax(logits.float(), dim=-1).gather(-1, sampled[:, t : t + 1]).squeeze(-1)
            for t, logits in enumerate(out.logits)
        ]
        logps = torch.stack(per_step, dim=1)  # (B, T_new)
        rows_ = [logps[i, : lengths[i]].tolist() for i in range(len(lengths))]
        return rows_, [tail_confidence_from_logps(r) for r in rows_]

    sequences = [p + c for p, c in zip(prompt_ids, gen.completion_ids, strict=True)]
    starts = [len(p) for p in prompt_ids]

    def forward(batch_size):
        def run():
            rows_ = sequence_logps(model, sequences, starts, pad_token_id=tokenizer.pad_token_id, batch_size=batch_size)
            return rows_, [tail_confidence_from_logps(r) for r in rows_]

        return run

    t_a, (logps_a, conf_a) = timed(from_generation_logits, args.repeats)
    assert all(a == b for a, b in zip(logps_a, gen.completion_logps, strict=True)), "re-extraction != rollout output"
    forward_times = {}
    for batch_size in (8, 32):
        forward_times[batch_size], (logps_b, conf_b) = timed(forward(batch_size), max(1, args.repeats // 2))
    t_b = min(forward_times.values())

    max_dlogp = max(abs(a - b) for ra, rb in zip(logps_a, logps_b, strict=True) for a, b in zip(ra, rb, strict=True))
    max_dp = max(
        abs(torch.tensor(ra).exp() - torch.tensor(rb).exp()).max().item()
        for ra, rb in zip(logps_a, logps_b, strict=True)
        if ra
    )
    max_dconf = max(abs(a - b) for a, b in zip(conf_a, conf_b, strict=True) if a is not None)

    # Which arm is closer to the exact value? A float64 forward pass as the reference.
    reference = None
    if args.fp64_reference:
        model.double()
        ref = sequence_logps(model, sequences, starts, pad_token_id=tokenizer.pad_token_id, batch_size=8)
        model.float()
        reference = {
            name: max(abs(a - b) for ra, rb in zip(rows_, ref, strict=True) for a, b in zip(ra, rb, strict=True))
            for name, rows_ in (("generation_logits", logps_a), ("forward_pass", logps_b))
        }

    # End to end, for context: the same generation without keeping logits (same seed -> same tokens).
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    plain = generate_completions(
        model, prompt_ids, config, pad_token_id=tokenizer.pad_token_id, eos_ids=eos_ids, return_logprobs=False
    )
    plain_s = time.perf_counter() - start

    texts = tokenizer.batch_decode(gen.completion_ids, skip_special_tokens=True)
    row_of = [row for row in rows for _ in range(args.traces)]
    traces = [
        Trace(row["problem_id"], row["question"], text, row["answer"], is_correct(text, row["answer"]), conf, n)
        for row, text, conf, n in zip(row_of, texts, conf_a, lengths, strict=True)
    ]
    result = {
        "traces": len(sequences),
        "mean_completion_tokens": sum(lengths) / len(lengths),
        "arm_a_generation_logits_s": t_a,
        "arm_b_forward_pass_s": t_b,
        "arm_b_by_batch_size_s": forward_times,
        "speed_ratio_b_over_a": t_b / t_a,
        "max_abs_diff_prob": max_dp,
        "max_abs_diff_logprob": max_dlogp,
        "max_abs_diff_confidence": max_dconf,
        "max_abs_diff_logprob_vs_float64_forward": reference,
        "generate_with_logprobs_s": generation_s,
        "generate_without_logprobs_s": plain_s,
        "same_tokens_with_and_without_logits": plain.completion_ids == gen.completion_ids,
    }
    return result, traces


def bench_judge(args, traces) -> dict:
    from procrl.evals.frs import ReasoningJudgement, judge_messages

    requests = [judge_messages(t.problem, t.completion, t.gold, t.correct) for t in (traces * 4)[: args.judge_requests]]
    from procrl.judges import JudgeServer, OpenAICompatibleJudge

    batching = args.engine == "vllm" or not args.no_continuous_batching  # vLLM always batches
    result = {"engine": args.engine, "batching": batching, "requests": len(requests),
              "judge_max_tokens": args.judge_max_tokens}  # fmt: skip
    server = JudgeServer(
        "default",
        engine=args.engine,
        continuous_batching=args.engine == "transformers" and batching,  # a transformers serve option only
        num_threads=args.judge_threads,
    )
    with server:
        result["server_startup_s"] = server.startup_s
        warm = OpenAICompatibleJudge(
            server.base_url, server.model_id, max_concurrency=1, max_tokens=args.judge_max_tokens, timeout_s=300
        )  # a whole reply: a schema-constrained JSON cut at a few tokens would be logged as invalid_json
        warm.judge(requests[:1], ReasoningJudgement, progress=False)  # first request pays lazy initialisation
        for concurrency in (1, 8):
            judge = OpenAICompatibleJudge(
                server.base_url, server.model_id, max_concurrency=concurrency, max_tokens=args.judge_max_tokens,
                timeout_s=300,
            )  # fmt: skip
            start = time.perf_counter()
            results = judge.judge(requests, ReasoningJudgement, desc=f"concurrency {concurrency}")
            seconds = time.perf_counter() - start
            result[f"concurrency_{concurrency}"] = {
                "seconds": seconds,
                "requests_per_s": len(requests) / seconds,
                "scored": sum(r.ok for r in results),
                "with_probs": sum(r.probs is not None for r in results),
                "schema_ignored": judge.stats.schema_ignored,
                "unscored": dict(judge.stats.unscored),
            }
    result["speedup_8_over_1"] = result["concurrency_8"]["requests_per_s"] / result["concurrency_1"]["requests_per_s"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=8, help="GSM8K test problems")
    parser.add_argument("--traces", type=int, default=4, help="traces per problem")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats of arm A (arm B: half)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--judge-requests", type=int, default=16)
    parser.add_argument("--judge-max-tokens", type=int, default=96)
    parser.add_argument(
        "--engine", default="vllm", choices=("vllm", "transformers"),
        help="judge server: vLLM's OpenAI server (schema enforced, log-probs) or transformers serve",
    )  # fmt: skip
    parser.add_argument(
        "--no-continuous-batching", action="store_true",
        help="transformers engine: start transformers serve without --continuous-batching (vLLM always batches)",
    )  # fmt: skip
    parser.add_argument(
        "--judge-threads", type=int, default=1,
        help="CPU threads of the judge server (JudgeServer num_threads; 0 = the engine's default)",
    )  # fmt: skip
    parser.add_argument("--skip-judge", action="store_true")
    parser.add_argument(
        "--traces-from", default=None,
        help="skip (1): take the judge requests' traces from a judged_traces.jsonl written by `procrl frs`",
    )  # fmt: skip
    parser.add_argument("--no-fp64-reference", dest="fp64_reference", action="store_false",
                        help="skip the float64 forward pass that tells which arm is closer to exact")  # fmt: skip
    args = parser.parse_args(argv)
    if args.judge_threads < 0:
        parser.error(f"--judge-threads must be >= 0, got {args.judge_threads}")
    args.judge_threads = args.judge_threads or None

    import json

    if args.traces_from:
        from procrl.evals.frs.traces import read_traces

        traces = read_traces(args.traces_from)  # drops the derived rs / rs_expected
    else:
        confidence, traces = bench_confidence(args)
        print("confidence:", json.dumps(confidence, indent=2, default=str))
    if not args.skip_judge:
        print("judge:", json.dumps(bench_judge(args, traces), indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
