"""The small GRPO settings the trainer tests share, and a spy on trainer methods (importable: pyproject adds
tests/helpers to pytest's pythonpath)."""

from __future__ import annotations

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
