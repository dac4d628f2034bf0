"""GRPO with the StepGap reward on multi-hop QA (DESIGN §4 "StepGap"): the `task: search` half of `train_grpo.py`.

    python train_grpo.py --config configs/grpo/stepgap_2wiki_smollm2.yaml
    launch/grpo_stepgap.sh                                  # the same, with MODEL/JUDGE/RETRIEVER/... variables

`open_search_task(script_args, training_args)` is a context manager that builds everything the search task needs
and closes what it started (the local judge server) on exit, also when training fails:

- questions: `procrl.data_builders.corpus.load_qa_questions(dataset_name, start, end)` (columns `prompt`,
  `golden_answers`, ...), prompt = `SEARCH_PROMPT` unless `prompt_template` is a custom `{question}` template,
  after one worked search episode (`SEARCH_EXAMPLE_REPLY`) for `prompt_template: search_one_shot` (or one_shot);
- retriever: a builtin corpus name / JSONL file / saved index directory -> `BM25Index` in this process, or an
  http(s) URL -> `RetrieverClient` (Search-R1's `POST /retrieve`);
- rollouts: `ProcessRollout(env=SearchEnvironment(retriever, topk, max_turns))` (multi-turn episodes, the
  information tokens masked out of the loss by TRL through `env_mask`);
- judge: `procrl.rewards.judges.open_judge(judge, ...)` ("local" starts `transformers serve` on the default model,
  one CPU thread, bounded KV cache with continuous batching; a URL uses that server); NLI: `make_nli(nli, judge)`
  ("judge" = the judge with an NLI prompt, else a cross-encoder), memoised by `CachedNLI`;
- rewards (`reward_funcs` names): `em` = `procrl.rewards.qa.em_reward` (also the trainer's `outcome_func`, so
  `task/accuracy` is EM), `stepgap` = `StepGapReward(StepGapVerifier(judge, nli), StepGapRewardConfig(lam=λ,
  shaping=..., base_cc=0 for zero-CC))`, or dotted paths 'module.func'. R from `stepgap` already contains EM, so
  the shipped configs weight `[em, stepgap]` with `[0.0, 1.0]`: EM is logged (`rewards/em_reward/mean`) but not
  counted twice. With `advantage_mode: process | mixed`, `stepgap` becomes the trainer's `step_reward_func`
  (`StepGapStepRewards`: each step's reward on the tokens of its turn) and leaves `reward_funcs` (its
  `reward_weights` entry is dropped).

Logged per step (TRL's metric machinery; wandb with `report_to: [wandb]`): `stepgap/label_{NONE,CC,IE,MB,ERROR}`
(share of labelled steps), `stepgap/searches_per_completion`, `stepgap/format_violation_frac`,
`rewards/em_reward/mean` and `task/accuracy` (EM), `rewards/stepgap_reward/mean`.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["SEARCH_REWARDS", "SearchTask", "SearchTaskArguments", "open_retriever", "open_search_task"]

SEARCH_REWARDS = ("em", "stepgap")
MATH_ONLY_DATASETS = ("svamp", "gsm8k", "math500")
MATH_ONLY_REWARDS = ("outcome", "picsar_bonus")


SEARCH_TEMPLATES = ("search_one_shot", "one_shot", "search", "zero_shot")  # prompt_template names of task=search


@dataclass
class SearchTaskArguments:
    """Settings of `task: search` (StepGap GRPO); `GRPOScriptArguments` inherits them. Ignored for `task: math`."""

    retriever: str = field(
        default="2wiki_corpus_sample",
        metadata={
            "help": "task=search: where passages come from: a built-in corpus name (2wiki_corpus_sample), a JSONL "
            "corpus of {title, text}, a saved BM25 index directory (all bm25s in this process), or the URL of a "
            "Search-R1-style retrieval server (http://127.0.0.1:8000, POST /retrieve)."
        },
    )
    search_topk: int = field(default=3, metadata={"help": "task=search: passages per search (DESIGN default 3)."})
    search_max_turns: int = field(
        default=4, metadata={"help": "task=search: executed searches per episode (DESIGN default 4)."}
    )
    judge: str = field(
        default="local",
        metadata={
            "help": "task=search: the StepGap judge: 'local' (starts `transformers serve` on the default model, "
            "stopped at the end), 'local:<model dir>', or an OpenAI-compatible URL 'http://host:port/v1[#model]'."
        },
    )
    judge_model: str | None = field(default=None, metadata={"help": "task=search: model id for a judge URL."})
    judge_max_tokens: int = field(
        default=160, metadata={"help": "task=search: judge reply token limit (the A-C JSON needs ~100 tokens)."}
    )
    judge_timeout_s: float = field(default=600.0, metadata={"help": "task=search: per-request judge timeout (s)."})
    judge_concurrency: int = field(default=4, metadata={"help": "task=search: concurrent judge requests."})
    judge_num_threads: int = field(
        default=1, metadata={"help": "task=search, local judge: CPU threads of the server (1 avoids thrashing)."}
    )
    judge_continuous_batching: bool = field(
        default=True,
        metadata={
            "help": "task=search, local judge: `--continuous-batching` with JudgeServer's bounded KV cache (256 x 32 "
            "tokens); false = one request at a time."
        },
    )
    judge_cache_dir: str | None = field(
        default=None, metadata={"help": "task=search: judge cache directory; null = <output_dir>/judge_cache."}
    )
    nli: str = field(
        default="judge",
        metadata={
            "help": "task=search: NLI backend of stages D-E: 'judge' (the judge with an NLI prompt; offline default) "
            "or a cross-encoder path / hub id (e.g. cross-encoder/nli-deberta-v3-large; falls back to the judge "
            "when it cannot be loaded)."
        },
    )
    stepgap_lambda: float = field(
        default=1.0, metadata={"help": "task=search: λ in R = EM + λ Σ_i [base(τ_i) + shape(a_{i+1} | τ_i)]."}
    )
    stepgap_shaping: bool = field(
        default=True, metadata={"help": "task=search: add the shaping terms; false = the shaping-off control."}
    )
    stepgap_zero_cc: bool = field(
        default=False, metadata={"help": "task=search: base(CC) = 0 instead of +0.05 (the zero-CC control)."}
    )
    stepgap_format_penalty: float = field(
        default=-0.10,
        metadata={
            "help": "task=search: base reward of a malformed step (FORMAT: unclosed or empty search, an action tag "
            "inside or after the answer), replacing its label's base; must be <= 0."
        },
    )

    def __post_init__(self) -> None:
        if self.search_topk < 1 or self.search_max_turns < 0:
            raise ValueError(
                f"search_topk must be >= 1 and search_max_turns >= 0, got {self.search_topk}, {self.search_max_turns}"
            )
        if self.judge_max_tokens < 1 or self.judge_concurrency < 1 or self.judge_num_threads < 1:
            raise ValueError("judge_max_tokens, judge_concurrency and judge_num_threads must be >= 1")
        if not self.judge_timeout_s > 0:
            raise ValueError(f"judge_timeout_s must be > 0, got {self.judge_timeout_s}")
        if not math.isfinite(self.stepgap_lambda):
            raise ValueError(f"stepgap_lambda must be a finite number, got {self.stepgap_lambda}")
        if not (math.isfinite(self.stepgap_format_penalty) and self.stepgap_format_penalty <= 0):
            raise ValueError(f"stepgap_format_penalty must be finite and <= 0, got {self.stepgap_format_penalty}")
        if getattr(self, "task", "search") != "search":
            return
        dataset = getattr(self, "dataset_name", None)
        if dataset in MATH_ONLY_DATASETS:
            raise ValueError(
                f"task=search cannot train on the math set {dataset!r}: set dataset_name: 2wiki_dev_sample (or a "
                "JSONL file of {question, answer} records)."
            )
        math_rewards = [r for r in getattr(self, "reward_funcs", []) if r in MATH_ONLY_REWARDS]
        if math_rewards:
            raise ValueError(
                f"task=search cannot use the math rewards {math_rewards}: set reward_funcs: [em, stepgap] (and "
                "reward_weights: [0.0, 1.0], since the StepGap reward already contains EM)."
            )


def open_retriever(spec: str):
    """A retriever from a spec: an http(s) URL -> `RetrieverClient`; else a built-in corpus name, a JSONL corpus or
    a saved index directory -> `BM25Index` (see `procrl.data_builders.corpus.open_index`)."""
    from procrl.data_builders.corpus import RetrieverClient, open_index

    if spec.startswith(("http://", "https://")):
        return RetrieverClient(spec)
    return open_index(spec)


@dataclass
class SearchTask:
    """What `train_grpo.main` needs for `task: search`.

    Attributes:
        train_dataset: the questions (`prompt`, `question`, `golden_answers`, `id`, `type`).
        reward_funcs: TRL reward functions, in `reward_funcs` order (without `stepgap` in process/mixed mode, where
            `training_args.reward_weights` loses that entry too).
        trainer_kwargs: `rollout_func`, `outcome_func` (EM) and, in process/mixed mode, `step_reward_func`.
        judge, verifier, retriever: the live objects (for the summary).
    """

    train_dataset: Any
    reward_funcs: list
    trainer_kwargs: dict
    judge: Any
    verifier: Any
    retriever: Any

    def summary(self) -> dict:
        """Backends and judge statistics (requests, unscored, cache hits) for `summary.json`."""
        stats = getattr(self.judge, "stats", None)
        retriever = self.retriever
        return {
            "retriever": f"BM25Index({len(retriever)} passages)" if hasattr(retriever, "passages") else repr(retriever),
            "verifier": repr(self.verifier),
            "judge_stats": stats.as_dict() if stats is not None else None,
        }


@contextlib.contextmanager
def open_search_task(script_args, training_args) -> Iterator[SearchTask]:
    """Build the StepGap search task (module docstring); the judge (and a local judge server) closes on exit.

    Args:
        script_args: `GRPOScriptArguments` with `task: search`.
        training_args: `ProcessGRPOConfig` (reads `advantage_mode`, `reward_weights`, `output_dir`).

    Raises:
        ValueError: an unknown reward name, or process/mixed mode without `stepgap` in `reward_funcs`.
        FileNotFoundError: a retriever or question file that does not exist.
        RuntimeError: the local judge server did not start.
    """
    from procrl.data_builders.corpus import SEARCH_PROMPT, load_qa_questions
    from procrl.rewards.judges import open_judge
    from procrl.rewards.qa import em_reward
    from procrl.rewards.stepgap.nli import CachedNLI, make_nli
    from procrl.rewards.stepgap.reward import StepGapReward, StepGapRewardConfig, StepGapStepRewards
    from procrl.rewards.stepgap.verifier import StepGapVerifier
    from procrl.trainers.rollout import ProcessRollout
    from procrl.trainers.search_env import SearchEnvironment

    names = list(script_args.reward_funcs)
    process = getattr(training_args, "advantage_mode", "outcome") in ("process", "mixed")
    if process and "stepgap" not in names:
        raise ValueError(
            f"advantage_mode={training_args.advantage_mode!r} takes its step rewards from 'stepgap': add it to "
            "reward_funcs (it becomes the step scorer, not a scalar reward)."
        )
    template = script_args.prompt_template
    # search_one_shot / one_shot: the worked search episode first; search / zero_shot: the instruction alone
    example = template in ("search_one_shot", "one_shot")
    template = template if "{question}" in template else SEARCH_PROMPT
    dataset = load_qa_questions(
        script_args.dataset_name,
        start=script_args.dataset_start,
        end=script_args.dataset_end,
        template=template,
        example=example,
    )
    retriever = open_retriever(script_args.retriever)
    env = SearchEnvironment(retriever, topk=script_args.search_topk, max_turns=script_args.search_max_turns)

    spec = script_args.judge
    judge_kwargs: dict[str, Any] = {
        "max_tokens": script_args.judge_max_tokens,
        "timeout_s": script_args.judge_timeout_s,
    }
    if spec == "local" or spec.startswith("local:"):
        judge_kwargs |= {
            "continuous_batching": script_args.judge_continuous_batching,
            "num_threads": script_args.judge_num_threads,
        }
    if script_args.judge_model:
        judge_kwargs["model"] = script_args.judge_model
    cache_dir = script_args.judge_cache_dir or str(Path(training_args.output_dir) / "judge_cache")
    logger.info("task=search: %d questions, retriever %s, judge %s, nli %s", len(dataset), script_args.retriever,
                spec, script_args.nli)  # fmt: skip
    with open_judge(spec, cache_dir=cache_dir, max_concurrency=script_args.judge_concurrency, **judge_kwargs) as judge:
        nli = CachedNLI(make_nli(script_args.nli, judge))
        verifier = StepGapVerifier(judge, nli, progress=True)
        config = StepGapRewardConfig(
            lam=script_args.stepgap_lambda,
            shaping=script_args.stepgap_shaping,
            base_format=script_args.stepgap_format_penalty,
            **({"base_cc": 0.0} if script_args.stepgap_zero_cc else {}),
        )
        reward_funcs, weights, step_reward_func = [], [], None
        given = list(training_args.reward_weights) if training_args.reward_weights else None
        if given is not None and len(given) != len(names):
            raise ValueError(f"reward_weights {given} must have one weight per reward_funcs entry {names}.")
        for k, name in enumerate(names):
            if name == "stepgap" and process:
                step_reward_func = StepGapStepRewards(verifier, config)
                continue
            if name == "em":
                func = em_reward
            elif name == "stepgap":
                func = StepGapReward(verifier, config)
            elif "." in name or ":" in name:
                module, _, attr = name.replace(":", ".").rpartition(".")
                func = getattr(importlib.import_module(module), attr)
            else:
                raise ValueError(f"unknown search reward {name!r}: use {list(SEARCH_REWARDS)} or 'module.func'")
            reward_funcs.append(func)
            weights.append(given[k] if given is not None else 1.0)
        if not reward_funcs:
            raise ValueError("task=search needs a scalar reward besides the step scorer: add 'em' to reward_funcs.")
        if process and given is not None:  # TRL needs one weight per scalar reward function
            training_args.reward_weights = weights
            logger.info("advantage_mode=%s: 'stepgap' is the step scorer; reward_weights -> %s",
                        training_args.advantage_mode, weights)  # fmt: skip
        trainer_kwargs = {"rollout_func": ProcessRollout(env=env), "outcome_func": em_reward}
        if step_reward_func is not None:
            trainer_kwargs["step_reward_func"] = step_reward_func
        yield SearchTask(
            train_dataset=dataset,
            reward_funcs=reward_funcs,
            trainer_kwargs=trainer_kwargs,
            judge=judge,
            verifier=verifier,
            retriever=retriever,
        )
