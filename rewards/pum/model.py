"""The PUM scorer (part of `procrl.rewards.pum`): `PrefixUtilityModel`, loading a trained checkpoint (full or LoRA
adapter) and scoring prefixes, step prefixes of one trajectory in one forward pass, or independent pairs in batches.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from peft.utils import load_peft_weights
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from procrl.rewards.pum.pooling import _backbone_and_head, _scores_at
from procrl.rewards.pum.render import RenderedPrefix, render_prefix, render_prompt_ids
from procrl.rewards.steps import DEFAULT_SEPARATOR, Step

__all__ = ["PUM_CONFIG_NAME", "PrefixUtilityModel"]

# Written next to a trained PUM by `procrl.trainers.pum_training`: the rendering settings used in training,
# read back by `PrefixUtilityModel.from_pretrained` so scoring renders inputs the same way.
PUM_CONFIG_NAME = "pum_config.json"


class PrefixUtilityModel:
    """A trained PUM ready to score prefixes: U_θ(x, p) for a problem x and a (partial) solution p.

    Args:
        model: a `*ForSequenceClassification` model with `num_labels == 1` (or a PEFT model wrapping one), used as
            given (device, dtype, train/eval mode untouched; scoring runs under `torch.no_grad`).
        tokenizer: its tokenizer (chat template required; a pad token is set to EOS when missing).
        max_length: token budget of one rendered input, as in training (`max_length - 1` tokens kept; None = no cut).
        separator: step separator used to split string prefixes, as in training.
        batch_size: inputs per forward pass in `score` / `score_steps`.

    Raises:
        ValueError: the model does not have exactly one output label.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_length: int | None = 1024,
        separator: str = DEFAULT_SEPARATOR,
        batch_size: int = 16,
    ):
        num_labels = getattr(getattr(model, "config", None), "num_labels", None)
        if num_labels != 1:
            raise ValueError(f"A PUM has one output (num_labels=1); this model has num_labels={num_labels}.")
        _backbone_and_head(model)  # fail early on a model without a `score` head
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.separator = separator
        self.batch_size = batch_size
        self._prompt_cache: dict[str, list[int]] = {}

    # -- loading ---------------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        max_length: int | None = None,
        separator: str | None = None,
        batch_size: int = 16,
    ) -> PrefixUtilityModel:
        """Load a PUM from a full checkpoint directory or a LoRA adapter directory (as `train_pum.py` saves them).

        The score head must come from the checkpoint: a full checkpoint must contain `score.weight` (checked with
        `from_pretrained(..., output_loading_info=True)`'s `missing_keys`), and an adapter must contain the head
        (PEFT `modules_to_save`, automatic with `task_type=SEQ_CLS`) unless its base checkpoint already has one.
        The adapter is merged into the base for scoring. Rendering settings default to the `pum_config.json` saved
        by training (then to `max_length=1024`, `separator="\\n\\n"`).

        Args:
            path: directory with `config.json` + weights, or with `adapter_config.json` + adapter weights.
            device: where to put the model (default: CUDA when available, else CPU).
            dtype: parameter dtype (default float32).
            max_length, separator: override the saved rendering settings.
            batch_size: inputs per forward pass.

        Raises:
            ValueError: the score head is missing (it would be randomly initialised), or the body does not match
                the checkpoint (other missing keys).
        """
        path = Path(path)
        saved = json.loads((path / PUM_CONFIG_NAME).read_text()) if (path / PUM_CONFIG_NAME).is_file() else {}
        adapter = (path / "adapter_config.json").is_file()
        if adapter:
            base_path = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
            if not base_path:
                raise ValueError(f"{path}/adapter_config.json names no base_model_name_or_path")
            base, info = AutoModelForSequenceClassification.from_pretrained(
                base_path, num_labels=1, dtype=dtype, output_loading_info=True
            )
            _check_body_loaded(info, base_path)
            adapter_keys = load_peft_weights(str(path), device="cpu").keys()
            head_in_adapter = any(re.search(r"(^|\.)score\.", key) for key in adapter_keys)
            if not head_in_adapter and "score.weight" in info["missing_keys"]:
                raise ValueError(
                    f"The LoRA adapter at {path} has no score-head weights and its base {base_path} has none either: "
                    "the head would be random. Train with lora_task_type SEQ_CLS (PEFT then saves `score` as a "
                    "module to save) or add `score` to lora_modules_to_save."
                )
            model = PeftModel.from_pretrained(base, str(path)).merge_and_unload()
            tokenizer_path = path if (path / "tokenizer_config.json").is_file() else Path(base_path)
        else:
            model, info = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=1, dtype=dtype, output_loading_info=True
            )
            if "score.weight" in info["missing_keys"]:
                raise ValueError(
                    f"{path} has no trained score head (`score.weight` is missing, so it would be randomly "
                    "initialised): it is not a PUM checkpoint. Train one with train_pum.py, or pass the directory "
                    "train_pum.py saved."
                )
            _check_body_loaded(info, str(path))
            tokenizer_path = path
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
        device = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device).eval()
        return cls(
            model,
            tokenizer,
            max_length=max_length if max_length is not None else saved.get("max_length", 1024),
            separator=separator if separator is not None else saved.get("step_separator", DEFAULT_SEPARATOR),
            batch_size=batch_size,
        )

    # -- rendering ---------------------------------------------------------------------------------------------

    def render(self, problem: str, prefix: str | Sequence[str | Step]) -> RenderedPrefix:
        """`render_prefix` with this scorer's tokenizer, max_length and separator (prompt ids cached per problem)."""
        if problem not in self._prompt_cache:
            if len(self._prompt_cache) > 4096:
                self._prompt_cache.clear()
            self._prompt_cache[problem] = render_prompt_ids(self.tokenizer, problem)
        return render_prefix(
            self.tokenizer,
            problem,
            prefix,
            self.max_length,
            separator=self.separator,
            prompt_ids=self._prompt_cache[problem],
        )

    # -- scoring -----------------------------------------------------------------------------------------------

    def score_prefixes(
        self, problem: str, steps: str | Sequence[str | Step], *, include_empty: bool = False
    ) -> list[float]:
        """U after every step of ONE trajectory, from one forward pass over the whole trajectory.

        Value k is U(x, steps[0..k]) (0-based k), read from the hidden state at token position `boundary_k - 1`;
        it equals scoring `steps[:k+1]` alone (within float tolerance; tested to 1e-4) for every step that fits the
        budget. An empty step repeats the previous value exactly (a copy; a first empty step gets U(x, ∅)). A step
        whose end was cut by truncation (`max_length`), wholly or partly, is unscored: NaN, and so is every step
        after it (NaN is "no reward" for process advantages, `procrl.trainers.advantages`).

        Args:
            problem: the problem text.
            steps: the trajectory as its steps (one value each), or a string split at the separator.
            include_empty: also return U(x, ∅) (the empty prefix, at the end of the prompt) as the first value,
                the baseline for per-step increments U(x, p_k) - U(x, p_{k-1}).

        Returns:
            `len(steps)` floats (`+ 1` with `include_empty`; U(x, ∅) is always scored: the prompt is never cut),
            NaN for unscored steps; [] for no steps without `include_empty`.
        """
        return self.score_steps([problem], [steps], include_empty=include_empty)[0]

    def score_steps(
        self,
        problems: Sequence[str],
        steps: Sequence[str | Sequence[str | Step]],
        *,
        include_empty: bool = False,
    ) -> list[list[float]]:
        """`score_prefixes` for several trajectories, batched (one forward pass per batch of trajectories).

        The step-scorer interface of docs/architecture.md "Step scorers": one list of per-step values per trajectory; NaN marks a step whose
        end lies beyond the budget (see `score_prefixes`). Each trajectory's distinct boundaries are scored once and
        steps sharing a boundary (empty steps) share the value, so equal boundaries give identical floats.

        Raises:
            ValueError: `problems` and `steps` differ in length, or a rendering error (see `render_prefix`).
            FloatingPointError: the model produced NaN/inf (a broken checkpoint or an overflowing dtype).
        """
        if len(problems) != len(steps):
            raise ValueError(f"score_steps: {len(problems)} problems but {len(steps)} step lists")
        rendered = [self.render(problem, trajectory) for problem, trajectory in zip(problems, steps, strict=True)]
        positions: list[list[int]] = []  # distinct positions scored per trajectory
        layouts: list[list[int | None]] = []  # per output value: its index in `positions[i]`, None = unscored
        for r in rendered:
            ends = ([r.prompt_length] if include_empty else []) + list(r.boundaries)
            seen = ([True] if include_empty else []) + list(r.complete)
            index: dict[int, int] = {}
            layout: list[int | None] = []
            for end, whole in zip(ends, seen, strict=True):
                if not whole:
                    layout.append(None)
                    continue
                if end not in index:
                    index[end] = len(index)
                layout.append(index[end])
            positions.append([end - 1 for end in index])  # dicts keep insertion order
            layouts.append(layout)
        values = _scores_at(
            self.model,
            [r.input_ids for r in rendered],
            positions,
            pad_token_id=self.tokenizer.pad_token_id,
            batch_size=self.batch_size,
        )
        return [
            [math.nan if k is None else row[k] for k in layout] for row, layout in zip(values, layouts, strict=True)
        ]

    def score(
        self,
        problems: Sequence[str],
        prefixes: Sequence[str | Sequence[str | Step]],
        *,
        padding_side: str = "right",
    ) -> list[float]:
        """U(x_i, p_i) for independent (problem, prefix) pairs, in padded batches.

        Each input is pooled at its last real token (the last position with attention_mask == 1), so the value does
        not depend on the batch it is in or the padding side. A full completion's trailing EOS is stripped first. A
        prefix longer than the budget is scored as its kept tokens, the training convention (`render(...)
        .truncated_tokens` says whether it was cut; `score_steps` reports cut steps as NaN instead).

        Args:
            problems: problem texts.
            prefixes: one prefix per problem (string or pieces; "" is the empty prefix).
            padding_side: "right" (default) or "left"; the values are the same either way.

        Returns:
            One float per pair.

        Raises:
            ValueError: `problems` and `prefixes` differ in length, or a rendering error (see `render_prefix`).
            FloatingPointError: the model produced NaN/inf.
        """
        if len(problems) != len(prefixes):
            raise ValueError(f"score: {len(problems)} problems but {len(prefixes)} prefixes")
        rendered = [self.render(problem, prefix) for problem, prefix in zip(problems, prefixes, strict=True)]
        values = _scores_at(
            self.model,
            [r.input_ids for r in rendered],
            [[len(r.input_ids) - 1] for r in rendered],
            pad_token_id=self.tokenizer.pad_token_id,
            batch_size=self.batch_size,
            padding_side=padding_side,
        )
        return [row[0] for row in values]


def _check_body_loaded(info: dict, where: str) -> None:
    """Raise when weights other than the score head are missing (a different architecture, a broken checkpoint)."""
    missing = sorted(set(info.get("missing_keys", ())) - {"score.weight"})
    if missing:
        raise ValueError(
            f"{where}: weights missing from the checkpoint: {missing[:8]}{' ...' if len(missing) > 8 else ''}"
        )
