"""Bypass (Ctrl+B): the selected nodes pass the turn along their default exit without running; the
canvas greys them, validation warns, the file keeps it and the Turn Inspector says "bypassed"."""

from __future__ import annotations

import json

import pytest

from editor.canvas.node_types import view_of
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.model.bypass import BYPASS_SUFFIX, BYPASSED_FILL, toggle_bypass
from runtime.asset.model import Asset, palette_node
from runtime.backends.scripted import ScriptedBackend
from tests.editor.live import example, sample_model, talk


def two_step_asset(model: str = "m.gguf") -> Asset:
    """draft -> reply: a Generate node in front of the reply, bypassed."""
    draft = palette_node("Generate", "draft", position=(0.0, 0.0)).model_copy(
        update={"default_exit": "reply", "bypassed": True, "title": "Draft"})
    reply = palette_node("GenerateAndSpeak", "reply", position=(320.0, 0.0)).model_copy(update={"max_tokens": 16})
    return Asset(default_model=model, start_node="draft", nodes=[draft, reply])


def test_ctrl_b_toggles_the_selection_in_one_step_and_greys_the_nodes(window):
    doc = window.document
    a = window.canvas.add_node("Generate", (0.0, 0.0))
    b = window.canvas.add_node("Generate", (320.0, 0.0))
    action = window.bypass_actions.action
    assert action.shortcut().toString() == "Ctrl+B" and action.statusTip()
    window.canvas.select([a, b])
    steps = doc.undo_stack.count()
    action.trigger()
    assert doc.node(a).bypassed and doc.node(b).bypassed
    assert doc.undo_stack.count() == steps + 1
    view = window.canvas.canvas_node(a).view
    assert view.name == doc.node(a).display_title + BYPASS_SUFFIX
    assert tuple(view.color[:3]) == BYPASSED_FILL and view.opacity() < 1.0
    window.undo_action.trigger()
    assert not doc.node(a).bypassed and not doc.node(b).bypassed
    assert view.name == doc.node(a).display_title and view.opacity() == 1.0
    assert tuple(view.color[:3]) == view_of("Generate").fill
    window.redo_action.trigger()
    window.canvas.select([a, b])
    action.trigger()  # all bypassed: run them again
    assert not doc.node(a).bypassed and not doc.node(b).bypassed


def test_a_mixed_selection_is_bypassed_whole():
    from editor.model.document import Document

    doc = Document(two_step_asset())
    command = toggle_bypass(doc, ["draft", "reply"])
    assert command is not None and command.text() == "Bypass reply", "only the one that changes"
    doc.push(command)
    assert doc.node("reply").bypassed and doc.node("draft").bypassed
    assert toggle_bypass(doc, []) is None


def test_a_bypassed_node_drawn_greyed_when_opened_and_warned_about(window, tmp_path):
    path = tmp_path / "npc.json"
    from runtime.asset.file import save_asset

    save_asset(two_step_asset(), path)
    assert json.loads(path.read_text())["nodes"][0]["bypassed"] is True
    assert "bypassed" not in json.loads(path.read_text())["nodes"][1], "written only when true"
    assert window.open_path(str(path))
    view = window.canvas.canvas_node("draft").view
    assert view.name == "Draft" + BYPASS_SUFFIX and tuple(view.color[:3]) == BYPASSED_FILL
    warnings = [p for p in window.problems_dock.problems if p.node_id == "draft" and p.field == "bypassed"]
    assert warnings and warnings[0].severity == "warning" and "bypassed" in warnings[0].message
    assert window.canvas.problem_severity("draft") == "warning"


def test_editing_a_bypassed_title_on_the_canvas_keeps_the_suffix_out(window):
    window.set_asset(two_step_asset())
    view = window.canvas.canvas_node("draft").view
    window.canvas.viewer.node_name_changed.emit(view.id, "First draft" + BYPASS_SUFFIX)
    assert window.document.node("draft").title == "First draft"
    assert view.name == "First draft" + BYPASS_SUFFIX


def test_the_inspector_says_bypassed_on_a_scripted_turn(window, qtbot):
    window.set_asset(two_step_asset())
    conversation = window.conversation
    conversation.worker._make_backend = lambda: ScriptedBackend(lambda key, request: f"from {key}")
    record = talk(qtbot, conversation, "hello", timeout=20_000)
    assert record.diagnostics.path == ["draft", "reply"]
    draft = record.diagnostics.nodes[0]
    assert draft.bypassed and draft.output == ""
    inspector = window.dock(TurnInspectorDock)
    labels = inspector.node_labels()
    assert labels == ["draft  (bypassed)", "reply  (GenerateAndSpeak)"], labels
    inspector.show_node("draft")
    assert "Bypassed" in inspector.stats.text() and "along its next exit" in inspector.stats.text()


@pytest.mark.model
def test_a_bypassed_node_on_the_sample_model(window, qtbot):
    """The chat example with a bypassed node in front of Mira's reply: one real turn passes it by, the
    reply comes from Mira, and the Turn Inspector says the first node was bypassed."""
    chat = example("chat", sample_model(), reply={"max_tokens": 24})
    draft = palette_node("Generate", "draft", position=(-320.0, 0.0)).model_copy(
        update={"default_exit": "reply", "bypassed": True, "system_prompt": "Never used."})
    window.workspace.switch("Talk")
    window.set_asset(chat.model_copy(update={"start_node": "draft", "nodes": [draft, *chat.nodes]}))
    record = talk(qtbot, window.conversation, "Good evening! Is there a room free?")
    diag = record.diagnostics
    assert diag.path == ["draft", "reply"] and diag.reply.strip()
    assert diag.nodes[0].bypassed and diag.nodes[0].tokens.generated == 0 and not diag.nodes[0].input.prompt
    assert not diag.nodes[1].bypassed and diag.nodes[1].tokens.generated > 0
    inspector = window.dock(TurnInspectorDock)
    assert inspector.node_labels()[0] == "draft  (bypassed)"
    inspector.show_node("draft")
    assert "Bypassed" in inspector.stats.text()
