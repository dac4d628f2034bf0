"""The LLM-only StepGap verifier (`procrl.evals.stepgap.llm_only`) and its prompt ablations, on a fake judge; the
`stepgap-eval --llm-only` rows end to end (no server, no model)."""

from __future__ import annotations

import contextlib
import json

import pytest

from procrl.evals.stepgap import evaluate as ev
from procrl.evals.stepgap import llm_only as lo
from procrl.evals.stepgap.llm_only import (
    PARTS,
    LLMOnlyLabel,
    LLMOnlyVerifier,
    llm_only_messages,
    prompt_parts,
    variant_parts,
)
from procrl.judges import Judge, JudgeResult, parse_judgement
from procrl.judges import spec as judge_spec
from procrl.rewards.stepgap.trace import Passage, StepLabel, Trace, TraceStep
from procrl.scripts import stepgap_eval

LYON = Passage(title="Lyon", text="Lyon is the third-largest city of France.")
PARIS = Passage(title="Paris", text="Paris is the capital of France.")


def step(kind: str, marker: str, evidence=(LYON,)) -> TraceStep:
    if kind == "conclusion":
        text = f"<think>Lyon it is [{marker}].</think>\n<answer>Lyon</answer>"
        return TraceStep(kind=kind, text=text, query=None, answer="Lyon", evidence=list(evidence), retrieved=[])
    text = f"<think>Look up Lyon [{marker}].</think>\n<search>Lyon size</search>"
    return TraceStep(kind=kind, text=text, query="Lyon size", answer=None, evidence=list(evidence), retrieved=[])


def trace(*markers: str) -> Trace:
    steps = [step("inference", m) for m in markers[:-1]] + [step("conclusion", markers[-1], (LYON, PARIS))]
    return Trace(question="Which city is third-largest?", steps=steps, answer="Lyon", format_violations=[])


def step_text(messages) -> str:
    """The step text of an LLM-only request (the last block of the user message, before the reply instruction)."""
    block = messages[-1]["content"].rsplit("STEP (", 1)[1].split("):\n", 1)[1]
    return block.split("\n\n" + lo.REPLY_INSTRUCTION, 1)[0]


class ScriptedJudge(Judge):
    """LLM-only requests: the reply `replies[marker]` for the marker "[m]" in the step (a label or a raw text), or a
    `rule(messages)` reply; A-C requests (any other schema): an accurate abstention (the hybrid labels NONE)."""

    def __init__(self, replies=None, rule=None):
        super().__init__(name="scripted")
        self.replies, self.rule = replies or {}, rule
        self.calls: list[int] = []  # requests per judge() call
        self.seen: list[list[dict]] = []

    def judge(self, requests, schema, **kwargs):
        self.calls.append(len(requests))
        return super().judge(requests, schema, **kwargs)

    def _request_payload(self, messages, schema):
        return {"messages": messages, "schema": schema.__name__}

    async def _judge_uncached(self, requests, schemas, finish):
        for j, messages in enumerate(requests):
            if schemas[j] is LLMOnlyLabel:
                self.seen.append(messages)
                text = self.rule(messages) if self.rule else None
                if text is None:
                    marker = step_text(messages).split("[", 1)[1].split("]", 1)[0]
                    text = self.replies[marker]
                text = text if text.startswith(("{", "I ")) else json.dumps({"label": text})
            else:
                body = {"off_target": False, "abstains": True, "abstention_accurate": True, "entity_match": True}
                text = json.dumps(body | {"quote": "", "entity": ""})
            value, reason = parse_judgement(text, schemas[j])
            finish(j, JudgeResult(value=value, unscored=reason, raw=text, attempts=1))


def test_variants_drop_one_part_each():
    assert PARTS == ("definitions", "evidence", "history", "question")
    variants = variant_parts()
    assert list(variants) == ["LLM-only"] + [f"LLM-only -{p}" for p in PARTS]
    for part in PARTS:
        assert set(variants[f"LLM-only -{part}"]) == set(PARTS) - {part}
    assert variant_parts(ablation=False) == {"LLM-only": PARTS}


def test_each_ablation_prompt_lacks_exactly_its_part():
    t = trace("s1", "s2", "s3")
    question, target, history = t.question, t.steps[2], t.steps[:2]
    texts = prompt_parts(question, target, history)
    # the parts by hand: the question line, both passages, both earlier steps, the definitions of all four labels
    assert texts["question"] == "QUESTION: Which city is third-largest?"
    assert texts["evidence"] == f"EVIDENCE:\n[1] Lyon: {LYON.text}\n[2] Paris: {PARIS.text}"
    assert texts["history"] == f"EARLIER STEPS:\n[step 1] {history[0].text}\n[step 2] {history[1].text}"
    assert all(f"- {label} (" in texts["definitions"] for label in ("NONE", "CC", "IE", "MB"))

    def joined(parts):
        return "\n".join(m["content"] for m in llm_only_messages(question, target, history, parts=parts))

    full = joined(PARTS)
    assert all(text in full for text in texts.values()) and target.text in full
    for name, parts in variant_parts().items():
        if name == "LLM-only":
            continue
        dropped = name.removeprefix("LLM-only -")
        prompt = joined(parts)
        assert texts[dropped] not in prompt, name
        assert all(texts[p] in prompt for p in parts), name
        # nothing else changes: the full prompt is this one with the dropped block put back
        assert len(full) - len(prompt) == len(texts[dropped]) + 2  # the block and one "\n\n" separator
        assert target.text in prompt and lo.REPLY_INSTRUCTION in prompt
    # the evidence block also drops the passage text (no other part repeats it)
    assert LYON.text not in joined(("definitions", "history", "question"))
    with pytest.raises(ValueError, match="unknown prompt parts"):
        llm_only_messages(question, target, history, parts=("evidence", "gold"))


def test_first_step_and_no_evidence_have_placeholders():
    first = step("inference", "a", evidence=())
    texts = prompt_parts("q?", first, [])
    assert texts["history"] == "EARLIER STEPS:\n(none: this is the first step)"
    assert texts["evidence"] == "EVIDENCE:\n(no evidence retrieved yet)"
    long = Passage(title="T", text="word " * 100)
    assert prompt_parts("q?", step("inference", "a", (long,)), [], max_passage_chars=20)["evidence"].endswith(" ...")


def test_labels_are_mapped_in_one_judge_call():
    traces = [trace("a", "b"), trace("c")]
    judge = ScriptedJudge({"a": "NONE", "b": "CC", "c": "MB"})
    verifier = LLMOnlyVerifier(judge, progress=False)
    results = verifier.judge_variants(traces)
    assert judge.calls == [3 * len(variant_parts())]  # 3 steps x 5 variants, one call
    for name in variant_parts():
        labels = verifier.labels(results[name])
        assert [[x.label for x in row] for row in labels] == [["NONE", "CC"], ["MB"]]
        assert verifier.unscored(results[name]) == {}
    # the history of step 2 is step 1; the first step has none
    history_blocks = [m[-1]["content"] for m in judge.seen[:2]]
    assert "(none: this is the first step)" in history_blocks[0] and traces[0].steps[0].text in history_blocks[1]
    assert [x.label for x in verifier.verify_many([trace("b")])[0]] == ["CC"]


def test_unparseable_reply_is_error_and_counted():
    judge = ScriptedJudge({"a": "I think this step is fine.", "b": '{"label": "maybe"}', "c": "IE"})
    verifier = LLMOnlyVerifier(judge, progress=False)
    results = verifier.judge_variants([trace("a", "b", "c")], {"LLM-only": PARTS})["LLM-only"]
    labels = verifier.labels(results)[0]
    assert [x.label for x in labels] == ["ERROR", "ERROR", "IE"]
    assert labels[0].reason == "judge unscored: invalid_json" and labels[1].reason == "judge unscored: schema_mismatch"
    assert verifier.unscored(results) == {"invalid_json": 1, "schema_mismatch": 1}
    # a missing or foreign result is ERROR too, never a crash
    assert verifier.labels([[None]])[0][0].label == "ERROR" and verifier.unscored([[None]]) == {"no label": 1}
    # ERROR counts as "no gap flagged" in the metrics, and is counted there
    m = ev.compute_metrics([["NONE", "CC", "IE"]], [[x.label for x in labels]])
    assert m["n_error"] == 2 and m["step_recall"] == pytest.approx(1 / 2)
    with pytest.raises(ValueError, match="max_passage_chars"):
        LLMOnlyVerifier(judge, max_passage_chars=0)


class AllNoneHybrid:
    """A hybrid verifier stand-in: every step NONE, no judge call."""

    def check_steps(self, traces):
        return [[JudgeResult(value=None, unscored=None) for _ in t.steps] for t in traces]

    def route(self, traces, checks, stages=None):
        return [[StepLabel("NONE") for _ in t.steps] for t in traces]


def test_evaluate_adds_llm_only_rows_with_intervals():
    gold_of = {"a": "NONE", "b": "CC", "c": "IE", "d": "MB"}
    data = [(trace("a", "b"), ["NONE", "CC"]), (trace("c"), ["IE"]), (trace("d", "a"), ["MB", "NONE"])]

    def rule(messages):  # right with the definitions, "IE" everywhere without them (the flag-every-step collapse)
        marker = step_text(messages).split("[", 1)[1].split("]", 1)[0]
        return gold_of[marker] if "Label definitions:" in messages[0]["content"] else "IE"

    judge = ScriptedJudge(rule=rule)
    report = ev.evaluate(AllNoneHybrid(), data, llm_only=LLMOnlyVerifier(judge, progress=False), bootstrap_resamples=30)
    rows = report["metrics"]
    assert list(rows) == ["full", "-A", "-B", "-C", "-D", "-E", *variant_parts()]
    assert rows["LLM-only"]["typed_macro_f1"] == 1.0 and rows["LLM-only -evidence"]["sF1"] == 1.0
    # all-IE by hand: 5 steps, 3 gaps -> step P 3/5, R 1 -> F1 3/4; all 3 questions have a gap -> Q-F1 1; BA 1/2
    no_defs = rows["LLM-only -definitions"]
    assert no_defs["sF1"] == pytest.approx(3 / 4) and no_defs["Q-F1"] == 1.0 and no_defs["BA"] == 0.5
    assert no_defs["label_distribution"]["IE"] == 1.0
    for name in [*rows, *report["baselines"]]:
        row = rows.get(name) or report["baselines"][name]
        assert set(row["ci"]) == {"sF1", "Q-F1", "BA", "typed_macro_f1"}
        assert all(lo <= hi for lo, hi in row["ci"].values())
    # every question has a gap: perfect gap detection on every resample; typed macro-F1 dips where a resample lacks a
    # label (its F1 is then 0 by `compute_metrics`' convention)
    assert rows["LLM-only"]["ci"]["sF1"] == [1.0, 1.0] and rows["LLM-only"]["ci"]["BA"] == [1.0, 1.0]
    assert rows["LLM-only"]["ci"]["typed_macro_f1"][1] == 1.0
    assert report["llm_only"]["unscored"] == {name: {} for name in variant_parts()}
    assert judge.calls == [5 * 5]
    no_ablation = ev.evaluate(AllNoneHybrid(), data, ablation=False, llm_only=LLMOnlyVerifier(judge, progress=False))
    assert list(no_ablation["metrics"]) == ["full", "LLM-only"]


class EntailAll:
    """An NLI stand-in (the hybrid's ablation -B sends abstentions on to stages C-E): every pair entailed."""

    def predict(self, pairs):
        return ["entailment"] * len(pairs)


def test_main_llm_only_rows_end_to_end(tmp_path, monkeypatch, capsys):
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(ev.DEFAULT_DATA.read_text().splitlines()[:3]) + "\n")
    gold = [g for _, g in ev.load_annotated(small)]
    by_text = {s.text.strip(): g for (t, gs) in ev.load_annotated(small) for s, g in zip(t.steps, gs, strict=True)}
    judge = ScriptedJudge(rule=lambda messages: by_text[step_text(messages).strip()])

    @contextlib.contextmanager
    def fake_open_judge(spec, **kwargs):
        yield judge

    monkeypatch.setattr(judge_spec, "open_judge", fake_open_judge)
    monkeypatch.setattr(stepgap_eval, "make_nli", lambda spec, judge, **kw: EntailAll())
    out = tmp_path / "out"
    argv = ["--data", str(small), "--output-dir", str(out), "--llm-only", "--bootstrap-resamples", "40"]
    assert stepgap_eval.main([*argv, "--baseline-draws", "5"]) == 0
    metrics = json.loads((out / "run.json").read_text())["result"]
    assert metrics["bootstrap"] == {"resamples": 40, "confidence": 0.95, "seed": 0, "over": "questions"}
    # the scripted judge answers gold: perfect detection; typed macro-F1 3/4 (MB is absent from these steps: F1 0)
    llm = metrics["metrics"]["LLM-only"]
    assert llm["sF1"] == 1.0 and llm["BA"] == 1.0 and llm["typed_macro_f1"] == pytest.approx(3 / 4)
    assert metrics["llm_only"]["unscored"]["LLM-only -history"] == {}
    assert metrics["metrics"]["full"]["label_distribution"]["NONE"] == 1.0  # accurate abstentions
    assert all("ci" in row for row in [*metrics["metrics"].values(), *metrics["baselines"].values()])
    table, printed = (out / "table.md").read_text(), capsys.readouterr().out
    for name in variant_parts():
        # sF1 1 on the whole set and on every resample where it is defined (one without any gap is left out)
        assert f"| {name} | 100.0 [100.0, 100.0] |" in table and f"\n{name} " in printed
    assert "Q-F1 inflation check" in table and "Q-F1 inflation check" in printed
    assert "95% percentile bootstrap interval over questions (40 resamples" in table
    assert (out / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [json.loads(x) for x in (out / "labels.jsonl").read_text().splitlines()]
    assert [x["llm_only"]["LLM-only"] for x in lines] == [g for row in gold for g in row]
    assert json.loads(lines[0]["llm_only_raw"])["label"] == gold[0][0]
    record = json.loads((out / "run.json").read_text())["metrics"]
    assert record["stepgap/llm_only/sF1"] == 1.0 and "stepgap/ci/sF1/low" in record
    # --bootstrap-resamples 0: no intervals anywhere; no --llm-only: no LLM-only rows and no LLM-only judge call
    judge.calls.clear()
    assert stepgap_eval.main(["--data", str(small), "--output-dir", str(out), "--bootstrap-resamples", "0"]) == 0
    metrics = json.loads((out / "run.json").read_text())["result"]
    assert "ci" not in metrics["metrics"]["full"] and "LLM-only" not in metrics["metrics"]
    assert metrics["llm_only"] is None and len(judge.calls) == 1 and "[" not in (out / "table.md").read_text()


def test_bad_flags_exit_2(capsys):
    # a value the dataclass refuses: one error line, status 2
    assert stepgap_eval.main(["--bootstrap-resamples", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        "procrl stepgap-eval: error: --bootstrap-resamples -1 must be >= 0 (0: no intervals)."
    )
    # a value argparse refuses (not an int, not a bool word): argparse's usage + error line, status 2
    for argv, flag in (
        (["--bootstrap-resamples", "many"], "--bootstrap-resamples"),
        (["--llm-only", "maybe"], "--llm-only"),
    ):
        with pytest.raises(SystemExit) as info:
            stepgap_eval.main(argv)
        assert info.value.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith("procrl stepgap-eval: error: argument ") and flag in last


def test_help_names_the_new_flags(capsys):
    with pytest.raises(SystemExit):
        stepgap_eval.main(["--help"])
    text = capsys.readouterr().out
    assert "--llm-only" in text and "--bootstrap-resamples" in text and "Q-F1 inflation check" in text
