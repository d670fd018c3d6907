"""The Undo History dock: long entries wrap to the dock (never cut off) with their text as a tooltip,
and the undone steps are greyed until they are redone or dropped."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QStyleOptionViewItem

from editor.docks.undo_history.dock import UNDONE_COLOUR, UndoHistoryDock
from editor.model.commands import SetNodeFieldCommand
from runtime.asset.model import Asset, new_node

LONG = "innkeeper_answers_the_traveller_who_came_in_from_the_coast_road"  # a node id: entries name it


def _history(window) -> UndoHistoryDock:
    window.set_asset(Asset(nodes=[new_node("Generate", LONG)], start_node=LONG))
    dock = window.dock(UndoHistoryDock)
    dock.show()
    dock.raise_()
    doc = window.document
    for title in ("Short", "Shorter"):
        doc.push(SetNodeFieldCommand(doc, LONG, "title", doc.node(LONG).title, title))
    return dock


def _text_colour(dock: UndoHistoryDock, row: int):
    option = QStyleOptionViewItem()
    dock.delegate.initStyleOption(option, dock.view.model().index(row, 0))
    return option.palette.color(option.palette.ColorRole.Text), option.font.italic()


def test_a_long_entry_wraps_to_the_docks_width(window, qtbot):
    dock = _history(window)
    qtbot.waitUntil(dock.view.isVisible, timeout=3000)
    model = dock.view.model()
    long_row = model.rowCount() - 1
    text = model.index(long_row, 0).data()
    assert LONG in text
    short = dock.view.visualRect(model.index(0, 0))  # "Opened"
    long = dock.view.visualRect(model.index(long_row, 0))
    assert long.height() >= 2 * short.height(), "the long entry is one cut-off line"
    assert long.width() <= dock.view.viewport().width()
    assert dock.view.textElideMode() == Qt.TextElideMode.ElideRight, "what does not fit says so (…)"
    dock.grab().save("/tmp/n/undo_history.png")


def test_undone_steps_are_greyed_until_redone(window, qtbot):
    dock = _history(window)
    last = dock.view.model().rowCount() - 1
    assert _text_colour(dock, last)[0] != UNDONE_COLOUR
    window.document.undo_stack.undo()
    assert _text_colour(dock, last) == (UNDONE_COLOUR, True), "an undone step looks like a done one"
    assert _text_colour(dock, last - 1)[0] != UNDONE_COLOUR
    dock.grab().save("/tmp/n/undo_history_undone.png")
    window.document.undo_stack.redo()
    assert _text_colour(dock, last)[0] != UNDONE_COLOUR
