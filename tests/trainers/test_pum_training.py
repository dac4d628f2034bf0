"""PUM training (trainers/pum_data.py, pum_evaluation.py, pum_training.py; procrl/scripts/train_pum.py, train_pum.py):
data preparation, per-type evaluation, launches, reload.

A tiny random Llama over the SmolLM2 tokenizer stands in for the causal LM; the PUM-Math pairs are made here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, LlamaForSequenceClassification, set_seed
from trl import ModelConfig

from procrl.evals.pum import evaluate_pairs, length_baseline, versus_length
from procrl.rewards.pum import PrefixUtilityModel, render_prompt_ids
from procrl.scripts.train_pum import make_parser
from procrl.trainers import pum_data, pum_training
from procrl.trainers.pum_data import split_by_problem, tokenize_pairs
from procrl.trainers.pum_training import PUMScriptArguments

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG = ROOT / "configs" / "pum" / "train_gsm8k_smollm2.yaml"
LORA_CONFIG = ROOT / "configs" / "pum" / "train_gsm8k_smollm2_lora.yaml"
SHIPPED_PAIRS = 110  # rows of data_builders/data/pum_math_gsm8k_cpu.jsonl (its SOURCE note)


def make_pairs(n_problems: int = 10) -> datasets.Dataset:
    """Two pairs per problem: vertical (two steps vs one) and horizontal (right vs wrong first step)."""
    rows = []
    for i in range(n_problems):
        problem = f"Sam has {i + 2} pens and buys {i + 3} more. How many pens does Sam have?"
        first = f"Sam starts with {i + 2} pens.\n\n"
        second = f"{i + 2} + {i + 3} = {2 * i + 5}.\n\n"
        common = {"prompt": problem, "problem_id": f"toy/{i}", "n_rollouts": 4}
        rows.append(
            {
                **common,
                "chosen": first + second,
                "rejected": first,
                "margin": 0.5,
                "pair_type": "vertical",
                "gain_chosen": 0.75,
                "gain_rejected": 0.25,
            }
        )
        rows.append(
            {
                **common,
                "chosen": first,
                "rejected": f"Sam starts with {i + 9} pens.\n\n",
                "margin": 0.25,
                "pair_type": "horizontal",
                "gain_chosen": 0.25,
                "gain_rejected": 0.0,
            }
        )
    return datasets.Dataset.from_list(rows)


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "pum_math"
    make_pairs().save_to_disk(str(path))
    return path


def _flags(model_dir, pairs, out, *extra):
    # fmt: off
    return [
        "--config", str(CONFIG),
        "--model_name_or_path", str(model_dir),
        "--dataset_name", str(pairs),
        "--output_dir", str(out),
        "--eval_fraction", "0.2",
        "--max_steps", "2",
        "--per_device_train_batch_size", "4",
        "--eval_strategy", "no",  # held-out evaluation still runs before and after training
        "--logging_steps", "1",
        "--report_to", "none",
        *extra,
    ]
    # fmt: on


def _run(cmd, tmp_path, **env):
    full_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "WANDB_DIR": str(tmp_path), **env}
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


# ----------------------------------------------------------------------------------------------------------
# Data preparation
# ----------------------------------------------------------------------------------------------------------


def test_tokenize_pairs_truncates_counts_and_drops_identical(smollm2_tokenizer):
    tok = smollm2_tokenizer
    problem = "What is 1 + 1?"
    budget_prefix = 5  # prefix tokens that fit: max_length - 1 = prompt + 5
    max_length = len(render_prompt_ids(tok, problem)) + budget_prefix + 1
    long_c = "One and one make two, as everyone knows.\n\nSo 2."  # first step: 11 tokens > 5
    long_r = "One and one make two, as everyone knows.\n\nSo 3."
    n_c, n_r = (
        len(tok.encode(t.split("\n\n")[0] + "\n\n", add_special_tokens=False))
        + len(tok.encode(t.split("\n\n")[1], add_special_tokens=False))
        for t in (long_c, long_r)
    )
    pairs = datasets.Dataset.from_list(
        [
            # same first 5 tokens -> identical after the right cut -> dropped (both sides still count as truncated)
            {
                "prompt": problem,
                "chosen": long_c,
                "rejected": long_r,
                "margin": 1.0,
                "pair_type": "vertical",
                "problem_id": "a",
            },
            # identical text -> dropped before rendering
            {
                "prompt": problem,
                "chosen": "2.",
                "rejected": "2.",
                "margin": 1.0,
                "pair_type": "horizontal",
                "problem_id": "a",
            },
            # short (4 tokens) and different -> kept untouched
            {
                "prompt": problem,
                "chosen": "So 2.",
                "rejected": "So 3.",
                "margin": 0.5,
                "pair_type": "horizontal",
                "problem_id": "a",
            },
        ]
    )
    out, stats = tokenize_pairs(pairs, tok, max_length, margin_scale=2.0, progress=False)
    assert stats.pairs_in == 3 and stats.pairs_kept == 1 and len(out) == 1
    assert stats.dropped_identical_text == 1
    assert stats.dropped_identical_after_truncation == 1
    assert stats.truncated_sequences == 2
    assert stats.truncated_tokens == (n_c - budget_prefix) + (n_r - budget_prefix)
    assert stats.kept_by_type == {"horizontal": 1}
    assert out["margin"] == [1.0]  # 2.0 * 0.5
    assert max(len(out["chosen_ids"][0]), len(out["rejected_ids"][0])) <= max_length - 1
    # margin_scale 0 trains without a margin column
    out0, _ = tokenize_pairs(pairs, tok, max_length, margin_scale=0.0, progress=False)
    assert "margin" not in out0.column_names
    # the builder's tie rows (ΔG = 0, arbitrary order) are not Bradley-Terry targets
    ties = pairs.add_column("is_tie", [False, False, True])
    out_t, stats_t = tokenize_pairs(ties, tok, max_length, progress=False)
    assert stats_t.dropped_ties == 1 and len(out_t) == 0
    bad = pairs.select([2]).map(lambda ex: {"margin": -1.0})
    with pytest.raises(ValueError, match="margin"):
        tokenize_pairs(bad, tok, max_length, progress=False)


def test_tokenize_pairs_counts_inputs_with_the_unknown_token():
    from procrl.data_builders.arithmetic_tokenizer import arithmetic_tokenizer

    tok = arithmetic_tokenizer()
    problem = "Nora has 4 muffins and donates 2. How many muffins does Nora have now?"
    pairs = datasets.Dataset.from_list(
        [
            {"prompt": problem, "chosen": "4 - 2 = 2.\n\n", "rejected": "4 - 2 = 3.\n\n", "margin": 1.0,
             "pair_type": "vertical", "problem_id": "a"},
            # "isNora": two space-less words fused, one unknown token on the rejected side
            {"prompt": problem, "chosen": "4 - 2 = 2.\n\nThe answer is 2.", "rejected": "4 - 2 = 2.\n\nThe answer isNora.",
             "margin": 1.0, "pair_type": "horizontal", "problem_id": "a"},
        ]
    )  # fmt: skip
    out, stats = tokenize_pairs(pairs, tok, 256, progress=False)
    assert stats.pairs_kept == 2 and stats.inputs_with_unk == 1
    assert tok.unk_token_id in out["rejected_ids"][1] and tok.unk_token_id not in out["chosen_ids"][1]
    assert tok.pad_token_id != tok.eos_token_id and tok.pad_token_id not in out["chosen_ids"][0]


def test_split_by_problem_holds_out_whole_problems():
    pairs = make_pairs(10)
    train, held = split_by_problem(pairs, 0.2, seed=0)
    train_ids, held_ids = set(train["problem_id"]), set(held["problem_id"])
    assert len(held_ids) == 2 and len(train_ids) == 8  # round(0.2 * 10) problems, all their pairs
    assert not train_ids & held_ids and len(train) + len(held) == len(pairs) and len(held) == 4
    again, _ = split_by_problem(pairs, 0.2, seed=0)
    assert set(again["problem_id"]) == train_ids  # deterministic
    _, none = split_by_problem(pairs, 0.0)
    assert len(none) == 0
    with pytest.raises(ValueError, match="problem"):
        split_by_problem(pairs.select([0, 1]), 0.5)


def test_length_baseline_by_hand():
    pairs = datasets.Dataset.from_dict(
        {
            "chosen_prefix_tokens": [10, 4, 7, 7],
            "rejected_prefix_tokens": [5, 9, 7, 1],
            "pair_type": ["vertical", "vertical", "horizontal", "horizontal"],
        }
    )
    r = length_baseline(pairs)
    # vertical: 1 (10 > 5) + 0 (4 < 9) -> 0.5; horizontal: 0.5 (tie) + 1 (7 > 1) -> 0.75; all: 2.5 / 4
    assert r["accuracy"] == 0.625 and r["ties"] == 1
    assert r["by_type"] == {"horizontal": {"accuracy": 0.75, "n": 2}, "vertical": {"accuracy": 0.5, "n": 2}}


def test_versus_length_pairs_a_problem_with_its_pairs():
    # problem a: two pairs, PUM right on both, length right on one (diff +1, +0); b: one pair, PUM wrong, length
    # tie (diff -0.5); c: one pair, both right (diff 0). Pair-weighted: (1 + 0 - 0.5 + 0) / 4.
    pairs = datasets.Dataset.from_dict(
        {
            "problem_id": ["a", "a", "b", "c"],
            "chosen_prefix_tokens": [3, 9, 5, 8],
            "rejected_prefix_tokens": [7, 4, 5, 2],
        }
    )
    correct = [1.0, 1.0, 0.0, 1.0]
    r = versus_length(correct, pairs, resamples=400, seed=1)
    assert r["difference"] == pytest.approx(0.125) and r["n_problems"] == 3 and r["n_pairs"] == 4
    # the reference: resample problems (not pairs) with the same generator, then the percentile interval
    per_problem = {"a": (1.0, 2), "b": (-0.5, 1), "c": (0.0, 1)}
    ids = ["a", "b", "c"]
    rng = np.random.default_rng(1)
    draws = []
    for _ in range(400):
        chosen = [ids[i] for i in rng.integers(0, 3, size=3)]
        draws.append(sum(per_problem[p][0] for p in chosen) / sum(per_problem[p][1] for p in chosen))
    assert r["interval"] == pytest.approx(list(np.quantile(draws, [0.025, 0.975])))
    assert r["interval"][0] < r["difference"] < r["interval"][1]


def test_versus_length_edge_cases():
    empty = datasets.Dataset.from_dict({"problem_id": [], "chosen_prefix_tokens": [], "rejected_prefix_tokens": []})
    assert versus_length([], empty) == {"difference": None, "interval": None, "n_problems": 0, "n_pairs": 0}
    one = datasets.Dataset.from_dict({"problem_id": ["a"], "chosen_prefix_tokens": [1], "rejected_prefix_tokens": [2]})
    assert versus_length([1.0], one) == {"difference": 1.0, "interval": None, "n_problems": 1, "n_pairs": 1}
    two = datasets.concatenate_datasets([one, one.map(lambda _: {"problem_id": "b"})])
    assert versus_length([1.0, 0.0], two, resamples=0)["interval"] is None
    with pytest.raises(ValueError, match="1 credits for 2 pairs"):
        versus_length([1.0], datasets.concatenate_datasets([one, one]))


def test_evaluate_pairs_per_type_matches_plain_scoring(smollm2_tokenizer, tiny_llama_factory):
    config = tiny_llama_factory(len(smollm2_tokenizer)).config
    config.num_labels = 1
    torch.manual_seed(3)
    model = LlamaForSequenceClassification(config).eval()
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)  # O(1) scores
    pairs, _ = tokenize_pairs(make_pairs(6), smollm2_tokenizer, 1024, progress=False)
    result = evaluate_pairs(model, pairs, pad_token_id=smollm2_tokenizer.pad_token_id, batch_size=5)

    def plain(ids):  # reference: one unpadded sequence through plain transformers
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0, 0].item()

    wins = {"vertical": [], "horizontal": []}
    margins = []
    for ex in pairs:
        c, r = plain(ex["chosen_ids"]), plain(ex["rejected_ids"])
        wins[ex["pair_type"]].append(float(c > r))
        margins.append(c - r)
    assert result["n"] == 12
    for kind, values in wins.items():
        assert result["by_type"][kind] == {"accuracy": sum(values) / 6, "n": 6}
    assert result["accuracy"] == sum(wins["vertical"] + wins["horizontal"]) / 12
    assert result["mean_margin"] == pytest.approx(sum(margins) / 12, abs=1e-4)
    versus = result["vs_length"]
    assert versus["difference"] == pytest.approx(result["accuracy"] - length_baseline(pairs)["accuracy"])
    assert versus["n_problems"] == len(set(pairs["problem_id"])) and versus["n_pairs"] == 12


def test_peft_flags_need_seq_cls():
    with pytest.raises(ValueError, match="SEQ_CLS"):
        pum_training._peft_config(ModelConfig(use_peft=True, lora_task_type="CAUSAL_LM"))
    args = ModelConfig(use_peft=True, lora_task_type="SEQ_CLS", lora_target_modules=["q_proj"])
    assert "score" in pum_training._peft_config(args).modules_to_save
    assert args.lora_modules_to_save is None  # the parsed config is not changed


def test_script_arguments_validate():
    assert PUMScriptArguments(step_separator="\\n\\n").step_separator == "\n\n"  # typed on a command line
    with pytest.raises(ValueError, match="eval_fraction"):
        PUMScriptArguments(eval_fraction=1.0)
    with pytest.raises(ValueError, match="margin_scale"):
        PUMScriptArguments(margin_scale=-1.0)


def test_the_shipped_pairs_are_the_default_and_load():
    script_args, training_args, model_args = make_parser().parse_args_and_config(args=[])
    assert script_args.dataset_name == "pum_math_gsm8k_cpu" and model_args.model_name_or_path is None  # = default
    assert training_args.output_dir == "outputs/pum" and not training_args.activation_checkpointing
    pairs = pum_data.load_pairs(script_args.dataset_name)
    assert len(pairs) == SHIPPED_PAIRS
    assert set(pairs["pair_type"]) == {"vertical", "horizontal"}
    assert all(m > 0 for m in pairs["margin"])  # kept pairs pass the margin filter: ΔG > κ·sd > 0
    assert all(p.startswith("gsm8k/test/") for p in pairs["problem_id"])
    train, held_out = split_by_problem(pairs, script_args.eval_fraction, script_args.split_seed)
    assert len(set(held_out["problem_id"])) == 6  # round(0.3 x 20 problems)
    assert not set(train["problem_id"]) & set(held_out["problem_id"])


def test_dashed_and_underscored_flags_are_the_same():
    dashed, _, _ = make_parser().parse_args_and_config(args=["--eval-fraction", "0.2", "--max-train-pairs", "8"])
    underscored, _, _ = make_parser().parse_args_and_config(args=["--eval_fraction", "0.2", "--max_train_pairs", "8"])
    assert dashed == underscored and (dashed.eval_fraction, dashed.max_train_pairs) == (0.2, 8)


@pytest.mark.parametrize("path", ["outputs/pum_math/gsm8k/dataset", "./pairs", "pairs.parquet", "/no/such/dir"])
def test_a_missing_local_pair_set_is_one_clear_line(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pum_data.PairsNotFoundError) as error:  # raised before any Hub request
        pum_data.load_pairs(path)
    message = str(error.value)
    assert "\n" not in message and repr(path) in message
    assert "procrl build-pum-data --config configs/pum/build_gsm8k_cpu.yaml" in message


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_train_then_reload_in_two_fresh_processes(tmp_path, tiny_model_dir, pairs_dir):
    """`python train_pum.py` end to end; two fresh processes reload the checkpoint and reproduce the
    in-trainer scores of the probe prefixes (identical to each other, within 1e-5 of the trainer's)."""
    out = tmp_path / "out"
    proc = _run([sys.executable, "train_pum.py", *_flags(tiny_model_dir, pairs_dir, out)], tmp_path)
    record = json.loads((out / "run.json").read_text())
    summary = record["result"]  # run.json is the one results file
    assert record["files"] == {"checkpoint": str(out), "pum_config": str(out / "pum_config.json")}
    assert not (out / "summary.json").exists()
    assert summary["train"]["steps"] == 2 and summary["world_size"] == 1
    data = summary["data"]
    assert data["train_problems"] == 8 and data["eval_problems"] == 2  # 20% of 10 problems, whole problems
    assert data["train"]["pairs_kept"] == 16 and data["eval"]["pairs_kept"] == 4
    after = summary["heldout"]["after"]
    assert set(after["by_type"]) == {"horizontal", "vertical"} and after["n"] == 4
    assert summary["heldout"]["length_baseline"]["by_type"]["vertical"]["accuracy"] == 1.0  # chosen = more steps
    assert "PUM before" in proc.stdout  # the held-out table is printed
    assert json.loads((out / "pum_config.json").read_text())["step_separator"] == "\n\n"

    # the head was trained: the saved head differs from the seed-controlled initial head
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    set_seed(42)
    initial = pum_training.build_model(str(tiny_model_dir), ModelConfig(dtype="float32"), tok)
    saved = load_file(out / "model.safetensors")
    assert not torch.equal(saved["score.weight"], initial.score.weight.detach())

    probe = summary["probe"]
    assert len(probe) == 4
    script = (
        "import json, sys\n"
        "from procrl.rewards.pum import PrefixUtilityModel\n"
        "probe = json.loads(open(sys.argv[2]).read())['result']['probe']\n"
        "pum = PrefixUtilityModel.from_pretrained(sys.argv[1], device='cpu')\n"
        "print(json.dumps(pum.score([p['problem'] for p in probe], [p['prefix'] for p in probe])))\n"
    )
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-c", script, str(out), str(out / "run.json")]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # two fresh processes, run side by side
    runs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-3000:]
        runs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert runs[0] == runs[1]
    for got, row in zip(runs[0], probe, strict=True):
        assert abs(got - row["score"]) < 1e-5
    assert max(r["score"] for r in probe) != min(r["score"] for r in probe)


@pytest.mark.slow
def test_lora_trains_the_head_and_reloads(tmp_path, tiny_model_dir, pairs_dir):
    out = tmp_path / "lora"
    parser = make_parser()
    args = _flags(
        tiny_model_dir, pairs_dir, out, "--lora_target_modules", "q_proj", "v_proj", "--eval_before_training", "false"
    )
    args[1] = str(LORA_CONFIG)
    summary = pum_training.train(*parser.parse_args_and_config(args=args))
    assert summary["lora"] and summary["train"]["steps"] == 2
    weights = load_file(out / "adapter_model.safetensors")
    assert any(k.endswith("score.weight") for k in weights)  # the head travels with the adapter
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in weights.items())  # LoRA B starts at 0: it trained
    pum = PrefixUtilityModel.from_pretrained(out, device="cpu")
    probe = summary["probe"]
    got = pum.score([p["problem"] for p in probe], [p["prefix"] for p in probe])
    assert got == pytest.approx([p["score"] for p in probe], abs=1e-5)


@pytest.mark.slow
def test_train_refuses_when_reward_trainer_would_drop_pairs(tmp_path, tiny_model_dir, pairs_dir, monkeypatch):
    real = pum_data.tokenize_pairs

    def too_long(pairs, tokenizer, max_length, **kwargs):
        out, stats = real(pairs, tokenizer, max_length, **kwargs)
        return out.map(lambda ex: {"chosen_ids": ex["chosen_ids"] + [5] * max_length}), stats

    monkeypatch.setattr(pum_data, "tokenize_pairs", too_long)
    parser = make_parser()
    with pytest.raises(RuntimeError, match="dropped"):
        pum_training.train(*parser.parse_args_and_config(args=_flags(tiny_model_dir, pairs_dir, tmp_path / "x")))


@pytest.mark.slow
def test_accelerate_launch(tmp_path, tiny_model_dir, pairs_dir):
    out = tmp_path / "out"
    _run(
        [
            str(BIN / "accelerate"),
            "launch",
            "--cpu",
            "--num_processes",
            "1",
            "train_pum.py",
            *_flags(tiny_model_dir, pairs_dir, out),
        ],
        tmp_path,
    )
    assert json.loads((out / "run.json").read_text())["result"]["world_size"] == 1


@pytest.mark.slow
def test_two_cpu_ranks_with_torchrun(tmp_path, tiny_model_dir, pairs_dir):
    out = tmp_path / "out"
    _run(
        [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", "train_pum.py"]
        + _flags(tiny_model_dir, pairs_dir, out),
        tmp_path,
        ACCELERATE_USE_CPU="True",
    )
    summary = json.loads((out / "run.json").read_text())["result"]
    assert summary["world_size"] == 2
    assert summary["heldout"]["after"]["n"] == 4  # every held-out pair scored once across the two ranks
