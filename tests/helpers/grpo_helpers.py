"""The small GRPO settings the trainer tests share, and a spy on trainer methods (importable: pyproject adds
tests/helpers to pytest's pythonpath)."""

from __future__ import annotations

import torch

from procrl.trainers.grpo import ProcessGRPOConfig


def grpo_config(output_dir, **overrides):
    """A `ProcessGRPOConfig` for one CPU step of a tiny model: 4 completions of at most 8 tokens per prompt,
    batch 4, no KL term, no saving or reporting, seed 0, transformers generation (`generation_backend` would
    resolve "auto" to vLLM where it is installed). `overrides` replace any field."""
    values = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        learning_rate=1e-2,
        temperature=0.7,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        generation_backend="transformers",
    )
    values.update(overrides)
    return ProcessGRPOConfig(**values)


def spy(trainer, method: str) -> list:
    """Wrap `trainer.<method>` (the bound method: procrl's override) in a recorder that TRL's own calls go through;
    returns the list of the calls' positional arguments. The tests that guard the private overrides use it."""
    calls, original = [], getattr(trainer, method)

    def recorded(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    setattr(trainer, method, recorded)
    return calls


def temperature_logps(model, prompt_ids, completion_ids, temperature: float) -> list[list[float]]:
    """log_softmax(logits / T) of each completion token `(L_i,)`, one unpadded forward per row, in float64: a
    reference computed independently of `procrl.generation.sequence_logps` and of any engine."""
    rows = []
    with torch.no_grad():
        for prompt, completion in zip(prompt_ids, completion_ids, strict=True):
            ids = torch.tensor([list(prompt) + list(completion)])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].double() / temperature  # (L, V)
            logps = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion).unsqueeze(-1))
            rows.append(logps.squeeze(-1).tolist())
    return rows


def max_diff(a, b) -> float:
    """Largest absolute difference between two ragged lists of rows (which must have the same shape)."""
    assert [len(r) for r in a] == [len(r) for r in b]
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))
