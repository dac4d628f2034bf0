"""Step-level beam search guided by a PUM (the library of `procrl beam`; docs/architecture.md "PUM" Beam search).

Every unfinished beam is extended by `expand` sampled next steps, drawn by the policy's rollout engine
(`generation_backend`: auto = vLLM wherever it imports, else transformers) from the prompt followed by the beam's
ids: generation stops after the step separator ("\\n\\n"; one inside a `$$` or code block does not end a step, so
such a row is continued), at EOS, or after `max_step_tokens`; the finished beams and all new candidates compete and the `beams`
with the highest U(x, prefix) are kept. A beam is finished when it ends with EOS, its last step states an answer
(`extract_answer`), or it reached `max_new_tokens`. The search stops when every kept beam is finished or after
`max_steps` rounds; the answer is the best finished beam by U (the best beam when none finished).

With `versus` (a `procrl select` run with best-of-k curves on the same problems, `--ks` holding `versus_k`), the
result also holds `versus`: the beam's per-problem correctness minus each of that run's methods (greedy, majority,
the PUM, ...) at `versus_k` samples, paired over the problems both have, with a bootstrap 95% interval
(`versus_select`). With `beams` · `expand` = `versus_k`, every round samples as many next steps per problem as
best-of-`versus_k` samples whole solutions: the comparison at an equal sampling budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tqdm.auto import tqdm

from procrl.evals.offline import OfflineConfig, accuracy, load_pum, load_setup, sampling_params
from procrl.evals.selection import read_select_run
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, bootstrap_mean_interval, ratio
from procrl.generation import RolloutEngine, SamplingParams, derive_seed
from procrl.rewards.outcome import extract_answer, is_correct
from procrl.rewards.steps import split_steps, token_steps

__all__ = ["Beam", "BeamConfig", "run_beam", "sample_steps", "select_curves", "versus_select"]


@dataclass
class BeamConfig(OfflineConfig):
    """Settings of `procrl beam` (parsed by `TrlParser` in `procrl/scripts/beam.py`).

    Raises:
        ValueError: (on construction) `beams`, `expand`, `max_steps` or `max_step_tokens` < 1, no `pum` directory,
            or a bad shared setting (`OfflineConfig`).
    """

    scorer: Literal["pum"] = field(default="pum", metadata={"help": "beam scorer (U(x, prefix) of the PUM)"})
    beams: int = field(default=4, metadata={"help": "B: beams kept after every step"})
    expand: int = field(default=4, metadata={"help": "k: sampled next steps per beam"})
    max_steps: int = field(default=12, metadata={"help": "rounds of expansion at most"})
    max_step_tokens: int = field(default=128, metadata={"help": "token budget of one step"})
    output_dir: str = field(default="outputs/beam", metadata={"help": "where run.json and problems.jsonl go"})
    versus: str | None = field(
        default=None,
        metadata={
            "help": "a `procrl select` run (its --output-dir) with --ks on the same problems: paired differences of "
            "the beam's accuracy against each of its methods at --versus-k samples"
        },
    )
    versus_k: int = field(
        default=16, metadata={"help": "the select run's k to compare with (beams x expand = k: an equal budget)"}
    )

    def problems(self) -> list[str]:
        problems = super().problems()
        small = [
            f"--{name.replace('_', '-')} ({getattr(self, name)})"
            for name in ("beams", "expand", "max_steps", "max_step_tokens")
            if getattr(self, name) < 1
        ]
        if small:
            problems.append(f"{', '.join(small)} must be >= 1 (e.g. --beams 4 --expand 4)")
        if not self.pum:
            problems.append("--pum PATH is needed: the beams are scored by a PUM (a train_pum.py output directory)")
        if self.versus_k < 1:
            problems.append(f"--versus-k ({self.versus_k}) must be >= 1")
        return problems


@dataclass
class Beam:
    """One partial solution: its sampled ids (all steps so far), the step texts and its PUM score."""

    ids: list[int]
    steps: list[str]
    score: float | None = None
    finished: bool = False


def _holds_a_step(text: str, separator: str) -> bool:
    """True once `text` holds a complete step: a separator after which more text would start a new step
    (`split_steps(text + "x")` has two steps; separators inside `$$` or code blocks don't count)."""
    return len(split_steps(text + "x", separator)) >= 2


def sample_steps(
    engine: RolloutEngine,
    inputs: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    seed: int,
    separator: str,
    tokenizer,
) -> list[list[int]]:
    """One sampled next step per row of `inputs` (prompt + beam ids): its ids `(L_i,)`, L_i <= `params.max_new_tokens`.

    `engine.generate(..., stop=(separator,))` ends a row at the first separator, but one inside a `$$` or code block
    ends no step: such rows are continued (prompt + ids so far, the remaining token budget, a seed derived from
    `seed` and the round) until their text holds a complete step, they end with EOS, or the budget is spent. The
    ids are the engine's (never re-encoded); the caller cuts them to the first step (`_first_step`).
    """
    stop_params = SamplingParams(**{**params.to_dict(), "stop": (separator,)})
    ids: list[list[int]] = [[] for _ in inputs]
    pending = list(range(len(inputs)))
    round_ = 0
    while pending:
        by_budget: dict[int, list[int]] = {}
        for i in pending:
            by_budget.setdefault(stop_params.max_new_tokens - len(ids[i]), []).append(i)
        pending = []
        for budget, rows in sorted(by_budget.items(), reverse=True):
            call = SamplingParams(**{**stop_params.to_dict(), "max_new_tokens": budget})
            rollouts = engine.generate(
                [list(inputs[i]) + ids[i] for i in rows], call, seed=derive_seed(seed, round_, budget)
            )
            for i, r in zip(rows, rollouts, strict=True):
                ids[i] += r.token_ids
                text = tokenizer.decode(ids[i], skip_special_tokens=True)
                if r.finish_reason == "stop" and len(ids[i]) < stop_params.max_new_tokens:
                    if not _holds_a_step(text, separator):
                        pending.append(i)
        round_ += 1
    return ids


def _first_step(ids: list[int], tokenizer, separator: str) -> list[int]:
    """The ids of the first step of sampled `ids` (token boundaries from the ids, never re-encoding)."""
    steps, bounds = token_steps(ids, tokenizer, separator=separator)
    return ids[: bounds[0]] if len(steps) >= 2 else ids


def run_beam(config: BeamConfig) -> dict:
    """Step-level beam search guided by the PUM; returns the result.

    The result (json-safe; `procrl beam` keeps it in run.json, the `problems` in problems.jsonl): `command`,
    `model`, `dataset`, `settings`, `results` (one row "beam B=<beams> k=<expand>" -> `accuracy` dict), `summary`
    (`rounds`, `unparseable_gold`), `wall_time_s` and `problems` (the answer's text, steps, extracted answer,
    correctness, U score, token count, and the kept beams).
    """
    t0 = time.perf_counter()
    curves = select_curves(config.versus, config.versus_k) if config.versus else None  # refused before the search
    s = load_setup(config)
    tok = s.tokenizer
    pum = load_pum(config)
    separator = pum.separator
    params = sampling_params(config, config.max_step_tokens)
    problems = [row["question"] for row in s.dataset]
    beams: list[list[Beam]] = [[Beam([], [])] for _ in s.dataset]
    rounds = 0
    for _ in tqdm(range(config.max_steps), desc="beam steps", disable=config.no_progress):
        active = [(p, b) for p, row in enumerate(beams) for b in row if not b.finished]
        if not active:
            break
        rounds += 1
        requests = [(p, b) for p, b in active for _ in range(config.expand)]
        inputs = [s.prompt_ids[p] + b.ids for p, b in requests]
        new_ids: list[list[int]] = []
        for call, start in enumerate(range(0, len(inputs), config.batch_size)):
            new_ids += sample_steps(
                s.engine, inputs[start : start + config.batch_size], params,
                seed=derive_seed(config.seed, "beam", rounds, call), separator=separator, tokenizer=s.engine.tokenizer,
            )  # fmt: skip
        candidates: list[list[Beam]] = [[b for b in row if b.finished] for row in beams]
        seen = [{tuple(b.ids) for b in row} for row in candidates]
        for (p, parent), ids in zip(requests, new_ids, strict=True):
            ids = _first_step(ids, tok, separator)
            full = parent.ids + ids
            if not ids or tuple(full) in seen[p]:
                continue
            seen[p].add(tuple(full))
            text = tok.decode(ids, skip_special_tokens=True)
            finished = ids[-1] in s.eos_ids or extract_answer(text) is not None or len(full) >= config.max_new_tokens
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
            beams[p] = [row[i] for i in order[: config.beams]]
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
    name = f"beam B={config.beams} k={config.expand}"
    result = {
        "command": "beam",
        "model": config.model,
        "dataset": f"{config.dataset}[{config.start}:{config.start + len(s.dataset)}]",
        "settings": config.settings(),
        "results": {name: accuracy(correct_g, picks)},
        "summary": {"rounds": rounds, "unparseable_gold": sum(1 for c in correct_g if c is None)},
        "wall_time_s": {"total": time.perf_counter() - t0},
        "problems": records,
    }
    if curves is not None:
        result["versus"] = versus_select(records, curves, config.versus_k, seed=config.seed) | {
            "select_dir": config.versus
        }
    return result


def select_curves(select_dir: str, k: int) -> dict:
    """The best-of-k curves (`result["bestofn"]`) of the `procrl select` run in `select_dir`, checked to hold `k`.

    Raises:
        ValueError: not a readable select run, a run without curves (no --ks), or `k` not among its ks.
    """
    curves = read_select_run(select_dir).get("bestofn")
    if not curves:
        raise ValueError(f"--versus {select_dir}: the select run has no best-of-k curves; run it with --ks")
    if k not in curves["settings"]["ks"]:
        raise ValueError(f"--versus-k {k} is not among the select run's ks {curves['settings']['ks']}")
    return curves


def versus_select(
    records: Sequence[dict], curves: dict, k: int, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> dict:
    """The beam's accuracy against each best-of-k method of a select run at `k`, paired over problems.

    Args:
        records: the beam's per-problem records (`problem_id`, `correct`: True/False, None for an unparseable gold).
        curves: the select run's `bestofn_curves` result (`problem_ids`, `per_problem[method][str(k)]`: each
            problem's expected accuracy of the method over its random k-subsets).
        k: the select run's subset size.

    Returns:
        `{"k", "problems", "rows": {method: {"beam", "method", "diff", "ci_low", "ci_high"}}}` over the problems both
        runs scored (accuracies in [0, 1]; the interval is the percentile bootstrap over those problems).

    Raises:
        ValueError: no problem in common.

    >>> curves = {"problem_ids": ["a", "b"], "per_problem": {"majority": {"4": [1.0, 0.5]}}}
    >>> r = versus_select([{"problem_id": "a", "correct": True}, {"problem_id": "b", "correct": False}], curves, 4)
    >>> r["problems"], r["rows"]["majority"]["beam"], r["rows"]["majority"]["diff"]
    (2, 0.5, -0.25)
    """
    beam = {str(r["problem_id"]): float(r["correct"]) for r in records if r.get("correct") is not None}
    common = [i for i, pid in enumerate(curves["problem_ids"]) if str(pid) in beam]
    if not common:
        raise ValueError("the beam run and the select run have no scored problem in common (same --dataset slice?)")
    ours = [beam[str(curves["problem_ids"][i])] for i in common]
    rows = {}
    for method, by_k in curves["per_problem"].items():
        theirs = [by_k[str(k)][i] for i in common]
        diffs = [a - b for a, b in zip(ours, theirs, strict=True)]
        low, high = bootstrap_mean_interval(diffs, resamples=resamples, seed=seed) if resamples > 0 else (None, None)
        rows[method] = {
            "beam": ratio(sum(ours), len(ours)),
            "method": ratio(sum(theirs), len(theirs)),
            "diff": ratio(sum(diffs), len(diffs)),
            "ci_low": low,
            "ci_high": high,
        }
    return {"k": k, "problems": len(common), "rows": rows}
