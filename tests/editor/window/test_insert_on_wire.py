"""A node dropped from the palette on a connection (or added with one connection selected) goes on it:
source exit -> new node, the new node's default exit -> the old target, as one undo step."""

from __future__ import annotations

import json

from PySide6.QtCore import QPoint

from editor.canvas import node_type_mime
from runtime.asset.file import parse_asset

GRAPH = {
    "version": 1, "name": "Chain", "default_model": "m.gguf", "start_node": "first",
    "nodes": [
        {"id": "first", "type": "Generate", "default_exit": "second", "position": [0, 0]},
        {"id": "second", "type": "Generate", "position": [700, 0]},
    ],
}


def open_graph(window) -> None:
    window.set_asset(parse_asset(json.dumps(GRAPH)))
    window.canvas.finish_building()
    window.document.set_terminal_position("start", (-700, 0))
    window.document.set_terminal_position("end", (1400, 0))


def pipe_from(window, source: str, port: str):
    node = window.canvas.drawing.terminal("@start") if source == "START" else window.canvas.canvas_node(source)
    (pipe,) = node.outputs()[port].view.connected_pipes
    return pipe


def middle_of(pipe) -> QPoint:
    point = pipe.mapToScene(pipe.path().pointAtPercent(0.5))
    return QPoint(int(point.x()), int(point.y()))


def drop(window, type_name: str, at: QPoint) -> str:
    before = set(window.document.asset.node_ids())
    window.canvas.viewer.data_dropped.emit(node_type_mime(type_name), at)
    (new_id,) = set(window.document.asset.node_ids()) - before
    return new_id


def test_a_node_dropped_on_a_connection_splits_it_in_one_undo_step(window):
    open_graph(window)
    doc = window.document
    at = middle_of(pipe_from(window, "first", "default_exit"))
    new = drop(window, "Summarize", at)
    assert doc.node("first").default_exit == new
    assert doc.node(new).default_exit == "second"
    x, y = doc.node(new).position
    assert x < at.x() < x + 300 and y < at.y(), "centred where it fell"
    window.canvas.widget.grab().save("/tmp/n/insert_on_wire.png")
    assert doc.undo_stack.undoText().startswith("Insert Summarize after first.default_exit")
    window.undo_action.trigger()
    assert not doc.has_node(new) and doc.node("first").default_exit == "second"
    window.redo_action.trigger()
    assert doc.node("first").default_exit == new and doc.node(new).default_exit == "second"


def test_dropped_on_the_start_connection_it_becomes_the_start_node(window):
    open_graph(window)
    doc = window.document
    new = drop(window, "Generate", middle_of(pipe_from(window, "START", "start")))
    assert doc.asset.start_node == new and doc.node(new).default_exit == "first"
    window.undo_action.trigger()
    assert doc.asset.start_node == "first"


def test_dropped_on_a_connection_to_end_it_ends_the_turn_itself(window):
    open_graph(window)
    doc = window.document
    new = drop(window, "Generate", middle_of(pipe_from(window, "second", "default_exit")))
    assert doc.node("second").default_exit == new and doc.node(new).default_exit == ""


def test_a_classifier_on_a_wire_continues_by_its_default_exit(window):
    open_graph(window)
    doc = window.document
    new = drop(window, "ClassifyIntent", middle_of(pipe_from(window, "first", "default_exit")))
    assert doc.node("first").default_exit == new
    assert doc.node(new).fallback_exit == "second"


def test_dropped_away_from_connections_it_is_only_added(window):
    open_graph(window)
    doc = window.document
    new = drop(window, "Generate", QPoint(300, 600))
    assert doc.node("first").default_exit == "second" and doc.node(new).default_exit == ""


def test_the_add_menu_with_a_connection_selected_puts_the_node_on_it(window):
    open_graph(window)
    doc = window.document
    window.canvas.select([])
    pipe_from(window, "first", "default_exit").setSelected(True)
    new = window.canvas.add_node("Summarize")
    assert doc.node("first").default_exit == new and doc.node(new).default_exit == "second"
    assert window.canvas.selected_ids() == [new]
    x, _ = doc.node(new).position
    assert 0 < x < 700, "between the two ends"
    # with a node selected too, Add adds beside it as before
    window.canvas.select(["second"])
    pipe_from(window, "second", "default_exit").setSelected(True)
    other = window.canvas.add_node("Generate")
    assert doc.node("second").default_exit == "" and doc.node(other).default_exit == ""


def test_tab_search_with_a_connection_selected_puts_the_node_on_it(window):
    open_graph(window)
    doc = window.document
    window.canvas.select([])
    pipe_from(window, "START", "start").setSelected(True)
    window.canvas.gestures._search_at = None  # Tab with the mouse outside the canvas
    window.canvas.search.chosen.emit("Generate")
    (new,) = set(doc.asset.node_ids()) - {"first", "second"}
    assert doc.asset.start_node == new and doc.node(new).default_exit == "first"
