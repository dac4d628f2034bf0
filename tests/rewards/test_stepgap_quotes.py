"""StepGap candidate quotes (`procrl.rewards.stepgap.quotes.quote_candidates`): chunks worked out by hand, and on the
shipped annotated set every candidate is a verbatim 5-20-word span of its passage that `find_quote` accepts as is."""

from __future__ import annotations

import pytest

from procrl.evals.stepgap.evaluate import DEFAULT_DATA, load_annotated
from procrl.rewards.stepgap.quotes import find_quote, quote_candidates, sentence_spans
from procrl.rewards.stepgap.trace import Passage

# S1 has 6 words; S2 ("She died.") 2 words, merged with S3 (28 words) -> 30; S4 ("The end came.", 3 words) is the
# last and short, so it joins that unit -> 33 words -> ceil(33 / 20) = 2 chunks of 17 and 16 words.
ANN = Passage(
    title="Ann Lee",
    text=(
        "Ann Lee was born in 1900. She died. She was a painter, a sculptor and a poet of great renown in the city of "
        "Lyon and in the wider region of France during the twentieth century. The end came."
    ),
)
ANN_CHUNKS = (
    "Ann Lee was born in 1900.",
    "She died. She was a painter, a sculptor and a poet of great renown in the city",
    "of Lyon and in the wider region of France during the twentieth century. The end came.",
)


def test_candidates_by_hand():
    assert [len(c.split()) for c in ANN_CHUNKS] == [6, 17, 16]
    assert quote_candidates([ANN]) == ANN_CHUNKS


def test_sentences_split_at_ends_but_not_after_initials_or_abbreviations():
    text = 'St. Louis lies on the river. J. R. Smith was born (c. 1900) there. "Yes," he said. 1900 was a year.'
    sentences = [" ".join(text[a:b] for a, b in s) for s in sentence_spans(text)]
    assert sentences == [
        "St. Louis lies on the river.",
        "J. R. Smith was born (c. 1900) there.",
        '"Yes," he said.',
        "1900 was a year.",
    ]


def test_short_passages_duplicates_cap_and_char_limit():
    assert quote_candidates([Passage("x", "Too short to quote.")]) == ()  # 4 words in all
    assert quote_candidates([Passage("x", "")]) == ()
    assert quote_candidates([ANN, Passage("copy", ANN.text)]) == ANN_CHUNKS  # de-duplicated across passages
    assert quote_candidates([ANN], cap=2) == ANN_CHUNKS[:2]  # evidence order
    # the prompt shows the first 30 characters: "Ann Lee was born in 1900. She " -> the words that end within them
    assert quote_candidates([ANN], max_chars=30) == ("Ann Lee was born in 1900. She",)
    assert quote_candidates([ANN], max_chars=28) == ("Ann Lee was born in 1900.",)  # "She" is cut: left out
    # a different word range: 2-6 words per chunk
    two = quote_candidates([Passage("y", "a b c d e f g.")], min_words=2, max_words=6)
    assert two == ("a b c d", "e f g.")  # 7 words -> chunks of 4 and 3
    with pytest.raises(ValueError, match="min_words"):
        quote_candidates([ANN], min_words=6, max_words=5)
    with pytest.raises(ValueError, match="cap"):
        quote_candidates([ANN], cap=0)


def test_quote_marks_at_chunk_edges_are_trimmed():
    # find_quote drops surrounding quote marks; a candidate is trimmed the same way, so it is accepted unchanged
    assert quote_candidates([Passage("q", '"He wrote the song Blue."')]) == ("He wrote the song Blue.",)
    assert quote_candidates([Passage("q", 'He wrote the song " Blue"')]) == ('He wrote the song " Blue',)
    assert quote_candidates([Passage("q", 'He wrote the song "')]) == ()  # 4 words once the lone mark goes


def strip_marks(words):
    return [w.strip("\"'“”‘’`«»") for w in words if w.strip("\"'“”‘’`«»")]


def test_shipped_set_candidates_are_verbatim_spans():
    data = load_annotated(DEFAULT_DATA)
    n_steps = n_candidates = 0
    for trace, _ in data:
        for step in trace.steps:
            candidates = quote_candidates(step.evidence, max_chars=1500)
            n_steps += 1
            n_candidates += len(candidates)
            assert len(candidates) == len(set(candidates)) <= 64 and "" not in candidates
            for quote in candidates:
                assert 5 <= len(quote.split()) <= 20, quote
                assert any(quote in p.text[:1500] for p in step.evidence), quote  # a verbatim substring
                assert find_quote(quote, step.evidence) == quote  # the verbatim check accepts it unchanged
            # each passage alone: its candidates, in order, are its words (nothing invented, nothing skipped; quote
            # marks at chunk edges are trimmed)
            for passage in step.evidence:
                words = passage.text[:1500].split()
                alone = quote_candidates([passage], max_chars=1500)
                if len(words) >= 5 and len(passage.text) <= 1500:
                    assert strip_marks([w for q in alone for w in q.split()]) == strip_marks(words)
    assert n_steps == 96 and n_candidates >= 5 * n_steps
