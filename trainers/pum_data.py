"""PUM-Math pairs for `RewardTrainer`: load a pair set, hold out whole problems, render and tokenize every prefix.

Columns of a pair set: `prompt` = problem text, `chosen`/`rejected` = prefix texts, `margin` = ΔG >= 0,
`pair_type`, `problem_id`. Every prefix is rendered with `procrl.rewards.pum.render_prefix` (the same function the
scorer uses; it truncates to `max_length - 1` and counts what it cut), and pairs that are identical after rendering
are dropped (counted in `PairStats`). Why the ids are made here and not by TRL: `procrl.trainers.pum_training`.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets
from tqdm.auto import tqdm

from procrl.data_builders.datasets import builtin_data_file
from procrl.rewards.pum import render_prefix, render_prompt_ids
from procrl.rewards.steps import DEFAULT_SEPARATOR
from procrl.utils import get_logger, prompt_to_text

logger = get_logger(__name__)

__all__ = [
    "BUILD_COMMAND",
    "BUILTIN_PAIRS",
    "REQUIRED_COLUMNS",
    "PairStats",
    "PairsNotFoundError",
    "load_pairs",
    "split_by_problem",
    "tokenize_pairs",
]

REQUIRED_COLUMNS = ("prompt", "chosen", "rejected", "margin", "pair_type", "problem_id")
# Pair sets shipped as package data of procrl.data_builders (data/SOURCE.md gives the command that built each one).
BUILTIN_PAIRS = {"pum_math_gsm8k_cpu": "pum_math_gsm8k_cpu.jsonl"}
BUILD_COMMAND = "procrl build-pum-data --config configs/pum/build_gsm8k_cpu.yaml"
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


class PairsNotFoundError(FileNotFoundError):
    """A PUM-Math pair set that is neither a local path, a shipped set nor loadable from the Hub."""


def load_pairs(name_or_path: str, split: str = "train"):
    """Load a PUM-Math pair set as a `datasets.Dataset` and check its columns.

    Args:
        name_or_path: a `save_to_disk` directory (Dataset or DatasetDict), a .parquet/.jsonl/.json/.csv file, a
            directory of data files, a shipped set (`BUILTIN_PAIRS`; a local path of the same name wins), or a
            Hub dataset id.
        split: split to read from a DatasetDict, a data directory or the Hub (files have one split).

    Raises:
        PairsNotFoundError: no such local path or shipped set, and the Hub did not give it either (the message is
            one line naming the path and the builder command).
        ValueError: an unsupported file type, a missing split, or missing columns (REQUIRED_COLUMNS).
    """
    path = Path(name_or_path)
    if not path.exists() and name_or_path in BUILTIN_PAIRS:
        try:
            path = Path(str(builtin_data_file(BUILTIN_PAIRS[name_or_path])))
        except FileNotFoundError as error:  # a broken install: one line, like any other missing pair set
            raise PairsNotFoundError(str(error).replace("\n", " ")) from error
    if path.is_dir() and any(
        (path / marker).is_file() for marker in ("dataset_info.json", "state.json", "dataset_dict.json")
    ):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(f"{name_or_path!r} has splits {list(loaded)}, not {split!r}: set dataset_split")
            loaded = loaded[split]
    elif path.is_file():
        builder = _FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(f"Cannot read {name_or_path!r}: use one of {sorted(_FILE_BUILDERS)} or a directory")
        loaded = datasets.load_dataset(builder, data_files=str(path), split="train")
    else:
        where = f"No PUM-Math pairs at {name_or_path!r} (no such file or directory, not a shipped set {sorted(BUILTIN_PAIRS)}"
        how = (
            f"build them with `{BUILD_COMMAND}` and pass its dataset/ folder, or leave dataset_name at its default "
            "(the shipped pairs)"
        )
        text = str(name_or_path)
        if text.startswith((".", "/", "~")) or text.count("/") > 1 or path.suffix.lower() in _FILE_BUILDERS:
            raise PairsNotFoundError(f"{where}); {how}.")  # a local path, not a Hub id ("name" or "owner/name")
        try:
            loaded = datasets.load_dataset(text, split=split)
        except (FileNotFoundError, ConnectionError) as error:  # DatasetNotFoundError is a FileNotFoundError
            raise PairsNotFoundError(f"{where}, not loadable from the Hub: {type(error).__name__}); {how}.") from error
    missing = [c for c in REQUIRED_COLUMNS if c not in loaded.column_names]
    if missing:
        raise ValueError(
            f"{name_or_path!r} lacks the PUM-Math columns {missing} (has {loaded.column_names}); build the pairs "
            "with the PUM-Math builder or rename the columns."
        )
    return loaded


def split_by_problem(pairs, eval_fraction: float, seed: int = 0):
    """Split pairs into (train, eval) by `problem_id`: a problem's pairs all land on one side.

    `round(eval_fraction * n_problems)` problems (at least 1 when `eval_fraction > 0`) chosen by a seeded shuffle of
    the sorted ids are held out; row order is kept within each side.

    Raises:
        ValueError: fewer than 2 problems while a held-out split is requested.
    """
    ids = sorted({str(p) for p in pairs["problem_id"]})
    if eval_fraction <= 0:
        return pairs, pairs.select([])
    if len(ids) < 2:
        raise ValueError(f"Cannot hold out problems from {len(ids)} problem(s); set eval_fraction: 0 or add data")
    random.Random(seed).shuffle(ids)
    n_eval = min(max(1, round(eval_fraction * len(ids))), len(ids) - 1)
    held_out = set(ids[:n_eval])
    flags = [str(p) in held_out for p in pairs["problem_id"]]
    train = pairs.select([i for i, f in enumerate(flags) if not f])
    evaluation = pairs.select([i for i, f in enumerate(flags) if f])
    return train, evaluation


@dataclass
class PairStats:
    """Counts from `tokenize_pairs` (one set of pairs). Tokens are model tokens."""

    pairs_in: int = 0
    pairs_kept: int = 0
    dropped_ties: int = 0  # `is_tie` rows of the builder (ΔG = 0, order arbitrary): no Bradley-Terry target
    dropped_identical_text: int = 0  # chosen == rejected before rendering
    dropped_identical_after_truncation: int = 0  # different texts, same ids after the right cut
    dropped_prompt_too_long: int = 0  # the rendered problem alone exceeds max_length - 1
    dropped_ends_with_pad: int = 0  # the cut ends right after a pad/EOS token (transformers would pool elsewhere)
    truncated_sequences: int = 0  # chosen or rejected inputs that were cut (each side counts)
    truncated_tokens: int = 0  # prefix tokens cut, summed over all kept and dropped inputs
    max_input_tokens: int = 0  # longest kept input
    # kept inputs with the tokenizer's unknown token (a word-level tokenizer, e.g. the arith organism's, maps a text
    # it cannot split into its words, such as two fused space-less words, to it); kept, counted so it is seen
    inputs_with_unk: int = 0
    kept_by_type: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tokenize_pairs(
    pairs,
    tokenizer: Any,
    max_length: int | None,
    *,
    separator: str = DEFAULT_SEPARATOR,
    margin_scale: float = 1.0,
    progress: bool = True,
):
    """Render and tokenize PUM pairs for `RewardTrainer` with `render_prefix` (the scorer's renderer).

    Args:
        pairs: a Dataset with REQUIRED_COLUMNS (`prompt` is the problem text, or chat messages whose last user
            message is the problem); rows with a true `is_tie` (the builder's optional ΔG = 0 pairs) are dropped
            and counted, since a tie has no preferred side (docs/architecture.md "PUM"'s optional tie regulariser is not implemented).
        tokenizer: the model's tokenizer (chat template, pad token set).
        max_length: `RewardConfig.max_length`; inputs keep at most `max_length - 1` tokens (None: no cut).
        separator: step separator for splitting prefixes into tokenization pieces.
        margin_scale: the `margin` column becomes `margin_scale * margin`; 0 leaves the column out.

    Returns:
        (dataset, stats): columns `chosen_ids`, `rejected_ids`, [`margin`], `pair_type`, `problem_id`,
        `chosen_prefix_tokens`, `rejected_prefix_tokens` (prefix lengths in tokens before truncation, for the
        length baseline), plus `PairStats`.

    Raises:
        ValueError: a non-finite or negative margin, or an empty chosen/rejected text.
    """
    stats = PairStats(pairs_in=len(pairs))
    rows: dict[str, list] = defaultdict(list)
    prompt_cache: dict[str, list[int]] = {}
    unk_id = getattr(tokenizer, "unk_token_id", None)
    for i, ex in enumerate(tqdm(pairs, desc="procrl: rendering PUM pairs", disable=not progress)):
        margin = float(ex["margin"])
        if not math.isfinite(margin) or margin < 0:
            raise ValueError(
                f"pair {i} (problem {ex['problem_id']}): margin must be finite and >= 0, got {ex['margin']}"
            )
        if ex.get("is_tie"):
            stats.dropped_ties += 1
            continue
        chosen, rejected = ex["chosen"], ex["rejected"]
        if not isinstance(chosen, str) or not isinstance(rejected, str) or not chosen.strip() or not rejected.strip():
            raise ValueError(
                f"pair {i} (problem {ex['problem_id']}): chosen and rejected must be non-empty prefix texts"
            )
        if chosen == rejected:
            stats.dropped_identical_text += 1
            continue
        problem = prompt_to_text(ex["prompt"])
        try:
            if problem not in prompt_cache:
                prompt_cache[problem] = render_prompt_ids(tokenizer, problem)
            sides = [
                render_prefix(
                    tokenizer, problem, text, max_length, separator=separator, prompt_ids=prompt_cache[problem]
                )
                for text in (chosen, rejected)
            ]
        except ValueError as err:
            if "never cut" not in str(err):
                raise
            stats.dropped_prompt_too_long += 1
            continue
        for side in sides:
            stats.truncated_sequences += side.truncated_tokens > 0
            stats.truncated_tokens += side.truncated_tokens
        c, r = sides
        if c.input_ids == r.input_ids:
            stats.dropped_identical_after_truncation += 1
            continue
        if tokenizer.pad_token_id in (c.input_ids[-1], r.input_ids[-1]):
            stats.dropped_ends_with_pad += 1
            continue
        if unk_id is not None:
            stats.inputs_with_unk += (unk_id in c.input_ids) + (unk_id in r.input_ids)
        rows["chosen_ids"].append(c.input_ids)
        rows["rejected_ids"].append(r.input_ids)
        if margin_scale > 0:
            rows["margin"].append(margin_scale * margin)
        rows["pair_type"].append(str(ex["pair_type"]))
        rows["problem_id"].append(str(ex["problem_id"]))
        rows["chosen_prefix_tokens"].append(len(c.input_ids) + c.truncated_tokens - c.prompt_length)
        rows["rejected_prefix_tokens"].append(len(r.input_ids) + r.truncated_tokens - r.prompt_length)
        stats.max_input_tokens = max(stats.max_input_tokens, len(c.input_ids), len(r.input_ids))
        stats.kept_by_type[str(ex["pair_type"])] = stats.kept_by_type.get(str(ex["pair_type"]), 0) + 1
    stats.pairs_kept = len(rows["chosen_ids"])
    dropped = stats.pairs_in - stats.pairs_kept
    if stats.inputs_with_unk:
        logger.warning(
            "PUM pairs: %d rendered inputs hold the tokenizer's unknown token (texts it cannot split into its "
            "vocabulary; kept)",
            stats.inputs_with_unk,
        )
    if dropped or stats.truncated_sequences:
        logger.info("PUM pairs: kept %d of %d; %s", stats.pairs_kept, stats.pairs_in, stats.to_dict())
    columns = [
        "chosen_ids",
        "rejected_ids",
        *(["margin"] if margin_scale > 0 else []),
        "pair_type",
        "problem_id",
        "chosen_prefix_tokens",
        "rejected_prefix_tokens",
    ]
    return datasets.Dataset.from_dict({c: rows[c] for c in columns}), stats
