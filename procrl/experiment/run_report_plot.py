"""The curves figure of `procrl report` (`plot_curves`): each `CURVE_PANELS` key of the runs' `history` against the
training step, a line per variant (`procrl.experiment.run_report.Variant`) and its min-max band over seeds."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from procrl.experiment.run_records import is_number
from procrl.experiment.run_report import CURVE_PANELS, Variant

__all__ = ["plot_curves", "series"]


def series(variant: Variant, key: str) -> list[tuple[int, float, float, float, int]]:
    """(step, mean, min, max, n runs) of `key` at each step that some run of the variant logged it, from `history`."""
    by_step: dict[int, list[float]] = {}
    for run in variant.runs:
        for row in run.get("history") or []:
            if is_number(row.get("step")) and is_number(row.get(key)):
                by_step.setdefault(int(row["step"]), []).append(float(row[key]))
    return [(s, statistics.fmean(v), min(v), max(v), len(v)) for s, v in sorted(by_step.items())]


def plot_curves(variants: Sequence[Variant], path: str | Path, title: str = "") -> Path:
    """One PNG with a panel per `CURVE_PANELS` key against the training step: a line per variant (the mean over its
    seeds at each step) and a band from the min to the max over its seeds (where two or more logged that step).
    A key no run logged gives a panel that says "not logged". Returns the path."""
    import matplotlib  # optional heavy dependency, only for the plots: imported here, not with procrl.experiment.run_report

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the non-interactive backend
    from matplotlib.ticker import MaxNLocator  # matplotlib: the same optional dependency

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
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
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    handles, labels = next(
        (a.get_legend_handles_labels() for a in axes.flat if a.get_legend_handles_labels()[0]), ([], [])
    )
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    fig.suptitle((title + "\n" if title else "") + "line: mean over seeds; band: min-max over seeds", fontsize=10)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * math.ceil(len(labels) / 3), 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
