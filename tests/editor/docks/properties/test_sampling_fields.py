"""Issue 23, frictions 9 and 10 in the Properties dock: Context Size 0 says which size it stands for,
min-p and the repeat penalty have editors that edit the node, and a node added on the canvas
starts with the shorter defaults."""

from __future__ import annotations

import pytest

from editor.docks.properties.dock import PropertiesDock
from editor.docks.properties.field_editors import FloatEditor
from editor.model.document import Document
from runtime.asset.model import Asset, new_node
from tests.runtime.tiny_gguf import write_tiny_gguf


def _dock(qtbot, tmp_path, model: str = "", **fields) -> PropertiesDock:
    if model:
        write_tiny_gguf(tmp_path / model, context_length=8192)
    node = new_node("Generate", "reply", **fields)
    doc = Document(Asset(nodes=[node], start_node="reply", default_model=model), path=str(tmp_path / "npc.json"))
    dock = PropertiesDock(doc)
    qtbot.addWidget(dock)
    dock.resize(420, 900)
    dock.show()
    dock.show_selection(["reply"])
    return dock


def test_context_size_0_names_the_models_trained_size(qtbot, tmp_path):
    dock = _dock(qtbot, tmp_path, "npc.gguf", context_size=0)
    spin = dock.form.editors["context_size"].spin
    assert spin.text() == "0 = the model's own (8,192)"
    dock.grab().save("/tmp/r_properties_context_zero.png")


def test_without_a_readable_model_0_still_says_what_it_means(qtbot, tmp_path):
    dock = _dock(qtbot, tmp_path, context_size=0)
    assert dock.form.editors["context_size"].spin.text() == "0 = the model's own"


def test_another_context_size_shows_as_a_number(qtbot, tmp_path):
    dock = _dock(qtbot, tmp_path, "npc.gguf", context_size=2048)
    assert dock.form.editors["context_size"].spin.text() == "2048"


@pytest.mark.parametrize(("field", "value"), [("min_p", 0.1), ("repeat_penalty", 1.25)])
def test_min_p_and_repeat_penalty_edit_the_node(qtbot, tmp_path, field, value):
    dock = _dock(qtbot, tmp_path)
    editor = dock.form.editors[field]
    assert isinstance(editor, FloatEditor)
    editor.spin.setValue(value)
    assert getattr(dock.document.node("reply"), field) == value
    dock.document.undo_stack.undo()
    assert getattr(dock.document.node("reply"), field) == {"min_p": 0.05, "repeat_penalty": 1.0}[field]


@pytest.mark.parametrize("type_name", ["Generate", "GenerateAndSpeak"])
def test_a_node_added_on_the_canvas_starts_short_with_a_bounded_context(window, type_name):
    node = window.document.node(window.canvas.add_node(type_name, (0, 0)))
    assert (node.max_tokens, node.context_size, node.repeat_penalty) == (128, 2048, 1.1)
