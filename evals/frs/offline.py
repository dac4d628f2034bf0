"""Offline FRS of a model on a benchmark (DESIGN §4 "FRS"): the library behind `procrl frs`.

`run_frs(args)` samples `args.n` traces per problem (temperature 0.7, no top-p/top-k by default) with a
`procrl.generation` rollout engine (`generation_backend`: auto = vLLM wherever it imports, else transformers),
takes each trace's tail confidence from the sampler's own raw (T = 1) log-probs, judges the traces FRS
needs (`procrl.evals.frs.plan_judging`) and writes into `args.output_dir`:

- `frs.json`: the report (FRS@K, accuracies, selection gain, counts, judge statistics), its 95% bootstrap intervals
  over problems (`intervals`: accuracy, accuracy@K, frs@K, selection_gain -> [low, high]; `bootstrap`: how;
  `procrl.evals.frs.intervals`, `bootstrap_resamples` draws, 0 = none), the settings, wall times and every trace
  (text, confidence, correctness, scores);
- `cache/`: the sample store (`procrl.evals.frs.sampling.sample_traces`: content-addressed rollout shards); an
  interrupted run started again with the same settings and engine resumes from it, and a rerun (e.g. with another
  judge) generates nothing;
- `frs.png`: the FRS@K curve (with the accuracy of the kept traces; their intervals as bands) and histograms of the confidence of correct and
  incorrect traces (`plot_frs`).

`judge: local` starts the embedded judge server for the run and stops it afterwards: vLLM's OpenAI server on the
default model (127.0.0.1; the reply's schema enforced, each score also read as a probability distribution), or,
where vLLM cannot be imported, a schema-constrained `TransformersJudge` in this process; `judge: serve:transformers`
is `transformers serve` (which ignores the schema); `judge: none` skips judging (accuracies and confidences only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from procrl.generation import SamplingParams
from procrl.judges import judge_options, open_judge
from procrl.evals.frs import FRSConfig, compute_frs
from procrl.evals.frs.intervals import accuracy_key, frs_intervals, frs_key
from procrl.evals.frs.sampling import sample_traces, select_traces
from procrl.evals.offline import OfflineSamplingConfig, load_rows, load_setup
from procrl.utils import get_logger, json_safe

logger = get_logger(__name__)

__all__ = ["OfflineFRSConfig", "plot_frs", "run_frs", "with_select_settings"]

# the settings a `--traces-from` select report gives the run (its policy, data slice and sampling)
SELECT_SETTINGS = ("model", "dataset", "split", "start", "end", "prompt_template", "n", "temperature", "top_p",
                   "max_new_tokens", "batch_size", "seed", "generation_backend")  # fmt: skip


@dataclass
class OfflineFRSConfig(OfflineSamplingConfig):
    """Settings of `procrl frs` (parsed by `TrlParser` in `procrl/scripts/frs.py`; flags `--k-values` or
    `--k_values` alike): the policy, problem slice and sampling of `OfflineSamplingConfig` (with FRS's defaults
    and help texts: gsm8k[0:50], traces), then the FRS settings.

    Raises:
        ValueError: (on construction) `k_values` is not comma-separated numbers; `n`, `batch_size` or
            `max_new_tokens` < 1 or `temperature` <= 0; the FRS settings are invalid (`FRSConfig`: K values are
            percentages in (0, 100], ...); or a bad `generation_backend` / `vllm_kv_cache_gib`.
    """

    # the shared fields whose default or help differs from `OfflineSamplingConfig` (they keep its field order)
    dataset: str = field(default="gsm8k", metadata={"help": "gsm8k, svamp, math500, or a local/hub data set"})
    end: int = field(default=50, metadata={"help": "end problem (exclusive); -1 = all"})
    max_new_tokens: int = field(default=256, metadata={"help": "token budget of one trace"})
    batch_size: int = field(default=32, metadata={"help": "traces per generate call"})
    seed: int = field(default=0, metadata={"help": "sampling seed and FRS hash seed"})
    # the FRS settings
    n: int = field(default=16, metadata={"help": "traces per problem"})
    k: float = field(default=10, metadata={"help": "K of the headline FRS (top K%% most confident traces)"})
    k_values: str = field(default="10,20,30,40,50", metadata={"help": "K values of the FRS@K curve (comma-separated)"})
    judge: str = field(
        default="local",
        metadata={
            "help": "'local' / 'local:<model>' (vLLM's OpenAI server, schema enforced), 'serve:transformers[:<model>]', "
            "'transformers:<model>' (in-process, constrained), a URL, or 'none'"
        },
    )
    judge_concurrency: int = field(default=8, metadata={"help": "judge requests in flight at once"})
    judge_max_tokens: int = field(
        default=96, metadata={"help": "token budget of one judge reply (the JSON of four scores is ~30 tokens)"}
    )
    judge_timeout: float = field(
        default=600,
        metadata={
            "help": "seconds one judge request may take, queueing in the server included (a loaded CPU server can "
            "take minutes for a queue of 8)"
        },
    )
    judge_cache_dir: str | None = field(
        default=None, metadata={"help": "on-disk judge cache (default: <output-dir>/judge_cache)"}
    )
    judge_sees_correctness: bool = field(
        default=True,
        metadata={
            "help": 'show the judge the final-answer check {"final_correct": ...}; false drops it from the prompt'
        },
    )
    estimator: Literal["topk", "bins"] = field(default="topk", metadata={"help": "exact top-K, or the paper's bins"})
    n_bins: int = field(default=10, metadata={"help": "bins of the bin estimator"})
    max_per_bin: int = field(default=50, metadata={"help": "judged traces per bin (bin estimator)"})
    random_baseline: Literal["sample", "mean"] = field(
        default="sample",
        metadata={
            "help": "selection gain's RS(random): one seeded random trace, or the mean over the question's traces"
        },
    )
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
            "help": "a `procrl select` report (JSON, its sample store cache/ next to it): its samples are the traces "
            "(no sampling; model, data slice, sampling settings and seed come from the report), so best-of-N and "
            "FRS share one sample set"
        },
    )
    output_dir: str = field(default="outputs/frs", metadata={"help": "where frs.json and frs.png go"})

    def __post_init__(self) -> None:
        self.frs_config()  # raises on invalid settings, with procrl frs's messages (not OfflineSamplingConfig's)
        if self.bootstrap_resamples < 0:
            raise ValueError(f"--bootstrap-resamples must be >= 0 (0 = no intervals), got {self.bootstrap_resamples}")
        problems = self.engine_problems()
        if problems:
            raise ValueError("; ".join(problems))

    def k_value_list(self) -> tuple[float, ...]:
        """`k_values` parsed ("10,20" -> (10.0, 20.0); empty items skipped)."""
        try:
            return tuple(float(k) for k in self.k_values.split(",") if k.strip())
        except ValueError:
            raise ValueError(
                f"--k-values must be comma-separated numbers, got {self.k_values!r} (e.g. --k-values 10,20,30,40,50)"
            ) from None

    def frs_config(self) -> FRSConfig:
        """The FRS settings of the run (`procrl.evals.frs.FRSConfig`).

        Raises:
            ValueError: see the class docstring.
        """
        k_values = self.k_value_list()
        if self.n < 1 or self.batch_size < 1 or self.max_new_tokens < 1 or self.temperature <= 0:
            raise ValueError(
                "--n, --batch-size and --max-new-tokens must be >= 1 and --temperature > 0, got "
                f"{self.n}, {self.batch_size}, {self.max_new_tokens} and {self.temperature}"
            )
        return FRSConfig(
            k_percent=self.k,
            k_values=k_values,
            estimator=self.estimator,
            n_bins=self.n_bins,
            max_per_bin=self.max_per_bin,
            random_baseline=self.random_baseline,
            seed=self.seed,
            judge_sees_correctness=self.judge_sees_correctness,
        )


def run_frs(args: OfflineFRSConfig) -> dict:
    """Generate, judge, write frs.json and frs.png; returns what frs.json holds, plus `paths` (json, plot)."""
    config = args.frs_config()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.traces_from:
        args = with_select_settings(args)
        t_gen = time.perf_counter()
        dataset = load_rows(args)
        traces = select_traces(args.traces_from, dataset, tail_fraction=config.tail_fraction)
        traces_engine = json.loads(Path(args.traces_from).read_text())["samples"].get("engine")
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
            n_traces=args.n,
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
    with contextlib.ExitStack() as stack:
        judge = None
        if args.judge.lower() != "none":
            cache_dir = args.judge_cache_dir or str(out / "judge_cache")
            options = judge_options(args.judge, max_tokens=args.judge_max_tokens, timeout_s=args.judge_timeout)
            judge = stack.enter_context(
                open_judge(args.judge, cache_dir=cache_dir, max_concurrency=args.judge_concurrency, **options)
            )
        report = compute_frs(traces, judge, config, progress=not args.no_progress)
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
            "n_traces": args.n,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "max_new_tokens": args.max_new_tokens,
            "seed": args.seed,
            "judge": args.judge,
            "judge_max_tokens": args.judge_max_tokens,
            "judge_timeout_s": args.judge_timeout,
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
        "traces": [t.to_dict() for t in traces],
    }
    (out / "frs.json").write_text(json.dumps(json_safe(result), indent=2))
    title = f"{args.model} on {result['dataset']}, {args.n} traces/problem"
    plot_frs(report, traces, out / "frs.png", title=title, intervals=bootstrap["intervals"])
    result["paths"] = {"json": str(out / "frs.json"), "plot": str(out / "frs.png")}
    return result


def with_select_settings(args: OfflineFRSConfig) -> OfflineFRSConfig:
    """`args` with the policy, data slice, sampling settings and seed of its `traces_from` select report
    (`SELECT_SETTINGS`; top-k off, as `procrl select` samples); settings the flags gave otherwise are logged.

    Raises:
        ValueError: the report is unreadable or has no `settings` (not a `procrl select` report).
    """
    try:
        settings = json.loads(Path(args.traces_from).read_text())["settings"]
        changes = {key: settings[key] for key in SELECT_SETTINGS if key in settings}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--traces-from {args.traces_from}: not a readable `procrl select` report ({err})") from None
    changes["top_k"] = 0
    for key, value in changes.items():
        if getattr(args, key) != value:
            logger.info("frs: %s = %r from --traces-from (not %r)", key, value, getattr(args, key))
    return dataclasses.replace(args, **changes)


def plot_frs(report, traces, path: str | Path, title: str = "", intervals: dict | None = None) -> Path:
    """Two panels: FRS@K (and the accuracy of the kept traces, in %) against K; confidence histograms of correct
    and incorrect traces (traces with an unparseable gold or no confidence left out).

    Args:
        report: a `procrl.evals.frs.FRSReport` (`at_k`, `accuracy_at_k`, `accuracy`).
        traces: the `Trace`s it was computed from (`correct`, `confidence`).
        path: the PNG to write (110 dpi).
        title: the figure's title.
        intervals: `frs.json`'s `intervals` (name -> [low, high] or None, `procrl.evals.frs.intervals`); each
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
