"""What procrl shows people (the scripts print; library code returns text and writes files): the one markdown table
writer, the one figure helper, and the report of a GRPO run (its before/after table, training curves and wandb
wrap-up; the printed report is `procrl.scripts.train_grpo.format_summary`).

- `markdown_table(header, rows, align)`: a header row, the separator row with each column's alignment, one line per
  row; a cell that is None shows `MISSING` ("–": not measured or undefined, never 0) and a "|" inside a cell is
  escaped, so a name or an error message never breaks the table.
- `figure(path, **subplots)`: matplotlib on its non-interactive Agg backend, imported on first use (it is slow to
  import and only the commands that draw need it), one figure saved as a PNG at a path (its folder created) and
  always closed, also when drawing fails:

      with figure(path, figsize=(7, 4.5)) as (fig, ax):
          ax.plot(ks, accuracies)
          fig.tight_layout()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from procrl.evals.stats import MISSING, format_estimate

__all__ = ["CURVE_KEYS", "figure", "finish_wandb_run", "format_table", "markdown_table", "plot_curves", "pyplot"]

_RULE = {"left": "---", "right": "---:"}
CURVE_KEYS = (
    ("reward", "weighted reward (TRL `reward`)"),
    ("task/accuracy", "task accuracy (outcome check)"),
    ("completions/mean_length", "completion length (tokens)"),
)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], align: Sequence[str] = ()) -> str:
    """A markdown table (lines joined by "\\n", no trailing newline).

    Args:
        header: the column titles.
        rows: one sequence of cells per row, as many as `header`; a cell is shown as `str(cell)`, None as "–".
        align: "left" or "right" per column (numbers read best right-aligned); empty: every column left.

    Raises:
        ValueError: a row or `align` whose length is not the header's, or an alignment that is not left/right.

    >>> print(markdown_table(["method", "k=1"], [["random", "50.0"], ["a|b", None]], align=["left", "right"]))
    | method | k=1 |
    |---|---:|
    | random | 50.0 |
    | a\\|b | – |
    """
    align = list(align) or ["left"] * len(header)
    if len(align) != len(header) or any(a not in _RULE for a in align):
        raise ValueError(f"markdown_table: align must give left or right for each of {len(header)} columns: {align}")
    lines = [_line(header), "|" + "|".join(_RULE[a] for a in align) + "|"]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"markdown_table: row {i} has {len(row)} cells, the header {len(header)}: {list(row)}")
        lines.append(_line(row))
    return "\n".join(lines)


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(MISSING if c is None else str(c).replace("|", "\\|") for c in cells) + " |"


def pyplot() -> Any:
    """`matplotlib.pyplot` with the non-interactive Agg backend chosen (no display needed)."""
    import matplotlib  # optional heavy dependency: only the commands that draw import it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional heavy dependency (after choosing the Agg backend)

    return plt


@contextlib.contextmanager
def figure(path: str | Path, *, dpi: int = 110, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """A context manager yielding `(fig, axes)` of `pyplot().subplots(**subplots)` (e.g. `nrows`, `ncols`,
    `figsize` in inches, `sharey`); when the block ends without an error the figure is saved as a PNG at `path`
    (`dpi` dots per inch; its folder created). The figure is closed in every case. Layout (`fig.tight_layout`) is
    the caller's: it differs per figure."""
    plt = pyplot()
    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)


def format_table(before: list[dict], after: list[dict]) -> str:
    """A fixed-width before/after table of `EvalResult.to_dict()` rows, matched by data set name; an undefined value
    (None, e.g. every rate of an empty eval set) shows "–".

    >>> row = dict(accuracy=None, ci_low=None, ci_high=None, mean_reward=None, mean_length=None, truncated_frac=None,
    ...            wall_time_s=0.5)
    >>> print(format_table([{"name": "svamp[0:0]", **row}], []).splitlines()[2])
    svamp[0:0]         before  –                                  –       –      –     0.5
    """
    names_all = [r["name"] for r in [*before, *after]]
    w = max([18, *map(len, names_all)])  # the eval set column fits the longest name
    header = (
        f"{'eval set':<{w}} {'stage':<7} {'accuracy [95% CI]':<24} {'mean reward':>11} "
        f"{'length':>7} {'trunc':>6} {'wall s':>7}"
    )
    lines = [header, "-" * len(header)]
    after_by_name = {r["name"]: r for r in after}
    names = [r["name"] for r in before] + [r["name"] for r in after if r["name"] not in {b["name"] for b in before}]
    before_by_name = {r["name"]: r for r in before}
    for name in names:
        for stage, row in (("before", before_by_name.get(name)), ("after", after_by_name.get(name))):
            if row is None:
                continue
            acc = format_estimate(row["accuracy"], (row["ci_low"], row["ci_high"]))
            reward = format_estimate(row["mean_reward"], spec=".4f")
            length = format_estimate(row["mean_length"], spec=".1f")
            trunc = format_estimate(row["truncated_frac"], spec=".2f")
            lines.append(
                f"{name:<{w}} {stage:<7} {acc:<24} {reward:>11} {length:>7} {trunc:>6} {row['wall_time_s']:>7.1f}"
            )
    return "\n".join(lines)


def format_paired(paired: dict[str, dict]) -> str:
    """The paired before/after table of a GRPO summary's `paired` entry (`procrl.evals.accuracy.paired_comparison`):
    one line per (eval set, metric), after − before with its paired bootstrap 95% interval over the same problems.

    >>> print(format_paired({"arith[0:2]": {"accuracy": dict(n=2, before=0.5, after=1.0, diff=0.5, ci_low=0.0,
    ...                                                           ci_high=1.0)}}).splitlines()[2])
    arith[0:2]         accuracy                     0.500   1.000  +0.500 [+0.000, +1.000]      2
    """
    w = max([18, *map(len, paired)])  # the eval set column fits the longest name
    header = f"{'eval set':<{w}} {'metric (paired)':<26} {'before':>7} {'after':>7}  {'after - before [95% CI]':<24} {'n':>5}"
    lines = [header, "-" * len(header)]
    for name, metrics in paired.items():
        for metric, m in metrics.items():
            diff = f"{m['diff']:+.3f} [{m['ci_low']:+.3f}, {m['ci_high']:+.3f}]"
            lines.append(f"{name:<{w}} {metric:<26} {m['before']:>7.3f} {m['after']:>7.3f}  {diff:<24} {m['n']:>5}")
    return "\n".join(lines)


def plot_curves(log_history: list[dict], path: str | Path, title: str = "") -> Path:
    """Plot reward, task accuracy and completion length against the training step into a PNG (110 dpi); a key
    never logged gives a panel that says "not logged". Returns the path."""
    with figure(path, ncols=len(CURVE_KEYS), figsize=(5 * len(CURVE_KEYS), 3.6)) as (fig, axes):
        for ax, (key, label) in zip(axes, CURVE_KEYS, strict=True):
            points = [(row["step"], row[key]) for row in log_history if row.get(key) is not None and "step" in row]
            if points:
                steps, values = zip(*points, strict=True)
                ax.plot(steps, values, marker="o", markersize=3)
            else:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(label, fontsize=10)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        if title:
            fig.suptitle(title, fontsize=11)
        fig.tight_layout()
    return Path(path)


def finish_wandb_run(summary: dict) -> str | None:
    """Add the before/after numbers of a GRPO `summary` to the active wandb run (if any) and return its local
    directory (None without wandb or a run): `before/<set>/accuracy`, `.../mean_reward`, `.../mean_length` (an
    undefined one, None, left out). The run stays open: `procrl.experiment.tracking.track_run` adds the run record's metrics
    and finishes it (wandb's own exit hook does, without it)."""
    try:
        import wandb  # optional heavy dependency: only when a run reports to wandb
    except ImportError:
        return None
    run = wandb.run
    if run is None:
        return None
    for stage in ("before", "after"):
        for result in summary[stage]:
            for key in ("accuracy", "mean_reward", "mean_length"):
                if result[key] is not None:
                    run.summary[f"{stage}/{result['name']}/{key}"] = result[key]
    return str(Path(run.dir).parent)
