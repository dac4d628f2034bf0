"""Compare `procrl frs` runs: does FRS rank models as accuracy does (issue 17, comparison 3)? The library of
`procrl frs compare` (`build_comparison`, then `write_comparison`).

The claim checked (FRS, arXiv 2604.11996; docs/architecture.md "FRS"): FRS separates models that accuracy cannot, and the
rankings by accuracy and by FRS can invert. Each run (its `run.json`: the `result` of `procrl frs`) is one row,
labelled by its `model` and its benchmark (the result's `dataset`, slice included: gsm8k[0:50] and gsm8k[0:100] are
different benchmarks). Its numbers are the report's own (accuracy, accuracy@K, FRS@K, selection gain) with their 95%
bootstrap intervals over problems: the result's `intervals` when it has them (a run with `--bootstrap-resamples 0`
has none), else computed from its judged traces (`judged_traces.jsonl`, `procrl.evals.frs.intervals`; nothing is
judged again).

Per benchmark, every model is ranked by accuracy and by FRS@K (K: the given one, else the reports' headline K;
rank 1 = highest; equal values share the better rank; a model without the value is unranked). Per pair of models:

- `inverted`: the point estimates order the pair one way by accuracy and the other way by FRS@K (ties invert
  nothing);
- `accuracy_intervals_overlap`, `frs_intervals_overlap`: whether the two models' intervals overlap (None without
  intervals);
- `inverted_beyond_intervals`: inverted and neither pair of intervals overlaps (a conservative reading: two 95%
  intervals that do not overlap differ at well below the 5% level);
- `frs_separates`: the accuracy intervals overlap and the FRS@K intervals do not (FRS separates what accuracy cannot);
- `paired`: when both runs have judged traces on the same problems, the PAIRED bootstrap difference (first − second)
  of accuracy and FRS@K over those problems (`procrl.evals.frs.intervals.paired_differences`: one problem multiset per
  resample for both models), and `frs_separates_paired`: the FRS@K difference interval excludes 0 while the accuracy
  difference interval contains 0 or lies inside ±`EQUIVALENCE` (issue 28's rule). None without traces.

A pair whose runs answered different problems stays unpaired (`paired` None). A run whose model is an absolute path
(a checkpoint directory) is labelled by its run directory's name in the tables.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from procrl.evals.frs.arguments import FRSConfig
from procrl.evals.frs.intervals import (
    ACCURACY,
    SELECTION_GAIN,
    accuracy_key,
    config_from_result,
    frs_key,
    intervals_from_result,
    paired_differences,
)
from procrl.evals.frs.traces import Trace, read_traces
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, MISSING, format_estimate

__all__ = [
    "EQUIVALENCE",
    "FILES",
    "FRSRun",
    "build_comparison",
    "compare_runs",
    "format_table",
    "load_frs_run",
    "plot_compare",
    "rank_descending",
    "write_comparison",
]

# what `write_comparison` writes: role -> file name
FILES = {"table": "table.md", "plot": "frs_compare.png"}
# the run record of a run directory (`procrl.experiment.tracking.RUN_FILE`, a higher layer: read here as plain JSON)
RUN_JSON = "run.json"
# an accuracy difference inside +-EQUIVALENCE counts as "accuracy does not separate" (issue 28: "within 3 points")
EQUIVALENCE = 0.03


@dataclass
class FRSRun:
    """One `procrl frs` run, as the comparison reads it.

    Attributes:
        path: the run directory. model, benchmark: its label (the result's `model` and `dataset`).
        k_percent: the report's headline K; k_values: the Ks of its FRS@K curve.
        n_problems, n_traces: the report's counts.
        values: name -> value (`accuracy`, `accuracy@K`, `frs@K`, `selection_gain`; accuracies in [0, 1], FRS and
            the gain in RS units 0-100; None = not measured).
        intervals: name -> [low, high] or None (empty without intervals).
        intervals_source: "report" (the result had them), "traces" (computed here from its judged traces) or "none".
        label: what the tables call it: the model, or the run directory's name when the model is a path.
    """

    path: str
    model: str
    benchmark: str
    k_percent: float
    k_values: list[float]
    n_problems: int
    n_traces: int
    values: dict[str, float | None]
    intervals: dict[str, list[float] | None]
    intervals_source: str
    label: str = ""


def load_frs_run(path: str | Path, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int | None = None) -> FRSRun:
    """Read one `procrl frs` run: its directory (or the `run.json` in it).

    Args:
        path: the run directory, or its run.json.
        resamples: bootstrap draws for a result without `intervals` (computed from its judged traces); 0 = leave it
            without. seed: their seed (None = the run's FRS seed, as `procrl frs` uses).

    Raises:
        FileNotFoundError: no run.json there.
        ValueError: not JSON, not a finished `procrl frs` run (command, status, a result with model / dataset /
            settings / report), or its judged traces do not read back when intervals must be computed.
    """
    path = Path(path)
    run_dir = path.parent if path.name == RUN_JSON else path
    record_path = run_dir / RUN_JSON
    if not record_path.is_file():
        raise FileNotFoundError(f"{run_dir}: no {RUN_JSON} here (give the output directory of a `procrl frs` run)")
    try:
        record = json.loads(record_path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{record_path} is not JSON ({error})") from error
    command = record.get("command") if isinstance(record, Mapping) else None
    if command != "frs":
        raise ValueError(f"{record_path} is not the record of a `procrl frs` run (its command: {command!r})")
    if record.get("status") != "finished":
        raise ValueError(f"{record_path}: the run is {record.get('status')!r}, not finished; run it to the end first")
    result = record.get("result")
    report = result.get("report") if isinstance(result, Mapping) else None
    if not isinstance(report, Mapping) or not all(key in result for key in ("model", "dataset", "settings")):
        raise ValueError(f"{record_path} holds no procrl frs result: it needs model, dataset, settings and report")
    try:
        at_k = {float(k): v for k, v in report["at_k"].items()}
        accuracy_at_k = {float(k): v for k, v in report["accuracy_at_k"].items()}
        values: dict[str, float | None] = {ACCURACY: report["accuracy"]}
        values |= {accuracy_key(k): v for k, v in sorted(accuracy_at_k.items())}
        values |= {frs_key(k): v for k, v in sorted(at_k.items())}
        values[SELECTION_GAIN] = report["selection_gain"]
        k_percent, n_problems, n_traces = float(report["k_percent"]), int(report["n_problems"]), int(report["n_traces"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        problem = f"{type(error).__name__}: {error}"
        raise ValueError(f"{record_path}: the report lacks a field FRS needs ({problem})") from error
    intervals, source = result.get("intervals"), "report"
    traces_file = (record.get("files") or {}).get("judged_traces")
    if not intervals:
        intervals, source = {}, "none"
        if resamples > 0 and traces_file:
            try:
                traces = read_traces(run_dir / traces_file)
                intervals = intervals_from_result(result, traces, resamples=resamples, seed=seed).to_dict()["intervals"]
            except (OSError, ValueError) as error:
                raise ValueError(f"{run_dir}: {error}") from error
            source = "traces"
    return FRSRun(
        path=str(run_dir),
        model=str(result["model"]),
        benchmark=str(result["dataset"]),
        k_percent=k_percent,
        k_values=sorted(at_k),
        n_problems=n_problems,
        n_traces=n_traces,
        values=values,
        intervals={k: (None if v is None else [float(v[0]), float(v[1])]) for k, v in intervals.items()},
        intervals_source=source,
        label=run_dir.name if Path(str(result["model"])).is_absolute() else str(result["model"]),
    )


def load_judged_traces(path: str | Path) -> tuple[list[Trace], FRSConfig] | None:
    """The judged traces and the FRS config of the `procrl frs` run at `path` (its directory), or None when the run
    kept no `judged_traces` file or an empty one. Raises ValueError / OSError when they do not read back."""
    run_dir = Path(path)
    record = json.loads((run_dir / RUN_JSON).read_text())
    traces_file = (record.get("files") or {}).get("judged_traces")
    if not traces_file or not (run_dir / traces_file).is_file():
        return None
    traces = read_traces(run_dir / traces_file)
    return (traces, config_from_result(record["result"])) if traces else None


def rank_descending(values: Sequence[float | None]) -> list[int | None]:
    """Competition ranks, highest value first: 1 + the number of strictly higher values; None stays unranked.

    >>> rank_descending([0.5, 0.7, 0.5, None])
    [2, 1, 2, None]
    """
    known = [v for v in values if v is not None]
    return [None if v is None else 1 + sum(other > v for other in known) for v in values]


def _order(a: float | None, b: float | None) -> str | None:
    if a is None or b is None:
        return None
    return ">" if a > b else "<" if a < b else "="


def _overlap(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    """Whether the closed intervals a and b share a point (None when either is missing)."""
    if a is None or b is None:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


def compare_runs(
    runs: Sequence[FRSRun],
    k: float | None = None,
    *,
    traces: Mapping[str, tuple[Sequence[Trace], FRSConfig]] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Ranks by accuracy and by FRS@K per benchmark, and every pair's inversion and interval overlaps (see the
    module docstring).

    Args:
        runs: the loaded reports, at most one per (model, benchmark).
        k: the FRS@K the ranking uses; None = the headline K of the benchmark's reports.
        traces: run path -> (judged traces, FRS config), for the paired differences (`load_judged_traces`); a pair
            with either run missing gets `paired` None. resamples, seed: the paired bootstrap's.

    Returns:
        `{"runs": [FRSRun as dict], "benchmarks": {benchmark: {"k", "models": [{model, accuracy, frs, rank_accuracy,
        rank_frs}], "pairs": [{models, accuracy_order, frs_order, inverted, accuracy_intervals_overlap,
        frs_intervals_overlap, inverted_beyond_intervals, frs_separates, paired, frs_separates_paired}], "inverted",
        "inverted_beyond_intervals", "frs_separates"}}, "counts": {...}}`; orders are ">", "<", "=" (first model vs
        second) or None; `paired`: {"accuracy": {difference, interval, n_undefined}, "frs@K": {...}} or None.

    Raises:
        ValueError: no runs; two runs with the same (model, benchmark); the reports of a benchmark have different
            headline Ks and no `k` is given; a report has no FRS@K for the K used; two runs with traces answered
            different problems (`paired_differences`).
    """
    if not runs:
        raise ValueError("no procrl frs run to compare")
    by_benchmark: dict[str, list[FRSRun]] = defaultdict(list)
    seen: dict[tuple[str, str], str] = {}
    for run in runs:
        label = (run.model, run.benchmark)
        if label in seen:
            raise ValueError(f"two reports of {run.model} on {run.benchmark}: {seen[label]} and {run.path}")
        seen[label] = run.path
        by_benchmark[run.benchmark].append(run)
    benchmarks = {}
    for benchmark, group in by_benchmark.items():
        heads = sorted({run.k_percent for run in group})
        if k is None and len(heads) > 1:
            raise ValueError(
                f"the reports on {benchmark} have different headline Ks ({', '.join(f'{h:g}' for h in heads)}): "
                "choose one with --k"
            )
        used = float(k) if k is not None else heads[0]
        key = frs_key(used)
        for run in group:
            if key not in run.values:
                have = ", ".join(f"{v:g}" for v in run.k_values)
                raise ValueError(f"{run.path} has no FRS@{used:g} (its Ks: {have}); choose one of them with --k")
        benchmarks[benchmark] = _compare_benchmark(group, key, used, traces or {}, resamples, seed)
    pairs = [pair for entry in benchmarks.values() for pair in entry["pairs"]]
    counts = {
        "runs": len(runs),
        "benchmarks": len(benchmarks),
        "pairs": len(pairs),
        "inverted": sum(p["inverted"] is True for p in pairs),
        "inverted_beyond_intervals": sum(p["inverted_beyond_intervals"] is True for p in pairs),
        "frs_separates": sum(p["frs_separates"] is True for p in pairs),
        "frs_separates_paired": sum(p["frs_separates_paired"] is True for p in pairs),
    }
    return {"runs": [asdict(run) for run in runs], "benchmarks": benchmarks, "counts": counts}


def _separates_paired(paired: Mapping[str, Any], key: str) -> bool | None:
    """The FRS@K difference interval excludes 0 and the accuracy one contains 0 or lies inside +-EQUIVALENCE."""
    acc, frs = paired[ACCURACY]["interval"], paired[key]["interval"]
    if acc is None or frs is None:
        return None
    accuracy_silent = acc[0] <= 0.0 <= acc[1] or (-EQUIVALENCE <= acc[0] and acc[1] <= EQUIVALENCE)
    return accuracy_silent and (frs[0] > 0.0 or frs[1] < 0.0)


def _compare_benchmark(
    group: Sequence[FRSRun], key: str, k: float, traces: Mapping[str, tuple], resamples: int, seed: int
) -> dict[str, Any]:
    accuracy = [run.values[ACCURACY] for run in group]
    frs = [run.values[key] for run in group]
    rank_acc, rank_frs = rank_descending(accuracy), rank_descending(frs)
    models = [
        {"model": run.label or run.model, "accuracy": a, "frs": f, "rank_accuracy": ra, "rank_frs": rf}
        for run, a, f, ra, rf in zip(group, accuracy, frs, rank_acc, rank_frs, strict=True)
    ]
    pairs = []
    for a, b in combinations(group, 2):
        acc_order = _order(a.values[ACCURACY], b.values[ACCURACY])
        frs_order = _order(a.values[key], b.values[key])
        inverted = None if acc_order is None or frs_order is None else {acc_order, frs_order} == {">", "<"}
        acc_overlap = _overlap(a.intervals.get(ACCURACY), b.intervals.get(ACCURACY))
        frs_overlap = _overlap(a.intervals.get(key), b.intervals.get(key))
        beyond = inverted
        if inverted:
            beyond = None if acc_overlap is None or frs_overlap is None else not acc_overlap and not frs_overlap
        separates = None if acc_overlap is None or frs_overlap is None else acc_overlap and not frs_overlap
        paired = None
        if a.path in traces and b.path in traces:
            (ta, ca), (tb, cb) = traces[a.path], traces[b.path]
            try:
                paired = paired_differences(ta, ca, tb, cb, [ACCURACY, key], resamples=resamples, seed=seed)
            except ValueError:  # other problems (e.g. another slice of the benchmark): unpaired, as before
                paired = None
        pairs.append({
            "models": [a.label or a.model, b.label or b.model],
            "accuracy_order": acc_order,
            "frs_order": frs_order,
            "inverted": inverted,
            "accuracy_intervals_overlap": acc_overlap,
            "frs_intervals_overlap": frs_overlap,
            "inverted_beyond_intervals": beyond,
            "frs_separates": separates,
            "paired": paired,
            "frs_separates_paired": None if paired is None else _separates_paired(paired, key),
        })  # fmt: skip
    return {
        "k": k,
        "metric": key,
        "models": models,
        "pairs": pairs,
        "inverted": any(p["inverted"] is True for p in pairs),
        "inverted_beyond_intervals": any(p["inverted_beyond_intervals"] is True for p in pairs),
        "frs_separates": any(p["frs_separates"] is True for p in pairs),
    }


def _cell(value: float | None, interval: Sequence[float] | None, scale: float = 1.0) -> str:
    """`value [lo, hi]` with one decimal ("–" when not measured or undefined)."""
    return format_estimate(value, interval, ".1f", scale)


def _yes_no(flag: bool | None) -> str:
    return {None: MISSING, True: "yes", False: "no"}[flag]


def format_table(comparison: Mapping[str, Any]) -> str:
    """The markdown of `table.md`: one row per (model, benchmark) with accuracy, the top-K% accuracy (K of the
    ranking), FRS@K for every K any report has and the selection gain, each `value [lo, hi]`; then per benchmark
    the ranks by accuracy and by FRS@K and every pair's inversion and interval overlaps."""
    runs = comparison["runs"]
    benchmarks = comparison["benchmarks"]
    ks = sorted({k for run in runs for k in run["k_values"]})
    heads = sorted({entry["k"] for entry in benchmarks.values()})
    top = f"top-{heads[0]:g}% accuracy (%)" if len(heads) == 1 else "top-K% accuracy (%, K of the ranking)"
    header = ["model", "benchmark", "problems", "traces", "accuracy (%)", top, *(f"FRS@{k:g}" for k in ks), "gain"]
    lines = ["# FRS vs accuracy", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        values, intervals = run["values"], run["intervals"]
        top_key = accuracy_key(benchmarks[run["benchmark"]]["k"])
        cells = [
            run.get("label") or run["model"],
            run["benchmark"],
            str(run["n_problems"]),
            str(run["n_traces"]),
            _cell(values.get(ACCURACY), intervals.get(ACCURACY), 100),
            _cell(values.get(top_key), intervals.get(top_key), 100),
            *(_cell(values.get(frs_key(k)), intervals.get(frs_key(k))) for k in ks),
            _cell(values.get(SELECTION_GAIN), intervals.get(SELECTION_GAIN)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    computed = [run["path"] for run in runs if run["intervals_source"] == "traces"]
    missing = [run["path"] for run in runs if run["intervals_source"] == "none"]
    lines += [
        "",
        "[lo, hi]: 95% percentile bootstrap interval over problems (each resample re-ranks its traces by confidence "
        "and re-selects the top K%). FRS and the selection gain (gain: RS(most confident) - RS(random)) in RS units "
        "(0-100); accuracies in %; – = not measured.",
    ]
    if computed:
        lines.append(f"Intervals computed here from the traces (the report had none): {', '.join(computed)}.")
    if missing:
        lines.append(f"No intervals: {', '.join(missing)}.")
    for benchmark, entry in benchmarks.items():
        metric = f"FRS@{entry['k']:g}"
        lines += ["", f"## {benchmark}: rank by accuracy and by {metric}", ""]
        lines += [f"| model | accuracy (%) | rank by accuracy | {metric} | rank by {metric} |", "|---|---|---|---|---|"]
        for row in entry["models"]:
            rank_a = MISSING if row["rank_accuracy"] is None else str(row["rank_accuracy"])
            rank_f = MISSING if row["rank_frs"] is None else str(row["rank_frs"])
            acc = _cell(row["accuracy"], None, 100)
            lines.append(f"| {row['model']} | {acc} | {rank_a} | {_cell(row['frs'], None)} | {rank_f} |")
        if entry["pairs"]:
            lines += [
                "",
                f"| models | accuracy | {metric} | inverted | accuracy intervals overlap | {metric} intervals overlap "
                f"| inverted beyond intervals | {metric} separates, accuracy does not |",
                "|---|---|---|---|---|---|---|---|",
            ]
        for pair in entry["pairs"]:
            a, b = pair["models"]
            order_a = f"{a} {pair['accuracy_order'] or '?'} {b}"
            order_f = f"{a} {pair['frs_order'] or '?'} {b}"
            flags = (pair[key] for key in ("inverted", "accuracy_intervals_overlap", "frs_intervals_overlap"))
            lines.append(
                f"| {a} vs {b} | {order_a} | {order_f} | "
                + " | ".join(_yes_no(f) for f in flags)
                + f" | {_yes_no(pair['inverted_beyond_intervals'])} | {_yes_no(pair['frs_separates'])} |"
            )
        with_paired = [pair for pair in entry["pairs"] if pair.get("paired")]
        if with_paired:
            lines += [
                "",
                f"| models (first − second) | accuracy difference (points) | {metric} difference | {metric} separates, "
                f"accuracy does not (paired, accuracy within ±{100 * EQUIVALENCE:g} points counts as equal) |",
                "|---|---|---|---|",
            ]
        for pair in with_paired:
            acc, frs = pair["paired"][ACCURACY], pair["paired"][entry["metric"]]
            lines.append(
                f"| {' − '.join(pair['models'])} | {_cell(acc['difference'], acc['interval'], 100)} | "
                f"{_cell(frs['difference'], frs['interval'])} | {_yes_no(pair['frs_separates_paired'])} |"
            )
    return "\n".join(lines) + "\n"


def plot_compare(comparison: Mapping[str, Any], path: str | Path) -> Path:
    """FRS@K against K, one line per model with its interval as a band, one panel per benchmark (110 dpi PNG)."""
    import matplotlib  # optional heavy dependency: only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional heavy dependency (see above)

    names = list(comparison["benchmarks"])
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4), squeeze=False)
    for ax, benchmark in zip(axes[0], names, strict=True):
        for run in (r for r in comparison["runs"] if r["benchmark"] == benchmark):
            points = [(k, run["values"][frs_key(k)]) for k in run["k_values"] if run["values"][frs_key(k)] is not None]
            if not points:
                continue
            (line,) = ax.plot(*zip(*points, strict=True), marker="o", label=run.get("label") or run["model"])
            band = [(k, run["intervals"].get(frs_key(k))) for k, _ in points]
            band = [(k, iv) for k, iv in band if iv is not None]
            if band:  # a band over the Ks with an interval, and a bar at each (one K alone has no band)
                ks, lows, highs = [k for k, _ in band], [iv[0] for _, iv in band], [iv[1] for _, iv in band]
                ax.fill_between(ks, lows, highs, color=line.get_color(), alpha=0.2, linewidth=0)
                ax.vlines(ks, lows, highs, color=line.get_color(), alpha=0.6)
        if not ax.lines:
            ax.text(0.5, 0.5, "nothing scored", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.legend(fontsize=8)
        ax.set_title(f"{benchmark} (bands: 95% bootstrap over problems)", fontsize=9)
        ax.set_xlabel("K (% most confident traces kept)")
        ax.set_ylabel("FRS@K (RS, 0-100)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def build_comparison(
    paths: Sequence[str | Path],
    *,
    k: float | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int | None = None,
) -> dict[str, Any]:
    """`compare_runs` of the `procrl frs` runs at `paths` (`load_frs_run` with `resamples` and `seed`), with the
    paired differences of every pair whose runs kept judged traces (`resamples` 0: none; seed None: 0).

    Raises:
        FileNotFoundError, ValueError: from `load_frs_run` and `compare_runs`.
    """
    runs = [load_frs_run(p, resamples=resamples, seed=seed) for p in paths]
    traces = {}
    if resamples > 0:
        for run in runs:
            try:
                loaded = load_judged_traces(run.path)
            except (OSError, ValueError, KeyError) as error:
                raise ValueError(f"{run.path}: the judged traces do not read back ({error})") from error
            if loaded is not None:
                traces[run.path] = loaded
    paired_seed = 0 if seed is None else seed
    return compare_runs(runs, k, traces=traces, resamples=resamples, seed=paired_seed)


def write_comparison(comparison: dict[str, Any], output_dir: str | Path) -> dict[str, str]:
    """Write `table.md` and `frs_compare.png` into `output_dir` (created); returns `FILES` (role -> name in
    `output_dir`). The comparison itself is the command's result (run.json)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / FILES["table"]).write_text(format_table(comparison))
    plot_compare(comparison, out / FILES["plot"])
    return dict(FILES)
