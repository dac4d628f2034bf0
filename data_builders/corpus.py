"""Deprecated: retrieval moved to the core package `procrl.retrieval`, the search task's data to
`procrl.data_builders.search_qa`; `procrl serve-retriever` is `procrl/scripts/serve_retriever.py`.

The old names keep working for one release, with a `DeprecationWarning` that names the new path:

- `procrl.retrieval`: Passage, Retriever, format_passages, RetrieverClient, RetrieveRequest, make_app,
  serve_retriever, free_port, RetrieverServer (`procrl.retrieval.BM25Index.from_jsonl` and `load_corpus` take
  paths there);
- `procrl.data_builders.search_qa`: BM25Index (now `BuiltinBM25Index`), load_corpus and open_index (which still
  accept the built-in corpus names),
  BUILTIN_CORPORA, BUILTIN_QUESTIONS, SEARCH_PROMPT, SEARCH_EXAMPLE_QUESTION, SEARCH_EXAMPLE_REPLY, ALIAS_FIELDS,
  load_qa_questions.
"""

from __future__ import annotations

from procrl.deprecation import moved_names

_RETRIEVAL = "procrl.retrieval"
_SEARCH_QA = "procrl.data_builders.search_qa"

__getattr__ = moved_names(
    __name__,
    {
        # the old class took built-in corpus names in from_jsonl: its successor in the data_builders layer still does
        "BM25Index": f"{_SEARCH_QA}:BuiltinBM25Index",
        "Passage": _RETRIEVAL,
        "Retriever": _RETRIEVAL,
        "format_passages": _RETRIEVAL,
        "RetrieverClient": _RETRIEVAL,
        "RetrieveRequest": _RETRIEVAL,
        "make_app": _RETRIEVAL,
        "serve_retriever": _RETRIEVAL,
        "free_port": _RETRIEVAL,
        "RetrieverServer": _RETRIEVAL,
        "load_corpus": _SEARCH_QA,
        "open_index": _SEARCH_QA,
        "BUILTIN_CORPORA": _SEARCH_QA,
        "BUILTIN_QUESTIONS": _SEARCH_QA,
        "SEARCH_PROMPT": _SEARCH_QA,
        "SEARCH_EXAMPLE_QUESTION": _SEARCH_QA,
        "SEARCH_EXAMPLE_REPLY": _SEARCH_QA,
        "ALIAS_FIELDS": _SEARCH_QA,
        "load_qa_questions": _SEARCH_QA,
    },
)
