"""SFT on multi-turn search episodes (docs/architecture.md "World episodes"): the rows of a world's `episodes.jsonl`
(`procrl.data_builders.world_episodes`) as TRL token ids, with the environment's `<information>` blocks out of the
loss, as `env_mask` keeps them out of GRPO's (`procrl.trainers.search_env`).

Why token ids and not prompt-completion text: TRL's completion-only loss masks the prompt only (trl 1.16.0,
trl/trainer/sft_trainer.py:1367, `completion_mask` = 0 over the prompt, 1 over the whole completion), and
`assistant_only_loss` masks by chat turns (:415), while an episode's information blocks lie INSIDE the one assistant
turn. So each row is tokenized here as a rollout is built (`procrl.trainers.search_turns.run_episodes`):

- the prompt through the chat template with the generation prompt (`procrl.generation.render_prompts`, what
  `ProcessRollout` renders), mask 0;
- each segment on its own (`tokenizer(text, add_special_tokens=False)`): model turns with mask 1 (0 for a gap turn
  written with `loss: false`), information blocks with mask 0 (the environment tokenizes them alone, too);
- EOS, mask 1 (the environment appends it after `</answer>`; trained here so the policy also stops without the
  stop strings).

The rows go to `SFTTrainer` pre-tokenized: `input_ids` and `assistant_masks`. TRL skips its own tokenization for a
set with `input_ids` (sft_trainer.py:1248, 1273) and builds `labels` from `assistant_masks`, which applies whatever
`completion_only_loss` is (:1408-1431: label = -100 where the mask is 0), then truncates to `max_length` (:1436-1463).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets

from procrl.generation import render_prompts
from procrl.utils import read_jsonl

__all__ = ["episode_examples", "is_episode_file", "tokenize_episode", "tokenize_episodes"]


def is_episode_file(name: str) -> bool:
    """Whether `name` is a JSONL file whose first row has `segments` (an episodes file of `procrl world episodes`).

    >>> is_episode_file("gsm8k")
    False
    """
    path = Path(name)
    if path.suffix != ".jsonl" or not path.is_file():
        return False
    with path.open(encoding="utf-8") as handle:
        first = handle.readline()
    try:
        return "segments" in json.loads(first)
    except json.JSONDecodeError:
        return False


def episode_examples(path: str, start: int = 0, end: int | None = None) -> datasets.Dataset:
    """Rows [start, end) of an episodes file as `prompt` (chat messages) and `completion` (the segments
    [{text, env, loss}]): the pair `procrl.trainers.sft_cache.data_digest` hashes for the cache key.

    Raises:
        ValueError: a bad row range, or a row without a prompt or a model segment.
    """
    rows = read_jsonl(Path(path))
    end = len(rows) if end is None else end
    if not 0 <= start <= end <= len(rows):
        raise ValueError(f"{path}: rows [{start}, {end}) are outside its {len(rows)} episodes")
    picked = rows[start:end]
    for i, row in enumerate(picked, start=start):
        segments = row.get("segments") or []
        if not row.get("prompt") or not any(not s.get("env") and s.get("text") for s in segments):
            raise ValueError(f"{path}: row {i} needs a prompt and at least one model segment; rewrite the file with "
                             "procrl world episodes")  # fmt: skip
    return datasets.Dataset.from_dict(
        {"prompt": [r["prompt"] for r in picked], "completion": [r["segments"] for r in picked]}
    )


def tokenize_episode(tokenizer: Any, prompt: list[Mapping], segments: list[Mapping]) -> dict[str, list[int]]:
    """`input_ids` and `assistant_masks` of one episode (module docstring): 1 = a policy token in the loss."""
    ids = list(render_prompts(tokenizer, [prompt])[0])
    mask = [0] * len(ids)
    for segment in segments:
        piece = tokenizer(segment["text"], add_special_tokens=False)["input_ids"]
        trained = not segment.get("env") and segment.get("loss", True)
        ids += piece
        mask += [int(trained)] * len(piece)
    ids.append(int(tokenizer.eos_token_id))
    mask.append(1)
    return {"input_ids": ids, "assistant_masks": mask}


def tokenize_episodes(examples: datasets.Dataset, tokenizer: Any) -> datasets.Dataset:
    """`tokenize_episode` of every row of `episode_examples`: a pre-tokenized set for `SFTTrainer`."""
    rows = [tokenize_episode(tokenizer, p, c) for p, c in zip(examples["prompt"], examples["completion"], strict=True)]
    return datasets.Dataset.from_dict(
        {"input_ids": [r["input_ids"] for r in rows], "assistant_masks": [r["assistant_masks"] for r in rows]}
    )
