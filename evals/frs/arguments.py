"""The FRS settings of every FRS run (part of `procrl.evals.frs`): `FRSArguments` (a `TrlParser` dataclass) and the
`FRSConfig` of the computation it becomes.

`procrl frs` parses it beside its sampling settings (`procrl.evals.frs.offline.OfflineFRSConfig`) and the judge's
(`procrl.judges.JudgeArguments`); `train_grpo.py` parses its subclass `procrl.trainers.tasks.arguments.
FRSCallbackArguments`, which adds only what the training callback has of its own (when to evaluate, on which
problems, and sampling overrides of GRPO's settings). The keys are the same in both (`frs_traces: 4`,
`frs_k_percent: 10`, ...), so one YAML block of FRS settings means the same thing in a GRPO config and in
`procrl frs --config`. `frs_config(seed)` turns them into the `FRSConfig` the computation takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["DEFAULT_K_VALUES", "FRSArguments", "FRSConfig"]


DEFAULT_K_VALUES = (10, 20, 30, 40, 50)


@dataclass
class FRSConfig:
    """How FRS is computed. Defaults follow docs/architecture.md "FRS"; the paper is silent where marked *(default)*."""

    k_percent: float = field(default=10, metadata={"help": "K of the headline FRS: keep the top K% most confident."})
    k_values: tuple[float, ...] = field(
        default=DEFAULT_K_VALUES, metadata={"help": "K values (percent) of the FRS@K curve; k_percent is added."}
    )
    tail_fraction: float = field(default=0.1, metadata={"help": "Share of lowest-probability tokens in the tail."})
    estimator: str = field(
        default="topk",
        metadata={
            "help": "'topk': judge every kept trace (exact). 'bins': the paper's estimator, equal-count confidence "
            "bins with at most max_per_bin judged per bin; FRS@K = bin means weighted by their overlap with the top K%."
        },
    )
    n_bins: int = field(
        default=10, metadata={"help": "Equal-count confidence bins of the 'bins' estimator *(default)*."}
    )
    max_per_bin: int = field(default=50, metadata={"help": "At most this many traces are judged per bin ('bins')."})
    selection_gain: bool = field(default=True, metadata={"help": "Judge what the selection gain needs and report it."})
    random_baseline: str = field(
        default="sample",
        metadata={
            "help": "Selection gain's RS(random): 'sample' = RS of one seeded random trace of the question (<= 2 "
            "judgements per question); 'mean' = the mean RS of the question's traces, the exact expectation "
            "(noise-free, but every trace of the question is judged)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the hash-based random choices (bins, random trace)."})
    max_trace_chars: int = field(default=8000, metadata={"help": "Longer traces are cut in the middle for the judge."})
    judge_sees_correctness: bool = field(
        default=True,
        metadata={
            "help": 'Show the judge {"final_correct": ...} (the answer check); False drops that line from the '
            "prompt (the ablation: does RS carry more than the flag?)."
        },
    )

    def __post_init__(self):
        self.k_values = tuple(sorted({*(float(k) for k in self.k_values), float(self.k_percent)}))
        self.k_values = tuple(int(k) if float(k).is_integer() else k for k in self.k_values)
        if float(self.k_percent).is_integer():
            self.k_percent = int(self.k_percent)
        for k in self.k_values:
            if not 0 < k <= 100:
                raise ValueError(f"K values are percentages in (0, 100], got {k}; e.g. k_values: [10, 20, 30, 40, 50]")
        if not 0 < self.tail_fraction <= 1:
            raise ValueError(f"tail_fraction must be in (0, 1], got {self.tail_fraction} (the paper uses 0.1)")
        if self.estimator not in ("topk", "bins"):
            raise ValueError(f"estimator must be 'topk' or 'bins', got {self.estimator!r}")
        if self.n_bins < 1 or self.max_per_bin < 1:
            raise ValueError(f"n_bins and max_per_bin must be >= 1, got {self.n_bins} and {self.max_per_bin}")
        if self.random_baseline not in ("sample", "mean"):
            raise ValueError(f"random_baseline must be 'sample' or 'mean', got {self.random_baseline!r}")
        if self.max_trace_chars < 100:
            raise ValueError(f"max_trace_chars must be >= 100, got {self.max_trace_chars}")


@dataclass
class FRSArguments:
    """What FRS measures and how (docs/architecture.md "FRS"; `procrl.evals.frs` for the computation).

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
