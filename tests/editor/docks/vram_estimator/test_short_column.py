"""The VRAM Estimator in a short column (issue 38, major 4): at 1366x768, beside Properties and the
Conversation of an attached session, it was squeezed below its own height and drew its bars over
its legend. It scrolls instead: every part keeps its height, in order."""

# ruff: noqa: F401, F811  (the tests take the imported sized_window fixture by name)
from __future__ import annotations

from runtime.resources import examples_dir
from tests.editor.window.test_workspace_layout import settle, sized_window
from tests.editor.window.test_workspace_room import attach_as_the_window_does, open_from_the_view_menu


def test_the_chart_stays_above_its_legend_in_a_short_column(sized_window, qtbot):
    window = sized_window(1366, 768, str(examples_dir() / "tavern_keeper.json"))
    settle(qtbot, window)
    open_from_the_view_menu(window, qtbot, "VramEstimatorDock")
    attach_as_the_window_does(window, qtbot)
    dock = window.docks["VramEstimatorDock"]
    chart, legend, table = dock.chart, dock.legend, dock.table
    assert dock.estimate is not None
    assert chart.height() >= chart.chart_height(), f"the chart is {chart.height()} px of its {chart.chart_height()}"
    assert legend.y() >= chart.geometry().bottom(), "the legend starts under the bars, not over them"
    assert legend.height() >= legend.heightForWidth(legend.width()), "the legend is whole"
    assert table.y() >= legend.geometry().bottom() and table.height() >= 100
    assert dock.height() < chart.chart_height() + legend.height() + table.height(), "the short column scrolls"
