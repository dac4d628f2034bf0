"""The search task's data (docs/architecture.md "StepGap"): the shipped 2Wiki corpus and questions by name, the Search-R1
prompt with its worked example, and the multi-hop QA questions loader.

Shipped data (`data/SOURCE.md`): `2wiki_dev_sample` (200 2WikiMultihopQA dev questions) and `2wiki_corpus_sample`
(1,467 paragraphs: their supporting paragraphs plus the other paragraphs of their contexts as distractors). The
retrieval itself (`BM25Index`, `RetrieverClient`, the server) is core (`procrl.retrieval`) and takes paths; the
functions here resolve the built-in names first.

    >>> index = open_index("2wiki_corpus_sample")
    >>> [p.title for p in index.search(["Who was the mother of Lothair II?"], topk=1)[0]]
    ['Lothair II']
"""

from __future__ import annotations

from importlib.resources.abc import Traversable
from pathlib import Path

import datasets

from procrl import retrieval
from procrl.data_builders.datasets import builtin_data_file
from procrl.retrieval import BM25Index, Passage, Retriever, RetrieverClient, read_jsonl

__all__ = [
    "ALIAS_FIELDS",
    "BUILTIN_CORPORA",
    "BuiltinBM25Index",
    "BUILTIN_QUESTIONS",
    "SEARCH_EXAMPLE_QUESTION",
    "SEARCH_EXAMPLE_REPLY",
    "SEARCH_PROMPT",
    "data_path",
    "load_corpus",
    "load_qa_questions",
    "open_index",
    "open_retriever",
    "search_messages",
]

BUILTIN_CORPORA = {"2wiki_corpus_sample": "2wiki_corpus_sample.jsonl"}
BUILTIN_QUESTIONS = {"2wiki_dev_sample": "2wiki_dev_sample.jsonl"}


def data_path(name_or_path: str | Path, builtin: dict[str, str]) -> Path | Traversable:
    """The shipped file of a built-in name (a key of `builtin`, e.g. `BUILTIN_CORPORA`), else the file at the path.

    Raises:
        FileNotFoundError: neither a file nor a built-in name.
    """
    if str(name_or_path) in builtin:
        return builtin_data_file(builtin[str(name_or_path)])
    path = Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"{name_or_path!r} is neither a file nor a built-in name ({sorted(builtin)}).")
    return path


def load_corpus(name_or_path: str | Path) -> list[Passage]:
    """Passages of a JSONL corpus (`{"title", "text"}` per line; `contents` = '"Title"\\ntext' is accepted too) or
    of a built-in corpus name (`2wiki_corpus_sample`); `procrl.retrieval.load_corpus` reads the file.

    Raises:
        FileNotFoundError: neither a file nor a built-in name.
        ValueError: a line is not JSON or has no text.
    """
    return retrieval.load_corpus(data_path(name_or_path, BUILTIN_CORPORA))


class BuiltinBM25Index(BM25Index):
    """`procrl.retrieval.BM25Index` whose `from_jsonl` also takes a built-in corpus name (`2wiki_corpus_sample`), as
    the old `procrl.data_builders.corpus.BM25Index` did; the deprecated path resolves to this class."""

    @classmethod
    def from_jsonl(cls, path, **kwargs) -> BuiltinBM25Index:
        """Build from a JSONL corpus file or a built-in corpus name. Raises FileNotFoundError for neither."""
        return super().from_jsonl(data_path(path, BUILTIN_CORPORA) if isinstance(path, str | Path) else path, **kwargs)


def open_index(spec: str | Path) -> BM25Index:
    """A saved index directory, a JSONL corpus, or a built-in corpus name -> BM25Index.

    Raises:
        FileNotFoundError: none of the three.
    """
    if Path(spec).is_dir():
        return retrieval.open_index(spec)
    return BM25Index.from_jsonl(data_path(spec, BUILTIN_CORPORA))


def open_retriever(spec: str) -> Retriever:
    """A retriever from a spec: an http(s) URL -> `RetrieverClient`; else a built-in corpus name, a JSONL corpus or
    a saved index directory -> `BM25Index` (`open_index`)."""
    if spec.startswith(("http://", "https://")):
        return RetrieverClient(spec)
    return open_index(spec)


# Our wording of the Search-R1 instruction. The instruction itself holds no answer inside <answer> tags; the worked
# example below does, and is harmless: the answer is read from the completion only, never from the prompt.
SEARCH_PROMPT = (
    "Answer the question. Think inside <think> </think>. To look something up, write <search> query </search> and "
    "the top results will appear inside <information> </information>. You may search several times. When you know "
    "the answer, write only the short answer inside the answer tags, <answer> and </answer>.\n"
    "Question: {question}"
)

# One worked episode (a question outside 2Wiki; true facts) shown as an earlier user/assistant exchange when
# `load_qa_questions(example=True)`: the information blocks are laid out exactly as `SearchEnvironment` writes them.
# Measured once with the untrained default model (SmolLM2-135M-Instruct, temperature 0.7, the first 2Wiki dev
# questions, plain `generate` without the environment): without it 0 of 8 completions (64 tokens) wrote a <search>
# tag; with it 11 of 16 (96 tokens) searched and 5 of 16 wrote <answer>. The StepGap configs sample at temperature 1.0.
SEARCH_EXAMPLE_QUESTION = "Who was born first, Albert Einstein or Niels Bohr?"
SEARCH_EXAMPLE_REPLY = (
    "<search> Albert Einstein born </search>\n<information>Doc 1 (Title: Albert Einstein) Albert Einstein (14 March "
    "1879 - 18 April 1955) was a German-born theoretical physicist.</information>\n"
    "<search> Niels Bohr born </search>\n<information>Doc 1 (Title: Niels Bohr) Niels Bohr (7 October 1885 - 18 "
    "November 1962) was a Danish physicist.</information>\n"
    "<think>1879 is before 1885.</think>\n<answer> Albert Einstein </answer>"
)

ALIAS_FIELDS = ("golden_answers", "aliases", "answer_aliases")


def search_messages(question: str, *, template: str = SEARCH_PROMPT, example: bool = False) -> list[dict[str, str]]:
    """The chat prompt of one search question: `template` with `{question}` replaced, after the worked episode
    (`SEARCH_EXAMPLE_QUESTION`, `SEARCH_EXAMPLE_REPLY`) as an earlier user/assistant exchange when `example`.

    Raises:
        ValueError: a template without `{question}`.

    >>> search_messages("Who?", template="Q: {question}")
    [{'role': 'user', 'content': 'Q: Who?'}]
    """
    if "{question}" not in template:
        raise ValueError("The prompt template must contain the placeholder {question}.")
    shots = []
    if example:
        shots = [
            {"role": "user", "content": template.replace("{question}", SEARCH_EXAMPLE_QUESTION)},
            {"role": "assistant", "content": SEARCH_EXAMPLE_REPLY},
        ]
    return [*shots, {"role": "user", "content": template.replace("{question}", question)}]


def load_qa_questions(
    name_or_path: str | Path = "2wiki_dev_sample",
    *,
    start: int = 0,
    end: int | None = None,
    template: str = SEARCH_PROMPT,
    example: bool = False,
) -> datasets.Dataset:
    """Multi-hop QA questions for search rollouts, as a `datasets.Dataset` with the columns

    - `prompt`: `[{"role": "user", "content": template.format-ish(question)}]` (`{question}` replaced), after one
      worked episode (`SEARCH_EXAMPLE_QUESTION` in the template, `SEARCH_EXAMPLE_REPLY`) when `example` is true;
    - `question`: the plain question;
    - `golden_answers`: list of gold strings: `answer` first, then any aliases (`golden_answers`, `aliases`,
      `answer_aliases` fields), de-duplicated in order (the column `procrl.rewards.qa.em_reward` reads);
    - `id`: the source's id, else `<file stem>/<0-based row>`;
    - `type`: the question type when the source has one, else "".

    Args:
        name_or_path: a JSONL file or a built-in name (`2wiki_dev_sample`).
        start, end: row slice (0-based, end exclusive, None = to the end).
        template: prompt text with a `{question}` placeholder.
        example: put the worked search episode before the question as an earlier user/assistant exchange (the
            answer is read from the completion only, so the example's answer is never credited).

    Raises:
        FileNotFoundError: neither a file nor a built-in name.
        ValueError: a record without a question or any gold answer, a bad slice, or a template without `{question}`.
    """
    if "{question}" not in template:
        raise ValueError("The prompt template must contain the placeholder {question}.")
    source = data_path(name_or_path, BUILTIN_QUESTIONS)
    rows = read_jsonl(source)
    end = len(rows) if end is None else end
    if not (0 <= start <= end <= len(rows)):
        raise ValueError(f"Slice [{start}, {end}) is outside the {len(rows)} questions of {name_or_path}.")
    stem = Path(str(name_or_path)).stem
    records = []
    for row_no in range(start, end):
        row = rows[row_no]
        question = str(row.get("question") or "").strip()
        golds: list[str] = []
        for value in [row.get("answer"), *(row.get(f) for f in ALIAS_FIELDS)]:
            for gold in value if isinstance(value, list) else [value]:
                if gold is not None and str(gold).strip() and str(gold) not in golds:
                    golds.append(str(gold))
        if not question or not golds:
            raise ValueError(f"{source}: row {row_no} needs a 'question' and an 'answer' (or 'golden_answers').")
        records.append(
            {
                "prompt": search_messages(question, template=template, example=example),
                "question": question,
                "golden_answers": golds,
                "id": str(row.get("id") or row.get("_id") or f"{stem}/{row_no}"),
                "type": str(row.get("type") or ""),
            }
        )
    return datasets.Dataset.from_list(records)
