"""The node-type registry: one table, one module per type, and nothing else testing for types."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

from runtime import nodes
from runtime.asset.model import Asset, new_node
from runtime.nodes import NODE_TYPES, NodeBase, NodeType, register

ROOT = Path(__file__).resolve().parents[3]
BUILTIN = ["Generate", "GenerateAndSpeak", "ToolCall", "Summarize", "ClassifyIntent", "ClassifyAttributes",
           "Retrieve"]


def test_every_builtin_type_is_one_entry_of_the_table() -> None:
    assert list(NODE_TYPES)[: len(BUILTIN)] == BUILTIN
    for name, entry in NODE_TYPES.items():
        assert entry.name == name and issubclass(entry.model, NodeBase)
        node = new_node(name, "n")
        assert node.type_name == name
        assert Asset(nodes=[node]).nodes[0] == node  # the asset model's union is built from the table


def test_exits_are_described_by_their_node_type() -> None:
    node = new_node("ClassifyIntent", "route", intents=[{"name": "greet", "exit": "a"}, {"name": "bye"}])
    assert node.exits() == {"intent:greet": "a", "intent:bye": "", "fallback_exit": ""}
    assert node.exit_field("intent:bye") == "intents.1.exit"
    assert node.exit_label("intent:bye") == "bye" and node.exit_label("fallback_exit") == "fallback"
    moved = node.with_exits({"intent:bye": "b", "fallback_exit": "c"})
    assert moved.exits() == {"intent:greet": "a", "intent:bye": "b", "fallback_exit": "c"}
    with pytest.raises(KeyError):
        node.exit_field("intent:nope")
    reply = new_node("Generate", "reply", default_exit="x")
    assert reply.with_exits({"default_exit": ""}).default_exit == ""
    assert new_node("Retrieve", "r").model_uses() == []
    assert [u.context_size for u in new_node("Summarize", "s").model_uses()] == [2048]


def test_register_refuses_what_is_not_a_node_type() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(NodeType(NODE_TYPES["Generate"].model))
    with pytest.raises(TypeError):
        register(NodeType(int))  # type: ignore[arg-type]


def test_a_broken_plugin_is_reported_not_raised(monkeypatch) -> None:
    broken = metadata.EntryPoint("broken", "no_such_module_anywhere:NODE_TYPE", nodes.ENTRY_POINT_GROUP)
    monkeypatch.setattr(nodes.metadata, "entry_points", lambda group: [broken] if group == nodes.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(nodes, "PLUGIN_PROBLEMS", [])
    nodes._load_plugins()
    assert len(nodes.PLUGIN_PROBLEMS) == 1
    assert "broken" in nodes.PLUGIN_PROBLEMS[0] and "ModuleNotFoundError" in nodes.PLUGIN_PROBLEMS[0]
    assert "broken" not in NODE_TYPES


NODE_CLASSES = r"\b(Generate|GenerateAndSpeak|ToolCall|Summarize|ClassifyIntent|ClassifyAttributes|Retrieve|GeneratingNode)\b"


def test_no_type_checks_over_node_types_outside_the_registry() -> None:
    """What a type does lives in its module (runtime/nodes/) and its NodeView (editor/node_types.py)."""
    allowed = {ROOT / "editor" / "node_types.py"}
    offenders = []
    for path in [*(ROOT / "runtime").rglob("*.py"), *(ROOT / "editor").rglob("*.py")]:
        if path.is_relative_to(ROOT / "runtime" / "nodes") or path in allowed:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"isinstance\([^)]*" + NODE_CLASSES, line) or re.search(
                    r"\.type(_name)?\s*(==|!=|in)\s*[\"(]", line) or "PLAYER_FACING_TYPES" in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
