"""The learning check: GRPO with the step oracle's process reward visibly teaches a tiny policy, and the same run
with the step rewards negated or shuffled within the batch (the placebo) does not.

The task is trivially learnable on purpose: 8 one-step additions of one-digit numbers ("Compute (3 + 4)."). The
policy is a 2-layer Llama (hidden 64, the arith tokenizer) warm-started by `procrl sft` on NOISY traces, 3 in 10
with the right sum and 7 in 10 off by one, so it writes the format and starts with about 30% right steps (measured
0.27-0.31 on the CPUs measured). Then 40 GRPO steps, 8 problems x 8 completions, `advantage_mode: process` with the oracle step scorer (one
step per completion here, so process and outcome advantages coincide), through `train_grpo.py` as a user runs it.

The effect measured is ProcessAcc (the oracle's share of gold steps produced by valid, grounded steps) over 16
samples per problem at temperature 1 from the final policy, against the warm start's. Margins are wide: the rule
is "learns" = rises by more than 0.25, "does not learn" = rises by less than 0.1. Measured (2-core AMD EPYC, one
thread): 0.266 -> 0.648 with the oracle (the same after 60 steps: the policy turns deterministic per problem, right
on some and wrong on the rest, so no mixed group is left), 0.266 -> 0.000 negated, 0.266 -> 0.039 shuffled (random
advantages wreck the small policy rather than teach it). The values are in the assertions' messages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from procrl.data_builders.datasets import load_math_dataset
from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
from procrl.scripts import sft, train_grpo

pytestmark = pytest.mark.slow  # trains (a few minutes in all); kept in `make test`

TASK = "arith-ops1-d1-add-expr-train-n8"
TEMPLATE = "{question}"
GRPO_STEPS = "40"


def _process_acc(path: str, rows: list[dict], samples: int = 16) -> float:
    """Mean oracle ProcessAcc of `samples` completions per problem at temperature 1 (seeded)."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    prompts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
               for r in rows]  # fmt: skip
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    torch.manual_seed(123)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids.repeat_interleave(samples, 0), attention_mask=(ids != tokenizer.pad_token_id).long().repeat_interleave(samples, 0),
            max_new_tokens=16, do_sample=True, temperature=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
    scores = []
    for i, sequence in enumerate(out):
        row = rows[i // samples]
        text = tokenizer.decode(sequence[width:], skip_special_tokens=True)
        scores.append(oracle_labels(text, row["question"], gold_steps_from_json(row["gold_steps"])).process_acc)
    return sum(scores) / len(scores)


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    """The noisy SFT warm start (procrl sft, a scratch organism on the arith tokenizer) and its ProcessAcc."""
    root = tmp_path_factory.mktemp("learning")
    rows = list(load_math_dataset(TASK, prompt_template=TEMPLATE))
    noisy = root / "noisy.jsonl"
    with noisy.open("w") as handle:
        for row in rows:
            gold = gold_steps_from_json(row["gold_steps"])[0]
            for written in [gold.result] * 3 + [gold.result + 1] * 4 + [gold.result - 1] * 3:
                trace = f"{gold.a} + {gold.b} = {written}.\n\nThe answer is {written}."
                handle.write(
                    json.dumps({"question": row["question"], "answer": row["answer"], "solution": trace}) + "\n"
                )
    argv = ["--model_name_or_path", "scratch:llama,hidden=64,layers=2,heads=4,seed=0,tokenizer=arith",
            "--dataset_name", str(noisy), "--solution_column", "solution", "--prompt_template", TEMPLATE,
            "--num_train_epochs", "40", "--per_device_train_batch_size", "32", "--learning_rate", "3e-3",
            "--lr_scheduler_type", "constant", "--seed", "0", "--cache_dir", str(root / "cache"),
            "--output_dir", str(root / "sft"), "--report_to", "none"]  # fmt: skip
    assert sft.main(argv) == 0
    checkpoint = json.loads((root / "sft" / "run.json").read_text())["result"]["checkpoint"]
    return root, checkpoint, rows, _process_acc(checkpoint, rows)


def _grpo(root: Path, checkpoint: str, step_reward_func: str, arm: str) -> Path:
    out = root / arm
    argv = ["--model_name_or_path", checkpoint, "--dataset_name", TASK, "--dataset_end", "8",
            "--prompt_template", TEMPLATE, "--reward_funcs", "outcome", "--step_reward_func", step_reward_func, "--advantage_mode", "process",
            "--num_generations", "8", "--per_device_train_batch_size", "64", "--max_completion_length", "16",
            "--temperature", "1.0", "--learning_rate", "1e-3", "--beta", "0.0", "--max_steps", GRPO_STEPS,
            "--run_eval", "false", "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true",
            "--bf16", "false", "--generation_backend", "transformers", "--save_strategy", "no",
            "--output_dir", str(out), "--seed", "0"]  # fmt: skip
    assert train_grpo.main(argv) == 0
    return out


def test_the_warm_start_sits_near_thirty_percent(warm_start):
    _, _, _, start = warm_start
    assert 0.15 <= start <= 0.45, f"warm start ProcessAcc {start:.3f}: the noisy traces were 30% right"


@pytest.mark.parametrize(
    ("arm", "step_reward_func", "learns"),
    [
        ("oracle", "oracle", True),
        ("negated", "custom_rewards:negated_oracle", False),
        ("shuffled", "shuffled:oracle", False),
    ],
)
def test_grpo_learns_from_the_oracle_process_reward_and_not_from_its_negation_or_placebo(
    warm_start, arm, step_reward_func, learns
):
    root, checkpoint, rows, start = warm_start
    end = _process_acc(str(_grpo(root, checkpoint, step_reward_func, arm)), rows)
    message = f"{arm}: ProcessAcc {start:.3f} -> {end:.3f}"
    print(f"learning check {message}")  # shown with -s, and in CI's log of a failure
    if learns:
        assert end - start > 0.25, message
    else:
        assert end - start < 0.1, message
