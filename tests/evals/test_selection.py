"""Best-of-N selection and PUM beam search (evals/selection.py, evals/selection_scorers.py,
evals/beam_search.py): pure selection rules against hand examples, the validation of the commands' settings, the
score passes (PiCSAR terms, PUM step aggregations) on tiny in-memory models against the scorers called directly, and
the greedy decodes and samples in the sample store with a counting fake engine. Both commands end to end:
tests/scripts/test_select_beam_commands.py."""

import math

import pytest
import torch

from procrl.evals import selection_scorers
from procrl.evals.beam_search import BeamConfig
from procrl.evals.offline import Setup, accuracy, format_accuracy_table
from procrl.evals.selection import (
    SCORERS,
    SelectConfig,
    _greedy,
    _greedy_entries,
    _sample,
    select_argmax,
    select_majority,
    select_random,
    store_dir,
)
from procrl.evals.selection_scorers import Candidates, ScoringContext, load_evaluator, pass_of, score_candidates
from procrl.evals.stats import MISSING
from procrl.generation import Rollout, derive_seed, render_prompts
from procrl.rewards.outcome import extract_answer
from procrl.rewards.picsar import DEFAULT_INSTRUCTION, DEFAULT_SEPARATOR, PiCSARScorer
from procrl.rewards.pum import PrefixUtilityModel

# ----------------------------------------------------------------------------------------------------------
# Pure rules
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["4", "5", "5"], 1),  # 5 wins 2:1, its first occurrence is index 1
        (["4", None, "5", "5", "4"], 0),  # 2:2 tie -> the answer seen first ("4", index 0)
        (["5", "4", "4", "5"], 0),  # tie again, now "5" is seen first
        ([None, "7", "3", "3"], 2),  # None does not vote
        ([None, None], None),  # nobody answered
        (["12"], 0),
        # answers group as the outcome check grades them: {0, 1, 2} are all 1/2 (3 votes) against 3 (2 votes)
        ([r"\frac{1}{2}", "0.5", "1/2", "3", "3"], 0),
        (["5", "5.0", "+5", "7", "7"], 0),  # 5 = 5.0 = +5 (3 votes) beat 7 (2 votes)
        (["5", "7", "7", "5.0"], 0),  # 5 and 7 tie 2:2 -> the class whose first member comes first (5, index 0)
        (["1/4", "-0.25", r"-\frac{1}{4}"], 1),  # the sign counts: -1/4 (2 votes, first at index 1) beats 1/4
        ([None, "2", None, "x+1", "1+x", "2.0", "1 + x"], 3),  # x+1 (3 votes, math-verify) beats 2 (2); None skipped
        ([None, "3", r"\sqrt{9}", "4", "4"], 1),  # sqrt(9) is 3: 3 and 4 tie 2:2, 3 first (index 1)
        (["monday", "Monday", "Monday"], 1),  # prose groups only by identical strings: "Monday" 2 votes, index 1
    ],
)
def test_select_majority(answers, expected):
    assert select_majority(answers) == expected


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.1, 0.9, 0.3], 1),
        ([0.5, None, 0.5], 0),  # tie -> earliest
        ([None, math.nan, -2.0], 2),  # None and NaN never picked
        ([None, None], None),
    ],
)
def test_select_argmax(scores, expected):
    assert select_argmax(scores) == expected


def test_select_random_is_seeded_per_key():
    picks = [select_random(8, 0, f"svamp/{i}") for i in range(50)]
    assert picks == [select_random(8, 0, f"svamp/{i}") for i in range(50)]  # reproducible
    assert all(0 <= p < 8 for p in picks) and len(set(picks)) > 1  # not constant
    assert picks != [select_random(8, 1, f"svamp/{i}") for i in range(50)]  # the seed matters
    with pytest.raises(ValueError):
        select_random(0, 0, "x")


@pytest.mark.parametrize(
    ("correct", "picks", "expected", "interval"),
    [
        # 2 scorable problems (the third has no parseable gold), 1 right pick, 1 abstention: 1/2; Wilson with
        # z = 1.96: centre 0.5, half z * sqrt(1/8 + z²/16) / (1 + z²/2) = 0.4055
        ([[True, False], [False, False], None], [0, None, 1], (0.5, 1, 2, 1), (0.0945, 0.9055)),
        # the one pick is wrong: a measured 0 stays 0; Wilson 0/1 = [0, z² / (1 + z²)]
        ([[False, True]], [0], (0.0, 0, 1, 0), (0.0, 0.7935)),
        # no parseable gold anywhere: nothing to score, so no accuracy and no interval (it used to be 0 [0, 0])
        ([None, None], [0, 1], (None, 0, 0, 0), None),
        ([], [], (None, 0, 0, 0), None),  # no problem at all
    ],
)
def test_accuracy_of_one_pick_per_problem(correct, picks, expected, interval):
    r = accuracy(correct, picks)
    assert (r["accuracy"], r["correct"], r["total"], r["abstained"]) == expected
    if interval is None:
        assert r["ci_low"] is None and r["ci_high"] is None
    else:
        assert (r["ci_low"], r["ci_high"]) == pytest.approx(interval, abs=1e-4)


def test_accuracy_table_shows_an_undefined_accuracy_as_a_dash():
    rows = format_accuracy_table({"pum": accuracy([[False]], [0]), "majority": accuracy([None], [0])}).splitlines()
    assert rows[2].split() == ["pum", "0.000", "[0.000,", "0.793]", "0/1", "0"]  # a measured 0
    assert rows[3].split() == ["majority", MISSING, "0/0", "0"]  # nothing scored: "–", never 0.000


# ----------------------------------------------------------------------------------------------------------
# Settings
# ----------------------------------------------------------------------------------------------------------


def test_scorer_registry_keeps_its_names_and_order():
    assert SCORERS == (
        "pum", "picsar", "majority", "random", "picsar_reasoning", "picsar_answer", "pum_min", "pum_last", "pum_mean",
        "mean_logprob", "self_certainty",
    )  # fmt: skip
    passes = {s: pass_of(s) for s in SCORERS}
    assert passes == {"pum": "pum", "picsar": "picsar", "majority": None, "random": None,
                      "picsar_reasoning": "picsar", "picsar_answer": "picsar",
                      "pum_min": "pum_steps", "pum_last": "pum_steps", "pum_mean": "pum_steps",
                      "mean_logprob": "mean_logprob", "self_certainty": "certainty"}  # fmt: skip
    with pytest.raises(ValueError, match="unknown scorer 'oracle'"):
        pass_of("oracle")


def test_select_config_parses_and_validates_the_scorer_list():
    assert SelectConfig(scorer=" pum, majority ,", pum="x").scorers == ["pum", "majority"]
    with pytest.raises(ValueError, match="unknown scorer"):
        SelectConfig(scorer="oracle")
    with pytest.raises(ValueError, match="--pum PATH"):
        SelectConfig(scorer="pum")
    with pytest.raises(ValueError, match="--n must be >= 1"):
        SelectConfig(scorer="random", n=0)
    with pytest.raises(ValueError, match="--scorer is empty"):
        SelectConfig(scorer=",")
    with pytest.raises(ValueError, match="--batch-size"):
        SelectConfig(scorer="random", batch_size=0)


def test_select_config_validates_the_new_scorers_and_fields():
    config = SelectConfig(scorer="picsar_answer,pum_mean", pum="x", picsar_evaluator="gemma3-270m", greedy=True)
    assert config.scorers == ["picsar_answer", "pum_mean"]
    assert (config.settings()["picsar_evaluator"], config.settings()["greedy"]) == ("gemma3-270m", True)
    assert SelectConfig(scorer="random").settings()["picsar_evaluator"] is None  # default: the policy evaluates
    for scorer in ("pum_min", "pum_last", "pum_mean", "majority,pum_last"):
        with pytest.raises(ValueError, match=r"needs --pum PATH \(a train_pum.py output directory\)"):
            SelectConfig(scorer=scorer)
    with pytest.raises(ValueError, match=r"--picsar-evaluator gemma3-270m is only used by the PiCSAR scorers; add one "
                                         r"of picsar, picsar_reasoning, picsar_answer"):  # fmt: skip
        SelectConfig(scorer="majority", picsar_evaluator="gemma3-270m")
    with pytest.raises(ValueError, match="--picsar-evaluator is empty; give a model name or path"):
        SelectConfig(scorer="picsar", picsar_evaluator="  ")
    with pytest.raises(ValueError, match=r"--scorer names \['picsar'\] more than once; give each scorer once"):
        SelectConfig(scorer="picsar,random,picsar")
    with pytest.raises(ValueError, match="unknown scorer.*pum_max"):
        SelectConfig(scorer="pum_max")


def test_select_config_picsar_input_settings():
    settings = SelectConfig(scorer="random").settings()  # the defaults are PiCSARScorer's, recorded in run.json
    assert (settings["picsar_instruction"], settings["picsar_separator"], settings["picsar_join_space"]) == (
        DEFAULT_INSTRUCTION, DEFAULT_SEPARATOR, False,
    )  # fmt: skip
    organism = SelectConfig(scorer="picsar_answer", picsar_instruction="", picsar_separator="\n\nThe answer is ",
                            picsar_join_space=True)  # fmt: skip
    assert organism.settings()["picsar_instruction"] == ""
    for changed, flag in (({"picsar_instruction": ""}, "--picsar-instruction"),
                          ({"picsar_separator": "The answer is "}, "--picsar-separator"),
                          ({"picsar_join_space": True}, "--picsar-join-space")):  # fmt: skip
        with pytest.raises(ValueError, match=f"{flag} only change the PiCSAR scorers; add one of picsar"):
            SelectConfig(scorer="majority,self_certainty", **changed)


def test_beam_config_validates_its_budgets_and_needs_a_pum():
    assert BeamConfig(pum="x").settings()["beams"] == 4
    with pytest.raises(ValueError, match="--expand"):
        BeamConfig(pum="x", expand=0)
    with pytest.raises(ValueError, match="--pum PATH"):
        BeamConfig()
    with pytest.raises(ValueError, match="--temperature"):
        BeamConfig(pum="x", temperature=0.0)


# ----------------------------------------------------------------------------------------------------------
# Score passes on tiny in-memory models (a fake Setup: no engine, no files)
# ----------------------------------------------------------------------------------------------------------

QUESTIONS = ["What is 2 plus 3?", "Tom has 4 apples and eats 1. How many are left?"]
TEXTS = [
    ["2 plus 3 is 5.\n\nThe answer is 5.", "I am not sure.", "Adding gives 6.\n\nThe answer is 6."],
    ["4 - 1 = 3.\n\nHe has 3 left.\n\nThe answer is 3.", "The answer is 2.", ""],
]


def _candidates(tokenizer, texts=TEXTS) -> Candidates:
    ids = [[list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in row] for row in texts]
    # hand-made sampler log-probs: token k of a completion has log-prob -(k + 1) / 10
    logps = [[[-(k + 1) / 10 for k in range(len(i))] for i in row] for row in ids]
    return Candidates(texts, ids, logps, [[extract_answer(t) for t in row] for row in texts])


def _setup(tokenizer, policy=None, engine=None, prompt_ids=None) -> Setup:
    rows = [
        {"prompt": f"Question: {q}\nAnswer:", "question": q, "problem_id": f"toy/{i}", "answer": a}
        for i, (q, a) in enumerate(zip(QUESTIONS, ["5", "3"], strict=True))
    ]
    return Setup(rows, engine, tokenizer, [2], prompt_ids or [], "cpu", "", _model=policy)


def _config(**kw) -> SelectConfig:
    return SelectConfig(**{"n": 3, "batch_size": 4, "device": "cpu", "no_progress": True, **kw})


def test_picsar_pass_writes_both_terms_from_one_pass_and_matches_the_scorer(tokenizer, tiny_llama, monkeypatch):
    c = _candidates(tokenizer)
    ctx = ScoringContext(_config(scorer="picsar_answer,picsar,picsar_reasoning"), _setup(tokenizer, tiny_llama), c)
    calls = []
    real = PiCSARScorer.score
    monkeypatch.setattr(PiCSARScorer, "score", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    picks, scores = score_candidates(ctx, ctx.config.scorers)
    assert len(calls) == len(QUESTIONS)  # one PiCSAR call per problem, shared by the three scorers
    assert list(picks) == ["picsar_answer", "picsar", "picsar_reasoning"]
    assert set(scores) == {"picsar", "picsar_reasoning", "picsar_answer"}
    reference = PiCSARScorer(model=tiny_llama, tokenizer=tokenizer)  # the answer term, called directly
    for p, row in enumerate(ctx.setup.dataset):
        for i, (text, answer) in enumerate(zip(c.texts[p], c.answers[p], strict=True)):
            if answer is None:  # no extractable answer: no PiCSAR score at all
                assert scores["picsar"][p][i] is scores["picsar_answer"][p][i] is scores["picsar_reasoning"][p][i]
                assert scores["picsar"][p][i] is None
                continue
            reasoning = -sum(range(1, len(c.ids[p][i]) + 1)) / 10  # the hand-made log-probs summed
            (answer_logps,) = reference.answer_logps([row["prompt"]], [text], [answer])
            assert scores["picsar_reasoning"][p][i] == pytest.approx(reasoning, abs=1e-9)
            assert scores["picsar_answer"][p][i] == pytest.approx(sum(answer_logps), abs=1e-4)
            assert scores["picsar"][p][i] == pytest.approx(reasoning + sum(answer_logps), abs=1e-4)
        for scorer in picks:
            assert picks[scorer][p] == select_argmax(scores[scorer][p])
    assert [None in row for row in scores["picsar"]] == [True, True]  # "I am not sure." and "" are never picked


def test_picsar_evaluator_changes_the_answer_term_only(tokenizer, tiny_llama, tiny_llama_factory, tmp_path):
    evaluator_dir = tmp_path / "evaluator"
    tiny_llama_factory(len(tokenizer), seed=5).save_pretrained(evaluator_dir)
    tokenizer.save_pretrained(evaluator_dir)
    c = _candidates(tokenizer)
    own = score_candidates(ScoringContext(_config(scorer="picsar"), _setup(tokenizer, tiny_llama), c), ["picsar"])[1]
    # with an evaluator the policy's model is never needed: a Setup without one (and without an engine) is enough
    config = _config(scorer="picsar_answer", picsar_evaluator=str(evaluator_dir))
    other = score_candidates(ScoringContext(config, _setup(tokenizer, None), c), ["picsar_answer"])[1]
    assert other["picsar_reasoning"] == own["picsar_reasoning"]  # the sampler's log-probs either way
    model, evaluator_tokenizer = load_evaluator(str(evaluator_dir), "cpu")
    reference = PiCSARScorer(tokenizer=tokenizer, evaluator=model, evaluator_tokenizer=evaluator_tokenizer)
    for p, row in enumerate(_setup(tokenizer).dataset):
        for i, answer in enumerate(c.answers[p]):
            if answer is None:
                assert other["picsar_answer"][p][i] is None
                continue
            (expected,) = reference.answer_logps([row["prompt"]], [c.texts[p][i]], [answer])
            assert other["picsar_answer"][p][i] == pytest.approx(sum(expected), abs=1e-4)
            assert other["picsar_answer"][p][i] != pytest.approx(own["picsar_answer"][p][i], abs=1e-3)


def test_picsar_pass_uses_the_instruction_separator_and_join_space(tokenizer, tiny_llama):
    c = _candidates(tokenizer)
    settings = {"picsar_instruction": "", "picsar_separator": "\nThe answer is ", "picsar_join_space": True}
    ctx = ScoringContext(_config(scorer="picsar_answer", **settings), _setup(tokenizer, tiny_llama), c)
    scores = score_candidates(ctx, ["picsar_answer"])[1]["picsar_answer"]
    reference = PiCSARScorer(model=tiny_llama, tokenizer=tokenizer, instruction="", separator="\nThe answer is ",
                             join_space=True)  # fmt: skip
    default = score_candidates(ScoringContext(_config(scorer="picsar"), _setup(tokenizer, tiny_llama), c), ["picsar"])
    for p, row in enumerate(ctx.setup.dataset):
        for i, answer in enumerate(c.answers[p]):
            if answer is None:
                assert scores[p][i] is None
                continue
            (expected,) = reference.answer_logps([row["prompt"]], [c.texts[p][i]], [answer])
            assert scores[p][i] == pytest.approx(sum(expected), abs=1e-4)
            assert scores[p][i] != pytest.approx(default[1]["picsar_answer"][p][i], abs=1e-3)  # the settings count


def _uniform_kl(logits) -> float:
    """KL(U || softmax(logits)) from its definition, sum_j (1/V) log((1/V) / p_j), in float64."""
    logp = torch.log_softmax(logits.double(), -1)
    return float(((-math.log(logp.numel()) - logp) / logp.numel()).sum())


def test_certainty_pass_by_hand_and_against_an_independent_forward(tokenizer, tiny_llama, monkeypatch):
    c = _candidates(tokenizer)
    prompt_ids = render_prompts(tokenizer, [f"Question: {q}\nAnswer:" for q in QUESTIONS])
    ctx = ScoringContext(_config(scorer="self_certainty,mean_logprob"), _setup(tokenizer, tiny_llama, None,
                                                                                prompt_ids), c)  # fmt: skip
    calls = []
    real = selection_scorers.sequence_self_certainty
    monkeypatch.setattr(selection_scorers, "sequence_self_certainty", lambda *a, **k: calls.append(1) or real(*a, **k))
    picks, scores = score_candidates(ctx, ctx.config.scorers)
    assert sorted(scores) == ["mean_logprob", "self_certainty"] and len(calls) == len(QUESTIONS)  # one forward each
    alone = ScoringContext(_config(scorer="mean_logprob"), ctx.setup, c)
    assert list(score_candidates(alone, ["mean_logprob"])[1]) == ["mean_logprob"]
    assert len(calls) == len(QUESTIONS)  # mean_logprob alone reads the sampler's log-probs: no forward pass
    for p, prompt in enumerate(prompt_ids):
        for i, ids in enumerate(c.ids[p]):
            if not ids:  # the empty completion: no token to average over
                assert scores["mean_logprob"][p][i] is None and scores["self_certainty"][p][i] is None
                continue
            # the hand-made log-probs -(k + 1) / 10, k < L, average to -(L + 1) / 20
            assert scores["mean_logprob"][p][i] == pytest.approx(-(len(ids) + 1) / 20, abs=1e-12)
            with torch.no_grad():  # prompt + completion alone, unpadded; positions len(prompt) - 1 ... predict ids
                logits = tiny_llama(torch.tensor([prompt + ids])).logits[0]
            want = [_uniform_kl(logits[t]) for t in range(len(prompt) - 1, len(prompt) + len(ids) - 1)]
            assert scores["self_certainty"][p][i] == pytest.approx(sum(want) / len(want), abs=1e-4)
        for scorer in picks:
            assert picks[scorer][p] == select_argmax(scores[scorer][p])
    # defined without an answer too ("I am not sure."), unlike PiCSAR
    assert c.answers[0][1] is None and scores["self_certainty"][0][1] is not None


def test_mean_is_none_without_values_or_when_not_finite():
    assert selection_scorers._mean([-1.0, -2.0]) == pytest.approx(-1.5)
    assert selection_scorers._mean([]) is None
    assert selection_scorers._mean([-math.inf, -1.0]) is None and selection_scorers._mean([math.inf]) is None


def test_pum_step_pass_aggregates_one_score_steps_pass(tokenizer, tiny_pum_factory, monkeypatch):
    long_text = "We add one more.\n\n" * 40 + "The answer is 5."
    texts = [[TEXTS[0][0], long_text, TEXTS[0][2]], TEXTS[1]]
    pum = PrefixUtilityModel(tiny_pum_factory(len(tokenizer), seed=1), tokenizer, max_length=160, batch_size=4)
    assert pum.render(QUESTIONS[0], long_text).truncated_tokens > 0  # does not fit: never scored
    assert all(pum.render(q, t).truncated_tokens == 0 for q, row in zip(QUESTIONS, TEXTS, strict=True) for t in row)
    loads, step_calls, full_calls = [], [], []
    monkeypatch.setattr(selection_scorers, "load_pum", lambda config: loads.append(1) or pum)
    real_steps, real_score = pum.score_steps, pum.score
    monkeypatch.setattr(pum, "score_steps", lambda *a, **k: step_calls.append(1) or real_steps(*a, **k))
    monkeypatch.setattr(pum, "score", lambda *a, **k: full_calls.append(1) or real_score(*a, **k))
    scorers = ["pum_min", "pum", "pum_last", "pum_mean"]
    ctx = ScoringContext(
        _config(scorer=",".join(scorers), pum="unused"), _setup(tokenizer), _candidates(tokenizer, texts)
    )
    picks, scores = score_candidates(ctx, scorers)
    assert (loads, step_calls, full_calls) == ([1], [1], [1])  # one PUM, one step pass for three scorers
    assert list(scores) == ["pum_min", "pum_last", "pum_mean", "pum"]
    for p, (question, row) in enumerate(zip(QUESTIONS, texts, strict=True)):
        for i, text in enumerate(row):
            if not text or text == long_text:  # no text, or longer than the PUM's budget: None, never NaN
                assert [scores[k][p][i] for k in scores] == [None] * 4
                continue
            (steps,) = real_steps([question], [text])  # U(x, p_k) of this completion alone
            assert len(steps) == text.count("\n\n") + 1 and all(math.isfinite(u) for u in steps)
            assert scores["pum_min"][p][i] == pytest.approx(min(steps), abs=1e-5)
            assert scores["pum_last"][p][i] == pytest.approx(steps[-1], abs=1e-5)
            assert scores["pum_mean"][p][i] == pytest.approx(sum(steps) / len(steps), abs=1e-5)
        for scorer in scorers:
            assert picks[scorer][p] == select_argmax(scores[scorer][p])


# ----------------------------------------------------------------------------------------------------------
# The greedy decodes and the samples in the sample store (a counting fake engine)
# ----------------------------------------------------------------------------------------------------------


class FakeEngine:
    """Returns `tokens_for(prompt, greedy)` for each prompt row and records every generate call."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def cache_key(self) -> str:
        return "fake-engine"

    def generate(self, prompts, params, seed=None):
        self.calls.append((len(prompts), params, seed))
        texts = {0: "The answer is 5.", 1: "The answer is 4."} if params.greedy else {0: "7", 1: "3"}
        out = []
        for prompt in prompts:
            ids = list(self.tokenizer(texts[prompt[0] - 10], add_special_tokens=False)["input_ids"])
            out.append(Rollout(ids, texts[prompt[0] - 10], [-0.5] * len(ids), "eos"))
        return out


def test_greedy_decodes_are_stored_apart_from_the_samples(tokenizer, tmp_path):
    engine = FakeEngine(tokenizer)
    s = _setup(tokenizer, engine=engine, prompt_ids=[[10, 5, 6], [11, 7]])
    assert store_dir(tmp_path) == tmp_path / "cache"
    config = _config(scorer="random", n=2, batch_size=1, max_new_tokens=7, greedy=True, output_dir=str(tmp_path))
    ids, stats = _greedy(config, s)
    assert stats.generated_rows == 2 and len(stats.files) == 2  # batch_size 1: one shard (one call) per problem
    assert all(f.startswith(str(tmp_path / "cache" / "rollouts-")) for f in stats.files)
    # one call per run of batch_size rows, seeded as before the store: derive_seed(0, "select-greedy", call)
    assert [(n, p.temperature, p.max_new_tokens, seed) for n, p, seed in engine.calls] == [
        (1, 0.0, 7, derive_seed(0, "select-greedy", 0)),
        (1, 0.0, 7, derive_seed(0, "select-greedy", 1)),
    ]
    entries = _greedy_entries(s, ids)
    assert entries == [
        {"text": "The answer is 5.", "extracted": "5", "correct": True},
        {"text": "The answer is 4.", "extracted": "4", "correct": False},
    ]
    engine.calls.clear()
    # another n, temperature, top-p or seed: the same greedy decodes, read back
    again = _config(scorer="random", n=5, batch_size=1, max_new_tokens=7, temperature=0.9, top_p=0.8, seed=3,
                    output_dir=str(tmp_path))  # fmt: skip
    ids_again, stats = _greedy(again, s)
    assert ids_again == ids and stats.generated_rows == 0 and engine.calls == []
    shorter = _config(scorer="random", n=2, batch_size=1, max_new_tokens=5, output_dir=str(tmp_path))
    assert _greedy(shorter, s)[1].generated_rows == 2 and len(engine.calls) == 2  # another budget: decoded again


def test_the_samples_key_ignores_greedy_and_the_picsar_evaluator(tokenizer, tmp_path):
    engine = FakeEngine(tokenizer)
    s = _setup(tokenizer, engine=engine, prompt_ids=[[10, 5, 6], [11, 7]])
    plain = _config(scorer="picsar", n=2, max_new_tokens=7, output_dir=str(tmp_path))
    ids, logps, stats = _sample(plain, s)
    assert stats.generated_rows == 4 and len(ids) == 4 and [len(lp) for lp in logps] == [len(i) for i in ids]
    # batch_size 4: the 4 rows (problem-major) in one call, seeded derive_seed(seed, "select", 0)
    assert [(n, p.temperature, seed) for n, p, seed in engine.calls] == [(4, 0.7, derive_seed(0, "select", 0))]
    assert ids[:2] == [tokenizer("7", add_special_tokens=False)["input_ids"]] * 2
    extended = _config(scorer="picsar", n=2, max_new_tokens=7, greedy=True, picsar_evaluator="gemma3-270m",
                       output_dir=str(tmp_path))  # fmt: skip
    assert _sample(extended, s)[:2] == (ids, logps) and len(engine.calls) == 1  # same output dir: the same store
    elsewhere = _config(scorer="picsar", n=2, max_new_tokens=7, output_dir=str(tmp_path / "sub"))
    assert _sample(elsewhere, s)[2].generated_rows == 4 and len(engine.calls) == 2  # another store: sampled
    reseeded = _config(scorer="picsar", n=2, max_new_tokens=7, seed=1, output_dir=str(tmp_path))
    assert _sample(reseeded, s)[2].generated_rows == 4 and engine.calls[-1][2] == derive_seed(1, "select", 0)
