"""`procrl select` (best-of-N) and `procrl beam` (step-level beam search) with a PUM, PiCSAR, majority or random.

    procrl select --scorer pum,picsar,majority,random --n 8 --dataset svamp --start 0 --end 100 --pum outputs/pum
    procrl beam --beams 4 --expand 4 --scorer pum --pum outputs/pum --dataset svamp --start 0 --end 100

`select` samples `--n` completions per problem with the policy (procrl's batched generation, the generation's own
raw log-probs kept for PiCSAR), picks one per scorer and reports the accuracy of the picked completions
(DESIGN §4 "PUM" Best-of-N, "PiCSAR" best-of-N):

- `pum`: argmax_i U(x, y_i) (the PUM's utility of the full completion, trailing EOS stripped);
- `picsar`: argmax of the unnormalised PiCSAR sum log p(r|x) + log p(y|a,x,r) (the paper's selection score), the
  answer term teacher-forced by the policy itself; completions without an extractable answer are never picked;
- `majority`: the most frequent extracted answer (ties: the answer that appears first); its first completion;
- `random`: one completion drawn with `random.Random(f"{seed}:{problem_id}")` (reproducible per problem).

Several scorers (comma-separated) select from the SAME samples. Ties always go to the earliest candidate. The table
also shows pass@N (some sample is correct: the ceiling of any selector) and the mean accuracy of one sample.
The samples (token ids and log-probs) are kept in `<output stem>.samples.jsonl`: a rerun with the same model, data
slice and sampling settings (e.g. with another scorer, or once a PUM is trained) reads them instead of sampling.

`beam` (DESIGN §4 "PUM" Beam search): every unfinished beam is extended by `--expand` sampled next steps (generation
stops after the step separator "\\n\\n", at EOS, or after `--max-step-tokens`); the finished beams and all new
candidates compete and the `--beams` with the highest U(x, prefix) are kept. A beam is finished when it ends with
EOS, its last step states an answer (`extract_answer`), or it reached `--max-new-tokens`. The search stops when
every kept beam is finished or after `--max-steps` rounds; the answer is the best finished beam by U (the best beam
when none finished).

Both write a JSON report (settings, accuracy per scorer with a 95% Wilson interval, every problem's candidates and
picks) to `--output` and print the accuracy table. Problems whose gold answer cannot be parsed are left out of the
accuracy and counted (`unparseable_gold`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from procrl.utils import get_logger

logger = get_logger(__name__)

SCORERS = ("pum", "picsar", "majority", "random")

__all__ = [
    "SCORERS",
    "main_beam",
    "main_select",
    "select_argmax",
    "select_majority",
    "select_random",
]


# ----------------------------------------------------------------------------------------------------------
# Pure selection rules
# ----------------------------------------------------------------------------------------------------------


def select_argmax(scores: Sequence[float | None]) -> int | None:
    """Index of the highest score; ties go to the earliest; None and NaN are never picked (None if nothing is left).

    >>> select_argmax([0.1, None, 0.7, 0.7])
    2
    >>> select_argmax([None, float("nan")]) is None
    True
    """
    best, best_value = None, -math.inf
    for i, value in enumerate(scores):
        if value is None or not math.isfinite(value):
            continue
        if best is None or value > best_value:
            best, best_value = i, value
    return best


def select_majority(answers: Sequence[str | None]) -> int | None:
    """Index of the first candidate whose extracted answer is the most frequent one (majority vote).

    Answers are compared as strings (`extract_answer` already makes numbers canonical: "1,250" -> "1250"). Ties go
    to the answer whose first occurrence comes first; candidates without an answer (None) do not vote; None when no
    candidate has an answer.

    >>> select_majority(["4", None, "5", "5", "4"])  # 4 and 5 tie with two votes; "4" appears first
    0
    >>> select_majority([None, "7", "3", "3"])
    2
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(i for i, a in enumerate(answers) if a is not None and counts[a] == top)


def select_random(n: int, seed: int, key: str) -> int:
    """A uniformly drawn index in [0, n), reproducible per (seed, key) and independent of the problem order.

    Raises:
        ValueError: n < 1.
    """
    if n < 1:
        raise ValueError(f"select_random needs at least one candidate, got n={n}")
    return random.Random(f"{seed}:{key}").randrange(n)


# ----------------------------------------------------------------------------------------------------------
# Shared CLI pieces
# ----------------------------------------------------------------------------------------------------------


def _common_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    from procrl.utils import add_generation_cli_args

    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_generation_cli_args(
        parser,
        dataset="svamp",
        end=100,
        batch_help="sequences per generate / scoring call",
        seed_help="sampling seed and random-selection seed",
    )
    parser.add_argument("--pum", default=None, help="PUM checkpoint directory (train_pum.py output); needed for pum")
    return parser


@dataclass
class _Setup:
    dataset: list[dict]
    model: object
    tokenizer: object
    eos_ids: list[int]
    prompt_ids: list[list[int]]
    device: str
    model_key: str  # resolved path + fingerprint of the weight files (changes when a checkpoint is rewritten)


def _setup(args: argparse.Namespace) -> _Setup:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from procrl.data_builders.datasets import load_math_dataset
    from procrl.data_builders.rollouts import weights_fingerprint
    from procrl.models import resolve_model
    from procrl.train_grpo import resolve_template
    from procrl.trainers.rollout import eos_token_ids, render_prompts

    dataset = load_math_dataset(
        args.dataset,
        split=args.split,
        start=args.start,
        end=None if args.end is not None and args.end < 0 else args.end,
        prompt_template=resolve_template(args.prompt_template),
    )
    rows = [dict(row) for row in dataset]
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = resolve_model(args.model)
    model_key = f"{Path(str(path)).resolve() if Path(str(path)).exists() else path}:{weights_fingerprint(path)}"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos_ids = eos_token_ids(tokenizer, model.generation_config)
    prompt_ids = render_prompts(tokenizer, [row["prompt"] for row in rows])
    torch.manual_seed(args.seed)
    return _Setup(rows, model, tokenizer, eos_ids, prompt_ids, device, model_key)


def _generation_config(args, pad_token_id: int, eos_ids: list[int], max_new_tokens: int):
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=True,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=0,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad_token_id,
        eos_token_id=eos_ids,
    )


def _load_pum(args):
    from procrl.rewards.pum import PrefixUtilityModel

    if not args.pum:
        raise SystemExit("--pum PATH is needed for the pum scorer (a train_pum.py output directory)")
    return PrefixUtilityModel.from_pretrained(args.pum, device=args.device, batch_size=args.batch_size)


def _accuracy(correct: list[bool | None], picks: list[int | None]) -> dict:
    """Accuracy of one pick per problem over problems with a parseable gold (correct[i] is that problem's list)."""
    from procrl.trainers.evaluation import wilson_interval

    scored = [(c, p) for c, p in zip(correct, picks, strict=True) if c is not None]
    n_correct = sum(1 for c, p in scored if p is not None and c[p] is True)
    total = len(scored)
    low, high = wilson_interval(n_correct, total) if total else (0.0, 0.0)
    return {
        "accuracy": n_correct / total if total else 0.0,
        "ci_low": low,
        "ci_high": high,
        "correct": n_correct,
        "total": total,
        "abstained": sum(1 for c, p in scored if p is None),
    }


def format_accuracy_table(results: dict[str, dict]) -> str:
    """Fixed-width table: one row per scorer with accuracy [95% CI], correct/total and abstentions."""
    header = f"{'scorer':<22} {'accuracy [95% CI]':<24} {'correct':>9} {'abstained':>9}"
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        acc = f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        lines.append(f"{name:<22} {acc:<24} {r['correct']:>4}/{r['total']:<4} {r['abstained']:>9}")
    return "\n".join(lines)


def _write(path: str, result: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


def _logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")


def _check_common(args) -> str | None:
    if args.batch_size < 1 or args.max_new_tokens < 1 or args.temperature <= 0:
        return "--batch-size and --max-new-tokens must be >= 1 and --temperature > 0"
    return None


# ----------------------------------------------------------------------------------------------------------
# procrl select
# ----------------------------------------------------------------------------------------------------------


# What decides the samples of `procrl select` (the key of its samples file).
SAMPLE_SETTINGS = (
    "model", "dataset", "split", "start", "end", "prompt_template", "n", "temperature", "top_p", "max_new_tokens",
    "batch_size", "seed",
)  # fmt: skip


def _read_samples(path: Path, key: dict, expected: int) -> tuple[list[list[int]], list[list[float]]] | None:
    """(ids, log-probs) from a samples file written with the same settings, else None (missing, other settings,
    wrong count or unreadable: then the samples are drawn again and the file rewritten)."""
    if not path.is_file():
        return None
    try:
        lines = path.read_text().splitlines()
        if json.loads(lines[0]) != {"settings": key}:
            logger.info("select: %s holds samples of other settings (model, data or sampling); sampling again", path)
            return None
        rows = [json.loads(line) for line in lines[1:]]
        ids, logps = [list(r["ids"]) for r in rows], [list(r["logps"]) for r in rows]
    except (OSError, ValueError, IndexError, KeyError, TypeError):
        logger.warning("select: %s is unreadable; sampling again", path)
        return None
    if len(ids) != expected or any(len(i) != len(lp) for i, lp in zip(ids, logps, strict=True)):
        logger.warning("select: %s does not hold %d complete samples; sampling again", path, expected)
        return None
    return ids, logps


def _write_samples(path: Path, key: dict, ids: list[list[int]], logps: list[list[float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # one temporary file per process
    with tmp.open("w") as f:
        f.write(json.dumps({"settings": key}) + "\n")
        for i, lp in zip(ids, logps, strict=True):
            f.write(json.dumps({"ids": [int(t) for t in i], "logps": [float(x) for x in lp]}) + "\n")
    tmp.replace(path)  # atomic: a killed run never leaves a half-written samples file


def make_select_parser() -> argparse.ArgumentParser:
    parser = _common_parser("procrl select", __doc__)
    parser.add_argument("--scorer", default="pum", help=f"one or more of {', '.join(SCORERS)} (comma-separated)")
    parser.add_argument("--n", type=int, default=8, help="samples per problem (N of best-of-N)")
    parser.add_argument("--output", default="outputs/select/select.json", help="JSON report path")
    return parser


def main_select(argv: list[str] | None = None) -> int:
    """Run `procrl select`; returns the exit status (0 on success, 2 on bad arguments)."""
    args = make_select_parser().parse_args(argv)
    scorers = [s.strip() for s in args.scorer.split(",") if s.strip()]
    bad = [s for s in scorers if s not in SCORERS]
    problem = _check_common(args)
    if problem or bad or not scorers or args.n < 1:
        print(
            f"procrl select: {problem or ''} {f'unknown scorer(s) {bad}; choose from {SCORERS}' if bad else ''}"
            f"{' --n must be >= 1' if args.n < 1 else ''}".strip(),
            file=sys.stderr,
        )
        return 2
    if "pum" in scorers and not args.pum:
        print("procrl select: --scorer pum needs --pum PATH (a train_pum.py output directory)", file=sys.stderr)
        return 2
    _logging()
    result = run_select(args, scorers)
    print(format_accuracy_table(result["results"]))
    print(f"report: {args.output}")
    return 0


def run_select(args: argparse.Namespace, scorers: list[str]) -> dict:
    """Sample N completions per problem, pick one per scorer, write and return the report."""
    from tqdm.auto import tqdm

    from procrl.rewards.outcome import extract_answer, is_correct
    from procrl.trainers.rollout import generate_completions

    t0 = time.perf_counter()
    s = _setup(args)
    tok = s.tokenizer
    config = _generation_config(args, tok.pad_token_id, s.eos_ids, args.max_new_tokens)
    requests = [p for p in s.prompt_ids for _ in range(args.n)]  # problem-major, N consecutive samples each
    samples_path = Path(args.output).with_name(Path(args.output).stem + ".samples.jsonl")
    samples_key = {
        **{k: getattr(args, k) for k in SAMPLE_SETTINGS},
        "model_key": s.model_key,
        "device": str(s.device),
        "prompts_sha256": hashlib.sha256(json.dumps(s.prompt_ids).encode()).hexdigest(),
    }
    cached = _read_samples(samples_path, samples_key, len(requests))
    if cached is not None:
        ids, logps = cached
        logger.info("select: %d samples read from %s (same model, data and sampling settings)", len(ids), samples_path)
    else:
        ids, logps = [], []
        for start in tqdm(range(0, len(requests), args.batch_size), desc="sampling", disable=args.no_progress):
            out = generate_completions(
                s.model, requests[start : start + args.batch_size], config, pad_token_id=tok.pad_token_id,
                eos_ids=s.eos_ids, device=s.device,
            )  # fmt: skip
            ids += out.completion_ids
            logps += out.completion_logps
        _write_samples(samples_path, samples_key, ids, logps)
    t_gen = time.perf_counter() - t0  # model loading included; with cached samples, loading and reading only
    texts = tok.batch_decode(ids, skip_special_tokens=True)

    def group(values: list) -> list[list]:
        return [values[i * args.n : (i + 1) * args.n] for i in range(len(s.dataset))]

    texts_g, ids_g, logps_g = group(texts), group(ids), group(logps)
    answers_g = [[extract_answer(t) for t in row] for row in texts_g]
    correct_g: list[list[bool] | None] = []
    for row, texts_row in zip(s.dataset, texts_g, strict=True):
        checks = [is_correct(t, row["answer"]) for t in texts_row]
        correct_g.append(None if any(c is None for c in checks) else [bool(c) for c in checks])

    picks: dict[str, list[int | None]] = {}
    scores: dict[str, list[list[float | None]]] = {}
    for scorer in scorers:
        if scorer == "majority":
            picks[scorer] = [select_majority(a) for a in answers_g]
        elif scorer == "random":
            picks[scorer] = [select_random(args.n, args.seed, row["problem_id"]) for row in s.dataset]
        elif scorer == "pum":
            from procrl.rewards.pum_rewards import PUMReward

            reward = PUMReward(_load_pum(args), "full")
            values = reward(completions=texts, question=[row["question"] for row in s.dataset for _ in range(args.n)])
            scores[scorer] = group(values)
            picks[scorer] = [select_argmax(v) for v in scores[scorer]]
        elif scorer == "picsar":
            from procrl.rewards.picsar import PiCSARScorer

            picsar = PiCSARScorer(model=s.model, tokenizer=tok, normalize="sum", batch_size=args.batch_size)
            values = []
            rows = zip(s.dataset, texts_g, ids_g, logps_g, strict=True)
            for row, t_row, i_row, l_row in tqdm(rows, total=len(s.dataset), desc="picsar", disable=args.no_progress):
                result = picsar.score([row["prompt"]] * args.n, t_row, i_row, l_row)
                values.append([None if r is None else r.sum for r in result])
            scores[scorer] = values
            picks[scorer] = [select_argmax(v) for v in values]

    results = {name: _accuracy(correct_g, p) for name, p in picks.items()}
    pass_at_n = _accuracy(correct_g, [(c.index(True) if c and True in c else None) for c in correct_g])
    mean_single = [sum(c) / len(c) for c in correct_g if c is not None]
    results[f"pass@{args.n} (oracle)"] = pass_at_n
    summary = {
        "mean_sample_accuracy": sum(mean_single) / len(mean_single) if mean_single else 0.0,
        "unparseable_gold": sum(1 for c in correct_g if c is None),
    }
    result = {
        "command": "select",
        "model": args.model,
        "dataset": f"{args.dataset}[{args.start}:{args.start + len(s.dataset)}]",
        "settings": {k: v for k, v in vars(args).items() if k not in ("no_progress",)},
        "scorers": scorers,
        "results": results,
        "summary": summary,
        "wall_time_s": {"generation": t_gen, "total": time.perf_counter() - t0},
        "samples": {"path": str(samples_path), "from_cache": cached is not None},
        "problems": [
            {
                "problem_id": row["problem_id"],
                "answer": row["answer"],
                "candidates": [
                    {
                        "text": t,
                        "extracted": a,
                        "correct": None if c is None else c[i],
                        "num_tokens": len(i_),
                        **{f"score_{k}": scores[k][p][i] for k in scores},
                    }
                    for i, (t, a, i_) in enumerate(zip(texts_g[p], answers_g[p], ids_g[p], strict=True))
                ],
                "picks": {k: picks[k][p] for k in picks},
            }
            for p, (row, c) in enumerate(zip(s.dataset, correct_g, strict=True))
        ],
    }
    _write(args.output, result)
    return result


# ----------------------------------------------------------------------------------------------------------
# procrl beam
# ----------------------------------------------------------------------------------------------------------


def make_beam_parser() -> argparse.ArgumentParser:
    parser = _common_parser("procrl beam", __doc__)
    parser.add_argument("--scorer", default="pum", choices=["pum"], help="beam scorer (U(x, prefix) of the PUM)")
    parser.add_argument("--beams", type=int, default=4, help="B: beams kept after every step")
    parser.add_argument("--expand", type=int, default=4, help="k: sampled next steps per beam")
    parser.add_argument("--max-steps", type=int, default=12, help="rounds of expansion at most")
    parser.add_argument("--max-step-tokens", type=int, default=128, help="token budget of one step")
    parser.add_argument("--output", default="outputs/beam/beam.json", help="JSON report path")
    return parser


def main_beam(argv: list[str] | None = None) -> int:
    """Run `procrl beam`; returns the exit status (0 on success, 2 on bad arguments)."""
    args = make_beam_parser().parse_args(argv)
    problem = _check_common(args)
    if problem or min(args.beams, args.expand, args.max_steps, args.max_step_tokens) < 1 or not args.pum:
        print(
            f"procrl beam: {problem or '--beams, --expand, --max-steps, --max-step-tokens must be >= 1 and --pum given'}",
            file=sys.stderr,
        )
        return 2
    _logging()
    result = run_beam(args)
    print(format_accuracy_table(result["results"]))
    print(f"report: {args.output}")
    return 0


@dataclass
class Beam:
    """One partial solution: its sampled ids (all steps so far), the step texts and its PUM score."""

    ids: list[int]
    steps: list[str]
    score: float | None = None
    finished: bool = False


class _StopAfterStep:
    """`StoppingCriteria`: a row stops once its generated text holds a complete step (a separator, then more text
    would start a new step: `split_steps(text + "x")` has two steps). Separators in `$$`/code blocks don't count."""

    def __init__(self, tokenizer, prompt_width: int, separator: str):
        self.tokenizer, self.prompt_width, self.separator = tokenizer, prompt_width, separator

    def __call__(self, input_ids, scores=None, **kwargs):
        import torch

        from procrl.rewards.steps import split_steps

        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :], skip_special_tokens=True)
        done = [len(split_steps(t + "x", self.separator)) >= 2 for t in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _first_step(ids: list[int], tokenizer, separator: str) -> list[int]:
    """The ids of the first step of sampled `ids` (token boundaries from the ids, never re-encoding)."""
    from procrl.rewards.steps import token_steps

    steps, bounds = token_steps(ids, tokenizer, separator=separator)
    return ids[: bounds[0]] if len(steps) >= 2 else ids


def run_beam(args: argparse.Namespace) -> dict:
    """Step-level beam search guided by the PUM; writes and returns the report."""
    from tqdm.auto import tqdm
    from transformers import StoppingCriteriaList

    from procrl.rewards.outcome import extract_answer, is_correct
    from procrl.trainers.rollout import generate_completions

    t0 = time.perf_counter()
    s = _setup(args)
    tok = s.tokenizer
    pum = _load_pum(args)
    separator = pum.separator
    # Rows stopped by the step criterion are filled with the config's pad id: it must differ from every EOS id,
    # or a stopped step would look like a finished solution (pad == eos for SmolLM2).
    pad = next(i for i in range(len(tok)) if i not in s.eos_ids)
    config = _generation_config(args, pad, s.eos_ids, args.max_step_tokens)
    problems = [row["question"] for row in s.dataset]
    beams: list[list[Beam]] = [[Beam([], [])] for _ in s.dataset]
    rounds = 0
    for _ in tqdm(range(args.max_steps), desc="beam steps", disable=args.no_progress):
        active = [(p, b) for p, row in enumerate(beams) for b in row if not b.finished]
        if not active:
            break
        rounds += 1
        requests = [(p, b) for p, b in active for _ in range(args.expand)]
        inputs = [s.prompt_ids[p] + b.ids for p, b in requests]
        new_ids: list[list[int]] = []
        for start in range(0, len(inputs), args.batch_size):
            batch = inputs[start : start + args.batch_size]
            width = max(len(x) for x in batch)
            stop = StoppingCriteriaList([_StopAfterStep(tok, width, separator)])
            out = generate_completions(
                s.model, batch, config, pad_token_id=pad, eos_ids=s.eos_ids, return_logprobs=False,
                device=s.device, stopping_criteria=stop,
            )  # fmt: skip
            new_ids += out.completion_ids
        candidates: list[list[Beam]] = [[b for b in row if b.finished] for row in beams]
        seen = [{tuple(b.ids) for b in row} for row in candidates]
        for (p, parent), ids in zip(requests, new_ids, strict=True):
            while ids and ids[-1] == pad:  # filler after a stopped row
                ids = ids[:-1]
            ids = _first_step(ids, tok, separator)
            full = parent.ids + ids
            if not ids or tuple(full) in seen[p]:
                continue
            seen[p].add(tuple(full))
            text = tok.decode(ids, skip_special_tokens=True)
            finished = ids[-1] in s.eos_ids or extract_answer(text) is not None or len(full) >= args.max_new_tokens
            candidates[p].append(Beam(full, [*parent.steps, text], None, finished))
        todo = [(p, b) for p, row in enumerate(candidates) for b in row if b.score is None]
        if todo:
            values = pum.score([problems[p] for p, _ in todo], [b.steps for _, b in todo])
            for (_, b), v in zip(todo, values, strict=True):
                b.score = float(v)
        for p, row in enumerate(candidates):
            if not row:  # nothing new (all duplicates): keep the old beams
                continue
            order = sorted(range(len(row)), key=lambda i: (-row[i].score, i))  # ties: earlier candidate
            beams[p] = [row[i] for i in order[: args.beams]]
    picks, correct_g, records = [], [], []
    for row, beam_row in zip(s.dataset, beams, strict=True):
        finished = [b for b in beam_row if b.finished] or beam_row
        best = max(finished, key=lambda b: b.score if b.score is not None else -math.inf)
        text = "".join(best.steps)
        ok = is_correct(text, row["answer"])
        correct_g.append(None if ok is None else [bool(ok)])
        picks.append(0)
        records.append(
            {
                "problem_id": row["problem_id"],
                "answer": row["answer"],
                "text": text,
                "steps": best.steps,
                "extracted": extract_answer(text),
                "correct": ok,
                "score": best.score,
                "finished": best.finished,
                "num_tokens": len(best.ids),
                "beams": [{"text": "".join(b.steps), "score": b.score, "finished": b.finished} for b in beam_row],
            }
        )
    name = f"beam B={args.beams} k={args.expand}"
    result = {
        "command": "beam",
        "model": args.model,
        "dataset": f"{args.dataset}[{args.start}:{args.start + len(s.dataset)}]",
        "settings": {k: v for k, v in vars(args).items() if k not in ("no_progress",)},
        "results": {name: _accuracy(correct_g, picks)},
        "summary": {"rounds": rounds, "unparseable_gold": sum(1 for c in correct_g if c is None)},
        "wall_time_s": {"total": time.perf_counter() - t0},
        "problems": records,
    }
    _write(args.output, result)
    return result
