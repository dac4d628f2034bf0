"""`procrl world-eval`: a search policy's calibration row in the synthetic world (issue 29; docs/architecture.md
"World episodes"): EM, format-violation rate, searches per episode and the StepGap oracle's label shares.

    procrl world-eval --model /path/to/sft/checkpoint --world data/world0 --split test --n 100

The first `n` questions of `<world>/<split>/questions.jsonl`, prompted as `task: search` prompts them
(`prompt_template: search`, no worked example unless --example), run through the search environment that GRPO uses
(`procrl.trainers.search_env.SearchEnvironment` over a BM25 index of the split's corpus, top-k and search limit as
given), greedy by default, on vLLM where it runs (`--generation_backend`; a batch of 64 episodes on vLLM-CPU runs
its turns together, far faster than transformers `generate`); the traces are labelled by the split's oracle
(`procrl.evals.world_policy`). Prints the row and writes `<output_dir>/world_eval.json` (settings, row, per-episode
records), `episodes.jsonl` (texts) and `annotated.jsonl`: every episode whose steps are all well-formed, with the oracle's label of each step as its gold, in
the format `procrl stepgap-eval --data` reads (`procrl.evals.world_policy.annotated_record`), so the StepGap verifier
is measured on the policy's own steps:

    procrl world-eval --model CKPT --world data/world0 --split test --n 500 --output_dir outputs/world_eval/organism
    procrl stepgap-eval --data outputs/world_eval/organism/annotated.jsonl --nli outputs/nli/minilm ...
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from procrl.data_builders.search_qa import SEARCH_PROMPT, load_qa_questions
from procrl.data_builders.synthetic_world import load_world_oracle, world_paths
from procrl.evals.reporting import markdown_table
from procrl.evals.world_policy import WORLD_LABELS, annotated_record, episode_record, policy_row
from procrl.generation import EngineArguments, SamplingParams, make_engine_from, render_prompts
from procrl.generation.vllm_engine import auto_engine
from procrl.models import load_policy
from procrl.retrieval import BM25Index
from procrl.scripts._common import (
    EXIT_USAGE,
    ConfigParser,
    HelpFormatter,
    configure_logging,
    parse_or_exit,
    usage_error,
)
from procrl.trainers.search_env import SearchEnvironment
from procrl.utils import get_logger

__all__ = ["WorldEvalArguments", "main", "make_parser"]

PROG = "procrl world-eval"
logger = get_logger(__name__)


@dataclass
class WorldEvalArguments:
    """Which policy, which questions, and the environment's settings."""

    model: str = field(metadata={"help": "policy: a checkpoint directory (procrl sft's), a hub id, or default"})
    world: str = field(default="data/world0", metadata={"help": "a folder written by procrl world build"})
    split: str = field(default="test", metadata={"help": "train, dev or test"})
    n: int = field(default=100, metadata={"help": "the first n questions of the split (>= 1)"})
    topk: int = field(default=3, metadata={"help": "passages per search (the episodes' and GRPO's search_topk)"})
    max_turns: int = field(default=4, metadata={"help": "searches per episode at most (search_max_turns)"})
    max_completion_length: int = field(
        default=1536, metadata={"help": "token budget of an episode, model + environment tokens"}
    )
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy; else sampling at this temperature"})
    batch_size: int = field(default=16, metadata={"help": "episodes generated together"})
    example: bool = field(default=False, metadata={"help": "prompt with the worked 2Wiki episode first"})
    seed: int = field(default=0, metadata={"help": "torch seed (sampling)"})
    output_dir: str = field(default="outputs/world_eval", metadata={"help": "where world_eval.json goes"})
    progress: bool = field(default=True, metadata={"help": "a progress bar over the batches (--no_progress: none)"})

    def __post_init__(self) -> None:
        if self.n < 1 or self.batch_size < 1 or self.max_completion_length < 1 or self.temperature < 0:
            raise ValueError("n, batch_size and max_completion_length must be >= 1 and temperature >= 0")
        path = Path(self.model).expanduser()
        local = (
            path.is_absolute()
            or self.model.startswith((".", "~"))
            or (path.parent != Path(".") and path.parent.is_dir())
        )
        if local and not path.is_dir():  # "org/name" whose "org" is no local folder stays a hub id
            raise ValueError(f"--model {self.model}: no such checkpoint directory (procrl sft prints the one it wrote; "
                             "or a hub id, or default)")  # fmt: skip


def make_parser() -> ConfigParser:
    """The parser of `procrl world-eval` (`WorldEvalArguments` and the engine's `EngineArguments`, `--config` too)."""
    return ConfigParser(
        (WorldEvalArguments, EngineArguments), prog=PROG, description=__doc__, formatter_class=HelpFormatter
    )


def run(args: WorldEvalArguments, engine_args: EngineArguments | None = None) -> dict:
    """Roll out, label and measure (module docstring); returns {settings, row, records, texts, annotated, wall_s}.

    `engine_args` chooses the engine (`generation_backend`; default auto: vLLM where it runs): with vLLM each batch
    runs turn by turn through `SearchEnvironment.run_vllm` (greedy unseeded; a sampled row seeded by (seed, its
    question's index, turn), so a row's episode depends neither on its batch nor on the batch size), with transformers
    through `SearchEnvironment.run` (batched `generate`, `torch.manual_seed(seed)` once).
    """
    engine_args = engine_args or EngineArguments()
    questions_path, corpus_path = world_paths(args.world, args.split)
    oracle = load_world_oracle(questions_path, corpus_path)
    env = SearchEnvironment(BM25Index.from_jsonl(corpus_path), topk=args.topk, max_turns=args.max_turns)
    rows = load_qa_questions(questions_path, end=args.n, template=SEARCH_PROMPT, example=args.example)
    rollout, tokenizer, backend = _rollout(args, engine_args, env)
    records, texts, annotated = [], [], []
    start = time.perf_counter()
    for lo in tqdm(range(0, len(rows), args.batch_size), desc="world-eval batches", disable=not args.progress):
        batch = rows.select(range(lo, min(lo + args.batch_size, len(rows))))
        episodes = rollout(list(batch["prompt"]), lo)
        for trace, ids, golds, qid in zip(episodes.search_trace, episodes.completion_ids, batch["golden_answers"],
                                          batch["id"], strict=True):  # fmt: skip
            records.append(episode_record(trace, golds, oracle))
            texts.append(tokenizer.decode(ids, skip_special_tokens=True))
            annotated.append(annotated_record(trace, records[-1], {"id": qid, "answer": golds[0]}))
    wall = time.perf_counter() - start
    settings = {**asdict(args), "generation_backend": backend}
    return {"settings": settings, "row": policy_row(records), "records": records, "texts": texts,
            "annotated": [a for a in annotated if a is not None], "wall_s": wall}  # fmt: skip


def _rollout(args: WorldEvalArguments, engine_args: EngineArguments, env: SearchEnvironment):
    """(rollout(prompts, offset) -> SearchEpisodes, tokenizer, backend name) for the engine `engine_args` names;
    `offset` is the index of the batch's first question."""
    backend = engine_args.generation_backend
    if backend == "auto":
        backend, reason = auto_engine()
        logger.info("world-eval engine: %s (%s)", backend, reason)
    if backend == "vllm":
        # seeded requests on vLLM-CPU must prefill within one step (VLLMEngine._prefill_groups): a step budget that
        # holds a whole batch of prompts at their longest keeps a batch in one call
        budget = max(8192, args.batch_size * (args.max_completion_length + 512))
        engine = make_engine_from(replace(engine_args, generation_backend="vllm"), args.model, dtype="float32",
                                  max_num_batched_tokens=budget, max_num_seqs=max(256, args.batch_size))  # fmt: skip
        params = SamplingParams(temperature=args.temperature, top_p=1.0, top_k=0)

        def vllm_rollout(prompts, offset):
            return env.run_vllm(engine, engine.tokenizer, prompts, render_prompts(engine.tokenizer, prompts), params,
                                max_completion_length=args.max_completion_length, seed=args.seed,
                                row_offset=offset)  # fmt: skip

        return vllm_rollout, engine.tokenizer, backend
    model, tokenizer = load_policy(args.model)
    model.eval()
    torch.manual_seed(args.seed)
    sampling = {"do_sample": True, "temperature": args.temperature, "top_p": 1.0, "top_k": 0} if args.temperature else {
        "do_sample": False}  # fmt: skip
    config = GenerationConfig(eos_token_id=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id, **sampling)

    def hf_rollout(prompts, offset):
        return env.run(model, tokenizer, prompts, render_prompts(tokenizer, prompts), config,
                       max_completion_length=args.max_completion_length, pad_token_id=tokenizer.pad_token_id,
                       eos_ids=[tokenizer.eos_token_id])  # fmt: skip

    return hf_rollout, tokenizer, backend


def main(argv: list[str] | None = None) -> int:
    """Run `procrl world-eval`; returns 0, or 2 after one error line for bad arguments."""
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    args, engine_args = parsed
    problems = engine_args.engine_problems()
    if problems:
        usage_error(PROG, "; ".join(problems))
        return EXIT_USAGE
    configure_logging()
    result = run(args, engine_args)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    kept = result.pop("annotated")
    result["annotated"] = {"episodes": len(kept), "steps": sum(len(a["steps"]) for a in kept),
                           "dropped_episodes": len(result["records"]) - len(kept)}  # fmt: skip
    (out / "world_eval.json").write_text(json.dumps({k: v for k, v in result.items() if k != "texts"}, indent=2))
    (out / "episodes.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in result["texts"]))
    (out / "annotated.jsonl").write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in kept))
    row = result["row"]
    header = ["policy", "n", "EM [95%]", "format viol.", "searches/ep", *WORLD_LABELS]
    em = f"{row['em']:.2f} [{row['em_low']:.2f}, {row['em_high']:.2f}]"
    cells = [args.model, row["n"], em, f"{row['format_violation_rate']:.2f}", f"{row['searches_per_episode']:.2f}",
             *("-" if row[f"label/{lab}"] is None else f"{row[f'label/{lab}']:.2f}" for lab in WORLD_LABELS)]  # fmt: skip
    print(markdown_table(header, [cells]))
    print(f"\n{row['steps']} steps; repairs: " + ", ".join(f"{g} {row[f'repair/{g}']}" for g in ("CC", "IE", "MB")))
    n_ann = result["annotated"]
    print(
        f"annotated: {out / 'annotated.jsonl'}: {n_ann['steps']} oracle-labelled steps of {n_ann['episodes']} "
        f"episodes ({n_ann['dropped_episodes']} with a malformed step left out)"
    )
    print(f"results: {out / 'world_eval.json'} ({result['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
