"""The first screens: File > New is one reply node (no error), an empty asset is a normal state (a hint
on the canvas, no error), and the Help menu has About, the documentation, the start page and a shortcut
list read from the window's own actions. The start page itself: tests/editor/test_start_page.py."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QKeySequence

from editor.window.help_menu import ShortcutsDialog, doc_files, docs_dir, show_shortcuts


def menu_texts(menu) -> list[str]:
    return [a.text().replace("&", "") for a in menu.actions() if not a.isSeparator()]


def test_file_new_is_one_reply_node_not_an_error(window, qtbot):
    window.canvas.add_node("Generate")
    window.document.undo_stack.setClean()
    window.new_action.trigger()
    assert [(n.id, n.type) for n in window.document.asset.nodes] == [("reply", "GenerateAndSpeak")]
    assert window.document.asset.start_node == "reply"
    errors = [p.message for p in window.problems_dock.problems if p.severity == "error"]
    assert errors == [], "a new agent is never an error"
    assert "1 node" in window.status.text() and "0 errors" in window.status.text()
    assert not window.canvas.empty_hint.isVisible()


def test_an_empty_asset_shows_a_hint_not_an_error(window, qtbot):
    """What a new window holds behind its start page (and any asset whose nodes are all deleted)."""
    assert window.document.asset.nodes == []
    assert [p.message for p in window.problems_dock.problems] == [], "an empty asset is not an error"
    assert window.problems_dock.windowTitle() == "Problems"
    assert "0 errors" in window.status.text()
    hint = window.canvas.empty_hint
    qtbot.waitUntil(hint.isVisible, timeout=3000)
    assert "Tab" in hint.text() and "Palette" in hint.text()
    window.canvas.widget.grab().save("/tmp/n/new_asset.png")
    window.canvas.add_node("Generate")
    assert not hint.isVisible(), "the hint goes once there is a node"
    window.document.undo_stack.undo()
    assert hint.isVisible()


def test_help_menu_has_about_docs_and_shortcuts(window):
    titles = [a.text().replace("&", "") for a in window.menuBar().actions()]
    assert titles[-1] == "Help"
    assert menu_texts(window.help_menu) == ["Keyboard Shortcuts\u2026", "Start Page", "Documentation",
                                            "About Parley Studio"]
    docs = next(a.menu() for a in window.help_menu.actions() if a.menu() is not None)
    pages = {a.data() for a in docs.actions()}
    assert pages == {str(p) for _, p in doc_files()}
    assert str(docs_dir() / "node-types.md") in pages and str(docs_dir() / "sizing.md") in pages


def test_the_shortcut_list_is_read_from_the_actions(window, qtbot):
    dialog = show_shortcuts(window)
    assert isinstance(dialog, ShortcutsDialog)
    listed = dialog.listed()
    every = {id(a): a for a in [*window.actions(), *window.findChildren(QAction)]}
    every.update({id(a): a for a in window.canvas.viewer.actions()})
    assert sum(bool(a.shortcuts()) for a in every.values()) >= 20
    for action in every.values():
        if action.shortcuts() and action.text():
            name = action.text().replace("&", "").rstrip("\u2026")
            keys = ", ".join(s.toString(QKeySequence.SequenceFormat.NativeText) for s in action.shortcuts()
                             if s[0].key().value < Qt.Key.Key_Back.value)  # not media keys (Open, Save)
            assert listed.get(name) == keys, f"{name} ({keys}) is not listed"
    assert listed["Undo"] and listed["Find Node"] and listed["Add Node by Name"] == "Tab"
    dialog.grab().save("/tmp/n/shortcuts.png")
    dialog.close()
    # a new action is listed without anyone writing it down
    extra = QAction("Frobnicate", window)
    extra.setShortcut(QKeySequence("Ctrl+Alt+F"))
    window.help_menu.addAction(extra)
    # and one another object owns, given to the window (as a feature's install call may do)
    owner = QObject()
    lent = QAction("Frobnicate Twice", owner)
    lent.setShortcut(QKeySequence("Ctrl+Alt+G"))
    window.addAction(lent)
    again = show_shortcuts(window)
    native = QKeySequence.SequenceFormat.NativeText
    assert again.listed()["Frobnicate"] == QKeySequence("Ctrl+Alt+F").toString(native)
    assert again.listed()["Frobnicate Twice"] == QKeySequence("Ctrl+Alt+G").toString(native)
    again.close()


def test_the_shortcut_list_filters_as_you_type(window):
    dialog = show_shortcuts(window)
    rows = [dialog.tree.topLevelItem(i) for i in range(dialog.tree.topLevelItemCount())]
    dialog.filter.setText("undo")
    shown = [r.text(0).strip() for r in rows if not r.isHidden()]
    assert "Undo" in shown and "Find Node" not in shown
    assert "Edit" in shown, "a shown row's menu heading shows"
    assert all(r.isHidden() for r in rows if r.text(0).strip() == "View"), "a menu with no match hides"
    dialog.filter.setText("")
    assert not any(r.isHidden() for r in rows)
    assert dialog.listed()["Undo"], "listed() is every row, filtered or not"
    dialog.close()


def test_about_names_the_editor(window):
    box = window.help_actions["about"]
    box.trigger()
    from PySide6.QtWidgets import QMessageBox
    shown = [b for b in window.findChildren(QMessageBox) if b.objectName() == "about"]
    assert shown and "Parley Studio" in shown[0].text()
    shown[0].close()


def test_the_hint_stays_centred_on_the_canvas(window, qtbot):
    hint = window.canvas.empty_hint
    qtbot.waitUntil(hint.isVisible, timeout=3000)

    def centred() -> bool:
        canvas = window.canvas.viewer.viewport().geometry()  # where the hint's parent (the view) shows the canvas
        return abs(hint.geometry().center().x() - canvas.center().x()) <= 2 and canvas.contains(hint.geometry())

    for width in (1366, 900):
        window.resize(width, 768)
        qtbot.waitUntil(centred, timeout=3000)
        window.canvas.frame_for_reading()  # panning the view leaves the hint where it is
        assert centred()
