"""Search-R1 traces as StepGap steps, and the label type the verifier emits (docs/architecture.md "StepGap").

A completion of a search rollout is model text interleaved with environment blocks:

    <think> … </think> <search> q1 </search> <information> Doc 1 (Title: …) … </information>
    <think> … </think> <search> q2 </search> <information> … </information>
    <think> … </think> <answer> a </answer>

Each `<search>` is an inference step, the `<answer>` is the conclusion step. `parse_trace` is THE parser of these
tags: the search environment (`procrl.trainers.search_env`) decides with it whether a turn's search runs, and
`procrl.rewards.qa.em_reward` reads the answer with it. Rules (tags may span lines; tags are lower case):

- An `<information>…</information>` block is environment text when it directly follows a `</search>` (only
  whitespace between); tags inside it are never parsed. Any other `<information>` is model text.
- `<search>q</search>` before the answer: an inference step. Its `retrieved` passages are those of the environment
  block after it (`retrieved[k]` for the k-th executed search when given, else parsed back from the block text);
  no block = not executed (`retrieved = []`). An empty query is malformed ("empty_search").
- An unclosed `<search>` (the next tag is not `</search>`) makes a malformed inference step and no retrieval
  ("unclosed_search"); its query runs to the next tag or the end.
- The first `<answer>` starts the conclusion. The answer is credited (`Trace.answer`) only when `</answer>`
  closes it and no action tag (`<search>`, `<answer>`, `<information>`, opening or closing) lies inside it
  ("search_inside_answer", "answer_inside_answer", "information_inside_answer", "unclosed_answer" otherwise:
  answer None, conclusion malformed).
- After the answer nothing runs and nothing may follow: an action tag opened there (`<search>`, a second
  `<answer>`, `<information>`) is a format violation ("search_after_answer", "multiple_answers",
  "information_after_answer") that marks the conclusion malformed; the answer stays credited (it was closed
  before the violation) and a second `<answer>` is never read. No answer at all: "no_answer".
- A malformed step is a format violation of the step itself: the StepGap reward labels it FORMAT (a non-positive
  base, never the no-gap bonus) without asking the verifier (`procrl.rewards.stepgap.reward`).
- Only the completion is parsed; the prompt never is, so an example answer in the instruction cannot count.

Evidence of step i = every passage retrieved by the steps before it (not its own results).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from procrl.retrieval import Passage
from procrl.utils import prompt_to_text

__all__ = [
    "LABELS",
    "Passage",
    "StepLabel",
    "Trace",
    "TraceStep",
    "parse_passages",
    "parse_trace",
    "question_from_prompt",
    "with_token_spans",
]

LABELS = ("NONE", "CC", "IE", "MB", "ERROR", "FORMAT")

_TAG = re.compile(r"<(/?)(think|search|answer|information)>")
_ACTIONS = ("answer", "information", "search")  # action tags: never inside an answer, never after it
_DOC = re.compile(r"^Doc \d+ \(Title: (.*?)\) ?(.*)$")


@dataclass
class TraceStep:
    """One StepGap step of a trace.

    Attributes:
        kind: "inference" (a search turn) or "conclusion" (the answer).
        text: the model's text of the step (think + search, or think + answer), environment blocks excluded.
        query: the `<search>` query (inference), None for the conclusion.
        answer: the `<answer>` text (conclusion; None when not credited), None for inference steps.
        evidence: passages retrieved BEFORE this step (this step's own results excluded).
        retrieved: passages this step's search returned ([] for the conclusion and for unexecuted searches).
        malformed: unclosed tag, empty query, an action tag inside the answer or after it (the conclusion).
        token_span: `[start, end)` token indices of the step's model text in the completion ids (rollouts fill it
            with `with_token_spans`), None when unknown.
        char_span: `[start, end)` character indices of `text` in the parsed completion text.
    """

    kind: str
    text: str
    query: str | None
    answer: str | None
    evidence: list[Passage]
    retrieved: list[Passage]
    malformed: bool = False
    token_span: tuple[int, int] | None = None
    char_span: tuple[int, int] | None = None


@dataclass
class Trace:
    """A parsed completion: question, steps in order, the credited answer (None when none) and format violations."""

    question: str
    steps: list[TraceStep]
    answer: str | None
    format_violations: list[str] = field(default_factory=list)

    @property
    def num_searches(self) -> int:
        """Searches that ran (returned an environment block)."""
        return sum(1 for s in self.steps if s.kind == "inference" and s.retrieved)

    @property
    def queries(self) -> list[str]:
        return [s.query for s in self.steps if s.kind == "inference" and s.query]


@dataclass
class StepLabel:
    """The label of one step: NONE, CC, IE, MB or ERROR from the verifier, or FORMAT for a malformed step (given
    by the reward, never by the verifier), plus what shaping needs to detect a repair.

    Attributes:
        label: one of `LABELS`.
        entity: CC: the contradicted entity or value the next step must not restate; IE: the entity/relation the
            step targeted (the next query should name a different one).
        value: CC: the contradicted value (a second string the next step must not restate).
        bridge: MB: the bridge entity the next query should name.
        reason: free text (logging only).
    """

    label: str
    entity: str | None = None
    value: str | None = None
    bridge: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"StepLabel.label must be one of {LABELS}, got {self.label!r}.")


def question_from_prompt(prompt) -> str:
    """The question of a search prompt: the text after the last "Question:" of the user message, else all of it.

    >>> question_from_prompt([{"role": "user", "content": "Rules <answer> x </answer>\\nQuestion: Who?"}])
    'Who?'
    """
    text = prompt_to_text(prompt)
    marker = text.rfind("Question:")
    return text[marker + len("Question:") :].strip() if marker >= 0 else text.strip()


def parse_passages(block: str) -> list[Passage]:
    """Passages of an `<information>` block written by `procrl.retrieval.format_passages`
    ("Doc i (Title: t) text" lines); text in another layout becomes one passage without a title."""
    passages: list[Passage] = []
    for line in block.strip().splitlines():
        match = _DOC.match(line.strip())
        if match:
            passages.append(Passage(match.group(1), match.group(2).strip()))
        elif passages:
            passages[-1].text = (passages[-1].text + "\n" + line).strip()
        elif line.strip():
            passages.append(Passage("", line.strip()))
    return passages


def _env_blocks(text: str) -> dict[int, tuple[int, int]]:
    """`</search>` end offset -> (block start, block end) of the environment block right after it."""
    blocks: dict[int, tuple[int, int]] = {}
    for match in re.finditer(r"</search>", text):
        rest = text[match.end() :]
        stripped = rest.lstrip()
        if not stripped.startswith("<information>"):
            continue
        start = match.end() + (len(rest) - len(stripped))
        close = text.find("</information>", start)
        end = len(text) if close < 0 else close + len("</information>")
        blocks[match.end()] = (start, end)
    return blocks


def parse_trace(question: str, completion_text: str, retrieved: Sequence[Sequence[Passage]] | None = None) -> Trace:
    """Parse a search-rollout completion into StepGap steps (rules in the module docstring).

    Args:
        question: the plain question (stored in the trace; never parsed).
        completion_text: the completion only (model text + environment `<information>` blocks).
        retrieved: passages of each EXECUTED search in order (the rollout passes what the retriever returned);
            None = parse them back from the `<information>` blocks.

    >>> t = parse_trace("q", "<search> a </search><information>Doc 1 (Title: A) x</information><answer>y</answer>")
    >>> [(s.kind, s.query, s.answer, [p.title for p in s.evidence]) for s in t.steps], t.answer
    ([('inference', 'a', None, []), ('conclusion', None, 'y', ['A'])], 'y')
    """
    text = completion_text or ""
    blocks = _env_blocks(text)
    inside = [span for span in blocks.values()]
    events = [m for m in _TAG.finditer(text) if not any(s <= m.start() < e for s, e in inside)]
    steps: list[TraceStep] = []
    violations: list[str] = []
    evidence: list[Passage] = []
    answer: str | None = None
    answered = False
    seg_start = 0
    executed = 0
    i = 0
    while i < len(events):
        ev = events[i]
        is_open, name = ev.group(1) == "", ev.group(2)
        if answered:
            after = {"search": "search_after_answer", "answer": "multiple_answers"}.get(name, f"{name}_after_answer")
            if is_open and name in _ACTIONS:
                violations.append(after)
                steps[-1].malformed = True
            i += 1
            continue
        if is_open and name == "search":
            nxt = events[i + 1] if i + 1 < len(events) else None
            if nxt is not None and nxt.group(0) == "</search>":
                query = text[ev.end() : nxt.start()].strip()
                end = nxt.end()
                block = blocks.get(end)
                found: list[Passage] = []
                if block is not None:
                    if retrieved is not None:
                        found = list(retrieved[executed]) if executed < len(retrieved) else []
                    else:
                        found = parse_passages(_block_inner(text, *block))
                    executed += 1
                malformed = not query
                if malformed:
                    violations.append("empty_search")
                steps.append(
                    TraceStep(
                        "inference", text[seg_start:end], query or None, None, list(evidence), found, malformed,
                        char_span=(seg_start, end),
                    )
                )  # fmt: skip
                evidence.extend(found)
                if block is not None:  # whitespace after the block is the environment's too
                    seg_start = block[1] + (len(text[block[1] :]) - len(text[block[1] :].lstrip()))
                else:
                    seg_start = end
                i += 2
                continue
            violations.append("unclosed_search")
            end = nxt.start() if nxt is not None else len(text)
            query = text[ev.end() : end].strip() or None
            steps.append(
                TraceStep("inference", text[seg_start:end], query, None, list(evidence), [], True,
                          char_span=(seg_start, end))
            )  # fmt: skip
            seg_start = end
            i += 1
            continue
        if is_open and name == "answer":
            j = next((k for k in range(i + 1, len(events)) if events[k].group(0) == "</answer>"), None)
            stop = j if j is not None else len(events)
            inner = sorted({events[k].group(2) for k in range(i + 1, stop) if events[k].group(2) in _ACTIONS})
            violations.extend(f"{tag}_inside_answer" for tag in inner)
            if j is None:
                violations.append("unclosed_answer")
                end, candidate = len(text), None
            else:
                end, candidate = events[j].end(), text[ev.end() : events[j].start()].strip()
            credited = j is not None and not inner
            answer = candidate if credited else None
            steps.append(
                TraceStep("conclusion", text[seg_start:end], None, answer, list(evidence), [], not credited,
                          char_span=(seg_start, end))
            )  # fmt: skip
            answered = True
            i = stop + 1
            continue
        i += 1
    if not answered:
        violations.append("no_answer")
    return Trace(question=question, steps=steps, answer=answer, format_violations=violations)


def _block_inner(text: str, start: int, end: int) -> str:
    inner = text[start + len("<information>") : end]
    return inner[: -len("</information>")] if inner.endswith("</information>") else inner


def with_token_spans(trace: Trace, token_char_spans: Sequence[tuple[int, int]]) -> Trace:
    """A copy of `trace` whose steps carry `token_span`, from the completion tokens' character spans
    (`procrl.rewards.steps.token_char_offsets` of the SAMPLED ids; never re-encoded text).

    Step characters `[s, e)` map to tokens `[first token ending after s, last token ending at or after e] + 1`;
    a step with no characters gets an empty span at its position.
    """
    ends = [end for _, end in token_char_spans]
    steps = []
    for step in trace.steps:
        if step.char_span is None:
            steps.append(step)
            continue
        s, e = step.char_span
        start = next((t for t, end in enumerate(ends) if end > s), len(ends))
        stop = next((t + 1 for t, end in enumerate(ends) if end >= e), len(ends)) if e > s else start
        steps.append(replace(step, token_span=(start, max(start, stop))))
    return replace(trace, steps=steps)
