"""GRPO step time: outcome reward alone vs outcome + PiCSAR bonus (target ratio <= 1.15).

    python benchmarks/bench_grpo_step.py [--steps 4] [--max_completion_length 96] [--reverse]

Same default model, seed, prompts and batch for both arms; completion lengths are fixed with
`min_new_tokens = max_completion_length` so both arms generate the same number of tokens. Both arms run one after
the other in one process; the first step of each arm is a warm-up and is not counted. Prints the median step time of each arm, their ratio, and each reward function's own
median time per step. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from procrl.data_builders.datasets import load_math_dataset
from procrl.models import resolve_model
from procrl.rewards.outcome import outcome_reward
from procrl.rewards.picsar import get_picsar_bonus
from procrl.trainers.grpo import ProcessGRPOConfig, ProcessGRPOTrainer


class Timed:
    """Wraps a reward function, keeping its name and `bind_policy`, and records its wall time per call."""

    def __init__(self, func):
        self.func, self.times = func, []
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def bind_policy(self, model, tokenizer):
        if hasattr(self.func, "bind_policy"):
            self.func.bind_policy(model, tokenizer)

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.func(*args, **kwargs)
        finally:
            self.times.append(time.perf_counter() - start)


def build(arm: str, args, out_dir: str):
    path = resolve_model("default")
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    funcs = [Timed(outcome_reward)] + ([Timed(get_picsar_bonus())] if arm == "outcome+picsar" else [])
    config = ProcessGRPOConfig(
        output_dir=out_dir,
        num_generations=8,
        per_device_train_batch_size=8,
        max_completion_length=args.max_completion_length,
        generation_kwargs={"min_new_tokens": args.max_completion_length},
        temperature=0.7,
        learning_rate=1e-5,
        beta=0.0,
        activation_checkpointing=False,  # as in the demo config
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        reward_weights=[1.0, 0.1][: len(funcs)],
        disable_tqdm=True,
    )

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._start = [], None

        def on_step_begin(self, *a, **k):
            self._start = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self._start)

    timer = StepTimer()
    trainer = ProcessGRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=config,
        train_dataset=load_math_dataset("svamp", end=64),
        processing_class=tokenizer,
        callbacks=[timer],
    )
    return trainer, timer, funcs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="steps per arm (the first is a warm-up)")
    parser.add_argument("--max_completion_length", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reverse", action="store_true", help="run the outcome+picsar arm first (order check)")
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # read when the trainer is built
    os.environ.setdefault("WANDB_MODE", "disabled")
    arms = ("outcome", "outcome+picsar")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in (
            reversed(arms) if args.reverse else arms
        ):  # each arm trains in its own Trainer; the same seed gives the same prompts and samples
            torch.manual_seed(args.seed)
            trainer, timer, funcs = build(arm, args, os.path.join(tmp, arm.replace("+", "_")))
            trainer.train()
            results[arm] = (timer.times, funcs)

    print(
        f"\nGRPO step time, default model, 1 prompt x 8 completions x {args.max_completion_length} tokens, "
        f"torch threads {torch.get_num_threads()}"
    )
    medians = {}
    for arm in arms:
        times, funcs = results[arm]
        counted = times[1:] or times
        medians[arm] = statistics.median(counted)
        print(f"  {arm:<16} median {medians[arm]:6.2f} s/step  (steps: {', '.join(f'{t:.2f}' for t in times)})")
        for f in funcs:
            print(f"    reward {f.__name__:<16} median {statistics.median(f.times[1:] or f.times):6.3f} s/step")
    ratio = medians["outcome+picsar"] / medians["outcome"]
    print(f"  ratio (outcome+picsar / outcome): {ratio:.3f}  (target <= 1.15)")


if __name__ == "__main__":
    main()
