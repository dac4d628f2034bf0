"""`procrl serve-retriever`: serve a BM25 index with the Search-R1 retrieval API (`POST /retrieve`, `GET /health`).

    procrl serve-retriever --index 2wiki_corpus_sample [--host 127.0.0.1] [--port 8000] [--topk 3] [--save DIR]
    procrl serve-retriever --config serve.yaml --port 8001     # a YAML of these fields; flags override it
    python -m procrl.scripts.serve_retriever --index corpus.jsonl

`--index` is a saved index directory, a JSONL corpus of {title, text} (indexed on start) or a built-in corpus name
(`procrl.data_builders.search_qa.open_index`); the server (`procrl.retrieval.serve_retriever`) blocks until
interrupted. Multi-word flags are accepted with dashes or underscores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import TrlParser

from procrl.data_builders.search_qa import BUILTIN_CORPORA, open_index
from procrl.retrieval import serve_retriever
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["ServeRetrieverArguments", "main", "make_parser"]


@dataclass
class ServeRetrieverArguments:
    """The flags of `procrl serve-retriever` (module docstring)."""

    index: str = field(
        metadata={
            "help": "a saved index directory, a JSONL corpus of {title, text} (indexed on start), or a built-in "
            f"corpus name ({', '.join(BUILTIN_CORPORA)})"
        }
    )
    host: str = field(default="127.0.0.1", metadata={"help": "bind address (loopback by default)"})
    port: int = field(default=8000, metadata={"help": "TCP port (1-65535)"})
    topk: int = field(default=3, metadata={"help": "passages per query when a request gives no topk"})
    save: str | None = field(
        default=None, metadata={"help": "also save the index built from a JSONL corpus to this directory"}
    )

    def __post_init__(self) -> None:
        if not str(self.index).strip():
            raise ValueError(
                f"--index is empty: pass a saved index directory, a JSONL corpus or one of {sorted(BUILTIN_CORPORA)}."
            )
        if not 1 <= self.port <= 65535:
            raise ValueError(f"--port {self.port} is not a TCP port: pass one in 1-65535, e.g. --port 8000.")
        if self.topk < 1:
            raise ValueError(f"--topk {self.topk} must be >= 1 (passages per query), e.g. --topk 3.")


def make_parser() -> TrlParser:
    """The parser of `procrl serve-retriever` (`--config x.yaml` sets the fields; flags override it)."""
    return TrlParser(
        (ServeRetrieverArguments,), prog="procrl serve-retriever", description=__doc__, formatter_class=HelpFormatter
    )


def main(argv: list[str] | None = None) -> int:
    """`procrl serve-retriever --index … [--host 127.0.0.1] [--port 8000]`; returns the exit code (2 after one error
    line for a bad argument: an unknown flag, a port outside 1-65535, `--topk` < 1).

    Raises:
        FileNotFoundError: `--index` is neither a directory, a file nor a built-in corpus name.
    """
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    configure_logging()
    index = open_index(args.index)
    if args.save:
        index.save(args.save)
    logger.info("index with %d passages", len(index))
    serve_retriever(index, host=args.host, port=args.port, default_topk=args.topk)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
