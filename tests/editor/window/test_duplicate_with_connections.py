"""Edit > Duplicate with Connections (Ctrl+Shift+D): the copy keeps the original's exits, and each node
that leads into the original points its first exit that ends the turn at the copy (an exit has one
target, so the exit into the original stays). One undo step."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.asset.file import parse_asset

GRAPH = {
    "version": 1, "name": "Router", "default_model": "m.gguf", "start_node": "classify",
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "position": [0, 0],
         "intents": [{"name": "greet", "exit": "reply"}, {"name": "insult", "exit": ""}],
         "fallback_exit": ""},
        {"id": "welcome", "type": "Generate", "default_exit": "reply", "position": [0, 300]},
        {"id": "reply", "type": "Generate", "default_exit": "after", "position": [400, 0]},
        {"id": "after", "type": "Generate", "position": [800, 0]},
    ],
}


def open_graph(window) -> None:
    window.set_asset(parse_asset(json.dumps(GRAPH)))
    window.canvas.finish_building()


def test_the_copy_takes_a_free_exit_of_each_node_leading_into_the_original(window):
    open_graph(window)
    doc = window.document
    window.canvas.select(["reply"])
    (copy,) = window.edit_menu.duplicate_with_connections()
    assert copy == "reply_2"
    classify = doc.node("classify")
    assert [i.exit for i in classify.intents] == ["reply", "reply_2"], "the first exit that ended the turn"
    assert classify.fallback_exit == ""
    assert doc.node("welcome").default_exit == "reply", "no free exit: the original keeps it"
    assert doc.node("reply_2").default_exit == "after", "the copy keeps the original's exits"
    message = window.statusBar().currentMessage()
    assert "classify.intent:insult \u2192 reply_2" in message and "no free exit on welcome" in message
    assert window.canvas.selected_ids() == ["reply_2"]
    window.canvas.canvas_node("reply_2")  # drawn
    assert doc.undo_stack.undoText() == "Duplicate 1 node with connections"
    window.undo_action.trigger()
    assert not doc.has_node("reply_2") and doc.node("classify").intents[1].exit == ""
    window.redo_action.trigger()
    assert doc.node("classify").intents[1].exit == "reply_2"


def test_exits_among_the_copied_nodes_go_to_the_copies(window):
    open_graph(window)
    doc = window.document
    window.canvas.select(["reply", "after"])
    copies = window.edit_menu.duplicate_with_connections()
    assert copies == ["reply_2", "after_2"]
    assert doc.node("reply_2").default_exit == "after_2"
    assert doc.node("reply").default_exit == "after", "an exit from a copied node is not an incoming one"
    assert doc.node("classify").intents[1].exit == "reply_2"


def test_ctrl_shift_d_and_the_menus(window, qtbot):
    open_graph(window)
    edit = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Edit")
    texts = [a.text() for a in edit.actions()]
    assert texts[texts.index("D&uplicate") + 1] == "Duplicate &with Connections"
    window.canvas.select(["after"])
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=3000)
    window.canvas.viewer.setFocus()
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_D,
                   Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert window.document.node("reply").default_exit == "after", "one exit, one target: it stays"
    assert window.document.has_node("after_2")
    assert "no free exit on reply" in window.statusBar().currentMessage()


def test_nothing_selected_duplicates_nothing(window):
    open_graph(window)
    window.canvas.select([])
    count = len(window.document.asset.nodes)
    assert window.edit_menu.duplicate_with_connections() == []
    assert len(window.document.asset.nodes) == count
