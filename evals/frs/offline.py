"""Offline FRS of a model on a benchmark (docs/architecture.md "FRS"): the library behind `procrl frs`.

`run_frs(args, frs, judge)` samples `frs.frs_traces` traces per problem (temperature 0.7, no top-p/top-k by default)
with a `procrl.generation` rollout engine (`generation_backend`: auto = vLLM wherever it imports, else
transformers), takes each trace's tail confidence from the sampler's own raw (T = 1) log-probs, judges the traces
FRS needs (`procrl.evals.frs.plan_judging`) with the judge of `judge` (`procrl.judges.JudgeArguments`; its reply
budget defaults to `procrl.evals.frs.judging.JUDGE_MAX_TOKENS`; `judge: oracle` is the step oracle's
`procrl.evals.frs.oracle_judge.OracleJudge`, for data with `gold_steps` only) and returns the result (report, bootstrap
intervals, settings, wall times) with the files it wrote into `args.output_dir` (`FILES`, role -> name, relative
to that directory):

- `cache/` (not a `files` entry): the sample store (`procrl.evals.frs.sampling.sample_traces`: content-addressed
  rollout shards); an interrupted run started again with the same settings and engine resumes from it, and a rerun
  (e.g. with another judge) generates nothing;
- `judged_traces.jsonl` ("judged_traces"): every trace with its judgement (text, confidence, correctness, `scores`,
  `rs`, `unscored`; with a judge that returns log-probs `expected_scores` and `rs_expected`), one JSON per line
  (`procrl.evals.frs.traces.write_traces`);
- `frs.png` ("plot"): the FRS@K curve (with the accuracy of the kept traces; their intervals as bands) and
  histograms of the confidence of correct and incorrect traces (`plot_frs`).

The command puts the result into the run record (`run.json`'s `result`, the files under `files`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from procrl.evals.frs import FRSArguments, compute_frs
from procrl.evals.frs.intervals import accuracy_key, frs_intervals, frs_key
from procrl.evals.frs.judging import JUDGE_MAX_TOKENS
from procrl.evals.frs.oracle_judge import OracleJudge, require_gold_steps
from procrl.evals.frs.sampling import sample_traces, select_traces
from procrl.evals.frs.traces import write_traces
from procrl.evals.offline import OfflineSamplingConfig, load_rows, load_setup
from procrl.evals.selection import read_select_run
from procrl.generation import SamplingParams
from procrl.judges import JudgeArguments
from procrl.judges.spec import open_judge_from
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["FILES", "OfflineFRSConfig", "plot_frs", "run_frs", "with_select_settings"]

# what `run_frs` writes into the output directory: role -> file name
FILES = {"judged_traces": "judged_traces.jsonl", "plot": "frs.png"}
# the settings a `--traces-from` select report gives the run (its policy, data slice and sampling; its `n` is the
# number of traces per problem, `frs_traces`)
SELECT_SETTINGS = ("model", "dataset", "split", "start", "end", "prompt_template", "temperature", "top_p",
                   "max_new_tokens", "batch_size", "seed", "generation_backend")  # fmt: skip


@dataclass
class OfflineFRSConfig(OfflineSamplingConfig):
    """The sampling settings of `procrl frs` (parsed by `TrlParser` in `procrl/scripts/frs.py` beside
    `procrl.evals.frs.FRSArguments` and `procrl.judges.JudgeArguments`; flags dashed or underscored alike): the
    policy, problem slice and sampling of `OfflineSamplingConfig` (with FRS's defaults and help texts: gsm8k[0:50]),
    then top-k, the bootstrap, `--traces-from` and the output directory.

    Raises:
        ValueError: (on construction) `batch_size` or `max_new_tokens` < 1, `temperature` <= 0, a bad
            `generation_backend` / `vllm_kv_cache_gib` (`OfflineSamplingConfig`), or `bootstrap_resamples` < 0.
    """

    # the shared fields whose default or help differs from `OfflineSamplingConfig` (they keep its field order)
    dataset: str = field(default="gsm8k", metadata={"help": "gsm8k, svamp, math500, or a local/hub data set"})
    end: int = field(default=50, metadata={"help": "end problem (exclusive); -1 = all"})
    max_new_tokens: int = field(default=256, metadata={"help": "token budget of one trace"})
    batch_size: int = field(default=32, metadata={"help": "traces per generate call"})
    seed: int = field(default=0, metadata={"help": "sampling seed and FRS hash seed"})
    # FRS's own
    top_k: int = field(default=0, metadata={"help": "top-k sampling (0 = off)"})
    bootstrap_resamples: int = field(
        default=1000,
        metadata={
            "help": "bootstrap draws over problems for the 95%% intervals of accuracy, accuracy@K, FRS@K and the "
            "selection gain (no extra judging); 0 = no intervals"
        },
    )
    traces_from: str | None = field(
        default=None,
        metadata={
            "help": "a `procrl select` run directory (its --output-dir: run.json, problems.jsonl, cache/): "
            "its samples are the traces (no sampling; model, data slice, sampling settings and seed come from the "
            "run), so best-of-N and FRS share one sample set"
        },
    )
    output_dir: str = field(
        default="outputs/frs", metadata={"help": "where run.json, traces.jsonl, judged_traces.jsonl and frs.png go"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bootstrap_resamples < 0:
            raise ValueError(f"--bootstrap-resamples must be >= 0 (0 = no intervals), got {self.bootstrap_resamples}")


def run_frs(args: OfflineFRSConfig, frs: FRSArguments, judge: JudgeArguments) -> tuple[dict, dict[str, str]]:
    """Generate, judge, bootstrap; write the traces, the judged traces and the plot (module docstring).

    Returns:
        `(result, files)`: the result (`model`, `dataset`, `settings`, `report` (`FRSReport.to_dict()`),
        `intervals` and `bootstrap` (`procrl.evals.frs.intervals`; None with `bootstrap_resamples` 0),
        `wall_time_s`, `mean_trace_tokens`, `truncated_frac`) and the files written (`FILES`: role -> name in
        `args.output_dir`; "traces" only when this run sampled).

    Raises:
        ValueError: a `--traces-from` report that does not read or does not match the data slice; `judge: oracle`
            on a data set without `gold_steps` (before anything is sampled).
        RuntimeError: a local judge server that did not start.
    """
    if args.traces_from:
        args, frs = with_select_settings(args, frs)
    if judge.is_oracle:  # refuse data without gold steps before a model is loaded or a trace sampled
        rows = load_rows(args)
        require_gold_steps(rows[0] if rows else (), f"dataset {args.dataset}")
    config = frs.frs_config(seed=args.seed)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = dict(FILES)
    t0 = time.perf_counter()
    if args.traces_from:
        t_gen = time.perf_counter()
        dataset = load_rows(args)
        traces = select_traces(args.traces_from, dataset, tail_fraction=config.tail_fraction)
        traces_engine = read_select_run(args.traces_from)["samples"].get("engine")
    else:
        setup = load_setup(args)  # the problems and the policy's float32 rollout engine
        dataset, engine = setup.dataset, setup.engine
        params = SamplingParams(
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens
        )
        t_gen = time.perf_counter()
        traces = sample_traces(
            engine,
            dataset,
            n_traces=frs.frs_traces,
            params=params,
            batch_size=args.batch_size,
            tail_fraction=config.tail_fraction,
            seed=args.seed,
            cache_dir=out / "cache",
            progress=not args.no_progress,
        )
        traces_engine = engine.cache_key()
        del engine, setup  # free the memory before a local judge server loads its own copy
    generation_s = time.perf_counter() - t_gen

    t_judge = time.perf_counter()
    if judge.is_oracle:
        opening = contextlib.nullcontext(OracleJudge())  # programmatic: nothing to start or stop
    else:
        opening = open_judge_from(judge, output_dir=out, default_max_tokens=JUDGE_MAX_TOKENS)
    with opening as opened:
        report = compute_frs(traces, opened, config, progress=not args.no_progress)
    judge_s = time.perf_counter() - t_judge
    t_boot = time.perf_counter()
    bootstrap = {"intervals": None, "bootstrap": None}
    if args.bootstrap_resamples > 0:
        bootstrap = frs_intervals(traces, config, resamples=args.bootstrap_resamples, seed=args.seed).to_dict()
    bootstrap_s = time.perf_counter() - t_boot

    result = {
        "model": args.model,
        "dataset": f"{args.dataset}[{args.start}:{args.start + len(dataset)}]",
        "settings": {
            "n_traces": frs.frs_traces,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "max_new_tokens": args.max_new_tokens,
            "seed": args.seed,
            "judge": judge.judge,
            "judge_max_tokens": None if judge.is_oracle else judge.judge_max_tokens or JUDGE_MAX_TOKENS,
            "judge_timeout_s": judge.judge_timeout_s,
            "batch_size": args.batch_size,
            "prompt_template": args.prompt_template,
            "generation_backend": args.generation_backend,
            "engine": traces_engine,
            "traces_from": args.traces_from,
            "frs": asdict(config),
        },
        "report": report.to_dict(),
        **bootstrap,
        "wall_time_s": {
            "generation": generation_s,
            "judging": judge_s,
            "bootstrap": bootstrap_s,
            "total": time.perf_counter() - t0,
        },
        "mean_trace_tokens": sum(t.num_tokens for t in traces) / len(traces) if traces else None,
        "truncated_frac": (
            sum(1 for t in traces if t.num_tokens >= args.max_new_tokens) / len(traces) if traces else None
        ),
    }
    write_traces(out / FILES["judged_traces"], traces)
    title = f"{args.model} on {result['dataset']}, {frs.frs_traces} traces/problem"
    plot_frs(report, traces, out / FILES["plot"], title=title, intervals=bootstrap["intervals"])
    return result, files


def with_select_settings(args: OfflineFRSConfig, frs: FRSArguments) -> tuple[OfflineFRSConfig, FRSArguments]:
    """`args` with the policy, data slice, sampling settings and seed of its `traces_from` select report
    (`SELECT_SETTINGS`; top-k off, as `procrl select` samples), and `frs` with its samples per problem (`n`) as
    `frs_traces`; settings the flags gave otherwise are logged.

    Raises:
        ValueError: the report is unreadable or has no `settings` (not a `procrl select` report).
    """
    try:
        settings = read_select_run(args.traces_from)["settings"]
        changes = {key: settings[key] for key in SELECT_SETTINGS if key in settings}
        traces = int(settings.get("n", frs.frs_traces))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--traces-from {err}") from None
    changes["top_k"] = 0
    for key, value in [*changes.items(), ("frs_traces", traces)]:
        current = getattr(frs if key == "frs_traces" else args, key)
        if current != value:
            logger.info("frs: %s = %r from --traces-from (not %r)", key, value, current)
    return dataclasses.replace(args, **changes), dataclasses.replace(frs, frs_traces=traces)


def plot_frs(report, traces, path: str | Path, title: str = "", intervals: dict | None = None) -> Path:
    """Two panels: FRS@K (and the accuracy of the kept traces, in %) against K; confidence histograms of correct
    and incorrect traces (traces with an unparseable gold or no confidence left out).

    Args:
        report: a `procrl.evals.frs.FRSReport` (`at_k`, `accuracy_at_k`, `accuracy`).
        traces: the `Trace`s it was computed from (`correct`, `confidence`).
        path: the PNG to write (110 dpi).
        title: the figure's title.
        intervals: the result's `intervals` (name -> [low, high] or None, `procrl.evals.frs.intervals`); each
            curve gets a band over the Ks that have an interval. None: no bands.

    Returns:
        `path` as a `Path`.
    """
    import matplotlib  # optional heavy dependency: only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional heavy dependency (see above)

    fig, (ax_curve, ax_hist) = plt.subplots(1, 2, figsize=(11, 4))
    ks = sorted(report.at_k)
    frs_points = [(k, report.at_k[k]) for k in ks if report.at_k[k] is not None]
    if frs_points:
        (line,) = ax_curve.plot(*zip(*frs_points, strict=True), marker="o", label="FRS@K (RS, 0-100)")
        _band(ax_curve, ks, intervals, frs_key, 1.0, line.get_color())
    acc_points = [(k, 100 * report.accuracy_at_k[k]) for k in ks if report.accuracy_at_k.get(k) is not None]
    if acc_points:
        (line,) = ax_curve.plot(
            *zip(*acc_points, strict=True), marker="s", linestyle="--", label="accuracy of kept traces (%)"
        )
        _band(ax_curve, ks, intervals, accuracy_key, 100.0, line.get_color())
    if report.accuracy is not None:
        ax_curve.axhline(100 * report.accuracy, color="grey", linewidth=0.8, label="accuracy, all traces (%)")
    if not frs_points and not acc_points:
        ax_curve.text(0.5, 0.5, "nothing scored", ha="center", va="center", transform=ax_curve.transAxes)
    if intervals:
        ax_curve.plot([], [], color="grey", alpha=0.25, linewidth=6, label="95% bootstrap interval (problems)")
    ax_curve.set_xlabel("K (% most confident traces kept)")
    ax_curve.set_ylim(0, 100)
    ax_curve.set_title("FRS@K", fontsize=10)
    ax_curve.grid(alpha=0.3)
    ax_curve.legend(fontsize=8)

    for label, flag, color in (("correct", True, "tab:green"), ("incorrect", False, "tab:red")):
        values = [t.confidence for t in traces if t.correct is flag and t.confidence is not None]
        if values:
            ax_hist.hist(values, bins=20, range=(0, 1), alpha=0.55, color=color, label=f"{label} (n={len(values)})")
    ax_hist.set_xlabel("tail confidence (mean of the lowest 10% token probabilities)")
    ax_hist.set_ylabel("traces")
    ax_hist.set_title("confidence by final-answer correctness", fontsize=10)
    ax_hist.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _band(ax, ks, intervals: dict | None, key, scale: float, color) -> None:
    """Shade [low, high] * scale of `intervals[key(k)]` over the Ks that have an interval, with a bar at each K."""
    points = [(k, intervals[key(k)]) for k in ks if intervals and intervals.get(key(k)) is not None]
    if points:
        xs = [k for k, _ in points]
        lows, highs = [scale * iv[0] for _, iv in points], [scale * iv[1] for _, iv in points]
        ax.fill_between(xs, lows, highs, color=color, alpha=0.2, linewidth=0)
        ax.vlines(xs, lows, highs, color=color, alpha=0.6)
