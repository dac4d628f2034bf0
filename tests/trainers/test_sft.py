"""`procrl sft` (procrl/scripts/sft.py, trainers/sft.py, trainers/sft_cache.py): warm starts on gold traces, cached by
content.

These tests train, yet run in the fast suite (the issue asks that `procrl sft` be checked there): a 2-layer Llama over
a word-level tokenizer of a few dozen tokens (tests/helpers/tiny_models.py) takes milliseconds a step, so each run
is the trainer's set-up, ~1-2 s. The data is a JSONL file of toy problems with their gold traces.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_models import make_tiny_chat_tokenizer, make_tiny_llama
from transformers import AutoModelForCausalLM, AutoTokenizer

from procrl.scripts import sft as sft_command
from procrl.trainers import sft, sft_cache

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = "Q : {question}"


def _rows(n: int = 8) -> list[dict]:
    return [
        {
            "question": f"What is {i} + {i + 1} ?",
            "answer": str(2 * i + 1),
            "solution": f"{i} + {i + 1} = {2 * i + 1} . The answer is {2 * i + 1} .",
        }
        for i in range(n)
    ]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny Llama with the tiny chat tokenizer, saved as a model directory."""
    path = tmp_path_factory.mktemp("tiny-chat-policy")
    tokenizer = make_tiny_chat_tokenizer()
    make_tiny_llama(len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("traces") / "toy.jsonl", _rows())


def _argv(model, data, tmp_path, *extra) -> list[str]:
    return [
        "--model_name_or_path", str(model), "--dataset_name", str(data), "--prompt_template", TEMPLATE,
        "--max_steps", "2", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--logging_steps", "1",
        "--report_to", "none", "--disable_tqdm", "true", "--output_dir", str(tmp_path / "out"),
        "--cache_dir", str(tmp_path / "cache"), *extra,
    ]  # fmt: skip


def _run(argv: list[str]) -> dict:
    assert sft_command.main(argv) == 0
    run_dir = Path(argv[argv.index("--output_dir") + 1])
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished"
    return record


def _plan(argv: list[str]) -> sft.SFTPlan:
    return sft.prepare_sft(*sft_command.make_parser().parse_args_and_config(argv))


def test_trains_then_hits_the_cache_then_force_retrains(tiny_dir, traces, tmp_path, capsys):
    argv = _argv(tiny_dir, traces, tmp_path)
    record = _run(argv)
    result = record["result"]
    checkpoint = Path(result["checkpoint"])
    assert result["status"] == "trained" and checkpoint == tmp_path / "cache" / result["key"]
    assert record["files"]["checkpoint"] == str(checkpoint)
    assert f"checkpoint: {checkpoint}" in capsys.readouterr().out
    assert sft_cache.is_complete(checkpoint) and not list((tmp_path / "cache").glob(".tmp-*"))
    assert result["train"]["steps"] == 2 and result["bf16"] is False  # PROCRL_CPU_BF16=0 (tests/conftest.py)
    assert record["config"]["SFTTrainingConfig"]["bf16"] is False  # the resolved value is in the record
    losses = [row["loss"] for row in record["history"] if "loss" in row]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses) and math.isfinite(result["train"]["train_loss"])
    # completion-only loss: the loss covers exactly the tokens the completion adds to the rendered prompt
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    completion_tokens = 0
    for row in _rows():
        prompt = [{"role": "user", "content": TEMPLATE.replace("{question}", row["question"])}]
        full = prompt + [{"role": "assistant", "content": row["solution"]}]
        n_prompt = len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)["input_ids"])
        completion_tokens += len(tokenizer.apply_chat_template(full, tokenize=True)["input_ids"]) - n_prompt
    assert result["data"]["loss_tokens"] == completion_tokens < result["data"]["tokens"]
    # the checkpoint is an ordinary one: model and tokenizer (chat template included) load
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert model.config.num_hidden_layers == 2
    assert AutoTokenizer.from_pretrained(checkpoint).chat_template == tokenizer.chat_template
    manifest = json.loads((checkpoint / sft_cache.MANIFEST).read_text())
    assert manifest["key"] == result["key"] and manifest["train"]["steps"] == 2
    assert manifest["prompt_template"] == TEMPLATE  # calibrate warns when it samples with another one
    weights = checkpoint / "model.safetensors"
    stamp = (weights.stat().st_ino, weights.stat().st_mtime_ns)

    # the same content again: a cache hit that trains nothing
    again = _run(argv)
    assert again["result"]["status"] == "cached" and again["result"]["key"] == result["key"]
    assert again["result"]["log_history"] == [] and again["history"] == []
    assert again["metrics"]["sft/cached"] == 1 and again["metrics"]["sft/steps"] == 2  # the cached run's steps
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == stamp
    assert f"cached: {checkpoint}" in capsys.readouterr().out

    # --force retrains and replaces the checkpoint of the same key
    forced = _run([*argv, "--force", "true"])
    assert forced["result"]["status"] == "trained" and forced["result"]["key"] == result["key"]
    assert forced["metrics"]["sft/cached"] == 0
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) != stamp
    assert sft_cache.is_complete(checkpoint) and not list((tmp_path / "cache").glob(".*"))


def test_the_key_follows_content(tiny_dir, traces, tmp_path):
    key = _plan(_argv(tiny_dir, traces, tmp_path)).key

    def key_of(*extra, model=tiny_dir, data=traces):
        return _plan(_argv(model, data, tmp_path, *extra)).key

    # training settings that change the weights change the key; output, logging and the cache's place do not
    assert key_of("--learning_rate", "2e-3") != key
    assert key_of("--seed", "1") != key
    assert key_of("--max_length", "64") != key
    assert key_of("--logging_steps", "2", "--output_dir", str(tmp_path / "elsewhere"), "--force", "true") == key
    # the rows used: fewer rows, another trace or another prompt change it; the same rows from another file do not
    assert key_of("--dataset_end", "6") != key
    assert key_of("--prompt_template", "{question}") != key
    changed = _rows()
    changed[3]["solution"] = "3 + 4 = 8 . The answer is 8 ."
    assert key_of(data=_write(tmp_path / "changed.jsonl", changed)) != key
    assert key_of(data=_write(tmp_path / "copy.jsonl", _rows())) == key
    # the base model by content: a copy elsewhere is the same model, one changed weight another
    copy = shutil.copytree(tiny_dir, tmp_path / "copy-model")
    assert key_of(model=copy) == key
    model = AutoModelForCausalLM.from_pretrained(copy)
    with torch.no_grad():
        model.model.norm.weight[0] += 1.0
    model.save_pretrained(copy)
    assert key_of(model=copy) != key


def test_an_interrupted_run_leaves_no_checkpoint(tiny_dir, traces, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(sft.SFTTrainer, "train", fail)
    argv = _argv(tiny_dir, traces, tmp_path)
    with pytest.raises(RuntimeError, match="interrupted"):
        sft_command.main(argv)
    assert list((tmp_path / "cache").iterdir()) == []  # neither the key's directory nor a staging one
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "failed"


def test_empty_solutions_are_an_error_naming_the_set(tiny_dir, tmp_path, capsys):
    rows = _rows(5)
    rows[1]["solution"] = rows[4]["solution"] = "  "
    data = _write(tmp_path / "gaps.jsonl", rows)
    with pytest.raises(ValueError, match=r"gaps.jsonl: 2 of 5 rows have an empty solution"):
        _plan(_argv(tiny_dir, data, tmp_path))
    with pytest.raises(ValueError, match=r"svamp: 3 of 3 rows have an empty solution"):
        _plan(_argv(tiny_dir, "svamp", tmp_path, "--dataset_end", "3"))
    # the command: one error line, exit status 2, nothing trained
    assert sft_command.main(_argv(tiny_dir, data, tmp_path)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("procrl sft: error: ") and "2 of 5 rows" in line
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--model_name_or_path", "scratch:llama,hidden=30,heads=4"], "multiple of heads"),
        (["--use_peft", "true"], "use_peft"),
        (["--dataset_start", "4", "--dataset_end", "2"], "dataset_end (2) must be > dataset_start (4)"),
        (["--prompt_template", "no placeholder"], "{question}"),
    ],
)
def test_bad_settings_are_one_line(tiny_dir, traces, tmp_path, capsys, extra, words):
    assert sft_command.main([*_argv(tiny_dir, traces, tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err and "procrl sft: error:" in err


def test_a_scratch_organism_trains_through_the_same_path(tiny_dir, traces, tmp_path):
    spec = f"scratch:llama,hidden=32,layers=1,heads=2,intermediate=64,tokenizer={tiny_dir}"
    record = _run(_argv(spec, traces, tmp_path, "--max_steps", "1"))
    result = record["result"]
    assert result["status"] == "trained" and result["key_inputs"]["model"]["scratch"]["hidden"] == 32
    model = AutoModelForCausalLM.from_pretrained(result["checkpoint"])
    assert (model.config.model_type, model.config.hidden_size, model.config.num_hidden_layers) == ("llama", 32, 1)
    assert model.config.vocab_size == len(make_tiny_chat_tokenizer())
    assert AutoTokenizer.from_pretrained(result["checkpoint"]).chat_template
    # another initialisation seed is another organism
    assert _plan(_argv(spec + ",seed=1", traces, tmp_path, "--max_steps", "1")).key != result["key"]


def test_publish_never_shows_an_unfinished_checkpoint(tmp_path):
    def staged(text: str) -> Path:
        path = sft_cache.staging_dir(tmp_path, "k")
        (path / "weights").write_text(text)
        return path

    target = tmp_path / "k"
    unfinished = staged("half")
    with pytest.raises(ValueError, match="not a finished checkpoint"):
        sft_cache.publish(unfinished, target)
    assert not target.exists()
    target.mkdir()  # an unfinished directory at the target is replaced
    first = staged("first")
    (first / sft_cache.MANIFEST).write_text("{}")
    assert sft_cache.publish(first, target) == target and (target / "weights").read_text() == "first"
    second = staged("second")  # a finished one stays unless replace
    (second / sft_cache.MANIFEST).write_text("{}")
    sft_cache.publish(second, target)
    assert (target / "weights").read_text() == "first" and not second.exists()
    third = staged("third")
    (third / sft_cache.MANIFEST).write_text("{}")
    sft_cache.publish(third, target, replace=True)
    assert (target / "weights").read_text() == "third"
    assert {p.name for p in tmp_path.iterdir()} == {"k", unfinished.name}


def test_directory_fingerprint_reads_content_not_place(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for path in (one, two):
        path.mkdir()
        (path / "config.json").write_text('{"a": 1}')
        (path / "model.safetensors").write_bytes(b"\x00" * 100)
    (two / ".procrl-converted").write_text("a marker")  # hidden files and unrelated files do not count
    (two / "notes.md").write_text("notes")
    (two / "run.json").write_text("{}")
    assert sft_cache.directory_fingerprint(one) == sft_cache.directory_fingerprint(two)
    (two / "model.safetensors").write_bytes(b"\x00" * 99 + b"\x01")
    assert sft_cache.directory_fingerprint(one) != sft_cache.directory_fingerprint(two)
    with pytest.raises(ValueError, match="no tokenizer files"):
        sft_cache.directory_fingerprint(one, tokenizer_only=True)


def test_the_shipped_configs_parse_and_their_data_has_traces():
    for path in sorted((ROOT / "configs" / "sft").glob("*.yaml")):
        script, training, model_args = sft_command.make_parser().parse_args_and_config(["--config", str(path)])
        assert training.output_dir.startswith("outputs/sft/") and training.save_strategy == "no"
        sft.check_model_args(model_args)
        if script.dataset_name.endswith("episodes.jsonl"):  # written by procrl world episodes (test_sft_episodes.py)
            continue
        examples = sft.sft_examples(
            sft.load_math_dataset(script.dataset_name, start=script.dataset_start, end=script.dataset_end),
            script.dataset_name,
        )  # raises on an empty trace
        # the rows the config names: GSM8K's 1319, or the n<N> of every arith set in a mixture
        arith = [
            int(re.search(r"-n(\d+)", part).group(1)) for part in script.dataset_name.split("+") if "arith" in part
        ]
        total = sum(arith) if arith else 1319
        assert len(examples) == (script.dataset_end or total) - script.dataset_start
        sft.check_model_args(model_args)


VLLM_SOURCE = """
import sys
from vllm import LLM, SamplingParams

if __name__ == "__main__":  # vLLM starts its engine core in a spawned process
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=128, kv_cache_memory_bytes=1 << 28, enforce_eager=True)
    out = llm.chat([{"role": "user", "content": "What is 1 + 2 ?"}], SamplingParams(max_tokens=4, temperature=0))
    print("TOKENS", len(out[0].outputs[0].token_ids))
"""


@pytest.mark.slow
def test_vllm_loads_a_scratch_organism_checkpoint(tiny_dir, traces, tmp_path):
    pytest.importorskip("vllm")
    # head size 64/2 = 32, one vLLM's CPU attention supports (procrl/scratch_models.py)
    spec = f"scratch:llama,hidden=64,layers=1,heads=2,intermediate=64,positions=128,tokenizer={tiny_dir}"
    checkpoint = _run(_argv(spec, traces, tmp_path, "--max_steps", "1"))["result"]["checkpoint"]
    script = tmp_path / "load.py"
    script.write_text(VLLM_SOURCE)
    proc = subprocess.run([sys.executable, str(script), checkpoint], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "TOKENS 4" in proc.stdout
