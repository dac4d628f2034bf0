"""The client of a Search-R1-style retrieval server (core layer; docs/architecture.md "Retrieval").

`POST <url>/retrieve` with `{"queries": [...], "topk": k, "return_scores": true}`, the API of Search-R1's retrieval
server (PeterGriffinJin/Search-R1, `search_r1/search/retrieval_server.py`); the answer is
`{"result": [[{"document": {...}, "score": s}, ...], ...]}` (one list per query; without scores the inner items are
the documents themselves). A document is `{"title", "text"}` or Search-R1's `{"contents": '"Title"\\ntext'}`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from procrl.retrieval.index import Passage, document_to_passage

__all__ = ["RetrieverClient", "parse_retrieve_response"]


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
        """One list of at most `topk` passages per query, best first (the server's order and scores).

        Raises:
            TypeError: `queries` is a single string. RuntimeError: see the class docstring.
        """
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
                return parse_retrieve_response(response.json(), len(queries))
            except (httpx.TransportError, httpx.HTTPStatusError) as err:
                last_error = err
                if isinstance(err, httpx.HTTPStatusError) and err.response.status_code < 500:
                    break
                if attempt < self.max_retries:
                    time.sleep(0.5 * 2**attempt)
        raise RuntimeError(f"Retrieval server {self.url} failed after {attempts} attempt(s): {last_error}")


def parse_retrieve_response(body: Any, num_queries: int) -> list[list[Passage]]:
    """The passages of a `/retrieve` answer (module docstring), one list per query.

    Raises:
        RuntimeError: the body has no `result` list with one entry per query.

    >>> parse_retrieve_response({"result": [[{"document": {"title": "A", "text": "a"}, "score": 2}]]}, 1)
    [[Passage(title='A', text='a', score=2.0)]]
    """
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != num_queries:
        raise RuntimeError(f"Retrieval server answered {str(body)[:200]!r}; expected {{'result': [...]}} per query.")
    out = []
    for hits in result:
        passages = []
        for hit in hits:
            if isinstance(hit, dict) and "document" in hit:
                score = hit.get("score")
                passages.append(document_to_passage(hit["document"], None if score is None else float(score)))
            else:
                passages.append(document_to_passage(hit))
        out.append(passages)
    return out
