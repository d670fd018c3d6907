"""Edit > Find in Project (Ctrl+Shift+F): the open asset (notes and backdrops too), the behaviours its
Subgraph nodes run and every other asset in its folder; a result names its file and node, and opens it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from editor.window.main_window import MainWindow


def speak(node_id: str, prompt: str, exit_to: str = "", x: float = 0.0) -> dict:
    return {"id": node_id, "type": "GenerateAndSpeak", "system_prompt": prompt, "default_exit": exit_to,
            "max_tokens": 8, "position": [x, 0]}


THREATS = {
    "version": 1, "name": "Guard threats", "default_model": "m.gguf", "start_node": "warn",
    "nodes": [speak("warn", "Point at the drawbridge and warn them.", "refuse"),
              {"id": "refuse", "type": "Exit", "position": [300, 0]}],
}
GUARD = {
    "version": 1, "name": "Gate guard", "default_model": "m.gguf", "start_node": "guard",
    "nodes": [{"id": "guard", "type": "Subgraph", "behaviour": "behaviours/threats.json",
               "exits": {"refuse": "stern"}, "position": [0, 0]},
              speak("stern", "Be stern.", "", 400)],
    "comments": [{"id": "moat_note", "kind": "note", "title": "Ideas", "text": "Mention the moat at night.",
                  "position": [0, 300], "size": [200, 120]}],
}
MERCHANT = {
    "version": 1, "name": "Merchant", "default_model": "m.gguf", "start_node": "haggle",
    "nodes": [speak("haggle", "Ask for the drawbridge toll before trading.")],
    "comments": [{"id": "prices", "kind": "backdrop", "title": "Prices near the moat", "position": [0, 0],
                  "size": [400, 240]}],
}


def write(path: Path, raw: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    write(tmp_path / "shop" / "merchant.json", MERCHANT)
    write(tmp_path / "backends.json", {"profiles": []})  # JSON that is no asset: left out
    write(tmp_path / "a" / "b" / "c" / "d" / "too_deep.json", MERCHANT)  # below the folders searched
    return write(tmp_path / "guard.json", GUARD)


@pytest.fixture
def window(make_window, project: Path) -> MainWindow:
    window = make_window()
    assert window.open_path(str(project))
    return window


def close_others(keep: MainWindow) -> None:
    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, MainWindow) and widget is not keep and widget.isVisible():
            widget.document.undo_stack.setClean()
            widget.close()


def open_find(qtbot, window: MainWindow, text: str):
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=3000)
    window.canvas.viewer.setFocus()
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_F,
                   Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    finder = window.edit_menu.project_find
    assert finder is not None, "Ctrl+Shift+F opened nothing"
    qtbot.waitUntil(finder.isVisible, timeout=3000)
    qtbot.keyClicks(finder.line, text)
    return finder


def test_find_in_project_is_in_the_edit_menu_after_find_node(window: MainWindow):
    edit = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Edit")
    texts = [a.text() for a in edit.actions()]
    assert texts[texts.index("&Find Node\u2026") + 1] == "Find in Pro&ject\u2026"


def test_a_word_is_found_in_the_behaviour_and_in_another_asset_naming_file_and_node(qtbot, window: MainWindow):
    finder = open_find(qtbot, window, "drawbridge")
    assert finder.matches() == ["behaviours/threats.json \u203a warn", "shop/merchant.json \u203a haggle"]
    first = finder.list.item(0).text()
    assert "system_prompt: Point at the drawbridge" in first
    finder.grab().save("/tmp/n/find_in_project.png")
    finder.hide()


def test_notes_and_backdrops_are_found_here_and_in_the_folder(qtbot, window: MainWindow):
    finder = open_find(qtbot, window, "moat")
    assert finder.matches() == ['this asset \u203a note "Ideas"', 'shop/merchant.json \u203a backdrop "Prices near the moat"']
    finder.hide()


def test_the_open_asset_is_searched_as_edited_not_as_saved(qtbot, window: MainWindow):
    window.document.set_node_field("stern", "system_prompt", "Guard the portcullis.")
    finder = open_find(qtbot, window, "portcullis")
    assert finder.matches() == ["this asset \u203a stern"]
    finder.hide()


def test_nothing_found_says_what_was_searched(qtbot, window: MainWindow):
    finder = open_find(qtbot, window, "zzz-nowhere")
    assert finder.matches() == []
    assert finder.nothing.isVisibleTo(finder)
    assert finder.nothing.text() == "Nothing in this asset, 1 behaviour and 1 other asset says that."
    finder.hide()


def test_a_note_here_is_selected_and_a_node_elsewhere_opens_its_file(qtbot, window: MainWindow, project: Path):
    finder = open_find(qtbot, window, "moat")
    qtbot.keyClick(finder.line, Qt.Key.Key_Return)
    assert not finder.isVisible()
    assert window.canvas.comments.selected_ids() == ["moat_note"]
    try:
        finder = open_find(qtbot, window, "drawbridge")
        finder.list.setCurrentRow(1)
        qtbot.keyClick(finder.line, Qt.Key.Key_Return)
        other = next(w for w in QApplication.topLevelWidgets()
                     if isinstance(w, MainWindow) and w.document.path.endswith("merchant.json"))
        assert Path(other.document.path) == (project.parent / "shop" / "merchant.json").resolve()
        assert other.canvas.selected_ids() == ["haggle"]
        # Found again: the window that has it open is used, not a second one
        finder = open_find(qtbot, window, "drawbridge")
        finder.list.setCurrentRow(1)
        qtbot.keyClick(finder.line, Qt.Key.Key_Return)
        opened = [w for w in QApplication.topLevelWidgets()
                  if isinstance(w, MainWindow) and w.isVisible() and w.document.path.endswith("merchant.json")]
        assert opened == [other]
    finally:
        close_others(window)


def test_an_untitled_asset_searches_itself_only(qtbot, make_window):
    window = make_window()
    window.canvas.add_node("Generate", (0, 0))
    finder = open_find(qtbot, window, "generate")
    assert finder.matches() and all(m.startswith("this asset \u203a ") for m in finder.matches())
    finder.hide()
