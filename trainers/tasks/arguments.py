"""The settings of the GRPO job, as `TrlParser` dataclasses (YAML keys of `train_grpo.py`).

`GRPOScriptArguments` (task, data, prompt, rewards: common to both tasks), `MathTaskArguments` (task: math) and
`SearchTaskArguments` (task: search) are parsed for every run, side by side with `FRSCallbackArguments`,
`ProcessGRPOConfig` and `ModelConfig` (the bundle is `procrl.trainers.tasks.job.GRPOJob`); the fields of the task
a run does not use are ignored. Each validates only its own fields; checks that need the task or the reward names
live in `GRPOScriptArguments`, the ones across dataclasses in `GRPOJob`. The parser builds without loading either
task or any library reward (the reward registry holds import paths); the import paths of a run's own rewards are
imported when its settings are parsed, so one that does not resolve is an error before any model loads.

The run's one judge: `SearchTaskArguments` extends `procrl.judges.JudgeArguments`, so its `judge*` keys are parsed
once per run and serve both users, the StepGap reward of task=search and the FRS callback
(`procrl.trainers.frs_callback`, `frs_every_n_steps` > 0) of task=math.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from procrl.data_builders.arguments import DataColumnArguments, ProblemSliceArguments
from procrl.data_builders.datasets import BUILTIN_DATASETS, parse_eval_set
from procrl.evals.frs.arguments import FRSArguments
from procrl.judges import JudgeArguments
from procrl.rewards.outcome import ANSWER_EXTRACTION_MODES
from procrl.trainers.tasks.rewards import PUM_REWARDS, check_reward_names, split_placebo

__all__ = [
    "SEARCH_TEMPLATES",
    "FRSCallbackArguments",
    "TASKS",
    "GRPOScriptArguments",
    "MathTaskArguments",
    "SearchTaskArguments",
]

SEARCH_TEMPLATES = ("search_one_shot", "one_shot", "search", "zero_shot")  # prompt_template names of task=search
# task name -> the opener of its task module (`procrl.trainers.tasks.math` / `.search`), imported when a run uses it
TASKS = {"math": "procrl.trainers.tasks.math:open_math_task", "search": "procrl.trainers.tasks.search:open_search_task"}


@dataclass
class GRPOScriptArguments(ProblemSliceArguments):
    """What to train on and which rewards to use, common to both tasks (the task's own settings are
    `MathTaskArguments` / `SearchTaskArguments`; `ProcessGRPOConfig` holds the optimisation). The data fields
    (`dataset_name`, `dataset_start`, `dataset_end`, `prompt_template`) are `ProblemSliceArguments`'.

    Raises:
        ValueError: an unknown task, a prompt template or data set the task cannot use, an unknown
            answer_extraction, reward names as `procrl.trainers.tasks.rewards.check_reward_names` refuses them (an
            import path that does not resolve among them), PUM rewards without pum_model, a bad row range.
    """

    task: str = field(
        default="math",
        metadata={
            "help": "'math' (single-turn math problems, math rewards, before/after evaluation) or 'search' "
            "(multi-hop QA with <search> episodes and the StepGap reward; dataset_name is then a QA set such as "
            "2wiki_dev_sample, reward_funcs names em / stepgap, and the math evaluation is skipped)."
        },
    )
    prompt_template: str = field(
        default="one_shot",
        metadata={
            "help": "'one_shot' (ends answers with 'The answer is N'), 'zero_shot', or a template with {question}. "
            "task=search: 'search_one_shot' (or one_shot: the search instruction after one worked search episode), "
            "'search' (or zero_shot: the instruction alone), or a template with {question}."
        },
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["outcome", "picsar_bonus"],
        metadata={
            "help": "Scalar rewards, one reward_weights entry each: registry names (task=math: outcome, picsar_bonus; "
            "pum, pum_min, pum_last with pum_model; oracle_process (ProcessAcc) and oracle (ProcessAcc minus "
            "oracle_penalty after an error) on data with gold_steps; task=search: em, stepgap) or import paths "
            "'package.module:name' of your own TRL reward functions f(prompts, completions, **kwargs) -> "
            "list[float | None]. Prefix any name with 'shuffled:' for its placebo (the same values shuffled within the "
            "batch, procrl.rewards.placebo), e.g. [outcome, 'shuffled:pum']."
        },
    )
    step_reward_func: str | None = field(
        default=None,
        metadata={
            "help": "The step scorer behind the process advantages of advantage_mode process / mixed (required there, "
            "refused with outcome): 'pum' (task=math, per-step PUM increments; needs pum_model), 'oracle' "
            "(task=math on data with gold_steps: bounded per-step oracle rewards), 'stepgap' (task=search) or an "
            "import path 'package.module:name' of your own f(prompts, completions, completion_ids, **kwargs) -> "
            "list[procrl.step_rewards.StepRewards | None]. Not a scalar reward: it has no reward_weights entry. 'shuffled:<name>' is its placebo (the batch's step values shuffled)."
        },
    )
    placebo_seed: int = field(
        default=0, metadata={"help": "Seed of the permutations of the 'shuffled:' placebo rewards (reproducible runs)."}
    )
    answer_extraction: str = field(
        default="strict",
        metadata={
            "help": "How the outcome reward (and task/accuracy, the before/after evaluation) finds a completion's final "
            "answer: 'strict' (an explicit marker: the last \\boxed{}, 'The answer is ...' or '#### ...'; a sound "
            "default for RL rewards, since a policy could learn to spray numbers) or 'flexible' (also the last number "
            "of the final sentence, e.g. 'The total is $9{,}500$.'). The reward is then named outcome_reward_flexible "
            "and completions without an answer are logged as task/no_answer_<mode>."
        },
    )
    pum_model: str | None = field(
        default=None,
        metadata={
            "help": "Prefix Utility Model for the pum* rewards and the pum step scorer: a train_pum.py output directory "
            "(full checkpoint or LoRA adapter with its score head). Scores U(x, y) of the problem (`question` column) "
            "and the completion."
        },
    )
    pum_batch_size: int = field(default=16, metadata={"help": "Inputs per PUM forward pass."})
    oracle_penalty: float = field(
        default=0.5,
        metadata={
            "help": "The oracle reward and step scorer (not oracle_process): what the first wrong or ungrounded "
            "step costs (>= 0); the oracle reward is ProcessAcc - oracle_penalty * [an error], in "
            "[-oracle_penalty, 1]."
        },
    )
    picsar_evaluator: str | None = field(
        default=None, metadata={"help": "Model for PiCSAR's answer term; null = the live policy."}
    )
    picsar_normalize: str = field(
        default="mean", metadata={"help": "PiCSAR bonus: 'mean' (per-token mean of each term) or 'sum'."}
    )

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} must be one of {tuple(TASKS)} (e.g. task: search for StepGap)")
        search = self.task == "search"
        if search and "{question}" not in self.prompt_template and self.prompt_template not in SEARCH_TEMPLATES:
            raise ValueError(
                f"task=search: prompt_template={self.prompt_template!r} is not one of {SEARCH_TEMPLATES} and has "
                "no {question} placeholder; use search_one_shot (the StepGap configs' default) or a template."
            )
        if self.answer_extraction not in ANSWER_EXTRACTION_MODES:
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} must be one of {ANSWER_EXTRACTION_MODES}: use "
                "answer_extraction: strict (the default: boxed / 'The answer is' / '####' answers only) or "
                "answer_extraction: flexible (also the last number of the final sentence)."
            )
        if search and self.answer_extraction != "strict":
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} has no effect with task=search: its reward (EM) compares "
                "normalised answer strings and never extracts numbers. Remove answer_extraction from the config (or set "
                "answer_extraction: strict), or use task: math."
            )
        if search and self.dataset_name in BUILTIN_DATASETS:
            raise ValueError(
                f"task=search cannot train on the math set {self.dataset_name!r}: set dataset_name: 2wiki_dev_sample "
                "(or a JSONL file of {question, answer} records)."
            )
        if self.picsar_normalize not in ("mean", "sum"):
            raise ValueError(f"picsar_normalize must be 'mean' or 'sum', got {self.picsar_normalize!r}")
        if not self.oracle_penalty >= 0:
            raise ValueError(f"oracle_penalty must be >= 0 (0 = no penalty for errors), got {self.oracle_penalty}")
        if self.pum_batch_size < 1:
            raise ValueError(f"pum_batch_size must be >= 1, got {self.pum_batch_size}")
        super().__post_init__()  # the row range
        check_reward_names(self.task, self.reward_funcs, self.step_reward_func)
        names = [split_placebo(name)[0] for name in [*self.reward_funcs, self.step_reward_func] if name is not None]
        uses_pum = [name for name in names if name in PUM_REWARDS]
        if uses_pum and not self.pum_model:
            raise ValueError(
                f"the PUM rewards {uses_pum} need a Prefix Utility Model: set pum_model to a train_pum.py output "
                "directory (accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml)."
            )


@dataclass
class MathTaskArguments(DataColumnArguments):
    """Settings of `task: math`: non-built-in data columns (`DataColumnArguments`: `dataset_split`,
    `question_column`, `answer_column`) and the greedy before/after evaluation."""

    eval_sets: list[str] = field(
        default_factory=lambda: ["svamp:700:850:96", "gsm8k:0:50:256"],
        metadata={"help": "Evaluation sets as name:start:end:max_new_tokens (greedy), run before and after training."},
    )
    eval_batch_size: int = field(default=32, metadata={"help": "Prompts per generate call in evaluation."})
    run_eval: bool = field(
        default=True,
        metadata={"help": "Evaluate before and after training (task=math; task=search has no such evaluation)."},
    )

    def __post_init__(self) -> None:
        for spec in self.eval_sets:
            parse_eval_set(spec)
        if self.eval_batch_size < 1:
            raise ValueError(f"eval_batch_size must be >= 1 (e.g. eval_batch_size: 32), got {self.eval_batch_size}")


@dataclass
class SearchTaskArguments(JudgeArguments):
    """Settings of `task: search` (StepGap GRPO): the run's judge (`JudgeArguments`, first: `judge`, `judge_model`,
    `judge_max_tokens` (null = `procrl.rewards.stepgap.check.JUDGE_MAX_TOKENS`, 512), ...; also the FRS judge of
    task=math), then retriever, search episodes, NLI and the StepGap reward."""

    retriever: str = field(
        default="2wiki_corpus_sample",
        metadata={
            "help": "task=search: where passages come from: a built-in corpus name (2wiki_corpus_sample), a JSONL "
            "corpus of {title, text}, a saved BM25 index directory (all bm25s in this process), or the URL of a "
            "Search-R1-style retrieval server (http://127.0.0.1:8000, POST /retrieve)."
        },
    )
    search_topk: int = field(
        default=3, metadata={"help": "task=search: passages per search (docs/architecture.md 'Retrieval' default 3)."}
    )
    search_max_turns: int = field(
        default=4,
        metadata={"help": "task=search: executed searches per episode (docs/architecture.md 'Retrieval' default 4)."},
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
    stepgap_constrain_quotes: bool = field(
        default=True,
        metadata={
            "help": "task=search: stage C's quote is a choice among the step's 5-20-word evidence spans (each step's "
            "schema; verbatim by construction on a judge that enforces it); false = a free quote, kept only if it "
            "occurs in the evidence."
        },
    )
    stepgap_nli_entail_min: float | None = field(
        default=None,
        metadata={
            "help": "task=search: stages D/E count a step as entailed only if P(entailment) >= this probability, "
            "in (0, 1]; null = the NLI argmax."
        },
    )
    stepgap_nli_contradict_min: float | None = field(
        default=None,
        metadata={
            "help": "task=search: stages D/E count a step as contradicted only if P(contradiction) >= this "
            "probability, in (0, 1] (else neutral); null = the NLI argmax."
        },
    )
    stepgap_format_penalty: float = field(
        default=-0.10,
        metadata={
            "help": "task=search: base reward of a malformed step (FORMAT: unclosed or empty search, an action tag "
            "inside or after the answer), replacing its label's base; must be <= 0."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # the judge settings
        if self.search_topk < 1 or self.search_max_turns < 0:
            raise ValueError(
                f"search_topk must be >= 1 and search_max_turns >= 0, got {self.search_topk}, {self.search_max_turns}"
            )
        if not math.isfinite(self.stepgap_lambda):
            raise ValueError(f"stepgap_lambda must be a finite number, got {self.stepgap_lambda}")
        if not (math.isfinite(self.stepgap_format_penalty) and self.stepgap_format_penalty <= 0):
            raise ValueError(f"stepgap_format_penalty must be finite and <= 0, got {self.stepgap_format_penalty}")
        # the range `procrl.rewards.stepgap.nli_rule.NLIThresholds` accepts (the search task builds it from these),
        # checked here so that parsing loads no StepGap code
        for name in ("stepgap_nli_entail_min", "stepgap_nli_contradict_min"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1
            ):
                raise ValueError(f"{name}={value!r} must be a probability in (0, 1], or null for the NLI argmax")


@dataclass
class FRSCallbackArguments(FRSArguments):
    """FRS during GRPO training (YAML keys of `train_grpo.py`): the FRS settings (`FRSArguments`, CPU-sized
    `frs_traces`) and when, on what and how the callback samples; off unless `frs_every_n_steps` > 0."""

    frs_traces: int = field(
        default=4, metadata={"help": "FRS traces sampled per problem (CPU-sized default; the paper uses 16)."}
    )
    frs_every_n_steps: int = field(
        default=0, metadata={"help": "Log FRS of the policy every N optimizer steps (and after the last one); 0 = off."}
    )
    frs_eval_set: str = field(
        default="gsm8k:0:10", metadata={"help": "FRS problems as name:start:end (a built-in set or a data file)."}
    )
    frs_max_new_tokens: int | None = field(
        default=None, metadata={"help": "Tokens per FRS trace; null = GRPO's max_completion_length."}
    )
    frs_temperature: float | None = field(
        default=None, metadata={"help": "FRS sampling temperature; null = GRPO's temperature."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.frs_every_n_steps < 0:
            raise ValueError(f"frs_every_n_steps must be >= 0 (0 = off), got {self.frs_every_n_steps}")
        parse_eval_set(self.frs_eval_set, with_tokens=False)  # validates name:start:end
        if self.frs_max_new_tokens is not None and self.frs_max_new_tokens < 1:
            raise ValueError(f"frs_max_new_tokens must be >= 1 (null = GRPO's), got {self.frs_max_new_tokens}")
        if self.frs_temperature is not None and not self.frs_temperature > 0:
            raise ValueError(f"frs_temperature must be > 0 (null = GRPO's), got {self.frs_temperature}")
