"""The minimap's size (issue 38, minor): at 1366x768 in the Test workspace it covered 40 % of the
canvas's height. It takes at most a quarter of the canvas's height and 200 px, whatever the graph's shape."""

# ruff: noqa: F401, F811  (the tests take the imported sized_window fixture by name)
from __future__ import annotations

import json

import pytest

from runtime.resources import examples_dir
from tests.editor.window.test_workspace_layout import settle, sized_window


def tall_graph(tmp_path) -> str:
    """The tavern keeper's nodes one under another: a graph taller than it is wide."""
    asset = json.loads((examples_dir() / "tavern_keeper.json").read_text())
    for i, node in enumerate(asset["nodes"]):
        node["position"] = [0.0, 400.0 * i]
    path = tmp_path / "tall.json"
    path.write_text(json.dumps(asset))
    return str(path)


@pytest.mark.parametrize("workspace", ["Author", "Talk", "Test"])
@pytest.mark.parametrize(("width", "height"), [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
@pytest.mark.parametrize("graph", ["wide", "tall"])
def test_the_minimap_leaves_the_canvas_to_the_graph(sized_window, qtbot, tmp_path, workspace, width, height, graph):
    asset = str(examples_dir() / "tavern_keeper.json") if graph == "wide" else tall_graph(tmp_path)
    window = sized_window(width, height, asset)
    window.workspace.switch(workspace)
    settle(qtbot, window)
    minimap = window.minimap
    qtbot.waitUntil(lambda: minimap.isVisible() and not minimap._dirty, timeout=5000)
    canvas = window.canvas.viewer.viewport().geometry()
    share = minimap.height() / canvas.height()
    assert share <= 0.26, (
        f"{workspace} at {width}x{height}: the minimap is {minimap.height()} px of the canvas's {canvas.height()} ({share:.0%})")
    assert minimap.height() <= 200 and minimap.width() <= 0.25 * canvas.width() + 1
    assert minimap.height() >= 40 and canvas.contains(minimap.geometry()), "still there to be used, in the corner"
