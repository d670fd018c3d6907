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
           "Guard", "Retrieve"]


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


@pytest.mark.parametrize("name", ["", "Two words", "9lives", "a-b", "x" * 65, "Caf\u00e9"])
def test_register_refuses_a_type_name_that_is_not_a_plain_identifier(name) -> None:
    """Such a name (or '') stopped the editor from starting (issue 20)."""
    from typing import Literal

    odd = type("Odd", (NodeBase,), {"__annotations__": {"type": Literal[name]}, "type": name})
    before = dict(NODE_TYPES)
    with pytest.raises(ValueError, match="is not a plain identifier"):
        register(NodeType(odd))
    assert NODE_TYPES == before


def test_a_broken_plugin_is_reported_not_raised(monkeypatch) -> None:
    broken = metadata.EntryPoint("broken", "no_such_module_anywhere:NODE_TYPE", nodes.ENTRY_POINT_GROUP)
    monkeypatch.setattr(nodes.metadata, "entry_points", lambda group: [broken] if group == nodes.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(nodes, "PLUGIN_PROBLEMS", [])
    nodes.load_plugins()
    assert len(nodes.PLUGIN_PROBLEMS) == 1
    assert "broken" in nodes.PLUGIN_PROBLEMS[0] and "ModuleNotFoundError" in nodes.PLUGIN_PROBLEMS[0]
    assert "broken" not in NODE_TYPES


NODE_CLASSES = r"\b(Generate|GenerateAndSpeak|ToolCall|Summarize|ClassifyIntent|ClassifyAttributes|Retrieve|GeneratingNode)\b"


def test_no_type_checks_over_node_types_outside_the_registry() -> None:
    """What a type does lives in its module (runtime/nodes/) and its NodeView (editor/canvas/node_types.py)."""
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


EAGER_PLUGIN = '''
from typing import Literal

from runtime.asset.model import Asset  # at import time: the registry is still loading this module
from runtime.nodes import END, NodeBase, NodeType


class Eager(NodeBase):
    type: Literal["Eager"] = "Eager"
    default_exit: str = END

    def exits(self):
        return {"default_exit": self.default_exit}


assert Asset is not None
NODE_TYPE = NodeType(Eager)
'''

EAGER_SESSION = '''
import json, sys
first = sys.argv[1]
__import__(first)
from runtime.asset.file import asset_from_dict
from runtime.nodes import NODE_TYPES, PLUGIN_PROBLEMS
asset = asset_from_dict({"version": 1, "start_node": "e", "nodes": [{"id": "e", "type": "Eager"}]}, "eager.json")
print("RESULT " + json.dumps({"registered": "Eager" in NODE_TYPES, "problems": PLUGIN_PROBLEMS,
                              "loaded": [n.type_name for n in asset.nodes]}))
'''


@pytest.mark.parametrize("first", ["runtime.asset.model", "runtime.nodes", "runtime.asset.file", "runtime.agent"])
def test_a_plugin_that_imports_the_asset_model_at_import_time_is_added(tmp_path, first) -> None:
    """The registry makes the old rule ("do not import runtime.asset.model at import time") unneeded:
    whichever module is imported first, the plugin's type is registered and the asset model reads it."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "parley_eager.py").write_text(EAGER_PLUGIN, encoding="utf-8")
    dist = tmp_path / "parley_eager-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: parley-eager\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(f"[{nodes.ENTRY_POINT_GROUP}]\neager = parley_eager:NODE_TYPE\n",
                                           encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", EAGER_SESSION, first], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, check=False)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and result, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(result[-1][len("RESULT "):]) == {"registered": True, "problems": [], "loaded": ["Eager"]}
