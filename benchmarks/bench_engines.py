"""Generation throughput: procrl's vLLM engine vs its transformers engine (targets: >= 2.5x GRPO, >= 4x FRS).

    python benchmarks/bench_engines.py [--repeats 3] [--frs_repeats 1] [--shapes grpo,eval,frs] [--no-bf16]
    python benchmarks/bench_engines.py --part step [--steps 4] [--arms vllm-before,vllm-fp32,vllm-bf16,transformers]

Part "gen" (default): `procrl.generation.make_engine(generation_backend="transformers" | "vllm")` on the default model
(SmolLM2-135M-Instruct), one-shot chat prompts from `procrl.data_builders` (`load_math_dataset`), every completion
forced to exactly `max_new_tokens` tokens (`min_new_tokens = max_new_tokens`, no stop strings), at three shapes:

    GRPO        1 SVAMP prompt  x 8 completions  x  96 tokens, T = 0.7   (transformers batch 8: one group)
    evaluation 32 SVAMP prompts x 1 completion   x  96 tokens, greedy    (transformers batch 32, eval_batch_size)
    FRS         8 GSM8K prompts x 16 traces      x 256 tokens, T = 0.7   (transformers batch 32, procrl frs)

Both engines are fp32 and alive together, the transformers one in a spawned worker process (see
`TransformersWorker`: torch next to an in-process vLLM-CPU engine hung here); each repeat times transformers, then
vLLM, on the same rows and seed (interleaved, so load from other jobs hits both arms alike); one untimed 4-token
warm-up call per engine first.
Then (unless --no-bf16) the fp32 vLLM engine is shut down and a bf16 one (dtype="bfloat16") is timed alone
against the transformers medians already measured (one vLLM engine at a time: each holds its KV cache). Prints the
median of the repeats, tokens/s, the ratio to transformers, and the ratio in process CPU time (vLLM runs
in-process, so the process's CPU time is all of its work; transformers': the worker's). Greedy rows that the two fp32 engines agree on are
counted (they should mostly agree; fp32 kernels differ, so a few may not).

Part "step": one `ProcessGRPOTrainer` per arm (`--arms`, in order; see STEP_ARMS): `vllm-before` (what procrl
computed before issue 25 for an outcome-only run: TRL's importance-sampling forward and the raw-log-prob rescoring),
`vllm-fp32` (fp32 with neither pass: today's defaults on a CPU without native bf16), `vllm-auto` (today's defaults
here), `vllm-bf16` (bf16 autocast and a bf16 engine, what auto picks on AMX / AVX512-BF16 CPUs)
and `transformers`; the settings of `bench_grpo_step.py` (1 prompt x 8 completions x 96 tokens, T = 0.7, outcome
reward, lengths forced), the first step a warm-up. The step breakdown comes from TRL's own `profiling_context`
timings (`trl/extras/profiling.py:134`; recorded here by replacing `ProfilingContext._log_metrics`, which otherwise
only reports to wandb/mlflow/trackio: vLLM.generate, sync_weights, procrl.rescore, one line per reward) plus timers
around `_generate` (the rollout, weight sync included: `trl/trainer/grpo_trainer.py:2200-2215`),
`_generate_and_score_completions` and the policy forwards (no grad: TRL's importance-sampling "old" log-probs; with
grad: the loss). At step 0 the arms with importance sampling print the per-token |policy - sampler| log-prob
difference and TRL's ratio (mean, p99). On CPU the vLLM arms' KV cache is `vllm_kv_cache_gib` (--kv_cache_gib). A
benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import multiprocessing
import os
import statistics
import tempfile
import time
from collections import defaultdict

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # before transformers and tokenizers are imported

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl.extras import profiling  # noqa: E402

from procrl.data_builders.datasets import load_math_dataset  # noqa: E402
from procrl.experiment.provenance import machine_info  # noqa: E402
from procrl.generation import SamplingParams, make_engine, render_prompts  # noqa: E402
from procrl.generation.runtime import resolve_bf16  # noqa: E402
from procrl.models import resolve_model  # noqa: E402
from procrl.rewards.outcome import outcome_reward  # noqa: E402
from procrl.trainers.grpo import ProcessGRPOConfig, ProcessGRPOTrainer  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Shape:
    label: str
    dataset: str
    prompts: int
    copies: int  # completions per prompt (rows are repeated, as TRL repeats a prompt num_generations times)
    tokens: int
    temperature: float
    hf_batch: int  # the transformers engine's batch size at this shape
    target: float | None  # wall-time ratio the issue asks for


SHAPES = {
    "grpo": Shape("GRPO", "svamp", 1, 8, 96, 0.7, 8, 2.5),
    "eval": Shape("evaluation", "svamp", 32, 1, 96, 0.0, 32, None),
    "frs": Shape("FRS", "gsm8k", 8, 16, 256, 0.7, 32, 4.0),
}


def shape_rows(shape: Shape, tokenizer) -> list[list[int]]:
    data = load_math_dataset(shape.dataset, end=shape.prompts)
    return [row for row in render_prompts(tokenizer, data["prompt"]) for _ in range(shape.copies)]


def timed_generate(engine, rows, shape: Shape, seed: int):
    """One timed `generate` call: (wall s, process CPU s, rollouts)."""
    params = SamplingParams(temperature=shape.temperature, max_new_tokens=shape.tokens, min_new_tokens=shape.tokens)
    start, cpu_start = time.perf_counter(), time.process_time()
    out = engine.generate(rows, params, seed=seed)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    total = sum(len(r.token_ids) for r in out)
    assert total == len(rows) * shape.tokens, (total, len(rows), shape.tokens)  # forced lengths: same work per arm
    return wall, cpu, out


def warm_up(engine, rows) -> None:
    engine.generate(rows[:2], SamplingParams(temperature=0, max_new_tokens=4, min_new_tokens=4), seed=0)


def shutdown_vllm(engine) -> None:
    """Free an in-process vLLM engine before the next one is built (its KV cache and weights)."""
    # optional heavy dependency: only reached after a vLLM engine was built
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    engine.llm.llm_engine.engine_core.shutdown()
    del engine.llm
    gc.collect()
    cleanup_dist_env_and_memory()


class TransformersWorker:
    """The transformers engine in a spawned child process, driven over a pipe (one request at a time).

    Not in this process: after an in-process vLLM-CPU engine has bound the OpenMP threads, a transformers forward
    here (MKL sgemm on libgomp) hung for good in `gomp_team_barrier_wait_end` (seen on the 2-core machine, no CPU
    time used for 20 minutes), so each engine gets its own process and OpenMP runtime.
    """

    def __init__(self, threads: int | None):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_transformers_worker, args=(child, threads), daemon=True)
        self.proc.start()
        self.threads = self.conn.recv()  # sent once the engine is built and warmed up

    def generate(self, rows, shape: Shape, seed: int):
        self.conn.send((rows, shape, seed))
        return self.conn.recv()  # (wall s, child's CPU s, token ids per row)

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join()


def _transformers_worker(conn, threads: int | None) -> None:
    if threads:
        torch.set_num_threads(threads)
    engine = make_engine("default", generation_backend="transformers", device="cpu", dtype="float32")
    warm_up(engine, [engine.tokenizer("warm up")["input_ids"]] * 2)
    conn.send(torch.get_num_threads())
    while (request := conn.recv()) is not None:
        rows, shape, seed = request
        engine.batch_size = shape.hf_batch
        wall, cpu, out = timed_generate(engine, rows, shape, seed)
        conn.send((wall, cpu, [r.token_ids for r in out]))


def run_generation(args) -> None:
    shapes = [SHAPES[name] for name in args.shapes.split(",")]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("default"))
    rows = {s.label: shape_rows(s, tokenizer) for s in shapes}
    times: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    agree: dict[str, int] = {}
    hf = TransformersWorker(args.threads)
    print(f"  transformers: worker process ready, torch threads {hf.threads}", flush=True)

    arms = ["vllm fp32"] + ([] if args.no_bf16 else ["vllm bf16"])
    for arm in arms:
        dtype = "float32" if arm.endswith("fp32") else "bfloat16"
        start = time.perf_counter()
        vllm = make_engine("default", generation_backend="vllm", dtype=dtype, kv_cache_gib=args.kv_cache_gib)
        print(f"  {arm}: engine built in {time.perf_counter() - start:.1f} s", flush=True)
        warm_up(vllm, rows[shapes[0].label])
        for shape in shapes:
            for r in range(args.frs_repeats if shape.label == "FRS" else args.repeats):
                ids = {}
                if arm == arms[0]:  # transformers, then vLLM, on the same rows and seed
                    idle = time.process_time()  # this process's CPU meanwhile: ~0 unless its threads spin
                    wall, cpu, ids["transformers"] = hf.generate(rows[shape.label], shape, seed=r)
                    idle = time.process_time() - idle
                    times[(shape.label, "transformers")].append((wall, cpu))
                    print(
                        f"  {shape.label:<10} repeat {r} {'transformers':<12} {wall:7.2f} s wall {cpu:7.2f} s CPU "
                        f"(vLLM process meanwhile: {idle:.2f} s CPU)"
                    )
                wall, cpu, out = timed_generate(vllm, rows[shape.label], shape, seed=r)
                ids[arm] = [o.token_ids for o in out]
                times[(shape.label, arm)].append((wall, cpu))
                print(f"  {shape.label:<10} repeat {r} {arm:<12} {wall:7.2f} s wall {cpu:7.2f} s CPU", flush=True)
                if shape.temperature == 0 and arm == arms[0] and r == 0:
                    agree[shape.label] = sum(a == b for a, b in zip(ids["transformers"], ids[arm], strict=True))
        shutdown_vllm(vllm)
        del vllm
        gc.collect()
    hf.close()
    threads_before = hf.threads

    print(
        f"\nGeneration throughput, default model on CPU, median of {args.repeats} repeats ({args.frs_repeats} at FRS), "
        f"torch threads "
        f"{threads_before} (transformers worker), vLLM KV cache {args.kv_cache_gib} GiB"
    )
    header = f"  {'shape':<11}{'rows x tokens':>15}  {'engine':<13}{'median s':>9}{'tokens/s':>10}{'ratio':>8}{'CPU ratio':>10}"
    print(header)
    for shape in shapes:
        n_rows = shape.prompts * shape.copies
        hf_wall = statistics.median(w for w, _ in times[(shape.label, "transformers")])
        hf_cpu = statistics.median(c for _, c in times[(shape.label, "transformers")])
        for name in ["transformers", *arms]:
            wall = statistics.median(w for w, _ in times[(shape.label, name)])
            cpu = statistics.median(c for _, c in times[(shape.label, name)])
            target = f"  (target >= {shape.target}x)" if shape.target and name == "vllm fp32" else ""
            print(
                f"  {shape.label:<11}{f'{n_rows} x {shape.tokens}':>15}  {name:<13}{wall:9.2f}"
                f"{n_rows * shape.tokens / wall:10.1f}{hf_wall / wall:7.2f}x{hf_cpu / cpu:9.2f}x{target}"
            )
        if shape.label in agree:
            print(f"  {'':<11}greedy rows identical (transformers vs vllm fp32): {agree[shape.label]}/{n_rows}")


class StepTimer:
    """Step times (callback), TRL's profiling timings, and timers around two GRPOTrainer methods."""

    def __init__(self):
        self.steps: list[float] = []
        self.blocks: dict[str, list[float]] = defaultdict(list)
        self._start = None

    def callback(self):
        timer = self

        class _Callback(TrainerCallback):
            def on_step_begin(self, *a, **k):
                timer._start = time.perf_counter()

            def on_step_end(self, *a, **k):
                timer.steps.append(time.perf_counter() - timer._start)

        return _Callback()

    def wrap(self, obj, method: str, label: str) -> list:
        """Time `obj.<method>` under `label`; returns the list its return values are appended to."""
        inner, outputs = getattr(obj, method), []

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                outputs.append(inner(*a, **k))
                return outputs[-1]
            finally:
                self.blocks[label].append(time.perf_counter() - start)

        setattr(obj, method, timed)
        return outputs


def record_trl_profiling(sink: dict) -> None:
    """Route TRL's profiling_context durations into `sink[name]` (a list per name), whatever report_to says."""

    def log_metrics(self, duration: float) -> None:
        sink["current"][self.name.split(".", 1)[-1]].append(duration)

    profiling.ProfilingContext._log_metrics = log_metrics


# --part step arms: (generation_backend, config overrides, reward functions). Every arm is the demo's shape with the
# outcome reward; "before" is what procrl computed before issue 25 for such a run on a CPU (fp32, TRL's
# importance-sampling forward, the raw-log-prob rescoring that no reward read), "fp32" the same with both passes gone
# (today's defaults on a CPU without native bf16), "auto" today's defaults on this machine, "bf16" forces bf16
# autocast with a bf16 engine (what `bf16: auto` picks on a CPU with AMX or AVX512-BF16).
STEP_ARMS = {
    "transformers": ("transformers", {"bf16": "false"}, ()),
    "vllm-before": ("vllm", {"bf16": "false", "vllm_importance_sampling_correction": True}, ("reads_logps",)),
    "vllm-fp32": ("vllm", {"bf16": "false"}, ()),
    "vllm-auto": ("vllm", {}, ()),
    "vllm-bf16": ("vllm", {"bf16": "true", "use_cpu": True}, ()),
}


def reads_logps(completions, completion_logps, **kwargs):
    """A reward that names completion_logps (so the rollout computes them) and costs nothing: 0.0 each."""
    return [0.0] * len(completions)


def mismatch(output: dict) -> dict[str, float]:
    """|policy - sampler| per-token log-prob difference (natural log) and TRL's importance-sampling ratio over the
    completion tokens of one `_generate_and_score_completions` output: mean and p99 of each (empty without IS)."""
    if "old_per_token_logps" not in output or "sampling_per_token_logps" not in output:
        return {}
    mask = output["completion_mask"].bool()
    diff = (output["old_per_token_logps"] - output["sampling_per_token_logps"]).abs()[mask].float()
    ratio = output["importance_sampling_ratio"]
    ratio = (ratio[mask] if ratio.shape == mask.shape else ratio.flatten()).float()
    return {
        "|logp diff| mean": diff.mean().item(),
        "|logp diff| p99": torch.quantile(diff, 0.99).item(),
        "IS ratio mean": ratio.mean().item(),
        "IS ratio p99": torch.quantile(ratio, 0.99).item(),
    }


def run_step(args) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    sink: dict = {}
    record_trl_profiling(sink)
    arms = args.arms.split(",")
    unknown = set(arms) - set(STEP_ARMS)
    if unknown:
        raise SystemExit(f"unknown arm(s) {sorted(unknown)}; choose from {', '.join(STEP_ARMS)}")
    results, figures, resolved, medians = {}, {}, {}, {}
    path = resolve_model("default")
    print(
        f"machine: {machine_info()['cpu']}, native bf16: {machine_info()['cpu_bf16']}; bf16 auto here: {resolve_bf16('auto')}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for arm in reversed(arms) if args.reverse else arms:
            backend, overrides, extra_rewards = STEP_ARMS[arm]
            torch.manual_seed(args.seed)
            timer = StepTimer()
            sink["current"] = timer.blocks
            # forced lengths; on vLLM through ignore_eos without stop ids (sampling-neutral: the sampler's
            # log-probs stay those of the policy), on transformers through min_new_tokens
            forced = (
                {"ignore_eos": True, "stop_token_ids": []}
                if backend == "vllm"
                else {"min_new_tokens": args.max_completion_length}
            )
            config = ProcessGRPOConfig(
                output_dir=os.path.join(tmp, arm),
                generation_backend=backend,
                vllm_kv_cache_gib=args.kv_cache_gib,
                num_generations=8,
                per_device_train_batch_size=8,
                max_completion_length=args.max_completion_length,
                generation_kwargs=forced,
                temperature=0.7,
                learning_rate=1e-5,
                beta=0.0,
                activation_checkpointing=False,
                max_steps=args.steps,
                logging_steps=1,
                save_strategy="no",
                report_to="none",
                seed=args.seed,
                disable_tqdm=True,
                **overrides,
            )
            trainer = ProcessGRPOTrainer(
                model=AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                reward_funcs=[outcome_reward, *(globals()[name] for name in extra_rewards)],
                args=config,
                train_dataset=load_math_dataset("svamp", end=64),
                processing_class=AutoTokenizer.from_pretrained(path, padding_side="left"),
                callbacks=[timer.callback()],
            )
            resolved[arm] = {
                "bf16": config.bf16,
                "importance sampling": config.vllm_importance_sampling_correction,
                "extra rewards": list(extra_rewards),
            }
            timer.wrap(trainer, "_generate", "rollout (generate, weight sync incl.)")
            score = timer.wrap(trainer, "_generate_and_score_completions", "generate and score")
            forward = trainer._get_per_token_logps_and_entropies

            def timed_forward(*a, _forward=forward, _blocks=timer.blocks, **k):
                start = time.perf_counter()
                try:
                    return _forward(*a, **k)
                finally:
                    label = "policy forward, loss (grad)" if torch.is_grad_enabled() else "policy forward, no grad (IS)"
                    _blocks[label].append(time.perf_counter() - start)

            trainer._get_per_token_logps_and_entropies = timed_forward
            trainer.train()
            figures[arm] = mismatch(score[0]) if score else {}
            results[arm] = timer
            print(
                f"(arm {arm} done: 1 prompt x 8 completions x {args.max_completion_length} tokens (forced), T = 0.7, "
                f"outcome reward, {args.steps} steps, the first a warm-up not counted)",
                flush=True,
            )
            medians[arm] = report_arm(arm, timer, resolved[arm], figures[arm])
            del trainer
            gc.collect()

    base = arms[0]
    ratios = ", ".join(f"{arm} {medians[base] / medians[arm]:.2f}x" for arm in arms[1:])
    print(f"\nratios (median step time, {base} / arm): {ratios}")


def report_arm(arm: str, timer: StepTimer, resolved: dict, figures: dict) -> float:
    """Print one arm's step times, breakdown (seconds per counted step) and step-0 figures; returns its median."""
    counted = timer.steps[1:] or timer.steps
    median = statistics.median(counted)
    print(f"\n{arm}: median {median:6.2f} s/step  (steps: {', '.join(f'{t:.2f}' for t in timer.steps)})", flush=True)
    print(f"  resolved: {resolved}")
    per_step = {name: sum(v[1:] or v) / len(counted) for name, v in timer.blocks.items()}
    if "generate and score" in per_step:
        rest = statistics.mean(counted) - per_step["generate and score"]
        per_step["rest: loss forward/backward, optimizer (step - generate and score)"] = rest
    for name, value in sorted(per_step.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<68} {value:7.3f} s/step")
    for name, value in figures.items():
        print(f"  step 0 {name:<61} {value:10.3g}")
    return median


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("gen", "step"), default="gen", help="generation shapes or GRPO step")
    parser.add_argument("--shapes", default="grpo,eval,frs", help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per shape and engine (median)")
    parser.add_argument(
        "--frs_repeats", type=int, default=1, help="repeats at the FRS shape (transformers: ~10 min each)"
    )
    parser.add_argument("--no-bf16", dest="no_bf16", action="store_true", help="skip the vLLM bf16 arm")
    parser.add_argument("--kv_cache_gib", type=float, default=1.0, help="vLLM's KV cache on CPU (GiB)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--steps", type=int, default=4, help="--part step: steps per arm (the first is a warm-up)")
    parser.add_argument("--max_completion_length", type=int, default=96, help="--part step: tokens per completion")
    parser.add_argument("--seed", type=int, default=0, help="--part step: training seed")
    parser.add_argument("--reverse", action="store_true", help="--part step: run the arms in reverse order")
    parser.add_argument(
        "--arms",
        default="vllm-before,vllm-fp32,vllm-bf16,transformers",
        help=f"--part step: comma-separated arms, of {', '.join(STEP_ARMS)} (the first is the ratios' base)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shape(s) {sorted(unknown)}; choose from {', '.join(SHAPES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    (run_step if args.part == "step" else run_generation)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
