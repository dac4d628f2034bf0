"""How procrl draws its figures (one way for every command): matplotlib on its non-interactive Agg backend,
imported on first use (it is slow to import and only the commands that draw need it), one figure saved as a PNG at a
path (its folder created) and always closed, also when drawing fails.

    with figure(path, figsize=(7, 4.5)) as (fig, ax):
        ax.plot(ks, accuracies)
        fig.tight_layout()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["figure", "pyplot"]


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
