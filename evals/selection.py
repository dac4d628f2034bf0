"""Best-of-N selection with a PUM, PiCSAR, majority vote or a random pick (the library of `procrl select`).

`run_select` samples `n` completions per problem with the policy (a `procrl.generation` rollout engine:
`generation_backend` auto = vLLM wherever it imports, else transformers; the sampler's raw log-probs kept for
PiCSAR), picks one per scorer and reports the accuracy of the picked completions
(docs/architecture.md "PUM" Best-of-N, "PiCSAR" best-of-N). The scorers (`SCORERS`; `procrl.evals.selection_scorers`):

- `pum`: argmax_i U(x, y_i) (the PUM's utility of the full completion, trailing EOS stripped);
- `pum_min`, `pum_last`, `pum_mean`: argmax of the min / last / mean over the step prefixes' utilities U(x, p_k)
  (one step-scoring pass per completion shared by the three, steps split as `PUMReward`'s "min"/"last" modes
  split them; a completion the PUM cannot score fully, e.g. longer than its budget, is never picked);
- `picsar`: argmax of the unnormalised PiCSAR sum log p(r|x) + log p(y|a,x,r) (the paper's selection score);
  `picsar_reasoning` and `picsar_answer`: argmax of one term alone (the same PiCSAR pass). The reasoning term is
  the sampler's log-probs, the answer term is teacher-forced by the policy itself or by `picsar_evaluator` (the
  paper's decoupled evaluator; its input: `picsar_instruction`, `picsar_separator`, `picsar_join_space`);
  completions without an extractable answer are never picked;
- `mean_logprob`: argmax of the mean raw log-prob per token of the completion (the sampler's; the length-normalised
  likelihood baseline); `self_certainty`: argmax of the mean over its tokens of KL(U || p_t), the policy's
  next-token distribution's divergence from uniform (Kang et al. 2025, arXiv 2502.18581; one teacher-forced pass);
- `majority`: the most frequent extracted answer, equal answers counted together as the outcome check grades them
  ("0.5" = "1/2"; ties: the answer that appears first); its first completion;
- `random`: one completion drawn with `random.Random(f"{seed}:{problem_id}")` (reproducible per problem).

Several scorers select from the SAME samples; a score pass writes all its columns (`score_<column>` per candidate:
`picsar` also writes `score_picsar_reasoning` and `score_picsar_answer`). Ties always go to the earliest candidate.
The result also holds pass@N (some sample is correct: the ceiling of any selector) and the mean accuracy of one
sample; with `greedy`, also one greedy decode per problem (temperature 0, same prompt and token budget) and its
accuracy (row `greedy`). The samples (token ids and log-probs) go through procrl's sample store
(`procrl.data_builders.rollouts.run_rollouts`: content-addressed shards in `cache/` in `output_dir`,
`store_dir`; the result lists its shard files): a rerun with the same model, engine (`RolloutEngine.cache_key()`: a vLLM sample
is never reused as a transformers one), prompts and sampling settings (e.g. with another scorer, once a PUM is
trained) reads them instead of sampling, and a killed run resumes from
its finished shards. The greedy decodes are stored likewise (keyed without the sampling-only settings `n`,
`temperature`, `top_p`, `seed`). With `ks`, `procrl select` also computes the best-of-k curves of
every method from the same samples (`procrl.evals.bestofn`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, run_rollouts
from procrl.evals.bestofn import parse_contrasts, parse_ks
from procrl.evals.offline import OfflineConfig, Setup, accuracy, load_setup, sampling_params
from procrl.evals.selection_scorers import (
    SCORE_PASSES,
    SCORERS,
    Candidates,
    ScoringContext,
    _group,
    pass_of,
    score_candidates,
    select_argmax,
    select_majority,
    select_random,
)
from procrl.evals.stats import ratio
from procrl.generation import SamplingParams, derive_seed
from procrl.rewards.outcome import extract_answer, is_correct
from procrl.rewards.picsar import DEFAULT_INSTRUCTION, DEFAULT_SEPARATOR
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "SCORERS",
    "Candidates",
    "SelectConfig",
    "read_select_run",
    "run_select",
    "select_argmax",
    "select_majority",
    "select_random",
    "store_dir",
]


@dataclass
class SelectConfig(OfflineConfig):
    """Settings of `procrl select` (parsed by `TrlParser` in `procrl/scripts/select.py`).

    Raises:
        ValueError: (on construction) a scorer not in `SCORERS` or given twice, no scorer, `n` < 1, a PUM scorer
            (pum, pum_min, pum_last, pum_mean) without a `pum` directory, a `picsar_evaluator` that is empty or
            without a PiCSAR scorer (picsar, picsar_reasoning, picsar_answer) to use it, a PiCSAR setting
            (`picsar_instruction`, `picsar_separator`, `picsar_join_space`) changed without a PiCSAR scorer, `ks`
            that are not integers in [1, n], `subsets` or `resamples` < 1, or a bad shared setting (`OfflineConfig`).
    """

    scorer: str = field(default="pum", metadata={"help": f"one or more of {', '.join(SCORERS)} (comma-separated)"})
    n: int = field(default=8, metadata={"help": "samples per problem (N of best-of-N)"})
    picsar_evaluator: str | None = field(
        default=None,
        metadata={
            "help": "model that teacher-forces PiCSAR's answer term log p(y|a,x,r), a name or path like --model "
            "(e.g. gemma3-270m); None = the policy itself. The samples and the reasoning term stay the policy's"
        },
    )
    picsar_instruction: str = field(
        default=DEFAULT_INSTRUCTION,
        metadata={
            "help": "instruction a before the problem in PiCSAR's answer-term input; '' = the problem alone (for a "
            "policy whose vocabulary lacks these words, e.g. the arith organism)"
        },
    )
    picsar_separator: str = field(
        default=DEFAULT_SEPARATOR,
        metadata={"help": "text between the reasoning and the answer in PiCSAR's answer-term input"},
    )
    picsar_join_space: bool = field(
        default=False,
        metadata={
            "help": "score the separator's trailing whitespace with the answer (' 42', not ' ' then '42'): for a "
            "tokenizer whose tokens carry their leading space, e.g. the arith organism's"
        },
    )
    greedy: bool = field(
        default=False,
        metadata={
            "help": "also decode every problem once greedily (temperature 0, same prompt and --max-new-tokens): "
            "a `greedy` entry per problem and a `greedy` accuracy row; stored in the sample store like the samples"
        },
    )
    ks: str = field(
        default="",
        metadata={
            "help": "best-of-k curves of every selection method from the same samples at these k (comma-separated, "
            "each <= --n, e.g. 1,2,4,8): table.md, curves.png and the bestofn/* metrics; empty: no curves"
        },
    )
    contrasts: str = field(
        default="",
        metadata={
            "help": "paired differences of best-of-k curve points, METHOD@K-METHOD@K comma-separated (e.g. "
            "picsar@6-majority@16: PiCSAR on 6 samples against self-consistency on 16); each k one of --ks"
        },
    )
    subsets: int = field(
        default=64, metadata={"help": "random k-subsets per problem for each k < n of --ks (the same for every method)"}
    )
    resamples: int = field(default=1000, metadata={"help": "bootstrap resamples of the curves' 95%% intervals"})
    output_dir: str = field(
        default="outputs/select",
        metadata={"help": "where run.json, problems.jsonl, the samples cache and (with --ks) table.md, curves.png go"},
    )

    @property
    def k_list(self) -> list[int]:
        """`ks` as sorted distinct integers (empty: no curves)."""
        return parse_ks(self.ks)

    @property
    def scorers(self) -> list[str]:
        """The comma-separated `scorer` as a list, in the given order."""
        return [s.strip() for s in self.scorer.split(",") if s.strip()]

    def problems(self) -> list[str]:
        problems = super().problems()
        scorers = self.scorers
        bad = [s for s in scorers if s not in SCORERS]
        if bad:
            problems.append(f"unknown scorer(s) {bad}; choose from {', '.join(SCORERS)} (e.g. --scorer pum,majority)")
        elif not scorers:
            problems.append(f"--scorer is empty; give one or more of {', '.join(SCORERS)} (comma-separated)")
        twice = sorted({s for s in scorers if scorers.count(s) > 1})
        if twice:
            problems.append(f"--scorer names {twice} more than once; give each scorer once")
        if self.n < 1:
            problems.append(f"--n must be >= 1 (samples per problem), got {self.n}")
        try:
            if self.k_list and self.k_list[-1] > self.n:
                small = ",".join(str(k) for k in self.k_list if k <= self.n) or "1"
                problems.append(f"--ks {self.ks}: k = {self.k_list[-1]} > --n {self.n} samples (e.g. --ks {small})")
        except ValueError as error:
            problems.append(str(error))
        try:
            methods = {"random", "majority", "longest", "pass@k", *(["greedy"] if self.greedy else [])}
            for s in scorers:
                if s in SCORERS and (name := pass_of(s)) is not None:
                    methods |= set(SCORE_PASSES[name][0])  # a pass writes all its columns
                methods |= {s}
            for a, ka, b, kb in parse_contrasts(self.contrasts):
                missing = [k for k in (ka, kb) if k not in self.k_list]
                if missing:
                    problems.append(f"--contrasts {a}@{ka}-{b}@{kb}: k = {missing[0]} is not one of --ks {self.ks!r}")
                if unknown := [m for m in (a, b) if m not in methods]:
                    problems.append(
                        f"--contrasts {a}@{ka}-{b}@{kb}: no method {unknown[0]!r} in this run (it has "
                        f"{', '.join(sorted(methods))})"
                    )
        except (ValueError, KeyError) as error:
            problems.append(str(error))
        if self.subsets < 1 or self.resamples < 1:
            problems.append(f"--subsets ({self.subsets}) and --resamples ({self.resamples}) must be >= 1")
        known = [s for s in scorers if s in SCORERS]
        needs_pum = [s for s in known if pass_of(s) in ("pum", "pum_steps")]
        if needs_pum and not self.pum:
            problems.append(f"--scorer {','.join(needs_pum)} needs --pum PATH (a train_pum.py output directory)")
        changed = [
            f"--{name.replace('_', '-')}"
            for name, default in (
                ("picsar_instruction", DEFAULT_INSTRUCTION),
                ("picsar_separator", DEFAULT_SEPARATOR),
                ("picsar_join_space", False),
            )
            if getattr(self, name) != default
        ]
        if changed and not any(pass_of(s) == "picsar" for s in known):
            problems.append(
                f"{', '.join(changed)} only change the PiCSAR scorers; add one of picsar, picsar_reasoning, "
                "picsar_answer to --scorer, or drop them"
            )
        if self.picsar_evaluator is not None:
            if not self.picsar_evaluator.strip():
                problems.append(
                    "--picsar-evaluator is empty; give a model name or path (e.g. gemma3-270m), or leave it out to "
                    "let the policy evaluate"
                )
            elif not any(pass_of(s) == "picsar" for s in known):
                problems.append(
                    f"--picsar-evaluator {self.picsar_evaluator} is only used by the PiCSAR scorers; add one of "
                    "picsar, picsar_reasoning, picsar_answer to --scorer, or drop --picsar-evaluator"
                )
        return problems


# ----------------------------------------------------------------------------------------------------------
# The samples: procrl's sample store (`procrl.data_builders.rollouts`)
# ----------------------------------------------------------------------------------------------------------


RUN_FILE = "run.json"  # the run record procrl.experiment.tracking writes (a layer above: named here to read it)
PROBLEMS_FILE = "problems.jsonl"  # `procrl select`'s per-problem rows beside it (TrackedRun.write_rows("problems"))


def store_dir(output_dir: str | Path) -> Path:
    """The sample store of a select run: `cache/` in its output directory (content-addressed rollout shards).

    >>> store_dir("outputs/select").as_posix()
    'outputs/select/cache'
    """
    return Path(output_dir) / "cache"


def read_select_run(directory: str | Path) -> dict:
    """The result of the `procrl select` run in `directory` (its run.json's `result`) with its `problems` read back
    from `problems.jsonl` beside it: what `run_select` returned. For reusing a run's samples (`procrl frs
    --traces-from`); the samples are in `store_dir(directory)`, the shard files the result's `samples.files` lists.

    Raises:
        ValueError: no readable run.json, a run of another command or one that did not finish, or no readable
            problems.jsonl (the message says to give the directory `procrl select --output-dir` wrote).
    """
    directory = Path(directory)
    record_path = directory / RUN_FILE
    try:
        record = json.loads(record_path.read_text())
        if record.get("command") != "select" or record.get("status") != "finished":
            raise ValueError(f"a {record.get('status')} {record.get('command')!r} run, not a finished select run")
        result = dict(record["result"])
        with (directory / PROBLEMS_FILE).open() as handle:
            result["problems"] = [json.loads(line) for line in handle]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(
            f"{directory}: not a readable `procrl select` run ({err}); give the directory `procrl select "
            "--output-dir` wrote (run.json, problems.jsonl, cache/)"
        ) from None
    return result


# ----------------------------------------------------------------------------------------------------------
# procrl select
# ----------------------------------------------------------------------------------------------------------


def _decode(
    config: SelectConfig, s: Setup, prompts: list[list[int]], n: int, params: SamplingParams, seed: tuple[int, str],
    what: str,
) -> tuple[list, list, RolloutStats]:  # fmt: skip
    """(ids, log-probs, what the store did) of `n` decodes of each of `prompts` (problem-major): run through the
    sample store (`run_rollouts`, `store_dir(config.output_dir)`) in shards of `batch_size` rows, shard c sampled by one
    `s.engine.generate` call seeded with `derive_seed(*seed, c)`; a shard already in the store (same engine, rows,
    settings and seed) is read instead."""
    requests = [RolloutRequest(str(p), ids, n) for p, ids in enumerate(prompts)]
    stats = RolloutStats()
    results = run_rollouts(
        s.engine, requests, params, seed=seed[0], cache_dir=store_dir(config.output_dir), shard_size=config.batch_size,
        desc=what, stats=stats, shard_seed=lambda c: derive_seed(*seed, c), progress=not config.no_progress,
    )  # fmt: skip
    rollouts = [r for request in requests for r in results[request.key]]
    if not stats.generated_rows:
        logger.info(
            "select: all %d %s read from the sample store %s", len(rollouts), what, store_dir(config.output_dir)
        )
    return [r.token_ids for r in rollouts], [r.logprobs for r in rollouts], stats


def _sample(config: SelectConfig, s: Setup) -> tuple[list, list, RolloutStats]:
    """(ids, log-probs, what the store did) of the `n` samples of every problem, problem-major: shards of
    `batch_size` rows, shard c seeded with `derive_seed(seed, "select", c)`."""
    params = sampling_params(config, config.max_new_tokens)
    return _decode(config, s, s.prompt_ids, config.n, params, (config.seed, "select"), "samples")


def _greedy(config: SelectConfig, s: Setup) -> tuple[list[list[int]], RolloutStats]:
    """(ids, what the store did) of one greedy decode per problem (temperature 0, the same prompt and
    `max_new_tokens` as the samples, seeds `derive_seed(0, "select-greedy", c)`: reused across `n`, `temperature`,
    `top_p` and `seed`)."""
    params = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=config.max_new_tokens)
    ids, _, stats = _decode(config, s, s.prompt_ids, 1, params, (0, "select-greedy"), "greedy decodes")
    return ids, stats


def _greedy_entries(s: Setup, ids: list[list[int]]) -> list[dict]:
    """Each problem's greedy decode as `{"text", "extracted", "correct"}` (correct: None for an unparseable gold)."""
    texts = s.tokenizer.batch_decode(ids, skip_special_tokens=True)
    entries = []
    for row, text in zip(s.dataset, texts, strict=True):
        check = is_correct(text, row["answer"])
        entries.append(
            {"text": text, "extracted": extract_answer(text), "correct": None if check is None else bool(check)}
        )
    return entries


def run_select(config: SelectConfig) -> dict:
    """Sample `n` completions per problem, pick one per scorer of `config.scorers`; returns the result.

    The result (json-safe; `procrl select` keeps it in run.json, the `problems` in problems.jsonl): `command`,
    `model`, `dataset`, `settings` (every field, e.g.
    `picsar_evaluator`), `scorers`, `results` (scorer -> `accuracy` dict; `greedy` with `config.greedy`; plus
    `pass@N (oracle)`), `summary` (`mean_sample_accuracy`, None without a parseable gold; `unparseable_gold`),
    `wall_time_s`, `samples` (`cache_dir`: the sample store, `engine`: its cache key, `files`: the shard files of
    the samples in it, `from_cache`: nothing sampled; with greedy also `greedy_files`, `greedy_from_cache`) and
    `problems` (each candidate's text, extracted answer, correctness, token count and `score_<column>` for every
    column of the score passes run, the picks, and with greedy a `greedy` entry `{"text", "extracted", "correct"}`).
    """
    t0 = time.perf_counter()
    s = load_setup(config)
    ids, logps, stats = _sample(config, s)
    t_gen = time.perf_counter() - t0  # model loading included; with stored samples, loading and reading only
    greedy: list[dict] | None = None
    samples_info: dict = {
        "cache_dir": str(store_dir(config.output_dir)),
        "engine": s.engine.cache_key(),
        "files": [Path(f).name for f in stats.files],
        "from_cache": stats.generated_rows == 0,
    }
    if config.greedy:
        greedy_ids, greedy_stats = _greedy(config, s)
        greedy = _greedy_entries(s, greedy_ids)
        samples_info |= {
            "greedy_files": [Path(f).name for f in greedy_stats.files],
            "greedy_from_cache": greedy_stats.generated_rows == 0,
        }
    t_greedy = time.perf_counter() - t0 - t_gen
    texts = s.tokenizer.batch_decode(ids, skip_special_tokens=True)
    texts_g, ids_g, logps_g = _group(texts, config.n), _group(ids, config.n), _group(logps, config.n)
    answers_g = [[extract_answer(t) for t in row] for row in texts_g]
    correct_g: list[list[bool] | None] = []
    for row, texts_row in zip(s.dataset, texts_g, strict=True):
        checks = [is_correct(t, row["answer"]) for t in texts_row]
        correct_g.append(None if any(c is None for c in checks) else [bool(c) for c in checks])

    ctx = ScoringContext(config, s, Candidates(texts_g, ids_g, logps_g, answers_g))
    picks, scores = score_candidates(ctx, config.scorers)

    results = {name: accuracy(correct_g, p) for name, p in picks.items()}
    if greedy is not None:
        results["greedy"] = accuracy(
            [None if c is None else [g["correct"]] for g, c in zip(greedy, correct_g, strict=True)], [0] * len(greedy)
        )
    pass_at_n = accuracy(correct_g, [(c.index(True) if c and True in c else None) for c in correct_g])
    mean_single = [sum(c) / len(c) for c in correct_g if c is not None]
    results[f"pass@{config.n} (oracle)"] = pass_at_n
    summary = {
        "mean_sample_accuracy": ratio(sum(mean_single), len(mean_single)),  # None: no parseable gold
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
        "wall_time_s": {"generation": t_gen, "greedy": t_greedy, "total": time.perf_counter() - t0},
        "samples": samples_info,
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
                **({} if greedy is None else {"greedy": greedy[p]}),
            }
            for p, (row, c) in enumerate(zip(s.dataset, correct_g, strict=True))
        ],
    }
    return result
