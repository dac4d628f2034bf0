"""train_grpo.py options (`procrl.scripts.train_grpo`, settings in `procrl.trainers.tasks`): `answer_extraction` (one
mode per run, visible in the reward's name, refused when unknown), the reward registry, import paths of a user's own
rewards and step scorers, the step scorer against `advantage_mode`, and the StepGap format penalty."""

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from procrl.rewards.outcome import outcome_reward
from procrl.rewards.qa import em_reward
from procrl.scripts.train_grpo import main, make_parser, parse_args
from procrl.trainers.tasks.arguments import TASKS, GRPOScriptArguments
from procrl.trainers.tasks.job import JOB_ARGUMENTS, GRPOJob, make_rewards
from procrl.trainers.tasks.rewards import REWARDS

DEMO = Path(__file__).resolve().parents[2] / "configs" / "grpo" / "svamp_smollm2_picsar.yaml"


def _reward_names(tmp_path, *flags):
    job = parse_args(["--config", str(DEMO), "--output_dir", str(tmp_path), *flags])
    funcs, _, _ = make_rewards(job)
    return job.script.answer_extraction, funcs


def test_the_demo_is_strict_and_uses_the_plain_outcome_reward(tmp_path):
    mode, funcs = _reward_names(tmp_path)
    assert mode == "strict" and funcs[0] is outcome_reward  # the name users know: outcome_reward


def test_flexible_mode_renames_the_reward(tmp_path):
    mode, funcs = _reward_names(tmp_path, "--answer_extraction", "flexible")
    assert mode == "flexible" and funcs[0].__name__ == "outcome_reward_flexible"
    # the mode changes what is paid: no marker, a number at the end of the last sentence
    assert funcs[0](completions=["The total is $9{,}500$."], answer=["9500"]) == [1.0]
    assert outcome_reward(completions=["The total is $9{,}500$."], answer=["9500"]) == [0.0]


def test_unknown_mode_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="answer_extraction: strict"):
        GRPOScriptArguments(answer_extraction="lenient")


def test_flexible_mode_is_refused_with_task_search():
    # task=search pays EM on normalised answer strings: answer_extraction would be ignored yet recorded in run.json
    search = {"task": "search", "dataset_name": "2wiki_dev_sample", "reward_funcs": ["em"]}
    with pytest.raises(ValueError, match="answer_extraction='flexible' has no effect with task=search") as info:
        GRPOScriptArguments(**search, answer_extraction="flexible")
    assert "answer_extraction: strict" in str(info.value)  # the message says how to fix it
    assert GRPOScriptArguments(**search).answer_extraction == "strict"  # the default is accepted


# --------------------------------------------------------------------------------------------------------------------
# The reward registry, the task configs and the parse-time reward weights
# --------------------------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs" / "grpo").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.stem)
def test_every_shipped_config_parses(config, tmp_path):
    job = parse_args(["--config", str(config), "--output_dir", str(tmp_path)])
    assert job.script.task in TASKS and job.script.reward_funcs
    assert all(name in REWARDS and REWARDS[name].task == job.script.task for name in job.script.reward_funcs)


def test_the_step_scorer_has_its_own_setting_and_no_weight(tmp_path):
    config = ROOT / "configs" / "grpo" / "svamp_smollm2_pum_steps.yaml"
    job = parse_args(["--config", str(config), "--output_dir", str(tmp_path), "--pum_model", str(tmp_path)])
    assert job.script.reward_funcs == ["outcome"] and job.script.step_reward_func == "pum"
    assert job.training.advantage_mode == "mixed" and job.training.reward_weights == [1.0]  # as given: one per reward
    with pytest.raises(ValueError, match="'pum' is both in reward_funcs and step_reward_func"):
        parse_args(["--config", str(config), "--output_dir", str(tmp_path), "--reward_funcs", "outcome", "pum",
                    "--reward_weights", "1.0", "0.5"])  # fmt: skip
    with pytest.raises(ValueError, match="step_reward_func='outcome' is not a step scorer of task=math"):
        GRPOScriptArguments(step_reward_func="outcome")


def test_the_step_scorer_and_advantage_mode_go_together(tmp_path):
    base = ["--config", str(DEMO), "--output_dir", str(tmp_path)]
    needs = "advantage_mode='process' needs a step scorer: set step_reward_func \\(pum or oracle,"
    with pytest.raises(ValueError, match=needs):
        parse_args([*base, "--advantage_mode", "process"])
    with pytest.raises(ValueError, match="step_reward_func='pum' is used only with advantage_mode process or mixed"):
        parse_args([*base, "--step_reward_func", "pum", "--pum_model", str(tmp_path)])
    with pytest.raises(ValueError, match=r"the PUM rewards \['pum'\] need a Prefix Utility Model: set pum_model"):
        parse_args([*base, "--step_reward_func", "pum", "--advantage_mode", "mixed"])


def test_import_paths_are_user_reward_functions(tmp_path):
    for path in ("procrl.rewards.qa:em_reward", "procrl.rewards.qa.em_reward"):
        job = parse_args(["--config", str(DEMO), "--output_dir", str(tmp_path), "--reward_funcs", "outcome", path])
        funcs, weights, step_scorer = make_rewards(job)
        assert funcs == [outcome_reward, em_reward] and weights == [1.0, 0.1] and step_scorer is None


def test_an_import_path_that_does_not_resolve_is_refused_at_parse_time(tmp_path, capsys):
    base = ["--config", str(DEMO), "--output_dir", str(tmp_path)]
    cases = [
        (["--reward_funcs", "no_such_pkg.mod:reward"],
         r"reward_funcs: cannot import 'no_such_pkg.mod:reward' \(ModuleNotFoundError: No module named 'no_such_pkg'\)"),
        (["--reward_funcs", "procrl.rewards.qa:no_such_reward"],
         r"reward_funcs: cannot import 'procrl.rewards.qa:no_such_reward' \(AttributeError: .*'no_such_reward'"),
        (["--reward_funcs", "math:pi"], r"reward_funcs: 'math:pi' is a float, not a callable"),
        (["--step_reward_func", "no_such_pkg:scorer", "--advantage_mode", "process"],
         r"step_reward_func: cannot import 'no_such_pkg:scorer' \(ModuleNotFoundError: No module named 'no_such_pkg'\)"),
    ]  # fmt: skip
    for flags, message in cases:
        with pytest.raises(ValueError, match=message):
            parse_args([*base, *flags])
    assert main([*base, "--reward_funcs", "no_such_pkg.mod:reward"]) == 2  # one error line, no traceback
    assert "train_grpo.py: error: reward_funcs: cannot import 'no_such_pkg.mod:reward'" in capsys.readouterr().err


def test_reward_names_are_checked_against_the_task():
    with pytest.raises(ValueError, match=r"task=math cannot use the search rewards \['em'\]: use task: search"):
        GRPOScriptArguments(reward_funcs=["outcome", "em"])
    with pytest.raises(ValueError, match="unknown reward function 'bogus': use one of"):
        GRPOScriptArguments(reward_funcs=["outcome", "bogus"])
    with pytest.raises(ValueError, match=r"reward_funcs is empty: give at least one, e.g. \[outcome\]"):
        GRPOScriptArguments(reward_funcs=[])


def test_reward_weights_must_match_reward_funcs_at_parse_time(tmp_path):
    with pytest.raises(ValueError, match=r"reward_weights \[1.0\] must have one weight per reward_funcs entry"):
        parse_args(["--config", str(DEMO), "--output_dir", str(tmp_path), "--reward_weights", "1.0"])


def test_the_parser_returns_the_job_dataclasses_in_field_order(tmp_path):
    parsed = make_parser().parse_args_and_config(["--config", str(DEMO), "--output_dir", str(tmp_path)])
    assert [type(x) for x in parsed] == list(JOB_ARGUMENTS)
    job = GRPOJob(*parsed)
    assert [type(getattr(job, f.name)) for f in fields(GRPOJob)] == list(JOB_ARGUMENTS)


def test_main_reports_a_bad_setting_in_one_line(capsys):
    assert main(["--config", str(DEMO), "--task", "chess"]) == 2
    assert "train_grpo.py: error: task='chess' must be one of ('math', 'search')" in capsys.readouterr().err


def test_the_task_modules_do_not_import_each_other():
    tasks = ROOT / "trainers" / "tasks"
    for own, other in (("math", "search"), ("search", "math")):
        tree = ast.parse((tasks / f"{own}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert f"procrl.trainers.tasks.{other}" not in imported, f"tasks/{own}.py imports tasks/{other}.py"


def test_format_penalty_is_a_script_option():
    config = str(Path(__file__).resolve().parents[2] / "configs" / "grpo" / "stepgap_2wiki_smollm2.yaml")
    assert parse_args(["--config", config]).search.stepgap_format_penalty == -0.10
    assert parse_args(["--config", config, "--stepgap_format_penalty", "-0.3"]).search.stepgap_format_penalty == -0.3
    with pytest.raises(ValueError, match="stepgap_format_penalty"):
        parse_args(["--config", config, "--stepgap_format_penalty", "0.1"])
