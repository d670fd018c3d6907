"""The canvas follows the document, and its gestures become commands."""

from __future__ import annotations

import random

import pytest
from PySide6.QtCore import QPoint

from editor.canvas import END_KEY, START_KEY, Canvas, node_type_mime
from editor.model.commands import (
    RenameNodeCommand,
    SetExitCommand,
    SetNodeFieldCommand,
    add_nodes,
    remove_nodes,
)
from editor.model.document import Document
from runtime.asset.model import END, Asset, new_node
from runtime.asset.validation import validate_asset


@pytest.fixture
def canvas(qtbot):
    nodes = [
        new_node("ClassifyIntent", "route", intents=[{"name": "hello", "exit": "reply"}], fallback_exit="reply"),
        new_node("GenerateAndSpeak", "reply", position=(300, 0), default_exit="sum"),
        new_node("Summarize", "sum", position=(600, 0)),
    ]
    doc = Document(Asset(nodes=nodes, start_node="route"))
    canvas = Canvas(doc)
    canvas.rebuild()
    qtbot.addWidget(canvas.widget)
    canvas.widget.show()
    return canvas


def drawn(canvas: Canvas) -> dict[tuple[str, str], str]:
    """Every pipe on the canvas as (source key, port) -> target key, read from the pipe items."""
    out = {}
    for pipe in canvas.viewer.all_pipes():
        source = pipe.output_port.node.asset_id
        target = pipe.input_port.node.asset_id
        out[(source, pipe.output_port.name)] = target
    return out


def expected(doc: Document) -> dict[tuple[str, str], str]:
    out = {}
    for node in doc.asset.nodes:
        for port, target in node.exits().items():
            if target == END:
                out[(node.id, port)] = END_KEY
            elif doc.has_node(target):
                out[(node.id, port)] = target
    if doc.has_node(doc.asset.start_node):
        out[(START_KEY, "start")] = doc.asset.start_node
    return out


def test_pipes_match_the_model(canvas):
    assert drawn(canvas) == expected(canvas.document)
    ports = list(canvas.canvas_node("route").outputs())
    assert ports == ["intent:hello", "fallback_exit"]
    assert canvas.canvas_node("route").view.is_start


def test_every_edit_and_its_undo_keeps_pipes_and_model_in_step(canvas):
    doc = canvas.document
    rng = random.Random(3)
    for step in range(60):
        ids = doc.asset.node_ids()
        choice = rng.random()
        if choice < 0.25 or not ids:
            node = new_node(rng.choice(["Generate", "Summarize", "Retrieve"]), doc.unique_id("n"),
                            default_exit=rng.choice(ids + [""]))
            doc.push(add_nodes(doc, [node], "add"))
        elif choice < 0.4 and len(ids) > 1:
            doc.push(remove_nodes(doc, [rng.choice(ids)]))
        elif choice < 0.5:
            old = rng.choice(ids)
            doc.push(RenameNodeCommand(doc, old, doc.unique_id(old + "_r")))
        else:
            source = rng.choice(ids)
            port = rng.choice(list(doc.node(source).exits()))
            doc.push(SetExitCommand(doc, source, port, doc.exit_target(source, port), rng.choice(ids + [""])))
        assert drawn(canvas) == expected(doc), f"after step {step}"
    while doc.undo_stack.canUndo():
        doc.undo_stack.undo()
        assert drawn(canvas) == expected(doc)
    while doc.undo_stack.canRedo():
        doc.undo_stack.redo()
    assert drawn(canvas) == expected(doc)


def test_intent_ports_follow_the_intents(canvas):
    doc = canvas.document
    intents = [i.model_dump() for i in doc.node("route").intents] + [{"name": "bye", "exit": "sum"}]
    doc.push(SetNodeFieldCommand(doc, "route", "intents", doc.node("route").intents, intents))
    assert list(canvas.canvas_node("route").outputs()) == ["intent:hello", "intent:bye", "fallback_exit"]
    assert drawn(canvas)[("route", "intent:bye")] == "sum"
    doc.undo_stack.undo()
    assert "intent:bye" not in canvas.canvas_node("route").outputs()


def test_connection_gestures_become_commands(canvas):
    doc = canvas.document
    reply_out = canvas.canvas_node("reply").outputs()["default_exit"].view
    route_in = canvas.canvas_node("route").input_ports()[0].view
    sum_in = canvas.canvas_node("sum").input_ports()[0].view
    canvas.viewer.connection_changed.emit([(reply_out, sum_in)], [(reply_out, route_in)])
    assert doc.node("reply").default_exit == "route"
    assert doc.undo_stack.count() == 1
    # Dropped on nothing: the exit ends the turn, drawn as a pipe to END.
    canvas.viewer.connection_changed.emit([(reply_out, route_in)], [])
    assert doc.node("reply").default_exit == ""
    assert drawn(canvas)[("reply", "default_exit")] == END_KEY
    # START to a node sets the start node.
    start_out = canvas.drawing.start.output_ports()[0].view
    canvas.viewer.connection_changed.emit([], [(start_out, sum_in)])
    assert doc.asset.start_node == "sum"
    assert canvas.canvas_node("sum").view.is_start and not canvas.canvas_node("route").view.is_start
    assert drawn(canvas) == expected(doc)


def test_a_gesture_that_changes_nothing_redraws_the_pipe(canvas):
    reply_out = canvas.canvas_node("reply").outputs()["default_exit"]
    for pipe in list(reply_out.view.connected_pipes):
        pipe.delete()  # what the viewer does when a drag starts on a connected port
    sum_in = canvas.canvas_node("sum").input_ports()[0].view
    canvas.viewer.connection_changed.emit([], [(reply_out.view, sum_in)])
    assert canvas.document.undo_stack.count() == 0
    assert drawn(canvas) == expected(canvas.document)


def test_palette_drop_adds_a_node_where_it_was_dropped(canvas):
    canvas.viewer.data_dropped.emit(node_type_mime("Retrieve"), QPoint(120, 340))
    node = canvas.document.asset.nodes[-1]
    assert node.type == "Retrieve" and node.position == (120.0, 340.0)
    assert canvas.selected_ids() == [node.id]


def test_problems_are_marked_on_nodes(canvas):
    doc = canvas.document
    doc.push(SetExitCommand(doc, "reply", "default_exit", "sum", "reply"))  # loop without END? no: sum still ends
    problems = validate_asset(doc.asset)
    canvas.mark_problems(problems)
    flagged = {p.node_id for p in problems if p.node_id}
    for node_id in doc.asset.node_ids():
        assert (canvas.problem_severity(node_id) is not None) == (node_id in flagged)
    canvas.mark_problems([])
    assert all(canvas.problem_severity(n) is None for n in doc.asset.node_ids())


def test_auto_layout_places_terminals_and_nodes_in_layers(canvas):
    doc = canvas.document
    for node_id in doc.asset.node_ids():
        doc.set_position(node_id, (0, 0))
    canvas.auto_layout()
    xs = [doc.node(n).position[0] for n in ("route", "reply", "sum")]
    assert xs == sorted(xs) and len(set(xs)) == 3
    assert doc.terminal_position("start")[0] < xs[0] < xs[-1] < doc.terminal_position("end")[0]


def overlapping(canvas: Canvas) -> list[tuple[str, str]]:
    """Pairs of canvas nodes (terminals too) whose rectangles overlap."""
    items = [(n.asset_id, n.view.sceneBoundingRect()) for n in canvas.graph.all_nodes()]
    return [(a, b) for i, (a, ra) in enumerate(items) for b, rb in items[i + 1:] if ra.intersects(rb)]


def test_nodes_added_without_a_place_land_in_free_space(canvas):
    assert overlapping(canvas) == []
    cx, cy = canvas.view_center()
    added = []
    for type_name in ["Generate", "GenerateAndSpeak", "ToolCall", "ClassifyIntent", "Retrieve", "Summarize"]:
        canvas.select([])
        added.append(canvas.add_node(type_name))
        assert overlapping(canvas) == [], f"{added[-1]} landed on another node"
    first = canvas.canvas_node(added[0]).view.sceneBoundingRect()
    assert abs(first.center().x() - cx) < 300 and abs(first.center().y() - cy) < 200, "near the view's centre"


def test_a_node_added_with_a_selection_goes_to_its_right(canvas):
    canvas.select(["route"])
    beside = canvas.add_node("Generate")
    route = canvas.canvas_node("route").view.sceneBoundingRect()
    rect = canvas.canvas_node(beside).view.sceneBoundingRect()
    assert rect.left() > route.right() and rect.left() - route.right() < 120
    assert overlapping(canvas) == []
    assert canvas.selected_ids() == [beside], "the next one goes to the right of this one"
    after = canvas.add_node("Generate")
    assert canvas.canvas_node(after).view.sceneBoundingRect().left() > rect.left()
    assert overlapping(canvas) == []
