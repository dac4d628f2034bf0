"""Compare runs from their records (`procrl.experiment.run_records.load_runs`: run.json files): group them into
variants (the seeds of one setting) and render a markdown table and plots against the training step.

    runs = load_runs(["runs/sweeps/reward_ablation"])        # procrl.experiment.run_records
    variants = group_variants(runs)                           # one Variant per setting, its seeds as runs
    text = format_report(variants, "reward ablation", metric=sweep_metric(sweep_dir), plot="curves.png")
    plot_curves(variants, "report/curves.png")

Conventions (the report says them too): a variant's value is the mean over its FINISHED seeds, "± s" the SAMPLE
standard deviation (n - 1 in the denominator; none for one seed), "(k/n seeds)" when only k of its n finished runs
have the value; each seed's task accuracy comes with its Wilson 95% interval from `task/correct` and `task/n`; a
value no run has is "–", never 0. Unfinished runs never enter a mean, std, sort or best: their values follow the
mean one by one, marked ("0.500; s2 (failed) 0.300"). Variant names: `group_variants`. The figure (`plot_curves`):
each `CURVE_PANELS` key of the runs' `history` against the step, a line per variant (mean over its seeds) with its
min-max band over seeds."""

from __future__ import annotations

import fnmatch
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procrl.evals.reporting import CURVE_KEYS, figure, markdown_table
from procrl.evals.stats import MISSING, mean_std, wilson_interval
from procrl.experiment.sweeps import variant_name
from procrl.experiment.tracking import is_number
from procrl.utils import get_logger

__all__ = [
    "CURVE_PANELS",
    "MISSING",
    "Variant",
    "format_report",
    "format_table",
    "group_variants",
    "metric_columns",
    "plot_curves",
    "series",
]

logger = get_logger(__name__)

# (metric key, column header, decimals): the fixed columns after the accuracy ones
VALUE_COLUMNS = (
    ("task/accuracy_before", "accuracy before", 3),
    ("reward", "reward", 3),
    ("completions/mean_length", "length (tokens)", 1),
)
FRS_KEYS = (("frs/score", "FRS", 1),)  # shown when some run measured it
_LABELS = dict(CURVE_KEYS)
CURVE_PANELS = (  # (history key, panel title), in the order of the figure's panels
    ("task/accuracy", _LABELS["task/accuracy"]),
    ("reward", _LABELS["reward"]),
    ("completions/mean_length", _LABELS["completions/mean_length"]),
    ("hacking/reward_accuracy_corr", "reward-accuracy correlation (rolling)"),
)
NO_PARAMETERS = "(no parameters)"


# ----------------------------------------------------------------------------------------------------------------------
# Grouping
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class Variant:
    """The runs of one setting: `parameters` are the variant's parameters without `seed`; `runs` are sorted by seed."""

    name: str
    parameters: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)

    def seed_of(self, run: dict[str, Any]) -> Any:
        """The run's seed: `variant.seed`, else the `seed` parameter, else None."""
        variant = run.get("variant") or {}
        seed = variant.get("seed")
        return seed if seed is not None else (variant.get("parameters") or {}).get("seed")

    @property
    def finished(self) -> list[dict[str, Any]]:
        """The runs whose status is "finished": the only ones a mean, std, sort or best is taken over."""
        return [run for run in self.runs if run.get("status") == "finished"]

    def values(self, key: str) -> list[float]:
        """The finished runs' final `metrics[key]` (finite numbers only; runs without it left out)."""
        return [v for run in self.finished if is_number(v := (run.get("metrics") or {}).get(key))]


def group_variants(runs: Iterable[dict[str, Any]]) -> list[Variant]:
    """Group runs by (sweep, parameters without `seed`); a run without a `variant` is a group of its own (named by its
    directory). Groups keep the order of their first run. A group's name is `procrl.experiment.sweeps.variant_name` of its
    parameters without `seed`, over the parameters whose values differ between the groups of its sweep (all of them
    when its sweep has one group; "(no parameters)" for none): `reward=pum` of `{reward: pum, max_steps: 2, seed: 1}`
    beside `reward=outcome`. Names that coincide get all the parameters (within a sweep), "<sweep>/" in front
    (across sweeps), then " #2", " #3"."""
    groups: dict[tuple, Variant] = {}
    for run in runs:
        variant = run.get("variant")
        if isinstance(variant, dict) and isinstance(variant.get("parameters"), dict):
            parameters = {k: v for k, v in variant["parameters"].items() if k != "seed"}
            key = ("variant", str(variant.get("sweep")), json.dumps(parameters, sort_keys=True, default=str))
        else:
            parameters, key = {}, ("run", run["path"])
        if key not in groups:
            groups[key] = Variant(name=Path(run["path"]).name if key[0] == "run" else "", parameters=parameters)
        groups[key].runs.append(run)
    _name_groups({k: g for k, g in groups.items() if k[0] == "variant"})
    for group in groups.values():
        group.runs.sort(key=lambda r: (str(group.seed_of(r)), r["path"]))
        seeds = [group.seed_of(r) for r in group.runs if group.seed_of(r) is not None]
        if len(seeds) != len(set(map(str, seeds))):
            logger.warning("variant %s has several runs with the same seed: %s", group.name, seeds)
    return list(groups.values())


def _name_groups(groups: dict[tuple, Variant]) -> None:
    """Name the groups of sweep variants, keyed ("variant", sweep, parameters) (`group_variants`)."""
    by_sweep: dict[str, list[Variant]] = {}
    for key, group in groups.items():
        by_sweep.setdefault(key[1], []).append(group)
    for members in by_sweep.values():
        every = {k for g in members for k in g.parameters}
        as_text = lambda g, k: json.dumps(g.parameters.get(k, "\0absent"), sort_keys=True, default=str)  # noqa: E731
        differ = {k for k in every if len({as_text(g, k) for g in members}) > 1}
        for group in members:
            shown = [k for k in group.parameters if k in differ] if differ else list(group.parameters)
            group.name = variant_name(group.parameters, shown) if group.parameters else NO_PARAMETERS
        for clashing in _clashes(members):  # names that coincide within a sweep: all parameters
            for group in clashing:
                group.name = variant_name(group.parameters) if group.parameters else NO_PARAMETERS
    sweep_of = {id(group): key[1] for key, group in groups.items()}
    for clashing in (c for c in _clashes(list(groups.values())) if len({sweep_of[id(g)] for g in c}) > 1):
        for group in clashing:  # the same name in several sweeps: "<sweep>/<name>"
            group.name = f"{sweep_of[id(group)]}/{group.name}"
    for clashing in _clashes(list(groups.values())):
        for number, group in enumerate(clashing[1:], start=2):
            group.name = f"{group.name} #{number}"


def _clashes(groups: list[Variant]) -> list[list[Variant]]:
    names: dict[str, list[Variant]] = {}
    for group in groups:
        names.setdefault(group.name, []).append(group)
    return [same for same in names.values() if len(same) > 1]


# ----------------------------------------------------------------------------------------------------------------------
# Table
# ----------------------------------------------------------------------------------------------------------------------


def metric_columns(variants: Sequence[Variant], patterns: Sequence[str]) -> list[str]:
    """The recorded metric keys (`metrics` of some run) that match one of the shell-style `patterns`
    (`fnmatch`, e.g. "bestofn/*/acc@16"), in pattern order, sorted within a pattern, each once.

    >>> runs = [{"metrics": {"bestofn/picsar/acc@16": 0.1, "bestofn/random/acc@16": 0.2, "frs/score": 3.0}}]
    >>> metric_columns([Variant("v", {}, runs)], ["bestofn/*/acc@16", "frs/*"])
    ['bestofn/picsar/acc@16', 'bestofn/random/acc@16', 'frs/score']
    """
    keys = sorted({k for v in variants for r in v.runs for k in (r.get("metrics") or {})})
    chosen: list[str] = []
    for pattern in patterns:
        chosen += [k for k in keys if fnmatch.fnmatchcase(k, pattern) and k not in chosen]
    return chosen


def format_table(
    variants: Sequence[Variant], metric: dict[str, str] | None = None, extra_metrics: Sequence[str] = ()
) -> str:
    """A markdown table, one row per variant: status, seeds, task accuracy (mean ± std over seeds, then each seed's
    value with its Wilson 95% interval), accuracy before training, reward, completion length, FRS and every
    `hacking/...` key that some run has, and wall time. Means and stds are over the finished runs; an unfinished
    run's value follows, marked with its status ("0.500; s2 (running) 0.200"). With a sweep `metric` the rows are
    sorted by its mean over finished runs (best first; variants without one last) and the best value is bold; a
    metric that is no column gets one. `extra_metrics`: shell-style patterns of more metric keys to show, each
    matching key a column (`metric_columns`; e.g. the results commands' `bestofn/*/acc@16`, `frs/*`)."""
    keys_present = {k for v in variants for r in v.runs for k in (r.get("metrics") or {})}
    columns = [
        ("task/accuracy", "task accuracy (mean ± std)", 3),
        *VALUE_COLUMNS,
        *[c for c in FRS_KEYS if c[0] in keys_present],
        *[(k, k, 3) for k in sorted(keys_present) if k.startswith("hacking/")],
    ]
    columns += [(k, k, 3) for k in metric_columns(variants, extra_metrics) if k not in {c[0] for c in columns}]
    if metric and metric["name"] not in {c[0] for c in columns}:
        columns.append((metric["name"], metric["name"], 3))
    if metric:
        sign = -1.0 if metric.get("goal") == "maximize" else 1.0  # wandb's default goal: minimize
        variants = sorted(variants, key=lambda v: _sort_key(v, metric["name"], sign))
    best = variants[0] if metric and variants and variants[0].values(metric["name"]) else None
    header = ["variant", "status", "seeds", columns[0][1], "accuracy per seed [Wilson 95%]"]
    header += [c[1] for c in columns[1:]] + ["wall time (s)"]
    rows = []
    for variant in variants:
        cells = [variant.name, _status(variant), str(len(variant.runs))]
        for i, (key, _, digits) in enumerate(columns):
            cell = _aggregate(variant, key, digits)
            if best is variant and key == metric["name"]:
                cell = f"**{cell}**"
            cells.append(cell)
            if i == 0:
                cells.append(_per_seed_accuracy(variant))
        cells.append(_aggregate(variant, "wall_time_s", 0, from_record=True))
        rows.append(cells)
    return markdown_table(header, rows, align=["left"] * 3 + ["right"] * (len(header) - 3))


def format_report(
    variants: Sequence[Variant],
    title: str,
    metric: dict[str, str] | None = None,
    plot: str | None = None,
    extra_metrics: Sequence[str] = (),
    sections: Sequence[str] = (),
) -> str:
    """The markdown report: the title, how to read the numbers, `format_table`, the plot (a relative file name),
    `sections` (markdown, each with its own heading: e.g. `procrl.evals.arm_comparison.format_arm_comparison`) and
    one line per run (variant, seed, status, wall time, commit, directory)."""
    runs = [r for v in variants for r in v.runs]
    unfinished = sum(r.get("status") != "finished" for r in runs)
    lines = [
        f"# {title}",
        "",
        f"{len(runs)} runs in {len(variants)} variants ({unfinished} not finished: counted in `status`, their "
        "values shown one by one after the mean, marked with their status, never in a mean, ± or the sort). A "
        "variant's value is the mean over its finished seeds; ± is the sample standard deviation (n - 1) over them, "
        "none for one seed; (k/n seeds) when only k of n finished runs have the value. Each seed's task accuracy "
        f"has its Wilson 95% interval from `task/correct` / `task/n`. {MISSING} = not measured.",
    ]
    if metric:
        lines += ["", f"Sorted by `{metric['name']}` ({metric.get('goal') or 'minimize'}), the best in bold."]
    lines += ["", format_table(variants, metric, extra_metrics)]
    if plot:
        lines += [
            "",
            f"![curves]({plot})",
            "",
            "Against the training step (`history`): the line is the mean over "
            "seeds at each step, the band the min-max over seeds.",
        ]
    lines += [line for section in sections for line in ("", section.rstrip("\n"))]
    rows = []
    for variant in variants:
        for run in variant.runs:
            git = run.get("git") or {}
            commit = (
                (str(git.get("commit"))[:10] + ("+dirty" if git.get("dirty") else "")) if git.get("commit") else None
            )
            wall = f"{run['wall_time_s']:.0f}" if is_number(run.get("wall_time_s")) else None
            status = str(run.get("status")) + (f" ({run['error']})" if run.get("error") else "")
            rows.append([variant.name, variant.seed_of(run), status, wall, commit, _display_path(run["path"])])
    header = ["variant", "seed", "status", "wall time (s)", "commit", "directory"]
    lines += ["", "## Runs", "", markdown_table(header, rows, align=["left"] * 3 + ["right"] + ["left"] * 2)]
    return "\n".join(lines) + "\n"


def _sort_key(variant: Variant, key: str, sign: float) -> tuple[int, float]:
    mean, _ = mean_std(variant.values(key))
    return (1, 0.0) if mean is None else (0, sign * mean)


def _aggregate(variant: Variant, key: str, digits: int, from_record: bool = False) -> str:
    """Mean ± std of `key` over the finished runs, then each unfinished run's value marked; "–" when none has it."""

    def value(run: dict[str, Any]) -> Any:
        v = run.get(key) if from_record else (run.get("metrics") or {}).get(key)
        return v if is_number(v) else None

    finished = variant.finished
    values = [v for r in finished if (v := value(r)) is not None]
    mean, std = mean_std(values)
    parts = []
    if mean is not None:
        text = f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")
        if len(values) < len(finished):
            text += f" ({len(values)}/{len(finished)} seeds)"
        parts.append(text)
    for i, run in enumerate(variant.runs):
        if run.get("status") != "finished" and (v := value(run)) is not None:
            parts.append(f"{_seed_label(variant, run, i)} {v:.{digits}f}")
    return "; ".join(parts) or MISSING


def _seed_label(variant: Variant, run: dict[str, Any], index: int) -> str:
    """ "s<seed>" (or "run <i>"), with " (<status>)" when the run did not finish."""
    seed = variant.seed_of(run)
    label = f"s{seed}" if seed is not None else f"run {index + 1}"
    if run.get("status") != "finished":
        label += f" ({run.get('status') or 'unknown'})"
    return label


def _per_seed_accuracy(variant: Variant) -> str:
    parts = []
    for i, run in enumerate(variant.runs):
        metrics = run.get("metrics") or {}
        label = _seed_label(variant, run, i)
        correct, n, accuracy = metrics.get("task/correct"), metrics.get("task/n"), metrics.get("task/accuracy")
        if is_number(correct) and is_number(n) and n > 0:
            low, high = wilson_interval(int(correct), int(n))  # n > 0: an interval
            parts.append(f"{label} {correct / n:.3f} [{low:.3f}, {high:.3f}] ({int(correct)}/{int(n)})")
        elif is_number(accuracy):
            parts.append(f"{label} {accuracy:.3f} [no counts]")
        else:
            parts.append(f"{label} {MISSING}")
    return "; ".join(parts) if parts else MISSING


def _status(variant: Variant) -> str:
    counts: dict[str, int] = {}
    for run in variant.runs:
        status = str(run.get("status") or "unknown")
        counts[status] = counts.get(status, 0) + 1
    if set(counts) == {"finished"}:
        return "finished"
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def _display_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it (a committed report names no home folder)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


# ----------------------------------------------------------------------------------------------------------------------
# Curves
# ----------------------------------------------------------------------------------------------------------------------


def series(variant: Variant, key: str) -> list[tuple[int, float, float, float, int]]:
    """(step, mean, min, max, n runs) of `key` at each step that some run of the variant logged it, from `history`."""
    by_step: dict[int, list[float]] = {}
    for run in variant.runs:
        for row in run.get("history") or []:
            if is_number(row.get("step")) and is_number(row.get(key)):
                by_step.setdefault(int(row["step"]), []).append(float(row[key]))
    return [(s, statistics.fmean(v), min(v), max(v), len(v)) for s, v in sorted(by_step.items())]


def plot_curves(variants: Sequence[Variant], path: str | Path, title: str = "") -> Path:
    """One PNG (110 dpi) with a panel per `CURVE_PANELS` key against the training step: a line per variant (the
    mean over its seeds at each step) and a band from the min to the max over its seeds (where two or more logged
    that step). A key no run logged gives a panel that says "not logged". Returns the path."""
    with figure(path, nrows=2, ncols=2, figsize=(11, 7.5)) as (fig, axes):
        for ax, (key, label) in zip(axes.flat, CURVE_PANELS, strict=True):
            drawn = False
            for index, variant in enumerate(variants):
                points = series(variant, key)
                if not points:
                    continue
                steps, means, lows, highs, _ = zip(*points, strict=True)
                colour = f"C{index % 10}"
                ax.plot(steps, means, marker="o", markersize=3, color=colour, label=variant.name)
                if any(n > 1 for *_, n in points):
                    ax.fill_between(steps, lows, highs, color=colour, alpha=0.2, linewidth=0)
                drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(label, fontsize=10)
            ax.set_xlabel("step")
            ax.locator_params(axis="x", integer=True)
            ax.grid(alpha=0.3)
        handles, labels = next(
            (a.get_legend_handles_labels() for a in axes.flat if a.get_legend_handles_labels()[0]), ([], [])
        )
        if handles:
            fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
        fig.suptitle((title + "\n" if title else "") + "line: mean over seeds; band: min-max over seeds", fontsize=10)
        fig.tight_layout(rect=(0, 0.04 + 0.03 * math.ceil(len(labels) / 3), 1, 1))
    return Path(path)
