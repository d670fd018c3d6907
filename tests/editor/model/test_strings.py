"""File > Export Strings… and Import Strings…: the table written from the open asset, its translation put
back as one undo step, and a bad table refused with the rows named and the asset unchanged."""

from __future__ import annotations

import csv
import io

from PySide6.QtWidgets import QFileDialog, QMessageBox

from editor.model.strings import translation_command
from runtime.asset.file import dumps_asset, load_asset
from runtime.asset.model import Asset, Comment, new_node
from runtime.asset.strings import parse_string_table, string_table, translate
from runtime.resources import examples_dir


def npc() -> Asset:
    return Asset(name="Mira", start_node="classify", nodes=[
        new_node("ClassifyIntent", "classify", intents=[
            {"name": "buy", "description": "wants to buy something", "exit": "reply"}], fallback_exit="reply"),
        new_node("GenerateAndSpeak", "reply", system_prompt="You are Mira.", position=(300.0, 0.0)),
    ], comments=[Comment(id="note_1", kind="note", text="Mira is shy.")])


def fill(path, translations: dict[str, str]) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline="")))
    for row in rows[1:]:
        row[2] = translations.get(row[0], "")
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8-sig")


def test_the_menu_actions_export_then_import_as_one_undo_step(window, tmp_path, monkeypatch):
    window.set_asset(npc())
    doc = window.document
    actions = window.strings_actions
    file_menu = window.menuBar().actions()[0].menu()
    assert {actions.export_action, actions.import_action} <= set(file_menu.actions())
    assert actions.export_action.text() == "E&xport Strings\u2026" and actions.import_action.statusTip()
    table = tmp_path / "mira.strings.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "mira.strings"), ""))
    actions.export_action.trigger()
    assert table.read_text(encoding="utf-8-sig").startswith("id,source,translation,context")
    assert "Exported 4 texts" in window.statusBar().currentMessage()

    fill(table, {"reply.system_prompt": "Du bist Mira.", "classify.intents.buy.description": "will etwas kaufen",
                 "comments.note_1.text": "Mira ist schüchtern."})
    before = dumps_asset(doc.asset)
    steps = doc.undo_stack.count()
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(table), ""))
    actions.import_action.trigger()
    assert doc.node("reply").system_prompt == "Du bist Mira."
    assert doc.node("classify").intents[0].description == "will etwas kaufen"
    assert doc.comment("note_1").text == "Mira ist schüchtern."
    assert doc.undo_stack.count() == steps + 1 and doc.modified
    assert "Imported 3 translations" in window.statusBar().currentMessage()
    assert doc.undo_stack.undoText() == "Import strings from mira.strings.csv"
    window.undo_action.trigger()
    assert dumps_asset(doc.asset) == before
    window.redo_action.trigger()
    assert doc.node("reply").system_prompt == "Du bist Mira."


def test_a_bad_table_is_refused_naming_its_rows_and_changes_nothing(window, tmp_path):
    window.set_asset(npc())
    doc = window.document
    table = tmp_path / "bad.csv"
    table.write_text("id,source,translation\r\nreply.system_prompt,You are Mira.,Du bist Mira.\r\n"
                     "reply.sytem_prompt,x,y\r\nreply.system_prompt,You are Mira.,Nochmal\r\n", encoding="utf-8")
    before, steps = dumps_asset(doc.asset), doc.undo_stack.count()
    assert not window.strings_actions.import_from(str(table))
    said = window.strings_actions.last_refusal
    assert "the agent is unchanged" in said
    assert f"{table}:row 3, column A (id): error: no text of the asset has the id 'reply.sytem_prompt'" in said
    assert f"{table}:row 4, column A (id): error: the id 'reply.system_prompt' is also in row 2" in said
    assert dumps_asset(doc.asset) == before and doc.undo_stack.count() == steps
    box = window.findChild(QMessageBox, "strings_refused")
    assert box is not None and box.text() == said
    box.close()


def test_an_unchanged_table_pushes_no_edit(window, tmp_path):
    window.set_asset(load_asset(examples_dir() / "intent_router.json"))
    doc = window.document
    steps = doc.undo_stack.count()
    table = tmp_path / "router.csv"
    assert window.strings_actions.export_to(str(table))
    assert window.strings_actions.import_from(str(table))
    assert doc.undo_stack.count() == steps and not doc.modified


def test_the_agent_language_is_set_in_the_same_step(window):
    window.set_asset(npc())
    doc = window.document
    rows = parse_string_table(string_table(doc.asset).encode())
    command = translation_command(doc, translate(doc.asset, rows, language="de").asset)
    assert command is not None and len(command.parts) == 1
    doc.push(command)
    assert doc.asset.language == "de"
    window.undo_action.trigger()
    assert doc.asset.language == ""


def test_the_agent_properties_form_sets_the_language(window):
    window.set_asset(npc())
    doc, dock = window.document, window.properties
    dock.show_selection([])
    editor = dock.form.editors["language"]
    assert "BCP 47" in editor.toolTip()
    editor.line.setText("en_US")
    editor.line.editingFinished.emit()
    assert "(write 'en-US')" in editor.error and doc.asset.language == ""
    editor.line.setText("de")
    editor.line.editingFinished.emit()
    assert doc.asset.language == "de" and '"language": "de"' in dumps_asset(doc.asset)
    window.undo_action.trigger()
    assert doc.asset.language == ""
