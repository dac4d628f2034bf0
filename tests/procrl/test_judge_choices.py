"""Tests of procrl.judges.choices: closed-choice fields and the distribution over their values read from per-token
log-probs, against values computed by hand."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field, StrictBool, conint

from procrl.judges.base import reply_result
from procrl.judges.choices import (
    argmax_value,
    choice_probabilities,
    closed_choices,
    expected_value,
    value_key,
)

L = math.log


class Score(BaseModel):
    score: Annotated[int, Field(strict=True, ge=1, le=5)]


class Nli(BaseModel):
    label: Literal["entailment", "neutral", "contradiction"]


class Verdict(BaseModel):
    correct: StrictBool


class Wide(BaseModel):
    score: Annotated[int, Field(ge=1, le=12)]


def toks(*pieces) -> list:
    """Tokens from pieces: a str is a token with no alternatives; (text, [(alt, p), ...]) with probabilities."""
    out = []
    for piece in pieces:
        if isinstance(piece, str):
            out.append((piece, []))
        else:
            text, alts = piece
            out.append((text, [(a, L(p)) for a, p in alts]))
    return out


def close(dist: dict, expected: dict) -> None:
    assert list(dist) == list(expected)
    for key, p in expected.items():
        assert dist[key] == pytest.approx(p, abs=1e-9), (key, dist)


# --- closed_choices --------------------------------------------------------------------------------------------------


def test_closed_choices_kinds_and_orders():
    class Many(BaseModel):
        score: Annotated[int, Field(strict=True, ge=1, le=5)]
        label: Literal["entailment", "neutral", "contradiction"]
        flag: StrictBool
        plain_bool: bool
        exclusive: conint(gt=0, lt=4)  # 1, 2, 3
        even: int = Field(ge=0, le=6, multiple_of=2)
        mixed: Literal["yes", 1, True]
        reason: str = ""

    assert closed_choices(Many) == {
        "score": [1, 2, 3, 4, 5],
        "label": ["entailment", "neutral", "contradiction"],
        "flag": [False, True],
        "plain_bool": [False, True],
        "exclusive": [1, 2, 3],
        "even": [0, 2, 4, 6],
        "mixed": ["yes", 1, True],
    }


def test_closed_choices_leaves_out_open_fields():
    class Open(BaseModel):
        wide: Annotated[int, Field(ge=1, le=13)]  # 13 values
        lower_only: Annotated[int, Field(ge=1)]
        unbounded: int
        optional: Annotated[int, Field(ge=1, le=5)] | None = None
        optional_label: Literal["a", "b"] | None = None
        thirteen: Literal["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"]
        floats: Literal[0.5, 1.5]
        with_none: Literal["a", None]
        real: Annotated[float, Field(ge=0, le=1)]
        empty_range: Annotated[int, Field(ge=3, le=2)]
        text: str

    assert closed_choices(Open) == {}
    assert closed_choices(Wide) == {"score": list(range(1, 13))}  # 12 values: still closed


def test_value_key():
    assert [value_key(v) for v in ("neutral", 4, -1, True, False)] == ["neutral", "4", "-1", "true", "false"]


# --- choice_probabilities ---------------------------------------------------------------------------------------------


def test_single_digit_tokens():
    text = '{"score": 4}'
    tokens = toks('{"', "score", '":', " ", ("4", [("4", 0.5), ("3", 0.2), ("5", 0.1), ("x", 0.1)]), "}")
    probs = choice_probabilities(text, tokens, Score)
    # 'x' maps to no option; the rest renormalised over 0.8
    close(probs["score"], {"1": 0.0, "2": 0.0, "3": 0.25, "4": 0.625, "5": 0.125})
    assert expected_value(probs["score"]) == pytest.approx(3 * 0.25 + 4 * 0.625 + 5 * 0.125)
    assert argmax_value(probs["score"]) == "4"


def test_space_digit_tokens():
    # The tokenizer writes ' 4' (space + digit): the space lies before the value. A bare ' ' maps to every option
    # (not counted); '4' without the space is another valid path to 4 (whitespace is free in JSON).
    text = '{"score": 4}'
    alts = [(" 4", 0.4), (" 2", 0.2), (" ", 0.2), ("4", 0.1), ("\n", 0.05)]
    tokens = toks('{"score":', (" 4", alts), "}")
    probs = choice_probabilities(text, tokens, Score)
    close(probs["score"], {"1": 0.0, "2": 0.2 / 0.7, "3": 0.0, "4": 0.5 / 0.7, "5": 0.0})


def test_token_with_punctuation_before_value():
    # One token ': 3' holds the colon: alternatives must start with ':' (a '"' there is another key, not a score).
    text = '{"score": 3}'
    tokens = toks('{"score"', (": 3", [(": 3", 0.6), (": 1", 0.3), ('"', 0.1)]), "}")
    close(choice_probabilities(text, tokens, Score)["score"], {"1": 1 / 3, "2": 0.0, "3": 2 / 3, "4": 0.0, "5": 0.0})


def test_shared_first_token_labels():
    # '"' alone is shared by every label (all alternatives at that position map to all three or to one):
    # '"ent' as one token maps only to entailment and is counted with weight 1; at the next position the
    # label pieces are weighted by P('"') = 0.8 (chain rule), then renormalised.
    text = '{"label": "neutral"}'
    tokens = toks(
        '{"',
        "label",
        '":',
        (' "', [(' "', 0.8), (' "ent', 0.1), (" ", 0.1)]),
        ("neut", [("neut", 0.5), ("ent", 0.25), ("contr", 0.25)]),
        'ral"',
        "}",
    )
    ent, neut, contr = 0.1 + 0.8 * 0.25, 0.8 * 0.5, 0.8 * 0.25
    total = ent + neut + contr
    probs = choice_probabilities(text, tokens, Nli)
    close(probs["label"], {"entailment": ent / total, "neutral": neut / total, "contradiction": contr / total})
    assert argmax_value(probs["label"]) == "neutral"
    with pytest.raises(ValueError, match="numeric"):
        expected_value(probs["label"])


def test_token_covering_value_and_comma():
    class Two(BaseModel):
        score: Annotated[int, Field(ge=1, le=5)]
        reason: str

    text = '{"score": 2, "reason": "ok"}'
    alts = [("2,", 0.3), ("5,", 0.3), ("2", 0.2), ("3}", 0.1), ("22", 0.1)]  # '22' is no option
    tokens = toks('{"score": ', ("2,", alts), ' "reason": "ok"}')
    close(
        choice_probabilities(text, tokens, Two)["score"],
        {"1": 0.0, "2": 0.5 / 0.9, "3": 0.1 / 0.9, "4": 0.0, "5": 1 / 3},
    )


def test_options_diverging_later():
    # 1..12 with one-digit tokens: at the first digit '1' is consistent with 1, 10, 11, 12 (not counted there);
    # the walk goes on weighted by P('1') = 0.5; at the second position ',' decides 1, '0' 10, '2' 12.
    text = '{"score": 10}'
    tokens = toks(
        '{"score": ',
        ("1", [("1", 0.5), ("3", 0.3), ("12", 0.1), ("x", 0.1)]),
        ("0", [("0", 0.6), (",", 0.2), ("}", 0.1), ("2", 0.1)]),
        "}",
    )
    mass = {"1": 0.5 * 0.3, "3": 0.3, "10": 0.5 * 0.6, "12": 0.1 + 0.5 * 0.1}
    total = sum(mass.values())
    expected = {str(v): mass.get(str(v), 0.0) / total for v in range(1, 13)}
    close(choice_probabilities(text, tokens, Wide)["score"], expected)


def test_top_k_missing_options_get_zero():
    text = '{"score": 5}'
    tokens = toks('{"score": ', ("5", [("5", 0.9)]), "}")
    close(choice_probabilities(text, tokens, Score)["score"], {"1": 0.0, "2": 0.0, "3": 0.0, "4": 0.0, "5": 1.0})


def test_bool_field_and_masked_alternatives():
    text = '{"correct": false}'
    alts = [("false", L(0.3)), ("true", L(0.1)), ("tr", -math.inf), ("f", float("nan"))]
    tokens = [('{"correct": ', []), ("false", alts), ("}", [])]
    probs = choice_probabilities(text, tokens, Verdict)
    close(probs["correct"], {"false": 0.75, "true": 0.25})
    assert expected_value(probs["correct"]) == pytest.approx(0.25)  # P(true)


def test_prose_before_the_json_and_eos_after():
    text = 'Sure! {"oops"} Here: {"score": 1} Done.'
    tokens = toks('Sure! {"oops"} Here: {"score":', (" 1", [(" 1", 0.25), (" 2", 0.75)]), "} Done.", "<|im_end|>")
    close(choice_probabilities(text, tokens, Score)["score"], {"1": 0.25, "2": 0.75, "3": 0.0, "4": 0.0, "5": 0.0})


def test_misaligned_tokens_give_none():
    text = '{"score": 4}'
    assert choice_probabilities(text, toks('{"score": ', ("3", [("3", 0.9)]), "}"), Score) is None
    assert choice_probabilities(text, toks('{"score": 4'), Score) is None  # shorter than the text
    assert choice_probabilities(text, [], Score) is None


def test_nothing_readable():
    class Free(BaseModel):
        reason: str

    text = '{"score": 4}'
    assert choice_probabilities('{"reason": "x"}', toks('{"reason": "x"}'), Free) is None  # no closed field
    assert choice_probabilities(text, toks('{"score": ', ("4", [("x", 0.9)]), "}"), Score) is None  # nothing maps
    assert choice_probabilities("no json here", toks("no json here"), Score) is None


def test_several_fields_and_alias():
    class Both(BaseModel):
        score: Annotated[int, Field(ge=1, le=3, alias="Score")]
        correct: bool

    text = '{"Score": 3, "correct": true}'
    tokens = toks(
        '{"Score": ', ("3", [("3", 0.5), ("2", 0.5)]), ', "correct": ', ("true", [("true", 0.6), ("false", 0.2)]), "}"
    )
    probs = choice_probabilities(text, tokens, Both)
    close(probs["score"], {"1": 0.0, "2": 0.5, "3": 0.5})
    close(probs["correct"], {"false": 0.25, "true": 0.75})


def test_reply_result_carries_probs():
    text = '{"score": 4}'
    tokens = toks('{"score": ', ("4", [("4", 0.6), ("2", 0.2)]), "}")
    result = reply_result(text, Score, attempts=1, tokens=tokens)
    assert result.ok and result.followed_schema is True
    close(result.probs["score"], {"1": 0.0, "2": 0.25, "3": 0.0, "4": 0.75, "5": 0.0})


def test_reply_result_keeps_the_score_when_log_probs_are_unusable():
    # a log-prob of 800 overflows exp(): the probabilities are lost, the validated score is not
    tokens = [('{"score": ', []), ("4", [("4", 800.0), ("2", -1.0)]), ("}", [])]
    result = reply_result('{"score": 4}', Score, attempts=1, tokens=tokens)
    assert result.ok and result.value == Score(score=4) and result.probs is None


def test_followed_schema_is_unknown_for_an_unscored_reply():
    cut = reply_result('{"score": ', Score, attempts=1)  # a constrained reply cut by the token limit
    assert cut.unscored == "invalid_json" and cut.followed_schema is None
    extracted = reply_result('Sure: {"score": 2} done', Score, attempts=1)
    assert extracted.ok and extracted.followed_schema is False


# --- expected_value / argmax_value -----------------------------------------------------------------------------------


def test_expected_and_argmax():
    assert expected_value({"1": 0.5, "5": 0.5}) == pytest.approx(3.0)
    assert expected_value({"1": 1.0, "3": 1.0}) == pytest.approx(2.0)  # renormalised
    assert argmax_value({"a": 0.4, "b": 0.4, "c": 0.2}) == "a"  # first among ties
    with pytest.raises(ValueError):
        expected_value({"1": 0.0})
    with pytest.raises(ValueError):
        argmax_value({})
