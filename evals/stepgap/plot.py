"""The figure of `procrl stepgap-eval` (`plot_metrics`): each verifier metric of every row with its interval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from procrl.evals.reporting import figure
from procrl.evals.stepgap.intervals import CI_METRICS

__all__ = ["plot_metrics"]


def plot_metrics(rows: dict[str, dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """One panel per metric (sF1, Q-F1, BA, typed macro-F1; percent): a dot per row of `rows` (the `format_table`
    rows, top to bottom in their order) with its 95% interval (`ci`, fractions) as a bar where the row has one; a
    row without the metric (e.g. a paper reference lacking it) is left out of that panel. The full tree's value is
    a dotted line in each panel, so ablations that hurt sit left of it.

    Returns:
        `path` as a `Path` (PNG, 110 dpi; its folder created).
    """
    names = list(rows)
    size = (3.2 * len(CI_METRICS), 0.32 * len(names) + 1.4)
    with figure(path, ncols=len(CI_METRICS), figsize=size, sharey=True) as (fig, axes):
        for ax, key in zip(axes, CI_METRICS, strict=True):
            for y, name in enumerate(names):
                m = rows[name]
                if key not in m or m[key] is None:
                    continue
                ci = (m.get("ci") or {}).get(key)
                if ci is not None:
                    ax.hlines(y, 100 * ci[0], 100 * ci[1], color="tab:blue", alpha=0.5, linewidth=2)
                colour = "tab:red" if name.startswith("paper") else "tab:blue"
                ax.plot(100 * m[key], y, "o", color=colour, markersize=4)
            full = rows.get("full", {}).get(key)
            if full is not None:
                ax.axvline(100 * full, color="grey", linestyle=":", linewidth=1)
            ax.set_title("typed F1" if key == "typed_macro_f1" else key, fontsize=10)
            ax.set_xlim(0, 100)
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(range(len(names)), names, fontsize=8)
        axes[0].invert_yaxis()
        fig.supxlabel("percent (bars: 95% bootstrap interval over questions)", fontsize=9)
        if title:
            fig.suptitle(title, fontsize=11)
        fig.tight_layout()
    return Path(path)
