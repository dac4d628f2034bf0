"""Settings of the PUM-Math builder: `PUMMathConfig` (a dataclass parsed by `TrlParser`) and its constants."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from procrl.data_builders.prompts import resolve_template, validate_template
from procrl.generation import EngineArguments

PAIR_TYPES = ("vertical", "horizontal")
NORMALIZATIONS = ("student_std", "none", "problem_zscore")
TRAJECTORY_SOURCES = ("policy", "reference", "both")

# A plain (no chat template) one-shot prompt for base models such as Gemma 3 270M: the same worked example as
# `datasets.ONE_SHOT_TEMPLATE`. The trajectory continues after "Answer:" with a leading space.
PLAIN_ONE_SHOT_TEMPLATE = (
    "Question: A baker makes 4 trays of 6 muffins and sells 15 of them. How many muffins are left?\n"
    "Answer: The baker makes 4 * 6 = 24 muffins. He sells 15, so 24 - 15 = 9 muffins are left. The answer is 9.\n\n"
    "Question: {question}\nAnswer:"
)
PLAIN_STOP = ("\nQuestion:",)


@dataclass
class PUMMathConfig(EngineArguments):
    """Settings of the PUM-Math builder (parsed by `TrlParser`: `--config x.yaml`, flags override): the engine that
    samples every model (`EngineArguments`: `generation_backend`, `vllm_kv_cache_gib`, `vllm_dtype`), then the
    builder's own fields.

    Per-student lists (`student_templates`, `student_temperatures`, `student_top_p`, `student_max_new_tokens`) take
    one value for all students or one per student; `__post_init__` broadcasts a single value.

    Raises:
        ValueError: (from `__post_init__`) a per-student list of the wrong length, an unknown template,
            trajectory source or normalization, a value out of range, or a bad engine field; the message names the
            field.
    """

    dataset: str = field(
        default="gsm8k",
        metadata={
            "help": "Problems: 'gsm8k', 'svamp', 'math500' (shipped) or a path / hub id for datasets.load_dataset."
        },
    )
    split: str = field(default="test", metadata={"help": "Split of `dataset`."})
    prompt_template: str = field(
        default="one_shot",
        metadata={
            "help": "Chat prompt of the policy and of 'chat' students: 'one_shot' (one worked example as a chat turn), "
            "'zero_shot', or a template with {question} ('{question}' for a model SFT-trained on bare questions, "
            "such as the arith organism). 'plain' students ignore it (PLAIN_ONE_SHOT_TEMPLATE)."
        },
    )
    start: int = field(default=0, metadata={"help": "First problem (row index) to use."})
    end: int | None = field(default=50, metadata={"help": "One past the last problem to use; null = all."})
    output_dir: str = field(
        default="outputs/pum_math",
        metadata={"help": "Where dataset/, pairs.parquet, stats.json, gains.png and cache/ go."},
    )
    trajectory_source: str = field(
        default="both",
        metadata={"help": "'policy' (sampled), 'reference' (the data set's solutions) or 'both'."},
    )
    policy_model: str = field(
        default="default", metadata={"help": "Model that samples trajectories ('default' = SmolLM2-135M-Instruct)."}
    )
    policy_template: str = field(
        default="chat", metadata={"help": "'chat' (chat template, one-shot exchange) or 'plain' (base model)."}
    )
    n_trajectories: int = field(default=2, metadata={"help": "Sampled trajectories per problem."})
    policy_temperature: float = field(default=0.8, metadata={"help": "Sampling temperature of the policy."})
    policy_top_p: float = field(default=1.0, metadata={"help": "Top-p of the policy."})
    max_trajectory_tokens: int = field(default=256, metadata={"help": "Max new tokens of a sampled trajectory."})
    students: list[str] = field(
        default_factory=lambda: ["default", "gemma3-270m"],
        metadata={"help": "Student models (names or paths), weak to strong; M >= 1 (the paper uses M >= 2)."},
    )
    student_templates: list[str] = field(
        default_factory=lambda: ["chat", "plain"],
        metadata={
            "help": "Per student: 'chat' or 'plain' (base models without a chat template). One value applies to all."
        },
    )
    student_temperatures: list[float] = field(
        default_factory=lambda: [1.0], metadata={"help": "Per student sampling temperature (one value applies to all)."}
    )
    student_top_p: list[float] = field(
        default_factory=lambda: [1.0], metadata={"help": "Per student top-p (one value applies to all)."}
    )
    student_max_new_tokens: list[int] = field(
        default_factory=lambda: [192],
        metadata={"help": "Per student max new tokens of a rollout (one value applies to all)."},
    )
    n_rollouts: int = field(default=4, metadata={"help": "Rollouts per prefix and student (n)."})
    n_rollouts_bare: int = field(default=8, metadata={"help": "Rollouts from the bare problem per student (n_0)."})
    step_separator: str = field(
        default="\n\n",
        metadata={"help": "Step separator of trajectories (docs/architecture.md 'PUM' default '\\n\\n')."},
    )
    cut_fractions: list[float] = field(
        default_factory=lambda: [0.25, 0.5, 0.75],
        metadata={"help": "Token fractions to cut trajectories at, each in (0, 1)."},
    )
    cut_at_steps: bool = field(
        default=True, metadata={"help": "Also cut at every step boundary (the full trajectory included)."}
    )
    max_step_cuts: int = field(
        default=8, metadata={"help": "At most this many step-boundary cuts per trajectory (evenly spaced, last kept)."}
    )
    normalization: str = field(
        default="student_std",
        metadata={"help": "Intrinsic utility: 'student_std' (docs/architecture.md 'PUM'), 'none' or 'problem_zscore'."},
    )
    kappa: float = field(
        default=1.0, metadata={"help": "Adaptive margin: keep a pair when |ΔG| > kappa * sqrt(Var(ΔG))."}
    )
    horizontal_tolerance: float = field(
        default=0.10, metadata={"help": "Horizontal pairs: |L_a - L_b| <= tolerance * max(L_a, L_b) tokens."}
    )
    keep_ties: bool = field(
        default=False, metadata={"help": "Keep pairs with ΔG = 0 (margin 0, is_tie = True) instead of dropping them."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of trajectories and rollouts (same seed -> same dataset)."})
    replication_seed: int | None = field(
        default=None,
        metadata={
            "help": "If set, re-estimate every kept pair's solve rates with fresh rollouts under this seed and report the "
            "fraction whose order replicates (in stats.json, rewritten after the pairs are written and checked)."
        },
    )
    verify_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "Wall-clock budget, in seconds, of each math-verify step (a gold parse; the gold and the answer "
            "steps of a rollout's check). A step that runs out counts as a failure (wrong answer, unparseable gold) "
            "and is counted in stats.json (verification_timeouts, with a warning). Generous on purpose: a check normally "
            "takes a small fraction of a second, and a tight budget would let the machine's load change the dataset."
        },
    )
    batch_size: int = field(default=16, metadata={"help": "Generation batch size of the transformers engine."})
    shard_size: int = field(default=64, metadata={"help": "Rollouts per cache shard (the unit of resumption)."})
    device: str | None = field(
        default=None,
        metadata={
            "help": "Device of the engine (default: this process's accelerator device; vLLM's build must match it)."
        },
    )

    def __post_init__(self) -> None:
        def broadcast(name: str) -> None:
            values = list(getattr(self, name))
            if len(values) == 1:
                values = values * len(self.students)
            if len(values) != len(self.students):
                raise ValueError(
                    f"{name} has {len(values)} values for {len(self.students)} students; give one value, or one per student"
                )
            setattr(self, name, values)

        if not self.students:
            raise ValueError("students is empty; give at least one model, e.g. students: [default, gemma3-270m]")
        for name in ("student_templates", "student_temperatures", "student_top_p", "student_max_new_tokens"):
            broadcast(name)
        for template in [*self.student_templates, self.policy_template]:
            if template not in ("chat", "plain"):
                raise ValueError(f"template {template!r} is not 'chat' or 'plain'")
        if self.trajectory_source not in TRAJECTORY_SOURCES:
            raise ValueError(f"trajectory_source must be one of {TRAJECTORY_SOURCES}, got {self.trajectory_source!r}")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {self.normalization!r}")
        if self.n_rollouts < 1 or self.n_rollouts_bare < 1:
            raise ValueError("n_rollouts and n_rollouts_bare must be >= 1")
        if self.trajectory_source != "reference" and self.n_trajectories < 1:
            raise ValueError(
                "n_trajectories must be >= 1 when trajectories are sampled (or use trajectory_source: reference)"
            )
        if any(not 0.0 < f < 1.0 for f in self.cut_fractions):
            raise ValueError(f"cut_fractions must lie in (0, 1), got {self.cut_fractions}")
        if not self.cut_fractions and not self.cut_at_steps:
            raise ValueError("no cuts: set cut_at_steps: true or give cut_fractions")
        if self.kappa < 0 or not 0 <= self.horizontal_tolerance < 1:
            raise ValueError("kappa must be >= 0 and horizontal_tolerance in [0, 1)")
        validate_template(resolve_template(self.prompt_template))
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be greater than start ({self.start})")
        problems = self.engine_problems()
        if problems:
            raise ValueError("; ".join(problems))
        if not 0 < self.verify_timeout_s < math.inf:
            raise ValueError(
                f"verify_timeout_s must be a positive, finite number of seconds, got {self.verify_timeout_s}"
            )
