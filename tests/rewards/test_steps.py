"""Tests for procrl.rewards.steps: step splitting, sampled-token boundaries, piecewise tokenization (docs/architecture.md "Steps")."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import procrl.rewards.steps.tokens as tokens_module  # where token_char_offsets looks up its fallback
from procrl.rewards.steps import (
    Step,
    split_steps,
    step_prefixes,
    token_char_offsets,
    token_step_boundaries,
    token_steps,
    tokenize_steps,
)

# ----------------------------------------------------------------------------------------------------------
# split_steps: case table (expected step texts written out; spans must tile the text)
# ----------------------------------------------------------------------------------------------------------

SPLIT_CASES = [
    # plain two steps; the separator ends step 0
    ("a\n\nb", ["a\n\n", "b"]),
    # a run of blank lines makes no empty step
    ("a\n\n\n\nb", ["a\n\n\n\n", "b"]),
    # a blank line holding a space inside the run makes no empty step
    ("a\n \n\nb", ["a\n \n\n", "b"]),
    # longer mixed run of blank lines
    ("a\n\n \n\n\nb", ["a\n\n \n\n\n", "b"]),
    # leading separator: leading whitespace goes into step 0, no empty first step
    ("\n\nLeading\n\nx", ["\n\nLeading\n\n", "x"]),
    # leading spaces and trailing whitespace (incl. a trailing separator) stay in the first/last step
    ("  a\n\nb  \n\n  ", ["  a\n\n", "b  \n\n  "]),
    # a trailing separator does not open an empty step
    ("a\n\nb\n\n", ["a\n\n", "b\n\n"]),
    # indentation on the next step's own line stays with that step
    ("a\n\n\n  b", ["a\n\n\n", "  b"]),
    # whitespace on the separator's last line goes to the next step
    ("a\n\n\tb", ["a\n\n", "\tb"]),
    # "\n\n" inside $$...$$ display math does not split
    ("$$x\n\ny$$\n\nz", ["$$x\n\ny$$\n\n", "z"]),
    # display math in the middle of a step, followed by text on the same line
    ("Intro\n\n$$a\n\nb$$ after\n\nEnd", ["Intro\n\n", "$$a\n\nb$$ after\n\n", "End"]),
    # unclosed $$ at the end keeps the rest in one step
    ("a\n\n$$x\n\ny", ["a\n\n", "$$x\n\ny"]),
    # inline $...$ math is not protected: it splits normally
    ("$x$\n\n$y$", ["$x$\n\n", "$y$"]),
    # "\n\n" inside a fenced code block does not split
    ("```py\nx=1\n\ny=2\n```\n\nDone", ["```py\nx=1\n\ny=2\n```\n\n", "Done"]),
    # an unclosed fence at the end keeps the rest in one step
    ("a\n\n```\nx\n\ny", ["a\n\n", "```\nx\n\ny"]),
    # $$ inside code does not open math (the code closes, then the text splits)
    ("```\n$$\n\n```\n\nb", ["```\n$$\n\n```\n\n", "b"]),
    # ``` inside math does not open code
    ("$$```\n\n$$\n\nb", ["$$```\n\n$$\n\n", "b"]),
    # a single step
    ("one step only", ["one step only"]),
    # a single "\n" is not a separator
    ("line 1\nline 2", ["line 1\nline 2"]),
    # three steps of a math solution
    (
        "We have 2x + 3 = 7.\n\nSo 2x = 4.\n\nThus x = \\boxed{2}.",
        ["We have 2x + 3 = 7.\n\n", "So 2x = 4.\n\n", "Thus x = \\boxed{2}."],
    ),
]


@pytest.mark.parametrize(("text", "expected"), SPLIT_CASES)
def test_split_steps_cases(text, expected):
    steps = split_steps(text)
    assert [s.text for s in steps] == expected
    # spans tile the text: starts are the running lengths of the expected texts
    position = 0
    for step, piece in zip(steps, expected, strict=True):
        assert (step.start, step.end) == (position, position + len(piece))
        assert text[step.start : step.end] == step.text
        position += len(piece)
    assert position == len(text)


@pytest.mark.parametrize(
    "text",
    [
        "",  # empty text
        " ",  # a space
        "\n\n",  # a lone separator
        "  \n\n \n\t",  # whitespace only
    ],
)
def test_split_steps_empty_or_whitespace_gives_no_steps(text):
    assert split_steps(text) == []
    assert step_prefixes(text) == []


SEPARATOR_CASES = [
    # separator "\n": each line is a step, blank lines stay with the previous one
    ("a\nb\n\nc", "\n", ["a\n", "b\n\n", "c"]),
    # a non-whitespace separator ends its step; the following space starts the next
    ("x=1; y=2;", ";", ["x=1;", " y=2;"]),
    # consecutive separators make no empty step
    ("a;;b", ";", ["a;;", "b"]),
]


@pytest.mark.parametrize(("text", "separator", "expected"), SEPARATOR_CASES)
def test_split_steps_custom_separator(text, separator, expected):
    assert [s.text for s in split_steps(text, separator)] == expected


def test_split_steps_rejects_empty_separator():
    with pytest.raises(ValueError):
        split_steps("a", "")


def test_step_prefixes_and_stripped():
    # element k is the text through step k, separator included
    assert step_prefixes("a\n\nb\n\n\nc") == ["a\n\n", "a\n\nb\n\n\n", "a\n\nb\n\n\nc"]
    steps = split_steps("  First.\n\n Second.  ")
    assert [s.stripped for s in steps] == ["First.", "Second."]


def test_step_validates_span():
    assert Step("ab", 3, 5).text == "ab"
    with pytest.raises(ValueError):
        Step("ab", 0, 3)  # length mismatch
    with pytest.raises(ValueError):
        Step("", 2, 1)  # end before start


# ----------------------------------------------------------------------------------------------------------
# split_steps: properties over random strings
# ----------------------------------------------------------------------------------------------------------

_REGION = re.compile(r"```.*?(?:```|\Z)|\$\$.*?(?:\$\$|\Z)", re.DOTALL)


def _protected_regions(text):
    """Independent oracle for protected regions: leftmost fences/display math, unclosed ones run to the end."""
    return [(m.start(), m.end()) for m in _REGION.finditer(text)]


# deadline=None and no too_slow health check: hypothesis' timing checks would fail a loaded CPU, not the code
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet="ab \n$`", max_size=60))
def test_split_steps_properties(text):
    steps = split_steps(text)
    # whitespace-only texts (and only they) give no steps
    assert (steps == []) == (text.strip() == "")
    if not steps:
        return
    # spans tile the text
    assert "".join(s.text for s in steps) == text
    assert steps[0].start == 0 and steps[-1].end == len(text)
    for prev, nxt in zip(steps, steps[1:], strict=False):
        assert prev.end == nxt.start
    for step in steps:
        assert text[step.start : step.end] == step.text
        assert step.text.strip(), "no step is whitespace-only"
    regions = _protected_regions(text)
    for prev, nxt in zip(steps, steps[1:], strict=False):
        # every split follows a separator: the previous step's trailing whitespace holds "\n\n"
        tail = prev.text[len(prev.text.rstrip()) :]
        assert "\n\n" in tail
        # no split inside $$...$$ or a fenced block
        assert not any(a < nxt.start < b for a, b in regions)
    # maximal: inside a step, no separator outside the protected regions has content on both sides
    for step in steps:
        for m in re.finditer("\n\n", step.text):
            p = step.start + m.start()
            if any(a <= p < b for a, b in regions):
                continue
            before, after = text[step.start : p], text[p + 2 : step.end]
            assert not (before.strip() and after.strip()), (text, [s.text for s in steps])


# ----------------------------------------------------------------------------------------------------------
# Sampled ids with the real SmolLM2 tokenizer
# ----------------------------------------------------------------------------------------------------------

NN = 1116  # SmolLM2's single "\n\n" token ("ĊĊ")
NL = 198  # "\n" ("Ċ")
EOS = 2  # <|im_end|>
STEP_ONE = [3512, 582, 30]  # "Step", " one", "."
STEP_TWO = [3512, 827, 30]  # "Step", " two", "."


def test_smollm2_tokenizer_premises(smollm2_tokenizer):
    tok = smollm2_tokenizer
    # SmolLM2 samples one token for "\n\n" ...
    assert tok("\n\n").input_ids == [NN]
    assert tok.convert_tokens_to_ids("ĊĊ") == NN
    # ... that re-encodes as two "\n" tokens inside text
    assert tok("a\n\nb").input_ids == [81, NL, NL, 82]
    assert tok.encode("Step one.", add_special_tokens=False) == STEP_ONE
    assert tok.encode("Step two.", add_special_tokens=False) == STEP_TWO
    assert tok.eos_token_id == EOS
    # the emoji's four bytes span three tokens; "符" (3 bytes) spans two
    assert tok.encode("😀 two", add_special_tokens=False) == [10813, 242, 218, 827]
    assert tok.encode("中文字符测试", add_special_tokens=False) == [
        28589,
        29184,
        36518,
        40562,
        116,
        43222,
        229,
        16313,
        239,
    ]


def test_sampled_single_newline_token_boundaries(smollm2_tokenizer):
    ids = STEP_ONE + [NN] + STEP_TWO + [EOS]
    steps, bounds = token_steps(ids, smollm2_tokenizer)
    assert [s.text for s in steps] == ["Step one.\n\n", "Step two."]
    # the first boundary is right after the "\n\n" token; the last is len(ids): EOS belongs to the last step
    assert bounds == [4, 8]
    assert token_step_boundaries(ids, smollm2_tokenizer) == [4, 8]
    # the cumulative decode of the boundaries reproduces the step prefixes
    assert smollm2_tokenizer.decode(ids[:4]) == "Step one.\n\n"
    assert smollm2_tokenizer.decode(ids[:8], skip_special_tokens=True) == "Step one.\n\nStep two."


BOUNDARY_CASES = [
    # a step ending in a letter followed by another step keeps exactly 2 boundaries (re-encoded "\n","\n")
    (
        [5345, 1833, 6947, 281, 253, 4386, NL, NL, 12556, 1833],
        ["First step ends in a letter\n\n", "Second step"],
        [8, 10],
    ),
    # same text sampled with the single "\n\n" token
    (
        [5345, 1833, 6947, 281, 253, 4386, NN, 12556, 1833],
        ["First step ends in a letter\n\n", "Second step"],
        [7, 9],
    ),
    # a step starting with an emoji split over three tokens: its first byte-token belongs to step 1
    (
        STEP_ONE + [NN, 10813, 242, 218, 827, EOS],
        ["Step one.\n\n", "😀 two"],
        [4, 9],
    ),
    # a step ending with a split emoji ("Done", " 😀" = " "+3 bytes, last byte), then "\n\n"
    (
        [41462, 40303, 218, NN] + STEP_TWO,
        ["Done 😀\n\n", "Step two."],
        [4, 7],
    ),
    # "€" and "π" are single tokens; "≈" spans two ("âī", "Ī")
    (
        [14195, NN, 18708, NN, 40533, 226, 278, EOS],
        ["€\n\n", "π\n\n", "≈ b"],
        [2, 4, 8],
    ),
    # blank-line run sampled as "\n\n" + "\n\n": both tokens end step 0
    (
        STEP_ONE + [NN, NN] + STEP_TWO,
        ["Step one.\n\n\n\n", "Step two."],
        [5, 8],
    ),
    # a trailing "\n\n" and EOS belong to the last step
    (
        STEP_ONE + [NN] + STEP_TWO + [NN, EOS],
        ["Step one.\n\n", "Step two.\n\n"],
        [4, 9],
    ),
    # a single step: one boundary at len(ids)
    (STEP_ONE + [EOS], ["Step one."], [4]),
]


@pytest.mark.parametrize(("ids", "expected_steps", "expected_bounds"), BOUNDARY_CASES)
def test_token_step_boundaries_cases(smollm2_tokenizer, ids, expected_steps, expected_bounds):
    steps, bounds = token_steps(ids, smollm2_tokenizer)
    assert [s.text for s in steps] == expected_steps
    assert bounds == expected_bounds
    assert token_step_boundaries(ids, smollm2_tokenizer) == expected_bounds


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        # emoji split over three byte-level tokens: the char goes to the token completing it
        ([104, 10813, 242, 218], ("x😀", [(0, 1), (1, 1), (1, 1), (1, 2)])),
        # CJK: "符", "测", "试" are each split over two tokens
        (
            [28589, 29184, 36518, 40562, 116, 43222, 229, 16313, 239],
            ("中文字符测试", [(0, 1), (1, 2), (2, 3), (3, 3), (3, 4), (4, 4), (4, 5), (5, 5), (5, 6)]),
        ),
        # "€" single token, "\n\n" single token, EOS zero-width at the end
        ([14195, NN, EOS], ("€\n\n", [(0, 1), (1, 3), (3, 3)])),
        # a truncated emoji (sampling stopped mid-character): the last token takes the replacement char
        ([104, 10813, 242], ("x\ufffd", [(0, 1), (1, 1), (1, 2)])),
        ([], ("", [])),
    ],
)
def test_token_char_offsets_multibyte(smollm2_tokenizer, ids, expected):
    assert token_char_offsets(ids, smollm2_tokenizer) == expected


def test_special_tokens_and_skip_false(smollm2_tokenizer):
    ids = STEP_ONE + [NN] + STEP_TWO + [EOS]
    text, spans = token_char_offsets(ids, smollm2_tokenizer, skip_special_tokens=False)
    assert text == "Step one.\n\nStep two.<|im_end|>"
    assert spans[-1] == (20, 30)
    steps, bounds = token_steps(ids, smollm2_tokenizer, skip_special_tokens=False)
    assert [s.text for s in steps] == ["Step one.\n\n", "Step two.<|im_end|>"]
    assert bounds == [4, 8]
    # a special token in the middle is zero-width (skipped) and goes to the step of the next character
    mid = STEP_ONE + [NN, EOS] + STEP_TWO
    steps, bounds = token_steps(mid, smollm2_tokenizer)
    assert [s.text for s in steps] == ["Step one.\n\n", "Step two."]
    assert bounds == [4, 8]


def test_given_steps_must_match_decoded_text(smollm2_tokenizer):
    ids = STEP_ONE + [NN] + STEP_TWO + [EOS]
    # steps of the text TRL decodes (skip_special_tokens=True) are accepted
    trl_text = smollm2_tokenizer.batch_decode([ids], skip_special_tokens=True)[0]
    assert token_step_boundaries(ids, smollm2_tokenizer, split_steps(trl_text)) == [4, 8]
    # steps of a different text are rejected
    with pytest.raises(ValueError, match="does not match"):
        token_steps(ids, smollm2_tokenizer, split_steps("Other one.\n\nStep two."))
    # steps of the re-encoded-looking text with extra leading space are rejected too
    with pytest.raises(ValueError):
        token_steps(ids, smollm2_tokenizer, split_steps(" " + trl_text))


@pytest.mark.parametrize(
    "ids",
    [
        [],  # no ids
        [EOS],  # EOS only: empty text
        [NN, EOS],  # whitespace only
    ],
)
def test_no_steps_gives_empty(smollm2_tokenizer, ids):
    assert token_steps(ids, smollm2_tokenizer) == ([], [])
    assert token_step_boundaries(ids, smollm2_tokenizer) == []


def test_straddled_step_is_merged(smollm2_tokenizer):
    # "Hello" is one token; with separator "e" the text splits into "He" | "llo", but the one token starts in
    # step 0, so step 1 gets no token and is merged: one step, one boundary.
    assert smollm2_tokenizer.encode("Hello", add_special_tokens=False) == [19556]
    assert [s.text for s in split_steps("Hello", "e")] == ["He", "llo"]
    steps, bounds = token_steps([19556], smollm2_tokenizer, separator="e")
    assert steps == [Step("Hello", 0, 5)]
    assert bounds == [1]
    assert token_step_boundaries([19556], smollm2_tokenizer, separator="e") == [1]
    # with a trailing EOS the last step is not empty: EOS (zero-width at the end) belongs to the last step
    steps, bounds = token_steps([19556, EOS], smollm2_tokenizer, separator="e")
    assert [s.text for s in steps] == ["He", "llo"]
    assert bounds == [1, 2]


def test_straddled_middle_step_is_merged():
    # a toy tokenizer whose first token covers steps 0 and 1 entirely: step 1 is merged into step 0 and the
    # returned steps stay aligned with the strictly increasing boundaries
    tok = _ToyTokenizer(["ab\n\nc\n\n", "d", "<eos>"], eos=2)
    assert [s.text for s in split_steps("ab\n\nc\n\nd")] == ["ab\n\n", "c\n\n", "d"]
    steps, bounds = token_steps([0, 1, 2], tok)
    assert steps == [Step("ab\n\nc\n\n", 0, 7), Step("d", 7, 8)]
    assert bounds == [1, 3]
    # given steps are merged the same way; token_step_boundaries is then shorter than the step list
    given = split_steps("ab\n\nc\n\nd")
    assert token_step_boundaries([0, 1, 2], tok, given) == [1, 3]


class _ToyTokenizer:
    """A toy tokenizer over a list of strings. With `cleanup=True` its decode rewrites " ," to "," (like
    clean_up_tokenization_spaces): window decodes then no longer reproduce the full text, which forces the exact
    cumulative fallback."""

    def __init__(self, vocab, eos, cleanup=False):
        self.vocab, self.eos, self.cleanup = vocab, eos, cleanup

    def decode(self, ids, skip_special_tokens=False):
        text = "".join(self.vocab[i] for i in ids if not (skip_special_tokens and i == self.eos))
        return text.replace(" ,", ",") if self.cleanup else text


def test_cumulative_fallback_for_rewriting_decoders():
    tok = _ToyTokenizer(["a", " ", ",", "\n\n", "b", "<eos>"], eos=5, cleanup=True)
    ids = [0, 1, 2, 3, 4, 5]  # "a" " " "," "\n\n" "b" <eos>  ->  "a,\n\nb"
    text, spans = token_char_offsets(ids, tok)
    assert text == "a,\n\nb"
    assert spans == [(0, 1), (1, 1), (1, 2), (2, 4), (4, 5), (5, 5)]
    steps, bounds = token_steps(ids, tok)
    assert [s.text for s in steps] == ["a,\n\n", "b"]
    assert bounds == [4, 6]


def _oracle_ends(tok, ids):
    """Independent oracle: token i ends where decode(ids[:i+1]) stops agreeing with the full decode."""
    full = tok.decode(ids, skip_special_tokens=True)
    ends, best = [], 0
    for i in range(len(ids)):
        best = max(best, len(os.path.commonprefix([tok.decode(ids[: i + 1], skip_special_tokens=True), full])))
        ends.append(best)
    if ends:
        ends[-1] = len(full)
    return ends


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],  # no timing checks
)
@given(
    st.lists(
        st.sampled_from(["ab", " c", "€", "π", "😀", "中文", "\n", "\n\n", "\n\n\n", "  ", "$$", "`"]), max_size=12
    )
)
@pytest.mark.parametrize("piecewise", [False, True])
def test_sampled_boundaries_properties(smollm2_tokenizer, piecewise, pieces):
    tok = smollm2_tokenizer
    text = "".join(pieces)
    if piecewise:  # non-canonical ids, as sampled: single "\n\n" tokens, byte tokens next to newlines, ...
        ids = [i for piece in pieces for i in tok.encode(piece, add_special_tokens=False)] + [EOS]
    else:  # the canonical encoding
        ids = tok.encode(text, add_special_tokens=False) + [EOS]
    decoded, spans = token_char_offsets(ids, tok)
    assert decoded == text
    assert [end for _, end in spans] == _oracle_ends(tok, ids)
    steps, bounds = token_steps(ids, tok)
    assert len(steps) == len(bounds)
    if not text.strip():
        assert (steps, bounds) == ([], [])
        return
    assert "".join(s.text for s in steps) == text
    assert all(a < b for a, b in zip(bounds, bounds[1:], strict=False))
    assert bounds[-1] == len(ids)
    for k in range(len(steps) - 1):
        first_of_next, last_of_this = spans[bounds[k]], spans[bounds[k] - 1]
        # the token right after boundary k starts in step k+1; the token before it starts in step k
        assert first_of_next[0] >= steps[k].end
        assert last_of_this[0] < steps[k].end


def test_long_completion_uses_the_linear_path(smollm2_tokenizer, monkeypatch):
    # SmolLM2's decode is prefix-stable, so the windowed decode never falls back to the quadratic one
    def fail(*args, **kwargs):
        raise AssertionError("quadratic fallback used")

    monkeypatch.setattr(tokens_module, "_char_ends_cumulative", fail)
    text = "".join(f"Step {i}: 3 × {i} = {3 * i} € — π ≈ 3.14 😀.\n\n" for i in range(60))
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False) + [EOS]
    steps, bounds = token_steps(ids, smollm2_tokenizer)
    assert len(steps) == 60 and bounds[-1] == len(ids)
    assert smollm2_tokenizer.decode(ids[: bounds[9]]) == text[: steps[9].end]


# ----------------------------------------------------------------------------------------------------------
# tokenize_steps (text we build)
# ----------------------------------------------------------------------------------------------------------

MATH_PIECES = [
    "We need $x$ with $2x + 3 = 7$.\n\n",
    "Subtract 3: $$2x = 4.$$\n\n",
    "Divide by 2 (≈ halving, π not needed 😀).\n\n",
    "So the answer is $\\boxed{2}$.",
]


def test_tokenize_steps_small(smollm2_tokenizer):
    ids, bounds = tokenize_steps(smollm2_tokenizer, ["Step one.\n\n", "Step two."])
    # piece by piece: the trailing "\n\n" of a piece is the single token 1116, as sampled
    assert ids == STEP_ONE + [NN] + STEP_TWO
    assert bounds == [4, 7]
    ids, bounds = tokenize_steps(smollm2_tokenizer, ["Step one.\n\n", "Step two."], prefix_ids=[1, 9, 1])
    assert ids == [1, 9, 1] + STEP_ONE + [NN] + STEP_TWO
    assert bounds == [7, 10]  # counted in the returned ids, prefix included
    # Step objects are accepted
    assert tokenize_steps(smollm2_tokenizer, split_steps("Step one.\n\nStep two."))[1] == [4, 7]


def test_tokenize_steps_prefix_property_real_text(smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompt_ids = tok.apply_chat_template([{"role": "user", "content": "Solve 2x + 3 = 7."}], add_generation_prompt=True)
    prompt_ids = list(prompt_ids["input_ids"] if hasattr(prompt_ids, "keys") else prompt_ids)
    ids, bounds = tokenize_steps(tok, MATH_PIECES, prefix_ids=prompt_ids)
    assert len(bounds) == 4 and bounds[-1] == len(ids)
    assert ids[: len(prompt_ids)] == prompt_ids
    for k in range(len(MATH_PIECES)):
        prefix_ids, _ = tokenize_steps(tok, MATH_PIECES[: k + 1], prefix_ids=prompt_ids)
        assert ids[: bounds[k]] == prefix_ids  # each prefix's ids are a prefix of the full ids ...
        if k < len(MATH_PIECES) - 1:
            assert len(prefix_ids) < len(ids)  # ... and a strict one
        # the decode of each boundary reproduces the prefix text
        assert tok.decode(ids[len(prompt_ids) : bounds[k]]) == "".join(MATH_PIECES[: k + 1])
    # the split of the joined text gives the same pieces
    assert [s.text for s in split_steps("".join(MATH_PIECES))] == MATH_PIECES


def test_tokenize_steps_ids_as_sampled_give_the_same_boundaries(smollm2_tokenizer):
    # ids built piece by piece look like sampled ids (one "\n\n" token); the sampled path recovers the same
    # boundaries and steps without re-encoding
    tok = smollm2_tokenizer
    ids, bounds = tokenize_steps(tok, MATH_PIECES)
    steps, sampled_bounds = token_steps(ids + [EOS], tok)
    assert [s.text for s in steps] == MATH_PIECES
    assert sampled_bounds[:-1] == bounds[:-1] and sampled_bounds[-1] == len(ids) + 1
    for k, b in enumerate(sampled_bounds):
        assert tok.decode(ids[:b]) == "".join(MATH_PIECES[: k + 1])


def test_tokenize_steps_rejects_empty_piece(smollm2_tokenizer):
    with pytest.raises(ValueError, match="no ids"):
        tokenize_steps(smollm2_tokenizer, ["Step one.\n\n", ""])
    assert tokenize_steps(smollm2_tokenizer, []) == ([], [])
    assert tokenize_steps(smollm2_tokenizer, [], prefix_ids=[5]) == ([5], [])
