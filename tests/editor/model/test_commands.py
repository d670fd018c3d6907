"""Undo commands: each edit undoes exactly, compound edits as one step."""

from __future__ import annotations

from editor.model.commands import MoveCommand, SetNodeFieldCommand, add_nodes, remove_nodes
from editor.model.document import Document
from runtime.asset.file import dumps_asset
from runtime.asset.model import Asset, new_node


def make() -> Document:
    nodes = [
        new_node("ClassifyIntent", "route", intents=[{"name": "hello", "exit": "reply"}], fallback_exit="reply"),
        new_node("GenerateAndSpeak", "reply", default_exit="sum"),
        new_node("Summarize", "sum"),
    ]
    return Document(Asset(nodes=nodes, start_node="route"))


def test_delete_ends_exits_and_clears_start_in_one_step():
    doc = make()
    before = dumps_asset(doc.asset)
    doc.push(remove_nodes(doc, ["reply", "route"]))
    assert doc.asset.node_ids() == ["sum"]
    assert doc.asset.start_node == ""
    assert doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert dumps_asset(doc.asset) == before
    doc.undo_stack.redo()
    assert doc.asset.node_ids() == ["sum"]


def test_discarded_redo_steps_are_safe():
    # Pushing after an undo deletes the undone command; the macro must survive that.
    doc = make()
    doc.push(remove_nodes(doc, ["reply"]))
    doc.undo_stack.undo()
    doc.push(add_nodes(doc, [new_node("Generate", "extra")], "Add"))
    assert doc.asset.node_ids() == ["route", "reply", "sum", "extra"]


def test_typing_merges_into_one_step():
    doc = make()
    for text in ("H", "Hi", "Hi!"):
        old = doc.node("reply").system_prompt
        doc.push(SetNodeFieldCommand(doc, "reply", "system_prompt", old, text, merge=True))
    assert doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert doc.node("reply").system_prompt == ""


def test_move_nodes_and_terminals():
    doc = make()
    doc.push(MoveCommand(doc, {"reply": ((0.0, 0.0), (5.0, 6.0)), "@end": (None, (100.0, 0.0))}))
    assert doc.node("reply").position == (5.0, 6.0)
    assert doc.terminal_position("end") == (100.0, 0.0)
    doc.undo_stack.undo()
    assert doc.node("reply").position == (0.0, 0.0)
    assert doc.terminal_position("end") is None


def test_a_document_with_undo_steps_is_freed_without_the_garbage_collector(qapp):
    """Commands hold their document weakly, so a document and its undo stack are freed as soon as
    nothing uses them: left to the garbage collector, the stack's Python commands were deleted half
    torn down, a segmentation fault in QUndoStack::clear at a later, random collection."""
    import gc
    import weakref

    enabled = gc.isenabled()
    gc.disable()
    try:
        document = make()
        document.push(SetNodeFieldCommand(document, "route", "title", "", "Router"))
        document.push(add_nodes(document, [new_node("Generate", "extra")], "Add"))
        assert document.undo_stack.count() == 2
        gone = weakref.ref(document)
        del document
        assert gone() is None, "only a garbage collection would free the document"
    finally:
        if enabled:
            gc.enable()
