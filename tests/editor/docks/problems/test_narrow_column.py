"""The Problems dock in the right column at 1366x768 (issue 38, minor): the Problem column had 96 px
and cut every message to its first words ("the context (..."). Each problem now reads whole: its
text wraps in the width the severity and the place leave, and its row is as tall as that needs."""

# ruff: noqa: F401, F811  (the tests take the imported sized_window fixture by name)
from __future__ import annotations

import pytest
from PySide6.QtCore import QRect, Qt

from runtime.problems import Problem
from runtime.resources import examples_dir
from tests.editor.window.test_workspace_layout import settle, sized_window

PROBLEMS = [
    Problem(severity="error", node_id="reply", field="context_size",
            message="the context (8192 tokens) is above the model's trained size (2048): replies past it are "
                    "garbled. Lower Context Size."),
    Problem(severity="warning", node_id="calm_down", field="default_exit",
            message="no exit is connected: the turn ends here"),
    Problem(severity="warning", node_id="", field="", message="a short one"),
]


def shown_whole(tree, row: int, column: int) -> bool:
    """Whether the cell's text, wrapped in the cell's width, fits in the cell."""
    item = tree.topLevelItem(row)
    cell = tree.visualRect(tree.indexFromItem(item, column))
    text = item.text(column)
    inner = cell.width() - 2 * (tree.style().pixelMetric(tree.style().PixelMetric.PM_FocusFrameHMargin, None, tree) + 1)
    needed = tree.fontMetrics().boundingRect(QRect(0, 0, inner, 10_000), Qt.TextFlag.TextWordWrap, text)
    return needed.height() <= cell.height() and cell.right() <= tree.viewport().width() and needed.width() <= inner


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_every_problem_reads_whole_in_the_right_column(sized_window, qtbot, width, height):
    window = sized_window(width, height, str(examples_dir() / "tavern_keeper.json"))
    window.load_problems = list(PROBLEMS)
    window._show_problems()
    settle(qtbot, window)
    dock = window.problems_dock
    tree = dock.tree
    assert dock.isVisible() and dock.width() <= 400, "in the right column"
    for row, problem in enumerate(PROBLEMS):
        assert shown_whole(tree, row, 2), f"{problem.message!r} is cut at {tree.visualRect(tree.indexFromItem(tree.topLevelItem(row), 2))}"
        assert tree.topLevelItem(row).text(1).replace("\u200b", "") == (
            ".".join(p for p in (problem.node_id, problem.field) if p) or "agent")
    assert tree.columnWidth(1) >= 100, "the place keeps room to be read"
    # narrower still, and back: the rows follow the width
    window.resizeDocks([dock], [300], Qt.Orientation.Horizontal)
    settle(qtbot, window)
    assert all(shown_whole(tree, row, 2) for row in range(len(PROBLEMS)))
