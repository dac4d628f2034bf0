"""Constrained decoding for the in-process judge: valid replies and seconds per judgement, per library.

    python benchmarks/bench_constrained.py [--arms none,llguidance,lmfe] [--n 8] [--max-new-tokens 256]
                                           [--batch-size 8] [--threads 0] [--model default]

For each of procrl's own judge prompts, `--n` requests judged greedily with `TransformersJudge` on the embedded
default model (SmolLM2-135M-Instruct), in batches of `--batch-size`, the cache off:

- FRS rubric: `procrl.evals.frs.judge_messages` + `ReasoningJudgement`, on the first GSM8K test problems with
  their gold solution (before "####") as the student's trace and `final_correct` True;
- StepGap NLI: `nli_messages` + `NLIVerdict`, premise = the step's first evidence passage (or its question when it
  has none), hypothesis = `step_claim(step)`, over the shipped annotated 2Wiki steps in file order;
- StepGap A-C: `check_messages` + `StepCheck` on the same steps;
- StepGap A-C with verbatim quotes: the same requests, each with its step's `step_check_schema` (quote = a choice
  among the evidence's candidate spans, `quote_candidates` at the verifier's defaults): one schema per request.

Arms: `none` = free generation (`constrained=False`), `llguidance` = `constrained=True` (the
`procrl.judges.constrained` processor, top-5 log-probs recorded), `lmfe` = lm-format-enforcer 0.11.3's
`JsonSchemaParser` through HF's `prefix_allowed_tokens_fn` (its defaults; a module alias for the
`transformers.tokenization_utils` it imports, gone in transformers 5). Every arm runs the same prompts, padding and
token budget; the schema is whatever `model_json_schema()` gives now. One untimed warm-up request per arm first
(model load, tokenizer tables: reported as setup_s). Then, kind by kind, the arms run one after the other
(`--rounds` times, the order rotated each round), so the arms of a kind share the machine's load. Printed per arm
and kind: valid (schema-valid replies) / n, s/judgement (wall time / n; median and min over rounds), mean reply
tokens, the unscored reasons and the first reply. A benchmark, not a test: nothing is asserted. The CPU here is
shared with other jobs: compare arms within a kind, not across runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from procrl.judges import TransformersJudge

ROOT = Path(__file__).resolve().parents[1]


def make_requests(n: int) -> dict[str, tuple[list, list]]:
    """The four kinds of request: {kind: (n chat requests, n schemas)}."""
    from procrl.data_builders.datasets import load_math_dataset
    from procrl.evals.frs import ReasoningJudgement, judge_messages
    from procrl.evals.stepgap.evaluate import load_annotated
    from procrl.rewards.stepgap.check import StepCheck, check_messages, step_check_schema
    from procrl.rewards.stepgap.nli import NLIVerdict, nli_messages
    from procrl.rewards.stepgap.quotes import quote_candidates, step_claim

    rows = list(load_math_dataset("gsm8k", start=0, end=n))
    frs = [judge_messages(r["question"], r["solution"].split("####")[0], r["solution"], True) for r in rows]
    steps = [
        (trace, step)
        for trace, _ in load_annotated(ROOT / "evals/stepgap/data/annotated_2wiki.jsonl")
        for step in trace.steps
    ][:n]
    nli = [
        nli_messages(step.evidence[0].text if step.evidence else trace.question, step_claim(step))
        for trace, step in steps
    ]
    check = [check_messages(trace.question, step.evidence, step) for trace, step in steps]
    quotes = [step_check_schema(quote_candidates(step.evidence, max_chars=1500)) for _, step in steps]
    return {
        "frs": (frs, [ReasoningJudgement] * len(frs)),
        "nli": (nli, [NLIVerdict] * len(nli)),
        "check": (check, [StepCheck] * len(check)),
        "check_quotes": (check, quotes),
    }


class LMFEJudge(TransformersJudge):
    """`TransformersJudge` whose generation is constrained by lm-format-enforcer (benchmark arm only)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, constrained=False, top_logprobs=0, **kwargs)
        self._tokenizer_data = None

    def _generate(self, batch, schemas):
        # lm-format-enforcer 0.11.3 imports PreTrainedTokenizerBase from `transformers.tokenization_utils`
        # (lmformatenforcer/integrations/transformers.py:6), a module transformers 5 no longer has.
        import transformers.tokenization_utils_base as base

        sys.modules.setdefault("transformers.tokenization_utils", base)
        from lmformatenforcer import JsonSchemaParser, TokenEnforcer
        from lmformatenforcer.integrations.transformers import build_token_enforcer_tokenizer_data

        model, tokenizer = self._load()
        if self._tokenizer_data is None:
            self._tokenizer_data = build_token_enforcer_tokenizer_data(tokenizer)
        enforcers = [TokenEnforcer(self._tokenizer_data, JsonSchemaParser(s.model_json_schema())) for s in schemas]

        def allowed(batch_id, sent):
            return enforcers[batch_id].get_allowed_tokens(sent.tolist()).allowed_tokens

        original = model.generate

        def generate(**kwargs):
            return original(prefix_allowed_tokens_fn=allowed, **kwargs)

        model.generate = generate
        try:
            return super()._generate(batch, schemas)
        finally:
            del model.generate


def make_judge(arm: str, args):
    common = dict(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, device="cpu")
    if arm == "lmfe":
        return LMFEJudge(args.model, **common)
    if arm in ("none", "llguidance"):
        return TransformersJudge(args.model, constrained=arm == "llguidance", top_logprobs=5, **common)
    raise ValueError(f"unknown arm {arm!r}")


def run_kind(judge, tokenizer, requests, schemas) -> dict:
    start = time.perf_counter()
    results = judge.judge(requests, schemas, progress=False)
    wall = time.perf_counter() - start
    lengths = [len(tokenizer(r.raw or "", add_special_tokens=False)["input_ids"]) for r in results]
    return {
        "valid": sum(r.ok for r in results),
        "n": len(results),
        "s_per_judgement": round(wall / len(results), 2),
        "mean_reply_tokens": round(sum(lengths) / len(lengths), 1),
        "with_probs": sum(r.probs is not None for r in results),
        "unscored": dict(collections.Counter(r.unscored for r in results if not r.ok)),
        "first_reply": (results[0].raw or "")[:160],
    }


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default="none,llguidance,lmfe", help="comma-separated: none, llguidance, lmfe")
    parser.add_argument("--kinds", default="frs,nli,check,check_quotes", help="comma-separated kinds of request")
    parser.add_argument("--n", type=int, default=8, help="requests per kind")
    parser.add_argument("--rounds", type=int, default=1, help="timed repeats of every (kind, arm)")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="reply token budget")
    parser.add_argument("--batch-size", type=int, default=8, help="requests generated together")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--model", default="default", help="judge model (procrl.models.resolve_model)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    wanted = args.kinds.split(",")
    kinds = {k: v for k, v in make_requests(args.n).items() if k in wanted}
    arms = args.arms.split(",")
    judges, setup = {}, {}
    for arm in arms:  # untimed warm-up: model load, tokenizer tables
        start = time.perf_counter()
        judges[arm] = make_judge(arm, args)
        requests, schemas = next(iter(kinds.values()))
        judges[arm].judge(requests[:1], schemas[:1], progress=False)
        setup[arm] = round(time.perf_counter() - start, 1)
    tokenizer = judges[arms[0]]._load()[1]
    results = {arm: {"setup_s": setup[arm]} for arm in arms}
    for kind, (requests, schemas) in kinds.items():
        for round_ in range(args.rounds):
            # interleaved, order rotated per round: the arms of one kind see the same (shared) CPU load
            for arm in arms[round_ % len(arms) :] + arms[: round_ % len(arms)]:
                row = run_kind(judges[arm], tokenizer, requests, schemas)
                runs = results[arm].setdefault(kind, {**row, "s_per_judgement_runs": []})
                runs["s_per_judgement_runs"].append(row["s_per_judgement"])
                runs["s_per_judgement"] = round(statistics.median(runs["s_per_judgement_runs"]), 2)
                runs["s_per_judgement_min"] = min(runs["s_per_judgement_runs"])
                print(f"{arm:11s} {kind:12s} round {round_} {json.dumps(row)}", flush=True)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
