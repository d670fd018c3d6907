"""``copy_incoming_exits``: which exits Duplicate with Connections points at a copy (no widgets)."""

from __future__ import annotations

from editor.model.commands import MacroCommand, add_nodes, copy_incoming_exits
from editor.model.document import Document
from runtime.asset.model import Asset, new_node


def test_each_leading_node_gives_its_first_free_exit_once_per_exit_into_the_original():
    classify = new_node("ClassifyIntent", "classify")
    classify = type(classify).model_validate({**classify.model_dump(), "intents": [
        {"name": "a", "exit": "reply"}, {"name": "b", "exit": "reply"}, {"name": "c", "exit": ""}],
        "fallback_exit": ""})
    doc = Document(Asset(nodes=[classify, new_node("Generate", "reply")]))
    command = add_nodes(doc, [new_node("Generate", "reply_2")], "Duplicate")
    connected, skipped = copy_incoming_exits(doc, {"reply": "reply_2"}, command)
    assert connected == [("classify", "intent:c", "reply_2"), ("classify", "fallback_exit", "reply_2")]
    assert skipped == []
    doc.push(command)
    assert [i.exit for i in doc.node("classify").intents] == ["reply", "reply", "reply_2"]
    assert doc.node("classify").fallback_exit == "reply_2"
    doc.undo_stack.undo()
    assert doc.node("classify").fallback_exit == "" and not doc.has_node("reply_2")


def test_a_node_without_a_free_exit_is_skipped():
    doc = Document(Asset(nodes=[new_node("Generate", "greet").model_copy(update={"default_exit": "reply"}),
                                new_node("Generate", "reply")]))
    command = MacroCommand("Duplicate")
    connected, skipped = copy_incoming_exits(doc, {"reply": "reply_2"}, command)
    assert connected == [] and skipped == [("greet", "default_exit", "reply_2")] and command.parts == []
