"""The one name:start:end[:max_new_tokens] parser (`procrl.trainers.tasks.arguments.parse_eval_set`) behaves as the
two it replaced: task=math's `eval_sets` parser and the `frs_eval_set` check + parse of the FRS callback."""

from __future__ import annotations

import itertools

import pytest

from procrl.data_builders.datasets import parse_eval_set
from procrl.trainers.tasks.arguments import FRSCallbackArguments, MathTaskArguments


def _old_math(spec):  # trainers/tasks/arguments.py before the merge
    parts = spec.split(":")
    if not 1 <= len(parts) <= 4 or not parts[0]:
        raise ValueError(f"eval set {spec!r} must look like name:start:end:max_new_tokens, e.g. svamp:700:850:96")
    try:
        start = int(parts[1]) if len(parts) > 1 and parts[1] else 0
        end = int(parts[2]) if len(parts) > 2 and parts[2] else None
        tokens = int(parts[3]) if len(parts) > 3 and parts[3] else 256
    except ValueError as err:
        raise ValueError(f"eval set {spec!r}: start, end and max_new_tokens must be integers") from err
    return parts[0], start, end, tokens


def _old_frs(spec):  # FRSArguments.__post_init__ + add_frs_callback before the merge
    parts = spec.split(":")
    if not 1 <= len(parts) <= 3 or not parts[0] or not all(p.isdigit() for p in parts[1:] if p):
        raise ValueError(f"frs_eval_set must look like name:start:end, e.g. gsm8k:0:10; got {spec!r}")
    start = int(parts[1]) if len(parts) > 1 and parts[1] else 0
    end = int(parts[2]) if len(parts) > 2 and parts[2] else None
    return parts[0], start, end, None


def _outcome(func, spec):
    try:
        return func(spec)
    except ValueError as err:
        return ("ValueError", str(err))


PIECES = ["gsm8k", "svamp", "", "0", "10", "-1", " 3", "+2", "x", "1.5", "700"]
SPECS = sorted({":".join(p) for n in range(1, 6) for p in itertools.product(PIECES, repeat=n) if n < 4 or p[0]})


@pytest.mark.parametrize(("with_tokens", "old"), [(True, _old_math), (False, _old_frs)])
def test_one_parser_matches_both_old_ones(with_tokens, old):
    assert len(SPECS) > 1000
    for spec in SPECS:
        assert _outcome(lambda s: parse_eval_set(s, with_tokens=with_tokens), spec) == _outcome(old, spec), spec


def test_the_dataclasses_use_it():
    with pytest.raises(ValueError, match=r"frs_eval_set must look like name:start:end, e\.g\. gsm8k:0:10; got 'a:-1'"):
        FRSCallbackArguments(frs_eval_set="a:-1")
    with pytest.raises(ValueError, match="frs_eval_set"):
        FRSCallbackArguments(frs_eval_set="gsm8k:0:10:96")  # no token budget in the FRS form
    assert FRSCallbackArguments(frs_eval_set="svamp::3").frs_eval_set == "svamp::3"
    with pytest.raises(ValueError, match="start, end and max_new_tokens must be integers"):
        MathTaskArguments(eval_sets=["svamp:a"])
    with pytest.raises(ValueError, match="must look like name:start:end:max_new_tokens"):
        MathTaskArguments(eval_sets=["svamp:1:2:3:4"])
