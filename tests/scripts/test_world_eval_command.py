"""`procrl world-eval` end to end on a tiny scratch policy over the world's own tokenizer: the row, the episode texts
and the annotated steps are written and agree with each other."""

from __future__ import annotations

import json

from procrl.scratch_models import build_scratch_model
from procrl.scripts import world, world_eval

SMALL = ["--seed", "3", "--n-train", "12", "--n-dev", "6", "--n-test", "6", "--hops", "2"]


def test_world_eval_writes_row_texts_and_annotated_steps(tmp_path, capsys):
    assert world.main(["episodes", "--out", str(tmp_path / "w"), *SMALL, "--tokenizer_vocab_size", "300"]) == 0
    spec = f"scratch:llama,hidden=32,layers=1,heads=2,intermediate=64,tokenizer={tmp_path / 'w' / 'tokenizer'}"
    model, tok = build_scratch_model(spec)
    model.save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    capsys.readouterr()
    out = tmp_path / "eval"
    argv = ["--model", str(tmp_path / "policy"), "--world", str(tmp_path / "w"), "--n", "3", "--batch_size", "2",
            "--max_completion_length", "24", "--output_dir", str(out)]  # fmt: skip
    assert world_eval.main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "world_eval.json").read_text())
    texts = (out / "episodes.jsonl").read_text().splitlines()
    annotated = [json.loads(line) for line in (out / "annotated.jsonl").read_text().splitlines()]
    assert result["row"]["n"] == len(result["records"]) == len(texts) == 3
    counts = result["annotated"]
    assert counts["episodes"] == len(annotated) and counts["steps"] == sum(len(a["steps"]) for a in annotated)
    assert counts["dropped_episodes"] == 3 - len(annotated)
    assert f"annotated: {out / 'annotated.jsonl'}: {counts['steps']} oracle-labelled steps" in printed
