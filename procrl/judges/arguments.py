"""The judge settings every command parses (core layer): `JudgeArguments`, and the judge spec kinds.

A plain dataclass that imports no backend, so a command's parser (and `procrl demo`, which never judges) builds
without loading any judge; `procrl.judges.spec.open_judge_from` opens the judge the settings name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NO_JUDGE", "ORACLE_JUDGE", "SERVE_TRANSFORMERS", "JudgeArguments", "spec_kind"]

NO_JUDGE = "none"  # the judge spec of "no judge" (JudgeArguments; FRS then reports what needs no judge)
# the judge spec of FRS's programmatic judge: the step oracle's labels mapped to the four scores
# (`procrl.evals.frs.oracle_judge.OracleJudge`, docs/architecture.md "Step oracle"); no LLM, and FRS only: the
# evals layer opens it (`open_judge` refuses it, since core cannot import the oracle)
ORACLE_JUDGE = "oracle"

SERVE_TRANSFORMERS = "serve:transformers"


def spec_kind(spec: str) -> str:
    """The backend kind of a judge spec: "url", "local", "serve-transformers", "transformers", "oracle" or
    "unknown".

    >>> spec_kind("oracle"), spec_kind("local:m"), spec_kind("ftp://x")
    ('oracle', 'local', 'unknown')
    """
    if spec == ORACLE_JUDGE:
        return "oracle"
    if spec.startswith(("http://", "https://")):
        return "url"
    if spec == "local" or spec.startswith("local:"):
        return "local"
    if spec == SERVE_TRANSFORMERS or spec.startswith(SERVE_TRANSFORMERS + ":"):
        return "serve-transformers"
    if spec.startswith("transformers:"):
        return "transformers"
    return "unknown"


@dataclass
class JudgeArguments:
    """The settings of a run's one LLM judge, spelled alike wherever a judge is used (YAML keys and flags of
    `train_grpo.py`, where `procrl.trainers.tasks.arguments.SearchTaskArguments` holds them for the StepGap reward
    and the FRS callback alike, of `procrl frs` and of `procrl stepgap-eval`). `procrl.judges.spec.open_judge_from`
    opens the judge.

    `judge: oracle` is no LLM: FRS (`procrl frs`, the FRS callback) computes the four scores from the step oracle
    (`procrl.evals.frs.oracle_judge.OracleJudge`), on data with `gold_steps`; StepGap GRPO (`task: search`) labels
    steps with the StepGap oracle of a generated world (`procrl.rewards.stepgap.oracle.StepGapOracle`, built from
    the world's questions and corpus); `procrl stepgap-eval` refuses it.

    The reply budget has a per-use default (`judge_max_tokens: null`): the user passes it to `open_judge_from`
    (`procrl.evals.frs.judging.JUDGE_MAX_TOKENS` = 96 for FRS's four scores, `procrl.rewards.stepgap.check.
    JUDGE_MAX_TOKENS` = 512 for StepGap's A-C replies).

    Raises:
        ValueError: (on construction) an unknown judge spec, a count or budget < 1, or a timeout <= 0; each
            message names the setting and a valid value.
    """

    judge: str = field(
        default="local",
        metadata={
            "help": "The LLM judge: 'local' / 'local:<model>' (vLLM's OpenAI server on the default model / that one, "
            "started on 127.0.0.1 for the run and stopped after it: each reply's schema enforced, closed choices "
            "also read as probabilities; where vLLM cannot be imported, a schema-constrained transformers judge in "
            "this process), 'serve:transformers[:<model>]' (`transformers serve`, which ignores the schema), "
            "'transformers:<model>' (in this process), an OpenAI-compatible URL 'http(s)://host:port/v1[#model]', "
            "'oracle' (no LLM: FRS on step-checkable problems with gold_steps, the step oracle's labels mapped to "
            "the four scores; task=search on a generated world, the StepGap oracle's labels from the world's facts; "
            "procrl stepgap-eval refuses it), or 'none' (no judge: FRS then reports accuracies and "
            "confidences only; StepGap needs a judge)."
        },
    )
    judge_model: str | None = field(
        default=None,
        metadata={"help": "Model id of a judge URL; null = the URL's #model, else the first model the server lists."},
    )
    judge_max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Token budget of one judge reply; null = the use's: 96 for FRS (the JSON of four scores is ~30 "
            "tokens), 512 for StepGap (an A-C reply whose free-text field loops to its bound takes up to ~520)."
        },
    )
    judge_timeout_s: float = field(
        default=600.0,
        metadata={
            "help": "Seconds one judge request may take, queueing in the server included (a loaded CPU server can "
            "take minutes for a queue of 8); server judges only."
        },
    )
    judge_concurrency: int = field(default=8, metadata={"help": "Judge requests in flight at once."})
    judge_num_threads: int = field(
        default=1,
        metadata={
            "help": "CPU threads of a local / serve:transformers judge server (vLLM: OMP threads, unpinned; 1 avoids "
            "thrashing a shared CPU)."
        },
    )
    judge_continuous_batching: bool = field(
        default=True,
        metadata={
            "help": "serve:transformers judge only: `transformers serve --continuous-batching` with JudgeServer's "
            "bounded KV cache; false = one request at a time. Ignored by 'local' (vLLM always batches) and the "
            "other judges."
        },
    )
    judge_cache_dir: str | None = field(
        default=None,
        metadata={"help": "On-disk judge cache (one file per valid judgement); null = <output_dir>/judge_cache."},
    )

    def __post_init__(self) -> None:
        if not self.enabled:
            self.judge = NO_JUDGE
        elif spec_kind(self.judge.strip()) == "unknown":
            raise ValueError(
                f"judge {self.judge!r} is not a judge spec; use 'local', 'local:<model>', 'serve:transformers', "
                "'transformers:<model>', 'http://host:port/v1[#model]', 'oracle' (FRS on gold_steps problems) or "
                "'none'"
            )
        for name in ("judge_concurrency", "judge_num_threads", "judge_max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value} (e.g. {name}: {_EXAMPLES[name]})")
        if not self.judge_timeout_s > 0:
            raise ValueError(f"judge_timeout_s must be > 0 seconds, got {self.judge_timeout_s} (e.g. 600)")

    @property
    def enabled(self) -> bool:
        """Whether there is a judge (the spec is not "none")."""
        return self.judge.strip().lower() != NO_JUDGE

    @property
    def is_oracle(self) -> bool:
        """Whether the judge is the step oracle (`judge: oracle`), FRS's programmatic judge, not an LLM."""
        return self.judge.strip() == ORACLE_JUDGE


_EXAMPLES = {"judge_concurrency": 8, "judge_num_threads": 1, "judge_max_tokens": 512}
