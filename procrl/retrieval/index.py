"""Passages, the retriever contract and the bm25s index over a local JSONL corpus (core layer; docs/architecture.md "StepGap",
"Retrieval").

Everything that retrieves implements one method, `search(queries, topk) -> list[list[Passage]]` (one list of at
most `topk` passages per query, best first), so the search environment does not care where passages come from.

`BM25Index`: bm25s (Lucene BM25, English stopwords, lower-cased word tokens) over a JSONL corpus of
`{"title", "text"}` records; `build`, `save`, `load`, `from_jsonl`. Passages whose score is 0 (no query term occurs
in them) are never returned, so a query made only of stopwords retrieves nothing.

This layer takes paths only: the corpora shipped with procrl (`2wiki_corpus_sample`) are resolved by name in
`procrl.data_builders.search_qa` (`load_corpus`, `open_index`).

    >>> index = BM25Index.build([{"title": "Paris", "text": "Paris is the capital of France."}, Passage("B", "b")])
    >>> [p.title for p in index.search(["capital of France"], topk=1)[0]]
    ['Paris']
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Protocol

import bm25s

from procrl.utils import read_jsonl  # re-exported: procrl.retrieval.read_jsonl

__all__ = [
    "BM25Index",
    "Passage",
    "Retriever",
    "document_to_passage",
    "format_passages",
    "information_block",
    "load_corpus",
    "open_index",
    "read_jsonl",
]


@dataclass
class Passage:
    """One retrieved paragraph. `score`: the retriever's relevance score (BM25 for `BM25Index`, higher = better),
    None when the source gives none."""

    title: str
    text: str
    score: float | None = None


class Retriever(Protocol):
    """What the search environment needs: one list of at most `topk` passages per query, best first."""

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]: ...


def format_passages(passages: Sequence[Passage]) -> str:
    """The text inside `<information>`: one line per passage, `Doc i (Title: t) text` (1-based, Search-R1's layout).

    >>> format_passages([Passage("Paris", "Paris is the capital of France.")])
    'Doc 1 (Title: Paris) Paris is the capital of France.'
    """
    return "\n".join(f"Doc {i} (Title: {p.title}) {p.text}" for i, p in enumerate(passages, start=1))


def information_block(passages: Sequence[Passage]) -> str:
    """The environment text a search appends to a Search-R1 episode (`procrl.trainers.search_env.SearchEnvironment`;
    the SFT episodes of `procrl.data_builders.world_episodes` write the same): `format_passages` inside
    `<information>` tags, with a newline before and after.

    >>> information_block([Passage("Paris", "Paris is in France.")])
    '\\n<information>Doc 1 (Title: Paris) Paris is in France.</information>\\n'
    """
    return "\n<information>" + format_passages(passages) + "</information>\n"


def document_to_passage(document: Any, score: float | None = None) -> Passage:
    """A document -> Passage: `{"title", "text"}`, Search-R1's `{"contents": '"Title"\\ntext'}`, or a string.

    Raises:
        ValueError: a document that is neither a dict nor a string.

    >>> document_to_passage({"contents": '"Paris"\\nCapital of France.'}, 3.5)
    Passage(title='Paris', text='Capital of France.', score=3.5)
    """
    if isinstance(document, str):
        document = {"contents": document}
    if not isinstance(document, dict):
        raise ValueError(f"Retrieval document must be a dict or a string, got {type(document).__name__}.")
    if "text" in document or "title" in document:
        return Passage(str(document.get("title") or ""), str(document.get("text") or ""), score)
    contents = str(document.get("contents") or "")
    title, _, text = contents.partition("\n")
    return Passage(title.strip().strip('"'), text.strip(), score)


def load_corpus(path: str | os.PathLike | Traversable) -> list[Passage]:
    """Passages of a JSONL corpus file (`{"title", "text"}` per line; `contents` = '"Title"\\ntext' is accepted too).

    Raises:
        FileNotFoundError: not a file (a built-in corpus name is resolved by
            `procrl.data_builders.search_qa.load_corpus`).
        ValueError: a line is not JSON or has no text.
    """
    source = Path(path) if isinstance(path, str | os.PathLike) else path
    if not source.is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not a file; pass a JSONL corpus of {{title, text}} records (built-in corpus names such "
            "as 2wiki_corpus_sample are opened by procrl.data_builders.search_qa.load_corpus / open_index)."
        )
    passages = []
    for row_no, row in enumerate(read_jsonl(source), start=1):
        passage = document_to_passage(row)
        if not passage.text and not passage.title:
            raise ValueError(f"{source}: record {row_no} has no 'title'/'text' (or 'contents'): {row!r:.200}")
        passages.append(passage)
    return passages


class BM25Index:
    """A bm25s index (Lucene BM25 with k1 = 1.5, b = 0.75, bm25s' defaults) and the passages it indexes.

    Tokenisation: bm25s' default (lower case, word tokens of >= 2 characters, English stopwords removed, no
    stemming); title and text are indexed together as "title\\ntext".
    """

    _PASSAGES_FILE = "passages.jsonl"
    _META_FILE = "procrl_bm25.json"

    def __init__(self, retriever, passages: list[Passage], *, stopwords: str = "en"):
        self.retriever = retriever
        self.passages = passages
        self.stopwords = stopwords

    @classmethod
    def build(
        cls, passages: Iterable[Passage | dict], *, stopwords: str = "en", k1: float = 1.5, b: float = 0.75
    ) -> BM25Index:
        """Index `passages` (Passage objects or `{"title", "text"}` dicts). Raises ValueError on an empty corpus."""
        items = [p if isinstance(p, Passage) else document_to_passage(p) for p in passages]
        if not items:
            raise ValueError("BM25Index.build: the corpus is empty; pass at least one {'title', 'text'} passage.")
        tokens = bm25s.tokenize([f"{p.title}\n{p.text}" for p in items], stopwords=stopwords, show_progress=False)
        retriever = bm25s.BM25(k1=k1, b=b)
        retriever.index(tokens, show_progress=len(items) > 10_000)
        return cls(retriever, [Passage(p.title, p.text) for p in items], stopwords=stopwords)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike | Traversable, **kwargs) -> BM25Index:
        """Build from a JSONL corpus file (see `load_corpus`; built-in names: `procrl.data_builders.search_qa`)."""
        return cls.build(load_corpus(path), **kwargs)

    def save(self, directory: str | Path) -> Path:
        """Write the index (bm25s' arrays), the passages and our metadata into `directory` (created)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(directory), show_progress=False)
        with (directory / self._PASSAGES_FILE).open("w", encoding="utf-8") as handle:
            for p in self.passages:
                handle.write(json.dumps({"title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
        meta = {"num_passages": len(self.passages), "stopwords": self.stopwords, "format": "procrl-bm25s-1"}
        (directory / self._META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> BM25Index:
        """Load an index written by `save`. Raises FileNotFoundError/ValueError when the directory is not one."""
        directory = Path(directory)
        meta_path = directory / cls._META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{directory} is not a procrl BM25 index (no {cls._META_FILE}); build one with "
                "BM25Index.from_jsonl(corpus).save(directory)."
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        passages = load_corpus(directory / cls._PASSAGES_FILE)
        if len(passages) != meta["num_passages"]:
            raise ValueError(f"{directory}: {len(passages)} passages but the metadata says {meta['num_passages']}.")
        retriever = bm25s.BM25.load(str(directory), show_progress=False)
        return cls(retriever, passages, stopwords=meta.get("stopwords", "en"))

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """Top-`topk` passages per query, best first, with their BM25 scores; passages with score 0 are left out.

        Args:
            queries: B query strings (an empty or stopword-only query retrieves nothing).
            topk: passages per query, >= 1 (capped at the corpus size).

        Returns:
            B lists of at most `topk` `Passage`s (copies: callers may modify them).

        Raises:
            TypeError: `queries` is a single string. ValueError: `topk` < 1.
        """
        if isinstance(queries, str):
            raise TypeError("BM25Index.search takes a list of queries; wrap a single query as [query].")
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}.")
        if not queries:
            return []
        k = min(int(topk), len(self.passages))
        tokens = bm25s.tokenize(list(queries), stopwords=self.stopwords, show_progress=False, return_ids=False)
        results: list[list[Passage]] = [[] for _ in queries]
        nonempty = [i for i, t in enumerate(tokens) if t]
        if not nonempty:
            return results
        # bm25s drops query tokens outside its vocabulary itself; pass the token strings of non-empty queries only
        docs, scores = self.retriever.retrieve(
            [tokens[i] for i in nonempty], k=k, show_progress=False, n_threads=1, return_as="tuple"
        )
        for row, i in enumerate(nonempty):
            for doc_id, score in zip(docs[row].tolist(), scores[row].tolist(), strict=True):
                if score > 0 and math.isfinite(score):
                    p = self.passages[int(doc_id)]
                    results[i].append(Passage(p.title, p.text, float(score)))
        return results


def open_index(path: str | os.PathLike) -> BM25Index:
    """A saved index directory (`BM25Index.load`) or a JSONL corpus file (indexed now) -> BM25Index.

    Raises:
        FileNotFoundError: neither a directory nor a file (built-in corpus names:
            `procrl.data_builders.search_qa.open_index`).
    """
    if Path(path).is_dir():
        return BM25Index.load(path)
    return BM25Index.from_jsonl(path)
