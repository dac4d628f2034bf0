"""Retrieval for search-interleaved rollouts (core layer; docs/architecture.md "StepGap", "Retrieval"): a bm25s index over a
local corpus, a client for a Search-R1-style retrieval server, and our own server with that API.

Everything that retrieves implements one method, `search(queries, topk) -> list[list[Passage]]` (one list of at
most `topk` passages per query, best first), so the search environment does not care where passages come from:

- `BM25Index` (`procrl.retrieval.index`): bm25s (Lucene BM25, English stopwords, lower-cased word tokens) over a
  JSONL corpus of `{"title", "text"}` records; `build`, `save`, `load`, `from_jsonl`. Passages whose score is 0 (no
  query term occurs in them) are never returned, so a query made only of stopwords retrieves nothing.
- `RetrieverClient` (`procrl.retrieval.client`): `POST <url>/retrieve` with `{"queries": [...], "topk": k,
  "return_scores": true}`, the API of Search-R1's retrieval server (PeterGriffinJin/Search-R1,
  `search_r1/search/retrieval_server.py`); the answer is `{"result": [[{"document": {...}, "score": s}, ...], ...]}`
  (one list per query; without scores the inner items are the documents themselves). A document is
  `{"title", "text"}` or Search-R1's `{"contents": '"Title"\\ntext'}`.
- `serve_retriever(index, host="127.0.0.1", port=8000)` (`procrl.retrieval.server`) serves any retriever with that
  API (fastapi + uvicorn); `procrl serve-retriever --index <dir|corpus.jsonl|2wiki_corpus_sample> --port 8000` is
  its command line (`procrl/scripts/serve_retriever.py`). Documents it returns carry both forms (`title`, `text`
  and `contents`), so Search-R1 clients can read them too.

This package takes paths; the shipped data (`2wiki_corpus_sample`, 1,467 paragraphs, and the 200 questions of
`2wiki_dev_sample`) is opened by name in `procrl.data_builders.search_qa`.
"""

from procrl.retrieval.client import RetrieverClient, parse_retrieve_response
from procrl.retrieval.index import (
    BM25Index,
    Passage,
    Retriever,
    document_to_passage,
    format_passages,
    information_block,
    load_corpus,
    open_index,
    read_jsonl,
)
from procrl.retrieval.server import RetrieveRequest, RetrieverServer, free_port, make_app, serve_retriever

__all__ = [
    "BM25Index",
    "Passage",
    "RetrieveRequest",
    "Retriever",
    "RetrieverClient",
    "RetrieverServer",
    "document_to_passage",
    "format_passages",
    "information_block",
    "free_port",
    "load_corpus",
    "make_app",
    "open_index",
    "parse_retrieve_response",
    "read_jsonl",
    "serve_retriever",
]
