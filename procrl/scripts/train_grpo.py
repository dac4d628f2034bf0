"""GRPO with process-reward modules: the `train_grpo.py` command (math problems, or multi-hop QA with StepGap).

    accelerate launch train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    python train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml --max_steps 5
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    procrl train-grpo --config configs/grpo/svamp_smollm2_picsar.yaml      # the same command
    procrl demo --max_steps 3                                              # with the demo config (procrl/cli.py)

(On CPU, `accelerate launch --num_processes 2 --cpu` starts only ONE process; use torchrun as above for two
ranks.) The job: load the policy (`model_name_or_path: default` is the embedded SmolLM2-135M-Instruct), open the
task, build its rewards, evaluate the policy greedily on the eval sets, train with `ProcessGRPOTrainer`, evaluate
again, and write `summary.json` and `curves.png` into `output_dir`; the main process prints the report. The run
record `run.json` (`procrl.experiment.tracking`; also to wandb with `report_to: [wandb]`) goes into `output_dir` too, with
`run_metrics` (task accuracy after and before training, the last logged reward, reward components, length and
`process/`, `frs/`, `hacking/`, `stepgap/` keys) and the trainer's log history.

Settings (`TrlParser`: `--config x.yaml`, flags override it, `--a_b` or `--a-b`): `GRPOScriptArguments` (below:
task, data, prompt, rewards), `MathTaskArguments`, `SearchTaskArguments` (`procrl.trainers.tasks.arguments`),
`FRSCallbackArguments` (`procrl.trainers.frs_callback`), `ProcessGRPOConfig` (`trl.GRPOConfig` + procrl's) and
`ModelConfig`. The run has one judge (`procrl.judges.JudgeArguments`: `judge`, `judge_max_tokens`, ...; parsed as
part of `SearchTaskArguments`): the StepGap judge of task=search, the FRS judge of task=math.

`task: math` (default; `procrl.trainers.tasks.math`) trains on math word problems; `task: search`
(`procrl.trainers.tasks.search`; configs/grpo/stepgap_2wiki_smollm2.yaml, launch/grpo_stepgap.sh) on multi-hop QA
with search episodes and the StepGap reward, without the math evaluation. `reward_funcs` names come from
`REWARDS`, the one reward registry, or are dotted paths of your own reward functions.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from trl import ModelConfig

from procrl.data_builders.datasets import BUILTIN_DATASETS
from procrl.experiment.reporting import format_table
from procrl.rewards.outcome import ANSWER_EXTRACTION_MODES
from procrl.scripts._common import EXIT_USAGE, ConfigParser, HelpFormatter, configure_logging, parse_or_exit
from procrl.experiment.tracking import history_from_log, track_run
from procrl.trainers.frs_callback import FRSCallbackArguments
from procrl.trainers.grpo import ProcessGRPOConfig
from procrl.trainers.tasks.arguments import SEARCH_TEMPLATES, MathTaskArguments, SearchTaskArguments
from procrl.trainers.tasks.job import TASKS, run_grpo_job
from procrl.trainers.tasks.rewards import Build, RewardEntry, RewardSet, build_rewards, scalar_reward_weights

PROG = "train_grpo.py"  # the name in --help and in the error line, also as `procrl train-grpo` / `procrl demo`

_PUM = "procrl.rewards.pum_rewards"
_STEPGAP = "procrl.rewards.stepgap.reward"


# The settings each reward is built with, from (GRPOScriptArguments, the opened task).
def _outcome(args, task) -> dict:
    return {"answer_extraction": args.answer_extraction}


def _picsar(args, task) -> dict:
    return {"evaluator": args.picsar_evaluator, "normalize": args.picsar_normalize}


def _pum(mode: str | None):
    def settings(args, task) -> dict:
        return {"model": args.pum_model, "batch_size": args.pum_batch_size, **({"mode": mode} if mode else {})}

    return settings


def _stepgap(args, task) -> dict:
    return {"verifier": task.verifier, "config": task.reward_config}


# THE reward registry: reward_funcs name -> the task it serves and how it is built (`procrl.trainers.tasks.rewards`:
# the callable by dotted path, imported only when a run names it, and its settings). In advantage_mode process /
# mixed, `pum` and `stepgap` are the step scorer (their `step` build) instead of a scalar reward.
REWARDS: dict[str, RewardEntry] = {
    "outcome": RewardEntry("math", Build("procrl.rewards.outcome:get_outcome_reward", _outcome)),
    "picsar_bonus": RewardEntry("math", Build("procrl.rewards.picsar:get_picsar_bonus", _picsar)),
    "pum": RewardEntry(
        "math",
        Build(f"{_PUM}:get_pum_reward", _pum("full"), load="pum"),
        step=Build(f"{_PUM}:get_pum_step_rewards", _pum(None), load="pum"),
    ),
    "pum_min": RewardEntry("math", Build(f"{_PUM}:get_pum_reward", _pum("min"), load="pum")),
    "pum_last": RewardEntry("math", Build(f"{_PUM}:get_pum_reward", _pum("last"), load="pum")),
    "em": RewardEntry("search", Build("procrl.rewards.qa:em_reward")),
    "stepgap": RewardEntry(
        "search", Build(f"{_STEPGAP}:StepGapReward", _stepgap), step=Build(f"{_STEPGAP}:StepGapStepRewards", _stepgap)
    ),
}
PUM_REWARDS = ("pum", "pum_min", "pum_last")  # the rewards that need pum_model


@dataclass
class GRPOScriptArguments:
    """What to train on and which rewards to use, common to both tasks (the task's own settings are
    `MathTaskArguments` / `SearchTaskArguments`; `ProcessGRPOConfig` holds the optimisation)."""

    task: str = field(
        default="math",
        metadata={
            "help": "'math' (single-turn math problems, math rewards, before/after evaluation) or 'search' "
            "(multi-hop QA with <search> episodes and the StepGap reward; dataset_name is then a QA set such as "
            "2wiki_dev_sample, reward_funcs names em / stepgap, and the math evaluation is skipped)."
        },
    )
    dataset_name: str = field(
        default="svamp",
        metadata={"help": "Training problems: a built-in set (svamp, gsm8k, math500), a hub id or a local file/dir."},
    )
    dataset_start: int = field(default=0, metadata={"help": "First training row (0-based, inclusive)."})
    dataset_end: int | None = field(default=700, metadata={"help": "End training row (exclusive); null = all."})
    prompt_template: str = field(
        default="one_shot",
        metadata={
            "help": "'one_shot' (ends answers with 'The answer is N'), 'zero_shot', or a template with {question}. "
            "task=search: 'search_one_shot' (or one_shot: the search instruction after one worked search episode), "
            "'search' (or zero_shot: the instruction alone), or a template with {question}."
        },
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["outcome", "picsar_bonus"],
        metadata={
            "help": "Reward functions: registry names (task=math: outcome, picsar_bonus; pum, pum_min, pum_last with "
            "pum_model; task=search: em, stepgap) or dotted paths 'module.func' / 'module:func'. With advantage_mode "
            "process or mixed, 'pum' / 'stepgap' is not a scalar reward but the step scorer behind the process "
            "advantages (its reward_weights entry is dropped)."
        },
    )
    answer_extraction: str = field(
        default="strict",
        metadata={
            "help": "How the outcome reward (and task/accuracy, the before/after evaluation) finds a completion's final "
            "answer: 'strict' (an explicit marker: the last \\boxed{}, 'The answer is ...' or '#### ...'; a sound "
            "default for RL rewards, since a policy could learn to spray numbers) or 'flexible' (also the last number "
            "of the final sentence, e.g. 'The total is $9{,}500$.'). The reward is then named outcome_reward_flexible "
            "and completions without an answer are logged as task/no_answer_<mode>."
        },
    )
    pum_model: str | None = field(
        default=None,
        metadata={
            "help": "Prefix Utility Model for the pum* rewards: a train_pum.py output directory (full checkpoint or "
            "LoRA adapter with its score head). Scores U(x, y) of the problem (`question` column) and the completion."
        },
    )
    pum_batch_size: int = field(default=16, metadata={"help": "Inputs per PUM forward pass."})
    picsar_evaluator: str | None = field(
        default=None, metadata={"help": "Model for PiCSAR's answer term; null = the live policy."}
    )
    picsar_normalize: str = field(
        default="mean", metadata={"help": "PiCSAR bonus: 'mean' (per-token mean of each term) or 'sum'."}
    )

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} must be one of {tuple(TASKS)} (e.g. task: search for StepGap)")
        search = self.task == "search"
        if search and "{question}" not in self.prompt_template and self.prompt_template not in SEARCH_TEMPLATES:
            raise ValueError(
                f"task=search: prompt_template={self.prompt_template!r} is not one of {SEARCH_TEMPLATES} and has "
                "no {question} placeholder; use search_one_shot (the StepGap configs' default) or a template."
            )
        if self.answer_extraction not in ANSWER_EXTRACTION_MODES:
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} must be one of {ANSWER_EXTRACTION_MODES}: use "
                "answer_extraction: strict (the default: boxed / 'The answer is' / '####' answers only) or "
                "answer_extraction: flexible (also the last number of the final sentence)."
            )
        if search and self.answer_extraction != "strict":
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} has no effect with task=search: its reward (EM) compares "
                "normalised answer strings and never extracts numbers. Remove answer_extraction from the config (or set "
                "answer_extraction: strict), or use task: math."
            )
        if search and self.dataset_name in BUILTIN_DATASETS:
            raise ValueError(
                f"task=search cannot train on the math set {self.dataset_name!r}: set dataset_name: 2wiki_dev_sample "
                "(or a JSONL file of {question, answer} records)."
            )
        if self.picsar_normalize not in ("mean", "sum"):
            raise ValueError(f"picsar_normalize must be 'mean' or 'sum', got {self.picsar_normalize!r}")
        if self.pum_batch_size < 1:
            raise ValueError(f"pum_batch_size must be >= 1, got {self.pum_batch_size}")
        if self.dataset_end is not None and self.dataset_end <= self.dataset_start:
            raise ValueError(f"dataset_end ({self.dataset_end}) must be > dataset_start ({self.dataset_start})")
        self._check_reward_names()

    def _check_reward_names(self) -> None:
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty: give at least one, e.g. [outcome]")
        own = sorted(name for name, entry in REWARDS.items() if entry.task == self.task)
        other = [name for name in self.reward_funcs if name in REWARDS and REWARDS[name].task != self.task]
        if other:
            fix = (
                "set reward_funcs: [em, stepgap] (and reward_weights: [0.0, 1.0], since the StepGap reward already "
                "contains EM)"
                if self.task == "search"
                else f"use task: search, or rewards of {own}"
            )
            raise ValueError(f"task={self.task} cannot use the {REWARDS[other[0]].task} rewards {other}: {fix}.")
        for name in self.reward_funcs:
            if name not in REWARDS and "." not in name and ":" not in name:
                raise ValueError(f"unknown reward function {name!r}: use one of {own} or 'module.func'")
        uses_pum = [name for name in self.reward_funcs if name in PUM_REWARDS]
        if uses_pum and not self.pum_model:
            raise ValueError(
                f"reward_funcs {uses_pum} need a Prefix Utility Model: set pum_model to a train_pum.py output "
                "directory (accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml)."
            )


class GRPOParser(ConfigParser):
    """`TrlParser` that derives TRL's `reward_weights` from the parsed values BEFORE `ProcessGRPOConfig` is built:
    one per scalar reward, the step scorer's dropped in process/mixed mode. No parsed config changes afterwards."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, remaining = super().parse_known_args(args, namespace)
        if getattr(namespace, "task", None) in TASKS and getattr(namespace, "reward_funcs", None):
            namespace.reward_weights = scalar_reward_weights(
                REWARDS, namespace.task, namespace.reward_funcs, namespace.reward_weights, namespace.advantage_mode
            )
        return namespace, remaining


def make_parser() -> GRPOParser:
    """The command's parser; `parse_args_and_config(argv)` returns the six dataclasses in `GRPOJob` order."""
    parser = GRPOParser(
        (GRPOScriptArguments, MathTaskArguments, SearchTaskArguments, FRSCallbackArguments, ProcessGRPOConfig,
         ModelConfig),  # fmt: skip
        prog=PROG,
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    for action in parser._actions:  # argparse %-formats help: a lone "%" ("the top K% ...") would break --help
        if action.help:
            action.help = re.sub(r"(?<!%)%(?![(%])", "%%", action.help)
    return parser


class GRPOJob(NamedTuple):
    """One run's parsed settings."""

    script: GRPOScriptArguments
    math: MathTaskArguments
    search: SearchTaskArguments
    frs: FRSCallbackArguments
    training: ProcessGRPOConfig
    model: ModelConfig


def parse_args(argv: list[str] | None = None) -> GRPOJob:
    """`--config x.yaml` plus flag overrides (default: the command line) -> `GRPOJob`.

    Raises:
        ValueError: a setting a dataclass refuses (the message says how to fix it), or `reward_weights` that do not
            match `reward_funcs`, or process/mixed mode without a step scorer or without a scalar reward.
    """
    return GRPOJob(*make_parser().parse_args_and_config(args=argv))


def make_rewards(job: GRPOJob, task=None) -> RewardSet:
    """The run's rewards from `REWARDS` (`task`: the opened task; the math rewards do not read it)."""
    return build_rewards(REWARDS, job.script, task, job.training.advantage_mode, job.training.reward_weights)


def run(job: GRPOJob) -> dict:
    """The GRPO job (`procrl.trainers.tasks.job.run_grpo_job`) with this command's rewards; returns the summary."""
    return run_grpo_job(job, functools.partial(make_rewards, job))


def format_summary(summary: dict) -> str:
    """The report of a GRPO run that `main` prints: model, data, steps and wall time, rewards and weights, the
    before/after table (`procrl.experiment.reporting.format_table`), where the summary, curves and wandb run are, total wall
    time.

    Args:
        summary: the dict the GRPO job returns and writes to `summary.json`.
    """
    train = summary["train"]
    lines = [
        "",
        f"procrl GRPO: {summary['model']} on {train['dataset']}, {train['steps']} steps in {train['wall_time_s']:.0f} s",
        f"rewards: {', '.join(train['reward_funcs'])} with weights {train['reward_weights']}",
    ]
    if summary["before"] or summary["after"]:
        lines += ["", format_table(summary["before"], summary["after"])]
    lines.append("")
    for key, label in (("summary_path", "summary"), ("curves", "curves"), ("wandb_dir", "wandb run (offline)")):
        if summary.get(key):
            lines.append(f"{label}: {summary[key]}")
    lines.append(f"total wall time: {summary['total_wall_time_s'] / 60:.1f} min")
    if summary.get("wandb_dir"):
        lines.append(f"sync later with: wandb sync {summary['wandb_dir']}")
    return "\n".join(lines)


# Log-history keys whose recent training values are headline metrics of the run record (by name, then by prefix)
LOGGED_KEYS = ("reward", "completions/mean_length")
LOGGED_PREFIXES = ("process/", "frs/", "hacking/", "stepgap/")
HEADLINE_WINDOW = 10  # logging steps averaged for a logged headline (one step's batch is a few prompts' groups)


def run_metrics(summary: dict, window: int = HEADLINE_WINDOW) -> dict[str, float]:
    """The run record's headline metrics of a GRPO summary (flat, finite numbers).

    - `eval/<set>/accuracy`, `.../correct`, `.../n` after training and `.../accuracy_before` for every eval set, and
      the first set's as `task/accuracy`, `task/correct`, `task/n`, `task/accuracy_before` (none with task=search or
      run_eval false; `correct` = accuracy x n, the evaluation's own count; an undefined accuracy, None for an
      empty eval set, is left out);
    - from TRL's `log_history` (training entries): the mean of the last `window` logged finite values of `reward`,
      `completions/mean_length`, every `rewards/<name>/mean` and every `process/`, `frs/`, `hacking/` and
      `stepgap/` key (per key: FRS is logged only every frs_every_n_steps), and of the training batches'
      `task/accuracy` as `task/train_accuracy` (sampled completions, not the greedy evaluation; the headline of
      runs without an evaluation, such as task=search). A key with no finite value is left out.
    """
    metrics: dict[str, float] = {}
    after = {row["name"]: row for row in summary["after"]}
    before = {row["name"]: row for row in summary["before"]}
    for i, name in enumerate([*after, *(name for name in before if name not in after)]):
        values = {}
        if name in after:
            row = after[name]
            correct = round(row["accuracy"] * row["n"]) if row["n"] else 0
            values = {"accuracy": row["accuracy"], "correct": correct, "n": row["n"]}
        if name in before:
            values["accuracy_before"] = before[name]["accuracy"]
        values = {key: value for key, value in values.items() if value is not None}  # None: no problem evaluated
        metrics.update({f"eval/{name}/{key}": value for key, value in values.items()})
        if i == 0:
            metrics.update({f"task/{key}": value for key, value in values.items()})
    logged: dict[str, list[float]] = {}
    for entry in summary["log_history"]:
        for key, value in entry.items():
            wanted = (
                key in LOGGED_KEYS
                or key.startswith(LOGGED_PREFIXES)
                or (key.startswith("rewards/") and key.endswith("/mean"))
                or key == "task/accuracy"
            )
            if wanted and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                logged.setdefault("task/train_accuracy" if key == "task/accuracy" else key, []).append(value)
    metrics.update({key: sum(v[-window:]) / len(v[-window:]) for key, v in logged.items()})
    return metrics


def main(argv: list[str] | None = None) -> int:
    """Parse `--config x.yaml` plus flag overrides, run the job and print its report (main process); returns the
    exit status (0 on success, 2 on bad settings, with the message)."""
    parsed = parse_or_exit(make_parser(), argv)  # a dataclass's __post_init__, the reward weights, an unknown flag
    if parsed is None:
        return EXIT_USAGE
    job = GRPOJob(*parsed)
    configure_logging()
    training = job.training
    with track_run(
        training.output_dir,
        command="train-grpo",
        argv=argv,
        configs=parsed,
        report_to=training.report_to,
        name=training.run_name,
    ) as record:
        summary = run(job)
        record.metrics = run_metrics(summary)
        record.history = history_from_log(summary["log_history"])
    if job.training.process_index == 0:
        print(format_summary(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
