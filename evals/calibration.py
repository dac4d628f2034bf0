"""Calibration of a policy on a ladder of difficulty levels: where it stands against each level, and which level is
its edge of competence (docs/architecture.md "Calibration"; the library of `procrl calibrate`).

For each level (a problem set `load_math_dataset` loads by name, e.g. `arith-ops2-d2-test`; problems `[start,
start + n_problems)`), `run_calibration` samples `num_samples` completions per problem at `temperature` and decodes
each problem once greedily, both through procrl's sample store (`procrl.evals.selection._decode`:
content-addressed shards in `<output_dir>/cache`, so a rerun with the same model, engine, prompts and settings reads
them instead of sampling; shard c of level L is sampled with seed `derive_seed(seed, "calibrate/L", c)`, the greedy
decodes with `derive_seed(0, "calibrate-greedy", c)`). Each completion is checked with the outcome check of `procrl select` (strict extraction,
`procrl.rewards.outcome.is_correct`) and, where the row carries `gold_steps`, labelled by the step oracle
(`procrl.rewards.oracle.oracle_labels`). Per level (`level_metrics`; c_i correct of n samples of problem i, over the
P problems whose gold answer parses):

- per-sample accuracy = (1/P) Σ_i c_i / n, with a percentile-bootstrap 95% interval over problems;
- greedy accuracy, with a Wilson 95% interval;
- pass@8 = (1/P) Σ_i [1 − C(n − c_i, 8) / C(n, 8)] (the unbiased estimator, Chen et al. 2021; needs n ≥ 8);
- mixed share at G: the share of problems whose FIRST G samples are neither all right nor all wrong: the GRPO groups
  of size G with a non-zero outcome advantage (the groups GRPO learns from);
- ProcessAcc: the mean oracle ProcessAcc over all samples, and over the greedy decodes (None without gold steps);
- the mean completion length in tokens (EOS included) and the share of samples without an extractable answer.

A level is an **edge level** when its per-sample accuracy lies in [edge_low, edge_high] and its pass@8 ≥ edge_pass
(`is_edge`; defaults 0.2, 0.6, 0.7): hard enough that the policy fails often, easy enough that 8 samples usually
hold a correct one, so most GRPO groups are mixed. When the policy's directory holds an SFT manifest (`sft.json`,
written by `procrl sft`), the result records its provenance (`sft_provenance`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from procrl.data_builders.arithmetic import is_arithmetic_spec, parse_arithmetic_spec
from procrl.data_builders.prompts import resolve_template
from procrl.evals.offline import OfflineSamplingConfig, Setup, load_rows, load_setup, sampling_params
from procrl.evals.selection import _decode, store_dir
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, bootstrap_mean_interval, pass_at_k, ratio, wilson_interval
from procrl.generation import SamplingParams, render_prompts
from procrl.models import resolve_model
from procrl.rewards.oracle import GOLD_STEPS_COLUMN, gold_steps_from_json, oracle_labels
from procrl.rewards.outcome import extract_answer, is_correct
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "DEFAULT_LEVELS",
    "PASS_K",
    "SFT_MANIFEST",
    "CalibrationConfig",
    "edge_levels",
    "is_edge",
    "check_completion",
    "level_metrics",
    "prompt_mismatch",
    "run_calibration",
    "sft_provenance",
]

PASS_K = 8  # the k of the pass@k the edge rule reads
DEFAULT_LEVELS = tuple(f"arith-ops{n}-d2-test" for n in (1, 2, 3, 4, 6, 8))
# the manifest `procrl sft` writes last into a checkpoint (procrl.trainers.sft_cache.MANIFEST, a layer above: named
# here to read it)
SFT_MANIFEST = "sft.json"


@dataclass
class CalibrationConfig(OfflineSamplingConfig):
    """Settings of `procrl calibrate` (parsed by `TrlParser` in `procrl/scripts/calibrate.py`): the policy, the
    engine and sampling of `OfflineSamplingConfig`, the levels, the samples per problem and the edge rule.

    Raises:
        ValueError: (on construction) no level or a level given twice, an arith level outside its grammar,
            `n_problems` < 1, `num_samples` < 8 (pass@8), `group_size` outside [2, num_samples], edge thresholds
            outside [0, 1] or `edge_low` > `edge_high`, `resamples` < 1, `dataset`, `end` or `split` given (the
            sets are `levels`), or a bad shared setting (`OfflineSamplingConfig`).
    """

    dataset: str | None = field(
        default=None, metadata={"help": "not used by procrl calibrate: the problem sets are --levels"}
    )
    end: int | None = field(
        default=None, metadata={"help": "not used by procrl calibrate: --n-problems per level from --start"}
    )
    start: int = field(default=0, metadata={"help": "first problem (0-based) of every level"})
    levels: list[str] = field(
        default_factory=lambda: list(DEFAULT_LEVELS),
        metadata={
            "help": "one problem set per difficulty level, easiest first (names load_math_dataset loads: arith sets "
            "as in procrl.data_builders.arithmetic.SPEC_GRAMMAR, e.g. arith-ops2-d2-test, or gsm8k, svamp, ...)"
        },
    )
    n_problems: int = field(default=64, metadata={"help": "problems per level, from --start"})
    num_samples: int = field(
        default=8, metadata={"help": "sampled completions per problem (>= 8: pass@8 needs them), at --temperature"}
    )
    group_size: int = field(
        default=8,
        metadata={
            "help": "G of the mixed-group share: a problem's first G samples form one GRPO group (2..num_samples)"
        },
    )
    edge_low: float = field(default=0.2, metadata={"help": "edge rule: lowest per-sample accuracy of an edge level"})
    edge_high: float = field(default=0.6, metadata={"help": "edge rule: highest per-sample accuracy of an edge level"})
    edge_pass: float = field(default=0.7, metadata={"help": "edge rule: lowest pass@8 of an edge level"})
    resamples: int = field(
        default=BOOTSTRAP_RESAMPLES, metadata={"help": "bootstrap resamples of the per-sample accuracy's 95%% interval"}
    )
    label: str | None = field(default=None, metadata={"help": "the policy's name in tables (--combine); None: --model"})
    output_dir: str = field(
        default="outputs/calibrate",
        metadata={"help": "where run.json, calibration.md, calibration.png, texts.jsonl and the sample store go"},
    )

    def problems(self) -> list[str]:
        problems = super().problems()
        for name, flag in (("dataset", "--levels"), ("end", "--n-problems"), ("split", "the level names")):
            if getattr(self, name) is not None:
                problems.append(f"--{name} is not used by procrl calibrate; give {flag} instead")
        if not self.levels:
            problems.append(
                f"--levels is empty; give one problem set per level, e.g. --levels {' '.join(DEFAULT_LEVELS[:3])}"
            )
        twice = sorted({x for x in self.levels if self.levels.count(x) > 1})
        if twice:
            problems.append(f"--levels names {twice} more than once; give each level once")
        for level in self.levels:
            if is_arithmetic_spec(level):
                try:
                    parse_arithmetic_spec(level)
                except ValueError as error:
                    problems.append(f"--levels {level}: {error}")
        if self.n_problems < 1:
            problems.append(f"--n-problems must be >= 1 (problems per level), got {self.n_problems}")
        if self.num_samples < PASS_K:
            problems.append(
                f"--num-samples {self.num_samples}: pass@{PASS_K} needs at least {PASS_K} samples per problem "
                f"(e.g. --num-samples {PASS_K})"
            )
        if not 2 <= self.group_size <= self.num_samples:
            problems.append(
                f"--group-size {self.group_size} must be in [2, --num-samples {self.num_samples}] (a group is a "
                f"problem's first G samples; e.g. --group-size {min(8, max(2, self.num_samples))})"
            )
        if not all(0.0 <= x <= 1.0 for x in (self.edge_low, self.edge_high, self.edge_pass)):
            problems.append(
                f"--edge-low {self.edge_low}, --edge-high {self.edge_high} and --edge-pass {self.edge_pass} must lie "
                "in [0, 1] (e.g. 0.2, 0.6, 0.7)"
            )
        elif self.edge_low > self.edge_high:
            problems.append(f"--edge-low {self.edge_low} > --edge-high {self.edge_high}; swap them")
        if self.resamples < 1:
            problems.append(f"--resamples must be >= 1, got {self.resamples}")
        if self.label is not None and not self.label.strip():
            problems.append("--label is empty; give a name or leave it out (the model name is used)")
        return problems

    @property
    def policy_label(self) -> str:
        """The policy's name in tables: `label`, else `model`."""
        return self.label or self.model


# ----------------------------------------------------------------------------------------------------------
# Pure functions: one completion, one level, the edge rule
# ----------------------------------------------------------------------------------------------------------


def check_completion(text: str, ids: list[int], row: dict, stops: list[int]) -> dict:
    """The record of one completion of problem `row`: `correct` (procrl's strict outcome check; None when the gold
    answer does not parse), `answered` (an answer can be extracted, strict), `num_tokens` (len(ids), EOS included),
    `truncated` (cut by the token budget: its last id is not in `stops`, the EOS and pad ids; `OracleStepRewards`'
    test, rewards/oracle/scorer.py), and the oracle's `process_acc` in [0, 1], `first_error` (index of the first written step that is not valid or
    not grounded; None: no error) and `steps` (written steps) where `row` has `gold_steps`, else None for all three
    (in a truncated completion a number at the very end is no step).

    >>> row = {"answer": "12", "question": "14 + 7, then - 9?", "gold_steps": '[[14,"+",7,21],[21,"-",9,12]]'}
    >>> r = check_completion("14 + 7 = 21. 21 - 9 = 12. The answer is 12.", [5, 6, 2], row, [2])
    >>> r["correct"], r["answered"], r["num_tokens"], r["truncated"], r["process_acc"], r["first_error"], r["steps"]
    (True, True, 3, False, 1.0, None, 2)
    """
    check = is_correct(text, row["answer"])
    truncated = bool(ids) and ids[-1] not in stops
    record: dict[str, Any] = {
        "correct": None if check is None else bool(check),
        "answered": extract_answer(text) is not None,
        "num_tokens": len(ids),
        "truncated": truncated,
        "process_acc": None,
        "first_error": None,
        "steps": None,
    }
    gold = row.get(GOLD_STEPS_COLUMN)
    if gold:
        labels = oracle_labels(text, row["question"], gold_steps_from_json(gold), truncated=truncated)
        record |= {"process_acc": labels.process_acc, "first_error": labels.first_error, "steps": len(labels.steps)}
    return record


def _mean(values: list[float]) -> float | None:
    return ratio(sum(values), len(values))


def level_metrics(
    problems: list[dict], *, group_size: int, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> dict[str, Any]:
    """The calibration metrics of one level (module docstring) from its per-problem records.

    Args:
        problems: one dict per problem: `samples` (n >= `PASS_K` `check_completion` records, the same n for every
            problem) and `greedy` (one such record).
        group_size: G of the mixed-group share (2 <= G <= n).
        resamples, seed: the bootstrap of the per-sample accuracy's interval (over problems).

    Returns:
        `problems`, `scored` (problems whose gold parses: the accuracies' denominators), `per_sample_accuracy` and
        `per_sample_ci` ([low, high]), `greedy_accuracy`, `greedy_correct`, `greedy_ci`, `pass@8`, `mixed_share`,
        `group_size`, `process_acc` and `greedy_process_acc` (over records with an oracle value), `mean_length`,
        `greedy_mean_length` (tokens), `no_answer_share` (over all samples). A value over nothing is None.

    Raises:
        ValueError: problems with different sample counts, fewer than `PASS_K` samples, or G outside [2, n].

    >>> s = lambda c: {"correct": c, "answered": True, "num_tokens": 4, "process_acc": None}
    >>> p = [{"samples": [s(i < 2) for i in range(8)], "greedy": s(True)},
    ...      {"samples": [s(False)] * 8, "greedy": s(False)}]
    >>> m = level_metrics(p, group_size=4)
    >>> m["per_sample_accuracy"], m["pass@8"], m["mixed_share"], m["greedy_accuracy"], m["process_acc"]
    (0.125, 0.5, 0.5, 0.5, None)
    """
    counts = {len(p["samples"]) for p in problems}
    if len(counts) > 1:
        raise ValueError(f"level_metrics: every problem needs the same number of samples, got {sorted(counts)}")
    n = counts.pop() if counts else PASS_K
    if n < PASS_K or not 2 <= group_size <= n:
        raise ValueError(f"level_metrics: need n >= {PASS_K} samples and 2 <= G <= n, got n={n}, G={group_size}")
    scored = [p for p in problems if all(s["correct"] is not None for s in p["samples"])]
    shares = [sum(s["correct"] for s in p["samples"]) / n for p in scored]
    passes = [pass_at_k(n, sum(s["correct"] for s in p["samples"]), PASS_K) for p in scored]
    mixed = [len({s["correct"] for s in p["samples"][:group_size]}) == 2 for p in scored]
    greedy = [p["greedy"]["correct"] for p in problems if p["greedy"]["correct"] is not None]
    samples = [s for p in problems for s in p["samples"]]
    greedy_ci = wilson_interval(sum(greedy), len(greedy))
    return {
        "problems": len(problems),
        "scored": len(scored),
        "per_sample_accuracy": _mean(shares),
        "per_sample_ci": list(bootstrap_mean_interval(shares, resamples=resamples, seed=seed)) if shares else None,
        "greedy_accuracy": _mean(greedy),
        "greedy_correct": sum(greedy),
        "greedy_ci": None if greedy_ci is None else list(greedy_ci),
        f"pass@{PASS_K}": _mean(passes),
        "mixed_share": _mean(mixed),
        "group_size": group_size,
        "process_acc": _mean([s["process_acc"] for s in samples if s["process_acc"] is not None]),
        "greedy_process_acc": _mean(
            [p["greedy"]["process_acc"] for p in problems if p["greedy"]["process_acc"] is not None]
        ),
        "mean_length": _mean([s["num_tokens"] for s in samples]),
        "greedy_mean_length": _mean([p["greedy"]["num_tokens"] for p in problems]),
        "no_answer_share": _mean([not s["answered"] for s in samples]),
    }


def is_edge(
    per_sample_accuracy: float | None, pass_at_8: float | None, *, low: float, high: float, min_pass: float
) -> bool:
    """The edge rule: low <= per-sample accuracy <= high and pass@8 >= min_pass; False when either is undefined.

    >>> is_edge(0.35, 0.9, low=0.2, high=0.6, min_pass=0.7), is_edge(0.35, 0.6, low=0.2, high=0.6, min_pass=0.7)
    (True, False)
    >>> is_edge(None, 0.9, low=0.2, high=0.6, min_pass=0.7)
    False
    """
    if per_sample_accuracy is None or pass_at_8 is None:
        return False
    return low <= per_sample_accuracy <= high and pass_at_8 >= min_pass


def edge_levels(levels: list[dict], *, low: float, high: float, min_pass: float) -> list[str]:
    """The names of the `levels` (each `{"level": name, "metrics": level_metrics(...)}`) that pass `is_edge`, in
    order; empty: none.

    >>> rows = [{"level": "a", "metrics": {"per_sample_accuracy": 0.9, "pass@8": 1.0}},
    ...         {"level": "b", "metrics": {"per_sample_accuracy": 0.4, "pass@8": 0.8}}]
    >>> edge_levels(rows, low=0.2, high=0.6, min_pass=0.7)
    ['b']
    """
    return [
        row["level"]
        for row in levels
        if is_edge(
            row["metrics"]["per_sample_accuracy"],
            row["metrics"][f"pass@{PASS_K}"],
            low=low,
            high=high,
            min_pass=min_pass,
        )
    ]


def sft_provenance(model: str) -> dict | None:
    """The SFT provenance of the policy `model` (a name `resolve_model` maps, or a directory): from the manifest
    `sft.json` that `procrl sft` writes into its checkpoints, `manifest` (its path), `key`, `base_model`, `dataset`,
    `prompt_template` (what it was trained on), `rows`, `steps`, `wall_time_s`, `train_loss` and `created_at` (None
    where the manifest lacks one: checkpoints from before the template was recorded have none). None when the
    directory has no manifest (not an SFT checkpoint, or a hub id); an unreadable manifest gives `manifest` and
    `error` (logged)."""
    path = Path(resolve_model(model)) / SFT_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        data, train = manifest.get("data") or {}, manifest.get("train") or {}
        return {
            "manifest": str(path),
            **{k: manifest.get(k) for k in ("key", "base_model", "dataset", "prompt_template")},
            "rows": data.get("rows"),
            **{k: train.get(k) for k in ("steps", "wall_time_s", "train_loss")},
            "created_at": manifest.get("created_at"),
        }
    except (OSError, ValueError, AttributeError) as error:
        logger.warning("calibrate: %s is not a readable SFT manifest (%s); provenance not recorded", path, error)
        return {"manifest": str(path), "error": f"{type(error).__name__}: {error}"}


def prompt_mismatch(sft: dict | None, prompt_template: str) -> str | None:
    """Why sampling an SFT checkpoint with `prompt_template` misjudges it, or None: the checkpoint's manifest
    (`sft_provenance`) records another template (names resolved, `resolve_template`). None when there is no manifest
    or it records no template (older checkpoints): nothing to compare.

        >>> prompt_mismatch({"key": "k1", "prompt_template": "{question}"}, "{question}") is None
        True
        >>> prompt_mismatch({"key": "k1", "prompt_template": "{question}"}, "one_shot")[:52]
        'the SFT checkpoint k1 was trained on prompt_template'
    """
    trained = (sft or {}).get("prompt_template")

    def resolved(template: Any) -> Any:
        return resolve_template(template) if isinstance(template, str) else template

    if trained is None or resolved(trained) == resolved(prompt_template):
        return None
    return (
        f"the SFT checkpoint {sft.get('key')} was trained on prompt_template {trained!r} but is sampled with "
        f"{prompt_template!r}: its accuracy here says little about the policy; pass --prompt-template {trained!r}"
    )


# ----------------------------------------------------------------------------------------------------------
# procrl calibrate
# ----------------------------------------------------------------------------------------------------------


def _level_config(config: CalibrationConfig, level: str) -> OfflineSamplingConfig:
    """`config`'s shared settings as a plain `OfflineSamplingConfig` of one level: problems `[start, start +
    n_problems)` of `level`."""
    shared = {f.name: getattr(config, f.name) for f in fields(OfflineSamplingConfig)}
    return OfflineSamplingConfig(**{**shared, "dataset": level, "end": config.start + config.n_problems})


def _calibrate_level(config: CalibrationConfig, s: Setup, level: str) -> tuple[dict, list[dict]]:
    """(the level's result, its texts rows) with `s` holding the level's problems and prompts."""
    t0 = time.perf_counter()
    params = sampling_params(config, config.max_new_tokens)
    ids, _, stats = _decode(
        config, s, s.prompt_ids, config.num_samples, params, (config.seed, f"calibrate/{level}"), f"{level} samples"
    )
    greedy_params = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=config.max_new_tokens)
    greedy_ids, _, greedy_stats = _decode(
        config, s, s.prompt_ids, 1, greedy_params, (0, "calibrate-greedy"), f"{level} greedy"
    )
    texts = s.tokenizer.batch_decode(ids, skip_special_tokens=True)
    greedy_texts = s.tokenizer.batch_decode(greedy_ids, skip_special_tokens=True)
    stops = sorted({*s.eos_ids, *([s.tokenizer.pad_token_id] if s.tokenizer.pad_token_id is not None else [])})
    n = config.num_samples
    problems, text_rows = [], []
    for p, row in enumerate(s.dataset):
        span = range(p * n, (p + 1) * n)
        problems.append(
            {
                "problem_id": row["problem_id"],
                "answer": row["answer"],
                "samples": [check_completion(texts[i], ids[i], row, stops) for i in span],
                "greedy": check_completion(greedy_texts[p], greedy_ids[p], row, stops),
            }
        )
        text_rows.append(
            {
                "level": level,
                "problem_id": row["problem_id"],
                "samples": [{"text": texts[i], "extracted": extract_answer(texts[i])} for i in span],
                "greedy": {"text": greedy_texts[p], "extracted": extract_answer(greedy_texts[p])},
            }
        )
    metrics = level_metrics(problems, group_size=config.group_size, resamples=config.resamples, seed=config.seed)
    edge = is_edge(
        metrics["per_sample_accuracy"],
        metrics[f"pass@{PASS_K}"],
        low=config.edge_low,
        high=config.edge_high,
        min_pass=config.edge_pass,
    )
    samples_info = {
        "files": [Path(f).name for f in stats.files],
        "from_cache": stats.generated_rows == 0,
        "greedy_files": [Path(f).name for f in greedy_stats.files],
        "greedy_from_cache": greedy_stats.generated_rows == 0,
    }
    result = {
        "level": level,
        "dataset": f"{level}[{config.start}:{config.start + len(s.dataset)}]",
        "metrics": metrics,
        "edge": edge,
        "samples": samples_info,
        "wall_time_s": time.perf_counter() - t0,
        "problems": problems,
    }
    return result, text_rows


def run_calibration(config: CalibrationConfig) -> dict:
    """Calibrate `config.model` on every level of `config.levels` (module docstring); returns the result.

    The policy's engine is built once (`load_setup`) and serves every level. The result (json-safe; `procrl
    calibrate` keeps it in run.json, the texts in texts.jsonl): `command` ("calibrate"), `model`, `label`,
    `settings` (every field), `sft` (`sft_provenance`, None without a manifest), `prompt_mismatch` (`prompt_mismatch`:
    the checkpoint was trained on another prompt template, also logged as a warning; None otherwise), `levels` (one
    per level, in order: `level`, `dataset` (the slice), `metrics` (`level_metrics`), `edge`, `samples` (the shard files of the samples
    and greedy decodes in the store, and `from_cache` / `greedy_from_cache`: nothing was generated), `wall_time_s`,
    `problems` (per problem: `problem_id`, `answer`, `samples` and `greedy` as `check_completion` records)),
    `edge_levels` (names), `edge_rule`, `engine` (the store's engine key), `cache_dir`, `from_cache` (every level
    read from the store), `wall_time_s` (setup and total) and `texts` (per problem: level, id, every completion's
    text and extracted answer; popped by the command into texts.jsonl).

    Raises:
        ValueError: a level that cannot be loaded (an unknown set, fewer problems than `start + n_problems`).
    """
    sft = sft_provenance(config.model)
    mismatch = prompt_mismatch(sft, config.prompt_template)
    if mismatch:
        logger.warning("calibrate: %s", mismatch)
    t0 = time.perf_counter()
    setup = load_setup(_level_config(config, config.levels[0]))
    t_setup = time.perf_counter() - t0
    levels, texts = [], []
    for i, level in enumerate(config.levels):
        if i:
            rows = load_rows(_level_config(config, level))
            prompts = render_prompts(setup.tokenizer, [row["prompt"] for row in rows])
            setup = replace(setup, dataset=rows, prompt_ids=prompts)
        result, text_rows = _calibrate_level(config, setup, level)
        levels.append(result)
        texts.extend(text_rows)
        logger.info("calibrate: %s done in %.1f s (edge: %s)", level, result["wall_time_s"], result["edge"])
    rule = {"low": config.edge_low, "high": config.edge_high, "min_pass": config.edge_pass}
    return {
        "command": "calibrate",
        "model": config.model,
        "label": config.policy_label,
        "settings": config.settings(),
        "sft": sft,
        "prompt_mismatch": mismatch,
        "levels": levels,
        "edge_levels": edge_levels(levels, **rule),
        "edge_rule": {**rule, "k": PASS_K},
        "engine": setup.engine.cache_key(),
        "cache_dir": str(store_dir(config.output_dir)),
        "from_cache": all(r["samples"]["from_cache"] and r["samples"]["greedy_from_cache"] for r in levels),
        "wall_time_s": {"setup": t_setup, "total": time.perf_counter() - t0},
        "texts": texts,
    }
