"""The FRS settings of every FRS run (part of `procrl.evals.frs`), as one `TrlParser` dataclass: `FRSArguments`.

`procrl frs` parses it beside its sampling settings (`procrl.evals.frs.offline.OfflineFRSConfig`) and the judge's
(`procrl.judges.JudgeArguments`); `train_grpo.py` parses its subclass `procrl.trainers.frs_callback.
FRSCallbackArguments`, which adds only what the training callback has of its own (when to evaluate, on which
problems, and sampling overrides of GRPO's settings). The keys are the same in both (`frs_traces: 4`,
`frs_k_percent: 10`, ...), so one YAML block of FRS settings means the same thing in a GRPO config and in
`procrl frs --config`. `frs_config(seed)` turns them into the `FRSConfig` the computation takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from procrl.evals.frs.traces import DEFAULT_K_VALUES, FRSConfig

__all__ = ["FRSArguments"]


@dataclass
class FRSArguments:
    """What FRS measures and how (DESIGN §4 "FRS"; `procrl.evals.frs` for the computation).

    Raises:
        ValueError: (on construction) `frs_traces` < 1, a K outside (0, 100], or an FRS setting `FRSConfig` refuses
            (`frs_n_bins` / `frs_max_per_bin` < 1, an unknown estimator or random baseline).
    """

    frs_traces: int = field(
        default=16, metadata={"help": "FRS traces sampled per problem (the paper uses 16)."}
    )
    frs_k_percent: float = field(
        default=10,
        metadata={"help": "K of the headline FRS (frs/score): the top K%% most confident traces, pooled over problems."},
    )
    frs_k_values: list[float] = field(
        default_factory=lambda: list(DEFAULT_K_VALUES),
        metadata={"help": "K values (percent) of the FRS@K curve (frs/at_k/<K>); frs_k_percent joins them."},
    )
    frs_judge_sees_correctness: bool = field(
        default=True,
        metadata={
            "help": 'Show the FRS judge the final-answer check {"final_correct": ...}; false drops that line from '
            "the prompt (the ablation: does RS carry more than the flag it is given?)."
        },
    )
    frs_estimator: Literal["topk", "bins"] = field(
        default="topk",
        metadata={"help": "'topk' judges every kept trace (exact); 'bins' is the paper's estimator (confidence bins)."},
    )
    frs_n_bins: int = field(default=10, metadata={"help": "Equal-count confidence bins of the 'bins' estimator."})
    frs_max_per_bin: int = field(default=50, metadata={"help": "Traces judged per bin ('bins' estimator)."})
    frs_random_baseline: Literal["sample", "mean"] = field(
        default="sample",
        metadata={
            "help": "The selection gain's RS(random): 'sample' = one seeded random trace of the question, 'mean' = "
            "the mean over the question's traces (exact, but every trace is judged)."
        },
    )

    def __post_init__(self) -> None:
        if self.frs_traces < 1:
            raise ValueError(f"frs_traces must be >= 1 (traces per problem; the paper uses 16), got {self.frs_traces}")
        bad = [k for k in (self.frs_k_percent, *self.frs_k_values) if not 0 < k <= 100]
        if bad:
            raise ValueError(
                f"frs_k_percent and frs_k_values are percentages in (0, 100], got {bad[0]:g} "
                "(e.g. frs_k_percent: 10, frs_k_values: [10, 20, 30, 40, 50])"
            )
        try:
            self.frs_config()
        except ValueError as exc:  # FRSConfig names its fields ("estimator must be ..."): name the settings here
            raise ValueError(f"frs_{exc}") from None

    def frs_config(self, seed: int = 0) -> FRSConfig:
        """The `FRSConfig` of these settings; `seed` seeds its hash-based random choices (bins, random trace)."""
        return FRSConfig(
            k_percent=self.frs_k_percent,
            k_values=tuple(self.frs_k_values),
            estimator=self.frs_estimator,
            n_bins=self.frs_n_bins,
            max_per_bin=self.frs_max_per_bin,
            random_baseline=self.frs_random_baseline,
            seed=seed,
            judge_sees_correctness=self.frs_judge_sees_correctness,
        )
