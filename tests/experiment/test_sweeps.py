"""procrl.experiment.sweeps and procrl.experiment.sweep_command: sweep files in wandb's format expanded offline (order, names, seeded
random draws, validation) and the agent's command line, compared with wandb's own implementation."""

from __future__ import annotations

import hashlib
import math

import pytest
from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

from procrl.experiment.sweep_command import FORMS, build_argv, command_args
from procrl.experiment.sweeps import expand, parse_sweep, variant_name


def _sweep(parameters, **top):
    return parse_sweep({"program": "train.py", "method": "grid", "parameters": parameters, **top}, "tiny")


def test_grid_is_the_cartesian_product_in_file_order():
    sweep = _sweep({"reward_funcs": {"values": [["outcome"], ["outcome", "picsar"]]}, "seed": {"values": [0, 1]}, "max_steps": {"value": 2}})  # fmt: skip
    variants = expand(sweep)
    # the last parameter varies fastest; the constant is in the argv but not in the names
    assert [v.name for v in variants] == [
        "reward_funcs=outcome,seed=0",
        "reward_funcs=outcome,seed=1",
        "reward_funcs=outcome+picsar,seed=0",
        "reward_funcs=outcome+picsar,seed=1",
    ]
    assert [v.seed for v in variants] == [0, 1, 0, 1]
    assert variants[2].parameters == {"reward_funcs": ["outcome", "picsar"], "seed": 0, "max_steps": 2}
    assert variants[2].argv == ("/usr/bin/env", "python", "train.py", "--reward_funcs=['outcome', 'picsar']", "--seed=0", "--max_steps=2")  # fmt: skip
    assert [v.name for v in expand(sweep, count=3)] == [v.name for v in variants[:3]]  # --count: the first ones
    assert [v.name for v in expand(_sweep(sweep.config["parameters"], run_cap=2))] == [v.name for v in variants[:2]]


def test_a_sweep_of_constants_is_one_run_without_seed():
    (variant,) = expand(_sweep({"lr": {"value": 0.1}}))
    assert (variant.name, variant.seed, variant.argv[-1]) == ("run", None, "--lr=0.1")


RANDOM = {
    "lr": {"distribution": "log_uniform_values", "min": 1.0e-6, "max": 1.0e-3},
    "beta": {"min": 0.0, "max": 0.5},  # no distribution, float bounds: uniform (wandb's inference)
    "steps": {"min": 1, "max": 1000},  # integer bounds: int_uniform
    "agg": {"values": ["min", "last", "mean"]},
    "seed": {"value": 7},
}


def test_random_draws_are_seeded_reproducible_and_in_range():
    sweep = parse_sweep({"program": "t.py", "method": "random", "parameters": RANDOM})
    first, again, other = expand(sweep, count=6, seed=3), expand(sweep, count=6, seed=3), expand(sweep, count=6, seed=4)
    assert [v.parameters for v in first] == [v.parameters for v in again]
    assert [v.parameters for v in first] != [v.parameters for v in other]
    for v in first:
        p = v.parameters
        assert 1.0e-6 <= p["lr"] <= 1.0e-3 and 0.0 <= p["beta"] <= 0.5 and p["agg"] in ("min", "last", "mean")
        assert isinstance(p["steps"], int) and 1 <= p["steps"] <= 1000 and p["seed"] == 7 and v.seed == 7
    assert len({v.name for v in first}) == 6
    # log_uniform_values spreads over decades: the log-mean of many draws is near the middle decade
    logs = [math.log10(v.parameters["lr"]) for v in expand(sweep, count=400, seed=0)]
    assert -5.0 < sum(logs) / len(logs) < -4.0


def test_random_needs_a_count_and_enough_distinct_points():
    with pytest.raises(ValueError, match="--count N or run_cap"):
        expand(parse_sweep({"program": "t.py", "method": "random", "parameters": RANDOM}))
    small = parse_sweep({"program": "t.py", "method": "random", "parameters": {"a": {"values": [1, 2]}}})
    assert sorted(v.parameters["a"] for v in expand(small, count=2)) == [1, 2]  # a repeated draw is redrawn
    with pytest.raises(ValueError, match="only 2 distinct random draws"):
        expand(small, count=3)


@pytest.mark.parametrize(
    "value",
    [True, False, None, 3, 0.1, 1e-06, "plain", "with space", ["outcome", "pum"], [1.0, 0.5], {"a": 1}],
)
def test_argument_forms_equal_wandbs(value):
    mine = command_args({"x": value, "seed": 1})
    theirs = create_sweep_command_args({"args": {"x": {"value": value}, "seed": {"value": 1}}})
    assert {k: mine[k] for k in (*FORMS, "args_json")} == {k: theirs[k] for k in (*FORMS, "args_json")}


def test_command_macros_expand_as_the_agent_does():
    command = ["${env}", "${interpreter}", "-m", "pkg", "--out=${envvar:OUT_ROOT}/x", "${args_no_hyphens}"]
    argv = build_argv(command, None, {"a": 1, "b": "c"}, interpreter="/py", environ={"OUT_ROOT": "/o"})
    assert argv == ["/usr/bin/env", "/py", "-m", "pkg", "--out=/o/x", "a=1", "b=c"]
    assert build_argv(["${envvar:UNSET}"], None, {}, environ={}) == ["UNSET"]  # wandb keeps the name
    with pytest.raises(ValueError, match=r"command macro \$\{argz\} is not supported offline"):
        build_argv(["${argz}"], None, {}, environ={})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"method": "bayes"}, "method: bayes needs the wandb sweep server"),
        ({"method": "hyperband"}, "method: 'hyperband' is not supported"),
        ({"parameters": {}}, "parameters must be a non-empty mapping"),
        ({"parameters": {"a": {"values": []}}}, "parameter a: values must be a non-empty list"),
        ({"parameters": {"a": {"values": [1, 1]}}}, "repeat a value"),
        ({"parameters": {"a": {"value": 1, "values": [1]}}}, "not both"),
        ({"parameters": {"a": 3}}, "parameter a: must be a mapping"),
        ({"parameters": {"a": {"distribution": "normal", "mu": 0}}}, "unknown keys \\['mu'\\]"),
        ({"parameters": {"a": {"distribution": "normal"}}}, "distribution 'normal' is not supported offline"),
        ({"parameters": {"a": {"distribution": "uniform", "min": 1, "max": 1}}}, "min < max"),
        ({"parameters": {"a": {"distribution": "log_uniform_values", "min": 0, "max": 1}}}, "min > 0"),
        ({"parameters": {"a": {"distribution": "int_uniform", "min": 0.5, "max": 2}}}, "integer min and max"),
        ({"parameters": {"a": {"min": 0, "max": 1}}}, "method: grid needs value or values"),
        ({"parameters": {"a": {"parameters": {"b": {"value": 1}}}}}, "no nested parameters"),
        ({"metric": {"name": "x", "goal": "up"}}, "goal 'up' must be minimize or maximize"),
        ({"run_cap": 0}, "run_cap must be a positive integer"),
        ({"program": None}, "set program"),
        ({"count": 3}, "unknown sweep keys \\['count'\\]"),
        ({"command": "python x.py"}, "command must be a list of words"),
    ],
)
def test_invalid_sweeps_are_refused_with_the_fix(config, message):
    base = {"program": "t.py", "method": "grid", "parameters": {"a": {"values": [1, 2]}}}
    with pytest.raises(ValueError, match=message):
        parse_sweep({**base, **config})


def test_names_are_filesystem_safe_stable_and_unique():
    long = "x" * 200
    name = variant_name({"judge": "http://127.0.0.1:8000/v1", "note": long})
    assert "/" not in name and ":" not in name and len(name) < 150
    assert name == variant_name({"judge": "http://127.0.0.1:8000/v1", "note": long})  # stable
    assert variant_name({"flag": True, "none": None, "lr": 1e-05}) == "flag=true,none=none,lr=1e-05"
    # two configs with one file stem in different folders: the names get a digest each, so the folders differ
    sweep = _sweep({"config": {"values": ["a/run.yaml", "b/run.yaml"]}})
    names = [v.name for v in expand(sweep)]
    assert len(set(names)) == 2 and all(n.startswith("config=run-") for n in names)


def test_the_fingerprint_is_the_sha256_of_all_the_settings():
    from procrl.experiment.sweep_command import config_paths, fingerprint

    parameters = {"seed": 1, "max_steps": 2}
    configs = {"c.yaml": {"learning_rate": 0.1, "beta": 0.0}}
    text = (
        '{"command":["${interpreter}","${program}","${args}"],"configs":{"c.yaml":{"beta":0.0,"learning_rate":0.1}},'
        '"parameters":{"max_steps":2,"seed":1},"program":"train.py"}'
    )  # written out by hand: sorted keys, no spaces
    expected = hashlib.sha256(text.encode()).hexdigest()
    command = ["${interpreter}", "${program}", "${args}"]
    assert fingerprint(parameters, command, "train.py", configs) == expected
    assert fingerprint({"max_steps": 2, "seed": 1}, command, "train.py", configs) == expected  # order is not a setting
    changed = [
        fingerprint({**parameters, "max_steps": 3}, command, "train.py", configs),  # a constant
        fingerprint(parameters, command, "train.py", {"c.yaml": {"learning_rate": 0.2, "beta": 0.0}}),  # a config
        fingerprint(parameters, [*command, "--bf16"], "train.py", configs),  # the command
        fingerprint(parameters, command, "other.py", configs),  # the program
    ]
    assert len({expected, *changed}) == 5
    assert config_paths(["x", "--config=a.yaml", "--configs", "n", "--config", "b.yaml", "--config"]) == ["a.yaml", "b.yaml"]  # fmt: skip


def test_a_variant_record_carries_its_fingerprint_only_when_given():
    (variant,) = expand(_sweep({"seed": {"value": 3}}))
    assert variant.record("s") == {"sweep": "s", "name": "run", "parameters": {"seed": 3}, "seed": 3}
    assert variant.record("s", "f" * 64)["fingerprint"] == "f" * 64
