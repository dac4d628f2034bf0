"""Choice probabilities (core layer): a judge's distribution over the allowed values of a closed-choice field,
read from the per-token log-probs of its reply (G-Eval style).

A closed-choice field is a top-level field of the reply's pydantic model whose allowed values can be listed: a
`Literal[...]` of str/int/bool values, a `bool`, or an `int` bounded on both sides (`ge`/`le` or `gt`/`lt`),
with at most `MAX_CHOICES` values (`closed_choices`). For such a field, `choice_probabilities` finds where the reply
wrote its value, walks the generated tokens from there and reads, from each position's top alternatives, the
probability of every allowed value; `expected_value` and `argmax_value` summarise the distribution.

Token contract (`TokenAlternatives`): one entry per generated token of the reply, in order,
`(token_text, [(alternative_text, logprob), ...])`: `token_text` is the decoded text of the chosen token (the
concatenation of all token texts is the reply text), the list holds the top-k alternatives at that position with
their log-probabilities (natural log, the backend's distribution at that step; the chosen token normally among
them). Under a grammar, the alternatives are those the mask left (masked tokens absent, or -inf).
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel

from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "MAX_CHOICES",
    "TokenAlternatives",
    "argmax_value",
    "choice_probabilities",
    "closed_choices",
    "expected_value",
    "value_key",
]

# Per generated token: (token_text, [(alternative_text, logprob), ...]) with the top alternatives at that position.
TokenAlternatives = list[tuple[str, list[tuple[str, float]]]]

# The most allowed values a closed-choice field may have (a 1-10 scale fits; an unbounded int does not).
MAX_CHOICES = 12

# JSON whitespace, and the characters that may follow a complete JSON value inside an object or array.
_WS = " \t\n\r"
_AFTER_VALUE = set(_WS + ",}]")


def value_key(value: Any) -> str:
    """The string key of an allowed value in a distribution: a str itself, any other value as JSON.

    >>> value_key("entailment"), value_key(4), value_key(True)
    ('entailment', '4', 'true')
    """
    return value if isinstance(value, str) else json.dumps(value)


def _literal(value: Any) -> str:
    """The value as a model writes it in a JSON reply (strings quoted, non-ASCII kept as is)."""
    return json.dumps(value, ensure_ascii=False)


def _int_range(metadata: list[Any]) -> list[int] | None:
    low = high = None
    step = 1
    for item in metadata:
        bounds = []
        if isinstance(item, annotated_types.Interval):  # conint(...) gives one Interval
            bounds = [("ge", item.ge), ("gt", item.gt), ("le", item.le), ("lt", item.lt)]
        elif isinstance(item, annotated_types.Ge):
            bounds = [("ge", item.ge)]
        elif isinstance(item, annotated_types.Gt):
            bounds = [("gt", item.gt)]
        elif isinstance(item, annotated_types.Le):
            bounds = [("le", item.le)]
        elif isinstance(item, annotated_types.Lt):
            bounds = [("lt", item.lt)]
        elif isinstance(item, annotated_types.MultipleOf):
            step = item.multiple_of
        for kind, bound in bounds:
            if bound is None:
                continue
            if kind in ("ge", "gt"):
                first = math.ceil(bound) if kind == "ge" else math.floor(bound) + 1
                low = first if low is None else max(low, first)
            else:
                last = math.floor(bound) if kind == "le" else math.ceil(bound) - 1
                high = last if high is None else min(high, last)
    if low is None or high is None or high < low or high - low + 1 > 64 * MAX_CHOICES:
        return None
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        return None  # a float or odd multiple_of: not a listable set of ints
    return [v for v in range(low, high + 1) if v % step == 0]


def closed_choices(schema: type[BaseModel]) -> dict[str, list[Any]]:
    """The top-level closed-choice fields of `schema` and their allowed values, in order.

    Closed: `Literal[...]` whose values are all str/int/bool (in the Literal's order), `bool` (and `StrictBool`:
    `[False, True]`), `int` with a lower (`ge`/`gt`) and an upper (`le`/`lt`) bound (ascending, `multiple_of`
    honoured) — each with 1 to `MAX_CHOICES` values. Everything else (unions such as `Optional[...]`, floats, free
    strings, enums, nested models, an int range of more than `MAX_CHOICES` values) is not a closed choice.

    Returns:
        `{field_name: [allowed values]}` in the schema's field order (empty when there is none).
    """
    out: dict[str, list[Any]] = {}
    for name, info in schema.model_fields.items():
        annotation = info.annotation
        values: list[Any] | None = None
        if get_origin(annotation) is Literal:
            args = list(get_args(annotation))
            if all(isinstance(a, (str, int)) for a in args):  # bool is an int
                values = args
        elif annotation is bool:
            values = [False, True]
        elif annotation is int:
            values = _int_range(info.metadata)
        if values and len(values) <= MAX_CHOICES:
            out[name] = values
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite JSON number {name}")


# As in `procrl.judges.parse`: NaN/Infinity make an object invalid (a repeated key does not), so both modules pick
# the same first object.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _object_spans(text: str, start: int) -> dict[str, tuple[int, int]] | None:
    """`{key: (value_start, value_end)}` (character offsets, end exclusive) of the top-level members of the JSON
    object starting at `text[start] == "{"`; the last occurrence of a repeated key wins (as in `json.loads`; a
    scored reply has none: `parse_judgement` makes it "duplicate_key"). None when the object is not valid JSON."""
    spans: dict[str, tuple[int, int]] = {}
    i = _skip_ws(text, start + 1)
    if text.startswith("}", i):
        return spans
    while True:
        if not text.startswith('"', i):
            return None
        try:
            key, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        i = _skip_ws(text, i)
        if not text.startswith(":", i):
            return None
        i = _skip_ws(text, i + 1)
        try:
            _, end = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        spans[key] = (i, end)
        i = _skip_ws(text, end)
        if text.startswith("}", i):
            return spans
        if not text.startswith(",", i):
            return None
        i = _skip_ws(text, i + 1)


def _first_object_spans(text: str) -> dict[str, tuple[int, int]] | None:
    """The member spans of the first complete JSON object in `text` (the object `parse.extract_json_object`
    takes: the first "{" from the left that starts a valid object)."""
    start = text.find("{")
    while start != -1:
        spans = _object_spans(text, start)
        if spans is not None:
            return spans
        start = text.find("{", start + 1)
    return None


def _matches(r: str, literals: dict[str, str]) -> list[str]:
    """The options (keys) whose JSON literal is consistent with the value text `r`: `r` is a prefix of the literal,
    or the literal followed by a character that may end a JSON value (`4,` or `"neutral"}`)."""
    return [
        key for key, lit in literals.items() if lit.startswith(r) or (r.startswith(lit) and r[len(lit)] in _AFTER_VALUE)
    ]


def _field_distribution(
    text: str, tokens: TokenAlternatives, starts: list[int], span: tuple[int, int], literals: dict[str, str]
) -> dict[str, float] | None:
    value_start = span[0]
    first = next((i for i, (tok, _) in enumerate(tokens) if starts[i] + len(tok) > value_start), None)
    if first is None:
        return None
    mass = dict.fromkeys(literals, 0.0)
    weight = 1.0  # probability of the chosen tokens walked so far (from the value's first token on)
    for i in range(first, len(tokens)):
        chosen, alternatives = tokens[i]
        so_far = text[value_start : starts[i]] if starts[i] > value_start else ""
        # The chosen token's characters before the value (the space of ' 4', the ': ' of ': 4'); whitespace there
        # is free in JSON, so only its non-blank part must match.
        pre = text[starts[i] : value_start].rstrip(_WS) if i == first else ""

        def rest(alternative: str, so_far: str = so_far, pre: str = pre) -> str | None:
            if so_far:
                return so_far + alternative
            if not alternative.startswith(pre):
                return None  # a different path (another key, other punctuation)
            return alternative[len(pre) :].lstrip(_WS)

        chosen_logprob = None
        for alternative, logprob in alternatives:
            if not isinstance(logprob, (int, float)) or not math.isfinite(logprob):
                continue  # masked (-inf) or broken entries carry no probability
            if chosen_logprob is None and alternative == chosen:
                chosen_logprob = logprob
            r = rest(alternative)
            if r is None:
                continue
            options = _matches(r, literals)
            if len(options) == 1:  # an alternative consistent with several options is not counted
                mass[options[0]] += weight * math.exp(logprob)
        r = rest(chosen)
        chosen_options = _matches(r, literals) if r is not None else []
        if len(chosen_options) <= 1 or chosen_logprob is None:
            break  # decided (or the chosen path left every option, or its probability is unknown)
        weight *= math.exp(chosen_logprob)
    total = sum(mass.values())
    if not total > 0:
        return None
    return {key: p / total for key, p in mass.items()}


def choice_probabilities(
    text: str, tokens: TokenAlternatives, schema: type[BaseModel]
) -> dict[str, dict[str, float]] | None:
    """The judge's distribution over the allowed values of each closed-choice field of its reply.

    The reply's first JSON object is located in `text` (prose around it is ignored) and each closed-choice field's
    value span found; the tokens are aligned to characters by their cumulative lengths. From the token holding the
    value's first character the generated tokens are walked: an alternative at a position maps to the options whose
    JSON literal (`4`, `"entailment"`, `true`) it is consistent with — the chosen text so far plus the alternative
    is a prefix of the literal, or the literal followed by `,` `}` `]` or whitespace (a token like `4,`); at the first
    position, the alternative must start with the chosen token's non-blank characters before the value (the `:` of a
    token `: 4`), whitespace before the value being free. An alternative mapping to exactly one option adds
    `weight * exp(logprob)` to it, where `weight` is the probability of the chosen tokens walked so far (1 at the
    first position); an alternative mapping to several options is not counted (its continuation is unknown). The
    walk goes on while the chosen token is consistent with several options (a shared `"` before `ent`/`neut`/
    `contr`, or `1` before `10`..`12`) and its log-prob is known; it stops at the position that decides the value.
    The masses are renormalised over the field's options; options never seen get 0.0. Alternatives with the same
    text are distinct tokens: their probabilities add up. -inf/NaN log-probs are skipped.

    Args:
        text: the reply text.
        tokens: its generated tokens (`TokenAlternatives`: text, then the top alternatives with natural-log
            probabilities). Trailing tokens past the end of `text` (an EOS the server decodes but leaves out of the
            content) are ignored; any other mismatch between the tokens' concatenation and `text` gives None.
        schema: the reply's pydantic model (`closed_choices`); a field is looked up in the JSON by its alias if it
            has one.

    Returns:
        `{field_name: {value_key: probability}}` (probabilities sum to 1 per field, keys in `closed_choices`
        order) for the closed-choice fields that could be read; a field is left out when its value is missing from
        the reply or no alternative mapped to a single option. None when nothing could be read (no closed-choice
        field, no JSON object, misaligned tokens).
    """
    choices = closed_choices(schema)
    if not choices or not tokens:
        return None
    joined = "".join(tok for tok, _ in tokens)
    if not joined.startswith(text):
        logger.debug("choice_probabilities: the tokens' text does not match the reply (%r vs %r)", joined, text)
        return None
    spans = _first_object_spans(text)
    if spans is None:
        return None
    starts, position = [], 0
    for tok, _ in tokens:
        starts.append(position)
        position += len(tok)
    out: dict[str, dict[str, float]] = {}
    for name, values in choices.items():
        info = schema.model_fields[name]
        span = spans.get(info.alias or name)
        if span is None:
            continue
        literals = {value_key(v): _literal(v) for v in values}
        dist = _field_distribution(text, tokens, starts, span, literals)
        if dist is not None:
            out[name] = dist
    return out or None


def expected_value(dist: dict[str, float]) -> float:
    """The expected value `sum p * value` of a distribution over numeric keys (G-Eval's score), renormalised by
    `sum p`; boolean keys count as 0 ("false") and 1 ("true"), so for a yes/no field it is P(true).

    >>> expected_value({"1": 0.5, "5": 0.5})
    3.0

    Raises:
        ValueError: a key that is not a JSON number or boolean (e.g. "entailment"), or no positive mass.
    """
    total = weighted = 0.0
    for key, p in dist.items():
        try:
            value = json.loads(key)
        except ValueError:
            value = None
        if not isinstance(value, (bool, int, float)):
            raise ValueError(f"expected_value needs numeric or boolean keys, got {key!r}")
        total += p
        weighted += p * float(value)
    if not total > 0:
        raise ValueError(f"expected_value of a distribution without positive mass: {dist!r}")
    return weighted / total


def argmax_value(dist: dict[str, float]) -> str:
    """The most probable key (the first one among ties, i.e. in `closed_choices` order).

    Raises:
        ValueError: an empty distribution.
    """
    if not dist:
        raise ValueError("argmax_value of an empty distribution")
    return max(dist, key=lambda key: dist[key])
