"""The search task of `train_grpo.py` (`task: search`): GRPO with the StepGap reward on multi-hop QA (docs/architecture.md "StepGap"
"StepGap").

    python train_grpo.py --config configs/grpo/stepgap_2wiki_smollm2.yaml
    launch/grpo_stepgap.sh                                  # the same, with MODEL/JUDGE/RETRIEVER/... variables

`open_search_task(script_args, search_args, output_dir=...)` is a context manager that builds everything the task
needs and closes what it started (the local judge server) on exit, also when training fails:

- questions: `procrl.data_builders.search_qa.load_qa_questions(dataset_name, start, end)` (columns `prompt`,
  `golden_answers`, ...), prompt = `SEARCH_PROMPT` unless `prompt_template` is a custom `{question}` template,
  after one worked search episode (`SEARCH_EXAMPLE_REPLY`) for `prompt_template: search_one_shot` (or one_shot);
- retriever: a builtin corpus name / JSONL file / saved index directory -> `BM25Index` in this process, or an
  http(s) URL -> `RetrieverClient` (Search-R1's `POST /retrieve`; `procrl.data_builders.search_qa.open_retriever`);
- rollouts: `ProcessRollout(env=SearchEnvironment(retriever, topk, max_turns))` (multi-turn episodes, the
  information tokens masked out of the loss by TRL through `env_mask`);
- judge: the run's `procrl.judges.JudgeArguments` (the `judge*` keys, part of `SearchTaskArguments`), opened with
  `JudgeArguments.open` and a reply budget of `procrl.rewards.stepgap.check.JUDGE_MAX_TOKENS` (512) unless
  `judge_max_tokens` sets one ("local" starts vLLM's OpenAI server on the default model, one CPU thread, with each
  request's schema enforced and top log-probs read as probabilities, or, where vLLM cannot be imported, a
  constrained `TransformersJudge` in this process; "serve:transformers" is `transformers serve`, with continuous
  batching unless `judge_continuous_batching: false`; a URL uses that server; "none" is refused); NLI:
  `make_nli(nli, judge)` ("judge" = the judge with an NLI prompt, else a cross-encoder), memoised by `CachedNLI`;
  the verifier `StepGapVerifier(judge, nli, constrain_quotes=stepgap_constrain_quotes,
  nli_thresholds=NLIThresholds(stepgap_nli_entail_min, stepgap_nli_contradict_min))` and `reward_config = StepGapRewardConfig(lam=λ, shaping=..., base_format=...,
  base_cc=0 for zero-CC)`;
- `judge: oracle` (a generated world, `procrl world build`): no judge and no NLI; the verifier is the world's
  `procrl.rewards.stepgap.oracle.StepGapOracle` (labels from the world's facts), built from `dataset_name` (the
  world's questions.jsonl) and `retriever` (its corpus.jsonl), `procrl.data_builders.synthetic_world.
  load_world_oracle`.

The rewards are the registry's (`procrl.trainers.tasks.rewards.REWARDS`): `em` = `procrl.rewards.qa.em_reward` (also
the task's `outcome_func`, so `task/accuracy` is EM), `stepgap` = `StepGapReward(verifier, reward_config)`, and, as
`step_reward_func: stepgap` with `advantage_mode: process | mixed`, the step scorer `StepGapStepRewards(verifier,
reward_config)` (each step's reward on the tokens of its turn). R from `stepgap` already contains EM, so the shipped
configs weight `[em, stepgap]` with `[0.0, 1.0]`: EM is logged (`rewards/em_reward/mean`) but not counted twice.

Logged per step (TRL's metric machinery; wandb with `report_to: [wandb]`): `stepgap/label_{NONE,CC,IE,MB,ERROR}`
(share of labelled steps), `stepgap/searches_per_completion`, `stepgap/format_violation_frac`,
`rewards/em_reward/mean` and `task/accuracy` (EM), `rewards/stepgap_reward/mean`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procrl.data_builders.search_qa import SEARCH_PROMPT, load_qa_questions, open_retriever
from procrl.data_builders.synthetic_world import load_world_oracle
from procrl.judges.spec import open_judge_from
from procrl.rewards.qa import em_reward
from procrl.rewards.stepgap.check import JUDGE_MAX_TOKENS
from procrl.rewards.stepgap.nli import CachedNLI, make_nli
from procrl.rewards.stepgap.nli_rule import NLIThresholds
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.rewards.stepgap.reward import StepGapRewardConfig
from procrl.rewards.stepgap.verifier import StepGapVerifier
from procrl.trainers.rollout import ProcessRollout
from procrl.trainers.search_env import SearchEnvironment
from procrl.trainers.tasks.arguments import SearchTaskArguments
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["SearchTask", "open_search_task"]


@dataclass
class SearchTask:
    """An opened search task (the attributes of `procrl.trainers.tasks.GRPOTask`, plus what the StepGap rewards and
    the summary need).

    Attributes:
        train_dataset: the questions (`prompt`, `question`, `golden_answers`, `id`, `type`).
        rollout_func: `ProcessRollout(env=SearchEnvironment(...))`.
        verifier: the `StepGapVerifier` (judge + NLI), or the world's `StepGapOracle` (`judge: oracle`), the
            `stepgap` reward and step scorer label steps with.
        reward_config: their `StepGapRewardConfig`.
        judge, retriever: the live objects (for the summary; judge None with the oracle).
        outcome_func: `em_reward`; no evaluation sets and no FRS for this task.
    """

    train_dataset: Any
    rollout_func: Callable
    verifier: Any
    reward_config: StepGapRewardConfig
    judge: Any
    retriever: Any
    outcome_func: Callable = em_reward
    eval_sets: list[tuple[str, Any, int]] = field(default_factory=list)
    frs_template: str | None = None

    def summary(self) -> dict:
        """Backends and judge statistics (requests, unscored, cache hits) for the run's summary."""
        stats = getattr(self.judge, "stats", None)
        retriever = self.retriever
        return {
            "retriever": f"BM25Index({len(retriever)} passages)" if hasattr(retriever, "passages") else repr(retriever),
            "verifier": repr(self.verifier),
            "judge_stats": stats.as_dict() if stats is not None else None,
        }


@contextlib.contextmanager
def open_search_task(script_args, search_args: SearchTaskArguments, *, output_dir: str) -> Iterator[SearchTask]:
    """Build the StepGap search task (module docstring); the judge (and a local judge server) closes on exit.

    Args:
        script_args: `GRPOScriptArguments` with `task: search` (reads `dataset_name`, `dataset_start`,
            `dataset_end`, `prompt_template`).
        search_args: `SearchTaskArguments` (with the run's judge settings).
        output_dir: the run's output directory (the judge cache defaults to `<output_dir>/judge_cache`).

    Raises:
        ValueError: `judge: none`; `judge: oracle` without a generated world's questions and corpus files.
        FileNotFoundError: a retriever or question file that does not exist.
        RuntimeError: the local judge server did not start.
    """
    if not search_args.enabled:
        raise ValueError("task=search needs a judge for the StepGap labels, got judge: none; use judge: local or a URL")
    oracle = _world_oracle(script_args.dataset_name, search_args.retriever) if search_args.is_oracle else None
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
    retriever = open_retriever(search_args.retriever)
    thresholds = NLIThresholds(search_args.stepgap_nli_entail_min, search_args.stepgap_nli_contradict_min)
    env = SearchEnvironment(retriever, topk=search_args.search_topk, max_turns=search_args.search_max_turns)
    reward_config = StepGapRewardConfig(
        lam=search_args.stepgap_lambda,
        shaping=search_args.stepgap_shaping,
        base_format=search_args.stepgap_format_penalty,
        **({"base_cc": 0.0} if search_args.stepgap_zero_cc else {}),
    )
    if oracle is not None:
        logger.info(
            "task=search: %d questions, retriever %s, labels by %r", len(dataset), search_args.retriever, oracle
        )
        yield SearchTask(dataset, ProcessRollout(env=env), oracle, reward_config, judge=None, retriever=retriever)
        return

    logger.info("task=search: %d questions, retriever %s, judge %s, nli %s (%s), quotes %s", len(dataset),
                search_args.retriever, search_args.judge, search_args.nli, thresholds,
                "constrained" if search_args.stepgap_constrain_quotes else "free")  # fmt: skip
    with open_judge_from(search_args, output_dir=output_dir, default_max_tokens=JUDGE_MAX_TOKENS) as judge:
        nli = CachedNLI(make_nli(search_args.nli, judge))
        yield SearchTask(
            train_dataset=dataset,
            rollout_func=ProcessRollout(env=env),
            verifier=StepGapVerifier(
                judge,
                nli,
                constrain_quotes=search_args.stepgap_constrain_quotes,
                nli_thresholds=thresholds,
                progress=True,
            ),
            reward_config=reward_config,
            judge=judge,
            retriever=retriever,
        )


def _world_oracle(questions: str, corpus: str) -> StepGapOracle:
    """The StepGap oracle of a generated world from its question and corpus files (`judge: oracle`).

    Raises:
        ValueError: either is not a file (a built-in name, a URL, an index directory), or the corpus has no facts.
    """
    if not (Path(questions).is_file() and Path(corpus).is_file()):
        raise ValueError(
            "judge: oracle labels StepGap steps from a generated world's facts: set dataset_name and retriever to the "
            "world's questions.jsonl and corpus.jsonl (procrl world build --out data/world0 writes "
            f"data/world0/train/questions.jsonl and corpus.jsonl), got {questions!r} and {corpus!r}"
        )
    return load_world_oracle(questions, corpus)
