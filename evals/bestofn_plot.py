"""The markdown tables and the plot of a `procrl.evals.bestofn.bestofn_curves` result (its dict only).

`bestofn_table`: one row per method, one column per k, cells `acc% [lo, hi]` (one decimal, the bootstrap 95%
interval over problems; "–" where undefined: no problem), then the within-problem AUROC table ("–": no problem
holding both kinds of candidate). `plot_bestofn`: accuracy against k (log2 axis), a line per method with its
interval as a band; undefined points are left out.
"""

from __future__ import annotations

from pathlib import Path

from procrl.evals.stats import MISSING, format_estimate

__all__ = ["MISSING", "bestofn_table", "plot_bestofn"]


def bestofn_table(result: dict) -> str:
    """The accuracy table and the AUROC table of a `bestofn_curves` result, as markdown.

    >>> result = {"settings": {"ks": [1, 2], "n": 2, "subsets": 4, "seed": 0}, "problems": 3, "unparseable_gold": 0,
    ...     "curves": {"random": [{"k": 1, "accuracy": 0.5, "ci_low": 0.25, "ci_high": 0.75},
    ...                           {"k": 2, "accuracy": 0.5, "ci_low": 0.25, "ci_high": 0.75}]},
    ...     "auroc": {"longest": {"auroc": None, "problems": 0, "ci_low": None, "ci_high": None}}}
    >>> print(bestofn_table(result).splitlines()[4])
    | random | 50.0 [25.0, 75.0] | 50.0 [25.0, 75.0] |
    """
    s = result["settings"]
    ks = s["ks"]
    lines = [
        f"Best-of-k accuracy (%, [95% bootstrap interval over problems]): {result['problems']} problems, "
        f"n = {s['n']} samples each, {s['subsets']} random k-subsets per problem for k < n (seed {s['seed']}); "
        f"{result['unparseable_gold']} left out (unparseable gold).",
        "",
        "| method | " + " | ".join(f"k={k}" for k in ks) + " |",
        "| --- | " + " | ".join("---" for _ in ks) + " |",
    ]
    for method, points in result["curves"].items():
        cells = [format_estimate(p["accuracy"], (p["ci_low"], p["ci_high"]), ".1f", 100) for p in points]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Within-problem AUROC: P(score of a correct sample > an incorrect one) + 0.5 P(tie), mean over the problems "
        "with both kinds of scored sample (`longest`: the score is num_tokens).",
        "",
        "| score | AUROC | 95% interval | problems |",
        "| --- | --- | --- | --- |",
    ]
    for name, a in result["auroc"].items():
        if a["auroc"] is None:
            lines.append(f"| {name} | {MISSING} | {MISSING} | 0 |")
        else:
            lines.append(f"| {name} | {a['auroc']:.3f} | [{a['ci_low']:.3f}, {a['ci_high']:.3f}] | {a['problems']} |")
    return "\n".join(lines) + "\n"


def plot_bestofn(result: dict, path: str | Path) -> Path:
    """Accuracy (%) against k (log2 axis), one line per method of `result["curves"]` with its 95% interval as a
    band; saved as a PNG at `path` (its folder created). Returns the path."""
    import matplotlib  # optional heavy dependency, only for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: after choosing the non-interactive backend

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.get_cmap("tab20").colors  # 20 distinct colours: a dozen methods never share one
    for i, (method, points) in enumerate(result["curves"].items()):
        points = [p for p in points if p["accuracy"] is not None]  # an undefined point is not drawn
        if not points:
            continue
        ks = [p["k"] for p in points]
        style = {"linestyle": "--", "color": "black"} if method == "pass@k" else {"color": colors[2 * i % 20 + i // 10]}
        line = ax.plot(ks, [100 * p["accuracy"] for p in points], marker="o", markersize=3, label=method, **style)[0]
        banded = [p for p in points if p["ci_low"] is not None and p["ci_high"] is not None]
        low, high = [100 * p["ci_low"] for p in banded], [100 * p["ci_high"] for p in banded]
        ax.fill_between([p["k"] for p in banded], low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    ks = result["settings"]["ks"]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (samples the method picks from)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"Best-of-k over {result['problems']} problems (n = {result['settings']['n']})")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no line without problems
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
