"""What the offline commands `procrl select` (best-of-N), `procrl beam` (PUM beam search) and `procrl frs` share
(trainers layer).

Their settings (`OfflineSamplingConfig`: the policy, the problem slice and sampling, the base of `OfflineFRSConfig`
of `procrl frs`; `OfflineConfig` adds the PUM, parsed by `TrlParser` in `procrl/scripts/select.py` and
`procrl/scripts/beam.py`), loading the problems, the policy's rollout engine and its tokenizer (`load_setup`), the
sampling settings (`sampling_params`), the PUM, the accuracy of one pick per problem with a 95% Wilson interval, and the
accuracy table. Problems whose gold answer cannot be parsed are left out of the accuracy (their
`correct` entry is None); with none left the accuracy and its interval are None (undefined, "–" in the table), not 0.

Every command samples through a `procrl.generation` rollout engine (the fields of `procrl.generation.EngineArguments`:
`generation_backend` "auto" = vLLM wherever it imports, else transformers `generate`), whose `Rollout.logprobs` are
raw (T = 1) natural-log probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from procrl.data_builders.datasets import load_math_dataset, resolve_template
from procrl.evals.stats import format_estimate, ratio, wilson_interval
from procrl.generation import (
    EngineArguments,
    RolloutEngine,
    SamplingParams,
    TransformersEngine,
    make_engine_from,
    render_prompts,
)
from procrl.models import resolve_model
from procrl.rewards.pum import PrefixUtilityModel
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "OfflineConfig",
    "OfflineSamplingConfig",
    "Setup",
    "accuracy",
    "format_accuracy_table",
    "load_pum",
    "load_rows",
    "load_setup",
    "sampling_params",
]


@dataclass
class OfflineSamplingConfig(EngineArguments):
    """Settings of every offline command: the engine (`EngineArguments`: `generation_backend`, `vllm_kv_cache_gib`,
    `vllm_dtype`), the policy, the problem slice and sampling (`load_setup` reads them).

    `OfflineConfig` (`procrl select`, `procrl beam`) adds the PUM; `procrl.evals.frs.offline.OfflineFRSConfig`
    (`procrl frs`) overrides some defaults and help texts and validates with its own messages.

    Raises:
        ValueError: (on construction) `batch_size` or `max_new_tokens` < 1, `temperature` <= 0, or a bad engine
            field (`EngineArguments.engine_problems`).
    """

    model: str = field(default="default", metadata={"help": "policy name or path ('default' = embedded SmolLM2-135M)"})
    dataset: str = field(default="svamp", metadata={"help": "gsm8k, svamp, math500, or a local/hub data set"})
    split: str | None = field(default=None, metadata={"help": "split of a non-built-in data set"})
    start: int = field(default=0, metadata={"help": "first problem (0-based)"})
    end: int = field(default=100, metadata={"help": "end problem (exclusive); -1 = all"})
    prompt_template: str = field(
        default="one_shot", metadata={"help": "'one_shot', 'zero_shot' or a {question} template"}
    )
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling (1.0 = off)"})
    max_new_tokens: int = field(default=256, metadata={"help": "token budget of one completion"})
    batch_size: int = field(default=32, metadata={"help": "sequences per generate / scoring call"})
    seed: int = field(default=0, metadata={"help": "sampling seed and random-selection seed"})
    device: str | None = field(default=None, metadata={"help": "torch device (None: cuda if available, else cpu)"})
    no_progress: bool = field(default=False, metadata={"help": "hide progress bars"})

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """What is wrong with the settings, each with how to fix it (empty when they are fine)."""
        if self.batch_size < 1 or self.max_new_tokens < 1 or self.temperature <= 0:
            return [
                f"--batch-size ({self.batch_size}) and --max-new-tokens ({self.max_new_tokens}) must be >= 1 and "
                f"--temperature ({self.temperature}) > 0 (e.g. --batch-size 32 --max-new-tokens 256 --temperature 0.7)"
            ]
        return self.engine_problems()

    def settings(self) -> dict[str, Any]:
        """The settings as the report records them: every field but `no_progress`, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "no_progress"}


@dataclass
class OfflineConfig(OfflineSamplingConfig):
    """Settings shared by `procrl select` and `procrl beam`: the policy, the problem slice, sampling and the PUM.

    Raises:
        ValueError: (on construction) `batch_size` or `max_new_tokens` < 1, or `temperature` <= 0.
    """

    pum: str | None = field(
        default=None, metadata={"help": "PUM checkpoint directory (train_pum.py output); needed for pum"}
    )


@dataclass
class Setup:
    """The loaded problems (one dict per row of `load_math_dataset`), the policy's rollout engine, its tokenizer
    (left padding, pad = EOS when it has none), its EOS ids and the rendered prompt ids (one list per problem).

    `model` is the policy as a transformers model in eval mode (float32, on `device`), for the scorers that
    teacher-force it (PiCSAR): the engine's own model with the transformers engine, else loaded on first use.
    """

    dataset: list[dict]
    engine: RolloutEngine
    tokenizer: Any
    eos_ids: list[int]
    prompt_ids: list[list[int]]
    device: str
    model_path: str = ""
    _model: Any = field(default=None, repr=False)

    @property
    def model(self):
        if self._model is None:
            if isinstance(self.engine, TransformersEngine):
                self._model = self.engine.model
            else:
                self._model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
                self._model = self._model.to(self.device).eval()
        return self._model


def load_rows(config: OfflineSamplingConfig) -> list[dict]:
    """The problems `[start, end)` of `config.dataset` (end < 0: all) in procrl's data schema, prompts rendered
    with `config.prompt_template` (`procrl.data_builders.datasets.load_math_dataset`)."""
    dataset = load_math_dataset(
        config.dataset,
        split=config.split,
        start=config.start,
        end=None if config.end is not None and config.end < 0 else config.end,
        prompt_template=resolve_template(config.prompt_template),
    )
    return [dict(row) for row in dataset]


def load_setup(config: OfflineSamplingConfig) -> Setup:
    """Load the data slice `[start, end)` (end < 0: all), the policy's rollout engine (float32 unless `vllm_dtype`
    says otherwise for vLLM; `make_engine_from(config, ...)`, on `device`, or cuda if available, for transformers;
    vLLM's platform for vLLM) and its tokenizer (pad = EOS when it has none), render the prompts and seed torch with
    `seed` (after the engine is built: an in-process vLLM engine seeds the global RNGs).

    Raises:
        ImportError: `generation_backend="vllm"` and vLLM cannot be imported (the message says how to fix it).
        ValueError: a vLLM build that cannot run on `device`.
    """
    rows = load_rows(config)
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    engine = make_engine_from(
        config,
        str(path),
        device=config.device if config.generation_backend != "transformers" else device,
        dtype="float32",
        batch_size=config.batch_size,
        tokenizer=tokenizer,
    )
    prompt_ids = render_prompts(tokenizer, [row["prompt"] for row in rows])
    torch.manual_seed(config.seed)
    return Setup(rows, engine, tokenizer, list(engine.eos_ids), prompt_ids, device, str(path))


def sampling_params(config: OfflineSamplingConfig, max_new_tokens: int, stop: tuple[str, ...] = ()) -> SamplingParams:
    """Pure temperature / top-p sampling (top-k off) of at most `max_new_tokens` tokens, ending at `stop` strings."""
    return SamplingParams(
        temperature=config.temperature, top_p=config.top_p, top_k=0, max_new_tokens=max_new_tokens, stop=stop
    )


def load_pum(config: OfflineConfig) -> PrefixUtilityModel:
    """The PUM of `config.pum` on `config.device`, scoring `config.batch_size` prefixes per call.

    Raises:
        ValueError: no `pum` directory given.
    """
    if not config.pum:
        raise ValueError("--pum PATH is needed for the pum scorer (a train_pum.py output directory)")
    return PrefixUtilityModel.from_pretrained(config.pum, device=config.device, batch_size=config.batch_size)


def accuracy(correct: list[list[bool] | None], picks: list[int | None]) -> dict:
    """Accuracy of one pick per problem over problems with a parseable gold (correct[i] is that problem's list).

    A pick of None (the scorer abstained) counts as wrong and as `abstained`; the interval (`ci_low`, `ci_high`) is
    Wilson's at 95%. With no problem to score (`total` 0) the accuracy, `ci_low` and `ci_high` are None: undefined,
    not 0, and no interval.

    >>> r = accuracy([[True, False], [False, False], None], [0, None, 1])
    >>> r["accuracy"], r["correct"], r["total"], r["abstained"]
    (0.5, 1, 2, 1)
    >>> r = accuracy([None, None], [0, 1])  # no parseable gold: nothing to score
    >>> r["accuracy"], r["ci_low"], r["ci_high"], r["correct"], r["total"]
    (None, None, None, 0, 0)
    """
    scored = [(c, p) for c, p in zip(correct, picks, strict=True) if c is not None]
    n_correct = sum(1 for c, p in scored if p is not None and c[p] is True)
    total = len(scored)
    low, high = wilson_interval(n_correct, total) or (None, None)  # no problem: no interval
    return {
        "accuracy": ratio(n_correct, total),
        "ci_low": low,
        "ci_high": high,
        "correct": n_correct,
        "total": total,
        "abstained": sum(1 for c, p in scored if p is None),
    }


def format_accuracy_table(results: dict[str, dict]) -> str:
    """Fixed-width table: one row per scorer with accuracy [95% CI], correct/total and abstentions; "–" for an
    undefined accuracy (no problem to score).

    >>> rows = {"majority": accuracy([[True]], [0]), "random": accuracy([None], [0])}
    >>> print(format_accuracy_table(rows))  # doctest: +NORMALIZE_WHITESPACE
    scorer                 accuracy [95% CI]          correct abstained
    -------------------------------------------------------------------
    majority               1.000 [0.207, 1.000]        1/1            0
    random                 –                           0/0            0
    """
    header = f"{'scorer':<22} {'accuracy [95% CI]':<24} {'correct':>9} {'abstained':>9}"
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        acc = format_estimate(r["accuracy"], (r["ci_low"], r["ci_high"]))
        lines.append(f"{name:<22} {acc:<24} {r['correct']:>4}/{r['total']:<4} {r['abstained']:>9}")
    return "\n".join(lines)
