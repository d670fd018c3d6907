"""The document model: the one place the asset changes, and its change signals."""

from __future__ import annotations

import pytest

from editor.model.document import Document, FieldRejected
from runtime.asset.model import Asset, new_node


def make() -> Document:
    nodes = [
        new_node("ClassifyIntent", "route", intents=[{"name": "hello", "exit": "reply"}], fallback_exit="reply"),
        new_node("GenerateAndSpeak", "reply", context_size=1024, max_tokens=100),
    ]
    return Document(Asset(nodes=nodes, start_node="route"))


def recorder(doc: Document) -> list[tuple]:
    seen: list[tuple] = []
    for name in ("node_added", "node_removed", "node_changed", "node_moved", "node_renamed", "agent_changed"):
        getattr(doc, name).connect(lambda *args, n=name: seen.append((n, *args)))
    return seen


def test_signals_only_when_a_value_really_changes():
    doc = make()
    seen = recorder(doc)
    assert not doc.set_node_field("reply", "max_tokens", 100)
    assert not doc.set_position("reply", (0.0, 0.0))
    assert not doc.set_agent_field("start_node", "route")
    assert seen == []
    assert doc.set_node_field("reply", "max_tokens", 200)
    assert doc.set_position("reply", (10, 20))
    assert seen == [("node_changed", "reply", "max_tokens"), ("node_moved", "reply")]


def test_refused_values_change_nothing():
    doc = make()
    before = doc.asset.model_dump()
    with pytest.raises(FieldRejected) as err:
        doc.set_node_field("reply", "max_tokens", 1024)
    assert err.value.node_id == "reply" and "context_size" in err.value.message
    with pytest.raises(FieldRejected):
        doc.check_node_field("reply", "input", "not a slot!")
    with pytest.raises(FieldRejected):
        doc.check_agent_field("max_steps_per_turn", 0)
    assert doc.asset.model_dump() == before


def test_exits_by_port_name_including_intents():
    doc = make()
    assert doc.set_exit("route", "intent:hello", "")
    assert doc.node("route").intents[0].exit == ""
    assert doc.set_exit("route", "fallback_exit", "")
    assert doc.exit_target("route", "fallback_exit") == ""
    with pytest.raises(KeyError):
        doc.set_exit("route", "intent:missing", "reply")


def test_rename_repoints_exits_and_start():
    doc = make()
    seen = recorder(doc)
    doc.rename_node("reply", "answer")
    route = doc.node("route")
    assert route.intents[0].exit == "answer" and route.fallback_exit == "answer"
    assert ("node_renamed", "reply", "answer") in seen
    doc.rename_node("route", "router")
    assert doc.asset.start_node == "router"
    with pytest.raises(FieldRejected):
        doc.rename_node("router", "answer")


def test_terminal_positions_live_in_metadata():
    doc = make()
    assert doc.terminal_position("end") is None
    doc.set_terminal_position("end", (500, 20))
    assert doc.terminal_position("end") == (500.0, 20.0)
    assert doc.asset.metadata["parley_studio"]["end_position"] == [500.0, 20.0]
    doc.set_terminal_position("end", None)
    assert doc.asset.metadata == {}


def test_unique_ids():
    doc = make()
    assert doc.unique_id("reply") == "reply_2"
    assert doc.unique_id("fresh") == "fresh"
