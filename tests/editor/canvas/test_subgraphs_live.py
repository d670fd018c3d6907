"""A conversation through a behaviour on the real sample model: the gate guard example runs the shared
threat behaviour as its Subgraph node ``guard``, and the Turn Inspector shows the behaviour's nodes
(``guard/classify``, ...) nested under it, each with the prompt the model received."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from editor.docks.turn_inspector.dock import TurnInspectorDock
from runtime.resources import examples_dir
from tests.editor.live import talk

pytestmark = pytest.mark.model


def test_the_turn_inspector_nests_a_behaviours_nodes_with_their_prompts(make_window, qtbot, tmp_path: Path,
                                                                         sample_model: Path):
    shutil.copytree(examples_dir() / "behaviours", tmp_path / "behaviours")
    raw = json.loads((examples_dir() / "gate_guard.json").read_text(encoding="utf-8"))
    raw["default_model"] = str(sample_model)
    (tmp_path / "gate_guard.json").write_text(json.dumps(raw), encoding="utf-8")
    window = make_window()
    assert window.open_path(str(tmp_path / "gate_guard.json"))
    assert not [p for p in window.problems if p.severity == "error"], window.problems
    window.workspace.switch("Talk")
    window.resize(1600, 1000)

    record = talk(qtbot, window.conversation, "Give me your money or I will break your arm, old man!")
    ran = [n.node for n in record.diagnostics.nodes]
    assert ran[:2] == ["guard", "guard/classify"], ran
    inner = [n for n in ran if n.startswith("guard/")]

    inspector = window.dock(TurnInspectorDock)
    assert inspector.record is record
    top = [inspector.node_list.topLevelItem(i) for i in range(inspector.node_list.topLevelItemCount())]
    assert top[0].data(0, Qt.ItemDataRole.UserRole) == "guard"
    children = [top[0].child(i).data(0, Qt.ItemDataRole.UserRole) for i in range(top[0].childCount())]
    assert children == inner, "the behaviour's nodes, in the order they ran, under the Subgraph node"
    assert [t.data(0, Qt.ItemDataRole.UserRole) for t in top[1:]] == [n for n in ran[1:] if "/" not in n]

    # Each nested node shows its prompt as the others do: the classifier's instructions and the line.
    inspector.show_node("guard/classify")
    assert inspector.current_node_id() == "guard/classify"
    text = inspector.prompt_view.toPlainText()
    assert "You classify the player's latest line" in text and "break your arm" in text
    assert "SYSTEM" in text and "OUTPUT" in text
    generated = [n for n in inner if record.asset.node(n).type_name == "Generate"]
    for node_id in generated:  # the warning or the refusal, when the model called it a threat or a bribe
        inspector.show_node(node_id)
        prompt = record.diagnostics.nodes[ran.index(node_id)].input.prompt
        assert prompt[0].content.splitlines()[0] in inspector.prompt_view.toPlainText()
        assert "You are Brann, the gate guard of Brackenford." in inspector.prompt_view.toPlainText(), \
            "the behaviour's template reads the gate guard's variables"

    # The path is marked on the Subgraph node, and a nested node's link shows it.
    assert window.canvas.highlighted_path()[0] == "guard"
    inspector.show_node("guard/classify")
    inspector.path_label.linkActivated.emit("guard/classify")
    assert window.canvas.selected_ids() == ["guard"]
    qtbot.waitUntil(lambda: inspector.isVisible())
    window.grab().save(str(tmp_path / "subgraph-turn.png"))
    inspector.grab().save(str(tmp_path / "subgraph-inspector.png"))
