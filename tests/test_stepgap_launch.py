"""StepGap GRPO wiring (`task: search`, procrl.trainers.tasks.search), its configs and launch/grpo_stepgap.sh.

The training test runs `procrl.scripts.train_grpo` for one step on a tiny random Llama with a scripted policy (it searches
once, then answers), the builtin bm25s index, a scripted judge and a scripted NLI (no server), and checks the
logged StepGap metrics against values computed by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from procrl.data_builders.search_qa import load_qa_questions
from procrl.data_builders.synthetic_world import SyntheticWorldConfig, build_worlds, world_paths, write_worlds
from procrl.generation import GenerationOutput
from procrl.judges import Judge, JudgeResult, parse_judgement
from procrl.retrieval import format_passages
from procrl.rewards.qa import em_reward
from procrl.rewards.stepgap.nli_rule import NLIThresholds
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.rewards.stepgap.reward import StepGapReward, StepGapStepRewards
from procrl.scripts.train_grpo import parse_args
from procrl.trainers.tasks.job import make_rewards, run_grpo_job
from procrl.trainers.tasks.search import open_search_task

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs" / "grpo"
MAIN_CONFIG = CONFIGS / "stepgap_2wiki_smollm2.yaml"
SCRIPT = ROOT / "launch" / "grpo_stepgap.sh"

# The judge's A-C reply for every step: on target, no abstention, evidence about the right entity, no quote.
REPLY = json.dumps(
    {
        "off_target": False,
        "abstains": False,
        "abstention_accurate": False,
        "entity_match": True,
        "quote": "",
        "entity": "",
    }
)


class ScriptedJudge(Judge):
    def __init__(self):
        super().__init__(name="scripted")
        self.requests = 0

    def _request_payload(self, messages, schema):
        return {"messages": messages, "schema": schema.__name__}

    async def _judge_uncached(self, requests, schemas, finish):
        for j, _ in enumerate(requests):
            self.requests += 1
            value, reason = parse_judgement(REPLY, schemas[j])
            finish(j, JudgeResult(value=value, unscored=reason, raw=REPLY, attempts=1))


class GoldNLI:
    """Entailment when the hypothesis names the gold answer, else contradiction."""

    def __init__(self, gold: str):
        self.gold = gold

    def predict(self, pairs):
        return ["entailment" if self.gold in hypothesis else "contradiction" for _, hypothesis in pairs]


@pytest.fixture()
def fakes(monkeypatch, smollm2_tokenizer):
    """Scripted judge (records open/close), NLI and policy; returns the record."""
    question = load_qa_questions("2wiki_dev_sample", end=1)[0]
    gold = question["golden_answers"][0]
    record = {"opened": [], "closed": 0, "judge": ScriptedJudge()}

    @contextlib.contextmanager
    def fake_open_judge(spec, **kwargs):
        record["opened"].append((spec, kwargs))
        try:
            yield record["judge"]
        finally:
            record["closed"] += 1

    # patched where they are looked up (the judge: by JudgeArguments.open, the search task's one way to open it)
    monkeypatch.setattr("procrl.judges.spec.open_judge", fake_open_judge)
    monkeypatch.setattr("procrl.trainers.tasks.search.make_nli", lambda spec, judge, **kw: GoldNLI(gold))

    tok = smollm2_tokenizer

    def fake_generate(model, prompt_ids, generation_config, *, pad_token_id, eos_ids, **kwargs):
        """Turn 1: search the question; turn 2: even rows answer the gold, odd rows a wrong name."""
        outs = []
        for row, ids in enumerate(prompt_ids):
            text = tok.decode(ids).rsplit("Question:", 1)[-1]  # this episode only (the prompt holds a worked one)
            if "Doc 1 (Title:" not in text:
                turn = f"<think>I need to look this up.</think>\n<search> {question['question']} </search>"
            else:
                turn = f"<answer> {gold if row % 2 == 0 else 'Nobody Inparticular'} </answer>"
            outs.append(tok(turn, add_special_tokens=False)["input_ids"][: generation_config.max_new_tokens])
        logps = [[-1.0] * len(o) for o in outs]
        return GenerationOutput(outs, logps, logps)

    monkeypatch.setattr("procrl.trainers.search_env.generate_completions", fake_generate)  # the episodes' generation
    return record


def _argv(model_dir, out_dir, *extra):
    return [
        "--config", str(MAIN_CONFIG), "--model_name_or_path", str(model_dir), "--output_dir", str(out_dir),
        "--dataset_end", "1", "--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "2",
        "--max_completion_length", "400", "--search_topk", "1", "--report_to", "none", *extra,
    ]  # fmt: skip


@pytest.mark.slow  # trains
def test_one_step_logs_stepgap_metrics(tmp_path, tiny_model_dir, fakes):
    result = run_grpo_job(parse_args(_argv(tiny_model_dir, tmp_path / "out")))
    summary = result.summary
    assert fakes["closed"] == 1 and fakes["opened"][0][0] == "local"  # the judge was opened once and closed
    kwargs = fakes["opened"][0][1]
    assert kwargs["num_threads"] == 1 and kwargs["max_tokens"] == 512
    assert "continuous_batching" not in kwargs  # a transformers serve setting; "local" is vLLM, which always batches
    assert kwargs["cache_dir"] == str(tmp_path / "out" / "judge_cache")
    assert fakes["judge"].requests == 4  # A-C for 2 completions x 2 steps (search, answer)
    assert summary["task"] == "search" and summary["before"] == [] and summary["after"] == []
    assert summary["train"]["reward_funcs"] == ["em_reward", "stepgap_reward"]
    assert summary["search"]["judge_stats"]["requests"] == 4
    logs = next(h for h in summary["log_history"] if "stepgap/label_IE" in h)
    # Row 0 answers the gold, row 1 a wrong name. Search step: claim, no evidence yet -> C: IE (both rows).
    # Answer step: no quote -> E: NLI(all evidence => "The answer is X.") -> entailment (gold) NONE, else IE.
    # Labels IE, NONE | IE, IE -> IE 3/4, NONE 1/4.
    assert logs["stepgap/label_IE"] == pytest.approx(0.75)
    assert logs["stepgap/label_NONE"] == pytest.approx(0.25)
    assert logs["stepgap/label_CC"] == logs["stepgap/label_MB"] == logs["stepgap/label_ERROR"] == 0.0
    assert logs["stepgap/searches_per_completion"] == pytest.approx(1.0)
    assert logs["stepgap/format_violation_frac"] == 0.0
    # EM 1, 0 -> 0.5; task/accuracy is EM too.
    assert logs["rewards/em_reward/mean"] == pytest.approx(0.5) and logs["task/accuracy"] == pytest.approx(0.5)
    # R = EM + base(IE) + ignored-gap shaping (the answer after IE is no new search) + base(last):
    # row 0: 1 - 0.10 - 0.10 + 0.20 = 1.00; row 1: 0 - 0.10 - 0.10 - 0.10 = -0.30; mean 0.35.
    assert logs["rewards/stepgap_reward/mean"] == pytest.approx(0.35)
    assert result.files["curves"] == str(tmp_path / "out" / "curves.png")
    assert (tmp_path / "out" / "curves.png").is_file() and not (tmp_path / "out" / "summary.json").exists()


def test_judge_closed_when_training_fails(tmp_path, tiny_model_dir, fakes, monkeypatch):
    def boom(self, *args, **kwargs):
        raise RuntimeError("training failed")

    monkeypatch.setattr("procrl.trainers.grpo.ProcessGRPOTrainer.train", boom)
    with pytest.raises(RuntimeError, match="training failed"):
        run_grpo_job(parse_args(_argv(tiny_model_dir, tmp_path / "out")))
    assert fakes["closed"] == 1


def _task(argv):
    job = parse_args(argv)
    return open_search_task(job.script, job.search, output_dir=job.training.output_dir), job


@pytest.mark.parametrize(
    ("config", "base_cc", "shaping"),
    [("stepgap_2wiki_smollm2", 0.05, True), ("stepgap_2wiki_smollm2_zero_cc", 0.0, True),
     ("stepgap_2wiki_smollm2_no_shaping", 0.05, False)],
)  # fmt: skip
def test_configs_and_controls(config, base_cc, shaping, fakes, tmp_path):
    ctx, job = _task(["--config", str(CONFIGS / f"{config}.yaml"), "--output_dir", str(tmp_path)])
    with ctx as task:
        em, stepgap = make_rewards(job, task).funcs
        assert em is em_reward and isinstance(stepgap, StepGapReward)
        assert stepgap.config.base_cc == base_cc and stepgap.config.shaping is shaping and stepgap.config.lam == 1.0
        assert task.outcome_func is em_reward and task.rollout_func.env.topk == 3
        assert len(task.train_dataset) == 200 and job.training.reward_weights == [0.0, 1.0]


def test_quote_and_nli_settings_reach_the_verifier(fakes, tmp_path):
    ctx, _ = _task(["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path)])
    with ctx as task:  # defaults: candidate-span quotes, NLI argmax
        assert task.verifier.constrain_quotes is True
        assert task.verifier.nli_thresholds == NLIThresholds(entail_min=None, contradict_min=None)
    spec, kwargs = fakes["opened"][-1]
    assert spec == "local" and kwargs["num_threads"] == 1 and "continuous_batching" not in kwargs
    argv = ["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path), "--stepgap_nli_entail_min", "0.8",
            "--stepgap_nli_contradict_min", "0.5", "--stepgap_constrain_quotes", "false",
            "--judge", "serve:transformers", "--judge_continuous_batching", "false"]  # fmt: skip
    ctx, _ = _task(argv)
    with ctx as task:
        assert task.verifier.constrain_quotes is False
        assert task.verifier.nli_thresholds == NLIThresholds(entail_min=0.8, contradict_min=0.5)
    spec, kwargs = fakes["opened"][-1]
    assert spec == "serve:transformers" and kwargs["continuous_batching"] is False and kwargs["num_threads"] == 1
    ctx, _ = _task(["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path), "--stepgap_nli_entail_min", "1.0"])
    with ctx as task:  # 1 is a valid threshold; contradiction stays on the argmax
        assert task.verifier.nli_thresholds == NLIThresholds(entail_min=1.0, contradict_min=None)


@pytest.mark.parametrize(("flag", "value"), [("--stepgap_nli_entail_min", "0"), ("--stepgap_nli_entail_min", "1.5"),
                                             ("--stepgap_nli_contradict_min", "-0.2")])  # fmt: skip
def test_nli_thresholds_outside_0_1_are_refused_at_parse_time(flag, value, tmp_path):
    with pytest.raises(ValueError, match=f"{flag[2:]}=.* must be a probability in \\(0, 1\\]"):
        parse_args(["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path), flag, value])


def test_process_mode_uses_step_rewards(fakes, tmp_path):
    argv = ["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path), "--advantage_mode", "mixed",
            "--reward_funcs", "em", "--reward_weights", "1.0", "--step_reward_func", "stepgap",
            "--stepgap_lambda", "0.5"]  # fmt: skip
    ctx, job = _task(argv)
    with ctx as task:
        rewards = make_rewards(job, task)
        assert rewards.funcs == [em_reward] and rewards.weights == [1.0]
        step = rewards.step_reward_func
        assert isinstance(step, StepGapStepRewards) and step.config.lam == 0.5 and step.verifier is task.verifier


@pytest.mark.parametrize(
    ("judge", "message"),
    [("none", "task=search needs a judge"), ("oracle", "judge: oracle labels StepGap steps from a generated world")],
)
def test_the_search_task_needs_a_judge(fakes, tmp_path, judge, message):
    ctx, _ = _task(["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path), "--judge", judge])
    with pytest.raises(ValueError, match=message):
        with ctx:
            pass
    assert fakes["opened"] == []


def test_judge_oracle_labels_a_generated_world_with_its_oracle(fakes, tmp_path):
    config = SyntheticWorldConfig(n_train=6, n_dev=2, n_test=2, hops=[2])
    write_worlds(build_worlds(config), config, tmp_path / "world")
    questions, corpus = world_paths(tmp_path / "world", "train")
    argv = ["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path / "out"), "--judge", "oracle",
            "--dataset_name", str(questions), "--dataset_end", "6", "--retriever", str(corpus)]  # fmt: skip
    ctx, job = _task(argv)
    with ctx as task:
        assert isinstance(task.verifier, StepGapOracle) and task.judge is None and len(task.train_dataset) == 6
        passages = len(corpus.read_text().splitlines())
        assert task.summary()["verifier"] == f"StepGapOracle(6 questions, {passages} passages)"
        _, stepgap = make_rewards(job, task).funcs
        assert isinstance(stepgap, StepGapReward) and stepgap.verifier is task.verifier
        row = task.train_dataset[0]
        (s, r, o), (_, r2, answer) = json.loads(questions.read_text().splitlines()[0])["evidences"]
        passage = next(p for p in task.retriever.passages if p.title == s)
        completion = (f"<search> {r} of {s} </search>\n<information>{format_passages([passage])}</information>\n"
                      f"<search> {r2} of {o} </search>\n<information></information>\n<answer> {answer} </answer>")  # fmt: skip
        # search (NONE: a plan), search naming the bridge (NONE: stated), answer (MB: the bridge's passage unread)
        assert stepgap([row["prompt"]], [completion], golden_answers=[row["golden_answers"]]) == [
            pytest.approx(1.0 + 0.20 + 0.20 - 0.05)
        ]
    assert fakes["opened"] == []  # no judge was opened


def test_the_world_config_opens_on_a_written_world(fakes, tmp_path):
    config = SyntheticWorldConfig(n_train=6, n_dev=2, n_test=2, hops=[2])
    write_worlds(build_worlds(config), config, tmp_path / "world")
    questions, corpus = world_paths(tmp_path / "world", "train")
    argv = ["--config", str(CONFIGS / "stepgap_world_organism.yaml"), "--output_dir", str(tmp_path / "out"),
            "--dataset_name", str(questions), "--retriever", str(corpus)]  # fmt: skip
    ctx, job = _task(argv)
    with ctx as task:  # dataset_end null: every question there is
        assert isinstance(task.verifier, StepGapOracle) and len(task.train_dataset) == 6
        em, stepgap = make_rewards(job, task).funcs
        assert em is em_reward and isinstance(stepgap, StepGapReward) and stepgap.config.shaping is True
        assert task.rollout_func.env.topk == 3 and job.training.generation_backend == "transformers"
    assert fakes["opened"] == []


def test_the_smollm2_world_config_is_the_organisms_in_micro_batches(tmp_path):
    pytest.importorskip("vllm", reason="generation_backend: vllm needs vLLM")
    common = ["--output_dir", str(tmp_path)]
    organism = parse_args(["--config", str(CONFIGS / "stepgap_world_organism.yaml"), *common])
    job = parse_args(["--config", str(CONFIGS / "stepgap_world_smollm2.yaml"), *common])
    t, o = job.training, organism.training
    # the same 2 questions x 8 episodes per optimizer step, as 8 micro-batches of 2 (the organism's one batch of 16
    # was killed for memory with SmolLM2's head)
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (2, 8)
    assert t.generation_batch_size == o.generation_batch_size == 16 and t.num_generations == o.num_generations == 8
    assert t.generation_backend == "vllm" and t.use_vllm and t.learning_rate == 1e-6
    assert job.search == organism.search and job.script == organism.script  # the world, the oracle, the reward


def test_bad_search_settings():
    with pytest.raises(ValueError, match="dataset_name: 2wiki_dev_sample"):
        parse_args(["--config", str(MAIN_CONFIG), "--dataset_name", "svamp"])
    with pytest.raises(ValueError, match="reward_funcs: \\[em, stepgap\\]"):
        parse_args(["--config", str(MAIN_CONFIG), "--reward_funcs", "outcome", "em"])
    with pytest.raises(ValueError, match="task="):
        parse_args(["--config", str(MAIN_CONFIG), "--task", "chess"])


def test_process_mode_needs_stepgap(tmp_path):
    # refused when the settings are parsed, before a model, the questions or the judge load
    with pytest.raises(ValueError, match=r"needs a step scorer: set step_reward_func \(stepgap,"):
        parse_args(["--config", str(MAIN_CONFIG), "--output_dir", str(tmp_path), "--advantage_mode", "process",
                    "--reward_funcs", "em", "--reward_weights", "1.0"])  # fmt: skip


def _script(**env):
    full = {**os.environ, "PYTHON": "/bin/echo", **env}  # echo prints the command the script would run
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=30)


@pytest.mark.slow  # subprocess
def test_launch_script_variables():
    assert os.access(SCRIPT, os.X_OK) and "set -euo pipefail" in SCRIPT.read_text()
    out = _script().stdout.split()
    assert out[:3] == ["train_grpo.py", "--config", "configs/grpo/stepgap_2wiki_smollm2.yaml"]
    assert "--stepgap_shaping" not in out and "--stepgap_lambda" not in out  # empty -> the config's values
    assert out[out.index("--judge") + 1] == "local" and out[out.index("--retriever") + 1] == "2wiki_corpus_sample"
    out = _script(LAMBDA="0.5", SHAPING="off", JUDGE="http://127.0.0.1:9/v1", MODEL="m").stdout.split()
    assert out[out.index("--stepgap_lambda") + 1] == "0.5" and out[out.index("--stepgap_shaping") + 1] == "false"
    assert (
        out[out.index("--judge") + 1] == "http://127.0.0.1:9/v1" and out[out.index("--model_name_or_path") + 1] == "m"
    )
    bad = _script(SHAPING="maybe")
    assert bad.returncode == 2 and "SHAPING must be on or off" in bad.stderr


@pytest.mark.slow  # subprocess
def test_launch_script_world_variable(tmp_path):
    missing = _script(WORLD=str(tmp_path / "none"))
    assert missing.returncode == 2 and "procrl world episodes --out" in missing.stderr
    (tmp_path / "w" / "train").mkdir(parents=True)
    (tmp_path / "w" / "train" / "questions.jsonl").write_text("")
    out = _script(WORLD=str(tmp_path / "w"), MODEL="ckpt").stdout.split()
    value = {flag: out[out.index(flag) + 1] for flag in ("--config", "--judge", "--retriever", "--dataset_name",
                                                         "--model_name_or_path")}  # fmt: skip
    assert value == {"--config": "configs/grpo/stepgap_world_organism.yaml", "--judge": "oracle",
                     "--retriever": f"{tmp_path}/w/train/corpus.jsonl",
                     "--dataset_name": f"{tmp_path}/w/train/questions.jsonl", "--model_name_or_path": "ckpt"}  # fmt: skip
    out = _script(WORLD=str(tmp_path / "w"), JUDGE="local").stdout.split()  # the learned verifier: the judge kept
    assert out[out.index("--judge") + 1] == "local"


def test_unknown_search_prompt_template_is_refused_at_parse_time(tmp_path):
    with pytest.raises(ValueError, match="search_one_shot"):
        parse_args(["--config", str(MAIN_CONFIG), "--prompt_template", "search_oneshot", "--output_dir", str(tmp_path)])
