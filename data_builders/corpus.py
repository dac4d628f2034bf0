"""Retrieval for search-interleaved rollouts (DESIGN §4 "StepGap", "Retrieval"): a bm25s index over a local corpus,
a client for a Search-R1-style retrieval server, our own server with that API, and the multi-hop QA questions.

Everything that retrieves implements one method, `search(queries, topk) -> list[list[Passage]]` (one list of at
most `topk` passages per query, best first), so the search environment does not care where passages come from:

- `BM25Index`: bm25s (Lucene BM25, English stopwords, lower-cased word tokens) over a JSONL corpus of
  `{"title", "text"}` records; `build`, `save`, `load`, `from_jsonl`. Passages whose score is 0 (no query term
  occurs in them) are never returned, so a query made only of stopwords retrieves nothing.
- `RetrieverClient`: `POST <url>/retrieve` with `{"queries": [...], "topk": k, "return_scores": true}`, the API of
  Search-R1's retrieval server (PeterGriffinJin/Search-R1, `search_r1/search/retrieval_server.py`); the answer is
  `{"result": [[{"document": {...}, "score": s}, ...], ...]}` (one list per query; without scores the inner items
  are the documents themselves). A document is `{"title", "text"}` or Search-R1's `{"contents": '"Title"\\ntext'}`.
- `serve_retriever(index, host="127.0.0.1", port=8000)` serves any retriever with that API (fastapi + uvicorn);
  `procrl serve-retriever --index <dir|corpus.jsonl|2wiki_corpus_sample> --port 8000` is its command line.
  Documents it returns carry both forms (`title`, `text` and `contents`), so Search-R1 clients can read them too.

Shipped data (`data/SOURCE.md`): `2wiki_dev_sample` (200 2WikiMultihopQA dev questions) and `2wiki_corpus_sample`
(1,467 paragraphs: their supporting paragraphs plus the other paragraphs of their contexts as distractors).

    >>> index = BM25Index.from_jsonl("2wiki_corpus_sample")
    >>> [p.title for p in index.search(["Who was the mother of Lothair II?"], topk=1)[0]]
    ['Lothair II']
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Protocol

import datasets
from pydantic import BaseModel, Field

from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "BUILTIN_CORPORA",
    "BUILTIN_QUESTIONS",
    "SEARCH_PROMPT",
    "BM25Index",
    "Passage",
    "Retriever",
    "RetrieverClient",
    "RetrieverServer",
    "format_passages",
    "load_corpus",
    "load_qa_questions",
    "main",
    "make_app",
    "serve_retriever",
]

BUILTIN_CORPORA = {"2wiki_corpus_sample": "2wiki_corpus_sample.jsonl"}
BUILTIN_QUESTIONS = {"2wiki_dev_sample": "2wiki_dev_sample.jsonl"}


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


# --------------------------------------------------------------------------------------------------------------------
# Corpus and the BM25 index
# --------------------------------------------------------------------------------------------------------------------


def _data_path(name_or_path: str | Path, builtin: dict[str, str]) -> Path | Any:
    if str(name_or_path) in builtin:
        return files("procrl.data_builders").joinpath("data", builtin[str(name_or_path)])
    path = Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"{name_or_path!r} is neither a file nor a built-in name ({sorted(builtin)}).")
    return path


def _read_jsonl(source) -> list[dict]:
    rows = []
    with source.open("r", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{source}: line {line_no} is not valid JSON ({err}).") from err
    return rows


def load_corpus(name_or_path: str | Path) -> list[Passage]:
    """Passages of a JSONL corpus (`{"title", "text"}` per line; `contents` = '"Title"\\ntext' is accepted too) or
    of a built-in corpus name (`2wiki_corpus_sample`).

    Raises:
        FileNotFoundError: neither a file nor a built-in name.
        ValueError: a line is not JSON or has no text.
    """
    source = _data_path(name_or_path, BUILTIN_CORPORA)
    passages = []
    for row_no, row in enumerate(_read_jsonl(source), start=1):
        passage = _document_to_passage(row)
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
        import bm25s

        items = [p if isinstance(p, Passage) else _document_to_passage(p) for p in passages]
        if not items:
            raise ValueError("BM25Index.build: the corpus is empty; pass at least one {'title', 'text'} passage.")
        tokens = bm25s.tokenize([f"{p.title}\n{p.text}" for p in items], stopwords=stopwords, show_progress=False)
        retriever = bm25s.BM25(k1=k1, b=b)
        retriever.index(tokens, show_progress=len(items) > 10_000)
        return cls(retriever, [Passage(p.title, p.text) for p in items], stopwords=stopwords)

    @classmethod
    def from_jsonl(cls, name_or_path: str | Path, **kwargs) -> BM25Index:
        """Build from a JSONL corpus file or a built-in corpus name (see `load_corpus`)."""
        return cls.build(load_corpus(name_or_path), **kwargs)

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
        import bm25s

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
        """
        import bm25s

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


# --------------------------------------------------------------------------------------------------------------------
# Search-R1 retrieval-server API: client and server
# --------------------------------------------------------------------------------------------------------------------


def _document_to_passage(document: Any, score: float | None = None) -> Passage:
    """A server document -> Passage: `{"title", "text"}`, Search-R1's `{"contents": '"Title"\\ntext'}`, or a string."""
    if isinstance(document, str):
        document = {"contents": document}
    if not isinstance(document, dict):
        raise ValueError(f"Retrieval document must be a dict or a string, got {type(document).__name__}.")
    if "text" in document or "title" in document:
        return Passage(str(document.get("title") or ""), str(document.get("text") or ""), score)
    contents = str(document.get("contents") or "")
    title, _, text = contents.partition("\n")
    return Passage(title.strip().strip('"'), text.strip(), score)


class RetrieverClient:
    """Client of a Search-R1-style retrieval server (`POST <base_url>/retrieve`; see the module docstring).

    Args:
        base_url: e.g. "http://127.0.0.1:8000" (a trailing "/retrieve" is accepted).
        timeout_s: per request.
        max_retries: extra attempts after a connection error or a 5xx answer, with exponential backoff
            (0.5 s, 1 s, ...).

    Raises (from `search`):
        RuntimeError: the server could not be reached or answered with a malformed body after all retries.
    """

    def __init__(self, base_url: str, *, timeout_s: float = 30.0, max_retries: int = 2):
        base_url = base_url.rstrip("/")
        self.url = base_url if base_url.endswith("/retrieve") else base_url + "/retrieve"
        self.timeout_s = timeout_s
        self.max_retries = max_retries

    def __repr__(self) -> str:
        return f"RetrieverClient({self.url!r})"

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        import httpx

        if isinstance(queries, str):
            raise TypeError("RetrieverClient.search takes a list of queries; wrap a single query as [query].")
        if not queries:
            return []
        payload = {"queries": list(queries), "topk": int(topk), "return_scores": True}
        last_error: Exception | None = None
        attempts = 0
        for attempt in range(self.max_retries + 1):
            attempts += 1
            try:
                response = httpx.post(self.url, json=payload, timeout=self.timeout_s)
                if response.status_code >= 500:
                    raise httpx.HTTPStatusError("server error", request=response.request, response=response)
                response.raise_for_status()
                return _parse_retrieve_response(response.json(), len(queries))
            except (httpx.TransportError, httpx.HTTPStatusError) as err:
                last_error = err
                if isinstance(err, httpx.HTTPStatusError) and err.response.status_code < 500:
                    break
                if attempt < self.max_retries:
                    time.sleep(0.5 * 2**attempt)
        raise RuntimeError(f"Retrieval server {self.url} failed after {attempts} attempt(s): {last_error}")


def _parse_retrieve_response(body: Any, num_queries: int) -> list[list[Passage]]:
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != num_queries:
        raise RuntimeError(f"Retrieval server answered {str(body)[:200]!r}; expected {{'result': [...]}} per query.")
    out = []
    for hits in result:
        passages = []
        for hit in hits:
            if isinstance(hit, dict) and "document" in hit:
                score = hit.get("score")
                passages.append(_document_to_passage(hit["document"], None if score is None else float(score)))
            else:
                passages.append(_document_to_passage(hit))
        out.append(passages)
    return out


class RetrieveRequest(BaseModel):
    """Body of `POST /retrieve` (Search-R1's `QueryRequest`)."""

    queries: list[str]
    topk: int | None = Field(default=None, ge=1, le=1000)
    return_scores: bool = False


def make_app(retriever: Retriever, *, default_topk: int = 3):
    """A fastapi app serving `retriever` with Search-R1's `POST /retrieve` API (and `GET /health`)."""
    from fastapi import FastAPI

    app = FastAPI(title="procrl retriever")
    lock = threading.Lock()  # bm25s is not documented as thread-safe; requests are served one at a time

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "passages": len(retriever) if hasattr(retriever, "__len__") else None}

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict:
        with lock:
            results = retriever.search(request.queries, topk=request.topk or default_topk)
        resp = []
        for passages in results:
            docs = [
                {"title": p.title, "text": p.text, "contents": f'"{p.title}"\n{p.text}'} for p in passages
            ]  # both our form and Search-R1's `contents`
            if request.return_scores:
                resp.append([{"document": d, "score": p.score} for d, p in zip(docs, passages, strict=True)])
            else:
                resp.append(docs)
        return {"result": resp}

    return app


def serve_retriever(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, *, default_topk: int = 3):
    """Serve `retriever` on http://host:port until interrupted (blocking). Loopback by default (DESIGN §3)."""
    import uvicorn

    logger.info("serving %s on http://%s:%d/retrieve", type(retriever).__name__, host, port)
    uvicorn.run(make_app(retriever, default_topk=default_topk), host=host, port=port, log_level="warning")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class RetrieverServer:
    """`serve_retriever` in a background thread of this process (tests, notebooks, the launch entry).

    >>> with RetrieverServer(BM25Index.build([{"title": "A", "text": "alpha beta"}])) as server:
    ...     RetrieverClient(server.base_url).search(["alpha"], topk=1)[0][0].title
    'A'
    """

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int | None = None, default_topk: int = 3):
        import uvicorn

        self.host, self.port = host, port or free_port(host)
        config = uvicorn.Config(
            make_app(retriever, default_topk=default_topk), host=self.host, port=self.port, log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="procrl-retriever", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> RetrieverServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"The retriever server did not start on {self.base_url} within {timeout_s} s.")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> RetrieverServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------------------------------

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
        ValueError: a record without a question or any gold answer, a bad slice, or a template without `{question}`.
    """
    if "{question}" not in template:
        raise ValueError("The prompt template must contain the placeholder {question}.")
    source = _data_path(name_or_path, BUILTIN_QUESTIONS)
    rows = _read_jsonl(source)
    end = len(rows) if end is None else end
    if not (0 <= start <= end <= len(rows)):
        raise ValueError(f"Slice [{start}, {end}) is outside the {len(rows)} questions of {name_or_path}.")
    stem = Path(str(name_or_path)).stem
    shots = []
    if example:
        shots = [
            {"role": "user", "content": template.replace("{question}", SEARCH_EXAMPLE_QUESTION)},
            {"role": "assistant", "content": SEARCH_EXAMPLE_REPLY},
        ]
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
                "prompt": [*shots, {"role": "user", "content": template.replace("{question}", question)}],
                "question": question,
                "golden_answers": golds,
                "id": str(row.get("id") or row.get("_id") or f"{stem}/{row_no}"),
                "type": str(row.get("type") or ""),
            }
        )
    return datasets.Dataset.from_list(records)


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="procrl serve-retriever",
        description="Serve a BM25 index with the Search-R1 retrieval API (POST /retrieve).",
    )
    parser.add_argument(
        "--index",
        required=True,
        help="a saved index directory, a JSONL corpus of {title, text} (indexed on start), or a built-in corpus "
        f"name ({', '.join(BUILTIN_CORPORA)})",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--topk", type=int, default=3, help="passages per query when a request gives no topk")
    parser.add_argument("--save", default=None, help="also save the index built from a JSONL corpus to this directory")
    return parser


def open_index(spec: str | Path) -> BM25Index:
    """A saved index directory, a JSONL corpus, or a built-in corpus name -> BM25Index."""
    path = Path(spec)
    if path.is_dir():
        return BM25Index.load(path)
    return BM25Index.from_jsonl(spec)


def main(argv: list[str] | None = None) -> int:
    """`procrl serve-retriever --index … [--host 127.0.0.1] [--port 8000]`; returns the exit code."""
    args = make_parser().parse_args(argv)
    index = open_index(args.index)
    if args.save:
        index.save(args.save)
    logger.info("index with %d passages", len(index))
    serve_retriever(index, host=args.host, port=args.port, default_topk=args.topk)
    return 0
