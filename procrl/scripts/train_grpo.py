"""GRPO with process-reward modules: the `train_grpo.py` command (math problems, or multi-hop QA with StepGap).

    accelerate launch train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    python train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml --max_steps 5
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    procrl train-grpo --config configs/grpo/svamp_smollm2_picsar.yaml      # the same command
    procrl demo --max_steps 3                                              # with the demo config (procrl/cli.py)

(On CPU, `accelerate launch --num_processes 2 --cpu` starts only ONE process; use torchrun as above for two
ranks.) The job (`procrl.trainers.tasks.job.run_grpo_job`): load the policy (`model_name_or_path: default` is the
embedded SmolLM2-135M-Instruct), open the task, build its rewards, evaluate the policy greedily on the eval sets,
train with `ProcessGRPOTrainer`, evaluate again; the main process prints the report. The results file is the run
record `run.json` in `output_dir` (`procrl.experiment.tracking`; also to wandb with `report_to: [wandb]`): the
job's summary as `result`, the files written beside it as `files` (`checkpoint`: the model in `output_dir`,
`curves`: curves.png, `completions`: completions.jsonl, `frs_step<N>`: FRS reports, `wandb`: the local wandb run),
`metrics` (task accuracy after and before training, the last logged reward, reward components, length and
`process/`, `frs/`, `hacking/`, `stepgap/` keys) and the trainer's log history as `history`.

Settings (`TrlParser`: `--config x.yaml`, flags override it, `--a_b` or `--a-b`): `GRPOScriptArguments` (task,
data, prompt, rewards), `MathTaskArguments`, `SearchTaskArguments` (`procrl.trainers.tasks.arguments`),
`FRSCallbackArguments` (`procrl.trainers.tasks.arguments`), `ProcessGRPOConfig` (`trl.GRPOConfig` + procrl's) and
`ModelConfig`. The run has one judge (`procrl.judges.JudgeArguments`: `judge`, `judge_max_tokens`, ...; parsed as
part of `SearchTaskArguments`): the StepGap judge of task=search, the FRS judge of task=math.

`task: math` (default; `procrl.trainers.tasks.math`) trains on math word problems; `task: search`
(`procrl.trainers.tasks.search`; configs/grpo/stepgap_2wiki_smollm2.yaml, launch/grpo_stepgap.sh) on multi-hop QA
with search episodes and the StepGap reward, without the math evaluation. `reward_funcs` and `step_reward_func`
(the step scorer of `advantage_mode: process | mixed`) name entries of the reward registry or import paths
`package.module:name` of your own reward functions and step scorers (`procrl.trainers.tasks.rewards`).
"""

from __future__ import annotations

import math
import re

from procrl.evals.reporting import format_paired, format_table
from procrl.experiment.tracking import history_from_log, track_run
from procrl.scripts._common import EXIT_USAGE, ConfigParser, HelpFormatter, configure_logging, parse_or_exit
from procrl.trainers.tasks.job import JOB_ARGUMENTS, GRPOJob, run_grpo_job

PROG = "train_grpo.py"  # the name in --help and in the error line, also as `procrl train-grpo` / `procrl demo`


class GRPOParser(ConfigParser):
    """`TrlParser` of the `GRPOJob` dataclasses that also checks the settings across them (`GRPOJob`: the step
    scorer against `advantage_mode`, `reward_weights` against `reward_funcs`), so `parse_or_exit` reports them in
    one line like any other bad setting."""

    def parse_args_and_config(self, args=None, *rest, **kwargs) -> tuple:
        parsed = super().parse_args_and_config(args, *rest, **kwargs)
        GRPOJob(*parsed)  # raises ValueError with the fix
        return parsed


def make_parser() -> GRPOParser:
    """The command's parser; `parse_args_and_config(argv)` returns the dataclasses of `JOB_ARGUMENTS`, in
    `GRPOJob` order."""
    parser = GRPOParser(JOB_ARGUMENTS, prog=PROG, description=__doc__, formatter_class=HelpFormatter)
    for action in parser._actions:  # argparse %-formats help: a lone "%" ("the top K% ...") would break --help
        if action.help:
            action.help = re.sub(r"(?<!%)%(?![(%])", "%%", action.help)
    return parser


def parse_args(argv: list[str] | None = None) -> GRPOJob:
    """`--config x.yaml` plus flag overrides (default: the command line) -> `GRPOJob`.

    Raises:
        ValueError: a setting a dataclass or `GRPOJob` refuses (the message says how to fix it).
    """
    return GRPOJob(*make_parser().parse_args_and_config(args=argv))


def format_summary(summary: dict, files: dict[str, str]) -> str:
    """The report of a GRPO run that `main` prints: model, data, steps and wall time, rewards and weights, the
    before/after table (`procrl.evals.reporting.format_table`), the files (role: path), total wall time.

    Args:
        summary: the job's summary (`procrl.trainers.tasks.job.GRPOResult.summary`, the run record's `result`).
        files: {role: path} to list, in order (the run record itself, then `GRPOResult.files`); a `wandb` entry
            also gets the `wandb sync` line.
    """
    train = summary["train"]
    lines = [
        "",
        f"procrl GRPO: {summary['model']} on {train['dataset']}, {train['steps']} steps in {train['wall_time_s']:.0f} s",
        f"rewards: {', '.join(train['reward_funcs'])} with weights {train['reward_weights']}",
    ]
    if train.get("step_reward_func"):
        lines.append(f"step scorer: {train['step_reward_func']}")
    if summary["before"] or summary["after"]:
        lines += ["", format_table(summary["before"], summary["after"])]
    if any(summary.get("paired", {}).values()):
        lines += ["", format_paired(summary["paired"])]
    lines.append("")
    lines += [f"{'wandb run (offline)' if role == 'wandb' else role}: {path}" for role, path in files.items()]
    lines.append(f"total wall time: {summary['total_wall_time_s'] / 60:.1f} min")
    if files.get("wandb"):
        lines.append(f"sync later with: wandb sync {files['wandb']}")
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
    """Parse `--config x.yaml` plus flag overrides, run the job, record it in `run.json` and print its report (main
    process); returns the exit status (0 on success, 2 on bad settings, with the message)."""
    parsed = parse_or_exit(make_parser(), argv)  # a dataclass's __post_init__, GRPOJob's checks, an unknown flag
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
        result = run_grpo_job(job)
        record.result, record.files = result.summary, result.files
        record.metrics = run_metrics(result.summary)
        record.history = history_from_log(result.summary["log_history"])
    if training.process_index == 0:
        print(format_summary(result.summary, {"results": str(record.path), **result.files}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
