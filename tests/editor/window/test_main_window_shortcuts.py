"""Keyboard shortcuts: the platform's standard keys, each sequence owned by one action."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtTest import QTest

Key = QKeySequence.StandardKey


def window_actions(window) -> list[QAction]:
    """Every action whose shortcut can fire in the window: its own and the canvas's."""
    actions = {id(a): a for a in window.findChildren(QAction)}
    actions.update({id(a): a for a in window.canvas.viewer.actions()})
    return [a for a in actions.values() if a.shortcuts()]


def test_redo_answers_ctrl_shift_z_and_ctrl_y(window):
    doc = window.document
    window.canvas.add_node("Generate")
    window.canvas.viewer.setFocus()
    for chord in (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
                  Qt.KeyboardModifier.ControlModifier):
        key = Qt.Key.Key_Z if chord & Qt.KeyboardModifier.ShiftModifier else Qt.Key.Key_Y
        window.undo_action.trigger()
        assert doc.asset.nodes == []
        QTest.keyClick(window.canvas.viewer, key, chord)
        assert len(doc.asset.nodes) == 1, f"{QKeySequence(chord.value | key.value).toString()} did not redo"
    redo = window.redo_action.shortcuts()
    for sequence in QKeySequence.keyBindings(Key.Redo):
        assert sequence in redo, f"the platform's Redo key {sequence.toString()} is missing"


def test_standard_actions_use_the_platform_keys(window):
    expected = {
        window.new_action: Key.New, window.open_action: Key.Open, window.save_action: Key.Save,
        window.save_as_action: Key.SaveAs, window.close_action: Key.Close, window.quit_action: Key.Quit,
        window.undo_action: Key.Undo, window.redo_action: Key.Redo, window.cut_action: Key.Cut,
        window.copy_action: Key.Copy, window.paste_action: Key.Paste, window.delete_action: Key.Delete,
        window.select_all_action: Key.SelectAll,
    }
    for action, key in expected.items():
        have = action.shortcuts()
        assert have, f"{action.text()} has no shortcut"
        missing = [s.toString() for s in QKeySequence.keyBindings(key) if s not in have]
        assert not missing, f"{action.text()} lacks the platform's {missing}"
    assert QKeySequence("Ctrl+Q") in window.quit_action.shortcuts(), "Quit has a key even where the platform lists none"


def test_no_shortcut_is_ambiguous(window):
    owner: dict[str, str] = {}
    for action in window_actions(window):
        sequences = [s.toString() for s in action.shortcuts()]
        assert len(set(sequences)) == len(sequences), f"{action.text()} lists a key twice: {sequences}"
        for sequence in action.shortcuts():
            assert sequence.count() == 1, f"{action.text()} has a multi-chord shortcut {sequence.toString()}"
            text = sequence.toString()
            assert owner.setdefault(text, action.text()) == action.text(), (
                f"{text} belongs to both {owner[text]} and {action.text()}")
