"""The work of `benchmarks/gpu_check.sh` (run that script; it sets up the imports): a tiny GRPO + PUM smoke check.

A randomly initialised Qwen2-shaped model (from a `Qwen2Config`, no weights downloaded) with the SmolLM2 tokenizer:
  1. generation: `TransformersEngine.generate`, `--prompts` x `--num_generations` rows, forced to exactly
     `--max_new_tokens` tokens -> tokens/s;
  2. GRPO: `ProcessGRPOTrainer` with `advantage_mode: process` and a simple step scorer (fixed-size token chunks,
     reward = share of even token ids), `generation_backend: transformers` where that field exists,
     `--steps` steps (the first is a warm-up) -> median step time;
  3. PUM: `PrefixUtilityModel.score_steps` over the step texts of the generated completions, with a Qwen2 score
     head model of the same shape -> scored tokens/s;
and the peak memory (CUDA: torch.cuda.max_memory_allocated; CPU: the process's max RSS). Each result is one
`gpu_check: <key>: <value>` line; the last line is `gpu_check: OK` (tests/test_gpu_check.py reads them).
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import sys
import tempfile
import time

import datasets
import torch
import transformers
import trl
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification, TrainerCallback

from procrl.data_builders.prompts import build_prompt
from procrl.generation import SamplingParams, TransformersEngine, render_prompts
from procrl.rewards.pum import PrefixUtilityModel
from procrl.step_rewards import StepRewards
from procrl.trainers.grpo import ProcessGRPOConfig, ProcessGRPOTrainer

# A few word problems (the random model's answers are meaningless anyway; no data files needed).
PROBLEMS = [
    ("Tom has 3 apples and buys 5 more. How many apples does he have?", "8"),
    ("A box holds 12 pens. How many pens are in 4 boxes?", "48"),
    ("Sara had 20 stickers and gave away 7. How many are left?", "13"),
    ("A train travels 60 km per hour for 3 hours. How far does it go?", "180"),
]


def problem_rows(n: int) -> list[dict]:
    """`n` rows (prompt as one-shot chat messages, question, answer), cycling through PROBLEMS."""
    return [{"prompt": build_prompt(q), "question": q, "answer": a} for q, a in (PROBLEMS[i % 4] for i in range(n))]


def report(key: str, value) -> None:
    print(f"gpu_check: {key}: {value}", flush=True)


def chunk_step_scorer(chunk: int):
    """A step scorer: steps of `chunk` tokens (the last may be shorter), reward = the step's share of even token ids
    (arbitrary, but it varies between steps and completions, so the process advantages are not all zero)."""

    def chunk_steps(prompts, completions, completion_ids, **kwargs):
        out = []
        for ids in completion_ids:
            if not ids:
                out.append(None)
                continue
            bounds = list(range(chunk, len(ids), chunk)) + [len(ids)]
            starts = [0, *bounds[:-1]]
            out.append(
                StepRewards(
                    [sum(t % 2 == 0 for t in ids[a:b]) / (b - a) for a, b in zip(starts, bounds, strict=True)], bounds
                )
            )
        return out

    return chunk_steps


def tiny_config(args, tokenizer) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 4,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=max(1, args.heads // 2),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--tokenizer", required=True, help="folder with the SmolLM2 tokenizer files")
    parser.add_argument("--hidden", type=int, default=512, help="hidden size of the random Qwen2 model")
    parser.add_argument("--layers", type=int, default=8, help="decoder layers")
    parser.add_argument("--heads", type=int, default=8, help="attention heads (KV heads: half)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per GRPO step")
    parser.add_argument("--num_generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max_new_tokens", type=int, default=128, help="tokens per completion (forced)")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps (the first is a warm-up)")
    parser.add_argument("--chunk", type=int, default=16, help="tokens per step of the step scorer")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: error: --device cuda but torch sees no CUDA GPU; use --device cpu", file=sys.stderr)
        return 2
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    dtype = torch.bfloat16 if bf16 else torch.float32
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report("device", f"{device} ({name}), dtype {str(dtype).removeprefix('torch.')}")
    report(
        "versions",
        f"python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, trl {trl.__version__}",
    )

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.tokenizer, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = tiny_config(args, tokenizer)
    torch.manual_seed(0)
    policy = Qwen2ForCausalLM(config).to(device)  # fp32 master weights; bf16 autocast in the trainer
    report(
        "model",
        f"random Qwen2, {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M parameters, "
        f"hidden {args.hidden}, {args.layers} layers",
    )

    # 1. generation throughput (the engine the trainer's transformers backend uses)
    data = problem_rows(64 * args.prompts)
    rows = render_prompts(tokenizer, [row["prompt"] for row in data[: args.prompts]])
    rows = [r for r in rows for _ in range(args.num_generations)]
    engine = TransformersEngine(model=policy, tokenizer=tokenizer, device=str(device), batch_size=len(rows))
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens)
    engine.generate(rows[:2], SamplingParams(temperature=1.0, max_new_tokens=4, min_new_tokens=4), seed=0)
    with torch.autocast(device.type, dtype=dtype, enabled=bf16):
        sync(device)
        start = time.perf_counter()
        rollouts = engine.generate(rows, params, seed=0)
        sync(device)
    elapsed = time.perf_counter() - start
    tokens = sum(len(r.token_ids) for r in rollouts)
    report("generate", f"{len(rows)} rows x {args.max_new_tokens} tokens in {elapsed:.2f} s")
    report("generate tokens/s", f"{tokens / elapsed:.1f}")

    # 2. GRPO steps with process advantages
    step_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            sync(device)
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            sync(device)
            step_times.append(time.perf_counter() - self.start)

    extra = {}
    if "generation_backend" in {f.name for f in dataclasses.fields(ProcessGRPOConfig)}:
        extra["generation_backend"] = "transformers"  # no vLLM on the check machine
    with tempfile.TemporaryDirectory() as tmp:
        grpo_args = ProcessGRPOConfig(
            output_dir=tmp,
            advantage_mode="process",
            num_generations=args.num_generations,
            per_device_train_batch_size=args.num_generations * args.prompts,
            max_completion_length=args.max_new_tokens,
            generation_kwargs={"min_new_tokens": args.max_new_tokens},
            temperature=1.0,
            learning_rate=1e-5,
            beta=0.0,
            max_steps=args.steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            bf16=bf16,
            use_cpu=device.type == "cpu",
            disable_tqdm=True,
            seed=0,
            **extra,
        )
        trainer = ProcessGRPOTrainer(
            model=policy,
            reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            step_reward_func=chunk_step_scorer(args.chunk),
            args=grpo_args,
            train_dataset=datasets.Dataset.from_list(data),
            processing_class=tokenizer,
            callbacks=[StepTimer()],
        )
        trainer.train()
    counted = step_times[1:] or step_times
    report("grpo steps", ", ".join(f"{t:.2f}" for t in step_times))
    report(
        "grpo step time",
        f"{statistics.median(counted):.2f} s (median after the warm-up; "
        f"{args.prompts} x {args.num_generations} x {args.max_new_tokens} tokens)",
    )

    # 3. one PUM scoring pass over the generated completions, cut into steps of `chunk` tokens
    torch.manual_seed(1)
    pum_model = Qwen2ForSequenceClassification(_cls_config(config))
    pum = PrefixUtilityModel(pum_model.to(device=device, dtype=dtype).eval(), tokenizer, batch_size=len(rollouts))
    problems = [row["question"] for row in data[: args.prompts] for _ in range(args.num_generations)]
    steps = [
        [tokenizer.decode(r.token_ids[a : a + args.chunk]) for a in range(0, len(r.token_ids), args.chunk)]
        for r in rollouts
    ]
    pum.score_steps(problems[:1], steps[:1])  # warm-up
    sync(device)
    start = time.perf_counter()
    values = pum.score_steps(problems, steps, include_empty=True)
    sync(device)
    elapsed = time.perf_counter() - start
    scored = sum(len(pum.render(p, s).input_ids) for p, s in zip(problems, steps, strict=True))
    finite = sum(v == v for row in values for v in row)
    report("pum scoring", f"{len(steps)} trajectories, {finite} values, {scored} tokens in {elapsed:.3f} s")
    report("pum tokens/s", f"{scored / elapsed:.1f}")

    if device.type == "cuda":
        report("peak memory", f"{torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB (CUDA, allocated)")
    else:
        report("peak memory", f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB (max RSS)")
    print("gpu_check: OK", flush=True)
    return 0


def _cls_config(config: Qwen2Config) -> Qwen2Config:
    """The policy's config with one output label (a PUM's score head)."""
    cls = Qwen2Config.from_dict(config.to_dict())
    cls.num_labels = 1
    return cls


if __name__ == "__main__":
    raise SystemExit(main())
