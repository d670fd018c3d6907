"""A text too long for the Properties dock's editor (issue 14: selecting a node with a 50 MB
system prompt took 11 s and 2.2 GB) is shown as its start, read-only, with its size; the value is
kept whole, and the Edit Full Text dialog changes it as one undoable edit."""

from __future__ import annotations

import pytest

from editor.docks.properties import field_editors
from editor.docks.properties.dock import PropertiesDock
from editor.model.document import Document
from runtime.asset.file import load_asset, save_asset
from runtime.asset.model import Asset, new_node

LONG = "You are Mira, the innkeeper. " * 40  # 1,160 characters


@pytest.fixture
def dock(qtbot, monkeypatch):
    monkeypatch.setattr(field_editors, "LARGE_TEXT_CHARS", 500)
    monkeypatch.setattr(field_editors, "PREVIEW_CHARS", 50)
    doc = Document(Asset(start_node="reply", nodes=[
        new_node("GenerateAndSpeak", "reply", system_prompt=LONG), new_node("GenerateAndSpeak", "short", system_prompt="Hi.")]))
    dock = PropertiesDock(doc)
    qtbot.addWidget(dock)
    dock.show()
    dock.show_selection(["reply"])
    return dock


def test_a_long_text_shows_its_start_and_size_read_only(dock):
    editor = dock.form.editors["system_prompt"]
    assert editor.large and editor.value() == LONG, "the value is kept whole"
    assert editor.text.isReadOnly() and len(editor.text.toPlainText()) < 120
    assert editor.text.toPlainText().startswith(LONG[:50]) and "1,110 more characters" in editor.text.toPlainText()
    assert "1,160 characters" in editor.size_label.text() and editor.large_bar.isVisible()
    dock.show_selection(["short"])
    assert dock.form.editors["system_prompt"] is editor, "the same form shows the other node"
    assert not editor.large and not editor.text.isReadOnly() and editor.text.toPlainText() == "Hi."
    assert not editor.large_bar.isVisible()


def test_the_full_text_dialog_edits_it_as_one_undoable_step(dock, qtbot, tmp_path):
    doc = dock.document
    editor = dock.form.editors["system_prompt"]
    dialog = editor.open_full_text()
    assert dialog.value() == LONG and dialog.windowTitle() == "System Prompt"
    dialog.text.setPlainText(LONG + "Never lie.")
    dialog.accept()
    assert doc.node("reply").system_prompt == LONG + "Never lie." and doc.undo_stack.count() == 1
    assert editor.value() == LONG + "Never lie." and editor.text.isReadOnly()
    save_asset(doc.asset, tmp_path / "a.json")
    assert load_asset(tmp_path / "a.json").node("reply").system_prompt == LONG + "Never lie.", "nothing cut on save"
    doc.undo_stack.undo()
    assert doc.node("reply").system_prompt == LONG and editor.value() == LONG
    cancelled = editor.open_full_text()
    cancelled.text.setPlainText("short now")
    cancelled.reject()
    assert doc.node("reply").system_prompt == LONG and doc.undo_stack.count() == 1


def test_shortened_in_the_dialog_it_becomes_editable_in_the_dock(dock):
    doc = dock.document
    editor = dock.form.editors["system_prompt"]
    dialog = editor.open_full_text()
    dialog.text.setPlainText("Be brief.")
    dialog.accept()
    assert doc.node("reply").system_prompt == "Be brief."
    assert not editor.large and not editor.text.isReadOnly() and editor.text.toPlainText() == "Be brief."
    editor.text.setPlainText("Be brief!")
    assert doc.node("reply").system_prompt == "Be brief!"
