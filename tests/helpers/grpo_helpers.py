"""The small GRPO settings the trainer tests share (importable: pyproject adds tests/helpers to pytest's
pythonpath)."""

from __future__ import annotations


def grpo_config(output_dir, **overrides):
    """A `ProcessGRPOConfig` for one CPU step of a tiny model: 4 completions of at most 8 tokens per prompt,
    batch 4, no KL term, no saving or reporting, seed 0. `overrides` replace any field."""
    from procrl.trainers.grpo import ProcessGRPOConfig

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
    )
    values.update(overrides)
    return ProcessGRPOConfig(**values)
