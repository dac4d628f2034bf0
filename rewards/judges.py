"""Moved: the LLM judges are the core package `procrl.judges` (parse, cache, base, client, local, server, spec).

`from procrl.rewards.judges import open_judge` (and every other public name below) keeps working until procrl 0.3,
with a `DeprecationWarning` naming the new path; import from `procrl.judges` instead.
"""

from procrl.deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        name: "procrl.judges"
        for name in (
            "JudgeResult",
            "JudgeStats",
            "Judge",
            "OpenAICompatibleJudge",
            "TransformersJudge",
            "JudgeServer",
            "open_judge",
            "request_cache_key",
            "extract_json_object",
            "parse_judgement",
            "JudgeCache",
            "list_server_models",
            "DEFAULT_API_KEY_ENV",
        )
    },
)
