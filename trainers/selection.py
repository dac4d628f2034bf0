"""Best-of-N selection with a PUM, PiCSAR, majority vote or a random pick (the library of `procrl select`).

`run_select` samples `n` completions per problem with the policy (a `procrl.generation` rollout engine:
`generation_backend` auto = vLLM wherever it imports, else transformers; the sampler's raw log-probs kept for
PiCSAR), picks one per scorer and reports the accuracy of the picked completions
(DESIGN §4 "PUM" Best-of-N, "PiCSAR" best-of-N). The scorers (`SCORER_FUNCS`, names in `SCORERS`):

- `pum`: argmax_i U(x, y_i) (the PUM's utility of the full completion, trailing EOS stripped);
- `picsar`: argmax of the unnormalised PiCSAR sum log p(r|x) + log p(y|a,x,r) (the paper's selection score), the
  answer term teacher-forced by the policy itself; completions without an extractable answer are never picked;
- `majority`: the most frequent extracted answer (ties: the answer that appears first); its first completion;
- `random`: one completion drawn with `random.Random(f"{seed}:{problem_id}")` (reproducible per problem).

Several scorers select from the SAME samples. Ties always go to the earliest candidate. The report also holds
pass@N (some sample is correct: the ceiling of any selector) and the mean accuracy of one sample. The samples
(token ids and log-probs) are kept in `<output stem>.samples.jsonl`: a rerun with the same model, engine
(`RolloutEngine.cache_key()`: a vLLM sample is never reused as a transformers one), data slice and sampling
settings (e.g. with another scorer, or once a PUM is trained) reads them instead of sampling.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from procrl.generation import derive_seed
from procrl.rewards.outcome import extract_answer, is_correct
from procrl.rewards.picsar import PiCSARScorer
from procrl.rewards.pum_rewards import PUMReward
from procrl.trainers.offline import OfflineConfig, Setup, accuracy, load_pum, load_setup, sampling_params, write_report
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "SCORERS",
    "SCORER_FUNCS",
    "Candidates",
    "SelectConfig",
    "run_select",
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
# The scorers: one registry
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Candidates:
    """The `n` samples of every problem, problem-major: `texts[p][i]` is sample i of problem p (decoded without
    special tokens), `ids[p][i]` its token ids, `logps[p][i]` the sampler's log-prob of each of them (nats, same
    length as the ids) and `answers[p][i]` its `extract_answer` (None: no answer)."""

    texts: list[list[str]]
    ids: list[list[list[int]]]
    logps: list[list[list[float]]]
    answers: list[list[str | None]]


# A scorer: (settings, loaded policy, candidates) -> (one pick per problem (None: abstain), per-candidate scores
# per problem, or None for a scorer without scores).
ScorerFunc = Callable[["SelectConfig", Setup, Candidates], tuple[list[int | None], list[list[float | None]] | None]]


def _score_pum(config: SelectConfig, s: Setup, c: Candidates) -> tuple[list[int | None], list[list[float | None]]]:
    reward = PUMReward(load_pum(config), "full")
    texts = [t for row in c.texts for t in row]
    values = reward(completions=texts, question=[row["question"] for row in s.dataset for _ in range(config.n)])
    scores = _group(values, config.n)
    return [select_argmax(v) for v in scores], scores


def _score_picsar(config: SelectConfig, s: Setup, c: Candidates) -> tuple[list[int | None], list[list[float | None]]]:
    picsar = PiCSARScorer(model=s.model, tokenizer=s.tokenizer, normalize="sum", batch_size=config.batch_size)
    scores = []
    rows = zip(s.dataset, c.texts, c.ids, c.logps, strict=True)
    for row, t_row, i_row, l_row in tqdm(rows, total=len(s.dataset), desc="picsar", disable=config.no_progress):
        result = picsar.score([row["prompt"]] * config.n, t_row, i_row, l_row)
        scores.append([None if r is None else r.sum for r in result])
    return [select_argmax(v) for v in scores], scores


def _score_majority(config: SelectConfig, s: Setup, c: Candidates) -> tuple[list[int | None], None]:
    return [select_majority(a) for a in c.answers], None


def _score_random(config: SelectConfig, s: Setup, c: Candidates) -> tuple[list[int | None], None]:
    return [select_random(config.n, config.seed, row["problem_id"]) for row in s.dataset], None


SCORER_FUNCS: dict[str, ScorerFunc] = {
    "pum": _score_pum,
    "picsar": _score_picsar,
    "majority": _score_majority,
    "random": _score_random,
}
SCORERS = tuple(SCORER_FUNCS)


@dataclass
class SelectConfig(OfflineConfig):
    """Settings of `procrl select` (parsed by `TrlParser` in `procrl/scripts/select.py`).

    Raises:
        ValueError: (on construction) a scorer not in `SCORERS`, no scorer, `n` < 1, the pum scorer without a `pum`
            directory, or a bad shared setting (`OfflineConfig`).
    """

    scorer: str = field(default="pum", metadata={"help": f"one or more of {', '.join(SCORERS)} (comma-separated)"})
    n: int = field(default=8, metadata={"help": "samples per problem (N of best-of-N)"})
    output: str = field(default="outputs/select/select.json", metadata={"help": "JSON report path"})

    @property
    def scorers(self) -> list[str]:
        """The comma-separated `scorer` as a list, in the given order."""
        return [s.strip() for s in self.scorer.split(",") if s.strip()]

    def problems(self) -> list[str]:
        problems = super().problems()
        bad = [s for s in self.scorers if s not in SCORERS]
        if bad:
            problems.append(f"unknown scorer(s) {bad}; choose from {SCORERS} (e.g. --scorer pum,majority)")
        elif not self.scorers:
            problems.append(f"--scorer is empty; give one or more of {SCORERS} (comma-separated)")
        if self.n < 1:
            problems.append(f"--n must be >= 1 (samples per problem), got {self.n}")
        if "pum" in self.scorers and not self.pum:
            problems.append("--scorer pum needs --pum PATH (a train_pum.py output directory)")
        return problems


# ----------------------------------------------------------------------------------------------------------
# The samples file
# ----------------------------------------------------------------------------------------------------------


# What decides the samples of `procrl select` (the key of its samples file, with the engine's cache key; batch_size
# makes the generate calls, hence the seeds).
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


def _group(values: list, n: int) -> list[list]:
    """Consecutive runs of `n` values (problem-major samples -> one list per problem)."""
    return [values[i : i + n] for i in range(0, len(values), n)]


# ----------------------------------------------------------------------------------------------------------
# procrl select
# ----------------------------------------------------------------------------------------------------------


def _sample(config: SelectConfig, s: Setup, samples_path: Path) -> tuple[list, list, bool]:
    """(ids, log-probs, from the samples file?) of the `n` samples of every problem, problem-major.

    The rows go to `s.engine.generate` in runs of `batch_size` (one call each, seeded with
    `derive_seed(seed, "select", call index)`), so the samples are a function of the settings and the engine alone.
    """
    requests = [p for p in s.prompt_ids for _ in range(config.n)]  # problem-major, N consecutive samples each
    samples_key = {
        **{k: getattr(config, k) for k in SAMPLE_SETTINGS},
        "model_key": s.model_key,
        "engine": s.engine.cache_key(),
        "device": str(s.device),
        "prompts_sha256": hashlib.sha256(json.dumps(s.prompt_ids).encode()).hexdigest(),
    }
    cached = _read_samples(samples_path, samples_key, len(requests))
    if cached is not None:
        logger.info(
            "select: %d samples read from %s (same model, engine, data and sampling settings)",
            len(cached[0]),
            samples_path,
        )
        return *cached, True
    params = sampling_params(config, config.max_new_tokens)
    ids, logps = [], []
    starts = range(0, len(requests), config.batch_size)
    for call, start in enumerate(tqdm(starts, desc="sampling", disable=config.no_progress)):
        rollouts = s.engine.generate(
            requests[start : start + config.batch_size], params, seed=derive_seed(config.seed, "select", call)
        )
        ids += [r.token_ids for r in rollouts]
        logps += [r.logprobs for r in rollouts]
    _write_samples(samples_path, samples_key, ids, logps)
    return ids, logps, False


def run_select(config: SelectConfig) -> dict:
    """Sample `n` completions per problem, pick one per scorer of `config.scorers`, write and return the report.

    The report (JSON at `config.output`): `command`, `model`, `dataset`, `settings`, `scorers`, `results` (scorer
    -> `accuracy` dict, plus `pass@N (oracle)`), `summary` (`mean_sample_accuracy`, `unparseable_gold`),
    `wall_time_s`, `samples` (`path`, `from_cache`) and `problems` (each candidate's text, extracted answer,
    correctness, token count and `score_<scorer>`, and the picks).
    """
    t0 = time.perf_counter()
    s = load_setup(config)
    samples_path = Path(config.output).with_name(Path(config.output).stem + ".samples.jsonl")
    ids, logps, from_cache = _sample(config, s, samples_path)
    t_gen = time.perf_counter() - t0  # model loading included; with cached samples, loading and reading only
    texts = s.tokenizer.batch_decode(ids, skip_special_tokens=True)
    texts_g, ids_g, logps_g = _group(texts, config.n), _group(ids, config.n), _group(logps, config.n)
    answers_g = [[extract_answer(t) for t in row] for row in texts_g]
    correct_g: list[list[bool] | None] = []
    for row, texts_row in zip(s.dataset, texts_g, strict=True):
        checks = [is_correct(t, row["answer"]) for t in texts_row]
        correct_g.append(None if any(c is None for c in checks) else [bool(c) for c in checks])

    candidates = Candidates(texts_g, ids_g, logps_g, answers_g)
    picks: dict[str, list[int | None]] = {}
    scores: dict[str, list[list[float | None]]] = {}
    for scorer in config.scorers:
        picks[scorer], values = SCORER_FUNCS[scorer](config, s, candidates)
        if values is not None:
            scores[scorer] = values

    results = {name: accuracy(correct_g, p) for name, p in picks.items()}
    pass_at_n = accuracy(correct_g, [(c.index(True) if c and True in c else None) for c in correct_g])
    mean_single = [sum(c) / len(c) for c in correct_g if c is not None]
    results[f"pass@{config.n} (oracle)"] = pass_at_n
    summary = {
        "mean_sample_accuracy": sum(mean_single) / len(mean_single) if mean_single else 0.0,
        "unparseable_gold": sum(1 for c in correct_g if c is None),
    }
    result = {
        "command": "select",
        "model": config.model,
        "dataset": f"{config.dataset}[{config.start}:{config.start + len(s.dataset)}]",
        "settings": config.settings(),
        "scorers": config.scorers,
        "results": results,
        "summary": summary,
        "wall_time_s": {"generation": t_gen, "total": time.perf_counter() - t0},
        "samples": {"path": str(samples_path), "from_cache": from_cache},
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
    write_report(config.output, result)
    return result
