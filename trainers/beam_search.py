"""Step-level beam search guided by a PUM (the library of `procrl beam`; DESIGN §4 "PUM" Beam search).

Every unfinished beam is extended by `expand` sampled next steps (generation stops after the step separator
"\\n\\n", at EOS, or after `max_step_tokens`); the finished beams and all new candidates compete and the `beams`
with the highest U(x, prefix) are kept. A beam is finished when it ends with EOS, its last step states an answer
(`extract_answer`), or it reached `max_new_tokens`. The search stops when every kept beam is finished or after
`max_steps` rounds; the answer is the best finished beam by U (the best beam when none finished).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Literal

import torch
from tqdm.auto import tqdm
from transformers import StoppingCriteriaList

from procrl.generation import generate_completions
from procrl.rewards.outcome import extract_answer, is_correct
from procrl.rewards.steps import split_steps, token_steps
from procrl.trainers.offline import OfflineConfig, accuracy, load_pum, load_setup, sampling_config, write_report

__all__ = ["Beam", "BeamConfig", "run_beam"]


@dataclass
class BeamConfig(OfflineConfig):
    """Settings of `procrl beam` (parsed by `TrlParser` in `procrl/scripts/beam.py`).

    Raises:
        ValueError: (on construction) `beams`, `expand`, `max_steps` or `max_step_tokens` < 1, no `pum` directory,
            or a bad shared setting (`OfflineConfig`).
    """

    scorer: Literal["pum"] = field(default="pum", metadata={"help": "beam scorer (U(x, prefix) of the PUM)"})
    beams: int = field(default=4, metadata={"help": "B: beams kept after every step"})
    expand: int = field(default=4, metadata={"help": "k: sampled next steps per beam"})
    max_steps: int = field(default=12, metadata={"help": "rounds of expansion at most"})
    max_step_tokens: int = field(default=128, metadata={"help": "token budget of one step"})
    output: str = field(default="outputs/beam/beam.json", metadata={"help": "JSON report path"})

    def problems(self) -> list[str]:
        problems = super().problems()
        small = [
            f"--{name.replace('_', '-')} ({getattr(self, name)})"
            for name in ("beams", "expand", "max_steps", "max_step_tokens")
            if getattr(self, name) < 1
        ]
        if small:
            problems.append(f"{', '.join(small)} must be >= 1 (e.g. --beams 4 --expand 4)")
        if not self.pum:
            problems.append("--pum PATH is needed: the beams are scored by a PUM (a train_pum.py output directory)")
        return problems


@dataclass
class Beam:
    """One partial solution: its sampled ids (all steps so far), the step texts and its PUM score."""

    ids: list[int]
    steps: list[str]
    score: float | None = None
    finished: bool = False


class _StopAfterStep:
    """`StoppingCriteria`: a row stops once its generated text holds a complete step (a separator, then more text
    would start a new step: `split_steps(text + "x")` has two steps). Separators in `$$`/code blocks don't count."""

    def __init__(self, tokenizer, prompt_width: int, separator: str):
        self.tokenizer, self.prompt_width, self.separator = tokenizer, prompt_width, separator

    def __call__(self, input_ids, scores=None, **kwargs):
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :], skip_special_tokens=True)
        done = [len(split_steps(t + "x", self.separator)) >= 2 for t in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _first_step(ids: list[int], tokenizer, separator: str) -> list[int]:
    """The ids of the first step of sampled `ids` (token boundaries from the ids, never re-encoding)."""
    steps, bounds = token_steps(ids, tokenizer, separator=separator)
    return ids[: bounds[0]] if len(steps) >= 2 else ids


def run_beam(config: BeamConfig) -> dict:
    """Step-level beam search guided by the PUM; writes and returns the report.

    The report (JSON at `config.output`): `command`, `model`, `dataset`, `settings`, `results` (one row
    "beam B=<beams> k=<expand>" -> `accuracy` dict), `summary` (`rounds`, `unparseable_gold`), `wall_time_s` and
    `problems` (the answer's text, steps, extracted answer, correctness, U score, token count, and the kept beams).
    """
    t0 = time.perf_counter()
    s = load_setup(config)
    tok = s.tokenizer
    pum = load_pum(config)
    separator = pum.separator
    # Rows stopped by the step criterion are filled with the config's pad id: it must differ from every EOS id,
    # or a stopped step would look like a finished solution (pad == eos for SmolLM2).
    pad = next(i for i in range(len(tok)) if i not in s.eos_ids)
    gen_config = sampling_config(config, pad, s.eos_ids, config.max_step_tokens)
    problems = [row["question"] for row in s.dataset]
    beams: list[list[Beam]] = [[Beam([], [])] for _ in s.dataset]
    rounds = 0
    for _ in tqdm(range(config.max_steps), desc="beam steps", disable=config.no_progress):
        active = [(p, b) for p, row in enumerate(beams) for b in row if not b.finished]
        if not active:
            break
        rounds += 1
        requests = [(p, b) for p, b in active for _ in range(config.expand)]
        inputs = [s.prompt_ids[p] + b.ids for p, b in requests]
        new_ids: list[list[int]] = []
        for start in range(0, len(inputs), config.batch_size):
            batch = inputs[start : start + config.batch_size]
            width = max(len(x) for x in batch)
            stop = StoppingCriteriaList([_StopAfterStep(tok, width, separator)])
            out = generate_completions(
                s.model, batch, gen_config, pad_token_id=pad, eos_ids=s.eos_ids, return_logprobs=False,
                device=s.device, stopping_criteria=stop,
            )  # fmt: skip
            new_ids += out.completion_ids
        candidates: list[list[Beam]] = [[b for b in row if b.finished] for row in beams]
        seen = [{tuple(b.ids) for b in row} for row in candidates]
        for (p, parent), ids in zip(requests, new_ids, strict=True):
            while ids and ids[-1] == pad:  # filler after a stopped row
                ids = ids[:-1]
            ids = _first_step(ids, tok, separator)
            full = parent.ids + ids
            if not ids or tuple(full) in seen[p]:
                continue
            seen[p].add(tuple(full))
            text = tok.decode(ids, skip_special_tokens=True)
            finished = ids[-1] in s.eos_ids or extract_answer(text) is not None or len(full) >= config.max_new_tokens
            candidates[p].append(Beam(full, [*parent.steps, text], None, finished))
        todo = [(p, b) for p, row in enumerate(candidates) for b in row if b.score is None]
        if todo:
            values = pum.score([problems[p] for p, _ in todo], [b.steps for _, b in todo])
            for (_, b), v in zip(todo, values, strict=True):
                b.score = float(v)
        for p, row in enumerate(candidates):
            if not row:  # nothing new (all duplicates): keep the old beams
                continue
            order = sorted(range(len(row)), key=lambda i: (-row[i].score, i))  # ties: earlier candidate
            beams[p] = [row[i] for i in order[: config.beams]]
    picks, correct_g, records = [], [], []
    for row, beam_row in zip(s.dataset, beams, strict=True):
        finished = [b for b in beam_row if b.finished] or beam_row
        best = max(finished, key=lambda b: b.score if b.score is not None else -math.inf)
        text = "".join(best.steps)
        ok = is_correct(text, row["answer"])
        correct_g.append(None if ok is None else [bool(ok)])
        picks.append(0)
        records.append(
            {
                "problem_id": row["problem_id"],
                "answer": row["answer"],
                "text": text,
                "steps": best.steps,
                "extracted": extract_answer(text),
                "correct": ok,
                "score": best.score,
                "finished": best.finished,
                "num_tokens": len(best.ids),
                "beams": [{"text": "".join(b.steps), "score": b.score, "finished": b.finished} for b in beam_row],
            }
        )
    name = f"beam B={config.beams} k={config.expand}"
    result = {
        "command": "beam",
        "model": config.model,
        "dataset": f"{config.dataset}[{config.start}:{config.start + len(s.dataset)}]",
        "settings": config.settings(),
        "results": {name: accuracy(correct_g, picks)},
        "summary": {"rounds": rounds, "unparseable_gold": sum(1 for c in correct_g if c is None)},
        "wall_time_s": {"total": time.perf_counter() - t0},
        "problems": records,
    }
    write_report(config.output, result)
    return result
