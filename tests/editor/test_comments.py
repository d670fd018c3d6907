"""Backdrops and notes on the canvas: made, dragged, resized, edited, deleted, copied and saved,
every change undoable, and none of it ever part of a prompt."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QColor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QColorDialog

from editor.canvas.comments import CommentDialog
from editor.model.commands import set_comment
from editor.model.document import Document, FieldRejected
from runtime.agent import Agent
from runtime.asset.file import load_asset, save_asset
from runtime.asset.model import Asset, Comment, palette_node
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir


def two_nodes(window) -> tuple[str, str]:
    a = window.canvas.add_node("Generate", (0.0, 0.0))
    b = window.canvas.add_node("Generate", (320.0, 40.0))
    return a, b


def drag(viewer, start: QPoint, end: QPoint) -> None:
    viewport = viewer.viewport()
    QTest.mousePress(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    for i in range(1, 6):
        QTest.mouseMove(viewport, start + (end - start) * (i / 5))
    QTest.mouseRelease(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, end)


def group(window, ids: list[str]) -> str:
    window.canvas.select(ids)
    return window.comment_actions.group_selection()


# --- the document and its commands ----------------------------------------------------------------


def test_document_refuses_a_bad_comment_change_and_keeps_the_old_one():
    doc = Document(Asset(comments=[Comment(id="c", kind="note")]))
    with pytest.raises(FieldRejected) as refused:
        doc.set_comment_fields("c", {"size": (0.0, 10.0)})
    assert "size" in refused.value.field and "above 0" in refused.value.message
    with pytest.raises(FieldRejected):
        doc.set_comment_fields("c", {"color": (300, 0, 0)})
    assert doc.comment("c").size == (400.0, 240.0) and doc.comment("c").color == (60, 70, 90)
    assert doc.unique_comment_id("c") == "c_2"
    with pytest.raises(ValueError):
        doc.add_comment(Comment(id="c", kind="backdrop"))


# --- a backdrop --------------------------------------------------------------------------------------


def test_group_in_backdrop_wraps_the_selection_and_is_one_undo_step(window):
    doc = window.document
    a, b = two_nodes(window)
    steps = doc.undo_stack.count()
    window.canvas.select([a, b])
    window.comment_actions.group_action.trigger()
    (backdrop,) = doc.asset.comments
    assert backdrop.kind == "backdrop" and backdrop.title
    assert doc.undo_stack.count() == steps + 1
    assert window.canvas.comments.members(backdrop.id) == [a, b]
    view = window.canvas.comments.view(backdrop.id)
    for node_id in (a, b):
        assert view.sceneBoundingRect().contains(window.canvas.canvas_node(node_id).view.sceneBoundingRect())
    assert view.zValue() < window.canvas.canvas_node(a).view.zValue(), "the nodes are drawn over it"
    assert window.comment_actions.group_action.shortcut().toString() == "Ctrl+G"
    window.undo_action.trigger()
    assert doc.asset.comments == [] and not window.canvas.comments.views
    window.redo_action.trigger()
    assert doc.asset.comments == [backdrop] and backdrop.id in window.canvas.comments.views


def test_dragging_a_backdrop_moves_its_nodes_in_one_undo_step(window, qtbot):
    doc = window.document
    a, b = two_nodes(window)
    outside = window.canvas.add_node("Generate", (0.0, 600.0))
    backdrop = group(window, [a, b])
    window.canvas.select([])
    viewer = window.canvas.viewer
    view = window.canvas.comments.view(backdrop)
    before = {i: doc.node(i).position for i in (a, b, outside)}
    corner = doc.comment(backdrop).position
    grab = viewer.mapFromScene(view.sceneBoundingRect().topLeft() + QPointF(60, 12))  # its title bar
    steps = doc.undo_stack.count()
    drag(viewer, grab, grab + QPoint(150, 90))
    moved = doc.comment(backdrop).position
    dx, dy = moved[0] - corner[0], moved[1] - corner[1]
    assert dx > 50 and dy > 30, "the backdrop followed the drag"
    for node_id in (a, b):
        x, y = doc.node(node_id).position
        assert (x - before[node_id][0], y - before[node_id][1]) == pytest.approx((dx, dy)), "its nodes came along"
    assert doc.node(outside).position == before[outside]
    assert doc.undo_stack.count() == steps + 1, "one step for the backdrop and its nodes"
    # (the END terminal of the empty canvas sits inside it here too, and comes along)
    assert doc.undo_stack.text(doc.undo_stack.count() - 1).startswith("Move a comment and ")
    assert window.canvas.comments.selected_ids() == [backdrop] and window.canvas.selected_ids() == [], \
        "the click leaves the backdrop alone selected"
    window.undo_action.trigger()
    assert doc.comment(backdrop).position == corner
    assert {i: doc.node(i).position for i in (a, b, outside)} == before
    assert tuple(window.canvas.canvas_node(a).pos()) == before[a]
    assert tuple(view.xy_pos) == corner


def test_resizing_a_backdrop_is_undoable(window, qtbot):
    doc = window.document
    a, b = two_nodes(window)
    backdrop = group(window, [a, b])
    view = window.canvas.comments.view(backdrop)
    size = doc.comment(backdrop).size
    viewer = window.canvas.viewer
    sizer = view._sizer
    grab = viewer.mapFromScene(sizer.sceneBoundingRect().center())
    drag(viewer, grab, grab + QPoint(120, 80))
    w, h = doc.comment(backdrop).size
    assert w > size[0] + 50 and h > size[1] + 30
    assert (view.width, view.height) == (w, h)
    window.undo_action.trigger()
    assert doc.comment(backdrop).size == size and (view.width, view.height) == size


def test_editing_title_text_and_colour_is_one_step(window, monkeypatch):
    doc = window.document
    a, b = two_nodes(window)
    backdrop = group(window, [a, b])
    monkeypatch.setattr(QColorDialog, "getColor", staticmethod(lambda *args, **kwargs: QColor(200, 40, 40)))
    window.canvas.comments.select([backdrop])
    dialog = window.comment_actions.edit_selected()
    assert isinstance(dialog, CommentDialog)
    dialog.title_edit.setText("Greeting")
    dialog.text_edit.setPlainText("Says hello, then listens.")
    assert dialog.choose_color()
    steps = doc.undo_stack.count()
    dialog.accept()
    comment = doc.comment(backdrop)
    assert (comment.title, comment.text, comment.color) == ("Greeting", "Says hello, then listens.", (200, 40, 40))
    assert doc.undo_stack.count() == steps + 1
    view = window.canvas.comments.view(backdrop)
    assert view.comment == comment and tuple(view.color[:3]) == (200, 40, 40)
    window.undo_action.trigger()
    assert doc.comment(backdrop).title == "Group" and view.comment.title == "Group"


def test_double_click_opens_the_editor(window, qtbot):
    a, b = two_nodes(window)
    backdrop = group(window, [a, b])
    viewer = window.canvas.viewer
    view = window.canvas.comments.view(backdrop)
    point = viewer.mapFromScene(view.sceneBoundingRect().topLeft() + QPointF(60, 12))
    QTest.mouseDClick(viewer.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point)
    qtbot.waitUntil(lambda: window.comment_actions.dialog is not None)
    assert window.comment_actions.dialog.comment_id == backdrop
    window.comment_actions.dialog.reject()


def test_delete_removes_the_backdrop_and_leaves_its_nodes(window):
    doc = window.document
    a, b = two_nodes(window)
    backdrop = group(window, [a, b])
    window.canvas.comments.select([backdrop])
    window.delete_action.trigger()
    assert doc.asset.comments == [] and doc.asset.node_ids() == [a, b]
    window.undo_action.trigger()
    assert [c.id for c in doc.asset.comments] == [backdrop]


# --- a note ----------------------------------------------------------------------------------------


def test_add_note_at_the_view_centre_and_write_in_it(window):
    doc = window.document
    note = window.comment_actions.add_note()
    comment = doc.comment(note)
    assert comment.kind == "note"
    cx, cy = window.canvas.view_center()
    x, y = comment.position
    w, h = comment.size
    assert (x + w / 2, y + h / 2) == pytest.approx((cx, cy), abs=1.0), "an empty canvas: right at the centre"
    # With a node at the centre, the note goes beside it, in view, where it can be read.
    window.undo_action.trigger()
    node = window.canvas.add_node("Generate", (cx - 100.0, cy - 60.0))
    note = window.comment_actions.add_note()
    comment = doc.comment(note)
    placed = window.canvas.comments.view(note).sceneBoundingRect()
    assert not placed.intersects(window.canvas.canvas_node(node).view.sceneBoundingRect())
    assert window.canvas.drawing.visible_rect().contains(placed)
    dialog = window.comment_actions.edit_comment(note)
    dialog.text_edit.setPlainText("Ask the writer about the ending.")
    dialog.accept()
    assert doc.comment(note).text == "Ask the writer about the ending."
    window.undo_action.trigger()
    assert doc.comment(note).text == "Note"
    window.undo_action.trigger()
    assert not doc.asset.comments


def test_dragging_a_note_moves_only_the_note(window):
    doc = window.document
    a = window.canvas.add_node("Generate", (0.0, 0.0))
    note = window.comment_actions.add_note()
    doc.push(set_comment(doc, note, {"position": (-40.0, -60.0), "size": (600.0, 400.0)}))
    window.canvas.select([])
    viewer = window.canvas.viewer
    view = window.canvas.comments.view(note)
    grab = viewer.mapFromScene(view.sceneBoundingRect().topLeft() + QPointF(15, 15))
    drag(viewer, grab, grab + QPoint(100, 0))
    assert doc.comment(note).position[0] > 0
    assert doc.node(a).position == (0.0, 0.0), "a note carries no nodes"


# --- saved, reloaded, copied; never run --------------------------------------------------------------


def test_comments_save_and_reload_the_same(window, tmp_path):
    doc = window.document
    a, b = two_nodes(window)
    group(window, [a, b])
    window.comment_actions.add_note()
    path = tmp_path / "npc.json"
    assert window.save_to(str(path))
    saved = json.loads(path.read_text())
    assert [c["kind"] for c in saved["comments"]] == ["backdrop", "note"]
    before = list(doc.asset.comments)
    window.open_path(str(path))
    assert doc.asset.comments == before
    assert set(window.canvas.comments.views) == {c.id for c in before}
    for comment in before:
        view = window.canvas.comments.view(comment.id)
        assert tuple(view.xy_pos) == comment.position and (view.width, view.height) == comment.size


def test_copy_paste_takes_a_backdrop_with_its_nodes(window):
    doc = window.document
    a, b = two_nodes(window)
    backdrop = group(window, [a, b])
    window.canvas.comments.select([backdrop])
    window.copy_action.trigger()
    copied = json.loads(QApplication.clipboard().text())
    assert [c["id"] for c in copied["comments"]] == [backdrop]
    assert [n["id"] for n in copied["nodes"]] == [a, b], "a backdrop copies with the nodes inside it"
    steps = doc.undo_stack.count()
    pasted = window.paste_text(QApplication.clipboard().text(), None)
    assert len(pasted) == 2 and len(doc.asset.comments) == 2
    assert doc.undo_stack.count() == steps + 1
    copy = doc.asset.comments[1]
    assert copy.id != backdrop
    assert window.canvas.comments.members(copy.id) == pasted, "the copy groups the pasted nodes"
    window.undo_action.trigger()
    assert len(doc.asset.comments) == 1 and doc.asset.node_ids() == [a, b]


def test_paste_of_a_bad_comment_says_where_and_changes_nothing(window):
    text = json.dumps({"nodes": [], "comments": [{"id": "x", "kind": "sticker"}, {"id": "n", "kind": "note"}]})
    steps = window.document.undo_stack.count()
    assert window.paste_text(text, (10.0, 20.0)) == []
    assert window.document.asset.comments == [] and window.document.undo_stack.count() == steps
    assert "comments.0.kind" in window.statusBar().currentMessage()
    # a note alone pastes where it is dropped
    window.paste_text(json.dumps({"nodes": [], "comments": [{"id": "n", "kind": "note"}]}), (10.0, 20.0))
    assert [c.id for c in window.document.asset.comments] == ["n"]
    assert window.document.comment("n").position == (10.0, 20.0)


def test_comments_never_reach_a_prompt():
    """A note's text is in the asset and nowhere in what the model is sent."""
    reply = palette_node("Generate", "reply")
    asset = Asset(default_model="m.gguf", start_node="reply", nodes=[reply],
                  comments=[Comment(id="n", kind="note", text="SECRET-NOTE-TEXT", title="SECRET-TITLE")])
    backend = ScriptedBackend(lambda key, request: "Hello.")
    result = Agent(asset, backend).run_turn("hi")
    assert result.reply == "Hello." and backend.calls
    sent = json.dumps([request.messages for _key, request in backend.calls], default=str)
    assert "SECRET" not in sent and "SECRET" not in json.dumps(result.diagnostics.model_dump(), default=str)


def test_an_example_with_comments_loads_into_the_editor(window, tmp_path):
    asset = load_asset(examples_dir() / "chat.json")
    asset = asset.model_copy(update={"comments": [Comment(id="about", kind="note", text="The chat example.")]})
    path = tmp_path / "chat.json"
    save_asset(asset, path)
    assert window.open_path(str(path))
    assert window.canvas.comments.view("about").comment.text == "The chat example."
