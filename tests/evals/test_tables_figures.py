"""The one markdown table writer (`procrl.evals.reporting.markdown_table`) and the one figure helper
(`procrl.evals.reporting.figure`): the table's lines, alignment, "–" for None and escaped pipes, its errors; a figure
saved as a PNG into a folder it creates, and closed also when drawing fails (nothing saved then)."""

from __future__ import annotations

import pytest

from procrl.evals.reporting import figure, markdown_table, pyplot
from procrl.evals.stats import MISSING


def test_markdown_table_lines_alignment_missing_and_pipes():
    rows = [["a", 3, None], ["b|c", 0, "x | y"]]
    table = markdown_table(["name", "n", "note"], rows, align=["left", "right", "left"])
    assert table.splitlines() == [
        "| name | n | note |",
        "|---|---:|---|",
        f"| a | 3 | {MISSING} |",  # None: not measured; a 0 stays 0
        "| b\\|c | 0 | x \\| y |",
    ]
    assert markdown_table(["a", "b"], []).splitlines() == ["| a | b |", "|---|---|"]  # left by default, no rows


@pytest.mark.parametrize(
    ("rows", "align", "match"),
    [([["only one"]], (), "row 0 has 1 cells, the header 2"), ([], ["left"], "for each of 2 columns"),
     ([], ["left", "centre"], "left or right")],
)  # fmt: skip
def test_markdown_table_refuses_ragged_rows_and_bad_alignment(rows, align, match):
    with pytest.raises(ValueError, match=match):
        markdown_table(["a", "b"], rows, align=align)


def test_figure_saves_a_png_into_a_new_folder_and_closes_it(tmp_path):
    plt = pyplot()
    open_before = len(plt.get_fignums())
    path = tmp_path / "new" / "folder" / "f.png"
    with figure(path, ncols=2, figsize=(4, 2)) as (fig, axes):
        assert len(axes) == 2 and tuple(fig.get_size_inches()) == (4, 2)
        axes[0].plot([1, 2], [3, 4])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(plt.get_fignums()) == open_before


def test_a_failing_figure_is_closed_and_not_saved(tmp_path):
    plt = pyplot()
    open_before = len(plt.get_fignums())
    with pytest.raises(RuntimeError, match="boom"), figure(tmp_path / "f.png") as (fig, ax):
        raise RuntimeError("boom")
    assert not (tmp_path / "f.png").exists() and len(plt.get_fignums()) == open_before
