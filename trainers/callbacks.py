"""FRS in `train_grpo.py`: the `frs_*` config fields (`FRSArguments`), one call that builds and attaches the
`FRSCallback` after the trainer is built (`add_frs_callback`). `judge_options` (the judge keywords for a reply
budget and a request timeout) is `procrl.judges.judge_options`, re-exported here.

    trainer = ProcessGRPOTrainer(...)
    add_frs_callback(frs_args, trainer, prompt_template)   # None when frs_every_n_steps is 0
    trainer.train()

The callback itself is `procrl.trainers.frs_callback.FRSCallback` (what it samples, logs and writes, and how it
runs on several ranks) and its sampler `procrl.evals.frs.sampling.generate_traces`; until procrl 0.3 both names
are also importable from here, with a `DeprecationWarning`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from procrl.data_builders.datasets import ONE_SHOT_TEMPLATE, load_math_dataset
from procrl.judges import judge_options
from procrl.evals.frs import FRSConfig
from procrl.trainers import frs_callback
from procrl.trainers.tasks.arguments import parse_eval_set

__all__ = ["FRSArguments", "add_frs_callback", "judge_options"]


@dataclass
class FRSArguments:
    """FRS during GRPO training (YAML keys of `train_grpo.py`); off unless `frs_every_n_steps` > 0."""

    frs_every_n_steps: int = field(
        default=0, metadata={"help": "Log FRS of the policy every N optimizer steps (and after the last one); 0 = off."}
    )
    frs_judge: str = field(
        default="local",
        metadata={
            "help": "FRS judge: 'local' / 'local:<model>' (vLLM's OpenAI server on the default model / that one, "
            "started on rank 0: schema enforced, scores also read as probabilities; where vLLM cannot be imported, a "
            "constrained transformers judge in process), 'serve:transformers[:<model>]' (`transformers serve`, "
            "which ignores the schema), 'http(s)://host:port/v1[#model]', 'transformers:<model>', or 'none' (no "
            "judge: accuracies and confidence only)."
        },
    )
    frs_eval_set: str = field(
        default="gsm8k:0:10", metadata={"help": "FRS problems as name:start:end (a built-in set or a data file)."}
    )
    frs_traces: int = field(default=4, metadata={"help": "FRS traces sampled per problem (the paper uses 16)."})
    frs_k_percent: float = field(default=10, metadata={"help": "K of frs/score: the top K% most confident traces."})
    frs_max_new_tokens: int | None = field(
        default=None, metadata={"help": "Tokens per FRS trace; null = GRPO's max_completion_length."}
    )
    frs_temperature: float | None = field(
        default=None, metadata={"help": "FRS sampling temperature; null = GRPO's temperature."}
    )
    frs_judge_max_tokens: int = field(default=96, metadata={"help": "Token budget of one judge reply."})
    frs_judge_timeout_s: float = field(
        default=600,
        metadata={"help": "Seconds one judge request may take, queueing in the server included (server judges)."},
    )
    frs_judge_sees_correctness: bool = field(
        default=True,
        metadata={
            "help": 'Show the FRS judge the final-answer check {"final_correct": ...}; false drops that line from '
            "the prompt (FRSConfig.judge_sees_correctness)."
        },
    )

    def __post_init__(self):
        if self.frs_every_n_steps < 0:
            raise ValueError(f"frs_every_n_steps must be >= 0 (0 = off), got {self.frs_every_n_steps}")
        if self.frs_traces < 1:
            raise ValueError(f"frs_traces must be >= 1, got {self.frs_traces}")
        parse_eval_set(self.frs_eval_set, with_tokens=False)  # validates name:start:end
        FRSConfig(k_percent=self.frs_k_percent)  # validates K


def add_frs_callback(frs_args: FRSArguments, trainer, prompt_template=None) -> frs_callback.FRSCallback | None:
    """Build the `FRSCallback` that `frs_args` describes and attach it to `trainer` (None when FRS is off).

    The judge cache goes to `<output_dir>/judge_cache`; the problems are loaded with `load_math_dataset` and the
    training prompt template; the FRS settings are `FRSConfig(k_percent=frs_k_percent,
    judge_sees_correctness=frs_judge_sees_correctness)`.
    """
    if frs_args.frs_every_n_steps <= 0:
        return None
    name, start, end, _ = parse_eval_set(frs_args.frs_eval_set, with_tokens=False)
    dataset = load_math_dataset(name, start=start, end=end, prompt_template=prompt_template or ONE_SHOT_TEMPLATE)
    judge = None if frs_args.frs_judge.lower() == "none" else frs_args.frs_judge
    return frs_callback.FRSCallback(
        dataset,
        every_n_steps=frs_args.frs_every_n_steps,
        n_traces=frs_args.frs_traces,
        n_problems=len(dataset),
        k_percent=frs_args.frs_k_percent,
        frs_config=FRSConfig(
            k_percent=frs_args.frs_k_percent, judge_sees_correctness=frs_args.frs_judge_sees_correctness
        ),
        judge=judge,
        trainer=trainer,
        max_new_tokens=frs_args.frs_max_new_tokens,
        temperature=frs_args.frs_temperature,
        judge_kwargs={
            "cache_dir": str(Path(trainer.args.output_dir) / "judge_cache"),
            **judge_options(
                frs_args.frs_judge, max_tokens=frs_args.frs_judge_max_tokens, timeout_s=frs_args.frs_judge_timeout_s
            ),
        },
    )
