"""Claims and quotes of StepGap steps (docs/architecture.md "StepGap"; arXiv 2605.24733): the claim a step makes, the check that
a judge's quote is a verbatim span of the evidence, and the candidate quotes a constrained judge chooses from.

Stage C asks the judge for 5-20 words copied from the evidence. `quote_candidates` lists such spans in advance, so
that the judge's reply schema can make `quote` a choice among them (`procrl.rewards.stepgap.verifier.
step_check_schema`): a paraphrase or a copied placeholder ("<entity>") then cannot be the quote. `find_quote` stays
the check for replies that did not go through that schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from procrl.rewards.stepgap.trace import Passage, TraceStep

__all__ = ["step_claim", "find_quote", "quote_candidates", "sentence_spans", "passages_text", "norm_text"]

_BLOCK_TAGS = re.compile(r"<(search|answer|information)>.*?(</\1>|$)", re.DOTALL)
_ANY_TAG = re.compile(r"</?\s*(think|search|answer|information)\s*>")


def step_claim(step: TraceStep) -> str:
    """The claim a step makes: its text without the search query, the answer block and the tags.

    A conclusion whose remaining text does not already contain its answer gets "The answer is <answer>." appended
    (a bare `<answer>X</answer>` thus claims "The answer is X.").

    >>> from procrl.rewards.stepgap.trace import TraceStep
    >>> step_claim(TraceStep(kind="inference", text="<think>Lyon is in France.</think><search>Lyon</search>",
    ...                      query="Lyon", answer=None, evidence=[], retrieved=[]))
    'Lyon is in France.'
    """
    text = _ANY_TAG.sub(" ", _BLOCK_TAGS.sub(" ", step.text))
    claim = " ".join(text.split())
    if step.kind == "conclusion" and step.answer and norm_text(step.answer) not in norm_text(claim):
        claim = f"{claim} The answer is {step.answer.strip()}.".strip()
    return claim


def norm_text(text: str) -> str:
    """Lower-cased, runs of whitespace collapsed to one space, stripped (the quote comparison's normal form)."""
    return " ".join(text.lower().split())


_QUOTE_EDGES = "\"'“”‘’`«» "


def find_quote(
    quote: str | None, evidence: Iterable[Passage], *, min_words: int = 5, max_words: int = 20
) -> str | None:
    """The judge's quote if it is 5-20 words and occurs verbatim in one evidence passage (title or text), comparing
    lower-cased text with runs of whitespace collapsed; surrounding quote marks and a trailing "..." are ignored.
    None otherwise (the step is then treated as having no quote).

    >>> from procrl.rewards.stepgap.trace import Passage
    >>> ev = [Passage(title="Lyon", text="Lyon is the third-largest city  of France.")]
    >>> find_quote('"lyon is the third-largest city of"', ev)
    'lyon is the third-largest city of'
    >>> find_quote("Lyon is the largest city of France", ev) is None
    True
    """
    if not quote:
        return None
    cleaned = quote.strip().removesuffix("...").removesuffix("…").strip(_QUOTE_EDGES)
    words = cleaned.split()
    if not (min_words <= len(words) <= max_words):
        return None
    needle = norm_text(cleaned)
    for passage in evidence:
        if needle in norm_text(passage.text) or needle in norm_text(passage.title):
            return cleaned
    return None


def passages_text(passages: Sequence[Passage]) -> str:
    """The NLI premise of several passages: one "title: text" line each."""
    return "\n".join(f"{p.title}: {p.text}" for p in passages)


# A sentence ends after ".", "!" or "?" (and any closing quotes/brackets) followed by whitespace and a capital
# letter, a digit or an opening quote/bracket, unless the word is an initial ("J.") or a common abbreviation. A wrong
# boundary costs only a chunk edge: short pieces are merged (see `quote_candidates`).
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*(?=\s+[\"'“‘(\[]?[A-Z0-9À-Þ])")
_WORD = re.compile(r"\S+")
_ABBREVIATIONS = frozenset(
    "aft bef ca fl st mt ft mr mrs ms dr jr sr vs approx gen col lt sgt capt rev prof inc ltd co corp "
    "jan feb mar apr jun jul aug sep sept oct nov dec e.g i.e u.s u.k".split()
)


def _is_abbreviation(word: str) -> bool:
    bare = word.lstrip("\"'“‘([").rstrip(".\"'”’)]")
    return (len(bare) == 1 and bare.isalpha()) or bare.lower() in _ABBREVIATIONS


def sentence_spans(text: str) -> list[list[tuple[int, int]]]:
    """The words of `text` grouped by sentence: `[[(start, end), ...] per sentence]`, character offsets into `text`.

    >>> text = "St. Lyon is big. It is in France."
    >>> [[text[a:b] for a, b in s] for s in sentence_spans(text)]
    [['St.', 'Lyon', 'is', 'big.'], ['It', 'is', 'in', 'France.']]
    """
    ends = {m.end() for m in _SENTENCE_END.finditer(text)}
    sentences: list[list[tuple[int, int]]] = [[]]
    for match in _WORD.finditer(text):
        sentences[-1].append((match.start(), match.end()))
        if match.end() in ends and not _is_abbreviation(match.group()):
            sentences.append([])
    return [s for s in sentences if s]


def _chunks(words: list[tuple[int, int]], max_words: int) -> list[list[tuple[int, int]]]:
    """`words` cut into ceil(n / max_words) consecutive pieces of near-equal size (sizes differ by at most 1)."""
    k = -(-len(words) // max_words)
    size, extra = divmod(len(words), k)
    out, start = [], 0
    for i in range(k):
        stop = start + size + (1 if i < extra else 0)
        out.append(words[start:stop])
        start = stop
    return out


def _trim(quote: str) -> str:
    """`quote` without what `find_quote` strips from its edges (repeated until nothing changes)."""
    while True:
        cleaned = quote.strip().removesuffix("...").removesuffix("…").strip(_QUOTE_EDGES)
        if cleaned == quote:
            return quote
        quote = cleaned


def quote_candidates(
    evidence: Sequence[Passage],
    *,
    min_words: int = 5,
    max_words: int = 20,
    max_chars: int | None = None,
    cap: int = 64,
) -> tuple[str, ...]:
    """The quotes a judge may choose for stage C: verbatim spans of the evidence passages' texts, each of
    `min_words`..`max_words` words (whitespace-separated), in evidence order, de-duplicated, at most `cap`.

    Per passage, the text (its first `max_chars` characters when given: what the judge's prompt shows; a word cut
    by that limit is left out) is split into sentences (`sentence_spans`). A sentence shorter than `min_words` is
    merged with the next one (the last one, with the previous one; a passage of fewer than `min_words` words gives
    no candidate). A unit longer than `max_words` is cut into the fewest consecutive chunks of at most `max_words`
    words, of near-equal size (a 45-word sentence gives chunks of 15, 15 and 15 words). Each candidate is the
    passage text from its first word's first character to its last word's last character, without the quote marks
    (and a trailing "...") that `find_quote` strips from a quote's edges, so it is a substring of the passage and
    `find_quote` returns it unchanged; a chunk that trimming leaves outside `min_words`..`max_words` is left out.
    Titles are not quoted.

    Raises:
        ValueError: `1 <= min_words <= max_words`, `cap >= 1` or `max_chars >= 1` does not hold.

    >>> from procrl.rewards.stepgap.trace import Passage
    >>> quote_candidates([Passage("Lyon", "Lyon is big. It is the third city of France, on the Rhone.")])
    ('Lyon is big. It is the third city of France, on the Rhone.',)
    """
    if not (1 <= min_words <= max_words) or cap < 1 or (max_chars is not None and max_chars < 1):
        raise ValueError(
            f"quote_candidates: need 1 <= min_words <= max_words, cap >= 1, max_chars >= 1; got {min_words}, "
            f"{max_words}, {cap}, {max_chars}"
        )
    out: dict[str, None] = {}
    for passage in evidence:
        text = passage.text
        units: list[list[tuple[int, int]]] = []
        pending: list[tuple[int, int]] = []
        for sentence in sentence_spans(text):
            if max_chars is not None:
                sentence = [(a, b) for a, b in sentence if b <= max_chars]
            pending += sentence
            if len(pending) >= min_words:
                units.append(pending)
                pending = []
        if pending and units:  # a short last sentence joins the previous unit
            units[-1] = units[-1] + pending
        for unit in units:
            for chunk in _chunks(unit, max_words):
                quote = _trim(text[chunk[0][0] : chunk[-1][1]])
                if find_quote(quote, [passage], min_words=min_words, max_words=max_words) == quote:
                    out.setdefault(quote, None)
                    if len(out) >= cap:
                        return tuple(out)
    return tuple(out)
