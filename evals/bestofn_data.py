"""Reading `procrl select` reports into one sample set (`load_reports`; the curves: `procrl.evals.bestofn`).

A select report (`procrl.evals.selection.run_select`) holds `problems[p]["candidates"][i]` with `text`,
`extracted`, `correct` (None: unparseable gold), `num_tokens` and `score_<scorer>` columns (None: no score), and
optionally a per-problem `greedy` entry (`{"text", "extracted", "correct"}`). Several reports over the SAME samples
(e.g. one per scorer run) merge into one `Samples`: their score columns side by side.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BASELINES", "SCORE_PREFIX", "SCORE_TOLERANCE", "Problem", "Samples", "load_reports"]

BASELINES = ("greedy", "random", "majority", "longest", "pass@k")  # the rows besides the score columns
SCORE_PREFIX = "score_"
SCORE_TOLERANCE = 1e-6  # the same score column in two reports must agree within this (absolute)


@dataclass
class Problem:
    """One problem's n candidates (original order): `correct` (n,) bools (None: unparseable gold; `load_reports`
    leaves such problems out), `extracted` (n,) answers (None: none), `num_tokens` (n,) token counts, `scores`
    {name: (n,) floats or None}, `greedy` the greedy answer's correctness (None: no greedy entry; a greedy entry
    whose `correct` is not true counts as wrong)."""

    problem_id: str
    texts: list[str]
    correct: list[bool]
    extracted: list[str | None]
    num_tokens: list[int]
    scores: dict[str, list[float | None]] = field(default_factory=dict)
    greedy: bool | None = None
    greedy_text: str | None = None


@dataclass
class Samples:
    """The merged sample set of one or more select reports: the `problems` with a parseable gold (each with `n`
    candidates), how many were left out for an unparseable gold, and the report paths."""

    problems: list[Problem]
    n: int
    unparseable_gold: int
    reports: list[str]

    @property
    def score_names(self) -> list[str]:
        """The score columns' names (without `score_`), in the order the reports introduce them."""
        return list(self.problems[0].scores) if self.problems else []


def load_reports(paths: Sequence[str | Path]) -> Samples:
    """Read one or more `procrl select` reports over the SAME samples and merge their `score_*` columns.

    Args:
        paths: JSON reports of `procrl select` (`run_select`): `problems[p]["candidates"][i]` with `text`,
            `extracted`, `correct`, `num_tokens` and `score_<name>` (None: no score); an optional `greedy` entry.

    Returns:
        `Samples`; problems whose candidates' `correct` is None (unparseable gold) are left out and counted. A score
        that is NaN or infinite is kept as None (never picked).

    Raises:
        FileNotFoundError: a path that is not a file.
        ValueError: no path; a file that is not JSON or not a select report (no `problems` list of candidates with
            those keys); problems with different numbers of candidates; reports that differ in problem count, ids or
            order, candidate texts or correctness (the message names the first difference); the same score column
            disagreeing by more than 1e-6 (or scored in one and None in the other); no problem with a parseable gold.
    """
    if not paths:
        raise ValueError("give at least one procrl select report (REPORT.json)")
    merged: list[Problem] | None = None
    first = str(paths[0])
    for path in paths:
        problems = _read_report(Path(path))
        if merged is None:
            merged = problems
        else:
            _merge_into(merged, problems, first, str(path))
    assert merged is not None
    counts = {len(p.texts) for p in merged}
    if len(counts) > 1:
        raise ValueError(f"{first}: problems have different numbers of candidates {sorted(counts)}; need one n")
    kept = [p for p in merged if all(c is not None for c in p.correct)]
    if not kept:
        raise ValueError(f"{first}: no problem with a parseable gold answer (every `correct` is None)")
    names = list(dict.fromkeys(name for p in merged for name in p.scores))
    for problem in kept:  # every problem gets every column (None where a report had none)
        problem.scores = {name: problem.scores.get(name, [None] * len(problem.texts)) for name in names}
    return Samples(kept, counts.pop(), len(merged) - len(kept), [str(p) for p in paths])


def _read_report(path: Path) -> list[Problem]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such report file")
    try:
        report = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not JSON ({error}); expected a procrl select report") from error
    if not isinstance(report, dict) or not isinstance(report.get("problems"), list) or not report["problems"]:
        raise ValueError(f"{path}: not a procrl select report (no non-empty `problems` list)")
    if report.get("command", "select") != "select":
        raise ValueError(f"{path}: a {report['command']!r} report, not a procrl select report")
    return [_problem(path, p, row) for p, row in enumerate(report["problems"])]


def _problem(path: Path, index: int, row: object) -> Problem:
    where = f"{path}: problem {index}"
    if not isinstance(row, dict) or not isinstance(row.get("candidates"), list) or not row["candidates"]:
        raise ValueError(f"{where} has no `candidates` list; not a procrl select report")
    candidates = row["candidates"]
    for i, c in enumerate(candidates):
        missing = [k for k in ("text", "extracted", "correct", "num_tokens") if not isinstance(c, dict) or k not in c]
        if missing:
            raise ValueError(f"{where} candidate {i} lacks {missing}; not a procrl select report")
    names = list(dict.fromkeys(k for c in candidates for k in c if k.startswith(SCORE_PREFIX)))
    scores = {}
    for key in names:
        name = key.removeprefix(SCORE_PREFIX)
        name = key if name in BASELINES or not name else name
        scores[name] = [_score(where, i, key, c.get(key)) for i, c in enumerate(candidates)]
    greedy, greedy_text = row.get("greedy"), None
    if isinstance(greedy, dict):
        greedy, greedy_text = greedy.get("correct") is True, greedy.get("text")
    else:
        greedy = None
    lengths = [c.get("num_tokens") for c in candidates]
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in lengths):
        raise ValueError(f"problem {index}: every candidate needs an integer num_tokens >= 0, got {lengths}")
    return Problem(
        problem_id=str(row.get("problem_id", index)),
        texts=[str(c["text"]) for c in candidates],
        correct=[None if c["correct"] is None else bool(c["correct"]) for c in candidates],
        extracted=[None if c["extracted"] is None else str(c["extracted"]) for c in candidates],
        num_tokens=lengths,
        scores=scores,
        greedy=greedy,
        greedy_text=greedy_text,
    )


def _score(where: str, i: int, key: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} candidate {i}: {key} = {value!r} is not a number or null")
    return float(value) if math.isfinite(value) else None


def _merge_into(merged: list[Problem], other: list[Problem], first: str, path: str) -> None:
    """Add `other`'s score columns (and greedy entries) to `merged` after checking both hold the same samples."""
    if len(other) != len(merged):
        raise ValueError(f"{path} has {len(other)} problems, {first} has {len(merged)}; not the same samples")
    for p, (mine, theirs) in enumerate(zip(merged, other, strict=True)):
        if mine.problem_id != theirs.problem_id:
            raise ValueError(f"{path}: problem {p} is {theirs.problem_id!r}, in {first} {mine.problem_id!r}")
        where = f"{path}: problem {mine.problem_id!r}"
        if len(mine.texts) != len(theirs.texts):
            raise ValueError(f"{where} has {len(theirs.texts)} candidates, {len(mine.texts)} in {first}")
        for i, (a, b) in enumerate(zip(mine.texts, theirs.texts, strict=True)):
            if a != b:
                raise ValueError(f"{where} candidate {i}: its text differs from {first}'s; not the same samples")
        if mine.correct != theirs.correct:
            i = next(i for i, (a, b) in enumerate(zip(mine.correct, theirs.correct, strict=True)) if a != b)
            raise ValueError(f"{where} candidate {i}: correct = {theirs.correct[i]}, {mine.correct[i]} in {first}")
        for name, values in theirs.scores.items():
            if name not in mine.scores:
                mine.scores[name] = values
                continue
            for i, (a, b) in enumerate(zip(mine.scores[name], values, strict=True)):
                if (a is None) != (b is None) or (a is not None and abs(a - b) > SCORE_TOLERANCE):
                    raise ValueError(f"{where} candidate {i}: score_{name} = {b}, {a} in {first} (tolerance 1e-6)")
        if theirs.greedy is not None:
            if mine.greedy is not None and mine.greedy_text != theirs.greedy_text:
                raise ValueError(f"{where}: the greedy text differs from {first}'s")
            mine.greedy, mine.greedy_text = theirs.greedy, theirs.greedy_text
