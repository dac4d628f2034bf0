"""The data settings the training commands share, as `TrlParser` dataclasses (YAML keys): which rows of a math problem
set (`procrl.data_builders.datasets.load_math_dataset`) and how they are prompted.

`ProblemSliceArguments` (`dataset_name`, `dataset_start`, `dataset_end`, `prompt_template`) is the base of
`train_grpo.py`'s `GRPOScriptArguments` and of `procrl sft`'s `SFTScriptArguments`; `DataColumnArguments`
(`dataset_split`, `question_column`, `answer_column`) the base of `train_grpo.py`'s `MathTaskArguments` and of
`SFTScriptArguments`. A command that needs another default or help text redeclares the field (a dataclass keeps a
redeclared field where its base put it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DataColumnArguments", "ProblemSliceArguments"]


@dataclass
class ProblemSliceArguments:
    """The training problems: a set `load_math_dataset` loads, its rows `[dataset_start, dataset_end)` and the prompt
    template.

    Raises:
        ValueError: `dataset_start` < 0, or `dataset_end` not after `dataset_start`.
    """

    dataset_name: str = field(
        default="svamp",
        metadata={"help": "Training problems: a built-in set (svamp, gsm8k, math500), a hub id or a local file/dir."},
    )
    dataset_start: int = field(default=0, metadata={"help": "First training row (0-based, inclusive)."})
    dataset_end: int | None = field(default=700, metadata={"help": "End training row (exclusive); null = all."})
    prompt_template: str = field(
        default="one_shot",
        metadata={
            "help": "'one_shot' (one worked example as a chat turn; answers end with 'The answer is N'), "
            "'zero_shot', or a template with {question}."
        },
    )

    def __post_init__(self) -> None:
        if self.dataset_start < 0:
            raise ValueError(f"dataset_start must be >= 0 (0 = the first row), got {self.dataset_start}")
        if self.dataset_end is not None and self.dataset_end <= self.dataset_start:
            raise ValueError(f"dataset_end ({self.dataset_end}) must be > dataset_start ({self.dataset_start})")


@dataclass
class DataColumnArguments:
    """Where the fields of a set that is not built in come from (built-in sets ignore these)."""

    dataset_split: str | None = field(default=None, metadata={"help": "Split for hub/local data sets."})
    question_column: str = field(default="question", metadata={"help": "Question column of non-built-in data."})
    answer_column: str = field(default="answer", metadata={"help": "Gold answer column of non-built-in data."})
