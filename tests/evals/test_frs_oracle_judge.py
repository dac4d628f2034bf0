"""The oracle judge of FRS (`judge: oracle`): the four scores of hand-made completions against values computed by
hand from the mapping of docs/architecture.md "Step oracle", its results flowing into RS / FRS like an LLM judge's,
`procrl frs` offline on arith problems (a scripted sample set with known traces, and a tiny random Llama), and the
refusals (data without gold steps, uses that need an LLM judge)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from procrl.data_builders.datasets import load_math_dataset, resolve_template
from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, run_rollouts
from procrl.evals.frs import FRSArguments, FRSConfig, Trace, compute_frs
from procrl.evals.frs.offline import OfflineFRSConfig, run_frs
from procrl.evals.frs.oracle_judge import OracleJudge, oracle_scores, require_gold_steps, score_from_share
from procrl.evals.frs.traces import read_traces
from procrl.generation import Rollout, RolloutEngine, SamplingParams
from procrl.judges import JudgeArguments
from procrl.judges.spec import open_judge, open_judge_from
from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
from procrl.scripts.frs import main as frs_main

QUESTION = "Tom has 14 apples. He gets 7 more, eats 9, then doubles what is left (times 2). How many now?"
GOLD = '[[14,"+",7,21],[21,"-",9,12],[12,"*",2,24]]'
ARITH = "arith-ops3-d2-test-n64"

# completion -> (faithfulness, utility, coherence, factuality), by hand from the mapping S(s) = 1 + floor(4 s + 1/2):
CASES = {
    # every step valid and grounded, all three gold results: every share 1
    "correct": ("14 + 7 = 21.\n\n21 - 9 = 12.\n\n12 * 2 = 24.\n\nThe answer is 24.", (5, 5, 5, 5)),
    # slip at step 2 (21 - 9 = 13): valid 2/3 -> 4; step 3 uses the wrong 13, so grounded 2/3 -> 4;
    # credited 1 of 3 gold -> S(1/3) = 1 + floor(11/6) = 2; one step before the first error, 1/3 -> 2
    "slip": ("14 + 7 = 21.\n\n21 - 9 = 13.\n\n13 * 2 = 26.\n\nThe answer is 26.", (4, 2, 2, 4)),
    # slip at the last step: valid 2/3 -> 4, grounded 3/3 -> 5, credited 2/3 -> 4, two steps before the error -> 4
    "last slip": ("14 + 7 = 21.\n\n21 - 9 = 12.\n\n12 * 2 = 25.", (5, 4, 4, 4)),
    # an invented operand (5 is in neither the problem nor the gold): every step valid -> 5; only step 1 grounded,
    # 1/3 -> 2; credited 1/3 -> 2; first error at step 2 (index 1), 1/3 -> 2
    "invented": ("14 + 7 = 21.\n\n21 - 5 = 16.\n\n16 * 2 = 32.", (2, 2, 2, 5)),
    # no written step: 1 everywhere
    "no steps": ("I think the answer is 24.", (1, 1, 1, 1)),
}


def _scores(text: str, *, truncated: bool = False) -> tuple[int, ...]:
    scores = oracle_scores(oracle_labels(text, QUESTION, gold_steps_from_json(GOLD), truncated=truncated))
    return tuple(scores[name] for name in ("faithfulness", "utility", "coherence", "factuality"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_scores_of_hand_made_completions(case):
    text, expected = CASES[case]
    assert _scores(text) == expected


def test_share_to_score_rounds_half_up_exactly():
    assert [score_from_share(Fraction(k, 8)) for k in range(9)] == [1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert [score_from_share(Fraction(k, 3)) for k in range(4)] == [1, 2, 4, 5]  # 4/3 -> 1.83 -> 1; 8/3 -> 3.17 -> 3
    assert score_from_share(0.5) == 3 and score_from_share(1) == 5  # floats and ints as well
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="in \\[0, 1\\]"):
            score_from_share(bad)


def test_a_cut_result_at_the_end_of_a_truncated_trace_is_not_a_step():
    text = "14 + 7 = 21.\n\n21 - 9 = 1"  # the budget cut "12" after its first digit
    # truncated: one step, valid and grounded; 1 of 3 gold results -> utility S(1/3) = 2
    assert _scores(text, truncated=True) == (5, 2, 5, 5)
    # ended by the model: "21 - 9 = 1" is a wrong step (the second and first error): valid 1/2 -> 3, coherence 1/2 -> 3
    assert _scores(text) == (5, 2, 3, 3)
    judge = OracleJudge()
    traces = [_trace("p", text, truncated=flag) for flag in (True, False)]
    assert [r.value.coherence for r in judge.judge_traces(traces)] == [5, 3]


def _trace(problem_id, text, *, confidence=0.5, gold=GOLD, truncated=False, correct=True):
    return Trace(problem_id, QUESTION, text, "24", correct, confidence, 10, gold_steps=gold, truncated=truncated)


def test_results_flow_into_rs_and_frs_like_an_llm_judges():
    texts = [CASES[c][0] for c in ("correct", "slip", "invented", "no steps")]
    traces = [
        _trace(f"q{i // 2}", t, confidence=c) for i, (t, c) in enumerate(zip(texts, [0.9, 0.8, 0.7, 0.6], strict=True))
    ]
    judge = OracleJudge()
    report = compute_frs(traces, judge, FRSConfig(k_percent=50, k_values=(50, 100)), progress=False)
    # RS = (sum - 4) / 16 * 100: 20 -> 100, 12 -> 50, 11 -> 43.75, 4 -> 0
    assert [t.rs for t in traces] == [100.0, 50.0, 43.75, 0.0]
    assert report.at_k[50] == pytest.approx(75.0) and report.at_k[100] == pytest.approx(48.4375)
    assert report.score == report.at_k[50] and report.unscored == {} and report.n_scored == 4
    assert report.score_expected is None and report.n_scored_without_probs == 4  # no probabilities, no RS_expected
    assert report.judge["requests"] == 4 and report.judge["scored"] == 4 and report.judge["attempts"] == 0
    assert all(t.expected_scores is None for t in traces)


def test_traces_without_usable_gold_steps_are_refused():
    judge = OracleJudge()
    with pytest.raises(ValueError, match="step-checkable problems only .*problem q has none"):
        judge.judge_traces([_trace("q", "1 + 1 = 2", gold=None)])
    with pytest.raises(ValueError, match="problem q: gold_steps must be a JSON"):
        judge.judge_traces([_trace("q", "1 + 1 = 2", gold="not json")])
    with pytest.raises(ValueError, match="problem q has an empty"):
        judge.judge_traces([_trace("q", "1 + 1 = 2", gold="[]")])
    assert judge.stats.requests == 0  # nothing counted when a trace is refused
    with pytest.raises(ValueError, match="dataset svamp has no `gold_steps`"):
        require_gold_steps(["prompt", "answer", "question"], "dataset svamp")
    require_gold_steps(["prompt", "gold_steps"], "dataset arith")  # no error


def test_oracle_is_a_judge_setting_that_only_frs_opens():
    args = JudgeArguments(judge="oracle")
    assert args.enabled and args.is_oracle and not JudgeArguments().is_oracle
    with pytest.raises(ValueError, match="FRS's programmatic judge"):
        with open_judge("oracle"):
            pass
    with pytest.raises(ValueError, match="FRS's programmatic judge"):
        with open_judge_from(args, output_dir="unused", default_max_tokens=96):
            pass


def test_the_stepgap_verifier_refuses_the_oracle(tmp_path, capsys):
    from procrl.scripts import stepgap_eval

    out = tmp_path / "x"
    assert stepgap_eval.main(["--judge", "oracle", "--output-dir", str(out)]) == 2
    assert "needs a judge (an LLM), got --judge oracle" in capsys.readouterr().err and not out.exists()


# -- procrl frs offline ---------------------------------------------------------------------------------------------


def _arith_rows(n):
    return [dict(r) for r in load_math_dataset(ARITH, end=n, prompt_template=resolve_template("one_shot"))]


class ScriptedSampler(RolloutEngine):
    """Sample k is TEXTS[k] (ended by EOS), with flat log-probs (confidence 0.9 - 0.1 k)."""

    model_id = "vllm:scripted"
    tokenizer = None
    texts: list[str] = []

    def generate(self, prompt_ids, params, *, seed):
        import math

        return [Rollout([1] * 10, self.texts[r[0]], [math.log(0.9 - 0.1 * r[0])] * 10, "eos") for r in prompt_ids]


def _select_run(tmp_path, rows, texts):
    """A `procrl select` run directory holding `texts` as the samples of `rows` (two per problem)."""
    path = tmp_path / "sel"
    path.mkdir()
    ScriptedSampler.texts = texts
    stats = RolloutStats()
    requests = [RolloutRequest(str(k), [k], 1) for k in range(len(texts))]
    run_rollouts(ScriptedSampler(), requests, SamplingParams(max_new_tokens=10), seed=0, cache_dir=path / "cache",
                 shard_size=1, stats=stats)  # fmt: skip
    settings = {"model": "scripted", "dataset": ARITH, "split": None, "start": 0, "end": len(rows),
                "prompt_template": "one_shot", "n": 2, "temperature": 0.7, "top_p": 1.0, "max_new_tokens": 10,
                "batch_size": 4, "seed": 0, "generation_backend": "vllm"}  # fmt: skip
    samples = {"engine": "vllm:scripted", "files": [Path(f).name for f in stats.files]}
    result = {"command": "select", "settings": settings, "samples": samples}
    (path / "run.json").write_text(json.dumps({"command": "select", "status": "finished", "result": result}))
    problems = [
        {"problem_id": row["problem_id"], "answer": row["answer"],
         "candidates": [{"text": t, "num_tokens": 10} for t in texts[2 * i : 2 * i + 2]]}
        for i, row in enumerate(rows)
    ]  # fmt: skip
    (path / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    return path


def test_offline_frs_with_the_oracle_on_known_traces(tmp_path, monkeypatch):
    from procrl.evals.frs import offline as frs_offline

    monkeypatch.setattr(frs_offline, "load_setup", lambda *a, **k: pytest.fail("--traces-from must not sample"))
    rows = _arith_rows(2)
    corrupted = [dict(r)["solution"] for r in load_math_dataset(f"{ARITH}-corrupted", end=2)]
    # problem 0: its clean trace, its corrupted trace ("35 - 14 = 23." then "21 - 16 = 5.", "5 + 98 = 103."):
    #   valid 2/3 -> 4; grounded 1/3 (the 21 and then the 5 are not known) -> 2; nothing credited -> 1;
    #   first error at step 1 -> 1: RS (2 + 1 + 1 + 4 - 4) / 16 * 100 = 25
    # problem 1: clean; corrupted ("69 - 34 = 35.", "35 + 82 = 119.", "117 - 94 = 23."): valid 2/3 -> 4, grounded
    #   2/3 -> 4, credited 1/3 -> 2, one step before the error -> 2: RS (4 + 2 + 2 + 4 - 4) / 16 * 100 = 50
    assert corrupted[0].startswith("35 - 14 = 23.") and corrupted[1].startswith("69 - 34 = 35.\n\n35 + 82 = 119.")
    texts = [rows[0]["solution"], corrupted[0], rows[1]["solution"], corrupted[1]]
    path = _select_run(tmp_path, rows, texts)
    args = OfflineFRSConfig(traces_from=str(path), output_dir=str(tmp_path / "frs"), no_progress=True,
                            bootstrap_resamples=20)  # fmt: skip
    frs = FRSArguments(frs_k_percent=50, frs_k_values=[50, 100])
    result, files = run_frs(args, frs, JudgeArguments(judge="oracle"))
    traces = read_traces(tmp_path / "frs" / files["judged_traces"])
    assert [t.rs for t in traces] == [100.0, 25.0, 100.0, 50.0]
    assert all(t.gold_steps == row["gold_steps"] for t, row in zip(traces, [rows[0]] * 2 + [rows[1]] * 2, strict=True))
    assert all(t.truncated is False for t in traces)  # every scripted sample ended with EOS
    report = result["report"]
    assert report["at_k"][100] == pytest.approx(68.75)  # (100 + 25 + 100 + 50) / 4
    # confidences 0.9, 0.8, 0.7, 0.6 in sample order: the top 50% are the first problem's two traces
    assert report["at_k"][50] == pytest.approx(62.5) and report["unscored"] == {}
    assert result["settings"]["judge"] == "oracle" and result["settings"]["judge_max_tokens"] is None
    assert result["intervals"] is not None


def test_offline_frs_refuses_data_without_gold_steps_before_sampling(tmp_path, monkeypatch):
    from procrl.evals.frs import offline as frs_offline

    monkeypatch.setattr(frs_offline, "load_setup", lambda *a, **k: pytest.fail("nothing may be sampled"))
    args = OfflineFRSConfig(dataset="svamp", end=2, output_dir=str(tmp_path / "frs"), no_progress=True)
    with pytest.raises(ValueError, match="judge: oracle scores traces of step-checkable problems only .*svamp"):
        run_frs(args, FRSArguments(frs_traces=2), JudgeArguments(judge="oracle"))


def test_procrl_frs_with_the_oracle_judge_and_a_tiny_model(tmp_path, tiny_model_dir):
    out = tmp_path / "frs"
    code = frs_main([
        "--model", str(tiny_model_dir), "--dataset", ARITH, "--end", "3", "--frs-traces", "2", "--max-new-tokens",
        "8", "--batch-size", "6", "--judge", "oracle", "--generation-backend", "transformers", "--output-dir",
        str(out), "--no-progress", "--bootstrap-resamples", "10",
    ])  # fmt: skip
    assert code == 0
    record = json.loads((out / "run.json").read_text())
    report = record["result"]["report"]
    assert report["n_traces"] == 6 and report["n_problems"] == 3
    assert report["n_scored"] == report["n_judged"] > 0 and report["unscored"] == {}  # the oracle never fails
    assert report["judge"]["requests"] == report["n_judged"]
    traces = read_traces(out / "judged_traces.jsonl")
    gold = {row["problem_id"]: row for row in _arith_rows(3)}
    for trace in traces:
        assert trace.gold_steps == gold[trace.problem_id]["gold_steps"]
        assert trace.truncated is True or (trace.truncated is False and trace.num_tokens <= 8)  # known either way
        assert trace.num_tokens == 8 or trace.truncated is False  # shorter than the budget: it ended with EOS
        if trace.scores is not None:  # judged: the oracle's mapping of its own labels, independently recomputed
            labels = oracle_labels(trace.completion, trace.problem, gold_steps_from_json(trace.gold_steps),
                                   truncated=trace.truncated)  # fmt: skip
            assert trace.scores == oracle_scores(labels)
    assert report["score"] is not None  # defined (every kept trace is scored), whatever the random text gives
