"""The canvas keeps its zoom and centre when it is resized (issue 38, major 3): switching workspaces
took the tavern keeper from 0.85x to 0.44x at 1366x768 and from 1.00x to 0.66x at 1920x1080, as
NodeGraphQt fitted the same scene rectangle into a canvas made shorter by the bottom docks."""

# ruff: noqa: F401, F811  (the tests take the imported sized_window fixture by name)
from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF

from editor.canvas import LEGIBLE_SCALE
from runtime.resources import examples_dir
from tests.editor.window.test_workspace_layout import settle, sized_window

SWITCHES = ["Talk", "Test", "Author", "Test", "Talk", "Author", "Talk"]


def zoom(window) -> float:
    return window.canvas.viewer.transform().m11()


def centre(window) -> QPointF:
    viewer = window.canvas.viewer
    return viewer.mapToScene(viewer.viewport().rect().center())


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_a_workspace_switch_keeps_the_zoom_and_the_centre(sized_window, qtbot, width, height):
    window = sized_window(width, height, str(examples_dir() / "tavern_keeper.json"))
    settle(qtbot, window)
    first, middle = zoom(window), centre(window)
    assert first >= LEGIBLE_SCALE - 0.01
    seen = []
    for name in SWITCHES:
        window.workspace.switch(name)
        settle(qtbot, window)
        seen.append(f"{name} {zoom(window):.2f}x")
        assert zoom(window) >= LEGIBLE_SCALE - 0.01, seen
        assert abs(zoom(window) - first) <= 0.005, f"the zoom drifted: {seen}"
        moved = centre(window) - middle
        assert abs(moved.x()) <= 3 and abs(moved.y()) <= 3, f"{name}: the centre moved by {moved.toTuple()}"


def test_a_resized_window_and_a_dock_opened_keep_the_zoom(sized_window, qtbot):
    window = sized_window(1366, 768, str(examples_dir() / "tavern_keeper.json"))
    settle(qtbot, window)
    first = zoom(window)
    window.resize(1100, 600)
    settle(qtbot, window)
    assert abs(zoom(window) - first) <= 0.005
    window.docks["RawJsonDock"].show()
    settle(qtbot, window)
    assert abs(zoom(window) - first) <= 0.005
