"""The settings of the two GRPO tasks, as `TrlParser` dataclasses (YAML keys of `train_grpo.py`).

`MathTaskArguments` (task: math) and `SearchTaskArguments` (task: search) are parsed for every run, side by side
with the common `GRPOScriptArguments` of `procrl.scripts.train_grpo`, `FRSCallbackArguments`, `ProcessGRPOConfig`
and `ModelConfig`; the fields of the task a run does not use are ignored. Each validates only its own fields; checks
that need the task or the reward names live in `GRPOScriptArguments`.

The run's one judge: `SearchTaskArguments` extends `procrl.judges.JudgeArguments`, so its `judge*` keys are parsed
once per run and serve both users, the StepGap reward of task=search and the FRS callback
(`procrl.trainers.frs_callback`, `frs_every_n_steps` > 0) of task=math. This module imports nothing heavy (the NLI
decision rule, `procrl.rewards.stepgap.nli_rule`, is plain Python; the judge settings are a dataclass), so the
parser builds without loading either task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from procrl.judges import JudgeArguments
from procrl.rewards.stepgap.nli_rule import NLIThresholds

__all__ = ["SEARCH_TEMPLATES", "MathTaskArguments", "SearchTaskArguments", "parse_eval_set"]

SEARCH_TEMPLATES = ("search_one_shot", "one_shot", "search", "zero_shot")  # prompt_template names of task=search


def parse_eval_set(spec: str, *, with_tokens: bool = True) -> tuple[str, int, int | None, int | None]:
    """'svamp:700:850:96' -> ('svamp', 700, 850, 96): an evaluation set as name:start:end[:max_new_tokens].

    The one parser of both forms:
        with_tokens=True (task=math `eval_sets`): name[:start[:end[:max_new_tokens]]], integers; an empty `start`
            is 0, an empty `end` None (all rows), and tokens default to 256.
        with_tokens=False (FRS problems, `frs_eval_set` of `procrl.trainers.frs_callback.FRSCallbackArguments`):
            name[:start[:end]], digits only; tokens are None.

    Raises:
        ValueError: not name[:start[:end[:max_new_tokens]]], or a part that is not an integer (with_tokens=False:
            not name[:start[:end]] with digits only).

    >>> parse_eval_set("svamp:700:850:96"), parse_eval_set("gsm8k::10")
    (('svamp', 700, 850, 96), ('gsm8k', 0, 10, 256))
    >>> parse_eval_set("gsm8k:0:10", with_tokens=False), parse_eval_set("svamp", with_tokens=False)
    (('gsm8k', 0, 10, None), ('svamp', 0, None, None))
    """
    parts = spec.split(":")
    if with_tokens:
        if not 1 <= len(parts) <= 4 or not parts[0]:
            raise ValueError(f"eval set {spec!r} must look like name:start:end:max_new_tokens, e.g. svamp:700:850:96")
        integers = f"eval set {spec!r}: start, end and max_new_tokens must be integers"
    else:
        integers = f"frs_eval_set must look like name:start:end, e.g. gsm8k:0:10; got {spec!r}"
        if not 1 <= len(parts) <= 3 or not parts[0] or not all(p.isdigit() for p in parts[1:] if p):
            raise ValueError(integers)
    try:
        start = int(parts[1]) if len(parts) > 1 and parts[1] else 0
        end = int(parts[2]) if len(parts) > 2 and parts[2] else None
        tokens = (int(parts[3]) if len(parts) > 3 and parts[3] else 256) if with_tokens else None
    except ValueError as err:
        raise ValueError(integers) from err
    return parts[0], start, end, tokens


@dataclass
class MathTaskArguments:
    """Settings of `task: math`: non-built-in data columns and the greedy before/after evaluation."""

    dataset_split: str | None = field(default=None, metadata={"help": "Split for hub/local data sets."})
    question_column: str = field(default="question", metadata={"help": "Question column of non-built-in data."})
    answer_column: str = field(default="answer", metadata={"help": "Gold answer column of non-built-in data."})
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
    search_topk: int = field(default=3, metadata={"help": "task=search: passages per search (DESIGN default 3)."})
    search_max_turns: int = field(
        default=4, metadata={"help": "task=search: executed searches per episode (DESIGN default 4)."}
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
        try:
            NLIThresholds(self.stepgap_nli_entail_min, self.stepgap_nli_contradict_min)  # probabilities in (0, 1]
        except ValueError as exc:
            raise ValueError(f"stepgap_nli_entail_min / stepgap_nli_contradict_min: {exc}") from None

    @property
    def stepgap_nli_thresholds(self) -> NLIThresholds:
        """The stage D/E decision rule of `stepgap_nli_entail_min` / `stepgap_nli_contradict_min` (both None: the
        argmax)."""
        return NLIThresholds(self.stepgap_nli_entail_min, self.stepgap_nli_contradict_min)
