"""LLM judges (core layer): JSON judgements validated with pydantic, from any OpenAI-compatible server or a local model.

docs/architecture.md "Judges" and "Local servers". Every judge takes chat requests (one message list each) and a pydantic
schema, and returns one `JudgeResult` per request, in order:

    results = judge.judge([messages_1, messages_2], MySchema)   # list[JudgeResult[MySchema]]
    results[0].value        # a validated MySchema, or None when unscored
    results[0].unscored     # why not: "timeout" | "http_<status>" | "connection" | "invalid_json" |
                            #          "duplicate_key" | "schema_mismatch" | "empty" | "error:<ExceptionName>"

A failed judgement never raises: it is a typed "unscored" result, counted in `judge.stats`. Only bad arguments
raise (`ValueError`).

Backends:
- `OpenAICompatibleJudge` (`procrl.judges.client`): the `openai` client against vLLM, llama.cpp,
  `transformers serve` or a hosted API; temperature 0, each request's schema sent as `response_format` json_schema
  and top log-probs asked for (closed choices read as probabilities, `results[0].probs`), bounded concurrency,
  retries with backoff on timeouts, connection errors, malformed bodies, 429 and 5xx. The API key comes only from an
  environment variable (default `PROCRL_JUDGE_API_KEY`) and is never logged, cached or shown in a repr.
- `TransformersJudge` (`procrl.judges.local`): an in-process causal LM (greedy, chat template, batched left-padded
  `generate`), decoding under each reply's schema.
- `JudgeServer` (`procrl.judges.server`): starts vLLM's OpenAI-compatible server (`python -m
  vllm.entrypoints.openai.api_server --model <dir> --host 127.0.0.1 --port P`, CPU settings; structured outputs and
  log-probs) or, with `engine="transformers"`, `transformers serve` (which ignores the schema), and stops its whole
  process group. `open_judge("local")` pairs the vLLM server with an `OpenAICompatibleJudge`, or runs a
  `TransformersJudge` in this process where vLLM cannot be imported; `open_judge("serve:transformers")` is the
  `transformers serve` path.

The modules, by job: `parse` (the first JSON object of a reply, validated against the schema; a repeated key is
"duplicate_key"), `cache` (one JSON file per validated judgement, keyed by `request_cache_key`), `base`
(`JudgeResult`, `JudgeStats`, the `Judge` interface), `client`, `local`, `server` (the backends above) and `spec`
(`open_judge_from`, how a command opens the judge of its `JudgeArguments` (`arguments`: the settings every command
parses); `open_judge`, the judge of a spec; and `judge_options`, the keywords the settings become).

The names below are imported from their module on first use (PEP 562), so importing `procrl.judges.arguments`
(every command's parser) loads no backend.
"""

from procrl.utils import lazy_exports

# public name -> its module in this package
_EXPORTS = {
    "Judge": "base",
    "JudgeResult": "base",
    "JudgeStats": "base",
    "JudgeCache": "cache",
    "request_cache_key": "cache",
    "DEFAULT_API_KEY_ENV": "client",
    "OpenAICompatibleJudge": "client",
    "list_server_models": "client",
    "TransformersJudge": "local",
    "DuplicateKeyError": "parse",
    "extract_json_object": "parse",
    "parse_judgement": "parse",
    "JudgeServer": "server",
    "NO_JUDGE": "arguments",
    "ORACLE_JUDGE": "arguments",
    "JudgeArguments": "arguments",
    "judge_options": "spec",
    "open_judge": "spec",
    "open_judge_from": "spec",
}
__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
