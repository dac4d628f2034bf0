"""A retrieval server with Search-R1's API (`POST /retrieve`, see `procrl.retrieval.client`) over any retriever
(core layer; fastapi + uvicorn; docs/architecture.md "Retrieval").

`serve_retriever(index, host="127.0.0.1", port=8000)` serves until interrupted (`procrl serve-retriever --index
<dir|corpus.jsonl|2wiki_corpus_sample> --port 8000` is its command line, `procrl/scripts/serve_retriever.py`);
`RetrieverServer` runs the same app in a background thread. Documents it returns carry both forms (`title`,
`text` and `contents`), so Search-R1 clients can read them too.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, Field

from procrl.retrieval.index import Retriever
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["RetrieveRequest", "RetrieverServer", "free_port", "make_app", "serve_retriever"]


class RetrieveRequest(BaseModel):
    """Body of `POST /retrieve` (Search-R1's `QueryRequest`)."""

    queries: list[str]
    topk: int | None = Field(default=None, ge=1, le=1000)
    return_scores: bool = False


def make_app(retriever: Retriever, *, default_topk: int = 3) -> FastAPI:
    """A fastapi app serving `retriever` with Search-R1's `POST /retrieve` API (and `GET /health`)."""
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
    """Serve `retriever` on http://host:port until interrupted (blocking). Loopback by default (docs/architecture.md "Local servers")."""
    logger.info("serving %s on http://%s:%d/retrieve", type(retriever).__name__, host, port)
    uvicorn.run(make_app(retriever, default_topk=default_topk), host=host, port=port, log_level="warning")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class RetrieverServer:
    """`serve_retriever` in a background thread of this process (tests, notebooks, the launch entry).

    Raises (from `start`):
        RuntimeError: the server did not start within `timeout_s` seconds.

    >>> from procrl.retrieval import BM25Index, RetrieverClient
    >>> with RetrieverServer(BM25Index.build([{"title": "A", "text": "alpha beta"}])) as server:
    ...     RetrieverClient(server.base_url).search(["alpha"], topk=1)[0][0].title
    'A'
    """

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int | None = None, default_topk: int = 3):
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
