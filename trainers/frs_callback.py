"""The FRS training callback: the Filtered Reasoning Score of the current policy during GRPO training.

    trainer = ProcessGRPOTrainer(...)
    add_frs_callback(frs_args, trainer, judge=judge_args, prompt_template=template)   # None when FRS is off
    FRSCallback(eval_dataset, every_n_steps=10, judge=JudgeArguments()).attach(trainer)   # the same, by hand
    trainer.train()

In `train_grpo.py` the settings are `procrl.trainers.tasks.arguments.FRSCallbackArguments` and the judge is the
run's one judge (`procrl.judges.JudgeArguments`; reply budget `procrl.evals.frs.judging.JUDGE_MAX_TOKENS` by
default; `judge: oracle` is the step oracle, `procrl.evals.frs.oracle_judge.OracleJudge`, for an eval set with
`gold_steps`; `judge: none` logs what needs no judge).

Every `every_n_steps` optimizer steps (and after the last step), `FRSCallback` samples `n_traces` completions for
each of the first `n_problems` problems of `eval_dataset` with the live policy, through the trainer's own generation
path (`procrl.evals.frs.sampling.generate_traces`, with `trainer.generation_config`, i.e. the GRPO sampling
settings); confidences come from that generation's own raw logits (`completion_logps`, T = 1). It computes FRS
(`procrl.evals.frs.compute_frs`) and logs `FRSReport.metrics` (`frs/score`, `frs/at_k/<K>`, `frs/accuracy`, ...;
a metric without a value is left out), a wandb table `frs/traces` of the judged traces when wandb is active (also
offline), and writes `frs_step<N>.json` (report + every trace) into `args.output_dir` whatever `report_to` is.

How it logs (transformers 5.24 / TRL 1.16). Callback events do not receive the trainer, so the callback keeps a
reference to it, as TRL's own `LogCompletionsCallback` does (trl/trainer/callbacks.py:268-300). The metrics go
through the BASE `transformers.Trainer.log` (transformers/trainer.py:4189-4211: appends `{**logs, "step"}` to
`state.log_history` and fires `on_log`, which WandbCallback/TensorBoardCallback forward, WandbCallback at
transformers/integrations/integration_utils.py:881-900). `GRPOTrainer.log` is deliberately bypassed: it merges and
then CLEARS TRL's accumulated reward metrics (trl/trainer/grpo_trainer.py:3302-3321), so calling it from
`on_step_end` (which runs just before the step's own `_maybe_log_save_evaluate`, transformers/trainer.py:1957-1958)
would move that step's reward metrics into our log entry; and `control.should_log`, which the base `log` resets, is
restored, so the step's own log still happens. The table is logged with `wandb.log` directly, keyed by
`train/global_step` like WandbCallback's metrics (it is not a scalar and must not reach `log_history`, which is JSON).

Several ranks: each rank generates a disjoint share of the problems (`Accelerator.split_between_processes`, inside
`unwrap_model_for_generation`, which gathers ZeRO-3 weights on every rank), the traces are gathered with
`accelerate.utils.gather_object`, and rank 0 alone judges, logs and writes. The other ranks go on and wait for rank
0 at the next collective of the training step, so one FRS evaluation must finish within the process-group timeout
(`ddp_timeout`, 1800 s by default). Failures never stop training: a rank whose generation fails contributes no
traces (every rank still reaches the gather), and a failure in judging or logging is logged as a warning with the
metric `frs/failed = 1`.

Sampling uses its own seeded RNG (`fork_rng`; seed = `seed` + step, + the rank), so adding the callback does not
change the training run's random stream, and two runs evaluate the same way.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from accelerate.utils import gather_object
from transformers import Trainer, TrainerCallback
from trl.models import unwrap_model_for_generation

from procrl.data_builders.datasets import ONE_SHOT_TEMPLATE, load_math_dataset, parse_eval_set
from procrl.evals.frs import FRSConfig, FRSReport, Trace, compute_frs
from procrl.evals.frs.judging import JUDGE_MAX_TOKENS
from procrl.evals.frs.oracle_judge import OracleJudge, require_gold_steps
from procrl.evals.frs.sampling import generate_traces
from procrl.evals.frs.traces import trace_table
from procrl.evals.stats import format_estimate
from procrl.judges import Judge, JudgeArguments
from procrl.judges.spec import open_judge_from
from procrl.trainers.tasks.arguments import FRSCallbackArguments
from procrl.utils import get_logger, json_safe

logger = get_logger(__name__)

__all__ = ["FRSCallback", "add_frs_callback"]


def add_frs_callback(
    frs_args: FRSCallbackArguments, trainer, *, judge: JudgeArguments, prompt_template: str | None = None
) -> FRSCallback | None:
    """Build the `FRSCallback` that `frs_args` describes and attach it to `trainer`; None when FRS is off.

    The problems are `frs_eval_set`, loaded with `load_math_dataset` in the training prompt template (default
    one-shot); the FRS settings are `frs_args.frs_config(seed=trainer.args.seed)`; `judge` is the run's judge, opened
    on rank 0 at the first evaluation (its cache in `<output_dir>/judge_cache` unless `judge_cache_dir` says
    otherwise) and closed at the end of training.
    """
    if frs_args.frs_every_n_steps <= 0:
        return None
    name, start, end, _ = parse_eval_set(frs_args.frs_eval_set, with_tokens=False)
    dataset = load_math_dataset(name, start=start, end=end, prompt_template=prompt_template or ONE_SHOT_TEMPLATE)
    if judge.is_oracle:
        require_gold_steps(dataset.column_names, f"frs_eval_set {frs_args.frs_eval_set}")
    return FRSCallback(
        dataset,
        every_n_steps=frs_args.frs_every_n_steps,
        n_traces=frs_args.frs_traces,
        n_problems=len(dataset),
        frs_config=frs_args.frs_config(seed=trainer.args.seed),
        judge=judge,
        trainer=trainer,
        max_new_tokens=frs_args.frs_max_new_tokens,
        temperature=frs_args.frs_temperature,
    )


class FRSCallback(TrainerCallback):
    """FRS of the live policy every `every_n_steps` steps of a `ProcessGRPOTrainer` (see the module docstring).

    Args:
        eval_dataset: problems in procrl's schema (`load_math_dataset`); the first `n_problems` rows are used.
        every_n_steps: evaluate when `state.global_step` is a multiple of this (optimizer steps).
        n_traces: completions per problem (CPU-sized default 4; the paper uses 16).
        n_problems: problems per evaluation (CPU-sized default 10).
        judge: a `procrl.judges.Judge`, or the `procrl.judges.JudgeArguments` of one (opened on rank 0 at the first
            evaluation, reply budget `procrl.evals.frs.judging.JUDGE_MAX_TOKENS` unless they set one, cache under
            `output_dir`; closed at the end of training); `judge: oracle` (or an `OracleJudge`) scores with the
            step oracle and needs an eval set with `gold_steps`; None (or `judge: none`) logs only what needs no
            judge (accuracies, confidence).
        trainer: the trainer (or call `attach(trainer)`); needed for its accelerator, generation settings and log.
        frs_config: the FRS settings (default `FRSConfig()`: K = 10, the curve at 10-50, the judge sees the answer
            check).
        temperature, max_new_tokens, top_p, top_k: override the trainer's sampling settings for evaluation
            (None: GRPO's own, so FRS measures the policy as it is trained).
        batch_size: completions per `generate` call.
        eval_at_end: also evaluate after the last step when it is not a multiple of `every_n_steps`.
        output_dir: where `frs_step<N>.json` (and the judge cache of `JudgeArguments`) go (default: `args.output_dir`).
        seed: base seed of the evaluation's sampling (default: `args.seed`).
        log_table: log the wandb table of judged traces when wandb is active.

    Raises:
        ValueError: a count below 1, an eval set without `prompt` and `answer`, or the oracle judge with an eval set
            without `gold_steps`.
    """

    def __init__(
        self,
        eval_dataset,
        every_n_steps: int,
        n_traces: int = 4,
        n_problems: int = 10,
        *,
        judge: Judge | JudgeArguments | None = None,
        trainer=None,
        frs_config: FRSConfig | None = None,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        batch_size: int = 16,
        eval_at_end: bool = True,
        output_dir: str | None = None,
        seed: int | None = None,
        log_table: bool = True,
    ):
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        if n_traces < 1 or n_problems < 1 or batch_size < 1:
            raise ValueError(
                f"n_traces, n_problems and batch_size must be >= 1, got {n_traces}, {n_problems}, {batch_size}"
            )
        if eval_dataset is None or len(eval_dataset) == 0:
            raise ValueError("FRSCallback needs a non-empty eval_dataset (e.g. load_math_dataset('gsm8k', end=10))")
        if "prompt" not in eval_dataset.column_names or "answer" not in eval_dataset.column_names:
            raise ValueError(f"eval_dataset needs 'prompt' and 'answer' columns, has {eval_dataset.column_names}")
        if isinstance(judge, OracleJudge) or (isinstance(judge, JudgeArguments) and judge.is_oracle):
            require_gold_steps(eval_dataset.column_names, "the FRS eval set")  # at construction, not mid-training
        self.rows = [dict(row) for row in eval_dataset.select(range(min(n_problems, len(eval_dataset))))]
        self.every_n_steps = every_n_steps
        self.n_traces = n_traces
        self.config = frs_config or FRSConfig()
        self.judge = None if isinstance(judge, JudgeArguments) and not judge.enabled else judge
        self.overrides = {
            k: v
            for k, v in dict(temperature=temperature, max_new_tokens=max_new_tokens, top_p=top_p, top_k=top_k).items()
            if v is not None
        }
        self.batch_size = batch_size
        self.eval_at_end = eval_at_end
        self.output_dir = output_dir
        self.seed = seed
        self.log_table = log_table
        self.trainer = None
        self.reports: dict[int, FRSReport] = {}  # step -> report (rank 0)
        self._judge = None
        self._judge_stack = contextlib.ExitStack()
        self._last_step = -1
        if trainer is not None:
            self.attach(trainer)

    def attach(self, trainer) -> FRSCallback:
        """Keep a reference to `trainer` and register the callback with it (`trainer.add_callback`)."""
        self.trainer = trainer
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        return self

    # -- trainer events ---------------------------------------------------------------------------------------------
    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        due = step % self.every_n_steps == 0 or (self.eval_at_end and state.max_steps and step >= state.max_steps)
        if due and step != self._last_step:
            self._last_step = step
            self.evaluate(step)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.close()
        return control

    def close(self) -> None:
        """Close a judge this callback opened (e.g. stop the local judge server)."""
        self._judge_stack.close()
        self._judge = None

    # -- one evaluation ---------------------------------------------------------------------------------------------
    def evaluate(self, step: int) -> FRSReport | None:
        """Generate on every rank, then judge, log and write on rank 0. Returns the report on rank 0 (None elsewhere
        or when the evaluation failed). Never raises."""
        trainer = self.trainer
        if trainer is None:
            logger.warning("FRSCallback is not attached to a trainer (use FRSCallback.attach(trainer)); skipping FRS")
            return None
        accelerator = trainer.accelerator
        start = time.perf_counter()
        traces, error = self._generate_local(step)
        gathered = gather_object([(traces, error)])
        if not accelerator.is_main_process:
            return None
        all_traces = [t for rank_traces, _ in gathered for t in rank_traces]
        errors = [err for _, err in gathered if err is not None]
        generate_s = time.perf_counter() - start
        try:
            if errors:
                raise RuntimeError(f"generation failed on {len(errors)} rank(s): {errors[0]}")
            report = compute_frs(all_traces, self._open_judge(), self.config, progress=True)
        except Exception as err:
            logger.warning("FRS at step %d failed (%r); training continues", step, err, exc_info=True)
            self._log({"frs/failed": 1.0})
            return None
        metrics = report.metrics()
        metrics["frs/wall_time_s"] = time.perf_counter() - start
        logger.info(
            "FRS step %d: score %s, accuracy %s, %d traces (%d judged) in %.0f s (generation %.0f s)",
            step,
            format_estimate(report.score),  # "–": undefined (nothing scored)
            format_estimate(report.accuracy),
            report.n_traces,
            report.n_judged,
            metrics["frs/wall_time_s"],
            generate_s,
        )
        self._log(metrics)
        self.reports[step] = report
        self._write(step, report, all_traces)
        return report

    def _generate_local(self, step: int) -> tuple[list[Trace], str | None]:
        """This rank's share of the problems; never raises (a failure is returned as its repr)."""
        trainer = self.trainer
        accelerator = trainer.accelerator
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        config = copy.deepcopy(trainer.generation_config)
        for key, value in self.overrides.items():
            setattr(config, key, value)
        seed = (self.seed if self.seed is not None else trainer.args.seed) + step * 1000 + accelerator.process_index
        try:
            with (
                accelerator.split_between_processes(self.rows) as rows,
                unwrap_model_for_generation(
                    trainer.model_wrapped,
                    accelerator,
                    gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                    generation_kwargs=trainer.generation_kwargs,
                    gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
                ) as model,
            ):
                try:
                    device = accelerator.device
                    rng_devices = [device.index or 0] if device.type == "cuda" else []
                    with torch.random.fork_rng(devices=rng_devices):
                        torch.manual_seed(seed)
                        traces = generate_traces(
                            model,
                            tokenizer,
                            rows,
                            n_traces=self.n_traces,
                            generation_config=config,
                            eos_ids=trainer.eos_token_ids,
                            batch_size=self.batch_size,
                            tail_fraction=self.config.tail_fraction,
                            chat_template_kwargs=getattr(trainer, "chat_template_kwargs", None),
                            device=device,
                            progress=accelerator.is_main_process,
                        )
                    return traces, None
                except Exception as err:  # keep going: every rank must still reach the gather
                    logger.warning(
                        "FRS generation failed on rank %d: %r", accelerator.process_index, err, exc_info=True
                    )
                    return [], repr(err)
        except Exception as err:
            logger.warning("FRS generation could not start on rank %d: %r", accelerator.process_index, err)
            return [], repr(err)

    def _open_judge(self) -> Judge | OracleJudge | None:
        if self._judge is None and isinstance(self.judge, JudgeArguments) and self.judge.is_oracle:
            self._judge = OracleJudge()  # programmatic: nothing to start or stop
        elif self._judge is None and isinstance(self.judge, JudgeArguments):
            output_dir = self.output_dir or self.trainer.args.output_dir
            opened = open_judge_from(self.judge, output_dir=output_dir, default_max_tokens=JUDGE_MAX_TOKENS)
            self._judge = self._judge_stack.enter_context(opened)
        elif self._judge is None:
            self._judge = self.judge
        return self._judge

    def _log(self, metrics: dict[str, float]) -> None:
        # `CallbackHandler.on_log` sets `control.should_log = False` (transformers/trainer_callback.py:533-534), which
        # would cancel the step's own log that DefaultFlowCallback scheduled before this `on_step_end`: restore it.
        control = self.trainer.control
        should_log = control.should_log
        try:
            Trainer.log(self.trainer, dict(metrics))  # the base method; see the module docstring
        except Exception:
            logger.warning("could not log FRS metrics", exc_info=True)
        finally:
            control.should_log = should_log
            self.trainer.control.should_log = should_log

    def _write(self, step: int, report: FRSReport, traces: Sequence[Trace]) -> None:
        args = self.trainer.args
        try:
            if self.log_table and "wandb" in (args.report_to or []):
                self._log_wandb_table(step, traces)
        except Exception:
            logger.warning("could not log the FRS wandb table", exc_info=True)
        try:
            out = Path(self.output_dir or args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            payload = {"step": step, "report": report.to_dict(), "traces": [t.to_dict() for t in traces]}
            (out / f"frs_step{step}.json").write_text(json.dumps(json_safe(payload), indent=2))
        except Exception:
            logger.warning("could not write frs_step%d.json", step, exc_info=True)

    def _log_wandb_table(self, step: int, traces: Sequence[Trace]) -> None:
        import wandb  # optional heavy dependency: only a run that reports to wandb logs the table

        if wandb.run is None:
            return
        columns, rows = trace_table(traces)
        table = wandb.Table(columns=columns)
        for row in rows:
            table.add_data(*row)
        wandb.log({"frs/traces": table, "train/global_step": step})
