"""The Properties dock: a typed editor for every field, constraints, and edits as commands."""

from __future__ import annotations

import typing

import pytest

from editor.canvas.node_types import view_of
from editor.docks.properties.dock import PropertiesDock
from editor.docks.properties.field_editors import (
    BoolEditor,
    ChoiceEditor,
    FloatEditor,
    IntEditor,
    JsonEditor,
    LineEditor,
    TextEditor,
)
from editor.docks.properties.list_editor import ModelListEditor
from editor.docks.properties.mustache import MustacheHighlighter, mustache_tags
from editor.model.document import Document
from runtime.asset.model import NODE_TYPES, Asset, new_node


@pytest.fixture
def dock(qtbot):
    nodes = [new_node(t, t.lower()) for t in NODE_TYPES]
    doc = Document(Asset(nodes=nodes, start_node="generate"))
    dock = PropertiesDock(doc)
    qtbot.addWidget(dock)
    dock.resize(420, 900)
    dock.show()
    return dock


@pytest.mark.parametrize("type_name", list(NODE_TYPES))
def test_every_field_has_a_typed_editor_with_help(dock, type_name):
    dock.show_selection([type_name.lower()])
    form = dock.form
    model = NODE_TYPES[type_name].model
    hidden = set(view_of(type_name).hidden_fields)  # edited elsewhere (a Subgraph's exits: on the canvas)
    assert set(form.editors) == set(model.model_fields) - {"type"} - hidden
    for name, info in model.model_fields.items():
        if name == "type" or name in hidden:
            continue
        editor = form.editors[name]
        if info.description:
            assert info.description in editor.toolTip()
        annotation = info.annotation
        if typing.get_origin(annotation) is typing.Literal:
            assert isinstance(editor, ChoiceEditor)
            assert [editor.combo.itemData(i) for i in range(editor.combo.count())] == list(typing.get_args(annotation))
        elif name.endswith("exit"):
            assert isinstance(editor, ChoiceEditor)
        elif annotation is int:
            assert isinstance(editor, IntEditor)
            ge = next((m.ge for m in info.metadata if getattr(m, "ge", None) is not None), None)
            if ge is not None:
                assert editor.spin.minimum() == ge
        elif annotation is float:
            assert isinstance(editor, FloatEditor)
        elif annotation is bool:
            assert isinstance(editor, BoolEditor)
        elif annotation is str:
            extra = info.json_schema_extra or {}
            assert isinstance(editor, TextEditor if extra.get("multiline") else LineEditor)
            if extra.get("mustache"):
                assert isinstance(editor.highlighter, MustacheHighlighter)
    node = dock.document.node(type_name.lower())
    for name, editor in form.editors.items():
        if isinstance(editor, (IntEditor, LineEditor, ChoiceEditor, BoolEditor)):
            assert editor.value() == getattr(node, name), name


def test_defaults_and_ranges_in_tooltips(dock):
    dock.show_selection(["generate"])
    tip = dock.form.editors["temperature"].toolTip()
    assert "Default: 0.7" in tip and "at most 2.0" in tip
    spin = dock.form.editors["temperature"].spin
    assert (spin.minimum(), spin.maximum()) == (0.0, 2.0)


def test_max_tokens_stays_below_context_size(dock):
    doc = dock.document
    dock.show_selection(["generate"])
    form = dock.form
    form.editors["context_size"].spin.setValue(512)
    assert form.editors["max_tokens"].spin.maximum() == 511
    form.editors["max_tokens"].spin.setValue(5000)
    assert doc.node("generate").max_tokens == 511
    dock.show_selection(["summarize"])
    assert dock.form.editors["max_summary_tokens"].spin.maximum() == 2048 - 64


def test_agent_settings_when_nothing_is_selected(dock):
    doc = dock.document
    dock.show_selection([])
    form = dock.form
    assert "start_node" in form.editors and "nodes" not in form.editors
    start = form.editors["start_node"]
    assert start.combo.count() == len(doc.asset.nodes) + 1
    start.combo.setCurrentIndex(start.combo.findData("retrieve"))
    start.combo.activated.emit(start.combo.currentIndex())
    assert doc.asset.start_node == "retrieve"
    doc.undo_stack.undo()
    assert start.value() == "generate", "undo shows in the form"
    variables = form.editors["variables"]
    variables.text.setPlainText('{"mood": "grumpy", "gold": 3}')
    assert doc.asset.variables == {"mood": "grumpy", "gold": 3}
    variables.text.setPlainText('{"mood": ')
    assert "JSON: line 1" in variables.error
    assert doc.asset.variables == {"mood": "grumpy", "gold": 3}
    variables.text.setPlainText('{"bad name": 1}')
    assert "identifiers" in variables.error and doc.asset.variables == {"mood": "grumpy", "gold": 3}


def test_tool_editor_with_schema_and_mock_result(dock):
    doc = dock.document
    dock.show_selection(["toolcall"])
    tools = dock.form.editors["tools"]
    assert isinstance(tools, ModelListEditor)
    tools.add_button.click()
    tool_form = tools.form
    tool_form.editors["name"].line.setText("open_gate")
    tool_form.editors["name"].line.editingFinished.emit()
    params = tool_form.editors["parameters"]
    assert isinstance(params, JsonEditor)
    params.text.setPlainText('{"type": "object", "properties": {"why": {"type": "string"}}}')
    mock = tool_form.editors["mock_result"]
    assert mock.value() is None
    mock.check.setChecked(False)
    mock.text.setPlainText("The gate opens.")
    tool = doc.node("toolcall").tools[0]
    assert tool.name == "open_gate"
    assert tool.parameters["properties"]["why"] == {"type": "string"}
    assert tool.mock_result == "The gate opens."
    params.text.setPlainText('{"type": "array"}')
    assert "type 'object'" in tool_form.editors["parameters"].error or "object" in tools.error
    assert doc.node("toolcall").tools[0].parameters["type"] == "object"


def test_intents_and_attributes_editors(dock):
    doc = dock.document
    dock.show_selection(["classifyintent"])
    intents = dock.form.editors["intents"]
    intents.add_button.click()
    intents.add_button.click()
    exit_editor = intents.form.editors["exit"]
    assert isinstance(exit_editor, ChoiceEditor)
    exit_editor.combo.setCurrentIndex(exit_editor.combo.findData("generate"))
    exit_editor.combo.activated.emit(exit_editor.combo.currentIndex())
    assert [i.name for i in doc.node("classifyintent").intents] == ["intent_1", "intent_2"]
    assert doc.node("classifyintent").intents[1].exit == "generate"
    intents.up_button.click()
    assert [i.name for i in doc.node("classifyintent").intents] == ["intent_2", "intent_1"]
    dock.show_selection(["classifyattributes"])
    attributes = dock.form.editors["attributes"]
    attributes.add_button.click()
    attributes.form.editors["values"].text.setPlainText("friendly\nhostile\nneutral")
    assert doc.node("classifyattributes").attributes[0].values == ["friendly", "hostile", "neutral"]


def test_id_edit_renames(dock):
    doc = dock.document
    dock.show_selection(["retrieve"])
    editor = dock.form.editors["id"]
    editor.line.setText("lore")
    editor.line.editingFinished.emit()
    assert doc.has_node("lore") and dock.node_id == "lore"
    editor = dock.form.editors["id"]
    editor.line.setText("generate")
    editor.line.editingFinished.emit()
    assert "already has the id" in editor.error and doc.has_node("lore")


def test_mustache_tags():
    assert mustache_tags("Hi {{vars.name}} {{#knowledge}}{{text}}{{/knowledge}}") == [
        "vars.name", "#knowledge", "text", "/knowledge"]


def test_the_agent_chooses_what_parley_serve_does_with_a_line_said_over_a_reply(dock):
    doc = dock.document
    dock.show_selection([])
    policy = dock.form.editors["double_text"]
    assert isinstance(policy, ChoiceEditor) and "Serving" in dock.form.sections
    choices = [policy.combo.itemData(i) or policy.combo.itemText(i) for i in range(policy.combo.count())]
    assert choices == ["queue", "reject", "latest_wins", "interrupt"] and policy.value() == "queue"
    assert "409 busy" in policy.toolTip() or "409 busy" in policy.combo.toolTip()
    policy.combo.setCurrentIndex(choices.index("interrupt"))
    policy.combo.activated.emit(policy.combo.currentIndex())
    assert doc.asset.double_text == "interrupt"
    doc.undo_stack.undo()
    assert doc.asset.double_text == "queue" and policy.value() == "queue"
