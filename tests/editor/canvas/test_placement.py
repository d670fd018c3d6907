"""Where new nodes land in the real window: a paste and Ctrl+D go clear of the originals (and of every
other node), and a node added with Tab search near the view's edge is wholly inside the view."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from runtime.asset.model import Asset, new_node


def overlapping(window) -> list[tuple[str, str]]:
    items = [(n.asset_id, n.view.sceneBoundingRect()) for n in window.canvas.graph.all_nodes()]
    return [(a, b) for i, (a, ra) in enumerate(items) for b, rb in items[i + 1:] if ra.intersects(rb)]


@pytest.fixture
def two_nodes(window):
    window.set_asset(Asset(nodes=[
        new_node("ClassifyIntent", "classify", position=(0, 0), intents=[{"name": "greet", "exit": "reply"}]),
        new_node("GenerateAndSpeak", "reply", position=(320, 0)),
    ], start_node="classify"))
    window.canvas.finish_building()
    assert overlapping(window) == []
    return window


def test_ctrl_d_lands_clear_of_the_original(two_nodes, qtbot):
    window = two_nodes
    window.canvas.select(["classify"])
    window.canvas.viewer.setFocus()
    for _ in range(3):
        QTest.keyClick(window.canvas.viewer, Qt.Key.Key_D, Qt.KeyboardModifier.ControlModifier)
        assert overlapping(window) == [], "a duplicate landed on a node"
    assert len(window.document.asset.nodes) == 5
    window.canvas.frame_selection()
    window.canvas.widget.grab().save("/tmp/n/duplicate.png")


def test_paste_lands_clear_of_the_originals(two_nodes, qtbot):
    window = two_nodes
    window.canvas.select(["classify", "reply"])
    window.copy()
    window.paste()
    window.paste()
    assert len(window.document.asset.nodes) == 6
    assert overlapping(window) == [], "pasted nodes landed on nodes"


def test_tab_search_near_the_views_edge_places_the_node_inside_the_view(two_nodes, qtbot):
    window = two_nodes
    viewport = window.canvas.viewer.viewport()
    corner = viewport.mapToGlobal(QPoint(viewport.width() - 4, viewport.height() - 4))
    QCursor.setPos(corner)
    if QCursor.pos() != corner:
        pytest.skip("this platform cannot move the mouse")
    window.canvas.show_node_search()
    search = window.canvas.search
    qtbot.waitUntil(search.isVisible, timeout=3000)
    qtbot.keyClicks(search.line, "classify intent")
    qtbot.keyClick(search.line, Qt.Key.Key_Return)
    added = window.canvas.selected_ids()
    assert len(added) == 1 and added[0] not in ("classify", "reply")
    placed = window.canvas.canvas_node(added[0]).view.sceneBoundingRect()
    view = window.canvas.drawing.visible_rect()
    assert view.contains(placed), f"the node at {placed} is cut off by the view {view}"
    window.canvas.widget.grab().save("/tmp/n/tab_edge.png")


def test_cut_and_paste_puts_the_nodes_back_where_they_were(two_nodes):
    window = two_nodes
    window.canvas.select(["reply"])
    window.cut()
    assert not window.document.has_node("reply")
    (pasted,) = window.paste_text(QApplication.clipboard().text(), None)
    assert window.document.node(pasted).position == (320.0, 0.0), "its place was free"
