"""The one markdown table writer of procrl's reports (`markdown_table`): a header row, the separator row with each
column's alignment, one line per row; a cell that is None shows `MISSING` ("–": not measured or undefined, never 0)
and a "|" inside a cell is escaped, so a name or an error message never breaks the table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from procrl.evals.stats import MISSING

__all__ = ["markdown_table"]

_RULE = {"left": "---", "right": "---:"}


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
